#!/bin/sh
# test_seqpar.sh - Megatron's --sequence-parallel in mdstrain, over TCP.
# With dropout on (Megatron's default 0.1) the losses and gradient norms
# printed by -v -v to 17 digits, and the saved checkpoints, are bitwise those
# of the same layout without sequence parallelism: TP2 (GPT fp32 and fp16,
# the Llama block in bf16), TP4, TP2 x PP2, TP2 x DP2 with the distributed
# optimizer, TP2 with full recomputation, TP3 in bf16 with an odd B Ts C; the configuration table's
# activation memory shrinks; TP 1 turns the flag off with a note; a sequence
# length not divisible by TP exits 2; HuggingFace folders load and export
# with it.  About 10 s.
. tests/cli/lib.sh
. tests/cli/parallel_lib.sh
no_launcher_env

# ptcp NAME NP FLAGS...: a TINY run over TCP; the exact lines of all ranks in
# $T/NAME, the checkpoint in $T/NAME.ckpt
ptcp() {
    pn=$1 np=$2; shift 2
    # shellcheck disable=SC2086
    tcp "$pn" "$np" slurm $TINY --save "$T/$pn.ckpt" "$@"
    exact "$T/$pn".*.log >"$T/$pn"
    test "$rc" -eq 0 && test "$(wc -l <"$T/$pn")" -eq 5
}
# same REF NAME NP FLAGS...: NAME (FLAGS plus --sequence-parallel) is bitwise
# REF (losses, norms, checkpoint)
same() {
    ref=$1 name=$2 np=$3; shift 3
    if ptcp "$name" "$np" "$@" --sequence-parallel && cmp -s "$T/$ref" "$T/$name" &&
        diff -r "$T/$ref.ckpt" "$T/$name.ckpt" >/dev/null; then
        ok "$name"
    else
        fail "$name"; tail -n 3 "$T/$name.0.err" | sed 's/^/    /' >&2; diff "$T/$ref" "$T/$name" | head -n 4 >&2
    fi
}
mem() { sed -n 's/^| activation memory (rank 0)  *| \([0-9]*\) bytes.*/\1/p' "$T/$1.0.err"; }

check tp2_trains ptcp tp2 2 --tensor-model-parallel-size 2
same tp2 tp2_sp 2 --tensor-model-parallel-size 2
check tp2_sp_named grep -q '^| parallel (TP, PP, DP)  *| 2, 1, 1, sequence parallel;' "$T/tp2_sp.0.err"
check tp2_not_named_without grep -q '^| parallel (TP, PP, DP)  *| 2, 1, 1;' "$T/tp2.0.err"
n=$(mem tp2) s=$(mem tp2_sp)
check mem_figures test -n "$n" -a -n "$s"
check mem_smaller test "$s" -lt "$n"

check tp4_trains ptcp tp4 4 --tensor-model-parallel-size 4
same tp4 tp4_sp 4 --tensor-model-parallel-size 4
check tp2pp2_trains ptcp tp2pp2 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
same tp2pp2 tp2pp2_sp 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
check tp2dp2_trains ptcp tp2dp2 4 --tensor-model-parallel-size 2 --use-distributed-optimizer --micro-batch-size 2
same tp2dp2 tp2dp2_sp 4 --tensor-model-parallel-size 2 --use-distributed-optimizer --micro-batch-size 2
same tp2 tp2_sp_uniform1 2 --tensor-model-parallel-size 2 --recompute-granularity full --recompute-method uniform \
    --recompute-num-layers 1
same tp2 tp2_sp_block3 2 --tensor-model-parallel-size 2 --recompute-granularity full --recompute-method block \
    --recompute-num-layers 3
check tp2_fp16_trains ptcp tp2_fp16 2 --tensor-model-parallel-size 2 --fp16 --initial-loss-scale 65536 \
    --micro-batch-size 2
same tp2_fp16 tp2_fp16_sp 2 --tensor-model-parallel-size 2 --fp16 --initial-loss-scale 65536 --micro-batch-size 2
LLAMA="--position-embedding-type rope --normalization RMSNorm --swiglu --ffn-hidden-size 64 --group-query-attention
       --num-query-groups 2 --disable-bias-linear --untie-embeddings-and-output-weights --bf16"
# shellcheck disable=SC2086
check llama_tp2_trains ptcp llama_tp2 2 $LLAMA --tensor-model-parallel-size 2
# shellcheck disable=SC2086
same llama_tp2 llama_tp2_sp 2 $LLAMA --tensor-model-parallel-size 2
# shellcheck disable=SC2086
same llama_tp2 llama_tp2_sp_block1 2 $LLAMA --tensor-model-parallel-size 2 --recompute-granularity full \
    --recompute-method block --recompute-num-layers 1
# A 16-bit run stores the norms' outputs in 16 bits and gathers them as
# floats: where B x Ts x C is odd (TP3, hidden size 45, 5 tokens a rank)
# they stay fp32, the same bits either way
ODD="--hidden-size 45 --num-attention-heads 3 --seq-length 15 --bf16"
# shellcheck disable=SC2086
check tp3_odd_trains ptcp tp3_odd 3 $ODD --tensor-model-parallel-size 3
# shellcheck disable=SC2086
same tp3_odd tp3_odd_sp 3 $ODD --tensor-model-parallel-size 3

# HuggingFace folders: exported from a sequence-parallel run's checkpoint
# (with the flag given), loaded into TP2 runs with and without it
# shellcheck disable=SC2086
run_expect export_sp 0 "exported iteration 5" "$MDSTRAIN" $TINY --tensor-model-parallel-size 2 --sequence-parallel \
    --load "$T/tp2_sp.ckpt" --export-hf "$T/hf"
check hf_tp2_trains ptcp hf_tp2 2 --tensor-model-parallel-size 2 --load-hf "$T/hf"
same hf_tp2 hf_tp2_sp 2 --tensor-model-parallel-size 2 --load-hf "$T/hf"

# and hence one process's: TP2 with sequence parallelism against TP 1
# (whose --sequence-parallel is turned off with Megatron's note)
# shellcheck disable=SC2086
"$MDSTRAIN" $(echo $TINY | sed 's/ -q / /') --sequence-parallel >"$T/one.log" 2>"$T/one.err"
check tp1_runs test $? -eq 0
check tp1_note grep -q 'note: disabling sequence parallelism because tensor model parallelism is disabled' "$T/one.err"
check tp1_not_named grep -q '^| parallel (TP, PP, DP)  *| 1, 1, 1;' "$T/one.err"
exact "$T/one.log" >"$T/ref"
check tp2_sp_close close "$T/tp2_sp"

# Megatron's rule: the sequence splits evenly over the TP ranks
# shellcheck disable=SC2086
run_expect seq_not_divisible 2 '--seq-length 15 is not divisible by the tensor model parallel size 2 with --sequence-parallel' \
    "$MDSTRAIN" $(echo $TINY | sed 's/--seq-length 16/--seq-length 15/') --tensor-model-parallel-size 2 \
    --sequence-parallel
finish
