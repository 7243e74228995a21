#!/bin/sh
# test_torchdist.sh - mdstrain --load of Megatron's torch_dist checkpoints
# (tests/data/torch_dist, written by Megatron-Core's own save):
#  - each of the six fixtures (TP 1, TP 2, PP 2, TP 2 x PP 2) and the bf16
#    copy of the Llama one, loaded at TP 1 PP 1, gives Megatron's logits on a fixed batch (make_golden.py: Megatron
#    loaded the same fixture and ran its forward) within --check-logits' 1e-4
#    of the largest logit; every fixture measures about 1e-7 (fp32, the sums
#    in another order);
#  - loaded at TP 2, PP 2 and TP 2 x PP 2, trained one iteration at lr 0
#    (weights unchanged) and saved, the merged export gives the same logits;
#  - the AdamW state and schedule of llama_optim (Megatron's model-space
#    optimizer layout, written by make_optim.py) restored;
#  - Megatron's load flags: without --no-load-optim (or --finetune) a
#    checkpoint without optimizer state stops, without --no-load-rng one
#    without RNG state stops at its own TP/PP; the iteration comes from the
#    common state, consumed samples from Megatron's saved args (0 without
#    them), whose model sizes must be this run's;
#  - --no-load-optim and --finetune on mdstrain's own checkpoints;
#  - damaged or mismatching checkpoints: one line, exit 1.
# About 10 s.
. tests/cli/lib.sh
. tests/cli/parallel_lib.sh
no_launcher_env
D=tests/data/torch_dist

# make_torch_dist.py's models
GPT="--tokenizer-type NullTokenizer --vocab-size 64 --make-vocab-size-divisible-by 1
     --num-layers 2 --hidden-size 16 --num-attention-heads 4 --max-position-embeddings 8"
LLAMA="$GPT --position-embedding-type rope --normalization RMSNorm --swiglu --ffn-hidden-size 32
       --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights --disable-bias-linear"
flags() { case $1 in gpt*) echo "$GPT" ;; *) echo "$LLAMA" ;; esac; }

# ---- TP 1 PP 1: Megatron's logits ----
for f in gpt llama gpt_tp2 llama_tp2 llama_pp2 llama_tp2_pp2 llama_bf16; do
    # shellcheck disable=SC2086
    run_expect "${f}_logits" 0 "" "$MDSTRAIN" $(flags $f) --load "$D/$f" --check-logits "$D/$f.logits"
    check "${f}_logits_match" grep -q '^logits match' "$T/out"
done
# the check can fail: another fixture's weights
# shellcheck disable=SC2086
run_expect logits_can_fail 1 "" "$MDSTRAIN" $LLAMA --load "$D/llama_tp2" --check-logits "$D/llama.logits"
check logits_can_fail_says_differ grep -q '^logits differ' "$T/out"
# bf16 storage is read as the bf16 values: the fp32 weights they were rounded from are another model
# shellcheck disable=SC2086
run_expect bf16_is_not_fp32 1 "" "$MDSTRAIN" $LLAMA --load "$D/llama" --check-logits "$D/llama_bf16.logits"

# ---- other grids: load, one step at lr 0, save, export: Megatron's logits again ----
ZERO="--mock-data --seq-length 8 --micro-batch-size 1 --global-batch-size 2 --train-iters 1 --lr 0 --eval-iters 0 -q"
for f in gpt llama_tp2_pp2; do
    F=$(flags $f)
    for lay in tp2 pp2 tp2pp2; do
        case $lay in
            tp2) P="--tensor-model-parallel-size 2" np=2 ;;
            pp2) P="--pipeline-model-parallel-size 2" np=2 ;;
            *) P="--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2" np=4 ;;
        esac
        # shellcheck disable=SC2086
        tcp "${f}_$lay" $np torch $F $P $ZERO --load "$D/$f" --finetune --save "$T/${f}_$lay"
        # shellcheck disable=SC2086
        "$MDSTRAIN" $F $P --load "$T/${f}_$lay" --export-hf "$T/${f}_${lay}_hf" >/dev/null 2>"$T/err"
        # shellcheck disable=SC2086
        "$MDSTRAIN" $F --load-hf "$T/${f}_${lay}_hf" --check-logits "$D/$f.logits" >"$T/out" 2>>"$T/err"
        if [ "$rc" -eq 0 ] && grep -q '^logits match' "$T/out"; then ok "${f}_${lay}_logits"
        else fail "${f}_${lay}_logits (exit $rc)"; cat "$T/${f}_$lay".*.err "$T/err" "$T/out" >&2; fi
    done
done

# ---- Megatron's load flags ----
RUN="--mock-data --seq-length 8 --micro-batch-size 1 --global-batch-size 2 --train-iters 3 --lr 1e-3
     --log-interval 1 --eval-iters 0"
# shellcheck disable=SC2086
run_expect needs_no_load_optim 1 "^mdstrain: '.*llama/iter_0000001': no optimizer state \(optimizer\.\*\) in the checkpoint$" \
    "$MDSTRAIN" $LLAMA $RUN --load "$D/llama"
