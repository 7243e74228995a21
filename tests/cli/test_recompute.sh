#!/bin/sh
# test_recompute.sh - activation recomputation in mdstrain (Megatron's
# --recompute-granularity/--recompute-method/--recompute-num-layers,
# --recompute-activations, Megatron-DeepSpeed's --checkpoint-activations and
# --checkpoint-num-layers).  With dropout on (Megatron's default 0.1), the
# losses and gradient norms printed by -v -v to 17 digits, and the saved
# checkpoints, are bitwise those of the run that keeps every activation: GPT
# in fp32, bf16 and fp16, the Llama block, and TP2, PP2 and DP2 (ZeRO-1,
# bf16) over TCP; the configuration table's activation memory shrinks;
# Megatron's argument rules exit 2 with its messages.  About 15 s.
. tests/cli/lib.sh
. tests/cli/parallel_lib.sh
no_launcher_env

# one TINY run: exact loss/norm lines in $T/NAME, the table in $T/NAME.err,
# a checkpoint in $T/NAME.ckpt
run() {
    name=$1; shift
    # shellcheck disable=SC2086
    "$MDSTRAIN" $TINY --save "$T/$name.ckpt" "$@" >"$T/$name.log" 2>"$T/$name.err"
    rc=$?
    exact "$T/$name.log" >"$T/$name"
    test "$rc" -eq 0 && test "$(wc -l <"$T/$name")" -eq 5
}
# equal REF NAME FLAGS...: NAME's run bitwise REF's (losses, norms, checkpoint)
equal() {
    ref=$1 name=$2; shift 2
    if run "$name" "$@" && cmp -s "$T/$ref" "$T/$name" && diff -r "$T/$ref.ckpt" "$T/$name.ckpt" >/dev/null; then
        ok "$name"
    else
        fail "$name"; sed 's/^/    /' "$T/$name.err" | tail -n 3 >&2; diff "$T/$ref" "$T/$name" | head -n 4 >&2
    fi
}
mem() { sed -n 's/^| activation memory (rank 0)  *| \([0-9]*\) bytes.*/\1/p' "$T/$1.err"; }

run none
check none_trains test "$(wc -l <"$T/none")" -eq 5
check none_dropout_on grep -q '^| dropout hidden / attention  *| 0.1 / 0.1 ' "$T/none.err"
check none_named grep -q '^| activation recomputation  *| none (attention keeps no T x T probabilities) ' "$T/none.err"
equal none uniform1 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
equal none uniform3 --recompute-granularity full --recompute-method uniform --recompute-num-layers 3
equal none uniform4 --recompute-granularity full --recompute-method uniform --recompute-num-layers 4
equal none block1 --recompute-granularity full --recompute-method block --recompute-num-layers 1
equal none block3 --recompute-granularity full --recompute-method block --recompute-num-layers 3
equal none block9 --recompute-granularity full --recompute-method block --recompute-num-layers 9
equal none ckpt_act --checkpoint-activations
equal none ckpt_act2 --checkpoint-activations --checkpoint-num-layers 2 --deepspeed-activation-checkpointing \
    --partition-activations
equal none selective --recompute-activations
equal none selective2 --recompute-granularity selective
check uniform1_named grep -q '^| activation recomputation  *| full, uniform: 4 chunk(s) of 1 layer(s) per stage ' "$T/uniform1.err"
check uniform3_named grep -q '^| activation recomputation  *| full, uniform: 2 chunk(s) of 3 layer(s) per stage ' "$T/uniform3.err"
check block3_named grep -q '^| activation recomputation  *| full, block: 3 of 4 layers per stage ' "$T/block3.err"
grep '^|' "$T/uniform1.err" >"$T/u1.table"; grep '^|' "$T/ckpt_act.err" >"$T/ca.table"
check ckpt_act_is_uniform1 cmp -s "$T/u1.table" "$T/ca.table"
check selective_named grep -q '^| activation recomputation  *| selective (attention keeps no T x T probabilities) ' "$T/selective.err"

# the activation memory: full recomputation keeps less, selective the same
# (there is no T x T tensor to drop); more recomputed layers, less memory
n=$(mem none) u1=$(mem uniform1) u3=$(mem uniform3) b1=$(mem block1) b3=$(mem block3) s=$(mem selective)
check mem_figures test -n "$n" -a -n "$u1" -a -n "$u3" -a -n "$b1" -a -n "$b3" -a -n "$s"
check mem_uniform1_smaller test "$u1" -lt "$n"
check mem_uniform_falls test "$u1" -lt "$u3"
check mem_block_falls test "$b3" -lt "$b1" -a "$b1" -lt "$n"
check mem_selective_same test "$s" -eq "$n"

# 16-bit and the Llama block
run none_bf16 --bf16
equal none_bf16 uniform2_bf16 --bf16 --recompute-granularity full --recompute-method uniform --recompute-num-layers 2
run none_fp16 --fp16 --initial-loss-scale 65536
equal none_fp16 block2_fp16 --fp16 --initial-loss-scale 65536 --recompute-granularity full --recompute-method block \
    --recompute-num-layers 2
LLAMA="--position-embedding-type rope --normalization RMSNorm --swiglu --ffn-hidden-size 64 --group-query-attention
       --num-query-groups 2 --disable-bias-linear --untie-embeddings-and-output-weights"
