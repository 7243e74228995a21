#!/bin/sh
# test_train.sh - mdstrain end to end on the committed Megatron dataset
# tests/data/golden/tiny_text_document (GPT-2 ids) and on mock data: Megatron's
# log line field for field, the learning-rate schedule at exact values, the
# validation lines, falling loss, thread-count independence of the losses,
# checkpoints (bitwise resume, corrupt and mismatched files refused),
# per-split data paths (--train-data-path P trains as --data-path P
# --split 1,0,0), and the refusals (exit 2) and runtime failures (exit 1).  About 5 s
# (about 15 s under ASan).
. tests/cli/lib.sh
MDSTRAIN=${MDSTRAIN:-$BUILD/mdstrain}
DATA=tests/data/golden/tiny_text_document
export OMP_WAIT_POLICY=passive   # a busy machine must not make spinning threads crawl
TINY="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
      --micro-batch-size 1 --global-batch-size 2"

run_expect help 0 '' "$MDSTRAIN" --help
check help_lists_flags grep -q -- '--num-layers N' "$T/out"

# 8 iterations on real data: warmup 2 iterations then linear decay to 0.
# shellcheck disable=SC2086
"$MDSTRAIN" --data-path "$DATA" --split 90,10,0 $TINY --train-iters 8 --lr 1e-2 \
    --lr-warmup-iters 2 --log-interval 1 --eval-interval 4 --eval-iters 1 >"$T/log" 2>"$T/err"
check train_exit0 test $? -eq 0
check config_table grep -q '^| num layers  *| 2 ' "$T/err"
check padded_vocab grep -q 'padded vocab (size: 50257) with 47 dummy tokens (new size: 50304)' "$T/err"
D='[0-9]'
E="$D\\.$D{6}E[-+]$D{2}"
RE="^ \\[$D{4}-$D{2}-$D{2} $D{2}:$D{2}:$D{2}\\.$D{6}\\] iteration +$D+/ +8 \\| consumed samples: +$D+ \\| elapsed time per iteration \\(ms\\): $D+\\.$D \\| throughput per GPU \\(TFLOP/s/GPU\\): $D+\\.$D \\| learning rate: $E \\| global batch size: +2 \\| lm loss: $E \\| loss scale: 1\\.0 \\| grad norm: $D+\\.$D{3} \\| number of skipped iterations: +0 \\| number of nan iterations: +0 \\| tokens per second: $D+\\.$D \\| ETA: $D+:$D{2}:$D{2} \\|\$"
check log_lines_format test "$(grep -Ec "$RE" "$T/log")" -eq 8
check log_line_widths grep -q '^ \[.*\] iteration        3/       8 | consumed samples:            6 |' "$T/log"
lr_at() { grep " iteration  *$1/" "$T/log" | sed 's/.*learning rate: \([^ ]*\) .*/\1/'; }
check lr_warmup test "$(lr_at 1)" = 5.000000E-03
check lr_peak test "$(lr_at 2)" = 1.000000E-02
check lr_linear test "$(lr_at 3)" = 8.333333E-03
check lr_end test "$(lr_at 8)" = 0.000000E+00
check validation_lines test "$(grep -c '^ validation loss at iteration [48] | lm loss value: [0-9.E+-]* | lm loss PPL: [0-9.E+-]* | $' "$T/log")" -eq 2
check validation_end grep -q '^ validation loss at iteration 8 on validation set | ' "$T/log"
# memory: the table's bytes held before training cover the fp32 parameters,
# gradients and both AdamW moments (16 bytes a parameter) and the activations;
# nothing is allocated while training, so the end-of-run report (Megatron's
# report_memory format) says the same peak; the FLOPs per token are
# Megatron's formula (6 x the matmul weights + 6 L h s, causal) at L 2, h 32,
# s 32, padded vocabulary 50304
NP=$(sed -n 's/^ > number of parameters on .*: \([0-9]*\)$/\1/p' "$T/err")
ACT=$(sed -n 's/^| activation memory (rank 0) *| \([0-9]*\) bytes.*/\1/p' "$T/err")
HELD=$(sed -n 's/^| memory held (rank 0) *| \([0-9]*\) bytes.*/\1/p' "$T/err")
check memory_held_table test "${HELD:-0}" -ge $((16 * ${NP:-1} + ${ACT:-1})) -a "${HELD:-0}" -lt $((16 * ${NP:-1} + ${ACT:-1} + 65536))
check memory_report awk -v held="${HELD:-0}" '/^\[Rank 0\] \(after 8 iterations\) memory \(MB\) \| allocated: / {
    n++; if ($NF - held / 1048576 > 0.005 || held / 1048576 - $NF > 0.005 || $NF != $(NF - 4)) exit 1 }
    END { exit n != 1 }' "$T/err"
