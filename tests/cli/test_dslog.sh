#!/bin/sh
# test_dslog.sh - under --deepspeed mdstrain prints Megatron-DeepSpeed's
# training_log line, not Megatron-LM's (microsoft/Megatron-DeepSpeed
# megatron/training.py at f4157bea, lines 1145-1187; docs/cli.md, "The log
# under --deepspeed"): each line against a regex built from its format
# strings ({:8d}, {:12d}, {:.1f}, {:.3E}, {:5d}, {:.6E}, {:.3f}, {:.2f}),
# the optional fields as DeepSpeed 0.14.4's optimizer wrappers give them,
# the end-of-training validation prefix, and Megatron-DeepSpeed's
# TensorBoard tags.  About 3 s.
. tests/cli/lib.sh
MDSTRAIN=${MDSTRAIN:-$BUILD/mdstrain}
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
TINY="--mock-data --tokenizer-type NullTokenizer --vocab-size 128 --num-layers 1 --hidden-size 16
      --num-attention-heads 2 --seq-length 16 --max-position-embeddings 16 --micro-batch-size 1
      --global-batch-size 2 --train-iters 4 --lr 1e-3 --log-interval 1 --eval-interval 2 --eval-iters 1"
ds() { printf '{"train_batch_size": 2, "train_micro_batch_size_per_gpu": 1%s}\n' "$2" >"$T/$1.json"; }
ds fp32 ''
ds zero1 ', "zero_optimization": {"stage": 1}'
ds fp16 ', "fp16": {"enabled": true, "initial_scale_power": 20, "hysteresis": 1}'
ds bf16 ', "bf16": {"enabled": true}'
D='[0-9]'
# the line up to the batch size, OPT (the loss and the optional fields), the rest
line_re() {
    printf '%s' "^ iteration +$D+/ +4 \\| consumed samples: +$D+ \\| consumed tokens: +$D+ \\| elapsed time per iteration \\(ms\\): $D+\\.$D \\| learning rate: $D\\.$D{3}E[-+]$D{2} \\| global batch size: +2 \\|$1 actual seqlen: +16 \\| number of skipped iterations: +$D+ \\| number of nan iterations: +0 \\| samples per second: $D+\\.$D{3} \\| tokens per gpu per second \\(tgs\\): $D+\\.$D{3} \\| TFLOPs: $D+\\.$D{2} \\|\$"
}
LOSS=" lm loss: $D\\.$D{6}E[-+]$D{2} \\|" SCALE=" loss scale: $D+\\.$D \\|" NORM=" grad norm: $D+\\.$D{3} \\|" ZEROS=' num zeros: 0\.0 \|'
# NAME CONFIG OPT-REGEX EXTRA-FLAGS...: four lines of that form
lines() {
    out=$1 cfg=$2 opt=$3; shift 3
    # shellcheck disable=SC2086
    "$MDSTRAIN" $TINY --deepspeed --deepspeed_config "$T/$cfg.json" "$@" >"$T/$out" 2>"$T/$out.err"
    check "${out}_exit0" test $? -eq 0
    check "${out}_lines" test "$(grep -Ec "$(line_re "$opt")" "$T/$out")" -eq 4
    check "${out}_no_megatron_lm_line" sh -c "! grep -q 'ETA\\|TFLOP/s/GPU\\|^ \\[' '$T/$out'"
}
# fp32, ZeRO 0: a plain optimizer (no cur_scale, no _global_grad_norm); the
# pipeline engine's branch gives num zeros 0
lines fp32_pipe fp32 "$LOSS$ZEROS"
check widths grep -q '^ iteration        3/       4 | consumed samples:            6 | consumed tokens:           96 | elapsed' "$T/fp32_pipe"
# linear decay to 0 over 4 iterations, after the first step: 7.5e-4
check lr_3e grep -q '^ iteration        1/       4 | .* | learning rate: 7\.500E-04 | global batch size:     2 |' "$T/fp32_pipe"
check validation_lines test "$(grep -c '^ validation loss at iteration [24] | lm loss value: [0-9.E+-]* | lm loss PPL: [0-9.E+-]* | $' "$T/fp32_pipe")" -eq 2
# eval-iters x global batch size samples
check validation_end grep -q '^ validation loss at iteration 4 on 2-sample draw from validation set | lm loss value: ' "$T/fp32_pipe"
check test_end grep -q '^ validation loss at iteration 4 on 2-sample draw from test set | lm loss value: ' "$T/fp32_pipe"
check validation_frame test "$(grep -c '^---*$' "$T/fp32_pipe")" -eq 8
# tgs = samples per second x seqlen / world size
check tgs awk '/^ iteration /{ split($0, f, "|"); for (i in f) { if (f[i] ~ /samples per second/) { sub(/.*: /, "", f[i]); s = f[i] }
    if (f[i] ~ /tgs/) { sub(/.*: /, "", f[i]); g = f[i] } } d = g - 16 * s; if (d < 0) d = -d; if (d > 0.01 + 1e-6 * g) bad = 1; n++ }
    END { exit bad || n != 4 }' "$T/fp32_pipe"