# shellcheck disable=SC2086
run llama $LLAMA
# shellcheck disable=SC2086
equal llama llama_uniform1 $LLAMA --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
# shellcheck disable=SC2086
run llama_bf16 $LLAMA --bf16
# shellcheck disable=SC2086
equal llama_bf16 llama_block3_bf16 $LLAMA --bf16 --recompute-granularity full --recompute-method block \
    --recompute-num-layers 3

# tensor, pipeline and data parallelism over TCP: each layout's run with
# recomputation is bitwise the same layout's without (TP recomputes its
# all-reduces; PP2 gives each stage 2 layers)
# ptcp NAME NP FLAGS...: the exact lines of all ranks in $T/NAME
ptcp() {
    name=$1 np=$2; shift 2
    # shellcheck disable=SC2086
    tcp "$name" "$np" slurm $TINY "$@"
    exact "$T/$name".*.log >"$T/$name"
    test "$rc" -eq 0 && test "$(wc -l <"$T/$name")" -eq 5
}
check tp2_trains ptcp tp2 2 --tensor-model-parallel-size 2
ptcp tp2_uniform1 2 --tensor-model-parallel-size 2 --recompute-granularity full --recompute-method uniform \
    --recompute-num-layers 1
check tp2_uniform1_bitwise cmp -s "$T/tp2" "$T/tp2_uniform1"
check pp2_trains ptcp pp2 2 --pipeline-model-parallel-size 2
ptcp pp2_block1 2 --pipeline-model-parallel-size 2 --recompute-granularity full --recompute-method block \
    --recompute-num-layers 1
check pp2_block1_bitwise cmp -s "$T/pp2" "$T/pp2_block1"
ptcp pp2_ckpt 2 --pipeline-model-parallel-size 2 --checkpoint-activations --checkpoint-num-layers 2
check pp2_ckpt_bitwise cmp -s "$T/pp2" "$T/pp2_ckpt"
check dp2_trains ptcp dp2 2 --use-distributed-optimizer --bf16
ptcp dp2_uniform2 2 --use-distributed-optimizer --bf16 --recompute-granularity full --recompute-method uniform \
    --recompute-num-layers 2
check dp2_uniform2_bitwise cmp -s "$T/dp2" "$T/dp2_uniform2"
check pp2_per_stage grep -q '^| activation recomputation  *| full, block: 1 of 2 layers per stage ' "$T/pp2_block1.0.err"

# Megatron's rules (validate_args, TransformerConfig): exit 2
# shellcheck disable=SC2086
run_expect full_needs_method 2 'using recompute_granularity: full so recompute_method must be "block" or "uniform"' \
    "$MDSTRAIN" $TINY --recompute-granularity full
# shellcheck disable=SC2086
run_expect full_needs_num_layers 2 'when using recompute_granularity: full recompute_num_layers must be between 1 and num_layers_per_pipeline_rank: 2 ' \
    "$MDSTRAIN" $TINY --pipeline-model-parallel-size 2 --recompute-granularity full --recompute-method block
# shellcheck disable=SC2086
run_expect selective_no_method 2 'recompute method is not yet supported for selective recomputing granularity' \
    "$MDSTRAIN" $TINY --recompute-activations --recompute-method uniform
# shellcheck disable=SC2086
run_expect selective_no_num_layers 2 'when using recompute_granularity: selective recompute_num_layers must be None' \
    "$MDSTRAIN" $TINY --recompute-granularity selective --recompute-num-layers 2
# shellcheck disable=SC2086
run_expect ckpt_act_with_selective 2 'recompute method is not yet supported for selective' \
    "$MDSTRAIN" $TINY --checkpoint-activations --recompute-activations
# shellcheck disable=SC2086
run_expect bad_granularity 2 "option '--recompute-granularity' must be full or selective, got 'layer'" \
    "$MDSTRAIN" $TINY --recompute-granularity layer
# shellcheck disable=SC2086
run_expect bad_method 2 "option '--recompute-method' must be uniform or block, got 'all'" \
    "$MDSTRAIN" $TINY --recompute-granularity full --recompute-method all --recompute-num-layers 1
# shellcheck disable=SC2086
run_expect zero_num_layers 2 "option '--recompute-num-layers' needs an integer in \[1, " \
    "$MDSTRAIN" $TINY --recompute-granularity full --recompute-method uniform --recompute-num-layers 0
# shellcheck disable=SC2086
run_expect zero_ckpt_layers 2 "option '--checkpoint-num-layers' needs an integer in \[1, " \
    "$MDSTRAIN" $TINY --checkpoint-activations --checkpoint-num-layers 0
# a method alone recomputes nothing (Megatron ignores it), and says so
# shellcheck disable=SC2086
"$MDSTRAIN" $(echo $TINY | sed 's/ -q / /') --recompute-method block >"$T/alone.log" 2>"$T/alone.err"
check method_alone_runs test $? -eq 0
check method_alone_note grep -q 'note: --recompute-method without --recompute-granularity full or --checkpoint-activations recomputes nothing' "$T/alone.err"
check method_alone_none grep -q '^| activation recomputation  *| none ' "$T/alone.err"
finish
