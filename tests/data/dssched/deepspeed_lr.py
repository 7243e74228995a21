#!/usr/bin/env python3
"""deepspeed_lr.py - the golden learning rates of tests/unit/test_schedule.c
and tests/cli/test_dssched.sh, from a re-statement (not a copy) of what
DeepSpeed 0.10.3 to 0.14.4 does with a ds_config "scheduler" under
Megatron-DeepSpeed:

  deepspeed/runtime/lr_schedules.py  WarmupLR, WarmupDecayLR: the
      constructor keeps max(2, warmup_num_steps) and 1 / log(W) and sets no
      learning rate; step(n=None) sets last_batch_iteration to n (or +1) and
      every parameter group's lr to get_lr(); get_lr() is
      min + (max - min) * gamma with gamma = 1/log(W) * log(n + 1) ("log")
      or n / W ("linear") while n < W, then 1 (WarmupLR) or
      max(0, (T - n) / max(1, T - W)) (WarmupDecayLR).
  deepspeed/runtime/engine.py  _take_model_step: after optimizer.step(),
      unless the step overflowed, scheduler.step(**lr_kwargs), and on
      TypeError scheduler.step(train_batch_size()).  Megatron-DeepSpeed's
      train_step calls model.step(lr_kwargs={'increment': n}) with
      --no-pipeline-parallel; the pipeline engine's OptimizerStep passes
      no lr_kwargs.
  megatron/optimizer_param_scheduler.py (Megatron-DeepSpeed)  __init__
      calls step(0), which sets every group's lr before DeepSpeed exists.

Python's own float operations make the numbers: run it with python3 (no
packages) to rewrite warmup_lr.txt and sequences.txt here.
"""
import math
import os


class Groups:
    """The optimizer's parameter groups, as far as a scheduler sees them."""

    def __init__(self, lr):
        self.param_groups = [{'lr': lr}, {'lr': lr}]


class Warmup:
    """WarmupLR (total None) or WarmupDecayLR (total given)."""

    def __init__(self, opt, warmup_min_lr=0.0, warmup_max_lr=0.001, warmup_num_steps=1000,
                 warmup_type='log', last_batch_iteration=-1, total_num_steps=None):
        self.opt = opt
        self.lo, self.hi = warmup_min_lr, warmup_max_lr
        self.span = warmup_max_lr - warmup_min_lr
        self.w = max(2, warmup_num_steps)
        self.kind = warmup_type if warmup_type in ('log', 'linear') else 'log'
        self.inv = 1.0 / math.log(self.w)
        self.n = last_batch_iteration
        self.total = total_num_steps

    def gamma(self):
        if self.n < self.w:
            return self.inv * math.log(self.n + 1) if self.kind == 'log' else self.n / self.w
        if self.total is None:
            return 1.0
        return max(0.0, float(self.total - self.n) / float(max(1.0, self.total - self.w)))

    def lr(self):
        return self.lo + (self.span * self.gamma())

    def step(self, last_batch_iteration=None):   # no **kwargs: 'increment' is a TypeError
        self.n = self.n + 1 if last_batch_iteration is None else last_batch_iteration
        for g in self.opt.param_groups:
            g['lr'] = self.lr()


def engine_step(sched, lr_kwargs, train_batch_size):
    try:
        sched.step(**(lr_kwargs or {}))
    except TypeError:
        sched.step(train_batch_size)


def table():
    """(type, warmup_type, min, max, W as given, T, n) -> get_lr() after step(n)."""
    rows = []
    for kind in ('log', 'linear'):
        for n in (0, 1, 2, 3, 7, 8, 500, 998, 999, 1000, 5000):
            rows.append(('WarmupLR', kind, 0.0, 0.001, 1000, 0, n))
        for n in (0, 1, 2, 3):
            rows.append(('WarmupLR', kind, 1e-5, 3e-4, 1, 0, n))    # W below 2: 2
            rows.append(('WarmupLR', kind, 1e-5, 3e-4, 2.5, 0, n))  # a float W
        for n in range(0, 13):
            rows.append(('WarmupDecayLR', kind, 1e-4, 6e-4, 4, 10, n))
        rows.append(('WarmupDecayLR', kind, 0.0, 0.001, 8, 8, 9))     # T - W < 1: max(1, .)
    out = []
    for typ, kind, lo, hi, w, t, n in rows:
        s = Warmup(Groups(0.0), lo, hi, w, kind, -1, t if typ == 'WarmupDecayLR' else None)
        s.step(n)
        out.append('%s %s %r %r %r %r %d %r' % (typ, kind, lo, hi, w, t, n, s.opt.param_groups[0]['lr']))
    return out


def sequence(name, pipe, train_batch_size, megatron_lr0, iters, **params):
    """Iteration k (every step applied): the lr its step used and the lr
    the log line prints (the first group's after the step).  An overflowed
    step skips the scheduler: the test shifts the sequence by the skips."""
    opt = Groups(megatron_lr0)
    s = Warmup(opt, **params)
    out = []
    for k in range(1, iters + 1):
        used = opt.param_groups[0]['lr']
        engine_step(s, None if pipe else {'increment': train_batch_size}, train_batch_size)
        out.append('%s %d %r %r' % (name, k, used, opt.param_groups[0]['lr']))
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, 'warmup_lr.txt'), 'w') as f:
        f.write('# type warmup_type min max warmup_num_steps total_num_steps n lr: deepspeed_lr.py\n')
        f.write('\n'.join(table()) + '\n')
    argonne = dict(warmup_min_lr=0, warmup_max_lr=0.001, warmup_num_steps=1000)
    seqs = []
    # tests/cli/test_dssched.sh: one process, global batch 2 (train_batch_size 2),
    # Megatron's step(0) lr 0 (a warmup), six iterations
    seqs += sequence('nopp', False, 2, 0.0, 6, **argonne)
    seqs += sequence('pipe', True, 2, 0.0, 40, **argonne)
    seqs += sequence('decay_pipe', True, 2, 0.0, 6, warmup_min_lr=1e-4, warmup_max_lr=6e-4,
                     warmup_num_steps=2, warmup_type='linear', total_num_steps=4)
    with open(os.path.join(here, 'sequences.txt'), 'w') as f:
        f.write('# name iteration lr_used lr_logged: deepspeed_lr.py\n')
        f.write('\n'.join(seqs) + '\n')


if __name__ == '__main__':
    main()
