#!/usr/bin/env python3
"""read_with_tensorboard.py - print what the real tensorboard package reads
from an event file, in the format of `test_tensorboard -d FILE`:

    file_version<TAB>VERSION<TAB>WALL            (the raw events, in file order)
    TAG<TAB>STEP<TAB>VALUE<TAB>WALL              (EventAccumulator.Scalars, by tag)

Numbers are Python's repr.  Run by make_fixtures.sh in a throwaway venv with
`pip install tensorboard`; TensorFlow is not needed (tensorboard's own record
reader checks both CRCs of every record and raises DataLossError otherwise).
"""
import sys

from tensorboard.backend.event_processing import event_accumulator, event_file_loader


def main(path):
    # the raw records: framing and CRCs checked by tensorboard's reader
    n = 0
    for ev in event_file_loader.LegacyEventFileLoader(path).Load():
        n += 1
        if ev.HasField("file_version"):
            print("file_version\t%s\t%r" % (ev.file_version, ev.wall_time))
    # what TensorBoard's scalar dashboard gets
    acc = event_accumulator.EventAccumulator(path, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    for tag in sorted(acc.Tags()["scalars"]):
        for e in acc.Scalars(tag):
            print("%s\t%d\t%r\t%r" % (tag, e.step, e.value, e.wall_time))
    print("events read: %d" % n, file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1])
