#!/bin/sh
# gpu_ab.sh - A/B timing of the CUDA kernels' build-time knobs on one GPU:
# mdstrain as built in $BUILD against variants of the same tree built beside
# it with extra defines, the runs alternated so that a drift of the
# machine falls on every build alike.  Not part of make bench-gpu; a device
# call runs it where a change needs its own before/after (docs/benchmarks.md).
#
#   BUILD=build sh bench/gpu_ab.sh NAME=DEFINES...
#   e.g. sh bench/gpu_ab.sh gelu_kernels=-DMDS_CU_GELU_EPI=0 attn_packed=-DAM_DIRECT=0 \
#            attn_uncapped='-DAM_FWD_BLOCKS=3 -DAM_DKV_BLOCKS=2'
#
# Each variant is a full build in $BUILD/ab-NAME (make, NVCCFLAGS and
# CPPFLAGS from the environment: the Makefile appends its own; so the
# defines reach nvcc and the C compiler, for the knobs of train/ too), built
# once and kept.  Then
# ROUNDS (default 3) rounds of the base and each variant in order: GPT-2
# 124M (MODEL=gpt2-124m, or gpt2-350m, gpt2-1.3b: bench/gpu.sh's shapes),
# bf16, --mock-data, micro-batch MB (default 64) as the global batch,
# ITERS (default 8) iterations, the mean of those after the first.  Prints a
# line per run and a table of each build's best and median, its ratio to the
# base's best; the report also goes to $OUT/ab.txt when OUT is set.  A build
# or run that fails is named and the others go on; exit 1 if any failed.
# MDS_AB_DRYRUN=1: the CPU backend at a tiny shape (checks the script, not
# a GPU); the variants still build with their defines.  MDS_AB_BUILD_ONLY=1:
# the builds alone, then exit (bench/devcall.sh builds them while the GPU
# tests run; the timed call later finds them up to date).  MDS_AB_JOBS:
# make's jobs (default: every CPU).  MDS_AB_OPTIMES=1: every run with
# mdstrain --op-times (a sync ends each iteration, for every build alike),
# and each build's table from its last round in $OUT/ab-optimes-NAME.txt:
# a knob's effect on the ops it touches, apart from the step's noise.
set -u
BUILD=${BUILD:-build}
ROUNDS=${ROUNDS:-3} ITERS=${ITERS:-8} MB=${MB:-64} MODEL=${MODEL:-gpt2-124m}
DRY=${MDS_AB_DRYRUN:-0}
JOBS=${MDS_AB_JOBS:-$(nproc)}
[ $# -gt 0 ] || { echo "usage: BUILD=build sh bench/gpu_ab.sh NAME=DEFINES..." >&2; exit 2; }
case $MODEL in
gpt2-124m) SHAPE="--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024" ;;
gpt2-350m) SHAPE="--num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024" ;;
gpt2-1.3b) SHAPE="--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 1024" ;;
*) echo "gpu_ab.sh: MODEL=$MODEL: want gpt2-124m, gpt2-350m or gpt2-1.3b" >&2; exit 2 ;;
esac
DEV=cuda
if [ "$DRY" = 1 ]; then
    DEV=cpu MB=2 ITERS=3 MODEL="tiny (dry run)"
    SHAPE="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64"
