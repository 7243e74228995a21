"""Writes golden.txt: Megatron-LM's own megatron/core/timers.py (its
Timers.log, through Python logging as megatron/training/training.py sets it
up) on each case of cases.txt.  Run with the path of a Megatron-LM checkout;
needs torch.  See README.md."""
import io
import logging
import sys
import types

import torch

megatron = sys.argv[1]
utils = types.ModuleType("megatron.core.utils")
utils.is_torch_min_version = lambda v: True
for name in ("megatron", "megatron.core"):
    sys.modules[name] = types.ModuleType(name)
sys.modules["megatron.core.utils"] = utils
timers = types.ModuleType("megatron.core.timers")
exec(compile(open(megatron + "/megatron/core/timers.py").read(), "timers.py", "exec"), timers.__dict__)
handler_src = types.ModuleType("megatron.training.log_handler")
exec(compile(open(megatron + "/megatron/training/log_handler.py").read(), "log_handler.py", "exec"),
     handler_src.__dict__)

out = io.StringIO()
handler = handler_src.CustomHandler()
handler.setStream(out)
logging.basicConfig(handlers=[handler], level=logging.INFO)

cases, cur = [], None
for line in open("cases.txt"):
    line = line.strip()
    if not line or line.startswith("#"):
        continue
    if line.startswith("case "):
        _, option, norm, world = line.split()
        cur = {"option": option, "normalizer": float(norm), "world": int(world), "names": None, "rows": []}
        cases.append(cur)
    elif cur["names"] is None:
        cur["names"] = line.split()
    else:
        cur["rows"].append([float(x) for x in line.split()])

for i, c in enumerate(cases):
    t = torch.tensor(c["rows"], dtype=torch.float)
    tm = timers.Timers(2, c["option"])
    tm._get_elapsed_time_all_ranks = lambda names, reset, barrier, t=t: t
    torch.distributed.get_world_size = lambda c=c: c["world"]
    torch.distributed.get_rank = lambda c=c: c["world"] - 1
    out.write("== case %d\n" % (i + 1))
    tm.log(c["names"], normalizer=c["normalizer"])
sys.stdout.write(out.getvalue())
