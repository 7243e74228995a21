#!/bin/sh
# make_fixtures.sh - record the TensorBoard fixtures once (by hand, from the
# repository root, after `make build/mdstrain build/tests/test_tensorboard`;
# needs PyPI).  What it writes into tests/data/tensorboard/:
#   synthetic.tfevents            `test_tensorboard -w`: scalars with every edge
#                                 (zero, negative and 2^40 steps, tiny and huge
#                                 values, a UTF-8 tag) at fixed wall times
#   mdstrain.tfevents             the event file of mdstrain run with the flags
#                                 in mdstrain.flags
#   *.tensorboard.txt             what the real tensorboard package, installed
#                                 from PyPI into a throwaway venv, reads from
#                                 each (read_with_tensorboard.py)
#   tensorboard.version           the version of that package
# tests/unit/test_tensorboard.c and tests/cli/test_tensorboard.sh compare
# against them.
set -eu
BUILD=${BUILD:-build}
D=tests/data/tensorboard
V=$(mktemp -d "${TMPDIR:-/tmp}/mds-tbfix.XXXXXX")
trap 'rm -rf "$V"' EXIT
python3 -m venv "$V/venv"
"$V/venv/bin/pip" install -q tensorboard
"$V/venv/bin/python" -c 'import tensorboard; print("tensorboard " + tensorboard.__version__)' >"$D/tensorboard.version"
rm -f "$D/synthetic.tfevents" "$D/mdstrain.tfevents"
"$BUILD/tests/test_tensorboard" -w "$D/synthetic.tfevents"
# shellcheck disable=SC2046
OMP_NUM_THREADS=1 "$BUILD/mdstrain" -q $(cat "$D/mdstrain.flags") --tensorboard-dir "$V/tb" >/dev/null
cp "$V"/tb/events.out.tfevents.* "$D/mdstrain.tfevents"
for f in synthetic mdstrain; do
    "$V/venv/bin/python" "$D/read_with_tensorboard.py" "$D/$f.tfevents" >"$D/$f.tensorboard.txt"
done