fi
SEQ=${SHAPE##*--seq-length }
T=$(mktemp -d "${TMPDIR:-/tmp}/mds-ab.XXXXXX")
trap 'rm -rf "$T"' EXIT
REPORT=$T/report
failed=0
say() { echo "$*" | tee -a "$REPORT"; }

# the builds: "base" is $BUILD itself, then one directory a variant
say "== gpu_ab: $(date -u '+%Y-%m-%d %H:%M UTC'), commit ${MDS_BENCH_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo ?)}," \
    "$MODEL, micro-batch $MB, $ITERS iterations, $ROUNDS rounds, device $DEV"
make --no-print-directory -j"$JOBS" BUILD="$BUILD" "$BUILD/mdstrain" >"$T/build.base" 2>&1 ||
    { say "base: the build failed"; tail -n 5 "$T/build.base"; exit 1; }
names="base"
echo "base $BUILD/mdstrain" >"$T/bins"
for v in "$@"; do
    name=${v%%=*} defs=${v#*=}
    case $name in ''|*[!A-Za-z0-9_-]*) echo "gpu_ab.sh: '$v': want NAME=DEFINES" >&2; exit 2 ;; esac
    d=$BUILD/ab-$name
    if NVCCFLAGS="-O2 -g $defs" CPPFLAGS="$defs" make --no-print-directory -j"$JOBS" BUILD="$d" "$d/mdstrain" >"$T/build.$name" 2>&1; then
        names="$names $name"
        echo "$name $d/mdstrain" >>"$T/bins"
        say "$name: built in $d with $defs"
    else
        say "$name: the build with $defs failed"; tail -n 5 "$T/build.$name"; failed=1
    fi
done
[ "${MDS_AB_BUILD_ONLY:-0}" = 1 ] && exit "$failed"

# ms FILE: the mean elapsed time per iteration (ms) after the first iteration
ms() { sed -n 's/.*elapsed time per iteration (ms): \([0-9.]*\) .*/\1/p' "$1" |
       awk 'NR > 1 { s += $1; n++ } END { if (n) printf "%.1f", s / n }'; }
OPTIMES=
[ "${MDS_AB_OPTIMES:-0}" = 1 ] && OPTIMES=--op-times
r=1
while [ "$r" -le "$ROUNDS" ]; do
    for name in $names; do
        bin=$(awk -v n="$name" '$1 == n { print $2 }' "$T/bins")
        # shellcheck disable=SC2086
        MDS_VOCAB_DIR=${MDS_VOCAB_DIR:-$(pwd)/vocab} timeout -s KILL 600 "$bin" --device "$DEV" --mock-data $SHAPE \
            --max-position-embeddings "$SEQ" --micro-batch-size "$MB" --global-batch-size "$MB" \
            --train-iters "$ITERS" --lr 1e-4 --log-interval 1 --eval-iters 0 --hidden-dropout 0 \
            --attention-dropout 0 --bf16 $OPTIMES >"$T/run.out" 2>"$T/run.err"
        rc=$?
        if [ -n "$OPTIMES" ] && [ -n "${OUT:-}" ] && [ "$rc" -eq 0 ]; then
            sed -n '/ op times on /,$p' "$T/run.out" >"$OUT/ab-optimes-$name.txt"
        fi
        t=$(ms "$T/run.out")
        if [ "$rc" -ne 0 ] || [ -z "$t" ]; then
            say "round $r $name: failed (exit $rc): $(grep -m1 -E 'mdstrain: |rror' "$T/run.err")"; failed=1
        else
            say "round $r $name: $t ms/iter"
            echo "$name $t" >>"$T/times"
        fi
    done
    r=$((r + 1))
done
say ""
say "| build | best ms/iter | median | best against base's |"
say "|---|---|---|---|"
for name in $names; do
    [ -f "$T/times" ] || break
    awk -v n="$name" '$1 == n { print $2 }' "$T/times" | sort -n >"$T/t.$name"
    [ -s "$T/t.$name" ] || continue
    base=$(awk '$1 == "base" { print $2 }' "$T/times" | sort -n | head -n 1)
    say "$(awk -v n="$name" -v b="$base" '{ v[NR] = $1 } END {
        m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "| %s | %.1f | %.1f | %s |", n, v[1], m, (b > 0 ? sprintf("%.3fx", v[1] / b) : "?") }' "$T/t.$name")"
done
[ -n "${OUT:-}" ] && cp "$REPORT" "$OUT/ab.txt"
exit "$failed"
