#!/bin/sh
# test_flags.sh - mdstrain's compatibility flags (issue 12): Megatron's and
# Megatron-DeepSpeed's flags that name what mds does are accepted at those
# values and change no loss, and are refused (exit 2, naming the value) at
# any other; integers with underscores; the batch ramp-up and the token
# schedules in the log line; --train-tokens, --exit-duration-in-mins,
# --kill-switch-path, --override/--use-checkpoint-opt_param-scheduler;
# NullTokenizer's vocabulary; the DeepSpeed config and its conflicts;
# --distributed-timeout-minutes over TCP; mdsprep --vocab.  About 10 s.
. tests/cli/lib.sh
MDSTRAIN=${MDSTRAIN:-$BUILD/mdstrain}
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
TINY="--num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 16 --max-position-embeddings 16
      --micro-batch-size 1"
MOCK="--mock-data --tokenizer-type NullTokenizer --vocab-size 128"
BASE="$MOCK $TINY --global-batch-size 2 --train-iters 4 --lr 1e-3 --log-interval 1 --eval-iters 0 -q"
losses() { sed -n 's/.*lm loss: \([^ ]*\) .*/\1/p' "$1"; }
# field NAME FILE: the value after "NAME: " on each log line
field() { sed -n "s/.*| $1: *\\([^ |]*\\) .*/\\1/p" "$2" | tr '\n' ' '; }

# shellcheck disable=SC2086
"$MDSTRAIN" $BASE >"$T/ref" 2>"$T/err"
check reference_run test $? -eq 0
# every accepted flag at its accepted value: the same losses, bitwise
# shellcheck disable=SC2086
"$MDSTRAIN" $BASE --distributed-backend nccl --data-impl mmap --dataset-impl infer --optimizer adam \
    --DDP-impl local --transformer-impl local --use-mcore-models --context-parallel-size 1 \
    --position-embedding-type learned_absolute --normalization LayerNorm --num-workers 2 --dataloader-type single \
    --no-async-tensor-model-parallel-allreduce --no-gradient-accumulation-fusion --attention-backend auto \
    --use-flash-attn --apply-query-key-layer-scaling --no-query-key-layer-scaling --manual-gc \
    --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --empty-unused-memory-level 2 --no-create-attention-mask-in-dataloader \
    --no-mmap-bin-files --cross-entropy-loss-fusion --tiktoken-pattern v2 \
    --distributed-timeout-minutes 10 --exit-duration-in-mins 1_000 --kill-switch-path "$T/no-switch" \
    --override-opt_param-scheduler --ds-sequence-parallel-size 1 --deepspeed_mpi --cpu-optimizer \
    --deepspeed-activation-checkpointing --partition-activations --no-pipeline-parallel >"$T/all" 2>"$T/err"
