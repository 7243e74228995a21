"""Writes golden.txt: Megatron-LM's own OptimizerParamScheduler.get_lr
(megatron/core/optimizer_param_scheduler.py) at the steps of each case
below, the learning rates as Python's repr (README.md).  Run with the path
of a Megatron-LM checkout; needs torch."""
import sys
import types

megatron = sys.argv[1]
utils = types.ModuleType("megatron.core.utils")
utils.log_single_rank = lambda *a, **k: None
for name in ("megatron", "megatron.core"):
    sys.modules[name] = types.ModuleType(name)
sys.modules["megatron.core.utils"] = utils
mod = types.ModuleType("megatron.core.optimizer_param_scheduler")
exec(compile(open(megatron + "/megatron/core/optimizer_param_scheduler.py").read(), "ops.py", "exec"), mod.__dict__)


class Opt:
    param_groups = [{}]


# style, wsd style, max, min, init, warmup steps, decay steps, wsd steps, the steps to ask at
CASES = [
    ("inverse-square-root", None, 3e-4, 1e-5, 0.0, 100, 10000, None,
     [0, 1, 50, 99, 100, 101, 150, 1000, 4999, 9999, 10000, 10001]),
    ("inverse-square-root", None, 1e-3, 0.0, 0.0, 0, 1000, None, [0, 1, 2, 3, 10, 999, 1000, 1001]),
    ("inverse-square-root", None, 1e-3, 2e-4, 1e-5, 12.5, 400, None, [0, 5, 12, 13, 20, 25, 399, 400]),
    ("WSD", "exponential", 1e-3, 1e-4, 0.0, 40, 1000, 200,
     [0, 20, 40, 41, 500, 799, 800, 801, 850, 900, 999, 1000, 1001]),
    ("WSD", "linear", 1e-3, 1e-4, 0.0, 40, 1000, 200, [0, 40, 41, 800, 801, 850, 900, 999, 1000, 1001]),
    ("WSD", "cosine", 1e-3, 1e-4, 0.0, 40, 1000, 200, [0, 40, 41, 800, 801, 850, 900, 999, 1000, 1001]),
    ("WSD", "minus_sqrt", 1e-3, 1e-4, 0.0, 40, 1000, 200, [0, 40, 41, 800, 801, 850, 900, 999, 1000, 1001]),
    ("WSD", "exponential", 6e-4, 6e-5, 0.0, 12.5, 96, 24, [0, 12, 13, 71, 72, 73, 80, 95, 96, 97]),
    ("WSD", "cosine", 6e-4, 0.0, 0.0, 0, 64, 64, [0, 1, 2, 31, 32, 63, 64]),
    ("linear", None, 6e-4, 6e-5, 0.0, 100, 2000, None, [0, 50, 100, 101, 1000, 1999, 2000, 2001]),
    ("cosine", None, 6e-4, 6e-5, 1e-6, 100, 2000, None, [0, 50, 100, 101, 1000, 1999, 2000, 2001]),
]

for i, (style, wsd, mx, mn, init, warm, decay, wsd_steps, steps) in enumerate(CASES):
    s = mod.OptimizerParamScheduler(
        Opt(), init_lr=init, max_lr=mx, min_lr=mn, lr_warmup_steps=warm, lr_decay_steps=decay,
        lr_decay_style=style, start_wd=0.01, end_wd=0.01, wd_incr_steps=decay, wd_incr_style="constant",
        wsd_decay_steps=wsd_steps, lr_wsd_decay_style=wsd)
    print("case %d %s %s %r %r %r %r %r %r" % (i + 1, style, wsd or "-", mx, mn, init, float(warm), float(decay),
                                             float(wsd_steps or -1)))
    for n in steps:
        s.num_steps = n
        print("%d %r" % (n, s.get_lr({})))
