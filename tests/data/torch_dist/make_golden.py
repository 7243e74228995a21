#!/usr/bin/env python3
"""Megatron's own forward of every torch_dist fixture: the golden logits mds must reproduce.

Ours, not Megatron's: a sibling of make_torch_dist.py (same model definitions, same runtime
patches, same Megatron-LM source on PYTHONPATH). In a gloo world of one rank (TP 1, PP 1) it
builds each fixture's model, loads the fixture with megatron.core.dist_checkpointing.load (so the
TP 2, PP 2 and TP 2 x PP 2 fixtures are resharded by Megatron itself), runs GPTModel.forward on a
fixed batch of tokens with Megatron's causal mask and writes the logits as mdstrain's
--check-logits file (tests/data/README.md, "MDSLGT01"): int32 B, T, V, int32 tokens (B, T),
float32 logits (B, T, V). It prints the LM loss of the batch (next-token cross-entropy, mean over
the B (T - 1) predicted tokens) for the README.

It also writes llama_bf16/: the Llama fixture loaded as above, cast to bfloat16 (the parameters
Megatron keeps under --bf16) and saved by make_torch_dist.save (Megatron's save, as there), with
llama_bf16.logits from the same model cast back to float32: the logits of the bf16-rounded
weights, which are what a load into fp32 masters must reproduce.

And llama_args/: the Llama fixture saved again by make_torch_dist.save at iteration 3 with an
'args' entry in the common state, the argparse.Namespace of Megatron's own parse_args and
validate_args (megatron/training/arguments.py) for the Llama model's flags (ARGS below), with
consumed_train_samples 6 and consumed_valid_samples 4 set as training sets them; its logits are
llama.logits.

One departure from make_torch_dist.py's build: the GPT is built with bias_activation_fusion=True,
as pretrain_gpt builds it from Megatron's default --bias-gelu-fusion (fused bias-GELU, the tanh
form, which is mds's GELU); the weights do not depend on it. Usage: make_golden.py OUTDIR
(reads OUTDIR/<fixture>, writes OUTDIR/<fixture>.logits).
"""
import contextlib
import os
import struct
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

from megatron.core import dist_checkpointing, parallel_state, tensor_parallel
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.transformer.transformer_config import TransformerConfig

from make_torch_dist import save  # the sibling driver (this directory is on sys.path)

VOCAB, SEQ, B = 64, 8, 2
FIXTURES = ('gpt', 'llama', 'gpt_tp2', 'llama_tp2', 'llama_pp2', 'llama_tp2_pp2')


def build(variant):
    common = dict(num_layers=2, hidden_size=16, num_attention_heads=4,
                  use_cpu_initialization=True, params_dtype=torch.float32,
                  pipeline_dtype=torch.float32, tensor_model_parallel_size=1,
                  pipeline_model_parallel_size=1)
    if variant == 'gpt':
        config = TransformerConfig(**common, bias_activation_fusion=True)
        return GPTModel(config, get_gpt_layer_local_spec(), vocab_size=VOCAB, max_sequence_length=SEQ,
                        share_embeddings_and_output_weights=True)
    config = TransformerConfig(**common, num_query_groups=2, ffn_hidden_size=32,
                               gated_linear_unit=True, activation_func=F.silu,
                               normalization='RMSNorm', add_bias_linear=False,
                               add_qkv_bias=False)
    return GPTModel(config, get_gpt_layer_local_spec(normalization='RMSNorm'), vocab_size=VOCAB,
                    max_sequence_length=SEQ, position_embedding_type='rope',
                    share_embeddings_and_output_weights=False)


# pretrain_gpt's flags for the Llama fixture's model (a training run's, for llama_args/)
ARGS = ('--num-layers 2 --hidden-size 16 --num-attention-heads 4 --group-query-attention '
        '--num-query-groups 2 --ffn-hidden-size 32 --swiglu --normalization RMSNorm '
        '--position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear '
        '--seq-length 8 --max-position-embeddings 8 --micro-batch-size 1 --global-batch-size 2 '
        '--train-iters 3 --lr 1e-3 --tokenizer-type NullTokenizer --vocab-size 64 '
        '--make-vocab-size-divisible-by 1 --mock-data')


def megatron_args():
    """Megatron's Namespace for ARGS, as pretrain_gpt's initialize_megatron builds it."""
    import typing
    if not hasattr(typing, 'override'):  # Python 3.11: megatron.training imports typing.override
        typing.override = lambda f: f
    from megatron.training.arguments import parse_args, validate_args
    argv, sys.argv = sys.argv, ['pretrain_gpt.py'] + ARGS.split()
    try:
        args = parse_args()
        validate_args(args, {})
    finally:
        sys.argv = argv
    args.consumed_train_samples, args.consumed_valid_samples = 6, 4
    return args


def main():
    if len(sys.argv) != 2:
        sys.exit('usage: make_golden.py OUTDIR')
    if not torch.cuda.is_available():  # as make_torch_dist.py: nothing CUDA is touched otherwise
        torch.cuda.synchronize = lambda *a, **k: None
        torch.cuda.current_device = lambda: 'cpu'
        # the attention's dropout forks the CUDA RNG tracker; in eval mode dropout is the
        # identity, so no generator is drawn from
        tensor_parallel.get_cuda_rng_tracker().fork = lambda *a, **k: contextlib.nullcontext()
    os.environ.setdefault('MASTER_ADDR', '127.0.0.1')
    os.environ.setdefault('MASTER_PORT', '29573')
    dist.init_process_group('gloo', rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    tokens = torch.randint(0, VOCAB, (B, SEQ), generator=torch.Generator().manual_seed(4321))
    position_ids = torch.arange(SEQ).unsqueeze(0).expand(B, SEQ)
    mask = torch.triu(torch.ones(1, 1, SEQ, SEQ, dtype=torch.bool), diagonal=1)  # True: masked
    for name in FIXTURES + ('llama_bf16', 'llama_args'):
        variant = name.split('_')[0]
        torch.manual_seed(999)
        model = build(variant)
        md = {'singleton_local_shards': False, 'chained_optim_avoid_prefix': True,
              'dp_cp_group': parallel_state.get_data_parallel_group(with_context_parallel=True)}
        source = 'llama' if name.startswith('llama_') and name.split('_')[1] in ('bf16', 'args') else name
        iter_dir = os.path.join(sys.argv[1], source, 'iter_0000001')
        loaded = dist_checkpointing.load({'model': model.sharded_state_dict(metadata=md)}, iter_dir)
        model.load_state_dict(loaded['model'])
        if name == 'llama_bf16':
            model.to(torch.bfloat16)
            save(model, os.path.join(sys.argv[1], name))
            model.float()
        if name == 'llama_args':
            save(model, os.path.join(sys.argv[1], name), iteration=3, args=megatron_args())
            print(f'{name}: saved at iteration 3 with args')
            continue
        model.eval()
        with torch.no_grad():
            logits = model(tokens, position_ids, mask).float()   # (B, T, V)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        with open(os.path.join(sys.argv[1], name + '.logits'), 'wb') as f:
            f.write(b'MDSLGT01' + struct.pack('<3i', B, SEQ, VOCAB))
            f.write(tokens.to(torch.int32).numpy().tobytes())
            f.write(logits.contiguous().numpy().astype('<f4').tobytes())
        print(f'{name}: logits {tuple(logits.shape)}, lm loss {loss.item():.9g}')
    dist.destroy_process_group()


if __name__ == '__main__':
    main()