check accepted_flags_exit0 test $? -eq 0
check accepted_flags_same_losses sh -c "losses() { sed -n 's/.*lm loss: \\([^ ]*\\) .*/\\1/p' \"\$1\"; }
    [ -n \"\$(losses '$T/ref')\" ] && [ \"\$(losses '$T/ref')\" = \"\$(losses '$T/all')\" ]"
# shellcheck disable=SC2086
{
run_expect gloo 0 "" "$MDSTRAIN" $BASE --distributed-backend gloo
run_expect ddp_torch 0 "" "$MDSTRAIN" $BASE --DDP-impl torch
run_expect refuse_param_gather_alone 2 "^mdstrain: --overlap-param-gather only supported with distributed optimizer$" \
    "$MDSTRAIN" $BASE --overlap-grad-reduce --overlap-param-gather
run_expect refuse_param_gather_no_grad 2 "^mdstrain: Must use --overlap-param-gather with --overlap-grad-reduce$" \
    "$MDSTRAIN" $BASE --use-distributed-optimizer --overlap-param-gather
run_expect refuse_optimizer_sgd 2 "'--optimizer' sgd is not supported" "$MDSTRAIN" $BASE --optimizer sgd
run_expect refuse_dataloader_external 2 "'--dataloader-type' external is not supported" "$MDSTRAIN" $BASE --dataloader-type external
run_expect refuse_dataloader_cyclic 2 "'--dataloader-type' cyclic is not supported" "$MDSTRAIN" $BASE --dataloader-type cyclic
run_expect refuse_cp2 2 "'--context-parallel-size' 2 is not supported" "$MDSTRAIN" $BASE --context-parallel-size 2
run_expect te 0 "" "$MDSTRAIN" $BASE --transformer-impl transformer_engine
run_expect refuse_inference_optimized 2 "'--transformer-impl' inference_optimized is not supported" "$MDSTRAIN" $BASE --transformer-impl inference_optimized
run_expect refuse_data_impl_lazy 2 "'--data-impl' lazy is not supported" "$MDSTRAIN" $BASE --data-impl lazy
run_expect refuse_backend_mpi 2 "'--distributed-backend' must be nccl or gloo, got 'mpi'" "$MDSTRAIN" $BASE --distributed-backend mpi
run_expect refuse_ddp_fsdp 2 "'--DDP-impl' must be local or torch, got 'FSDP'" "$MDSTRAIN" $BASE --DDP-impl FSDP
run_expect refuse_attention_backend 2 "'--attention-backend' must be flash, fused, unfused, local or auto" "$MDSTRAIN" $BASE --attention-backend xformers
run_expect refuse_pos_emb_other 2 "'--position-embedding-type' must be" "$MDSTRAIN" $BASE --position-embedding-type alibi
run_expect refuse_normalization_other 2 "'--normalization' must be" "$MDSTRAIN" $BASE --normalization BatchNorm
run_expect refuse_empty_cache_3 2 "empty-unused-memory-level" "$MDSTRAIN" $BASE --empty-unused-memory-level 3
run_expect refuse_tiktoken_v3 2 "'--tiktoken-pattern' must be v1 or v2" "$MDSTRAIN" $BASE --tiktoken-pattern v3
run_expect refuse_profile 2 "'--profile' is not supported .*needs a GPU" "$MDSTRAIN" $BASE --profile
run_expect grad_reduce_bf16_needs_bf16 2 "--grad-reduce-in-bf16 goes with --bf16" "$MDSTRAIN" $BASE --grad-reduce-in-bf16
run_expect refuse_ulysses 2 "'--ds-sequence-parallel-size' 2 is not supported" "$MDSTRAIN" $BASE --ds-sequence-parallel-size 2
run_expect refuse_no_pp_with_pp 2 "--no-pipeline-parallel with --pipeline-model-parallel-size 2" "$MDSTRAIN" $BASE --no-pipeline-parallel --pipeline-model-parallel-size 2
run_expect refuse_both_sched 2 "both --override-opt_param-scheduler and --use-checkpoint" "$MDSTRAIN" $BASE --override-opt_param-scheduler --use-checkpoint-opt_param-scheduler
# integers as Python's int() reads them
run_expect underscore_ok 0 "" "$MDSTRAIN" $BASE --train-iters 0_4 --lr 0.000_1
run_expect underscore_leading 2 "needs an integer" "$MDSTRAIN" $BASE --train-iters _4
run_expect underscore_double 2 "needs an integer" "$MDSTRAIN" $BASE --train-iters 1__0
run_expect underscore_trailing 2 "needs an integer" "$MDSTRAIN" $BASE --train-iters 4_
run_expect underscore_float_point 2 "needs a number" "$MDSTRAIN" $BASE --lr 1_.5
}

# NullTokenizer: N ids, EOD = N - 1 (Megatron-Core); the old N + 1 behind --null-tokenizer-legacy
# shellcheck disable=SC2086
"$MDSTRAIN" $MOCK $TINY --train-iters 1 --lr 1e-3 --eval-iters 0 --make-vocab-size-divisible-by 8 >"$T/out" 2>"$T/err"
check null_tokenizer_n_ids grep -q 'NullTokenizer (128 ids, EOD 127)' "$T/err"
check null_tokenizer_no_padding grep -q 'padded vocab (size: 128) with 0 dummy tokens (new size: 128)' "$T/err"
# shellcheck disable=SC2086
"$MDSTRAIN" $MOCK $TINY --train-iters 1 --lr 1e-3 --eval-iters 0 --make-vocab-size-divisible-by 8 \
    --null-tokenizer-legacy >"$T/out" 2>"$T/err"
check null_tokenizer_legacy grep -q 'NullTokenizer (129 ids, EOD 128, legacy)' "$T/err"
check null_tokenizer_legacy_padding grep -q 'padded vocab (size: 129) with 7 dummy tokens (new size: 136)' "$T/err"
# shellcheck disable=SC2086
"$MDSTRAIN" $MOCK $TINY --train-iters 1 --lr 1e-3 --eval-iters 0 --null-tokenizer-eod-id 5 >"$T/out" 2>"$T/err"
check null_tokenizer_eod_id grep -q 'NullTokenizer (128 ids, EOD 5)' "$T/err"
# shellcheck disable=SC2086
run_expect null_eod_out_of_range 2 "not below --vocab-size 128" "$MDSTRAIN" $BASE --null-tokenizer-eod-id 128

# the ramp-up (Megatron's RampupBatchsizeNumMicroBatches, tests/unit/test_schedule.c
# has the formulas): 2 2 10 to G = 8 over --train-samples 40: batches 2 2 4 6
# then 8, 7 iterations (update_train_iters), consumed 2 4 8 14 22 30 38, the
# learning rate linear over 40 samples from 1e-3
# shellcheck disable=SC2086
"$MDSTRAIN" $MOCK $TINY --global-batch-size 8 --rampup-batch-size 2 2 1_0 --train-samples 40 --lr 1e-3 \
    --log-interval 1 --eval-iters 0 -q >"$T/ramp" 2>"$T/err"
check rampup_exit0 test $? -eq 0
check rampup_batches test "$(field 'global batch size' "$T/ramp")" = "2 2 4 6 8 8 8 "
check rampup_consumed test "$(field 'consumed samples' "$T/ramp")" = "2 4 8 14 22 30 38 "
check rampup_iterations grep -q 'iteration        7/       7 |' "$T/ramp"
check rampup_lr test "$(field 'learning rate' "$T/ramp")" = \
    "9.500000E-04 9.000000E-04 8.000000E-04 6.500000E-04 4.500000E-04 2.500000E-04 5.000000E-05 "
# with --train-iters (Megatron asserts there; mds ramps over the iterations)
# shellcheck disable=SC2086
"$MDSTRAIN" $MOCK $TINY --global-batch-size 8 --rampup-batch-size 2 2 10 --train-iters 6 --lr 1e-3 \
    --log-interval 1 --eval-iters 0 -q >"$T/rampi" 2>"$T/err"
check rampup_iters_batches test "$(field 'global batch size' "$T/rampi")" = "2 2 4 6 8 8 "
# resumed mid-ramp: the same batches and losses
# shellcheck disable=SC2086
"$MDSTRAIN" $MOCK $TINY --global-batch-size 8 --rampup-batch-size 2 2 10 --train-iters 6 --lr 1e-3 \
    --log-interval 1 --eval-iters 0 -q --save "$T/ck_ramp" --exit-interval 3 >"$T/ramp1" 2>"$T/err"
# shellcheck disable=SC2086
"$MDSTRAIN" $MOCK $TINY --global-batch-size 8 --rampup-batch-size 2 2 10 --train-iters 6 --lr 1e-3 \
    --log-interval 1 --eval-iters 0 -q --load "$T/ck_ramp" >"$T/ramp2" 2>"$T/err"
cat "$T/ramp1" "$T/ramp2" >"$T/ramp12"
check rampup_resume_batches test "$(field 'global batch size' "$T/ramp12")" = "2 2 4 6 8 8 "
check rampup_resume_losses sh -c "[ \"\$(sed -n 's/.*lm loss: \\([^ ]*\\) .*/\\1/p' '$T/rampi')\" = \
    \"\$(sed -n 's/.*lm loss: \\([^ ]*\\) .*/\\1/p' '$T/ramp12')\" ]"
# a changed micro-batch count saves a checkpoint first (Megatron's train loop)
# shellcheck disable=SC2086
"$MDSTRAIN" $MOCK $TINY --global-batch-size 8 --rampup-batch-size 2 2 10 --train-iters 6 --lr 1e-3 \
    --eval-iters 0 -q --save "$T/ck_ramp_change" >/dev/null 2>&1
check rampup_saves_on_change sh -c "ls '$T/ck_ramp_change' | tr '\n' ' ' | grep -q 'iter_0000002 iter_0000003 iter_0000004 iter_0000006'"
# shellcheck disable=SC2086
{
run_expect rampup_two_values 2 "expected the following format" "$MDSTRAIN" $BASE --rampup-batch-size 2 2
run_expect rampup_indivisible 2 "divisible by global batch size increment" "$MDSTRAIN" $BASE --global-batch-size 8 --rampup-batch-size 3 2 10
run_expect rampup_no_increments 2 "no increments" "$MDSTRAIN" $BASE --global-batch-size 8 --rampup-batch-size 8 2 10
run_expect rampup_micro 2 "ramp-up's global batch 2 .* not divisible by micro-batch size \\(4\\)" "$MDSTRAIN" $MOCK $TINY --micro-batch-size 4 \
    --global-batch-size 8 --rampup-batch-size 2 2 10 --train-iters 4 --lr 1e-3
}

# Megatron-DeepSpeed's token schedule: the scheduler steps with the tokens
# consumed before the iteration, so the line of iteration k shows lr(tokens
# of k - 1 iterations): 32 tokens per iteration, warmup 64, cosine decay to 320
# shellcheck disable=SC2086
"$MDSTRAIN" $BASE --train-iters 8 --lr-warmup-tokens 64 --lr-decay-tokens 320 --lr-decay-style cosine \
    --min-lr 1e-4 >"$T/tok" 2>"$T/err"
check tokens_exit0 test $? -eq 0
# tokens seen: 0 32 64 96 128 ...: warmup 0, 0.5, 1; then cos over (t - 64) / 256
want=$(awk 'BEGIN { for (k = 1; k <= 8; k++) { t = 32 * (k - 1);
    if (t <= 64) lr = 1e-3 * t / 64; else { r = (t - 64) / 256; lr = 1e-4 + 9e-4 * (cos(3.141592653589793 * r) + 1) / 2 }
    printf "%.6E ", lr } }')
