#!/bin/sh
# check.sh - the tests of `make check-cuda-cpu`, on the build in $BUILD whose
# "cuda" backend is kernels/cuda/ running on the CPU under HIP-CPU: every op
# of the backend table against the CPU functions (test_backend_ops -b cuda).
# Exits non-zero when any fails.
set -u
: "${BUILD:?BUILD is not set}"
"$BUILD/tests/test_backend_ops" -b cuda
