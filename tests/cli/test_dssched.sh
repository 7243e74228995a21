#!/bin/sh
# test_dssched.sh - a DeepSpeed config's "scheduler" as Megatron-DeepSpeed
# ran it with DeepSpeed 0.10.3 to 0.14.4 (docs/cli.md, "Megatron-DeepSpeed's
# DeepSpeed flags"): the log's learning rates against
# tests/data/dssched/sequences.txt (deepspeed_lr.py, a Python re-statement
# of WarmupLR, WarmupDecayLR and the engine's step); the run with
# --no-pipeline-parallel bitwise the Megatron schedule that has the same
# rates (0, then WarmupLR at train_batch_size); fp16 overflows that do not
# step it; resumes bitwise; the refusals.  About 10 s.
. tests/cli/lib.sh
MDSTRAIN=${MDSTRAIN:-$BUILD/mdstrain}
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
SEQ=$MDS_ROOT/tests/data/dssched/sequences.txt
MOCK="--mock-data --tokenizer-type NullTokenizer --vocab-size 128"
TINY="--num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 16 --max-position-embeddings 16
      --micro-batch-size 1 --global-batch-size 2"
# Megatron's flags: a warmup, so its step(0) sets the learning rate 0
RUN="$MOCK $TINY --train-iters 6 --lr 1.5e-4 --lr-warmup-iters 2 --lr-decay-style cosine --min-lr 1e-5
     --log-interval 1 --eval-iters 0 -q -v -v --deepspeed"
ds() { printf '{"train_batch_size": 2, "train_micro_batch_size_per_gpu": 1%s}\n' "$2" >"$T/$1.json"; }
WARMUP='"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 0.001, "warmup_num_steps": 1000}'
ds warm ", \"scheduler\": {$WARMUP}"
ds decay ', "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 1e-4, "warmup_max_lr": 6e-4,
    "warmup_num_steps": 2, "warmup_type": "linear", "total_num_steps": 4}}'
ds plain ''
# the learning rates (-vvv's exact line: the log line under --deepspeed
# rounds them to {:.3E}, as Megatron-DeepSpeed prints them), to 7 digits;
# the golden ones of sequence NAME (first N)
lrs() { awk '/^ \[rank [0-9]*\] learning rate / { printf "%.6E ", $5 }' "$1"; }
golden() { awk -v n="$1" -v k="${2:-99}" '$1 == n && $2 <= k { printf "%.6E ", $4 }' "$SEQ"; }
exact() { sed -n 's/^ \[rank [0-9]*\] lm loss \([^ ]*\) grad norm \([^ ]*\)$/\1 \2/p' "$@"; }
# bitwise NAME A B: the exact loss and norm lines of A and B are the same (and there are some)
bitwise() { check "$1" test -n "$(exact "$2")" -a "$(exact "$2")" = "$(exact "$3")"; }

# --no-pipeline-parallel: engine.step(lr_kwargs={'increment': 2}) is a
# TypeError for WarmupLR, so step(train_batch_size = 2) every time
# shellcheck disable=SC2086
"$MDSTRAIN" $RUN --no-pipeline-parallel --deepspeed_config "$T/warm.json" >"$T/nopp" 2>"$T/nopp.err"
check nopp_exit0 test $? -eq 0
check nopp_lr_sequence test "$(lrs "$T/nopp")" = "$(golden nopp)"
check nopp_warned grep -q 'warning: the "scheduler" WarmupLR of .* stepped with train_batch_size 2 .* holds the learning rate at 0.00015904' "$T/nopp.err"
check nopp_table grep -q '^| deepspeed scheduler  *| WarmupLR, stepped with train_batch_size 2 ' "$T/nopp.err"
# the same rates from Megatron's schedule: 0 (init), then X = lr(2 samples of a one-iteration warmup of 2 samples)
X=$(awk '$1 == "nopp" && $2 == 1 { print $4 }' "$SEQ")
# shellcheck disable=SC2086
"$MDSTRAIN" $MOCK $TINY --train-iters 6 --lr "$X" --lr-warmup-iters 1 --lr-decay-style constant --log-interval 1 \
    --eval-iters 0 -q -v -v --deepspeed --no-pipeline-parallel --deepspeed_config "$T/plain.json" >"$T/flags" 2>"$T/err"
bitwise nopp_bitwise_megatron_schedule "$T/nopp" "$T/flags"
check nopp_six_lines test "$(exact "$T/flags" | wc -l)" -eq 6

# DeepSpeed's pipeline engine (no --no-pipeline-parallel) steps it by one
# shellcheck disable=SC2086
"$MDSTRAIN" $RUN --deepspeed_config "$T/warm.json" >"$T/pipe" 2>"$T/err"
check pipe_exit0 test $? -eq 0
check pipe_lr_sequence test "$(lrs "$T/pipe")" = "$(golden pipe 6)"
check pipe_changes_training test "$(exact "$T/pipe")" != "$(exact "$T/nopp")"
# shellcheck disable=SC2086
"$MDSTRAIN" $RUN --deepspeed_config "$T/decay.json" >"$T/decay" 2>"$T/err"
check decay_lr_sequence test "$(lrs "$T/decay")" = "$(golden decay_pipe)"
check decay_table grep -q '^| ds warmup lr / steps  *| 0.0001 to 0.0006 / 2 (linear), decay to 4 ' "$T/err"

