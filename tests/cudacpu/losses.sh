#!/bin/sh
# losses.sh MDSTRAIN [OUT] - the bit check of a kernel change that should not
# change results, under the emulation (make check-cuda-cpu's build, whose
# mdstrain runs --device cuda on the CPU) or on a GPU: 24 lines of losses
# and grad norms at full precision (-v -v) from 8 tiny runs of 3
# iterations on --mock-data, bf16 and fp16 (with --initial-loss-scale 4096:
# at the default 2^32 the first iterations are all skipped), T 192 (a last
# tile of 128 rows half past T) and 256, GPT (LayerNorm, GELU, biases) and
# Llama (RMSNorm, SwiGLU, RoPE, one key/value group, no biases), hidden 128
# in 2 heads of 64 (the tensor-core attention's width).  Writes them to OUT
# (default: standard output) and prints their md5 last, on standard error:
# two builds that should give the same bits give the same md5.  About 9 min
# under the emulation on two cores (8 min 54 s on 2026-11-28).
#
# Recorded (emulation, HIP-CPU, 2 cores): 8dec7229292c1cf77945b55cbc83f15a
# on 7dbf4cf, with AM_FWD_MT 1 and 2 alike.  The GPU's own md5 differs
# (device exp, cuBLAS's sums, the tensor cores).
set -u
M=${1:?usage: losses.sh MDSTRAIN [OUT]}
OUT=${2:-/dev/stdout}
MDS_VOCAB_DIR=${MDS_VOCAB_DIR:-$(pwd)/vocab}
export MDS_VOCAB_DIR
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for dt in --bf16 --fp16; do
    for T in 192 256; do
        for model in gpt llama; do
            extra=""
            [ "$dt" = --fp16 ] && extra="--initial-loss-scale 4096"
            [ "$model" = llama ] && extra="$extra --normalization RMSNorm --swiglu --position-embedding-type rope
                --group-query-attention --num-query-groups 1 --disable-bias-linear"
            # shellcheck disable=SC2086
            "$M" --device cuda --mock-data --num-layers 2 --hidden-size 128 --num-attention-heads 2 --seq-length "$T" \
                --max-position-embeddings "$T" --micro-batch-size 2 --global-batch-size 2 --train-iters 3 --lr 1e-3 \
                --log-interval 1 --eval-iters 0 -v -v "$dt" $extra 2>/dev/null |
                sed -n "s/^ \[rank [0-9]*\] lm loss \(.*\)/$dt T$T $model \1/p" >>"$tmp"
        done
    done
done
n=$(wc -l <"$tmp")
cat "$tmp" >"$OUT"
echo "losses.sh: $n lines (want 24), md5 $(md5sum <"$tmp" | cut -d' ' -f1)" >&2
[ "$n" -eq 24 ]