check flops_per_token grep -q "^| model FLOPs per token *| $((6 * (2 * (4 * 32 * 32 + 2 * 32 * 128) + 32 * 50304) + 6 * 2 * 32 * 32)) (" "$T/err"
check validation_frame test "$(grep -c '^---*$' "$T/log")" -eq 6
losses() { sed -n 's/.*lm loss: \([^ ]*\) .*/\1/p' "$1"; }
first=$(losses "$T/log" | head -1); last=$(losses "$T/log" | tail -1)
check loss_near_log_vocab awk -v a="$first" 'BEGIN { exit !(a > 10.5 && a < 11.2) }'
check loss_falls awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }'
# the same run on one thread: the kernels sum in a fixed order, so the
# losses are bitwise the same (as printed)
# shellcheck disable=SC2086
OMP_NUM_THREADS=1 "$MDSTRAIN" -q --data-path "$DATA" --split 90,10,0 $TINY --train-iters 8 --lr 1e-2 \
    --lr-warmup-iters 2 --log-interval 1 --eval-iters 0 >"$T/log1" 2>"$T/err1"
losses "$T/log" >"$T/l0"; losses "$T/log1" >"$T/l1"
check same_losses_one_thread cmp -s "$T/l0" "$T/l1"
# --op-times (kernels/optime.c): the same losses, validation included; the
# table counts iterations 2 to 4 (the first left out), each op's calls in
# them (2 micro-batches: the classifier twice an iteration, attention 2
# layers x 2) and not the validation's forward (crossentropy_forward: the
# training's loss is crossentropy_fused); its ops' time within the wall
# clock's; one iteration leaves none to time
# shellcheck disable=SC2086
"$MDSTRAIN" -q --data-path "$DATA" --split 90,10,0 $TINY --train-iters 4 --lr 1e-2 --lr-warmup-iters 2 \
    --log-interval 1 --eval-interval 2 --eval-iters 1 --op-times >"$T/logot" 2>"$T/errot"
check op_times_exit0 test $? -eq 0
# shellcheck disable=SC2086
"$MDSTRAIN" -q --data-path "$DATA" --split 90,10,0 $TINY --train-iters 4 --lr 1e-2 --lr-warmup-iters 2 \
    --log-interval 1 --eval-interval 2 --eval-iters 1 >"$T/logno" 2>"$T/errno"