# fp16 overflows: a skipped step does not step the scheduler, so after a
# applied steps the log shows the pipeline sequence's a-th rate (0 before)
ds fp16 ", \"fp16\": {\"enabled\": true, \"initial_scale_power\": 20, \"hysteresis\": 1}, \"scheduler\": {$WARMUP}"
# shellcheck disable=SC2086
"$MDSTRAIN" $RUN --train-iters 10 --deepspeed_config "$T/fp16.json" >"$T/fp16" 2>"$T/err"
check fp16_exit0 test $? -eq 0
awk '/^ \[rank [0-9]*\] learning rate / { printf "%.6E\n", $5 }' "$T/fp16" >"$T/fp16.rate"
sed -n 's/.*skipped iterations: *\([0-9]*\) .*/\1/p' "$T/fp16" | paste -d ' ' "$T/fp16.rate" - >"$T/fp16.lr"
check fp16_some_skipped grep -q ' 1$' "$T/fp16.lr"
check fp16_lr_follows_applied_steps awk -v seq="$SEQ" '
    BEGIN { while ((getline l < seq) > 0) { split(l, f, " "); if (f[1] == "pipe") want[f[2]] = sprintf("%.6E", f[4]) } }
    { a += 1 - $2; w = a ? want[a] : "0.000000E+00"; if ($1 != w) { print "  line " NR ": " $1 " want " w > "/dev/stderr"; bad = 1 } }
    END { exit bad || NR != 10 }' "$T/fp16.lr"

# resume: the scheduler's last_batch_iteration and the groups' learning
# rates come back; the second half is bitwise the straight run's, whatever
# --lr says then (Megatron-DeepSpeed neither compares nor uses it)
for mode in nopp pipe; do
    flag=
    [ $mode = nopp ] && flag=--no-pipeline-parallel
    rm -rf "$T/ck"
    # shellcheck disable=SC2086
    "$MDSTRAIN" $RUN $flag --deepspeed_config "$T/warm.json" --save "$T/ck" --save-interval 3 --exit-interval 3 \
        >"$T/first" 2>"$T/err"
    # shellcheck disable=SC2086
    "$MDSTRAIN" $RUN $flag --deepspeed_config "$T/warm.json" --load "$T/ck" --lr 9e-4 --override-opt_param-scheduler \
        >"$T/second" 2>"$T/err"
    check "resume_${mode}_exit0" test $? -eq 0
    check "resume_${mode}_override_noted" grep -q 'override-opt_param-scheduler has no effect' "$T/err"
    check "resume_${mode}_bitwise" test "$(exact "$T/first" "$T/second")" = "$(exact "$T/$mode")"
    check "resume_${mode}_lr" test "$(lrs "$T/first")$(lrs "$T/second")" = "$(lrs "$T/$mode")"
done
# the other kind of scheduler cannot take the saved state (DeepSpeed: KeyError)
# shellcheck disable=SC2086
{
run_expect resume_without_scheduler 1 'saved with a DeepSpeed config "scheduler" but this run has none' \
    "$MDSTRAIN" $RUN --deepspeed_config "$T/plain.json" --load "$T/ck"
rm -rf "$T/ck0"
"$MDSTRAIN" $RUN --deepspeed_config "$T/plain.json" --save "$T/ck0" --save-interval 1 --exit-interval 1 >/dev/null 2>&1
run_expect resume_with_scheduler 1 'saved without a DeepSpeed config "scheduler" but this run has one' \
    "$MDSTRAIN" $RUN --deepspeed_config "$T/warm.json" --load "$T/ck0"
}

# no "type": DeepSpeed takes Megatron's scheduler
ds notype ', "scheduler": {"params": {"warmup_max_lr": 0.5}}'
# shellcheck disable=SC2086
"$MDSTRAIN" $RUN --deepspeed_config "$T/notype.json" >"$T/notype" 2>"$T/err"
# shellcheck disable=SC2086
"$MDSTRAIN" $RUN --deepspeed_config "$T/plain.json" >"$T/megatron" 2>"$T/err"
bitwise notype_is_megatron_schedule "$T/notype" "$T/megatron"
# an unknown warmup_type: DeepSpeed's warning, and log
ds oddtype ', "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 1000, "warmup_type": "exp"}}'
# shellcheck disable=SC2086
"$MDSTRAIN" $RUN --deepspeed_config "$T/oddtype.json" >"$T/odd" 2>"$T/err"
check odd_warmup_type_warned grep -q 'Using unknown warmup_type: exp. The increasing function is set to default (log)' "$T/err"
check odd_warmup_type_is_log test "$(exact "$T/odd")" = "$(exact "$T/pipe")"

# refusals and DeepSpeed's failures, exit 2: refused NAME SCHEDULER REGEX
refused() {
    ds ref ", \"scheduler\": $2"
    # shellcheck disable=SC2086
    run_expect "$1" 2 "$3" "$MDSTRAIN" $RUN --deepspeed_config "$T/ref.json"
}
for name in OneCycle LRRangeTest WarmupCosineLR StepLR; do
    refused "refused_$name" "{\"type\": \"$name\", \"params\": {}}" "\"scheduler\": \"type\": \"$name\" is not supported by mds"
done
refused no_params '{"type": "WarmupLR"}' 'WarmupLR needs a "params" object'
refused unexpected_param '{"type": "WarmupLR", "params": {"total_num_steps": 10}}' \
    'WarmupLR got an unexpected keyword argument "total_num_steps"'
refused decay_needs_total '{"type": "WarmupDecayLR", "params": {}}' 'missing 1 required positional argument: "total_num_steps"'
refused per_group_list '{"type": "WarmupLR", "params": {"warmup_max_lr": [0.001, 0.002]}}' \
    '"scheduler": "warmup_max_lr" as a list is not supported'
refused unknown_key '{"type": "WarmupLR", "params": {}, "extra": 1}' '"scheduler": unknown key "extra"'
refused not_a_number '{"type": "WarmupLR", "params": {"warmup_max_lr": "x"}}' '"warmup_max_lr" must be a number'
finish
