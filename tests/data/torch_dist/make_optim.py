#!/usr/bin/env python3
"""llama_optim/: the Llama fixture with AdamW state in Megatron's model-space layout.

Ours, and not written by Megatron (its DistributedOptimizer does not build on a CPU here): plain
torch.distributed.checkpoint (no Megatron code) saves, in one process, the tensors of llama/ (read
back with plain DCP) under their keys, and beside each model key KEY, as Megatron's
'fully_reshardable' sharding names them (megatron/core/optimizer/distrib_optimizer.py,
sharded_param_state_fully_reshardable, at d98e8a64, docs/architecture.md "The optimizer"):
    optimizer.state.param.KEY       = KEY + 1     (the fp32 master)
    optimizer.state.exp_avg.KEY     = 2 KEY
    optimizer.state.exp_avg_sq.KEY  = KEY * KEY
in float32, so that a reader's placement of each element can be checked against the weights; and
the common state as Megatron's torch_dist save holds it (an object item common_state/shard_0_1,
torch.save([dict])) with the distributed optimizer's common part (param_groups with the step,
param_state_sharding_type), the scheduler's state_dict (optimizer_param_scheduler.py) and an
argparse.Namespace with the consumed samples; metadata.json and the tracker as Megatron writes
them; .metadata's checkpoint_id as the str Megatron records (plain DCP's is a pathlib.Path). The values are those of a run of mdstrain's Llama flags with --lr 1e-3, linear decay over
--train-iters 6 of global batch 2, at iteration 4 (8 samples). Usage: make_optim.py OUTDIR.
"""
import argparse
import json
import os
import pickle
import sys

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

ITERATION = 4


def main():
    if len(sys.argv) != 2:
        sys.exit('usage: make_optim.py OUTDIR')
    src = os.path.join(sys.argv[1], 'llama', 'iter_0000001')
    meta = dcp.FileSystemReader(src).read_metadata()
    model = {k: torch.empty(m.size, dtype=m.properties.dtype)
             for k, m in meta.state_dict_metadata.items() if isinstance(m, TensorStorageMetadata)}
    dcp.load(model, storage_reader=dcp.FileSystemReader(src), no_dist=True)
    state = dict(model)
    for key, w in model.items():
        state['optimizer.state.param.' + key] = w + 1
        state['optimizer.state.exp_avg.' + key] = w * 2
        state['optimizer.state.exp_avg_sq.' + key] = w * w
    groups = [{'lr': 1e-3 * (1 - 8 / 12), 'weight_decay': wd, 'betas': (0.9, 0.999), 'eps': 1e-8,
               'step': ITERATION, 'params': params} for wd, params in ((0.01, [0, 1, 2]), (0.0, [3, 4]))]
    common = {
        'args': argparse.Namespace(num_layers=2, hidden_size=16, num_attention_heads=4,
                                   tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
                                   consumed_train_samples=2 * ITERATION, consumed_valid_samples=0,
                                   no_save_rng=True),
        'checkpoint_version': 3.0,
        'iteration': ITERATION,
        'num_floating_point_operations_so_far': 0,
        'opt_param_scheduler': {'max_lr': 1e-3, 'lr_warmup_steps': 0, 'num_steps': 2 * ITERATION,
                                'lr_decay_style': 'linear', 'lr_decay_steps': 12, 'min_lr': 0.0,
                                'start_wd': 0.01, 'end_wd': 0.01, 'wd_incr_style': 'constant',
                                'wd_incr_steps': 12},
        'optimizer': {'optimizer': {'param_groups': groups},
                      'param_state_sharding_type': 'fully_reshardable'},
        'content_metadata': {'singleton_local_shards': False, 'chained_optim_avoid_prefix': True,
                             'distrib_optim_sharding_type': 'fully_reshardable'},
    }
    # an object item: DCP torch.saves it whole, as Megatron's ShardedObject list (no flattening)
    state['common_state/shard_0_1'] = [common]
    root = os.path.join(sys.argv[1], 'llama_optim')
    iter_dir = os.path.join(root, f'iter_{ITERATION:07d}')
    os.makedirs(iter_dir, exist_ok=True)
    dcp.save(state, storage_writer=dcp.FileSystemWriter(iter_dir), no_dist=True,
             planner=DefaultSavePlanner(flatten_state_dict=False))
    # plain DCP records the path as a pathlib.Path, Megatron as the str it was given
    md_path = os.path.join(iter_dir, '.metadata')
    with open(md_path, 'rb') as f:
        md = pickle.load(f)
    md.storage_meta.checkpoint_id = str(md.storage_meta.checkpoint_id)
    with open(md_path, 'wb') as f:
        pickle.dump(md, f)
    with open(os.path.join(iter_dir, 'metadata.json'), 'w') as f:
        json.dump({'sharded_backend': 'torch_dist', 'sharded_backend_version': 1}, f)
    with open(os.path.join(root, 'latest_checkpointed_iteration.txt'), 'w') as f:
        f.write(str(ITERATION))
    print(f'llama_optim: {len(state)} items at iteration {ITERATION}')


if __name__ == '__main__':
    main()