losses "$T/logot" >"$T/lot"; losses "$T/logno" >"$T/lno"
check op_times_same_losses sh -c "[ -s '$T/lot' ] && cmp -s '$T/lot' '$T/lno'"
check op_times_same_validation sh -c "[ \"\$(grep -c '^ validation loss' '$T/logot')\" -eq 3 ] &&
    [ \"\$(grep '^ validation loss' '$T/logot')\" = \"\$(grep '^ validation loss' '$T/logno')\" ]"
check op_times_header grep -q '^ \[Rank 0\] op times on host, .*(the first iteration left out), 3 iterations:$' "$T/logot"
ot_calls() { awk -v op="$1" '$0 ~ "^ " op " " { print $(NF - 3) }' "$T/logot"; }
check op_times_classifier test "$(ot_calls 'matmul_forward 32 -> 50304')" = 2.0
check op_times_classifier_backward test "$(ot_calls 'matmul_backward 32 -> 50304')" = 2.0
check op_times_attention test "$(ot_calls attention_backward)" = 4.0
check op_times_adamw test "$(ot_calls adamw_update)" = 16.0
check op_times_no_validation sh -c "! grep -q '^ crossentropy_forward ' '$T/logot'"
check op_times_total awk '/^ every op / { n++; ok = $(NF - 7) > 50 && $(NF - 7) <= 101 } END { exit !(n == 1 && ok) }' \
    "$T/logot"
# shellcheck disable=SC2086
"$MDSTRAIN" -q --mock-data $TINY --train-iters 1 --lr 1e-3 --eval-iters 0 --op-times >"$T/logot1" 2>&1
check op_times_one_iteration grep -q 'op times on host.*: no iteration timed$' "$T/logot1"
# per-split data paths: training on --train-data-path P alone is training on
# --data-path P --split 1,0,0 (the same sample order); --valid-data-path
# gives the validation lines
# shellcheck disable=SC2086
"$MDSTRAIN" -q --train-data-path "$DATA" $TINY --train-iters 4 --lr 1e-2 --log-interval 1 \
    --eval-iters 0 >"$T/logps" 2>"$T/errps"
check per_split_train_exit0 test $? -eq 0
# shellcheck disable=SC2086
"$MDSTRAIN" -q --data-path "$DATA" --split 1,0,0 $TINY --train-iters 4 --lr 1e-2 --log-interval 1 \
    --eval-iters 0 >"$T/log100" 2>"$T/err100"
losses "$T/logps" >"$T/lps"; losses "$T/log100" >"$T/l100"
check per_split_same_losses_as_split_100 sh -c "[ -s '$T/lps' ] && cmp -s '$T/lps' '$T/l100'"
# shellcheck disable=SC2086
"$MDSTRAIN" -q --train-data-path 1 "$DATA" --valid-data-path "$DATA" $TINY --train-iters 4 --lr 1e-2 \
    --log-interval 1 --eval-interval 2 --eval-iters 1 >"$T/logpv" 2>"$T/errpv"
check per_split_valid_exit0 test $? -eq 0
check per_split_validation_lines test "$(grep -c '^ validation loss at iteration [24] | ' "$T/logpv")" -eq 2

# mock data with the null tokenizer, --train-samples and a cosine schedule
# (warmup 2 of 8 samples): lr at sample 4 = 1e-3 + 9e-3 * (cos(pi/3) + 1) / 2
# shellcheck disable=SC2086
"$MDSTRAIN" -q --mock-data --tokenizer-type NullTokenizer --vocab-size 127 $TINY --train-samples 8 \
    --lr 1e-2 --min-lr 1e-3 --lr-decay-style cosine --lr-warmup-fraction 0.25 --log-interval 1 \
    --eval-iters 1 --eval-interval 2 >"$T/log" 2>"$T/err"
check mock_exit0 test $? -eq 0
check mock_iters test "$(grep -c '] iteration ' "$T/log")" -eq 4
check mock_lr_peak test "$(lr_at 1)" = 1.000000E-02
check mock_lr_cosine test "$(lr_at 2)" = 7.750000E-03
check mock_lr_min test "$(lr_at 4)" = 1.000000E-03
check mock_test_set grep -q '^ validation loss at iteration 4 on test set | ' "$T/log"

# checkpoints: 12 iterations straight (saving at 6 and 12) equal 6, save at
# --exit-interval, --load, 6 more: the same losses and validation losses as
# printed, and byte-identical iteration-12 files (weights, AdamW m and v,
# counters, scheduler)
CK="--data-path $DATA --split 90,10,0 $TINY --train-iters 12 --lr 1e-2 --lr-warmup-iters 2 --log-interval 1
    --eval-interval 3 --eval-iters 1"
# shellcheck disable=SC2086
"$MDSTRAIN" -q $CK --save "$T/ckA" --save-interval 6 >"$T/a" 2>"$T/err"
check ckpt_straight_exit0 test $? -eq 0
# shellcheck disable=SC2086
"$MDSTRAIN" $CK --save "$T/ckB" --exit-interval 6 >"$T/b1" 2>"$T/err"
check ckpt_exit_interval_exit0 test $? -eq 0
check ckpt_exit_interval_iters test "$(grep -c '] iteration ' "$T/b1")" -eq 6
check ckpt_saved_note grep -q 'successfully saved checkpoint from iteration       6 to ' "$T/err"
check ckpt_layout test -f "$T/ckB/iter_0000006/mp_rank_00/model_optim_rng.bin"
check ckpt_no_tmp test ! -e "$T/ckB/iter_0000006/mp_rank_00/model_optim_rng.bin.tmp"
check ckpt_latest test "$(cat "$T/ckB/latest_checkpointed_iteration.txt")" = 6
# shellcheck disable=SC2086
"$MDSTRAIN" $CK --save "$T/ckB" --load "$T/ckB" >"$T/b2" 2>"$T/err"
check ckpt_resume_exit0 test $? -eq 0
check ckpt_loaded_note grep -q 'successfully loaded checkpoint from .* at iteration 6' "$T/err"
check ckpt_resume_first_iter grep -q '] iteration        7/      12 | consumed samples:           14 |' "$T/b2"
losses "$T/a" >"$T/la"; cat "$T/b1" "$T/b2" | losses /dev/stdin >"$T/lb"
check ckpt_resume_same_losses cmp -s "$T/la" "$T/lb"
check ckpt_resume_12_losses test "$(wc -l <"$T/la")" -eq 12
vals() { grep '^ validation loss at iteration [0-9]* |' "$1"; }
vals "$T/a" >"$T/va"; { vals "$T/b1"; vals "$T/b2"; } >"$T/vb"
check ckpt_resume_same_validation cmp -s "$T/va" "$T/vb"
check ckpt_resume_same_file cmp -s "$T/ckA/iter_0000012/mp_rank_00/model_optim_rng.bin" \
    "$T/ckB/iter_0000012/mp_rank_00/model_optim_rng.bin"
check ckpt_interval_save test -f "$T/ckA/iter_0000006/mp_rank_00/model_optim_rng.bin"
# refused with exit 1 and one line naming the file and the field
cp -r "$T/ckA" "$T/ckC"
printf 'x' | dd of="$T/ckC/iter_0000012/mp_rank_00/model_optim_rng.bin" bs=1 seek=2000 conv=notrunc 2>/dev/null
# shellcheck disable=SC2086
run_expect ckpt_corrupt 1 "model_optim_rng.bin': weights checksum mismatch" "$MDSTRAIN" $CK --load "$T/ckC"
# shellcheck disable=SC2086
run_expect ckpt_config_mismatch 1 "hidden_size is 32 in the checkpoint but 64 in this run" \
    "$MDSTRAIN" $CK --hidden-size 64 --load "$T/ckA"
# shellcheck disable=SC2086
run_expect ckpt_sched_mismatch 1 "lr scheduler max lr" "$MDSTRAIN" $CK --lr 2e-2 --load "$T/ckA"
# shellcheck disable=SC2086
run_expect ckpt_load_empty 0 "no 'latest_checkpointed_iteration.txt' in" "$MDSTRAIN" $CK --train-iters 3 \
    --eval-iters 0 --load "$T/empty"

# Dropout is on by default (Megatron's 0.1 and 0.1): the losses differ from a
# run without it, each kind on its own matters, and every run above (resume,
# threads) already held with it.
DR="--mock-data $TINY --train-iters 3 --lr 1e-3 --log-interval 1 --eval-iters 0 -q"
# shellcheck disable=SC2086
{
"$MDSTRAIN" $DR >"$T/d1"; "$MDSTRAIN" $DR --hidden-dropout 0 --attention-dropout 0 >"$T/d0"
"$MDSTRAIN" $DR --hidden-dropout 0 >"$T/da"; "$MDSTRAIN" $DR --attention-dropout 0 >"$T/dh"
}
losses "$T/d1" >"$T/ld1"; losses "$T/d0" >"$T/ld0"; losses "$T/da" >"$T/lda"; losses "$T/dh" >"$T/ldh"
check dropout_default_on sh -c "test \$(wc -l <'$T/ld1') -eq 3 && ! cmp -s '$T/ld1' '$T/ld0'"
check dropout_kinds_matter sh -c "! cmp -s '$T/lda' '$T/ld0' && ! cmp -s '$T/ldh' '$T/ld0' && ! cmp -s '$T/lda' '$T/ldh'"

# Mixed precision on the CPU (weights, activations and their gradients
# rounded where a GPU stores them; fp32 masters): --bf16 trains close to
# fp32; --fp16 starts at Megatron's 2^32 loss scale, skips the overflowing
# iterations (no grad norm on them, the loss averaged over the others, the
# scheduler not stepped) while the scale halves, then trains; a resumed
# --fp16 run restores the scaler and continues bitwise.
MP="--mock-data $TINY --global-batch-size 4 --tokenizer-type NullTokenizer --vocab-size 500 --train-iters 30
    --lr 3e-3 --log-interval 1 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 -q"
# shellcheck disable=SC2086
{
"$MDSTRAIN" $MP >"$T/p32"; "$MDSTRAIN" $MP --bf16 >"$T/pbf"; "$MDSTRAIN" $MP --fp16 >"$T/pfp"
"$MDSTRAIN" $MP --fp16 --save "$T/ckF" --exit-interval 15 >"$T/pf1"; "$MDSTRAIN" $MP --fp16 --load "$T/ckF" >"$T/pf2"
}
losses "$T/p32" >"$T/l32"; losses "$T/pbf" >"$T/lbf"
check bf16_close_to_fp32 sh -c "paste '$T/l32' '$T/lbf' | awk '{ d = \$1 - \$2; if (d < 0) d = -d; if (d > 2e-3 * \$1) bad = 1 } END { exit bad || NR != 30 }'"
check bf16_not_fp32 sh -c "! cmp -s '$T/l32' '$T/lbf'"
check bf16_scale_1 sh -c "grep -c 'loss scale: 1.0 | grad norm' '$T/pbf' | grep -qx 30"
check fp16_first_line grep -q '] iteration        1/      30 .* lm loss: 0.000000E+00 | loss scale: 4294967296.0 | number of skipped iterations:   1 |' "$T/pfp"
check fp16_second_halves grep -q '] iteration        2/      30 .* loss scale: 2147483648.0 | number of skipped iterations:   1 |' "$T/pfp"
check fp16_lr_waits grep -q '] iteration        2/      30 .* learning rate: 3.000000E-03 |' "$T/pfp"
check fp16_settles sh -c "tail -1 '$T/pfp' | grep -q 'grad norm: .* number of skipped iterations:   0 |'"
losses "$T/pfp" | awk '$1 > 0' >"$T/lfp"
check fp16_trains awk '{ v[NR] = $1 } END { if (NR < 10) exit 1; a = (v[1] + v[2] + v[3]) / 3
    b = (v[NR] + v[NR - 1] + v[NR - 2]) / 3; exit !(b < a - 0.05) }' "$T/lfp"
