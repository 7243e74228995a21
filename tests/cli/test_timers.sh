#!/bin/sh
# test_timers.sh - Megatron's timers in mdstrain (--timing-log-level,
# --timing-log-option, --no-barrier-with-level-1-timing, and the NAME-time
# scalars of --log-timers-to-tensorboard): the blocks where Megatron prints
# them (setup, load, evaluate, save at level 0; each log interval at 1 and
# 2), Megatron's names in its order for each configuration (fp32, fp16,
# the distributed optimizer with and without overlapped all-gathers), each
# pipeline transfer under its Megatron name on the ranks that make it (PP2
# over TCP, --timing-log-option all), the losses unchanged by any level,
# printed by the last rank only, and the refusals.  (The block's bytes
# against Megatron's own timers.py: tests/unit/test_timers.c.)  About 10 s.
. tests/cli/lib.sh
. tests/cli/parallel_lib.sh
no_launcher_env
TINY2="$TINY_BASE --seq-length 16 --train-iters 4 --log-interval 2 --eval-interval 2 --eval-iters 1"
HEAD_MINMAX='INFO:megatron.core.timers:(min, max) time across ranks (ms):'

# run NAME FLAGS...: one process; stdout in $T/NAME, stderr in $T/NAME.err
run() {
    name=$1; shift
    # shellcheck disable=SC2086
    "$MDSTRAIN" $TINY2 "$@" >"$T/$name" 2>"$T/$name.err"
}
# names NAME K: the timer names of the K-th block whose first name is not a
# level-0 one (an interval's block), one per line
names() {
    awk -v k="$2" '
        /^INFO:megatron.core.timers:/ { inblk = 1; n++; first = 1; next }
        inblk && /^    [^ ]/ { sub(/^    /, ""); sub(/ \.*:.*$/, ""); if (first) { lvl0 = ($0 ~ /^(model-and-|train\/valid|evaluate|save-|load-)/); if (!lvl0) m++ } first = 0; if (!lvl0 && m == k) print; next }
        { inblk = 0 }' "$T/$1"
}
# every timer line of NAME in minmax form, the colon at column 53 (name + " " padded with dots to 48)
well_formed() {
    grep -q . "$T/$1" && ! grep -A100 '^INFO:megatron.core.timers:' "$T/$1" | grep '^    ' |
        grep -Ev '^    [a-z/-]+ \.*: \([0-9]+\.[0-9]{2}, [0-9]+\.[0-9]{2}\)$' | grep -q . &&
        ! grep '^    [a-z]' "$T/$1" | awk '{ if (index($0, ":") != 53) bad = 1 } END { exit !bad }'
}
L1_FP32='forward-backward embedding-grads-all-reduce all-grads-sync optimizer-copy-to-main-grad optimizer-inner-step optimizer'
L2='batch-generator forward-compute backward-compute'
list() { names "$1" "$2" | tr '\n' ' ' | sed 's/ $//'; }

# 1. level 0 (Megatron's default): the setup block before training, one
#    evaluate block before each validation box, save-checkpoint after a
#    save; nothing at the log intervals
run l0 --save "$T/ck" --save-interval 4 -v -v
check l0_exit0 test $? -eq 0
check l0_setup_first sh -c "grep -v '^ \[rank' '$T/l0' | head -3 | tr '\n' '|' | grep -Eq '^INFO:megatron.core.timers:\\(min, max\\) time across ranks \\(ms\\):\\|    model-and-optimizer-setup \\.+: \\([0-9.]+, [0-9.]+\\)\\|    train/valid/test-data-iterators-setup \\.+: \\([0-9.]+, [0-9.]+\\)\\|\$'"
check l0_evaluate_before_each_box test "$(grep -c '^    evaluate \.' "$T/l0")" -eq 4 -a \
    "$(grep -A1 '^    evaluate \.' "$T/l0" | grep -c '^-----')" -eq 4
check l0_save_block sh -c "grep -A1 '^INFO:megatron.core.timers:' '$T/l0' | grep -c '^    save-checkpoint \\.' | grep -qx 1"
check l0_no_interval_timers sh -c "! grep -q 'forward-backward' '$T/l0'"
check l0_well_formed well_formed l0
check l0_blocks_counted test "$(grep -c "^$HEAD_MINMAX\$" "$T/l0")" -eq 6