check tokens_lr_lagged test "$(field 'learning rate' "$T/tok")" = "$want"
# --train-tokens: stop once 32 x iterations reaches 100 tokens: 4 iterations
# shellcheck disable=SC2086
"$MDSTRAIN" $BASE --train-iters 100 --train-tokens 100 >"$T/tt" 2>"$T/err"
check train_tokens_stop test "$(grep -c '] iteration ' "$T/tt")" -eq 4
# shellcheck disable=SC2086
{
run_expect tokens_decay_no_warmup 2 "--lr-decay-tokens needs --lr-warmup-tokens" "$MDSTRAIN" $BASE --lr-decay-tokens 100
run_expect tokens_warmup_inside_iteration 2 "does not end with an iteration" "$MDSTRAIN" $MOCK $TINY \
    --global-batch-size 2 --train-samples 20 --lr 1e-3 --lr-warmup-samples 3 --lr-decay-tokens 300
}

# --exit-duration-in-mins: stop after the duration, saving, no end-of-training evaluation
# shellcheck disable=SC2086
"$MDSTRAIN" $MOCK $TINY --global-batch-size 2 --train-iters 100000 --lr 1e-3 --log-interval 1 --eval-iters 1 \
    --eval-interval 100000 --exit-duration-in-mins 0.01 --save "$T/ck_dur" >"$T/dur" 2>"$T/err"