cat "$T/pf1" "$T/pf2" >"$T/pf12"
# (the log lines; not the timers' blocks, which each run prints at its setup and saves)
check fp16_resume_same sh -c "grep '] iteration' '$T/pfp' | sed 's/.*consumed/consumed/; s/| elapsed.*learning/learning/; s/| tokens per.*//' >'$T/a16'; grep '] iteration' '$T/pf12' | sed 's/.*consumed/consumed/; s/| elapsed.*learning/learning/; s/| tokens per.*//' >'$T/b16'; [ -s '$T/a16' ] && cmp -s '$T/a16' '$T/b16'"

# The Llama block with Megatron's Llama flags (sizes scaled down), on real
# data: it trains, resumes bitwise, and its checkpoint refuses a GPT run.
LL="--position-embedding-type rope --rotary-base 500000 --rotary-percent 1.0 --normalization RMSNorm --swiglu
    --ffn-hidden-size 96 --group-query-attention --num-query-groups 2 --disable-bias-linear
    --untie-embeddings-and-output-weights --norm-epsilon 1e-5 --attention-softmax-in-fp32 --kv-channels 8"
# shellcheck disable=SC2086
"$MDSTRAIN" -q $CK $LL --save "$T/llA" --save-interval 6 >"$T/la1" 2>"$T/err"
check llama_exit0 test $? -eq 0
check llama_12_iters test "$(grep -c '] iteration ' "$T/la1")" -eq 12
first=$(losses "$T/la1" | head -1); last=$(losses "$T/la1" | tail -1)
check llama_loss_falls awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }'
# shellcheck disable=SC2086
"$MDSTRAIN" -q $CK $LL --save "$T/llB" --exit-interval 6 >"$T/lb1" 2>"$T/err"
# shellcheck disable=SC2086
"$MDSTRAIN" -q $CK $LL --load "$T/llB" >"$T/lb2" 2>"$T/err"
losses "$T/la1" >"$T/lla"; cat "$T/lb1" "$T/lb2" | losses /dev/stdin >"$T/llb"
check llama_resume_same_losses cmp -s "$T/lla" "$T/llb"
# shellcheck disable=SC2086
run_expect llama_ckpt_into_gpt 1 "position_embedding_type is rope in the checkpoint but learned_absolute in this run" \
    "$MDSTRAIN" $CK --load "$T/llA"
