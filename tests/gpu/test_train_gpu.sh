#!/bin/sh
# test_train_gpu.sh - mdstrain on the GPU against the CPU (make test-gpu; not
# part of make test): the same short runs with --device cpu and --device
# cuda, whose per-iteration losses must agree within a relative 1e-5 (fp32:
# the CUDA kernels repeat the CPU's arithmetic except the matmuls, which sum
# in cuBLAS's order, so the losses drift apart by fp32 rounding only), and
# whose grad norms within 1e-4.  Two models: GPT-2-like (LayerNorm, GELU,
# learned positions, tied embeddings, dropout on by default) and Llama-like
# (RMSNorm, SwiGLU, RoPE, grouped-query attention, no biases), 5
# iterations each, GPT with --embed-layernorm, and one --bf16 run (losses within 1e-2: rounding to bf16
# amplifies the matmuls' differences).  Fails when no GPU is found.
. tests/cli/lib.sh
MDSTRAIN=${MDSTRAIN:-$BUILD/mdstrain}
DATA=tests/data/golden/tiny_text_document
unset MDS_DEVICE
GPT="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64
     --micro-batch-size 2 --global-batch-size 4"
LLAMA="$GPT --normalization RMSNorm --swiglu --position-embedding-type rope --group-query-attention
       --num-query-groups 2 --disable-bias-linear"
COMMON="--data-path $DATA --split 1,0,0 --train-iters 5 --lr 1e-3 --log-interval 1 --eval-iters 0 -v -v"

# field loss|norm LOG: the full-precision values -v -v prints per iteration
# (" [rank 0] lm loss X grad norm Y"; the log line rounds the norm to 3 decimals)
field() {
    case $1 in
    loss) sed -n 's/^ \[rank [0-9]*\] lm loss \([^ ]*\) grad norm .*/\1/p' "$2" ;;
    *)    sed -n 's/^ \[rank [0-9]*\] lm loss [^ ]* grad norm \([^ ]*\)$/\1/p' "$2" ;;
    esac
}
# close NAME FIELD A B RTOL: every value of FIELD in logs A and B within RTOL
close() {
    field "$2" "$3" >"$T/a"; field "$2" "$4" >"$T/b"
    if [ "$(wc -l <"$T/a")" -ne 5 ] || [ "$(wc -l <"$T/b")" -ne 5 ]; then
        fail "$1 (expected 5 iterations of '$2' on each side)"; return
    fi
    if paste "$T/a" "$T/b" | awk -v r="$5" '{ d = $1 - $2; if (d < 0) d = -d; m = $1 < 0 ? -$1 : $1;
            if (d > r * m) { print "    " NR ": cpu " $1 " cuda " $2 > "/dev/stderr"; bad = 1 } } END { exit bad }'
    then ok "$1"; else fail "$1"; fi
}

run() {   # NAME DEVICE ARGS...: the log in $T/NAME.log, stderr in $T/NAME.err
    name=$1 dev=$2; shift 2
    # shellcheck disable=SC2086
    "$MDSTRAIN" --device "$dev" $COMMON "$@" >"$T/$name.log" 2>"$T/$name.err"
    rc=$?
    if [ "$rc" -ne 0 ]; then fail "$name (exit $rc)"; sed 's/^/    /' "$T/$name.err" >&2; return 1; fi
    ok "$name"
}

# shellcheck disable=SC2086
if ! run gpt_cuda cuda $GPT; then finish; fi
check table_names_cuda grep -q '^| backend  *| cuda (' "$T/gpt_cuda.err"
# shellcheck disable=SC2086
run gpt_cpu cpu $GPT
close gpt_losses loss "$T/gpt_cpu.log" "$T/gpt_cuda.log" 1e-5
close gpt_grad_norms norm "$T/gpt_cpu.log" "$T/gpt_cuda.log" 1e-4
# shellcheck disable=SC2086
run llama_cuda cuda $LLAMA && run llama_cpu cpu $LLAMA
close llama_losses loss "$T/llama_cpu.log" "$T/llama_cuda.log" 1e-5
# bigscience's embedding LayerNorm (the encoder backward's positions-only call)
# shellcheck disable=SC2086
run embedln_cuda cuda $GPT --embed-layernorm && run embedln_cpu cpu $GPT --embed-layernorm
close embedln_losses loss "$T/embedln_cpu.log" "$T/embedln_cuda.log" 1e-5
close embedln_grad_norms norm "$T/embedln_cpu.log" "$T/embedln_cuda.log" 1e-4
# shellcheck disable=SC2086
run bf16_cuda cuda $GPT --bf16 && run bf16_cpu cpu $GPT --bf16
close bf16_losses loss "$T/bf16_cpu.log" "$T/bf16_cuda.log" 1e-2
# the same GPU run twice: bitwise the same losses (deterministic kernels)
# shellcheck disable=SC2086
run gpt_cuda2 cuda $GPT
field loss "$T/gpt_cuda.log" >"$T/l1"; field loss "$T/gpt_cuda2.log" >"$T/l2"
check gpu_deterministic cmp -s "$T/l1" "$T/l2"
finish