check exit_duration_exit0 test $? -eq 0
check exit_duration_note grep -q 'exiting program after 0\.0' "$T/err"
check exit_duration_saved test -f "$T/ck_dur/latest_checkpointed_iteration.txt"
check exit_duration_no_final_eval sh -c "! grep -q 'on validation set' '$T/dur'"
check exit_duration_stopped_early sh -c "[ \$(grep -c '] iteration ' '$T/dur') -lt 100000 ]"
# --kill-switch-path: present before the first iteration: nothing trained, iteration 0 saved
: >"$T/kill"
# shellcheck disable=SC2086
"$MDSTRAIN" $BASE -v --kill-switch-path "$T/kill" --save "$T/ck_kill" >"$T/kill.out" 2>"$T/err"
check kill_switch_exit0 test $? -eq 0
check kill_switch_note grep -q "Detected kill switch at $T/kill. Exiting" "$T/err"
check kill_switch_no_iteration sh -c "! grep -q '] iteration ' '$T/kill.out'"
check kill_switch_saved test "$(cat "$T/ck_kill/latest_checkpointed_iteration.txt")" = 0

# the schedule on --load: refused when it differs, unless overridden or taken from the checkpoint
# shellcheck disable=SC2086
"$MDSTRAIN" $BASE --train-iters 6 --exit-interval 3 --save "$T/ck_s" >/dev/null 2>&1
# shellcheck disable=SC2086
run_expect sched_mismatch 1 "lr scheduler max lr" "$MDSTRAIN" $BASE --train-iters 6 --lr 2e-3 --load "$T/ck_s"
# shellcheck disable=SC2086
"$MDSTRAIN" $BASE --train-iters 6 --lr 2e-3 --load "$T/ck_s" --override-opt_param-scheduler >"$T/ov" 2>"$T/err"
check sched_override test "$(field 'learning rate' "$T/ov")" = "6.666667E-04 3.333333E-04 0.000000E+00 "
# shellcheck disable=SC2086
"$MDSTRAIN" $BASE --train-iters 6 --lr 2e-3 --load "$T/ck_s" --use-checkpoint-opt_param-scheduler >"$T/uc" 2>"$T/err"
check sched_use_checkpoint test "$(field 'learning rate' "$T/uc")" = "3.333333E-04 1.666667E-04 0.000000E+00 "

