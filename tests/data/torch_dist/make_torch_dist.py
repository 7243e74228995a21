#!/usr/bin/env python3
"""Write tiny Megatron-Core torch_dist checkpoints with the real code, then read them back.

Ours, not Megatron's: a driver that imports megatron.core from a checkout of
NVIDIA/Megatron-LM (commit d98e8a64ddf34856e74b24714e3bedb2f5a39553, on PYTHONPATH) and runs it
on the CPU in a gloo world of one rank. It builds a GPTModel with the local (non-Transformer-
Engine) layer spec, saves model.sharded_state_dict() through megatron.core.dist_checkpointing.save
the way megatron/training/checkpointing.py does for --ckpt-format torch_dist (same top-level keys,
same content_metadata, same TorchDistSaveShardedStrategy), and then:
  1. loads every tensor back with plain torch.distributed.checkpoint (no Megatron code) and checks
     the keys and values are the model's named parameters as docs/architecture.md says they are
     stored (layers stacked on a leading axis, the local spec's norm renames),
  2. loads the checkpoint with megatron.core.dist_checkpointing.load into a fresh model and checks
     the parameters are equal,
  3. writes metadata.txt: every key of the .metadata pickle, its type, global shape, dtype, chunks
     and where its bytes are in which .distcp file.
No optimizer, no training: the optimizer layout is documented from the source in
docs/architecture.md. Usage: make_torch_dist.py OUTDIR (writes OUTDIR/gpt and OUTDIR/llama);
with --bf16 (Megatron's --bf16: parameters in bfloat16, the local spec's norms stay float32)
only the Llama one, as OUTDIR/llama_bf16mix (OUTDIR/llama_tp2_bf16mix under torchrun).
"""
import io
import os
import pickle
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch.distributed.checkpoint.metadata import BytesStorageMetadata, TensorStorageMetadata

from megatron.core import dist_checkpointing, parallel_state
from megatron.core.dist_checkpointing.utils import _clean_metadata_for_serialization
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.transformer.transformer_config import TransformerConfig

ITERATION = 1
VOCAB, SEQ = 64, 8
DTYPE = torch.float32  # torch.bfloat16 under --bf16


def build(variant, seed):
    torch.manual_seed(seed)
    model = build_model(variant)
    # Every parameter redrawn from a seeded generator: norm weights of ones and biases of zeros
    # would let a reader that swaps two of them pass. TP-split parameters differ between the
    # ranks (so a chunk written at another rank's offset shows); replicated ones do not, within
    # a pipeline stage.
    shared = torch.Generator().manual_seed(
        seed + 104729 * parallel_state.get_pipeline_model_parallel_rank())
    own = torch.Generator().manual_seed(seed + 7919 * parallel_state.get_tensor_model_parallel_rank())
    with torch.no_grad():
        for p in model.parameters():
            g = own if getattr(p, 'tensor_model_parallel', False) else shared
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return model


def build_model(variant):
    tp = parallel_state.get_tensor_model_parallel_world_size()
    pp = parallel_state.get_pipeline_model_parallel_world_size()
    first = parallel_state.is_pipeline_first_stage()
    last = parallel_state.is_pipeline_last_stage()
    common = dict(num_layers=2, hidden_size=16, num_attention_heads=4,
                  use_cpu_initialization=True, params_dtype=DTYPE,
                  pipeline_dtype=DTYPE, bf16=DTYPE == torch.bfloat16,
                  tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp)
    if variant == 'gpt':
        config = TransformerConfig(**common)
        spec = get_gpt_layer_local_spec()
        # GPTModel's own default is untied; pretrain_gpt ties unless --untie-embeddings-and-...
        return GPTModel(config, spec, vocab_size=VOCAB, max_sequence_length=SEQ,
                        share_embeddings_and_output_weights=True,
                        pre_process=first, post_process=last)
    # Llama-3-like: GQA (2 query groups), SwiGLU, RMSNorm, RoPE, no biases, untied output.
    config = TransformerConfig(**common, num_query_groups=2, ffn_hidden_size=32,
                               gated_linear_unit=True, activation_func=F.silu,
                               normalization='RMSNorm', add_bias_linear=False,
                               add_qkv_bias=False)
    spec = get_gpt_layer_local_spec(normalization='RMSNorm')
    return GPTModel(config, spec, vocab_size=VOCAB, max_sequence_length=SEQ,
                    position_embedding_type='rope',
                    share_embeddings_and_output_weights=False,
                    pre_process=first, post_process=last)


def sd_metadata():
    # _build_sharded_state_dict_metadata (checkpointing.py) without --use-distributed-optimizer.
    return {'singleton_local_shards': False, 'chained_optim_avoid_prefix': True,
            'dp_cp_group': parallel_state.get_data_parallel_group(with_context_parallel=True)}


