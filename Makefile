# mds - Megatron-compatible dataset toolkit and GPT trainer.  One GNU Makefile for everything.
#
#   make            build the CPU tools into build/
#   make test       install missing Debian packages, build with -Werror, run every test
#   make help       list the targets
#
# Feature probes run through $(shell ...) by compiling a tiny program; each
# answer can be overridden on the command line (HAVE_CUDA=0, ...).  A missing
# optional library (PCRE2, liblzma, zstd, zlib) only switches its feature off:
# the code builds without it and says so when the feature is asked for.

SHELL    := /bin/sh
CC       ?= cc
CUDA_HOME ?= /usr/local/cuda
NVCC     ?= $(if $(wildcard $(CUDA_HOME)/bin/nvcc),$(CUDA_HOME)/bin/nvcc,nvcc)
CUDA_ARCH ?= 90
PREFIX   ?= /usr/local
V        ?= 0
SAN      ?=

ifeq ($(V),1)
Q :=
else
Q := @
endif

ifeq ($(SAN),)
BUILD ?= build
else
BUILD ?= build/san
endif

WARN     := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wpointer-arith -Wundef -Wcast-align
OPT      ?= -O2
CFLAGS   ?= $(OPT) -g
CFLAGS   += -std=c11 -ffp-contract=off -D_GNU_SOURCE -pthread $(WARN) -MMD -MP
CPPFLAGS += -Idataset -Ipreprocess -Ikernels -Itrain -Iprograms -DMDS_VOCAB_DIR='"$(PREFIX)/share/mds/vocab"'
LDFLAGS  += -pthread
ifneq ($(SAN),)
CFLAGS   += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS  += -fsanitize=$(SAN)
endif
ifeq ($(WERROR),1)
CFLAGS   += -Werror
endif

# ---- feature detection --------------------------------------------------
H := \#
probe = $(shell printf '$(1)\n' | $(CC) -x c - -o /dev/null $(2) >/dev/null 2>&1 && echo 1 || echo 0)
HAVE_OPENMP ?= $(call probe,$(H)include <omp.h>\nint main(void){return omp_get_max_threads() < 0;},-fopenmp)
HAVE_PCRE2  ?= $(call probe,$(H)define PCRE2_CODE_UNIT_WIDTH 8\n$(H)include <pcre2.h>\nint main(void){return pcre2_config(0,0) < -100;},-lpcre2-8)
HAVE_LZMA   ?= $(call probe,$(H)include <lzma.h>\nint main(void){return !lzma_version_number();},-llzma)
HAVE_ZSTD   ?= $(call probe,$(H)include <zstd.h>\nint main(void){return !ZSTD_versionNumber();},-lzstd)
HAVE_ZLIB   ?= $(call probe,$(H)include <zlib.h>\nint main(void){return !zlibVersion();},-lz)
MPICC       ?= mpicc
HAVE_MPI    ?= $(shell command -v $(MPICC) >/dev/null 2>&1 && printf '$(H)include <mpi.h>\nint main(void){return MPI_Init(0,0);}\n' | $(MPICC) -x c - -o /dev/null >/dev/null 2>&1 && echo 1 || echo 0)
HAVE_CUDA   ?= $(shell command -v $(NVCC) >/dev/null 2>&1 && echo 1 || echo 0)
ifeq ($(HAVE_CUDA),1)
HAVE_NCCL   ?= $(shell printf '$(H)include <nccl.h>\nint main(void){int v; return ncclGetVersion(&v);}\n' > /tmp/mds-nccl-probe.cu && $(NVCC) /tmp/mds-nccl-probe.cu -o /dev/null -lnccl >/dev/null 2>&1 && echo 1 || echo 0)
else
HAVE_NCCL   ?= 0
endif

# Evaluate each probe once (a command-line value still wins).
HAVE_OPENMP := $(HAVE_OPENMP)
HAVE_PCRE2  := $(HAVE_PCRE2)
HAVE_LZMA   := $(HAVE_LZMA)
HAVE_ZSTD   := $(HAVE_ZSTD)
HAVE_ZLIB   := $(HAVE_ZLIB)
HAVE_MPI    := $(HAVE_MPI)
HAVE_CUDA   := $(HAVE_CUDA)
HAVE_NCCL   := $(HAVE_NCCL)