# --decoupled-lr: the embedding/output group at its own rate; at the main
# rates it is the same run, bitwise
# shellcheck disable=SC2086
"$MDSTRAIN" $BASE --decoupled-lr 1e-3 --decoupled-min-lr 0 -v >"$T/dl_same" 2>"$T/dl.err"
check decoupled_lr_exit0 test $? -eq 0
check decoupled_lr_table grep -q '^| decoupled lr / min lr  *| 0.001 / 0 ' "$T/dl.err"
check decoupled_lr_equal_rates_same_losses test "$(losses "$T/dl_same")" = "$(losses "$T/ref")"
# shellcheck disable=SC2086
"$MDSTRAIN" $BASE --decoupled-lr 5e-2 >"$T/dl_other" 2>"$T/err"
check decoupled_lr_first_loss_same test "$(losses "$T/dl_other" | head -n 1)" = "$(losses "$T/ref" | head -n 1)"
check decoupled_lr_changes_training test "$(losses "$T/dl_other")" != "$(losses "$T/ref")"
# shellcheck disable=SC2086
run_expect decoupled_min_lr_alone 2 "--decoupled-min-lr goes with --decoupled-lr" "$MDSTRAIN" $BASE --decoupled-min-lr 1e-5

# --calculate-per-token-loss: with every token counted, the token-weighted
# mean is the mean of micro-batch means (the same run within fp32 rounding);
# with --eod-mask-loss the micro-batches count differently
# shellcheck disable=SC2086
"$MDSTRAIN" $BASE --calculate-per-token-loss >"$T/pt" 2>"$T/err"
check per_token_exit0 test $? -eq 0
check per_token_all_tokens_same_run sh -c "paste '$T/ref' '$T/pt' >/dev/null; \
    a=\$(sed -n 's/.*lm loss: \\([^ ]*\\) .*/\\1/p' '$T/ref' | tr '\n' ' '); b=\$(sed -n 's/.*lm loss: \\([^ ]*\\) .*/\\1/p' '$T/pt' | tr '\n' ' '); \
    echo \"\$a|\$b\" | awk -F'|' '{n = split(\$1, x, \" \"); split(\$2, y, \" \"); if (n < 4) exit 1;
        for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-5 * x[i]) exit 1 } }'"
REALB="$MOCK $TINY --seq-length 64 --max-position-embeddings 64 --global-batch-size 4 --train-iters 4
       --lr 1e-2 --log-interval 1 --eval-iters 0 -q --eod-mask-loss"   # mock documents are short: EODs in every sample
# shellcheck disable=SC2086
"$MDSTRAIN" $REALB >"$T/em" 2>"$T/err"
# shellcheck disable=SC2086
"$MDSTRAIN" $REALB --calculate-per-token-loss >"$T/empt" 2>"$T/err"
check per_token_first_loss_same test "$(losses "$T/em" | head -n 1)" = "$(losses "$T/empt" | head -n 1)"
check per_token_masked_changes_training test "$(losses "$T/em")" != "$(losses "$T/empt")"
# over two data-parallel ranks (TCP): the token count is the global batch's
dport=$((30000 + $$ % 1000))
# shellcheck disable=SC2086
MASTER_ADDR=127.0.0.1 MASTER_PORT=$dport WORLD_SIZE=2 RANK=1 "$MDSTRAIN" $REALB --calculate-per-token-loss >"$T/dp1" 2>"$T/dp1.err" &
# shellcheck disable=SC2086
MASTER_ADDR=127.0.0.1 MASTER_PORT=$dport WORLD_SIZE=2 RANK=0 "$MDSTRAIN" $REALB --calculate-per-token-loss >"$T/dp0" 2>"$T/dp0.err"
wait
check per_token_dp2_like_dp1 sh -c "a=\$(sed -n 's/.*lm loss: \\([^ ]*\\) .*/\\1/p' '$T/empt' | tr '\n' ' '); b=\$(sed -n 's/.*lm loss: \\([^ ]*\\) .*/\\1/p' '$T/dp1' | tr '\n' ' ');
    echo \"\$a|\$b\" | awk -F'|' '{n = split(\$1, x, \" \"); m = split(\$2, y, \" \"); if (n < 4 || m != n) exit 1;
        for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-5 * x[i]) exit 1 } }'"

