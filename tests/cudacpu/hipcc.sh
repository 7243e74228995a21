#!/bin/sh
# hipcc.sh - the NVCC of `make check-cuda-cpu`: compiles one .cu file of kernels/cuda/
# as C++ with g++ against HIP-CPU (HIPCPU=its checkout) and
# tests/cudacpu/cuda_shim.h.  The .cu file is not changed; a copy in the
# build directory gets the two rewrites hipify makes, the only CUDA syntax
# C++ cannot parse:
#   name<<<grid, block[, smem]>>>(args)  ->  mds_cucpu_launch(name, grid, block[, smem])(args)
#   extern __shared__ T name[];          ->  HIP_DYNAMIC_SHARED(T, name)
# Usage (as the Makefile calls NVCC): hipcc.sh FLAGS... -c FILE.cu -o FILE.o
set -eu
: "${HIPCPU:?HIPCPU is not set}"
src= out= prev=
for a in "$@"; do
    case "$prev" in -o) out=$a ;; esac
    case "$a" in *.cu) src=$a ;; esac
    prev=$a
done
[ -n "$src" ] && [ -n "$out" ] || { echo "hipcc.sh: want -c FILE.cu -o FILE.o" >&2; exit 2; }
cpp="${out%.o}.hip.cpp"
mkdir -p "$(dirname "$out")"
# A launch's configuration never spans lines in kernels/cuda/ (grep '<<<' shows it).
if grep -n '<<<' "$src" | grep -v '>>>' >&2; then
    echo "hipcc.sh: $src: a <<<...>>> launch configuration split over lines" >&2; exit 1
fi
printf '#line 1 "%s"\n' "$src" > "$cpp"
sed -e 's/\([A-Za-z_][A-Za-z0-9_]*\)<<<\(.*\)>>>(/mds_cucpu_launch(\1, \2)(/' \
    -e 's/extern __shared__ \([A-Za-z_][A-Za-z0-9_ ]*\) \([A-Za-z_][A-Za-z0-9_]*\)\[\];/HIP_DYNAMIC_SHARED(\1, \2)/' \
    "$src" >> "$cpp"
# the arguments, with the .cu replaced by its rewritten copy
for a in "$@"; do
    shift
    if [ "$a" = "$src" ]; then set -- "$@" "$cpp"; else set -- "$@" "$a"; fi
done
exec ${CXX:-g++} -x c++ -std=c++17 -isystem "$HIPCPU/include" -Itests/cudacpu/include -I"$(dirname "$src")" "$@"
