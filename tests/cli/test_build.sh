#!/bin/sh
# test_build.sh - the Makefile's feature probes and targets: what `make config`
# reports follows what is installed and can be overridden (probes run through
# $(shell ...) by compiling a small program, so a missing tool is never taken
# for a found one), and an optional library switched off leaves the link line
# and the feature list.
. tests/cli/lib.sh
mk() { make -s --no-print-directory "$@" 2>&1; }
# the probes alone, without the HAVE_*=0 overrides of a no-feature `make test`
# (make passes command-line variables on in MAKEFLAGS and in the environment)
fresh() {
    env -u MAKELEVEL -u MAKEFLAGS -u MFLAGS -u HAVE_PCRE2 -u HAVE_LZMA -u HAVE_ZSTD -u HAVE_ZLIB \
        make --no-print-directory "$@" 2>&1
}

cfg=$(mk config)
check "config lists every probe" sh -c "echo '$cfg' | grep -q 'HAVE_OPENMP=.*HAVE_PCRE2=.*HAVE_LZMA=.*HAVE_ZSTD=.*HAVE_ZLIB=.*HAVE_MPI=.*HAVE_CUDA=.*HAVE_NCCL='"
required_found() { fresh -s config | grep 'HAVE_PCRE2=1 HAVE_LZMA=1 HAVE_ZSTD=1 HAVE_ZLIB=1' >/dev/null; }
check "required libraries detected" required_found
switched() { mk config HAVE_PCRE2=0 HAVE_LZMA=1 HAVE_ZSTD=1 HAVE_ZLIB=0 | grep -qx 'MDS_FEATURES=lzma zstd LDLIBS=-llzma -lzstd -lm'; }
check "a library switched off leaves the features and the link line" switched
all_off() { mk config HAVE_PCRE2=0 HAVE_LZMA=0 HAVE_ZSTD=0 HAVE_ZLIB=0 | grep -qx 'MDS_FEATURES= LDLIBS=-lm'; }
check "all optional libraries off" all_off
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then want=1; else want=0; fi
check "CUDA detected iff nvcc exists (want $want)" sh -c "echo '$cfg' | grep -q 'HAVE_CUDA=$want'"
check "HAVE_CUDA=0 overrides" sh -c "make -s --no-print-directory config HAVE_CUDA=0 | grep -q 'HAVE_CUDA=0 HAVE_NCCL=0'"
check "a missing nvcc turns CUDA off" sh -c "make -s --no-print-directory config NVCC=/nonexistent/nvcc | grep -q 'HAVE_CUDA=0'"
check "make help lists the targets" sh -c "make -s --no-print-directory help | grep -q 'make test' && make -s --no-print-directory help | grep -q 'make demo' && make -s --no-print-directory help | grep -q 'make bench'"
marks() { fresh config | grep 'PCRE2 ✓' >/dev/null; }
check "the detection line is printed with marks" marks
finish