# shellcheck disable=SC2086
run_expect needs_no_load_rng 1 "no RNG state \(rng_state\) in the checkpoint$" \
    "$MDSTRAIN" $LLAMA $RUN --load "$D/llama" --no-load-optim
# at another TP/PP than the checkpoint's (1, 1 without saved args) Megatron ignores the RNG state
# shellcheck disable=SC2086
tcp rng_other_grid 2 torch $LLAMA $RUN --load "$D/llama" --no-load-optim --tensor-model-parallel-size 2 --save "$T/grid"
check rng_ignored_at_other_grid test "$rc" -eq 0 -a "$(cat "$T/grid/latest_checkpointed_iteration.txt")" = 3
# DP 2 with the distributed optimizer: each rank loads the whole model; DP 1's losses
# shellcheck disable=SC2086
"$MDSTRAIN" $LLAMA $RUN -q -v -v --load "$D/llama" --finetune >"$T/dp1.log" 2>&1
# shellcheck disable=SC2086
tcp dp2 2 torch $LLAMA $RUN -q -v -v --load "$D/llama" --finetune --use-distributed-optimizer
exact "$T/dp1.log" >"$T/ref"
exact "$T"/dp2.*.log >"$T/dp2"
check dp2_losses_as_dp1 sh -c "test $rc -eq 0 -a \$(wc -l <'$T/ref') -eq 3 && paste -d' ' '$T/ref' '$T/dp2' | awk '
    { d = \$1 - \$3; if (d < 0) d = -d; if (d > 2e-7 * \$1) bad = 1 } END { exit bad }'"
# shellcheck disable=SC2086
run_expect resume_at_iteration 0 "successfully loaded torch_dist checkpoint from .* at iteration 1$" \
    "$MDSTRAIN" $LLAMA $RUN --load "$D/llama" --no-load-optim --no-load-rng
check consumed_from_zero grep -q "could not find arguments in the checkpoint" "$T/err"
check trains_iterations_2_3 sh -c "grep -q 'iteration        2/       3' '$T/out' && ! grep -q 'iteration        1/' '$T/out'"
# Megatron's own args in the common state (llama_args, iteration 3): consumed samples 6 from them,
# the RNG state asked for at their TP 1 PP 1, the model's sizes compared (check_checkpoint_args)
# shellcheck disable=SC2086
run_expect args_logits 0 "" "$MDSTRAIN" $LLAMA --load "$D/llama_args" --check-logits "$D/llama.logits"
check args_logits_match grep -q '^logits match' "$T/out"
# shellcheck disable=SC2086
run_expect args_rng 1 "'.*llama_args/iter_0000003': no RNG state \(rng_state\) in the checkpoint$" \
    "$MDSTRAIN" $LLAMA $RUN --train-iters 5 --load "$D/llama_args" --no-load-optim
# shellcheck disable=SC2086
run_expect args_resume 0 "at iteration 3$" "$MDSTRAIN" $LLAMA $RUN --train-iters 5 --load "$D/llama_args" --no-load-optim --no-load-rng
check args_consumed_samples grep -q 'iteration        4/       5 | consumed samples:            8 |' "$T/out"
check args_no_could_not_find sh -c "! grep -q 'could not find arguments' '$T/err'"
# 2 heads of 8 and 1 query group: the same QKV shape, other args
# shellcheck disable=SC2086
run_expect args_heads 1 "^mdstrain: '.*llama_args/iter_0000003': num_attention_heads is 4 in the checkpoint's args but 2 in this run$" \
    "$MDSTRAIN" $(echo $LLAMA | sed 's/--num-attention-heads 4/--num-attention-heads 2/;s/--num-query-groups 2/--num-query-groups 1/') \
    $RUN --train-iters 5 --load "$D/llama_args" --no-load-optim --no-load-rng
# AdamW state in the model-space layout (llama_optim, make_optim.py): restored with the schedule
# shellcheck disable=SC2086
run_expect optim_resume 0 "at iteration 4 \(with the optimizer state\)$" \
    "$MDSTRAIN" $LLAMA $RUN --train-iters 6 --load "$D/llama_optim"
check optim_schedule grep -q 'iteration        5/       6 | consumed samples:           10 | .* learning rate: 1.666667E-04 |' "$T/out"
# and into DP 2 with the distributed optimizer (each rank its shard of the moments): DP 1's losses
# shellcheck disable=SC2086
"$MDSTRAIN" $LLAMA $RUN -q -v -v --train-iters 6 --load "$D/llama_optim" >"$T/o1.log" 2>&1
# shellcheck disable=SC2086
tcp optim_dp2 2 torch $LLAMA $RUN -q -v -v --train-iters 6 --load "$D/llama_optim" --use-distributed-optimizer
exact "$T/o1.log" >"$T/ref"
exact "$T"/optim_dp2.*.log >"$T/o2"
check optim_dp2_losses_as_dp1 sh -c "test $rc -eq 0 -a \$(wc -l <'$T/ref') -eq 2 && paste -d' ' '$T/ref' '$T/o2' | awk '
    { d = \$1 - \$3; if (d < 0) d = -d; if (d > 2e-7 * \$1) bad = 1 } END { exit bad }'"