# --apply-layernorm-1p: w applied as 1 + w from w = 0 is the same model: the
# first two iterations bitwise (1 + (0 - u) = 1 - u exactly), then within
# fp32 rounding; the checkpoint records it
LN1P="$MOCK $TINY --normalization RMSNorm --global-batch-size 2 --train-iters 4 --lr 1e-2 --log-interval 1 --eval-iters 0 -q"
# shellcheck disable=SC2086
"$MDSTRAIN" $LN1P >"$T/l0" 2>"$T/err"
# shellcheck disable=SC2086
"$MDSTRAIN" $LN1P --apply-layernorm-1p --save "$T/ck1p" >"$T/l1" 2>"$T/err"
check ln1p_exit0 test $? -eq 0
check ln1p_first_two_bitwise test "$(losses "$T/l0" | head -n 2)" = "$(losses "$T/l1" | head -n 2)"
check ln1p_same_model sh -c "a=\$(sed -n 's/.*lm loss: \\([^ ]*\\) .*/\\1/p' '$T/l0' | tr '\n' ' '); b=\$(sed -n 's/.*lm loss: \\([^ ]*\\) .*/\\1/p' '$T/l1' | tr '\n' ' ');
    echo \"\$a|\$b\" | awk -F'|' '{n = split(\$1, x, \" \"); m = split(\$2, y, \" \"); if (n < 4 || m != n) exit 1;
        for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-5 * x[i]) exit 1 } }'"
# shellcheck disable=SC2086
run_expect ln1p_checkpoint_mismatch 1 "apply_layernorm_1p is 1 in the checkpoint but 0 in this run" "$MDSTRAIN" $LN1P --train-iters 6 --load "$T/ck1p"
# shellcheck disable=SC2086
run_expect ln1p_no_hf_export 2 "--apply-layernorm-1p with --export-hf is not supported yet" "$MDSTRAIN" $LN1P --apply-layernorm-1p --load "$T/ck1p" --export-hf "$T/hf1p"

# --grad-reduce-in-bf16: bf16 main gradients, a run of its own
# shellcheck disable=SC2086
"$MDSTRAIN" $BASE --bf16 -v >"$T/b32" 2>"$T/b32.err"
# shellcheck disable=SC2086
"$MDSTRAIN" $BASE --bf16 --grad-reduce-in-bf16 -v >"$T/b16" 2>"$T/b16.err"
check grad_reduce_bf16_exit0 test $? -eq 0
check grad_reduce_bf16_table grep -q '^| precision  *| bf16, main grads bf16 ' "$T/b16.err"
check grad_reduce_bf16_first_loss_same test "$(losses "$T/b16" | head -n 1)" = "$(losses "$T/b32" | head -n 1)"
check grad_reduce_bf16_changes_training test "$(losses "$T/b16")" != "$(losses "$T/b32")"

# the DeepSpeed config: DeepSpeed's batch rule, conflicts naming both values, ZeRO stages
ds() { printf '%s\n' "$1" >"$T/ds.json"; }
DS="$MOCK $TINY --train-iters 2 --lr 1e-3 --eval-iters 0 --deepspeed --deepspeed_config $T/ds.json"
ds '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 1, "gradient_clipping": 1.0,
     "zero_optimization": {"stage": 1, "overlap_comm": true}, "fp16": {"enabled": false},
     "steps_per_print": 2000, "wall_clock_breakdown": false}'