# the old spellings: --use-rotary-position-embeddings --no-position-embedding
# shellcheck disable=SC2086
"$MDSTRAIN" -q $CK $(echo "$LL" | sed 's/--position-embedding-type rope/--use-rotary-position-embeddings --no-position-embedding/') \
    --exit-interval 6 >"$T/lc" 2>"$T/err"
losses "$T/lc" >"$T/llc"; head -6 "$T/lla" >"$T/lla6"
check llama_old_spellings_same cmp -s "$T/lla6" "$T/llc"
BASE_L="--mock-data $TINY --train-iters 1 --lr 1e-3"
# shellcheck disable=SC2086
{
run_expect llama_kv_channels 2 "'--kv-channels' 16 other than hidden size / heads \\(8\\)" "$MDSTRAIN" $BASE_L --kv-channels 16
run_expect llama_pos_relative 2 "'--position-embedding-type' relative is not supported" "$MDSTRAIN" $BASE_L --position-embedding-type relative
run_expect llama_interleaved_needs_rope 2 "need --position-embedding-type rope" "$MDSTRAIN" $BASE_L --rotary-interleaved
run_expect llama_groups 2 "not a multiple of --num-query-groups 3" "$MDSTRAIN" $BASE_L --group-query-attention --num-query-groups 3
run_expect llama_swiglu_ffn0 2 "ffn hidden size is 0" "$MDSTRAIN" --mock-data --num-layers 1 --hidden-size 16 \
    --num-attention-heads 2 --seq-length 8 --max-position-embeddings 8 --micro-batch-size 1 --train-iters 1 --lr 1e-3 --swiglu
}