# 2. a resumed run: load-checkpoint, before the setup block
run load --load "$T/ck"
check load_block sh -c "grep -v '^ \\[' '$T/load' | sed -n 2p | grep -q '^    load-checkpoint \\.'"
check load_then_setup sh -c "grep -v '^ \\[' '$T/load' | sed -n 4p | grep -q '^    model-and-optimizer-setup \\.'"

# 3. levels 1 and 2 each log interval, Megatron's names in its order; the
#    losses those of level 0 to the bit
run l1 --timing-log-level 1 -v -v
check l1_names_fp32 test "$(list l1 1)" = "$L1_FP32"
check l1_names_second test "$(list l1 2)" = "$L1_FP32"
check l1_well_formed well_formed l1
run l2 --timing-log-level 2 -v -v
check l2_names test "$(list l2 1)" = "$L1_FP32 $L2"
check l2_after_iteration_line sh -c "grep -v '^ \\[rank' '$T/l2' | grep -A1 '^ \\[.*\\] iteration  *2/' | sed -n 2p | grep -qxF '$HEAD_MINMAX'"
exact "$T/l0" >"$T/x0"; exact "$T/l1" >"$T/x1"; exact "$T/l2" >"$T/x2"
check levels_same_losses sh -c "[ -s '$T/x0' ] && cmp -s '$T/x0' '$T/x1' && cmp -s '$T/x0' '$T/x2'"
run nob --timing-log-level 1 --no-barrier-with-level-1-timing
check no_barrier_names test "$(list nob 1)" = "$L1_FP32"

# 4. the options: max, and every rank's
run max --timing-log-level 1 --timing-log-option max
check max_head test "$(grep -c '^INFO:megatron.core.timers:max time across ranks (ms):$' "$T/max")" -eq 7
check max_lines sh -c "grep '^    forward-backward \\.' '$T/max' | grep -Eqx '    forward-backward \\.+: [0-9]+\\.[0-9]{2}'"
run all --timing-log-level 1 --timing-log-option all
check all_head test "$(grep -c '^INFO:megatron.core.timers:times across ranks (ms):$' "$T/all")" -eq 7
check all_lines sh -c "grep -A1 '^  forward-backward:\$' '$T/all' | grep -Eqx '     rank  0: [0-9]+\\.[0-9]{2}'"

# 5. what each configuration times: fp16 (unscaling; a constant scale, so
#    every step is taken), the distributed optimizer (params-all-gather),
#    overlapped all-gathers (none: Megatron's forward hooks gather)
run fp16 --timing-log-level 1 --fp16 --loss-scale 1
check fp16_names test "$(list fp16 1)" = "forward-backward embedding-grads-all-reduce all-grads-sync optimizer-copy-to-main-grad optimizer-unscale-and-check-inf optimizer-inner-step optimizer"
run fp16dyn --timing-log-level 1 --fp16
check fp16_skipped_no_step sh -c "grep -A8 '^ \\[.*iteration  *2/' '$T/fp16dyn' | grep -q 'number of skipped iterations:   2' && ! grep -A8 '^ \\[.*iteration  *2/' '$T/fp16dyn' | grep -q 'optimizer-inner-step'"
run zero1 --timing-log-level 1 --use-distributed-optimizer
check distopt_names test "$(list zero1 1)" = "forward-backward embedding-grads-all-reduce all-grads-sync params-all-gather optimizer-copy-to-main-grad optimizer-inner-step optimizer"
run overlap --timing-log-level 1 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
check overlap_no_params_all_gather sh -c "grep -q '^    all-grads-sync \\.' '$T/overlap' && ! grep -q 'params-all-gather' '$T/overlap'"

# 6. TensorBoard: NAME-time at each log interval, the max over the ranks in
#    seconds (the block's milliseconds), only with --log-timers-to-tensorboard
run tb --timing-log-level 1 --tensorboard-dir "$T/tbdir" --log-timers-to-tensorboard
"$BUILD/tests/test_tensorboard" -d "$T"/tbdir/events.out.tfevents.* >"$T/tbdump" 2>/dev/null
for n in $L1_FP32; do
    check "tb_${n}_time" test "$(grep -Pc "^$n-time\\t[24]\\t" "$T/tbdump")" -eq 2
