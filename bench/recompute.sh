#!/bin/sh
# recompute.sh - the activation-recomputation trade-off of mdstrain on the
# CPU (docs/benchmarks.md): for each setting, the activation bytes the
# model allocates (the configuration table's figure), the process's peak
# RSS (GNU time), the mean time of the iterations after the first, and the
# losses, which must be the same in every row (printed as a check).
# Not part of `make bench` (about 15 minutes on 2 cores).
#
# Model: 12 layers, hidden 768, 12 heads, seq 1024, micro-batch MB (default
# 2), GPT-2's vocabulary size (NullTokenizer 50257, padded to 50304), tied
# embeddings, fp32, dropout 0.1 (Megatron's default), --mock-data, ITERS
# iterations (default 3).
BUILD=${BUILD:-build}
export MDS_DEVICE=${MDS_DEVICE:-cpu}   # the CPU backend against CPU baselines
MB=${MDS_BENCH_MB:-2}
ITERS=${MDS_BENCH_ITERS:-3}
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
BASE="--mock-data --tokenizer-type NullTokenizer --vocab-size 50257 --num-layers 12 --hidden-size 768
      --num-attention-heads 12 --seq-length 1024 --max-position-embeddings 1024 --micro-batch-size $MB
      --global-batch-size $MB --train-iters $ITERS --lr 1e-4 --log-interval 1 --eval-iters 0"
printf '| setting | activation memory (MiB) | peak RSS (MiB) | ms/iteration | losses |\n|---|---|---|---|---|\n'
row() {
    name=$1; shift
    # shellcheck disable=SC2086
    /usr/bin/time -f '%M' -o "$TMP/rss" "$BUILD/mdstrain" $BASE "$@" >"$TMP/log" 2>"$TMP/err" || {
        echo "recompute.sh: '$name' failed" >&2; tail -n 3 "$TMP/err" >&2; return; }
    act=$(sed -n 's/^| activation memory (rank 0)  *| \([0-9]*\) bytes.*/\1/p' "$TMP/err")
    ms=$(sed -n 's/.*elapsed time per iteration (ms): \([0-9.]*\) .*/\1/p' "$TMP/log" | tail -n +2 |
         awk '{ s += $1; n++ } END { printf "%.0f", s / n }')
    losses=$(sed -n 's/.*lm loss: \([^ ]*\) .*/\1/p' "$TMP/log" | tr '\n' ' ')
    printf '| %s | %.1f | %.0f | %s | %s|\n' "$name" "$(echo "$act" | awk '{ print $1 / 1048576 }')" \
        "$(awk '{ print $1 / 1024 }' "$TMP/rss")" "$ms" "$losses"
}
row "none" 
row "selective (\`--recompute-activations\`)" --recompute-activations
row "full, uniform, 1 layer per chunk" --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
row "full, uniform, 4 layers per chunk" --recompute-granularity full --recompute-method uniform --recompute-num-layers 4
row "full, block, 6 of 12 layers" --recompute-granularity full --recompute-method block --recompute-num-layers 6
row "full, block, 12 of 12 layers" --recompute-granularity full --recompute-method block --recompute-num-layers 12