def save(model, ckpt_root, iteration=ITERATION, args=None):
    iter_dir = os.path.join(ckpt_root, f'iter_{iteration:07d}')
    os.makedirs(iter_dir, exist_ok=True)
    md = sd_metadata()
    # generate_state_dict's keys; 'args' (an argparse.Namespace) is left out: it is a pickled
    # object of Megatron's argument parser that the fixture could not reproduce honestly.
    state_dict = {'checkpoint_version': 3.0, 'iteration': iteration,
                  'model': model.sharded_state_dict(metadata=md),
                  'num_floating_point_operations_so_far': 0}
    if args is not None:  # make_golden.py's llama_args: Megatron's own Namespace
        state_dict['args'] = args
    dist_checkpointing.save(state_dict, iter_dir,
                            content_metadata=_clean_metadata_for_serialization(md))
    if dist.get_rank() == 0:
        with open(os.path.join(ckpt_root, 'latest_checkpointed_iteration.txt'), 'w') as f:
            f.write(str(iteration))
    return iter_dir


# The local spec's renames (gpt_layer_specs.py sharded_state_dict_keys_map): its norms are
# saved under the Transformer Engine spec's names, where the norm is fused into the linear.
RENAMES = (('input_layernorm.', 'self_attention.linear_qkv.layer_norm_'),
           ('pre_mlp_layernorm.', 'mlp.linear_fc1.layer_norm_'))


def tp_merge(name, shards, swiglu):
    """The whole tensor of a TP-split parameter from its TP shards, as the plan says the
    checkpoint holds it: row-parallel weights along axis 1, the rest along axis 0 (QKV: each rank
    holds whole query groups, in order), SwiGLU's fc1 as [gate of every rank | up of every rank]."""
    if name.endswith(('linear_proj.weight', 'linear_fc2.weight')):
        return torch.cat(shards, dim=1)
    if swiglu and '.linear_fc1.' in name:
        halves = [t.chunk(2, dim=0) for t in shards]
        return torch.cat([h[0] for h in halves] + [h[1] for h in halves], dim=0)
    return torch.cat(shards, dim=0)


def checkpoint_layout(model):
    """The model's parameters as the plan says the checkpoint holds them, from the named
    parameters of every TP rank alone (not Megatron's sharding description): decoder.layers.N.X
    is row N of the stacked decoder.layers.X, with the local spec's renames; TP shards joined
    by tp_merge; replicated parameters as TP rank 0 holds them; a pipeline stage's local layer i
    is global layer first + i, first = stage x layers per stage. Collective: every rank calls it."""
    local = {n: (p.detach(), getattr(p, 'tensor_model_parallel', False))
             for n, p in model.named_parameters()}
    me = (parallel_state.get_pipeline_model_parallel_rank(),
          parallel_state.get_tensor_model_parallel_rank())
    ranks = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, (me, local))
    stages = {}
    for (pp_rank, tp_rank), params in sorted(ranks, key=lambda r: r[0]):
        stages.setdefault(pp_rank, []).append(params)
    per_stage = model.config.num_layers // len(stages)
    out, layers = {}, {}
    for pp_rank, tp_ranks in stages.items():
        for name, (t, split) in tp_ranks[0].items():
            if split and len(tp_ranks) > 1:
                t = tp_merge(name, [r[name][0] for r in tp_ranks], model.config.gated_linear_unit)
            parts = name.split('.')
            if parts[:2] == ['decoder', 'layers']:
                rest = '.'.join(parts[3:])
                for old, new in RENAMES:
                    if rest.startswith(old):
                        rest = new + rest[len(old):]
                layer = pp_rank * per_stage + int(parts[2])
                layers.setdefault('decoder.layers.' + rest, {})[layer] = t
            else:
                out[name] = t
    for key, rows in layers.items():
        out[key] = torch.stack([rows[i] for i in range(len(rows))])
    return out


def check_plain_dcp(want, iter_dir):
    meta = dcp.FileSystemReader(iter_dir).read_metadata()
    got = {k: torch.empty(m.size, dtype=m.properties.dtype)
           for k, m in meta.state_dict_metadata.items() if isinstance(m, TensorStorageMetadata)}
    dcp.load(got, storage_reader=dcp.FileSystemReader(iter_dir), no_dist=True)
    assert sorted(got) == sorted(want), (sorted(got), sorted(want))
    for k in got:
        assert torch.equal(got[k], want[k]), k
    common = {'common_state/shard_0_1': io.BytesIO()}
    dcp.load(common, storage_reader=dcp.FileSystemReader(iter_dir), no_dist=True)
    state = common['common_state/shard_0_1']
    if isinstance(state, io.BytesIO):  # DefaultLoadPlanner.load_bytes torch.loads the item;
        state.seek(0)                  # a planner that keeps the bytes hands back the BytesIO
        state = torch.load(state, weights_only=True)
    assert state[0]['iteration'] == ITERATION and state[0]['checkpoint_version'] == 3.0, state
    return meta, got, state[0]