# --no-pipeline-parallel: train_step's DeepSpeed branch sets no norm, no zeros
lines fp32_nopp fp32 "$LOSS" --no-pipeline-parallel
# ZeRO 1: its optimizer's cur_scale is the static 1.0; its norm is kept
lines zero1_pipe zero1 "$LOSS loss scale: 1\\.0 \\|$NORM$ZEROS"
lines zero1_nopp zero1 "$LOSS loss scale: 1\\.0 \\|" --no-pipeline-parallel
# fp16, ZeRO 0: FP16_Optimizer, dynamic scale; its norm only after a clean
# step; no loss when no iteration of the interval advanced (avg > 0.0)
lines fp16_pipe fp16 "($LOSS)?$SCALE($NORM)?$ZEROS"
check fp16_some_clean grep -q 'lm loss: .* skipped iterations:   0 ' "$T/fp16_pipe"
check fp16_some_skipped grep -q 'skipped iterations:   1 ' "$T/fp16_pipe"
check fp16_no_loss_when_skipped awk '/^ iteration / && /skipped iterations:   1 / && /lm loss/ { bad = 1 } END { exit bad }' "$T/fp16_pipe"
check fp16_norm_once_applied awk '/^ iteration / { if ($0 ~ /skipped iterations: +0 /) clean = 1; if (clean && $0 !~ /grad norm:/) bad = 1 }
    END { exit bad }' "$T/fp16_pipe"
# bf16, ZeRO 0: BF16_Optimizer, no cur_scale, a norm every step
lines bf16_pipe bf16 "$LOSS$NORM$ZEROS"
# throughput_calculator's FLOPs per iteration (utils.py at f4157bea, lines
# 270-312), restated here from its source, against the configuration
# table's row: B L H S heads groups ffn vocab mlp(2|3) recompute(none|full|selective)
ds_flops() {
    awk -v b="$1" -v L="$2" -v h="$3" -v s="$4" -v a="$5" -v g="$6" -v f="$7" -v v="$8" -v m="$9" -v r="${10}" 'BEGIN {
        gqa = int(a / g); hd = int(h / a)
        pre = b * L * (1 + int(2 / gqa) + 1) * h * h * s; mha = b * L * 2 * hd * a * s * s
        fwd = pre + mha + b * L * m * f * h * s + b * v * h * s; t = 3 * fwd
        if (r == "full") t += fwd; if (r == "selective") t += mha
        printf "%d", 2 * t }'
}
flops_row() { sed -n 's/^| ds flops \/ iteration  *| \([0-9]*\) (throughput_calculator, at batch \([0-9]*\)).*/\1/p' "$1"; }
check flops_plain test "$(flops_row "$T/fp32_pipe.err")" = "$(ds_flops 2 1 16 16 2 2 64 128 2 none)"
GQA="--num-layers 2 --num-attention-heads 4 --group-query-attention --num-query-groups 1 --swiglu --ffn-hidden-size 40"
# shellcheck disable=SC2086
"$MDSTRAIN" $TINY $GQA --recompute-activations --train-iters 1 --deepspeed --deepspeed_config "$T/fp32.json" \
    >/dev/null 2>"$T/gqa.err"
check flops_gqa_swiglu_selective test "$(flops_row "$T/gqa.err")" = "$(ds_flops 2 2 16 16 4 1 40 128 3 selective)"
# shellcheck disable=SC2086
"$MDSTRAIN" $TINY $GQA --num-query-groups 2 --checkpoint-activations --train-iters 1 --deepspeed \
    --deepspeed_config "$T/fp32.json" >/dev/null 2>"$T/ckpt.err"
check flops_ckpt_full test "$(flops_row "$T/ckpt.err")" = "$(ds_flops 2 2 16 16 4 2 40 128 3 full)"

