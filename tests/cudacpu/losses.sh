#!/bin/sh
# losses.sh MDSTRAIN [OUT] - the bit check of a kernel change that should not
# change results, under the emulation (make check-cuda-cpu's build, whose
# mdstrain runs --device cuda on the CPU) or on a GPU: 30 lines of losses
# and grad norms at full precision (-v -v) from 10 tiny runs of 3
# iterations on --mock-data, bf16 and fp16 (with --initial-loss-scale 4096:
# at the default 2^32 the first iterations are all skipped), T 192 (a last
# tile of 128 rows half past T) and 256, GPT (LayerNorm, GELU, biases) and
# Llama (RMSNorm, SwiGLU, RoPE, one key/value group, no biases), hidden 128
# in 2 heads of 64 (the tensor-core attention's width).  Eight runs without
# dropout: the paths a GPU takes for speed (the tensor-core attention, the
# 16-bit projections and residual gradient, cuBLASLt's epilogues, the fused
# cross-entropy); two, GPT and Llama in bf16 at T 192, with Megatron's
# default dropout of 0.1 (the fp32 attention kernels, fp32 projections and
# residual gradient).  Writes them to OUT (default: standard output) and
# prints their md5 last, on standard error: two builds that should give the
# same bits give the same md5.  14 min under the emulation on two cores
# alone, 37 with a second run beside it (2026-11-28).
#
# Recorded (emulation, HIP-CPU, 2 cores): see docs/architecture.md, "CUDA
# on the CPU".  Until 2026-11-28 the eight runs had Megatron's default
# dropout, so that they never took the tensor-core attention (whose
# AM_FWD_MT 1 and 2 "gave the same md5" vacuously).  The GPU's own md5
# differs (device exp, cuBLAS's sums, the tensor cores).
set -u
M=${1:?usage: losses.sh MDSTRAIN [OUT]}
OUT=${2:-/dev/stdout}
MDS_VOCAB_DIR=${MDS_VOCAB_DIR:-$(pwd)/vocab}
export MDS_VOCAB_DIR
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
# run DTYPE T MODEL DROP: one run, its 3 lines appended to $tmp
run() {
    extra=""
    [ "$1" = --fp16 ] && extra="--initial-loss-scale 4096"
    [ "$3" = llama ] && extra="$extra --normalization RMSNorm --swiglu --position-embedding-type rope
        --group-query-attention --num-query-groups 1 --disable-bias-linear"
    [ "$4" = nodrop ] && extra="$extra --hidden-dropout 0 --attention-dropout 0"
    # shellcheck disable=SC2086
    "$M" --device cuda --mock-data --num-layers 2 --hidden-size 128 --num-attention-heads 2 --seq-length "$2" \
        --max-position-embeddings "$2" --micro-batch-size 2 --global-batch-size 2 --train-iters 3 --lr 1e-3 \
        --log-interval 1 --eval-iters 0 -v -v "$1" $extra 2>/dev/null |
        sed -n "s/^ \[rank [0-9]*\] lm loss \(.*\)/$1 T$2 $3 $4 \1/p" >>"$tmp"
}
for dt in --bf16 --fp16; do
    for T in 192 256; do
        for model in gpt llama; do
            run "$dt" "$T" "$model" nodrop
        done
    done
done
run --bf16 192 gpt drop
run --bf16 192 llama drop
n=$(wc -l <"$tmp")
cat "$tmp" >"$OUT"
echo "losses.sh: $n lines (want 30), md5 $(md5sum <"$tmp" | cut -d' ' -f1)" >&2
[ "$n" -eq 30 ]