def check_megatron_load(variant, model, iter_dir):
    fresh = build(variant, seed=999)
    loaded = dist_checkpointing.load(
        {'model': fresh.sharded_state_dict(metadata=sd_metadata())}, iter_dir)
    fresh.load_state_dict(loaded['model'])
    a, b = model.state_dict(), fresh.state_dict()
    for k, v in a.items():
        if isinstance(v, torch.Tensor) and v.dtype.is_floating_point:
            assert torch.equal(v, b[k]), k


def dump(meta, tensors, common, iter_dir, path):
    with open(os.path.join(iter_dir, '.metadata'), 'rb') as f:
        meta = pickle.load(f)  # as written, before any reader touched it
    lines = [f'# .metadata of {os.path.basename(iter_dir)} ({type(meta).__module__}.'
             f'{type(meta).__name__}), torch {torch.__version__}',
             f'# files: {sorted(os.listdir(iter_dir))}',
             f'# storage_meta: {meta.storage_meta}',
             f'# planner_data keys: {sorted(meta.planner_data) if meta.planner_data else None}',
             '# key | kind | global shape | dtype | chunk offsets/sizes | file offset length']
    by_index = {}
    for idx, sinfo in meta.storage_data.items():
        by_index[(idx.fqn, tuple(idx.offset) if idx.offset is not None else None)] = sinfo
    for key in sorted(meta.state_dict_metadata):
        m = meta.state_dict_metadata[key]
        if isinstance(m, BytesStorageMetadata):
            s = by_index[(key, None)]
            lines.append(f'{key} | bytes | - | - | - | {s.relative_path} {s.offset} {s.length}')
            continue
        for c in m.chunks:
            s = by_index[(key, tuple(c.offsets))]
            lines.append(f'{key} | tensor | {tuple(m.size)} | {m.properties.dtype} | '
                         f'{tuple(c.offsets)}/{tuple(c.sizes)} | '
                         f'{s.relative_path} {s.offset} {s.length}')
    lines.append(f'# common_state: {common}')
    lines.append('# first values: ' + ', '.join(
        f'{k}={tensors[k].flatten()[0].item():.9g}' for k in sorted(tensors)))
    with open(path, 'w') as f:
        f.write('\n'.join(lines) + '\n')


def main():
    global DTYPE
    args = [a for a in sys.argv[1:] if a != '--bf16']
    if len(args) not in (1, 2):
        sys.exit('usage: [torchrun --nproc-per-node TP*PP] make_torch_dist.py OUTDIR [PP] [--bf16]')
    if '--bf16' in sys.argv:
        DTYPE = torch.bfloat16
    if not torch.cuda.is_available():
        # FileSystemWriterAsync.preload_tensors calls torch.cuda.synchronize() whatever the
        # device of the tensors, and save_state_dict_async_finalize all-reduces its failure flag
        # on torch.cuda.current_device(): on a machine without a GPU, nothing to wait for and
        # the flag lives on the CPU (gloo). Neither touches what is written.
        torch.cuda.synchronize = lambda *a, **k: None
        torch.cuda.current_device = lambda: 'cpu'
    os.environ.setdefault('MASTER_ADDR', '127.0.0.1')
    os.environ.setdefault('MASTER_PORT', '29571')
    # One rank, or torchrun's world of TP x PP ranks (DP 1).
    rank, world = int(os.environ.get('RANK', 0)), int(os.environ.get('WORLD_SIZE', 1))
    pp = int(args[1]) if len(args) == 2 else 1
    tp = world // pp
    dist.init_process_group('gloo', rank=rank, world_size=world)
    parallel_state.initialize_model_parallel(tp, pp)
    # With PP the tied GPT's last stage holds a copy of the embedding that Megatron keeps equal
    # through the embedding group; the untied Llama alone needs none of that.
    bf16 = DTYPE == torch.bfloat16
    for variant in ('gpt', 'llama') if pp == 1 and not bf16 else ('llama',):
        model = build(variant, seed=1234)
        name = (variant + (f'_tp{tp}' if tp > 1 else '') + (f'_pp{pp}' if pp > 1 else '')
                + ('_bf16mix' if bf16 else ''))
        root = os.path.join(args[0], name)
        iter_dir = save(model, root)
        want = checkpoint_layout(model)
        dist.barrier()
        if rank == 0:  # plain DCP needs no world: one process reads every rank's chunks
            meta, tensors, common = check_plain_dcp(want, iter_dir)
            dump(meta, tensors, common, iter_dir, os.path.join(root, 'metadata.txt'))
        check_megatron_load(variant, model, iter_dir)
        dist.barrier()
        if rank == 0:
            print(f'{os.path.basename(root)}: saved, read back with torch.distributed.checkpoint '
                  f'and megatron.core.dist_checkpointing: equal')
    dist.destroy_process_group()


if __name__ == '__main__':
    main()
