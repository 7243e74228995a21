#!/bin/sh
# test_log_stats.sh - mdstrain's --log-num-zeros-in-grad and --log-params-norm
# (Megatron's 'num zeros:' and 'params norm:' fields after 'grad norm:', and
# its num-zeros / params-norm TensorBoard scalars): the zeros are exactly the
# position-embedding rows no position reaches (seq 8 of 16: 8 x hidden,
# counted once however the model is laid out), the norm is the same with TP2,
# PP2 and DP2 with the distributed optimizer over TCP (bf16's fp32 masters
# too), a skipped --fp16 iteration has no count, TensorBoard holds the
# printed values, and --deepspeed refuses both.  (No linear biases: the
# key bias's gradient is zero up to rounding, exactly zero or not by layout.)
# About 10 s.
. tests/cli/lib.sh
. tests/cli/parallel_lib.sh
no_launcher_env
SMALL="$TINY_BASE --seq-length 8 --train-iters 4 --log-interval 2 --eval-iters 0 --hidden-dropout 0
       --attention-dropout 0 --disable-bias-linear --log-num-zeros-in-grad --log-params-norm"
# fields NAME: "num-zeros params-norm" of each log line of $T/NAME (or of its last rank's log)
fields() { sed -n 's/.*| num zeros: \([0-9.]*\) | params norm: \([0-9.]*\) | number of skipped.*/\1 \2/p' "$T/$1"; }

# shellcheck disable=SC2086
"$MDSTRAIN" -q $SMALL >"$T/one" 2>"$T/one.err"
check one_exit0 test $? -eq 0
fields one >"$T/f1"
check one_two_lines test "$(wc -l <"$T/f1")" -eq 2
check one_after_grad_norm grep -Eq '\| grad norm: [0-9.]+ \| num zeros: 256\.0 \| params norm: [0-9]+\.[0-9]{3} \| number of skipped' "$T/one"
check one_zeros_are_unused_positions sh -c "cut -d' ' -f1 '$T/f1' | sort -u | grep -qx 256.0"
check one_norm_moves sh -c "[ \"\$(cut -d' ' -f2 '$T/f1' | sort -u | wc -l)\" -eq 2 ]"
# without the flags the line is as before
# shellcheck disable=SC2086,SC2046
"$MDSTRAIN" -q $(echo $SMALL | sed 's/--log-num-zeros-in-grad --log-params-norm//') >"$T/plain" 2>/dev/null
check plain_no_fields sh -c "grep -q '] iteration' '$T/plain' && ! grep -q 'num zeros\|params norm' '$T/plain'"

# the same figures in every layout (the last rank prints)
for lay in "tp2:--tensor-model-parallel-size 2" "pp2:--pipeline-model-parallel-size 2" \
           "dp2:--use-distributed-optimizer"; do
    name=${lay%%:*}
    # shellcheck disable=SC2086
    tcp "$name" 2 torch $SMALL -q ${lay#*:}
    fields "$name.1.log" >"$T/f_$name"
    check "${name}_same_figures" sh -c "[ ${rc:-1} -eq 0 ] && cmp -s '$T/f1' '$T/f_$name'"   # (rc: tcp's)
done
# bf16: the fp32 masters' norm, the distributed optimizer's shards summed over the ranks
# shellcheck disable=SC2086
"$MDSTRAIN" -q $SMALL --bf16 >"$T/bf" 2>/dev/null
fields bf >"$T/fbf"
# shellcheck disable=SC2086
tcp bfdp2 2 torch $SMALL -q --bf16 --use-distributed-optimizer
fields bfdp2.1.log >"$T/fbfdp2"
check bf16_dp2_same_norm sh -c "[ -s '$T/fbf' ] && cut -d' ' -f2 '$T/fbf' >'$T/a' && cut -d' ' -f2 '$T/fbfdp2' >'$T/b' && cmp -s '$T/a' '$T/b'"

# --fp16 from the default scale: the first iterations overflow, no count there
# shellcheck disable=SC2086
"$MDSTRAIN" -q $SMALL --fp16 --log-interval 1 >"$T/fp16" 2>/dev/null
check fp16_skipped_no_zeros sh -c "grep '] iteration        1/' '$T/fp16' | grep -q 'skipped iterations:   1' &&
    ! grep '] iteration        1/' '$T/fp16' | grep -q 'num zeros' && grep -q 'params norm' '$T/fp16'"

# TensorBoard: num-zeros and params-norm (and their "vs samples") at each iteration, the printed values
# shellcheck disable=SC2086
"$MDSTRAIN" -q $SMALL --tensorboard-dir "$T/tbdir" >"$T/tb" 2>/dev/null
"$BUILD/tests/test_tensorboard" -d "$T"/tbdir/events.out.tfevents.* >"$T/tbdump" 2>/dev/null
for tag in num-zeros 'num-zeros vs samples' params-norm 'params-norm vs samples'; do
    check "tb_$(echo "$tag" | tr ' ' _)_4" test "$(grep -Pc "^$tag\\t" "$T/tbdump")" -eq 4
done
z=$(grep -P '^num-zeros\t2\t' "$T/tbdump" | cut -f3)
p=$(grep -P '^params-norm\t2\t' "$T/tbdump" | cut -f3)
check tb_values test "$(printf '%.1f %.3f' "$z" "$p")" = "$(fields tb | head -1)"

run_expect deepspeed_refused 2 'log-params-norm with --deepspeed' "$MDSTRAIN" $SMALL --deepspeed --deepspeed_config /dev/null
finish