# shellcheck disable=SC2086
run_expect optim_schedule_checked 1 "lr scheduler decay steps is 12 in the checkpoint but 14 in this run" \
    "$MDSTRAIN" $LLAMA $RUN --train-iters 7 --load "$D/llama_optim"
# shellcheck disable=SC2086
run_expect finetune_from_zero 0 "at iteration 0$" "$MDSTRAIN" $LLAMA $RUN --load "$D/llama" --finetune
check finetune_trains_3 grep -q 'iteration        1/       3' "$T/out"
# shellcheck disable=SC2086
run_expect flag_needs_load 2 "--no-load-optim goes with --load" "$MDSTRAIN" $LLAMA $RUN --no-load-optim
# shellcheck disable=SC2086
run_expect export_refused 1 "is a torch_dist checkpoint; --export-hf reads mdstrain's own$" \
    "$MDSTRAIN" $LLAMA --load "$D/llama" --export-hf "$T/x"

# --no-load-optim and --finetune on mdstrain's own checkpoints: the weights of iteration 3 either way
# shellcheck disable=SC2086
"$MDSTRAIN" $GPT $RUN --save "$T/own" >/dev/null 2>&1
for fl in no-load-optim finetune; do
    # shellcheck disable=SC2086
    run_expect "own_$fl" 0 "successfully loaded the weights from .* at iteration 3 \(--$fl: optimizer and schedule afresh\)$" \
        "$MDSTRAIN" $GPT $RUN --train-iters 4 --load "$T/own" --$fl
done
check own_finetune_restarts grep -q 'iteration        1/       4' "$T/out"
# --finetune is a fresh start from the weights: the same losses as a fresh start from their export
# shellcheck disable=SC2086
"$MDSTRAIN" $GPT --load "$T/own" --export-hf "$T/own_hf" >/dev/null 2>&1
# shellcheck disable=SC2086
"$MDSTRAIN" $GPT $RUN -q -v -v --load "$T/own" --finetune >"$T/ft.log" 2>&1
# shellcheck disable=SC2086
"$MDSTRAIN" $GPT $RUN -q -v -v --load-hf "$T/own_hf" >"$T/hf.log" 2>&1
exact "$T/ft.log" >"$T/a"
exact "$T/hf.log" >"$T/b"
check own_finetune_is_fresh_start sh -c "test \$(wc -l <'$T/a') -eq 3 && cmp -s '$T/a' '$T/b'"

# ---- damaged and mismatching checkpoints: one line, exit 1 ----
bad() {   # NAME: a copy of the llama fixture in $T/NAME
    rm -rf "${T:?}/$1"; cp -r "$D/llama" "$T/$1"
}
I=iter_0000001
bad trunc; head -c -100 "$D/llama/$I/__0_0.distcp" >"$T/trunc/$I/__0_0.distcp"
# shellcheck disable=SC2086
run_expect truncated_distcp 1 "^mdstrain: cannot load the checkpoint: '.*trunc/$I/__0_0.distcp': key '.*': truncated \(its item ends at byte [0-9]+\)$" \
    "$MDSTRAIN" $LLAMA --load "$T/trunc" --check-logits "$D/llama.logits"
bad nojson; rm "$T/nojson/$I/metadata.json"
# shellcheck disable=SC2086
run_expect missing_metadata_json 1 "^mdstrain: '.*nojson/$I': a \.metadata without metadata\.json: an unfinished torch_dist save" \
    "$MDSTRAIN" $LLAMA $RUN --load "$T/nojson" --no-load-optim --no-load-rng
bad nodistcp; rm "$T/nodistcp/$I/__0_0.distcp"
# shellcheck disable=SC2086
run_expect missing_distcp 1 "cannot open '.*nodistcp/$I/__0_0.distcp': No such file or directory$" \
    "$MDSTRAIN" $LLAMA --load "$T/nodistcp" --check-logits "$D/llama.logits"
# shellcheck disable=SC2086
run_expect other_model 1 "^mdstrain: rank 0: cannot load the checkpoint: '.*llama/$I/.metadata': key 'decoder.layers.mlp.linear_fc1.weight' has 64 on axis 1 in the checkpoint but 48 in this model$" \
    "$MDSTRAIN" $(echo $LLAMA | sed 's/--ffn-hidden-size 32/--ffn-hidden-size 24/') $RUN --load "$D/llama" --no-load-optim --no-load-rng
# shellcheck disable=SC2086
run_expect tied_run_untied_checkpoint 1 "holds 'output_layer.weight', which this model does not have$" \
    "$MDSTRAIN" $(echo $LLAMA | sed 's/--untie-embeddings-and-output-weights//') --load "$D/llama" --check-logits "$D/llama.logits"
# shellcheck disable=SC2086
run_expect embed_layernorm_refused 2 "embed-layernorm with a torch_dist checkpoint is not supported" \
    "$MDSTRAIN" $GPT $RUN --embed-layernorm --load "$D/gpt" --no-load-optim --no-load-rng
finish