done
check tb_matches_block sh -c "v=\$(grep -P '^forward-backward-time\\t2\\t' '$T/tbdump' | cut -f3); \
    b=\$(grep -m1 '^    forward-backward \\.' '$T/tb' | sed 's/.*, \\([0-9.]*\\))\$/\\1/'); \
    awk -v v=\"\$v\" -v b=\"\$b\" 'BEGIN { d = v * 1000 - b; exit !(v > 0 && d < 0.0051 && d > -0.0051) }'"
run tbno --timing-log-level 1 --tensorboard-dir "$T/tbnodir"
"$BUILD/tests/test_tensorboard" -d "$T"/tbnodir/events.out.tfevents.* >"$T/tbnodump" 2>/dev/null
check tb_needs_flag sh -c "[ -s '$T/tbnodump' ] && ! grep -q -- '-time	' '$T/tbnodump'"

# 7. PP2 over TCP, every rank's times: each transfer under Megatron's name on
#    the stage that makes it (1F1B: stage 0 sends forward, receives
#    backward; stage 1 the reverse), printed by the last rank only
# shellcheck disable=SC2086
tcp pp2 2 torch $TINY --train-iters 2 --log-interval 2 --pipeline-model-parallel-size 2 \
    --timing-log-level 2 --timing-log-option all
check pp2_exit0 test "${rc:-1}" -eq 0   # (rc: reap's, in parallel_lib.sh)
check pp2_rank0_prints_none sh -c "! grep -q '^INFO:' '$T/pp2.0.log'"
ranks_of() { awk -v n="  $1:" '$0 == n { on = 1; next } on && /^     rank/ { printf "%s ", $2 + 0; next } { on = 0 }' "$T/pp2.1.log" | sed 's/ $//'; }
check pp2_forward_send_stage0 test "$(ranks_of forward-send)" = "0"
check pp2_forward_recv_stage1 test "$(ranks_of forward-recv)" = "1"
check pp2_backward_recv_stage0 test "$(ranks_of backward-recv)" = "0"
check pp2_backward_send_stage1 test "$(ranks_of backward-send)" = "1"
check pp2_fwd_send_bwd_recv_stage0 test "$(ranks_of forward-send-backward-recv)" = "0"
check pp2_bwd_send_fwd_recv_stage1 test "$(ranks_of backward-send-forward-recv)" = "1"
check pp2_forward_backward_both test "$(ranks_of forward-backward)" = "0 1"
check pp2_batch_generator_both test "$(ranks_of batch-generator)" = "0 1"

# 8. Python logging's level (Megatron's setup_logging: --logging-level, else
#    $MEGATRON_LOGGING_LEVEL): above INFO (20) no block; the flag wins
run warn --timing-log-level 1 --logging-level 30
check level_30_no_blocks sh -c "grep -q '] iteration' '$T/warn' && ! grep -q '^INFO:' '$T/warn'"
MEGATRON_LOGGING_LEVEL=30 run envwarn --timing-log-level 1
check env_30_no_blocks sh -c "grep -q '] iteration' '$T/envwarn' && ! grep -q '^INFO:' '$T/envwarn'"
MEGATRON_LOGGING_LEVEL=30 run envflag --timing-log-level 1 --logging-level 1_0
check flag_over_env test "$(grep -c '^INFO:' "$T/envflag")" -eq 7
run_expect env_level_refused 2 "MEGATRON_LOGGING_LEVEL: invalid literal for int\(\) with base 10: 'INFO'" \
    env MEGATRON_LOGGING_LEVEL=INFO "$MDSTRAIN" $TINY2

# 9. refusals: Megatron's choices, and the fork's timers under --deepspeed
run_expect level_3_refused 2 'timing-log-level' "$MDSTRAIN" $TINY2 --timing-log-level 3
run_expect option_refused 2 'timing-log-option.*sum' "$MDSTRAIN" $TINY2 --timing-log-option sum
printf '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 1}\n' >"$T/ds.json"
run_expect deepspeed_level_1_refused 2 'timing-log-level 1 with --deepspeed' \
    "$MDSTRAIN" $TINY2 --deepspeed --deepspeed_config "$T/ds.json" --timing-log-level 1
# shellcheck disable=SC2086
"$MDSTRAIN" $TINY2 --deepspeed --deepspeed_config "$T/ds.json" --timing-log-level 0 >"$T/ds" 2>"$T/ds.err"
check deepspeed_level_0_no_blocks sh -c "[ $? -eq 0 ] && grep -q 'iteration' '$T/ds' && ! grep -q '^INFO:' '$T/ds'"
finish
