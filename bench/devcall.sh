#!/bin/sh
# devcall.sh - a device call's work in one command, in order of what it is
# for, within one call's time: what a session lent a GPU runs through the
# device tool's `run` (docs/benchmarks.md, "The device call").  Run from the
# repository root; everything it reports goes to $OUT (the folder that
# comes back) and to standard output.
#
#   sh bench/devcall.sh                  (within DEVCALL_SECONDS, default 560)
#
#  1. the machine: nvidia-smi, PyTorch's version;
#  2. the build (make WERROR=1: the programs, test_backend_ops, gemm_gpu);
#     then, in the background, llm.c's train_gpt2cu where build/llm.c was
#     carried (docs/benchmarks.md says how to prepare it) and the A/B's
#     variant builds (bench/gpu_ab.sh with MDS_AB_BUILD_ONLY=1);
#  3. correctness: tests/gpu/run.sh test-gpu (test_backend_ops -b cuda and
#     tests/gpu/test_train_gpu.sh: what make test-gpu runs, without its
#     apt-get), and with SANITIZE=1 compute-sanitizer on test_backend_ops;
#     TESTS=0 skips them (a second call of the same session);
#  4. where each step's time goes: mdstrain --op-times (kernels/optime.h)
#     at 124M, micro-batch 64, and 1.3B, micro-batch MB13B (52, what
#     bench-gpu fitted on an H200), OPT_ITERS (4) iterations each, when
#     OPT_SECONDS (180) are left (OPT=0 skips it); the tables in
#     $OUT/optimes-*.txt;
#  5. the A/B of the knobs not yet timed (AB: NAME=DEFINES words, default
#     below; AB= skips it): bench/gpu_ab.sh, ROUNDS (2) rounds of ITERS (6)
#     iterations at 124M, micro-batch 64, when AB_SECONDS (200) are left,
#     each run with --op-times (MDS_AB_OPTIMES=1: $OUT/ab-optimes-*.txt,
#     each knob's effect on the ops it changes);
#  6. make bench-gpu with the time left (MDS_BENCH_GPU_SHAPES, default
#     "gpt2-124m gpt2-1.3b"; no host-staged section), when 120 s are left,
#     its PyTorch runs each with one more iteration under torch.profiler
#     (MDS_BENCH_GPU_PROFILE=1: $OUT/torch-prof-*.txt, the kernels' time by
#     kind and name, the baseline beside step 4's tables).
#
# Each step says what it did or why it was skipped; the exit status is that
# of the tests (3).  DEVCALL_DRY=1 checks the script without a GPU: steps 1,
# 3 and 6 are named and skipped, the A/B runs bench/gpu_ab.sh's dry run (the
# CPU backend at a tiny shape) with its first variant only, and step 4 a
# tiny shape on the CPU.
set -u
BUDGET=${DEVCALL_SECONDS:-560}
START=$(date +%s)
OUT=${OUT:-/tmp/devcall}
BUILD=${BUILD:-build}
DRY=${DEVCALL_DRY:-0}
J=$(nproc)
mkdir -p "$OUT"
# every make here with -Werror, gpu_ab.sh's too: a build's CONFIG records
# its flags, and a make with others would rebuild $BUILD under the tests
export WERROR=1
# the knobs written without a device (docs/benchmarks.md, "Written on
# 2026-11-28 ..."): each NAME builds the tree with DEFINES
AB=${AB-"gelu_kernels=-DMDS_CU_GELU_EPI=0 fwd_mt2=-DAM_FWD_MT=2 ce_twice=-DMDS_CU_CE_ROW=0
attn_packed=-DAM_DIRECT=0 ce_apart=-DMDS_CU_CE_FUSED=0 resid_grad32=-DMDS_RD16=0
bwd_whole=-DAM_BWD_CW=64:-DAM_BWD_CW128=64:-DAM_BWD_REGA=0 bwd_dkv4=-DAM_BWD_REGA=0:-DAM_DKV_BLOCKS=4
bwd_cw32=-DAM_BWD_CW=32"}
[ "$DRY" = 1 ] && AB=$(echo "$AB" | awk 'NF { print $1; exit }')
left() { echo $((START + BUDGET - $(date +%s))); }
say() { echo "devcall: $* ($(left) s left)" | tee -a "$OUT/devcall.txt"; }
# the A/B's words as gpu_ab.sh's arguments, a line each (':' stands for a
# space in DEFINES)
ab() { echo "$AB" | tr ' ' '\n' | grep -v '^$' | tr ':' ' '; }
: >"$OUT/devcall.txt"
say "start: commit ${MDS_BENCH_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo ?)}, $J CPUs"

# 1. the machine
if [ "$DRY" = 1 ]; then
    say "1. machine: skipped (dry run)"
else
    nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
    python3 -c 'import torch; print(torch.__version__, torch.cuda.is_available())' >"$OUT/torch.txt" 2>&1
    say "1. machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -n 1);" \
        "torch $(head -n 1 "$OUT/torch.txt")"
fi

# 2. the build, then the background builds
targets="all $BUILD/tests/test_backend_ops"
[ "$DRY" = 1 ] || targets="$targets $BUILD/gemm_gpu"
# shellcheck disable=SC2086
if ! make --no-print-directory -j"$J" WERROR=1 BUILD="$BUILD" $targets >"$OUT/build.log" 2>&1; then
    say "2. build: failed"; tail -n 30 "$OUT/build.log"; exit 1
fi
say "2. build: ok"
llpid=
if [ "$DRY" != 1 ] && [ -f build/llm.c/train_gpt2.cu ]; then
    # llm.c links -lnvidia-ml, which the driver ships without the .so link
    mkdir -p /tmp/nvml
    ln -sf "$(ldconfig -p | awk '/libnvidia-ml\.so\.1 /{print $NF; exit}')" /tmp/nvml/libnvidia-ml.so
    LIBRARY_PATH=/tmp/nvml make -C build/llm.c train_gpt2cu USE_CUDNN=0 NO_MULTI_GPU=1 GPU_COMPUTE_CAPABILITY=90 \
        >"$OUT/llmc-build.txt" 2>&1 &
    llpid=$!
    say "2. llm.c: building in the background"
fi
abpid=
if [ -n "$AB" ]; then
    # (at low priority and half the CPUs: the GPU tests' CPU runs go first)
    # shellcheck disable=SC2046
    (IFS='
'; MDS_AB_BUILD_ONLY=1 MDS_AB_JOBS=$(((J + 1) / 2)) BUILD="$BUILD" nice -n 10 sh bench/gpu_ab.sh $(ab) \
        >"$OUT/ab-build.txt" 2>&1) &
    abpid=$!
    say "2. A/B variants: building in the background"
fi

# 3. correctness
rc=0
if [ "$DRY" = 1 ] || [ "${TESTS:-1}" = 0 ]; then
    say "3. tests: skipped ($([ "$DRY" = 1 ] && echo dry run || echo TESTS=0))"
else
    BUILD="$BUILD" timeout 240 sh tests/gpu/run.sh test-gpu >"$OUT/test-gpu.txt" 2>&1
    rc=$?
    say "3. tests: exit $rc, $(tail -n 1 "$OUT/test-gpu.txt")"
    grep '^FAIL' "$OUT/test-gpu.txt" | head -n 20
    if [ "${SANITIZE:-0}" = 1 ]; then
        CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
        timeout 100 "$CS" --error-exitcode 9 "$BUILD/tests/test_backend_ops" -b cuda >"$OUT/sanitizer.txt" 2>&1
        say "3. compute-sanitizer: exit $?"
    fi
fi

# 4. op times
# optimes NAME MB FLAGS...: one mdstrain --op-times run into $OUT/optimes-NAME.txt
optimes() {
    o_name=$1 o_mb=$2; shift 2
    # shellcheck disable=SC2086
    timeout -s KILL $(($(left) - 120 > 20 ? $(left) - 120 : 20)) "$BUILD/mdstrain" --device $o_dev --mock-data "$@" \
        --micro-batch-size "$o_mb" --global-batch-size "$o_mb" --train-iters "${OPT_ITERS:-4}" --lr 1e-4 \
        --log-interval 1 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --bf16 --op-times -q \
        >"$OUT/optimes-$o_name.txt" 2>&1
    say "4. op times, $o_name at micro-batch $o_mb: exit $?, $(grep '^ every op ' "$OUT/optimes-$o_name.txt" |
        sed 's/  */ /g; s/^ //')"
}
if [ "${OPT:-1}" = 0 ]; then
    say "4. op times: skipped (OPT=0)"
elif [ "$(left)" -ge "${OPT_SECONDS:-180}" ]; then
    if [ "$DRY" = 1 ]; then
        o_dev=cpu
        optimes tiny 2 --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 \
            --max-position-embeddings 64
    else
        o_dev=cuda
        optimes gpt2-124m 64 --num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 \
            --max-position-embeddings 1024
        [ "$(left)" -ge "${OPT_SECONDS:-180}" ] &&
            optimes gpt2-1.3b "${MB13B:-52}" --num-layers 24 --hidden-size 2048 --num-attention-heads 16 \
                --seq-length 1024 --max-position-embeddings 1024
    fi
else
    say "4. op times: skipped (under ${OPT_SECONDS:-180} s left)"
fi

# 5. the A/B
if [ -n "$abpid" ]; then
    wait "$abpid"
    say "5. A/B variants built: $(grep -c ': built in' "$OUT/ab-build.txt") of $(ab | wc -l)"
    if [ "$(left)" -ge "${AB_SECONDS:-200}" ]; then
        # shellcheck disable=SC2046
        (IFS='
'; MDS_AB_DRYRUN=$DRY MDS_AB_OPTIMES=1 ROUNDS=${ROUNDS:-2} ITERS=${ITERS:-6} MB=${MB:-64} OUT="$OUT" BUILD="$BUILD" \
            timeout $(($(left) - 60)) sh bench/gpu_ab.sh $(ab) >"$OUT/ab-run.txt" 2>&1)
        say "5. A/B: exit $?"
        sed -n '/^| build/,$p' "$OUT/ab-run.txt"
    else
        say "5. A/B: skipped (under ${AB_SECONDS:-200} s left)"
    fi
fi

# 6. bench-gpu
if [ "$DRY" = 1 ]; then
    say "6. bench-gpu: skipped (dry run)"
elif [ "$(left)" -ge 120 ]; then
    [ -n "$llpid" ] && wait "$llpid"
    llmc=
    [ -x build/llm.c/train_gpt2cu ] && llmc=$PWD/build/llm.c
    MDS_BENCH_GPU_SECONDS=$(($(left) - 10)) MDS_BENCH_GPU_STAGED=0 MDS_BENCH_GPU_PROFILE=1 \
        MDS_BENCH_GPU_SHAPES=${MDS_BENCH_GPU_SHAPES:-"gpt2-124m gpt2-1.3b"} LLMC=$llmc OUT="$OUT" \
        make --no-print-directory WERROR=1 BUILD="$BUILD" bench-gpu >"$OUT/bench-gpu.log" 2>&1
    say "6. bench-gpu: exit $?"
    tail -n 25 "$OUT/bench-gpu.log"
else
    say "6. bench-gpu: skipped (under 120 s left)"
fi
say "done"
exit "$rc"
