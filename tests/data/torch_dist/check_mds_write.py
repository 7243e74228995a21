#!/usr/bin/env python3
"""Read a torch_dist checkpoint that mds wrote with the real readers (outside `make test`: needs torch).

Ours. DIR is what `build/tests/test_tdsave --write DIR` wrote through train/tdsave.h: the
items of llama_tp2_bf16mix (two ranks, bfloat16 weights beside float32 norms) with a common state that
also holds `args` (an argparse.Namespace) and `opt_param_scheduler`. Checks, stopping with an
AssertionError on the first that fails:
  1. plain torch.distributed.checkpoint (no Megatron code) loads every tensor of DIR, and each
     equals, dtype and bits, the same tensor loaded from the Megatron-written llama_tp2_bf16mix;
     the common state comes back through torch.load(weights_only=True) with Megatron's safe
     globals, with the args and scheduler values mds wrote;
  2. megatron.core.dist_checkpointing.load_common_state_dict and .load (TorchDist strategy) read
     DIR into a Llama model built at TP 1 (so the two ranks' chunks are joined by Megatron), and
     every parameter equals the plain reader's tensor; Megatron's OptimizerParamScheduler takes
     the scheduler state (load_state_dict checks each value against its own).
Usage (from the repository root, PYTHONPATH holding Megatron-LM at d98e8a64):
  build/tests/test_tdsave --write /tmp/mdsck && python check_mds_write.py /tmp/mdsck
"""
import io
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

import megatron.core  # noqa: F401  registers Megatron's safe globals (argparse.Namespace, ...)
from megatron.core import dist_checkpointing, parallel_state
from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_torch_dist as mtd  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def plain_load(iter_dir):
    meta = dcp.FileSystemReader(iter_dir).read_metadata()
    got = {k: torch.empty(m.size, dtype=m.properties.dtype)
           for k, m in meta.state_dict_metadata.items() if isinstance(m, TensorStorageMetadata)}
    dcp.load(got, storage_reader=dcp.FileSystemReader(iter_dir), no_dist=True)
    common = {'common_state/shard_0_1': io.BytesIO()}
    dcp.load(common, storage_reader=dcp.FileSystemReader(iter_dir), no_dist=True)
    state = common['common_state/shard_0_1']
    if isinstance(state, io.BytesIO):
        state.seek(0)
        state = torch.load(state, weights_only=True)
    return got, state[0]


def check_common(c):
    a = c['args']
    assert type(a).__name__ == 'Namespace', type(a)
    assert (a.num_layers, a.hidden_size, a.num_attention_heads, a.num_query_groups) == (2, 16, 4, 2), a
    assert (a.padded_vocab_size, a.tensor_model_parallel_size, a.consumed_train_samples) == (64, 2, 4), a
    assert a.params_dtype is torch.bfloat16 and a.add_position_embedding is False, a
    assert c['checkpoint_version'] == 3.0 and c['iteration'] == 1, c
    assert c['num_floating_point_operations_so_far'] == 1.5e9, c
    assert c['content_metadata'] == {'singleton_local_shards': False,
                                     'chained_optim_avoid_prefix': True}, c
    s = c['opt_param_scheduler']
    assert list(s) == ['max_lr', 'lr_warmup_steps', 'num_steps', 'lr_decay_style', 'lr_decay_steps',
                       'min_lr', 'start_wd', 'end_wd', 'wd_incr_style', 'wd_incr_steps'], s
    return s


def main():
    if len(sys.argv) != 2:
        sys.exit('usage: check_mds_write.py DIR   (DIR from build/tests/test_tdsave --write DIR)')
    iter_dir = os.path.join(sys.argv[1], 'iter_0000001')
    want_dir = os.path.join(HERE, 'llama_tp2_bf16mix', 'iter_0000001')
    got, common = plain_load(iter_dir)
    want, _ = plain_load(want_dir)
    assert sorted(got) == sorted(want), (sorted(got), sorted(want))
    for k in got:
        assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), k
    sched = check_common(common)
    print(f'plain torch.distributed.checkpoint: {len(got)} tensors equal to llama_tp2_bf16mix '
          f'({sorted({str(t.dtype) for t in got.values()})}), common state with args and scheduler')

    if not torch.cuda.is_available():  # as make_torch_dist.py: nothing to wait for on the CPU
        torch.cuda.synchronize = lambda *a, **k: None
        torch.cuda.current_device = lambda: 'cpu'
    os.environ.setdefault('MASTER_ADDR', '127.0.0.1')
    os.environ.setdefault('MASTER_PORT', '29573')
    dist.init_process_group('gloo', rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    mtd.DTYPE = torch.bfloat16
    assert check_common(dist_checkpointing.load_common_state_dict(iter_dir)) == sched
    model = mtd.build('llama', seed=999)
    loaded = dist_checkpointing.load({'model': model.sharded_state_dict(metadata=mtd.sd_metadata())},
                                     iter_dir)
    model.load_state_dict(loaded['model'])
    layout = mtd.checkpoint_layout(model)
    assert sorted(layout) == sorted(got), (sorted(layout), sorted(got))
    for k, v in layout.items():
        assert v.dtype == got[k].dtype and torch.equal(v, got[k]), k
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.0)
    for g in opt.param_groups:
        g['max_lr'], g['min_lr'] = g['lr'], 0.0
    scheduler = OptimizerParamScheduler(
        opt, init_lr=0.0, max_lr=sched['max_lr'], min_lr=sched['min_lr'],
        lr_warmup_steps=sched['lr_warmup_steps'], lr_decay_steps=sched['lr_decay_steps'],
        lr_decay_style=sched['lr_decay_style'], start_wd=sched['start_wd'], end_wd=sched['end_wd'],
        wd_incr_steps=sched['wd_incr_steps'], wd_incr_style=sched['wd_incr_style'],
        use_checkpoint_opt_param_scheduler=False, override_opt_param_scheduler=False)
    scheduler.load_state_dict(sched)
    assert scheduler.num_steps == sched['num_steps'], scheduler.num_steps
    print(f'megatron.core.dist_checkpointing: loaded at TP 1, {len(layout)} parameters equal; '
          f'OptimizerParamScheduler took the scheduler state (step {scheduler.num_steps})')
    dist.destroy_process_group()


if __name__ == '__main__':
    main()
