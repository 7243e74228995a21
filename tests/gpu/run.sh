#!/bin/sh
# run.sh NAME - the GPU tests on the build in $BUILD: every op of the backend
# table on "cuda" against the CPU functions (test_backend_ops -b cuda), then
# mdstrain with --device cuda against --device cpu (test_train_gpu.sh; with
# MDS_GPU_ONE_PROCESS=1 its one-process comparisons only); under the
# emulation (NAME check-cuda-cpu) matmul_forward and the GELU ops once more
# with cuBLASLt refusing their epilogues each of two ways.  Prints each
# test's output, then "NAME: N passed, M failed", and exits non-zero on any
# failure (a test that fails without a FAIL line counts as one).  Run by
# make test-gpu (on a GPU) and make check-cuda-cpu (the kernels emulated on
# the CPU, tests/cudacpu/).
set -u
: "${BUILD:?BUILD is not set}"
log=$BUILD/$1.log
passed=0 failed=0
: >"$log"
one() {
    env BUILD="$BUILD" "$@" >"$log.one" 2>&1
    rc=$?
    cat "$log.one"
    cat "$log.one" >>"$log"
    p=$(grep -c '^ok ' "$log.one")
    f=$(grep -c '^FAIL ' "$log.one")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    passed=$((passed + p)) failed=$((failed + f))
}
one "$BUILD/tests/test_backend_ops" -b cuda
one sh tests/gpu/test_train_gpu.sh
# the emulation also refuses matmul_forward's cuBLASLt bias epilogue and the
# MLP's GELU epilogues, in the heuristic and at the call
# (tests/cudacpu/cuda_shim.h): matmul.cu's ways without them, which a GPU
# takes only where cuBLASLt has no algorithm
if [ "$1" = check-cuda-cpu ]; then
    for op in matmul_forward matmul_gelu_forward matmul_gelu_backward; do
        one env MDS_CUCPU_LT=heuristic "$BUILD/tests/test_backend_ops" -b cuda -o $op
        one env MDS_CUCPU_LT=matmul "$BUILD/tests/test_backend_ops" -b cuda -o $op
    done
fi
rm -f "$log.one"
echo "$1: $passed passed, $failed failed (log: $log)"
[ "$failed" -eq 0 ]