mark = $(if $(filter 1,$(1)),✓,✗)
comma := ,
ifeq ($(MAKELEVEL),0)
ifeq ($(filter help clean deps,$(MAKECMDGOALS)),)
$(info mds build: OpenMP $(call mark,$(HAVE_OPENMP))  PCRE2 $(call mark,$(HAVE_PCRE2))  liblzma $(call mark,$(HAVE_LZMA))  zstd $(call mark,$(HAVE_ZSTD))  zlib $(call mark,$(HAVE_ZLIB))  MPI $(call mark,$(HAVE_MPI))  CUDA $(call mark,$(HAVE_CUDA)) ($(NVCC)$(if $(filter 1,$(HAVE_CUDA)),$(comma) sm_$(CUDA_ARCH)))  NCCL $(call mark,$(HAVE_NCCL)))
endif
endif

ifeq ($(HAVE_OPENMP),1)
CFLAGS  += -fopenmp
LDFLAGS += -fopenmp
endif
# Each optional library found adds its define (tested by preprocess/pretok.c
# and preprocess/input.c) and its -l flag; MDS_FEATURES names them for the tests.
MDS_FEATURES :=
ifeq ($(HAVE_PCRE2),1)
MDS_FEATURES += pcre2
CPPFLAGS     += -DMDS_HAVE_PCRE2
LDLIBS       += -lpcre2-8
endif
ifeq ($(HAVE_LZMA),1)
MDS_FEATURES += lzma
CPPFLAGS     += -DMDS_HAVE_LZMA
LDLIBS       += -llzma
endif
ifeq ($(HAVE_ZSTD),1)
MDS_FEATURES += zstd
CPPFLAGS     += -DMDS_HAVE_ZSTD
LDLIBS       += -lzstd
endif
ifeq ($(HAVE_ZLIB),1)
MDS_FEATURES += zlib
CPPFLAGS     += -DMDS_HAVE_ZLIB
LDLIBS       += -lz
endif
MDS_FEATURES := $(strip $(MDS_FEATURES))

