#!/bin/sh
# parallel.sh - mdstrain on 2 MPI ranks against 1 process, same machine, same
# model (6 layers, hidden 384, 6 heads, seq 256, GPT-2 vocabulary padded to
# 50304, micro-batch 1, global batch 2, mock data): the time per iteration of
# DP2 and TP2 (one OpenMP thread per rank) against one rank with 2 threads,
# and the bytes each collective sent per iteration on rank 0 (mdstrain -v -v)
# next to the formulas for a ring all-reduce (docs/benchmarks.md), which
# moves 2 (p-1)/p N elements per rank (so does mdstrain's rank-ordered sum):
#   TP: per micro-batch 4 L + 2 all-reduces of s b h floats (2 per layer
#       forward, 2 backward, the embedding, the logit layer's input gradient)
#       and 3 of s b (the vocab-parallel cross-entropy); 1 of the norm.
#   DP: one all-reduce of the gradients (N parameters) per iteration.
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
awk -v one="$ONE" -v dp="$DP" -v tp="$TP" 'BEGIN {
    printf "   DP2, 1 thread per rank:   %d ms/iteration  (%.2fx of 1 rank)\n", dp, one / dp
    printf "   TP2, 1 thread per rank:   %d ms/iteration  (%.2fx of 1 rank)\n", tp, one / tp }'
# bytes per iteration of rank 0, against the formulas
N=$(sed -n 's/.*number of parameters on (tensor, pipeline) model parallel rank (0, 0): \([0-9]*\)/\1/p' "$T/dp.err" | head -1)
bytes() { grep '^\[rank 0\]' "$1" | tr ';' '\n' | sed -n "s/.* $2 all-reduce \([0-9.]*\) calls \([0-9]*\) bytes/\1 \2/p" | head -1; }
set -- $(bytes "$T/dp.err" dp)
echo "   DP2 gradient all-reduce:  $1 call/iteration, $2 bytes sent by rank 0; formula 2(p-1)/p x 4 N = $((4 * N)) (N = $N)"
set -- $(bytes "$T/tp.err" tp)
awk -v calls="$1" -v got="$2" -v L=$L -v s=$S -v h=$H 'BEGIN {
    mb = 2   # micro-batches per iteration
    f = mb * 4 * ((4 * L + 2) * s * h + 3 * s)   # 2(p-1)/p = 1 for p = 2, 4 bytes a float
    printf "   TP2 all-reduces:          %d calls/iteration (formula %d), %d bytes sent by rank 0; formula %d (%.3fx)\n",
           calls, mb * (4 * L + 5), got, f, got / f }'
