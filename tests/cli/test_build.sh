#!/bin/sh
# test_build.sh - the Makefile's feature probes and targets: what `make config`
# reports follows what is installed and can be overridden (probes run through
# $(shell ...) by compiling a small program, so a missing tool is never taken
# for a found one).
. tests/cli/lib.sh
mk() { make -s --no-print-directory "$@" 2>&1; }

cfg=$(mk config)
check "config lists every probe" sh -c "echo '$cfg' | grep -q 'HAVE_OPENMP=.*HAVE_PCRE2=.*HAVE_LZMA=.*HAVE_ZSTD=.*HAVE_ZLIB=.*HAVE_MPI=.*HAVE_CUDA=.*HAVE_NCCL='"
check "required libraries detected" sh -c "echo '$cfg' | grep -q 'HAVE_PCRE2=1 HAVE_LZMA=1 HAVE_ZSTD=1 HAVE_ZLIB=1'"
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then want=1; else want=0; fi
check "CUDA detected iff nvcc exists (want $want)" sh -c "echo '$cfg' | grep -q 'HAVE_CUDA=$want'"
check "HAVE_CUDA=0 overrides" sh -c "make -s --no-print-directory config HAVE_CUDA=0 | grep -q 'HAVE_CUDA=0 HAVE_NCCL=0'"
check "a missing nvcc turns CUDA off" sh -c "make -s --no-print-directory config NVCC=/nonexistent/nvcc | grep -q 'HAVE_CUDA=0'"
check "make help lists the targets" sh -c "make -s --no-print-directory help | grep -q 'make test' && make -s --no-print-directory help | grep -q 'make demo' && make -s --no-print-directory help | grep -q 'make bench'"
check "the detection line is printed with marks" sh -c "env -u MAKELEVEL -u MAKEFLAGS make --no-print-directory config 2>&1 | grep -q 'PCRE2 ✓'"
finish
