#!/bin/sh
# parallel.sh - mdstrain on 2 MPI ranks against 1 process, same machine, same
# model (6 layers, hidden 384, 6 heads, seq 256, GPT-2 vocabulary padded to
# 50304, micro-batch 1, global batch 2, mock data): the time per iteration of
# DP2 and TP2 (one OpenMP thread per rank) against one rank with 2 threads,
# DP2 with --overlap-grad-reduce against DP2,
# and the bytes each collective sent per iteration on rank 0 (mdstrain -v -v),
# then every rank's bytes and calls checked exactly against
# bench/comm_plan.py, the one implementation of the formulas (a ring
# all-reduce's 2 (p-1)/p N elements per rank, which mdstrain's rank-ordered
# sum also sends; per micro-batch 4 L + 2 TP all-reduces of s b h floats and
# 3 of s b; docs/benchmarks.md), which tests/cli/test_comm_plan.sh holds to
# TCP runs in make test.
# Needs mpirun (make deps installs Open MPI); skipped otherwise.
# Run from the repository root with BUILD set (make bench does).
BUILD=${BUILD:-build}
M=$BUILD/mdstrain
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_hwloc_base_binding_policy=none
export OMP_WAIT_POLICY=passive
if ! command -v mpirun >/dev/null 2>&1 || ! "$M" --version | grep -q 'MPI ('; then
    echo "== parallel: skipped (no mpirun, or mdstrain built without MPI)"; exit 0
fi
T=$(mktemp -d "${TMPDIR:-/tmp}/mds-par.XXXXXX"); trap 'rm -rf "$T"' EXIT
L=6 H=384 S=256 ITERS=${PAR_ITERS:-4}
ARGS="--mock-data --num-layers $L --hidden-size $H --num-attention-heads 6 --seq-length $S
      --max-position-embeddings $S --micro-batch-size 1 --global-batch-size 2 --train-iters $ITERS
      --lr 1e-4 --log-interval 1 --eval-iters 0 -q -v -v"
# ms per iteration: mean of the logged iterations after the first
ms() { sed -n 's/.*elapsed time per iteration (ms): \([0-9.]*\) .*/\1/p' "$1" |
       awk 'NR > 1 { s += $1; n++ } END { if (n) printf "%.0f", s / n; else print "?" }'; }
echo "== parallel: $L layers, hidden $H, seq $S, global batch 2 (micro 1), $ITERS iterations, $(nproc) CPUs"
# shellcheck disable=SC2086
OMP_NUM_THREADS=2 "$M" $ARGS >"$T/one" 2>"$T/one.err" || { cat "$T/one.err"; exit 1; }
ONE=$(ms "$T/one")
echo "   1 rank, 2 threads:        $ONE ms/iteration"
# shellcheck disable=SC2086
OMP_NUM_THREADS=1 mpirun -np 2 "$M" $ARGS >"$T/dp" 2>"$T/dp.err" || { tail "$T/dp.err"; exit 1; }
DP=$(ms "$T/dp")
# shellcheck disable=SC2086
OMP_NUM_THREADS=1 mpirun -np 2 "$M" $ARGS --tensor-model-parallel-size 2 >"$T/tp" 2>"$T/tp.err" || { tail "$T/tp.err"; exit 1; }
TP=$(ms "$T/tp")
# --overlap-grad-reduce, buckets of 1M elements (about one per layer; the
# default 40M would make this model's one bucket start after the backward)
# shellcheck disable=SC2086
OMP_NUM_THREADS=1 mpirun -np 2 "$M" $ARGS --overlap-grad-reduce --ddp-bucket-size 1000000 >"$T/ov" 2>"$T/ov.err" ||
    { tail "$T/ov.err"; exit 1; }
OV=$(ms "$T/ov")
awk -v one="$ONE" -v dp="$DP" -v tp="$TP" -v ov="$OV" 'BEGIN {
    printf "   DP2, 1 thread per rank:   %d ms/iteration  (%.2fx of 1 rank)\n", dp, one / dp
    printf "   DP2, overlapped reduce:   %d ms/iteration  (%.2fx of DP2)\n", ov, dp / ov
    printf "   TP2, 1 thread per rank:   %d ms/iteration  (%.2fx of 1 rank)\n", tp, one / tp }'
# bytes per iteration of rank 0, measured; the formulas are bench/comm_plan.py's
bytes() { grep '^\[rank 0\]' "$1" | tr ';' '\n' | sed -n "s/.* $2 all-reduce \([0-9.]*\) calls \([0-9]*\) bytes/\1 \2/p" | head -1; }
# shellcheck disable=SC2046
set -- $(bytes "$T/dp.err" dp)
echo "   DP2 all-reduces (gradients, loss):  $1 calls/iteration, $2 bytes sent by rank 0"
# shellcheck disable=SC2046
set -- $(bytes "$T/tp.err" tp)
echo "   TP2 all-reduces:                    $1 calls/iteration, $2 bytes sent by rank 0"
# every rank, every group, exactly against the plan (needs python3)
if command -v python3 >/dev/null 2>&1; then
    printf '   DP2 plan: '
    # shellcheck disable=SC2086
    python3 bench/comm_plan.py $ARGS --vocab-size 50257 --world-size 2 --check "$T/dp.err" || exit 1
    printf '   TP2 plan: '
    # shellcheck disable=SC2086
    python3 bench/comm_plan.py $ARGS --vocab-size 50257 --world-size 2 --tensor-model-parallel-size 2 \
        --check "$T/tp.err" || exit 1
    # shellcheck disable=SC2086
    python3 bench/comm_plan.py $ARGS --vocab-size 50257 --world-size 2 --tensor-model-parallel-size 2 | sed 's/^/   /'
else
    echo "   (no python3: bench/comm_plan.py not run)"
fi