# shellcheck disable=SC2086
"$MDSTRAIN" $DS --zero-stage 1 >"$T/out" 2>"$T/err"
check ds_exit0 test $? -eq 0
check ds_global_batch_from_json grep -q '^| micro / global batch  *| 1 / 4 (4 micro-batches' "$T/err"
check ds_zero1_distributed_optimizer grep -q 'distributed optimizer' "$T/err"
# shellcheck disable=SC2086
{
run_expect ds_micro_conflict 2 "--micro-batch-size 2 but train_micro_batch_size_per_gpu 1" "$MDSTRAIN" $DS --micro-batch-size 2 --global-batch-size 4
run_expect ds_global_conflict 2 "--global-batch-size 8 but train_batch_size 4" "$MDSTRAIN" $DS --global-batch-size 8
run_expect ds_clip_flag_warned 0 "warning: --clip-grad 0.5 has no effect under --deepspeed: DeepSpeed clips by gradient_clipping, 1 in" "$MDSTRAIN" $DS --clip-grad 0.5
run_expect ds_stage_conflict 2 "--zero-stage 2 but zero_optimization.stage 1" "$MDSTRAIN" $DS --zero-stage 2
run_expect ds_needs_flag 2 "--deepspeed_config goes with --deepspeed" "$MDSTRAIN" $MOCK $TINY --train-iters 1 --lr 1e-3 --deepspeed_config "$T/ds.json"
run_expect ds_needs_config 2 "--deepspeed needs --deepspeed_config" "$MDSTRAIN" $MOCK $TINY --train-iters 1 --lr 1e-3 --deepspeed
ds '{"train_batch_size": 5, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 4}'
run_expect ds_batch_rule 2 "train_batch_size is not equal to micro_batch_per_gpu \\* gradient_acc_step \\* world_size 5 != 1 \\* 4 \\* 1" "$MDSTRAIN" $DS
ds '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}}'
run_expect ds_zero3 2 "ZeRO stage 3 .* is not supported" "$MDSTRAIN" $DS
ds '{"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 20}}'
run_expect ds_fp16_initial_conflict 2 '--initial-loss-scale 1024 but "fp16": "initial_scale_power" 1048576' "$MDSTRAIN" $DS --initial-loss-scale 1024
run_expect ds_fp16_but_bf16_flag 2 '--bf16 but "bf16" is not enabled' "$MDSTRAIN" $DS --bf16
ds '{"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": true, "loss_scale": 0, "consecutive_hysteresis": true}}'
run_expect ds_fp16_consecutive_hysteresis 2 '"fp16": "consecutive_hysteresis": true is not supported' "$MDSTRAIN" $DS
ds '{"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": true}, "bf16": {"enabled": true}}'
run_expect ds_fp16_and_bf16 2 'fp16 and bf16 are both enabled' "$MDSTRAIN" $DS
ds '{"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": true, "loss_scale": 128}}'
run_expect ds_fp16_static_conflict 2 '--loss-scale 64 but "fp16": "loss_scale" 128' "$MDSTRAIN" $DS --fp16 --loss-scale 64
ds '{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "Adam"}}'
run_expect ds_optimizer 2 '"optimizer" is not supported' "$MDSTRAIN" $DS
ds '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "nvme"}}}'
run_expect ds_nvme 2 '"device": "nvme" is not supported' "$MDSTRAIN" $DS
ds '{"train_micro_batch_size_per_gpu": 1, "no_such_key": 1}'
run_expect ds_unknown_key 2 'unknown key "no_such_key"' "$MDSTRAIN" $DS
ds '{"train_micro_batch_size_per_gpu": 1, "train_micro_batch_size_per_gpu": 2}'
run_expect ds_duplicate_key 2 'duplicate key "train_micro_batch_size_per_gpu"' "$MDSTRAIN" $DS
ds '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 1,
 "stage": 1}}'
