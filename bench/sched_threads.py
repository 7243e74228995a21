#!/usr/bin/env python3
"""sched_threads.py - where the wall time of one process's threads goes.

Reads `perf script` output of a `perf sched record` and prints, per thread of
process PID (and of the threads it starts), the milliseconds spent running,
runnable (preempted, or woken and not yet on a CPU), asleep and in D state,
and what the CPUs ran while the thread was runnable: threads of the same
process ("ours") or other processes ("foreign").  docs/benchmarks.md used it
on `mdsprep --workers 2` on a 2-CPU VM (issue 14):

    perf sched record -o s.data -- sh -c 'echo $$ > pid; exec build/mdsprep ...'
    perf script -i s.data | python3 bench/sched_threads.py $(cat pid)

Not a test and not part of `make bench`: perf needs root or
perf_event_paranoid <= 1, and the sched tracepoints.
"""
import collections
import re
import sys

EVENT = re.compile(r'\[(\d+)\]\s+(\d+\.\d+):\s+sched:(sched_switch|sched_waking|sched_wakeup_new|'
                   r'sched_process_fork): (.*)')
FIELD = re.compile(r'(\w+)=(\S+)')


def main():
    if len(sys.argv) != 2:
        sys.exit('usage: perf script -i FILE | sched_threads.py PID')
    root = int(sys.argv[1])
    ours = {root}
    state = {}                                   # tid -> (what, since)
    spent = collections.defaultdict(lambda: collections.defaultdict(float))
    blame = collections.defaultdict(lambda: collections.defaultdict(float))
    first, last, on_cpu = {}, {}, {}
    foreign_since, foreign_run = {}, 0.0
    prev_t = None

    def leave(tid, t):
        what, since = state[tid]
        spent[tid][what] += t - since

    for line in sys.stdin:
        m = EVENT.search(line)
        if not m:
            continue
        cpu, t, kind, f = int(m.group(1)), float(m.group(2)), m.group(3), dict(FIELD.findall(m.group(4)))
        if prev_t is not None:           # charge the interval since the last event
            for tid, (what, _) in state.items():
                if what == 'runnable':
                    for c, task in on_cpu.items():
                        who = 'idle' if task == 0 else 'ours' if task in ours else 'foreign'
                        blame[tid][who] += (t - prev_t) / len(on_cpu)
        prev_t = t
        if kind == 'sched_process_fork':
            if int(f['pid']) in ours:
                ours.add(int(f['child_pid']))
        elif kind in ('sched_waking', 'sched_wakeup_new'):
            tid = int(f['pid'])
            if tid in state and state[tid][0] in ('sleep', 'disk'):
                leave(tid, t)
                state[tid] = ('runnable', t)
        else:
            p, n = int(f['prev_pid']), int(f['next_pid'])
            on_cpu[cpu] = n
            if p in ours:
                if p in state:
                    leave(p, t)
                s = f['prev_state']
                state[p] = ('runnable' if s.startswith('R') else 'disk' if s.startswith('D') else 'sleep', t)
                last[p] = t
            elif p in foreign_since:
                foreign_run += t - foreign_since.pop(p)
            if n in ours:
                if n in state:
                    leave(n, t)
                state[n] = ('run', t)
                first.setdefault(n, t)
                last[n] = t
            elif n != 0:
                foreign_since[n] = t
    if root not in first:
        sys.exit(f'sched_threads.py: no sched_switch of pid {root} in the input')
    t0 = first[root]
    for tid in sorted(spent, key=lambda x: first.get(x, t0)):
        a, b = spent[tid], blame[tid]
        print(f"tid {tid:7d} {first[tid] - t0:6.3f}..{last[tid] - t0:6.3f} s  run {a['run'] * 1e3:5.0f}"
              f"  runnable {a['runnable'] * 1e3:5.0f} (CPUs ran ours {b['ours'] * 1e3:4.0f}, foreign"
              f" {b['foreign'] * 1e3:4.0f})  sleep {a['sleep'] * 1e3:5.0f}  disk {a['disk'] * 1e3:4.0f} ms")
    print(f"wall {max(last.values()) - t0:.3f} s; other processes ran {foreign_run:.3f} s of CPU meanwhile")


if __name__ == '__main__':
    main()
