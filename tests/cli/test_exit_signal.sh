#!/bin/sh
# test_exit_signal.sh - mdstrain's --exit-signal-handler and --exit-signal
# (Megatron's DistributedSignalHandler: the signal to any rank saves a
# checkpoint after the iteration under way and stops every rank, exit 0,
# without the end-of-training evaluation; the checkpoint resumes), the
# default without the flag (the signal ends the process), and the Megatron
# flags accepted for what mds does anyway (the kernel-fusion switches, the
# garbage collector's interval, the NaN check): the same losses bit for bit;
# and the checkpoint strategies (--async-save, --no-save-rng, the fully
# parallel save and load, ...): the same files.
# About 10 s.
. tests/cli/lib.sh
. tests/cli/parallel_lib.sh
no_launcher_env
TINY2="$TINY_BASE --seq-length 16 --eval-interval 1000000 --eval-iters 1 --log-interval 5 --train-iters 100000"

# wait_for FILE: until FILE has an iteration line (at most 30 s)
wait_for() {
    for _ in $(seq 300); do
        grep -q '] iteration' "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# 1. one process: SIGTERM saves and stops
# shellcheck disable=SC2086
"$MDSTRAIN" $TINY2 --exit-signal-handler --save "$T/ck" >"$T/one" 2>"$T/one.err" &
pid=$!
wait_for "$T/one" && kill -TERM "$pid"
wait "$pid"
check one_exit0 test $? -eq 0
check one_said grep -q '^exiting program after receiving SIGTERM\.$' "$T/one.err"
n=$(cat "$T/ck/latest_checkpointed_iteration.txt" 2>/dev/null)
check one_saved sh -c "[ -n '$n' ] && grep -q 'successfully saved checkpoint from iteration  *$n to' '$T/one.err'"
check one_no_final_evaluation sh -c "! grep -q 'on validation set' '$T/one'"
# it resumes: one more iteration (--exit-interval n + 1)
# shellcheck disable=SC2086
"$MDSTRAIN" $TINY2 --load "$T/ck" --exit-interval "$((n + 1))" --log-interval 1 >"$T/resume" 2>"$T/resume.err"
check one_resumes sh -c "[ $? -eq 0 ] && grep -q '] iteration  *$((n + 1))/' '$T/resume'"

# 2. --exit-signal SIGUSR1: that signal instead
# shellcheck disable=SC2086
"$MDSTRAIN" $TINY2 --exit-signal-handler --exit-signal SIGUSR1 >"$T/usr1" 2>"$T/usr1.err" &
pid=$!
wait_for "$T/usr1" && kill -USR1 "$pid"
wait "$pid"
check usr1_exit0 test $? -eq 0
check usr1_said grep -q '^exiting program after receiving SIGTERM\.$' "$T/usr1.err"

# 3. without the flag the signal ends the process, as before
# shellcheck disable=SC2086
"$MDSTRAIN" $TINY2 >"$T/plain" 2>"$T/plain.err" &
pid=$!
wait_for "$T/plain" && kill -TERM "$pid"
wait "$pid" 2>/dev/null
check plain_killed test $? -eq 143

# 4. DP2 over TCP: the signal to rank 1 alone stops both after the same
#    iteration, and both save their part
next_port
# shellcheck disable=SC2086
launch dp2 2 torch $TINY2 --exit-signal-handler --save "$T/ck2"
# shellcheck disable=SC2154
wait_for "$T/dp2.1.log" && kill -TERM "$(echo "$pids" | awk '{ print $2 }')"
reap
check dp2_exit0 test "${rc:-1}" -eq 0   # (rc: reap's, in parallel_lib.sh)
n2=$(cat "$T/ck2/latest_checkpointed_iteration.txt" 2>/dev/null)
check dp2_same_iteration sh -c "[ -n '$n2' ] && grep -q 'successfully saved checkpoint from iteration  *$n2 to' '$T/dp2.0.err' &&
    grep -c 'exiting program after receiving SIGTERM' '$T/dp2.0.err' | grep -qx 1"

# 5. refusals and Megatron's flags for what mds does anyway
run_expect sigkill_refused 2 "exit-signal' SIGKILL is not supported" "$MDSTRAIN" $TINY2 --exit-signal SIGKILL
run_expect no_nan_check_refused 2 "no-check-for-nan-in-loss-and-grad' is not supported" \
    "$MDSTRAIN" $TINY2 --no-check-for-nan-in-loss-and-grad
SHORT="--train-iters 3 --log-interval 1 -v -v"
# shellcheck disable=SC2086
"$MDSTRAIN" $TINY2 $SHORT >"$T/ref" 2>/dev/null
# shellcheck disable=SC2086
"$MDSTRAIN" $TINY2 $SHORT --no-masked-softmax-fusion --no-bias-gelu-fusion --no-bias-swiglu-fusion \
    --no-bias-dropout-fusion --no-rope-fusion --no-persist-layer-norm --check-for-nan-in-loss-and-grad \
    --manual-gc --manual-gc-interval 10 --no-manual-gc-eval --no-overlap-p2p-communication >"$T/compat" 2>"$T/compat.err"
check compat_exit0 test $? -eq 0
exact "$T/ref" >"$T/x1"; exact "$T/compat" >"$T/x2"
check compat_same_losses sh -c "[ -s '$T/x1' ] && cmp -s '$T/x1' '$T/x2'"
# the checkpoint strategies: the same files, in both formats
for fmt in mds torch_dist; do
    F=""; [ "$fmt" = torch_dist ] && F="--ckpt-format torch_dist"
    # shellcheck disable=SC2086
    "$MDSTRAIN" $TINY2 $SHORT $F --save "$T/c1_$fmt" >/dev/null 2>&1
    # shellcheck disable=SC2086
    "$MDSTRAIN" $TINY2 $SHORT $F --save "$T/c2_$fmt" --no-save-rng --async-save --use-persistent-ckpt-worker \
        --ckpt-fully-parallel-save --ckpt-fully-parallel-load --ckpt-assume-constant-structure --use-dist-ckpt \
        --auto-detect-ckpt-format >/dev/null 2>&1
    # (a torch_dist .metadata differs between any two saves)
    check "ckpt_flags_same_files_$fmt" sh -c "[ $? -eq 0 ] && diff -r -x .metadata '$T/c1_$fmt' '$T/c2_$fmt' >/dev/null"
done
finish