run_expect ds_duplicate_nested 2 'duplicate key "stage" \(line 2\)' "$MDSTRAIN" $DS
# Python's json reads NaN: the value is refused, not the JSON
ds '{"train_micro_batch_size_per_gpu": 1, "gradient_clipping": NaN}'
run_expect ds_nan 2 '"gradient_clipping" must be a number' "$MDSTRAIN" $DS
ds '{"train_micro_batch_size_per_gpu": 1, "optimizer\u0000": {}}'
run_expect ds_nul 2 'line 1: \\u0000 in a string is not supported' "$MDSTRAIN" $DS
ds '{"train_micro_batch_size_per_gpu": 1,}'
run_expect ds_bad_json 2 "invalid JSON at line 1 column" "$MDSTRAIN" $DS
run_expect ds_missing_file 1 "cannot open" "$MDSTRAIN" $MOCK $TINY --train-iters 1 --lr 1e-3 --deepspeed --deepspeed_config "$T/none.json"
}
# fp16 and bf16 from the file: DeepSpeed's defaults (a dynamic scale from
# 2^16), the same run as Megatron's flags with that start, bitwise
ds '{"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 1.0, "fp16": {"enabled": true, "loss_scale": 0}}'
# shellcheck disable=SC2086
"$MDSTRAIN" $DS --log-interval 1 >"$T/dsfp16" 2>"$T/err"
check ds_fp16_exit0 test $? -eq 0
check ds_fp16_scale_2_16 test "$(field 'loss scale' "$T/dsfp16")" = "65536.0 65536.0 "
# shellcheck disable=SC2086
"$MDSTRAIN" $MOCK $TINY --train-iters 2 --lr 1e-3 --eval-iters 0 --log-interval 1 --fp16 --initial-loss-scale 65536 >"$T/mgfp16" 2>"$T/err"
check ds_fp16_as_flags sh -c "[ -n \"\$(sed -n 's/.*lm loss: \\([^ ]*\\) .*/\\1/p' '$T/dsfp16')\" ] &&
    [ \"\$(sed -n 's/.*lm loss: \\([^ ]*\\) .*/\\1/p' '$T/dsfp16')\" = \"\$(sed -n 's/.*lm loss: \\([^ ]*\\) .*/\\1/p' '$T/mgfp16')\" ]"
ds '{"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": true, "loss_scale": 128}}'
# shellcheck disable=SC2086
"$MDSTRAIN" $DS --fp16 --log-interval 1 >"$T/dsstatic" 2>"$T/err"
check ds_fp16_static_scale test "$(field 'loss scale' "$T/dsstatic")" = "128.0 128.0 "
ds '{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}}'
# shellcheck disable=SC2086
"$MDSTRAIN" $DS >"$T/out" 2>"$T/err"
check ds_bf16_exit0 test $? -eq 0
check ds_bf16_table grep -qi 'bf16' "$T/err"

# no gradient_clipping in the file: DeepSpeed does not clip, and --clip-grad would conflict
ds '{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2, "zero_optimization": {"stage": 2}}'
# shellcheck disable=SC2086
"$MDSTRAIN" $DS --global-batch-size 2 >"$T/out" 2>"$T/err"
check ds_no_clipping grep -q '^| weight decay / clip grad  *| 0.01 / 0 ' "$T/err"
# shellcheck disable=SC2086
"$MDSTRAIN" $DS --global-batch-size 2 --clip-grad 1.0 >"$T/out" 2>"$T/err"
check ds_clip_flag_without_config_no_clipping grep -q '^| weight decay / clip grad  *| 0.01 / 0 ' "$T/err"
check ds_clip_flag_without_config_warned grep -q 'warning: --clip-grad 1 has no effect under --deepspeed.*(absent: no clipping)' "$T/err"
check ds_zero2_distributed_optimizer grep -q 'distributed optimizer' "$T/err"

# --distributed-timeout-minutes over TCP: rank 1 stopped, rank 0 gives up
A="$MOCK $TINY --global-batch-size 2 --train-iters 100000 --lr 1e-3 --log-interval 1 --eval-iters 0 -q
   --distributed-timeout-minutes 0.03"
port=$((29000 + $$ % 1000))
# shellcheck disable=SC2086
MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=0 "$MDSTRAIN" $A >"$T/r0" 2>"$T/r0.err" &
p0=$!
# shellcheck disable=SC2086
MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=1 "$MDSTRAIN" $A >"$T/r1" 2>"$T/r1.err" &
p1=$!
i=0
while [ ! -s "$T/r1" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
kill -STOP $p1 2>/dev/null
wait $p0
rc=$?
kill -KILL $p1 2>/dev/null
wait $p1 2>/dev/null
check timeout_exit1 test $rc -eq 1
check timeout_message grep -q "rank 0: waited .* s in a collective, more than --distributed-timeout-minutes 0.03" "$T/r0.err"

# --help lists the refused flags docs/cli.md lists, no more, no fewer
"$MDSTRAIN" --help >"$T/help" 2>&1
sed -n '/^Refused by name with exit 2/,$p' "$T/help" | grep -o -- '--[A-Za-z0-9_-]*' | sort >"$T/help_refused"
sed -n '/^Refused by name with exit 2 (the help prints the same list/,/^The FP8 flags need/p' docs/cli.md |
    grep -o -- '`--[A-Za-z0-9_-]*`' | tr -d '`' | sort >"$T/docs_refused"
check help_refused_nonempty test "$(wc -l <"$T/help_refused")" -gt 5
check help_refused_equals_docs cmp -s "$T/help_refused" "$T/docs_refused"
# mdsprep: every flag its docs row refuses is in its --help list (a NAME-* pattern: some flag starting so)
"$MDSPREP" --help >"$T/phelp" 2>&1
sed -n '/^Refused by name with exit 2/,$p' "$T/phelp" | grep -o -- '--[A-Za-z0-9_-]*' | sort >"$T/phelp_refused"
prefuse_ok=1
for w in $(grep '\*\*refused\*\* by name' docs/cli.md | head -n 1 | grep -o -- '`--[A-Za-z0-9_*-]*`' | tr -d '`'); do
    case $w in
    *'*') grep -q -- "^${w%\*}" "$T/phelp_refused" || { prefuse_ok=0; echo "    mdsprep --help lacks $w" >&2; } ;;
    *) grep -qx -- "$w" "$T/phelp_refused" || { prefuse_ok=0; echo "    mdsprep --help lacks $w" >&2; } ;;
    esac
done
check mdsprep_help_lists_docs_refused test $prefuse_ok -eq 1

# mdsprep: --vocab is --vocab-file (bigscience Megatron-DeepSpeed's spelling)
"$MDSPREP" -q --input tests/data/corpus/tiny.jsonl --output-prefix "$T/v1" --vocab "$MDS_ROOT/vocab/gpt2-vocab.json" \
    --merge-file "$MDS_ROOT/vocab/gpt2-merges.txt" --append-eod --workers 1_0
check mdsprep_vocab_alias cmp -s "$T/v1_text_document.bin" tests/data/golden/tiny_text_document.bin
finish