# refusals: one line plus a hint, exit 2
BASE="--mock-data $TINY --train-iters 1 --lr 1e-3"
# shellcheck disable=SC2086
{
run_expect fp16_and_bf16 2 "--fp16 and --bf16 are exclusive" "$MDSTRAIN" $BASE --fp16 --bf16
run_expect loss_scale_needs_fp16 2 "--loss-scale goes with --fp16" "$MDSTRAIN" $BASE --loss-scale 1024
run_expect refuse_fp32_residual 2 "'--fp32-residual-connection' is not supported yet" "$MDSTRAIN" $BASE --fp32-residual-connection
run_expect refuse_vpp 2 "'--num-layers-per-virtual-pipeline-stage' is not supported yet" "$MDSTRAIN" $BASE \
    --num-layers-per-virtual-pipeline-stage 1
# parallel sizes that one process cannot hold (the MPI runs: test_parallel.sh)
run_expect world_tp 2 "world size 1 is not divisible by tensor \\(2\\) x pipeline \\(1\\)" "$MDSTRAIN" $BASE --tensor-model-parallel-size 2
run_expect world_pp 2 "world size 1 is not divisible by tensor \\(1\\) x pipeline \\(2\\)" "$MDSTRAIN" $BASE --pipeline-model-parallel-size 2
run_expect unknown_flag 2 "unknown option '--no-such-flag'" "$MDSTRAIN" $BASE --no-such-flag
run_expect missing_lr 2 "missing --lr" "$MDSTRAIN" --mock-data $TINY --train-iters 1
run_expect both_lengths 2 "exactly one of --train-iters and --train-samples" "$MDSTRAIN" $BASE --train-samples 4
run_expect bad_number 2 "needs an integer" "$MDSTRAIN" $BASE --num-layers 2x
run_expect bad_gbs 2 "not a multiple of --micro-batch-size" "$MDSTRAIN" $BASE --global-batch-size 3 --micro-batch-size 2
run_expect seq_over_maxpos 2 "less than --seq-length" "$MDSTRAIN" $BASE --max-position-embeddings 16
run_expect heads 2 "not a multiple of --num-attention-heads" "$MDSTRAIN" $BASE --num-attention-heads 5
run_expect warmup_too_long 2 "not shorter than the decay" "$MDSTRAIN" $BASE --lr-warmup-iters 1
run_expect dropout_range 2 "'--hidden-dropout' needs a number in \\[0, " "$MDSTRAIN" $BASE --hidden-dropout 1
run_expect bad_style 2 "constant, linear, cosine, inverse-square-root or WSD, got 'wsd'" "$MDSTRAIN" $BASE --lr-decay-style wsd
run_expect per_split_and_mock 2 "--mock-data are exclusive" "$MDSTRAIN" $BASE --train-data-path "$DATA"
run_expect per_split_and_data_path 2 "--data-path are exclusive" "$MDSTRAIN" $TINY --train-iters 1 --lr 1e-3 \
    --data-path "$DATA" --train-data-path "$DATA"
run_expect per_split_and_split 2 "--split does not apply" "$MDSTRAIN" $TINY --train-iters 1 --lr 1e-3 \
    --train-data-path "$DATA" --split 1,0,0
run_expect per_split_no_train 2 "missing --train-data-path" "$MDSTRAIN" $TINY --train-iters 1 --lr 1e-3 \
    --valid-data-path "$DATA"
}
check hint_line grep -q "^hint: see 'mdstrain --help'" "$T/err"
# the one argv parser (programs/cli.c) serves mdstrain as it serves mdsprep:
# repeated short flags, abbreviations, --flag=value, refused flags in --help
# shellcheck disable=SC2086
run_expect parser_vv_abbrev_eq 0 "" "$MDSTRAIN" --mock-data $TINY --train-it=1 --lr=1e-3 --eval-iters 0 -vv -qq -qq
check parser_quiet_no_table sh -c "! grep -q '^| num layers' '$T/err'"
"$MDSTRAIN" --help >"$T/help" 2>&1
check help_lists_refused grep -q -- '--fp32-residual-connection' "$T/help"
check help_refused_not_as_option sh -c "! grep -q '^  *--fp32-residual-connection ' '$T/help'"
# shellcheck disable=SC2086
run_expect parser_ambiguous 2 "ambiguous option '--lr-warmup'" "$MDSTRAIN" $BASE --lr-warmup 1
# runtime failures: exit 1
# shellcheck disable=SC2086
run_expect missing_data 1 "cannot build the training data" "$MDSTRAIN" --data-path "$T/nope" $TINY --train-iters 1 --lr 1e-3
# shellcheck disable=SC2086
run_expect token_out_of_vocab 1 "outside the vocabulary" "$MDSTRAIN" --data-path "$DATA" --split 90,10,0 \
    --tokenizer-type NullTokenizer --vocab-size 100 $TINY --train-iters 1 --lr 1e-3
finish