# CUDA (HAVE_CUDA=1, found when nvcc is): kernels/cuda/*.cu compiled by nvcc
# for sm_$(CUDA_ARCH) into libmds, whose users then link cudart and cuBLAS.
# The library registers the "cuda" backend only when a device is found at
# run time, so a CUDA build runs everywhere a CPU build does.  -fmad=false
# matches the CPU kernels' -ffp-contract=off (the elementwise kernels give
# the CPU's bits).
CUDA_SRCS := $(wildcard kernels/cuda/*.cu)
CUDA_OBJS :=
ifeq ($(HAVE_CUDA),1)
CUDA_LIB  ?= $(firstword $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib) $(CUDA_HOME)/lib64)
CUDA_OBJS := $(CUDA_SRCS:%.cu=$(BUILD)/%.o)
CPPFLAGS  += -DMDS_HAVE_CUDA
NVCCFLAGS ?= -O2 -g
NVCCFLAGS += -arch=sm_$(CUDA_ARCH) -std=c++17 -fmad=false -Xcompiler -Wall,-Wextra -MMD -MP
ifeq ($(WERROR),1)
NVCCFLAGS += -Werror all-warnings -Xcompiler -Werror
endif
CUDA_LDLIBS := -L$(CUDA_LIB) -Wl,-rpath,$(CUDA_LIB) -lcublasLt -lcublas -lcudart -lstdc++
endif
LDLIBS += -lm
# what links libmds (LDLIBS stays the optional libraries' list, as `make config` shows it)
LINK_LIBS = $(LDLIBS) $(CUDA_LDLIBS)

# Debian packages the build and the tests need.  `make deps` installs the
# missing ones when run as root; without root it only says what is missing.
DEB_PACKAGES := gcc make libc6-dev liblzma-dev libzstd-dev libpcre2-dev zlib1g-dev \
                unicode-data xz-utils zstd gzip time openmpi-bin libopenmpi-dev

# ---- sources ------------------------------------------------------------
LIB_SRCS  := $(filter-out train/comm%.c, $(wildcard dataset/*.c preprocess/*.c kernels/*.c kernels/cpu/*.c train/*.c))
LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/%.o) $(CUDA_OBJS)
LIB       := $(BUILD)/libmds.a
# programs/: the three mains and their shared command-line code
CLI_OBJS  := $(BUILD)/programs/cli.o $(BUILD)/programs/dataflags.o
INSPECT_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(wildcard programs/inspect_*.c))
PROGS     := $(BUILD)/mdsprep $(BUILD)/mdsinspect $(BUILD)/mdstrain
TEST_SRCS := $(wildcard tests/unit/test_*.c)
TEST_BINS := $(TEST_SRCS:tests/unit/%.c=$(BUILD)/tests/%) $(BUILD)/tests/test_comm
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BINS := $(FUZZ_SRCS:tests/fuzz/%.c=$(BUILD)/tests/%)

## all: build the CPU tools (mdsprep, mdsinspect, mdstrain) into build/
all: $(PROGS)

# Objects depend on a stamp that changes only when flags or features change,
# so toggling a feature (or SAN) rebuilds everything and nothing else does.
CONFIG_TEXT := $(CC) $(CFLAGS) $(CPPFLAGS) $(LDFLAGS) $(LDLIBS) CUDA=$(HAVE_CUDA) $(NVCCFLAGS) $(CUDA_LDLIBS) MPI=$(HAVE_MPI) NCCL=$(HAVE_NCCL)
$(BUILD)/CONFIG: FORCE
	@mkdir -p $(BUILD)
	@if [ "$$(cat $@ 2>/dev/null)" != '$(CONFIG_TEXT)' ]; then echo '$(CONFIG_TEXT)' > $@; fi

# The CPU kernels' inner loops are written to vectorize (elementwise, or
# reductions split into explicit lanes), but GCC's -O2 cost model ("very
# cheap") skips any loop that needs a remainder or an alias check.
# Vectorising such loops never changes their results; nor does
# -fno-math-errno (sqrtf stays the exact IEEE square root, it only stops
# setting errno, which kept AdamW's loop scalar).
KERNEL_CFLAGS := -fno-math-errno $(shell $(CC) -fvect-cost-model=dynamic -x c -c /dev/null -o /dev/null >/dev/null 2>&1 && echo -fvect-cost-model=dynamic)
$(BUILD)/kernels/cpu/%.o: CFLAGS += $(KERNEL_CFLAGS)

$(BUILD)/%.o: %.c $(BUILD)/CONFIG
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/kernels/cuda/%.o: kernels/cuda/%.cu $(BUILD)/CONFIG
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVCC    $<")
	$(Q)$(NVCC) $(NVCCFLAGS) $(CPPFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJS)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/mdsprep: $(BUILD)/programs/mdsprep.o $(CLI_OBJS) $(LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) $^ $(LINK_LIBS) -o $@

$(BUILD)/mdsinspect: $(BUILD)/programs/mdsinspect.o $(INSPECT_OBJS) $(CLI_OBJS) $(LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) $^ $(LINK_LIBS) -o $@

$(BUILD)/bench_tokenize: bench/bench_tokenize.c $(LIB) $(BUILD)/CONFIG
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) $< $(LIB) $(LDFLAGS) $(LINK_LIBS) -o $@

# make bench-gpu's "cuBLAS alone" (bench/gemm_gpu.cu): a standalone CUDA
# program, not part of libmds (and fused multiply-adds allowed: it only times).
GEMM_NVCCFLAGS := -O2 -arch=sm_$(CUDA_ARCH) -std=c++17 -Xcompiler -Wall,-Wextra \
                  $(if $(filter 1,$(WERROR)),-Werror all-warnings -Xcompiler -Werror)
$(BUILD)/gemm_gpu: bench/gemm_gpu.cu $(BUILD)/CONFIG
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVCC    $<")
	$(Q)$(NVCC) $(GEMM_NVCCFLAGS) $< -o $@ -L$(CUDA_LIB) -Xlinker -rpath,$(CUDA_LIB) -lcublasLt -lcublas

# The communicator (train/comm*.c) is not part of libmds: comm.c (the
# collectives and the choice of transport) and comm_tcp.c (TCP) are plain C;
# comm_mpi.c is the only MPI code: with MPI it is compiled, and mdstrain
# linked, by mpicc; libmds and the other tools never need MPI.
COMM_OBJS := $(BUILD)/train/comm.o $(BUILD)/train/comm_tcp.o
ifeq ($(HAVE_MPI),1)
COMM_CC   := $(MPICC)
COMM_DEFS := -DMDS_HAVE_MPI
COMM_OBJS += $(BUILD)/train/comm_mpi.o
else
COMM_CC   := $(CC)
COMM_DEFS :=
endif

# NCCL (HAVE_NCCL=1, with CUDA): train/comm_nccl.c, the NCCL transport of
# comm.h, plain C against the CUDA runtime and NCCL headers; compiled and
# linked here, run only on a machine with GPUs (docs/architecture.md, "NCCL").
ifeq ($(HAVE_CUDA)$(HAVE_NCCL),11)
COMM_DEFS += -DMDS_HAVE_NCCL
COMM_OBJS += $(BUILD)/train/comm_nccl.o
NCCL_LDLIBS := -lnccl
endif

$(BUILD)/train/comm.o: CPPFLAGS += $(COMM_DEFS)

$(BUILD)/train/comm_nccl.o: train/comm_nccl.c $(BUILD)/CONFIG
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(COMM_CC) $(CPPFLAGS) -isystem $(CUDA_HOME)/include $(CFLAGS) $(COMM_DEFS) -c $< -o $@

$(BUILD)/train/comm_mpi.o: train/comm_mpi.c $(BUILD)/CONFIG
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  MPICC   $<")
	$(Q)$(COMM_CC) $(CPPFLAGS) $(CFLAGS) $(COMM_DEFS) -c $< -o $@

$(BUILD)/mdstrain: $(BUILD)/programs/mdstrain.o $(BUILD)/programs/tblog.o $(BUILD)/programs/dsconfig.o $(COMM_OBJS) $(CLI_OBJS) $(LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(COMM_CC) $(LDFLAGS) $^ $(LINK_LIBS) $(NCCL_LDLIBS) -o $@

$(BUILD)/tests/%: tests/unit/%.c $(LIB) $(BUILD)/CONFIG
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) -Itests $(CFLAGS) $< $(LIB) $(LDFLAGS) $(LINK_LIBS) -o $@

# The communicator's test links the communicator like mdstrain (run alone by
# tests/run.sh and under mpirun by tests/cli/test_parallel.sh).
$(BUILD)/tests/test_comm: tests/mpi/test_comm.c $(COMM_OBJS) $(BUILD)/CONFIG
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(COMM_CC) $(CPPFLAGS) -Itests $(CFLAGS) $(COMM_DEFS) $< $(COMM_OBJS) $(LDFLAGS) $(LINK_LIBS) $(NCCL_LDLIBS) -o $@

# The schedule's and the timers' tests link the trainer and the timers,
# hence the communicator.
$(BUILD)/tests/test_schedule $(BUILD)/tests/test_timers: $(BUILD)/tests/%: tests/unit/%.c $(LIB) $(COMM_OBJS) $(BUILD)/CONFIG
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(COMM_CC) $(CPPFLAGS) -Itests $(CFLAGS) $< $(LIB) $(COMM_OBJS) $(LDFLAGS) $(LINK_LIBS) $(NCCL_LDLIBS) -o $@

# Fuzz targets build against a standalone driver that replays a corpus.
$(BUILD)/tests/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/driver.c $(LIB) $(BUILD)/CONFIG
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) -Itests $(CFLAGS) $< tests/fuzz/driver.c $(LIB) $(LDFLAGS) $(LINK_LIBS) -o $@

## deps: install the missing Debian packages (as root; idempotent)
# One dpkg-query for every package, and nothing at all while the stamp is
# newer than dpkg's database (so `make test` costs no package query when
# nothing changed); apt-get runs only when something is missing.
DEPS_STAMP := $(BUILD)/.deps-ok
deps: $(DEPS_STAMP)
$(DEPS_STAMP): $(wildcard /var/lib/dpkg/status) Makefile
	@mkdir -p $(BUILD)
	@missing=$$(dpkg-query -W -f='$${Package} $${db:Status-Status}\n' $(DEB_PACKAGES) 2>/dev/null | \
	    awk '$$2 == "installed" {ok[$$1] = 1} END {n = split("$(DEB_PACKAGES)", p, " "); \
	         for (i = 1; i <= n; i++) if (!(p[i] in ok)) printf " %s", p[i]}'); \
	if [ -n "$$missing" ]; then \
	    if [ "$$(id -u)" = 0 ]; then \
	        echo "deps: installing$$missing"; \
	        export DEBIAN_FRONTEND=noninteractive; \
	        (apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing) >/dev/null || \
	            { echo "deps: apt-get install failed for:$$missing" >&2; exit 1; }; \
	    else \
	        echo "deps: missing Debian packages:$$missing" >&2; \
	        echo "hint: run 'sudo make deps' (or apt-get install$$missing)" >&2; exit 1; \
	    fi; \
	fi; \
	touch $@

## test: install deps, build with -Werror and run every test (SAN=address,undefined for sanitizers)
test: deps
	@$(MAKE) --no-print-directory WERROR=1 test-run

test-run: $(PROGS) $(TEST_BINS) $(FUZZ_BINS)
	@BUILD=$(BUILD) MDS_FEATURES='$(MDS_FEATURES)' sh tests/run.sh

## test-gpu: build and run the GPU tests: every op on "cuda" against the CPU, mdstrain on the GPU against the CPU, several ranks on the GPU(s) (fails without a GPU)
# Not part of `make test`, which runs where there is no GPU (there the op
# test prints a skip line naming the GPU tests).
test-gpu: deps
	@if [ "$(HAVE_CUDA)" != 1 ]; then echo "test-gpu: this build has no CUDA (nvcc not found; HAVE_CUDA=1 NVCC=...)" >&2; exit 1; fi
	@$(MAKE) --no-print-directory WERROR=1 $(PROGS) $(BUILD)/tests/test_backend_ops
	@BUILD=$(BUILD) sh tests/gpu/run.sh test-gpu

## check-cuda-cpu: run the CUDA kernels on the CPU under ROCm's HIP-CPU (HIPCPU=its checkout; libtbb-dev): every op on "cuda" against the CPU, small mdstrain runs --device cuda against cpu (a few minutes)
# Not part of `make test` (HIP-CPU is third-party code this repo does not
# carry).  The kernels/cuda/ files are compiled unchanged by g++ through
# tests/cudacpu/hipcc.sh (as NVCC) and tests/cudacpu/cuda_shim.h, into a
# build of everything in $(BUILD)/cudacpu (docs/architecture.md, "CUDA on
# the CPU": what it proves and what it cannot).
CUDACPU_BUILD := $(BUILD)/cudacpu
check-cuda-cpu:
	@if [ -z "$(HIPCPU)" ] || [ ! -f "$(HIPCPU)/include/hip/hip_runtime.h" ]; then \
	    echo "check-cuda-cpu: HIPCPU must name a checkout of ROCm's HIP-CPU (HIPCPU=/path, with include/hip/hip_runtime.h)$(if $(HIPCPU),; '$(HIPCPU)' has none)" >&2; exit 2; fi
	@if ! printf '$(H)include <tbb/version.h>\nint main(void){return 0;}\n' | $(CXX) -x c++ - -o /dev/null -ltbb >/dev/null 2>&1; then \
	    echo "check-cuda-cpu: HIP-CPU needs TBB (apt-get install libtbb-dev)" >&2; exit 2; fi
	@$(MAKE) --no-print-directory BUILD=$(CUDACPU_BUILD) HAVE_CUDA=1 HAVE_NCCL=0 HIPCPU=$(abspath $(HIPCPU)) \
	    NVCC=tests/cudacpu/hipcc.sh NVCCFLAGS='-O2 -g -ffp-contract=off -Wall -Wextra -Wno-unused-function -MMD -MP' \
	    CUDA_LDLIBS='-ltbb -lstdc++' $(CUDACPU_BUILD)/mdstrain $(CUDACPU_BUILD)/tests/test_backend_ops
	@BUILD=$(CUDACPU_BUILD) MDS_GPU_ONE_PROCESS=1 sh tests/gpu/run.sh check-cuda-cpu

## test-slurm: install Slurm and munge (Debian), start a one-host cluster, run the examples and mdstrain through sbatch/srun (about 2 min, root)
# Not part of `make test`: it needs root, two daemons and free ports, and
# takes longer than the rest together (docs/cli.md, "Slurm").
SLURM_PACKAGES := slurm-wlm munge
test-slurm: deps
	@missing=$$(dpkg-query -W -f='$${Package} $${db:Status-Status}\n' $(SLURM_PACKAGES) 2>/dev/null | \
	    awk '$$2 == "installed" {ok[$$1] = 1} END {n = split("$(SLURM_PACKAGES)", p, " "); \
	         for (i = 1; i <= n; i++) if (!(p[i] in ok)) printf " %s", p[i]}'); \
	if [ -n "$$missing" ]; then \
	    if [ "$$(id -u)" != 0 ]; then echo "test-slurm: needs root (missing:$$missing)" >&2; exit 1; fi; \
	    echo "test-slurm: installing$$missing"; \
	    (export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && \
	     apt-get install -y -qq --no-install-recommends $$missing) >/dev/null || \
	        { echo "test-slurm: apt-get install failed for:$$missing" >&2; exit 1; }; \
	fi
	@$(MAKE) --no-print-directory WERROR=1 $(PROGS) $(BUILD)/tests/test_tensorboard
	@BUILD=$(BUILD) sh tests/slurm/test_slurm.sh

## check-golden: also compare the large dev corpus with Megatron's golden output (needs ../shared)
check-golden: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) sh tests/check_golden_dev.sh

## demo: install deps, build, preprocess the bundled sample corpus and inspect it
demo: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) sh examples/demo.sh

## bench: install deps, build, and print speed figures against baselines measured in the same run
bench: deps
	@$(MAKE) --no-print-directory all $(BUILD)/bench_tokenize
	@BUILD=$(BUILD) sh bench/run.sh
	@BUILD=$(BUILD) sh bench/tokenizers.sh
	@BUILD=$(BUILD) sh bench/indices.sh
	@BUILD=$(BUILD) sh bench/train.sh
	@BUILD=$(BUILD) MDS_BENCH_LLAMA=1 sh bench/train.sh
	@BUILD=$(BUILD) sh bench/parallel.sh

## bench-gpu: mdstrain on one NVIDIA GPU against PyTorch, cuBLAS alone and llm.c (LLMC=...), and host-staged ranks; about 9 min on an H100 (fails without a GPU)
# Not part of `make bench`, and no `deps`: the GPU machine may have no
# network (docs/benchmarks.md, "First GPU session").  The report is also
# written to $(BUILD)/bench-gpu.txt (and $$OUT/bench-gpu.txt when OUT is set).
bench-gpu:
	@if [ "$(HAVE_CUDA)" != 1 ]; then echo "bench-gpu: this build has no CUDA (nvcc not found; HAVE_CUDA=1 NVCC=...)" >&2; exit 1; fi
	@$(MAKE) --no-print-directory WERROR=1 $(PROGS) $(BUILD)/gemm_gpu
	@BUILD=$(BUILD) CUDA_ARCH=$(CUDA_ARCH) sh bench/gpu.sh

## install: install the tools and the GPT-2 vocab under PREFIX (default /usr/local)
install: $(PROGS)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/mds/vocab
	install -m 755 $(PROGS) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 vocab/gpt2-vocab.json vocab/gpt2-merges.txt $(DESTDIR)$(PREFIX)/share/mds/vocab/

## config: print the detected features and flags
config:
	@echo "CC=$(CC) CFLAGS=$(CFLAGS)"
	@echo "MDS_FEATURES=$(MDS_FEATURES) LDLIBS=$(LDLIBS)"
	@echo "CUDA: NVCC=$(NVCC) CUDA_ARCH=$(CUDA_ARCH) NVCCFLAGS=$(NVCCFLAGS) CUDA_LDLIBS=$(CUDA_LDLIBS)"
	@echo "HAVE_OPENMP=$(HAVE_OPENMP) HAVE_PCRE2=$(HAVE_PCRE2) HAVE_LZMA=$(HAVE_LZMA) HAVE_ZSTD=$(HAVE_ZSTD) HAVE_ZLIB=$(HAVE_ZLIB) HAVE_MPI=$(HAVE_MPI) HAVE_CUDA=$(HAVE_CUDA) HAVE_NCCL=$(HAVE_NCCL)"

## clean: remove the build directory ($(BUILD))
clean:
	rm -rf $(BUILD)

## help: list the targets
help:
	@sed -n 's/^## \([a-z-]*\): \(.*\)/  make \1\t\2/p' $(MAKEFILE_LIST) | expand -t 24

FORCE:
.PHONY: all deps test test-run test-gpu test-slurm check-golden demo bench bench-gpu install config clean help FORCE
.DELETE_ON_ERROR:

-include $(LIB_OBJS:.o=.d) $(CLI_OBJS:.o=.d) $(INSPECT_OBJS:.o=.d) $(BUILD)/programs/mdsprep.d \
         $(BUILD)/programs/mdsinspect.d $(BUILD)/programs/mdstrain.d $(BUILD)/programs/tblog.d \
         $(BUILD)/train/comm.d $(BUILD)/train/comm_tcp.d $(BUILD)/train/comm_mpi.d $(BUILD)/train/comm_nccl.d \
         $(TEST_BINS:%=%.d)