# TensorBoard: Megatron-DeepSpeed's tags (training.py at f4157bea, lines
# 937-1027 and 1508-1530), each with "vs samples" and "vs tokens" steps
TBDUMP="$BUILD/tests/test_tensorboard -d"
# shellcheck disable=SC2086
"$MDSTRAIN" -q $TINY --deepspeed --deepspeed_config "$T/zero1.json" --tensorboard-dir "$T/tb" \
    --log-timers-to-tensorboard --log-validation-ppl-to-tensorboard --log-batch-size-to-tensorboard >"$T/tblog" 2>&1
check tb_exit0 test $? -eq 0
$TBDUMP "$T"/tb/events.out.tfevents.* | cut -f1-3 >"$T/tb.txt"
cut -f1 "$T/tb.txt" | grep -v '^file_version$' | LC_ALL=C sort -u >"$T/tags"
{
    for s in 'steps-vs-samples/y=steps,x=samples' 'steps-vs-samples/y=samples,x=steps' \
        'steps-vs-tokens/y=steps,x=tokens' 'steps-vs-tokens/y=tokens,x=steps'; do echo "$s"; done
    for s in learning-rate/learning-rate batch-size/batch-size 'lm-loss-training/lm loss' loss-scale/loss-scale \
        grad-norm/grad-norm num-zeros/num-zeros seqlen/actual_seq_length iteration-time/iteration-time \
        'lm-loss-validation/lm loss validation' 'lm-loss-validation/lm loss validation ppl' \
        'lm-loss-validation/lm loss test' 'lm-loss-validation/lm loss test ppl'; do
        printf '%s\n%s vs samples\n%s vs tokens\n' "$s" "$s" "$s"
    done
} | LC_ALL=C sort >"$T/tags.want"
# (loss-scale/ only under fp16, as there: zero1 is fp32, so absent)
grep -v '^loss-scale/' "$T/tags.want" >"$T/tags.want2"
check tb_tags sh -c "cmp -s '$T/tags' '$T/tags.want2' || { diff '$T/tags' '$T/tags.want2' >&2; false; }"
check tb_steps_iteration3 sh -c "grep -q '^steps-vs-samples/y=steps,x=samples	6	3\.0\$' '$T/tb.txt' &&
    grep -q '^steps-vs-tokens/y=tokens,x=steps	3	96\.0\$' '$T/tb.txt' &&
    grep -q '^lm-loss-training/lm loss vs tokens	96	' '$T/tb.txt' && grep -q '^seqlen/actual_seq_length	3	16\.0\$' '$T/tb.txt'"
# the loss of each iteration is the log line's (log interval 1; TensorBoard
# stores a float32, the line prints 7 digits: within 1e-6 relative)
awk -F '\t' '$1 == "lm-loss-training/lm loss" { print $3 }' "$T/tb.txt" >"$T/tbloss"
sed -n 's/^ iteration .*| lm loss: \([^ ]*\) |.*/\1/p' "$T/tblog" >"$T/logloss"
check tb_loss_is_logged sh -c "paste '$T/tbloss' '$T/logloss' | awk '{ d = \$1 - \$2; if (d < 0) d = -d; if (\$2 == \"\" || d > 1e-6 * \$2) bad = 1; n++ }
    END { exit bad || n != 4 }'"
# fp16 adds loss-scale/; --no-pipeline-parallel drops grad-norm/ and num-zeros/
# shellcheck disable=SC2086
"$MDSTRAIN" -q $TINY --deepspeed --deepspeed_config "$T/fp16.json" --no-pipeline-parallel --tensorboard-dir "$T/tb16" \
    >/dev/null 2>&1
$TBDUMP "$T"/tb16/events.out.tfevents.* | cut -f1 | LC_ALL=C sort -u >"$T/tags16"
check tb_fp16_loss_scale grep -qx 'loss-scale/loss-scale vs tokens' "$T/tags16"
check tb_nopp_no_norm sh -c "! grep -q '^grad-norm/\\|^num-zeros/\\|^batch-size/\\|^lm loss' '$T/tags16'"

# without --deepspeed: Megatron-LM's line and prefix (test_train.sh checks it field by field)
# shellcheck disable=SC2086
"$MDSTRAIN" $TINY >"$T/lm" 2>"$T/lm.err"
check megatron_lm_line test "$(grep -c '^ \[.*\] iteration .* | throughput per GPU (TFLOP/s/GPU): .* | ETA: ' "$T/lm")" -eq 4
check megatron_lm_valid_end grep -q '^ validation loss at iteration 4 on validation set | ' "$T/lm"
finish
