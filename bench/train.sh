#!/bin/sh
# train.sh - `make bench`, training: tokens/s and TFLOP/s of a small GPT on the
# CPU with build/mdstrain, against PyTorch training the same model
# (bench/torch_gpt.py) in the same run on the same machine.
#
# Model: 6 layers, hidden 384, 6 heads, seq 256, micro-batch 4, no dropout (as
# the torch model), GPT-2 vocabulary
# 50257 padded to 50304, tied embeddings, AdamW, fp32, --mock-data.  Each run
# does ITERS iterations and averages the time of those after the first SKIP
# (steady state).  The two programs run alternately, ROUNDS times each, and the
# best round of each counts, which damps other load on the machine.  FLOPs per
# token are mdstrain's formula (train/model.c gpt_flops_per_token), applied
# to both.  PyTorch is python3-torch (Debian's, /usr/bin/python3 by default,
# MDS_TORCH_PYTHON to change); without it that part is skipped.  Torch uses
# whatever libblas.so.3 the system selects; the line says which.
BUILD=${BUILD:-build}
export MDS_DEVICE=${MDS_DEVICE:-cpu}   # the CPU backend against CPU baselines
ITERS=${MDS_BENCH_ITERS:-6}
SKIP=2
ROUNDS=${MDS_BENCH_ROUNDS:-2}
L=6 C=384 NH=6 T=256 MB=4 V=50304
# MDS_BENCH_LLAMA=1: the Llama block of the same size instead (RoPE, RMSNorm,
# SwiGLU of Megatron's default width int(8C/3/64)*64 = 1024, 2 key/value heads,
# no biases, untied output layer), against the same model in torch
LLAMA=${MDS_BENCH_LLAMA:-0}
G=2 FFN=1024
PY=${MDS_TORCH_PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || PY=python3
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT

if [ "$LLAMA" = 1 ]; then
    MODEL_FLAGS="--position-embedding-type rope --normalization RMSNorm --swiglu --ffn-hidden-size $FFN
                 --group-query-attention --num-query-groups $G --disable-bias-linear --untie-embeddings-and-output-weights"
    TORCH_FLAGS="--llama $G $FFN"
    WHAT="the Llama block (RoPE, RMSNorm, SwiGLU $FFN, $G query groups, no biases, untied)"
else
    MODEL_FLAGS=""
    TORCH_FLAGS=""
    WHAT="a small GPT"
fi
tok_s() { echo "$1" | awk -v n=$((MB * T)) '{printf "%.1f", n * 1000 / $1}'; }
tflops() { echo "$1" | awk -v n=$((MB * T)) -v f="$FPT" '{printf "%.3f", n * 1000 / $1 * f / 1e12}'; }
best() { sort -n | head -1; }

# mdstrain's own FLOPs per token (its configuration table): one definition
# for both programs
# shellcheck disable=SC2086
FPT=$("$BUILD/mdstrain" --mock-data --num-layers $L --hidden-size $C --num-attention-heads $NH $MODEL_FLAGS \
          --seq-length $T --max-position-embeddings $T --micro-batch-size 1 --global-batch-size 1 --train-iters 1 \
          --lr 1e-4 --eval-iters 0 2>&1 >/dev/null | sed -n 's/^| model FLOPs per token *| \([0-9]*\) .*/\1/p')

mds_once() {
    # shellcheck disable=SC2086
    "$BUILD/mdstrain" -q --mock-data --num-layers $L --hidden-size $C --num-attention-heads $NH $MODEL_FLAGS \
        --seq-length $T --max-position-embeddings $T --micro-batch-size $MB --global-batch-size $MB \
        --train-iters "$ITERS" --lr 1e-4 --log-interval 1 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 2>&1 |
        awk -v skip=$SKIP '/elapsed time per iteration/ {
            for (i = 1; i < NF; i++) if ($i == "(ms):") { n++; if (n > skip) { s += $(i + 1); k++ } } }
            END { if (k) printf "%.1f\n", s / k }'
}

HAVE_TORCH=0
if "$PY" -c 'import torch' 2>/dev/null; then HAVE_TORCH=1; fi

echo "== 5$( [ "$LLAMA" = 1 ] && echo b). training $WHAT on the CPU ($L layers, hidden $C, $NH heads, seq $T, micro-batch $MB, vocab $V, AdamW, fp32; $(nproc) threads)"
echo "   $(awk -v f="$FPT" 'BEGIN{printf "%.1f", f / 1e6}') MFLOP per token; mean of iterations $((SKIP + 1))..$ITERS, best of $ROUNDS rounds"
: > "$TMP/mds"; : > "$TMP/torch"
r=0
while [ $r -lt "$ROUNDS" ]; do
    mds_once >> "$TMP/mds"
    if [ $HAVE_TORCH = 1 ]; then
        # shellcheck disable=SC2086
        "$PY" bench/torch_gpt.py --layers $L --hidden $C --heads $NH --seq $T --batch $MB $TORCH_FLAGS \
            --vocab $V --iters "$ITERS" --skip $SKIP > "$TMP/t.out" 2>&1
        awk '/^torch ms_per_iter/ {print $3}' "$TMP/t.out" >> "$TMP/torch"
        grep '^torch ms_per_iter' "$TMP/t.out" > "$TMP/tinfo"
    fi
    r=$((r + 1))
done
MDS=$(best < "$TMP/mds")
if [ -z "$MDS" ]; then
    echo "   mdstrain: no timing (did it run? try $BUILD/mdstrain --mock-data ... by hand)"; exit 1
fi
printf '   %-24s%s ms/iter   %s tokens/s   %s TFLOP/s\n' "mdstrain" "$MDS" "$(tok_s "$MDS")" "$(tflops "$MDS")"
if [ $HAVE_TORCH = 0 ]; then
    echo "   torch: 'import torch' fails for $PY (apt-get install python3-torch); skipped"
    exit 0
fi
TORCH=$(best < "$TMP/torch")
if [ -z "$TORCH" ]; then
    echo "   torch: bench/torch_gpt.py failed:"; tail -5 "$TMP/t.out" | sed 's/^/     /'; exit 0
fi
VER=$(awk '{for (i = 1; i < NF; i++) if ($i == "version") print $(i + 1)}' "$TMP/tinfo")
BLAS=$(awk '{for (i = 1; i < NF; i++) if ($i == "blas") print $(i + 1)}' "$TMP/tinfo")
printf '   %-24s%s ms/iter   %s tokens/s   %s TFLOP/s\n' "torch $VER" "$TORCH" "$(tok_s "$TORCH")" "$(tflops "$TORCH")"
echo "   mdstrain / torch = $(echo "$TORCH $MDS" | awk '{printf "%.2f", $1 / $2}')x   (target >= 1.5x)"
echo "   torch's BLAS: $BLAS"
case "$BLAS" in
*openblas*|*mkl*|*blis*) ;;
*) echo "   note: that is not an optimised BLAS (Debian's default is the netlib reference, about 40x slower here);"
   echo "         'apt-get install libopenblas0-pthread' gives torch a fair one (for the benchmark only, mds does not use it)" ;;
esac
