#!/bin/sh
# test_tensorboard.sh - mdstrain --tensorboard-dir: the event files are those
# the real tensorboard package reads (fixtures recorded once by
# tests/data/tensorboard/make_fixtures.sh: our reader, which checks the
# framing and both CRCs of every record, reads exactly what tensorboard read
# from them; a fresh run writes the same tags, steps and values), Megatron's
# tags and steps, the lm loss of each iteration equal to the log line's, the
# intervals, a killed run leaving a readable file, a resumed run adding a
# file that continues the steps, one writer in a parallel job, and the flags'
# refusals.  About 10 s.
. tests/cli/lib.sh
MDSTRAIN=${MDSTRAIN:-$BUILD/mdstrain}
TBDUMP="$BUILD/tests/test_tensorboard -d"
D=tests/data/tensorboard
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
no_launcher_env

# 1. our reader on the committed files reads exactly what tensorboard read
for f in synthetic mdstrain; do
    $TBDUMP "$D/$f.tfevents" >"$T/$f.ours" 2>"$T/err"
    check "fixture_${f}_reads" test $? -eq 0
    LC_ALL=C sort "$T/$f.ours" >"$T/a"; LC_ALL=C sort "$D/$f.tensorboard.txt" >"$T/b"
    check "fixture_${f}_same_as_tensorboard" sh -c "[ -s '$T/a' ] && cmp -s '$T/a' '$T/b'"
done

# 2. a fresh run with the fixture's flags: the same scalars (all but the
#    timings and memory figures) at the same steps, values within 1e-6
#    relative (the kernels are deterministic; the margin only allows another ISA)
# shellcheck disable=SC2046
"$MDSTRAIN" -q $(cat "$D/mdstrain.flags") --tensorboard-dir "$T/tb" >"$T/log" 2>"$T/err"
check run_exit0 test $? -eq 0
set -- "$T"/tb/events.out.tfevents.*
check one_file test $# -eq 1
host=$(hostname)
check file_name sh -c "basename '$1' | grep -Eq '^events\\.out\\.tfevents\\.[0-9]{10}\\.$host\\.[0-9]+\\.0\$'"
$TBDUMP "$1" >"$T/fresh"
check fresh_reads test $? -eq 0
det() { grep -Pv '^(file_version|iteration-time|throughput|mem-[a-z-]*)\t' "$1" | cut -f1-3 | LC_ALL=C sort; }
det "$T/fresh" >"$T/f1"; det "$D/mdstrain.tensorboard.txt" >"$T/f2"
check fresh_same_tags_and_steps sh -c "cut -f1,2 '$T/f1' >'$T/k1'; cut -f1,2 '$T/f2' >'$T/k2'; [ -s '$T/k1' ] && cmp -s '$T/k1' '$T/k2'"
check fresh_same_values sh -c "paste '$T/f1' '$T/f2' | awk -F'\t' '{ d = \$3 - \$6; if (d < 0) d = -d; a = \$6 < 0 ? -\$6 : \$6;
    if (d > 1e-6 * a) { print \"  differs: \" \$0 > \"/dev/stderr\"; bad = 1 } } END { exit bad }'"
# Megatron's tags, each at every iteration (training) or evaluation
count() { grep -Pc "^$1\\t" "$T/fresh"; }
for tag in 'lm loss' 'lm loss vs samples' learning-rate 'learning-rate vs samples' batch-size 'batch-size vs samples' \
           loss-scale 'loss-scale vs samples' grad-norm 'grad-norm vs samples' world-size 'world-size vs samples' \
           mem-reserved-bytes mem-allocated-bytes mem-max-allocated-bytes; do
    check "tag_$(echo "$tag" | tr ' ' _)_6" test "$(count "$tag")" -eq 6
done
check tag_iteration_time_3 test "$(count iteration-time)" -eq 3
check tag_throughput_3 test "$(count throughput)" -eq 3
check tag_validation_3 test "$(count 'lm loss validation')" -eq 3
check tag_validation_ppl_3 test "$(count 'lm loss validation ppl')" -eq 3
check file_version_first sh -c "head -n 1 '$T/fresh' | grep -Pq '^file_version\\tbrain.Event:2\\t'"
check vs_samples_step grep -Pq '^lm loss vs samples\t12\t' "$T/fresh"
check loss_scale_one grep -Pq '^loss-scale\t3\t1.0\t' "$T/fresh"
check world_size_one grep -Pq '^world-size\t3\t1.0\t' "$T/fresh"
check lr_after_step grep -Pq '^learning-rate\t1\t0.004999999888241291\t' "$T/fresh"
check ppl_is_exp sh -c "grep -P '^lm loss validation(| ppl)\\t3\\t' '$T/fresh' | cut -f3 | paste -s | awk '{ r = exp(\$1) / \$2; exit !(r > 0.99999 && r < 1.00001) }'"
check throughput_positive sh -c "grep -P '^throughput\\t' '$T/fresh' | awk -F'\t' '\$3 <= 0 { bad = 1 } END { exit bad }'"
check memory_positive sh -c "grep -P '^mem-reserved-bytes\\t' '$T/fresh' | awk -F'\t' '\$3 < 1e6 { bad = 1 } END { exit bad }'"

# 3. lm loss at each iteration is the log line's loss (log interval 1);
#    --tensorboard-log-interval 2 keeps the even iterations
TB_TINY="--mock-data --tokenizer-type NullTokenizer --vocab-size 127 --num-layers 2 --hidden-size 32
      --num-attention-heads 4 --seq-length 16 --max-position-embeddings 16 --micro-batch-size 1
      --global-batch-size 2 --lr 1e-2 --eval-iters 0"
# shellcheck disable=SC2086
"$MDSTRAIN" -q $TB_TINY --train-iters 4 --log-interval 1 --tensorboard-dir "$T/tb1" >"$T/log1" 2>"$T/err"
sed -n 's/.*lm loss: \([^ ]*\) .*/\1/p' "$T/log1" >"$T/l1"
$TBDUMP "$T"/tb1/* | grep -P '^lm loss\t' | cut -f3 >"$T/l2"
# same_loss A B: 4 lines each, equal to the log's 7 digits (the event holds a float32)
same_loss() {
    [ "$(wc -l <"$1")" -eq "$3" ] && [ "$(wc -l <"$2")" -eq "$3" ] && paste "$1" "$2" | awk '{ d = $1 - $2; if (d < 0) d = -d;
        if (d > 1e-6 * $1) { print "  differs: " $0 > "/dev/stderr"; bad = 1 } } END { exit bad }'
}
check loss_equals_log_line same_loss "$T/l1" "$T/l2" 4
# shellcheck disable=SC2086
"$MDSTRAIN" -q $TB_TINY --train-iters 4 --log-interval 1 --tensorboard-dir "$T/tb2" --tensorboard-log-interval 2 >/dev/null 2>&1
check tb_log_interval sh -c "$TBDUMP $T/tb2/* | grep -P '^lm loss\\t' | cut -f2 | paste -sd' ' | grep -qx '2 4'"

# 4. killed with SIGKILL mid-training: the file holds whole records, every
#    scalar up to the last log interval (queue 1000: only the flushes wrote)
#    The log file exists before the run starts (the background shell may not
#    have opened it yet when the loop first reads it), and the wait allows
#    two minutes for three logged steps on a loaded machine.
: >"$T/logk"
# shellcheck disable=SC2086
"$MDSTRAIN" -q $TB_TINY --train-iters 100000 --log-interval 2 --tensorboard-dir "$T/tbk" >"$T/logk" 2>&1 &
pid=$!
n=0
while [ "$n" -lt 1200 ] && [ "$(grep -c '] iteration ' "$T/logk")" -lt 3 ]; do sleep 0.1; n=$((n + 1)); done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
last=$(grep '] iteration ' "$T/logk" | tail -n 1 | sed 's/.*iteration *\([0-9]*\)\/.*/\1/')
$TBDUMP "$T"/tbk/* >"$T/killed"
check killed_run_readable test $? -eq 0
check killed_run_has_logged_steps grep -Pq "^lm loss\\t$last\\t" "$T/killed"

# 5. resume: a second file in the same directory continues the steps
CK="$TB_TINY --train-iters 4 --log-interval 1 --save $T/ck --tensorboard-dir $T/tbr"
# shellcheck disable=SC2086
"$MDSTRAIN" -q $CK --exit-interval 2 >/dev/null 2>&1 && sleep 1 && "$MDSTRAIN" -q $CK --load "$T/ck" >/dev/null 2>&1
check resume_exit0 test $? -eq 0
set -- "$T"/tbr/events.out.tfevents.*
check resume_two_files test $# -eq 2
check resume_steps sh -c "for f in $*; do $TBDUMP \$f | grep -P '^lm loss\\t' | cut -f2 | paste -sd' '; done | paste -sd'|' | grep -qx '1 2|3 4'"

# 6. in parallel only the last rank writes, one file, its losses the log's
if command -v mpirun >/dev/null 2>&1 && "$MDSTRAIN" --version | grep -q 'MPI ('; then
    . tests/cli/parallel_lib.sh
    # shellcheck disable=SC2086
    timeout -s KILL 120 mpirun -np 2 "$MDSTRAIN" -q $TB_TINY --train-iters 3 --log-interval 1 \
        --pipeline-model-parallel-size 2 --tensorboard-dir "$T/tbp" >"$T/logp" 2>"$T/errp"
    check parallel_exit0 test $? -eq 0
    set -- "$T"/tbp/events.out.tfevents.*
    check parallel_one_file test $# -eq 1
    sed -n 's/.*lm loss: \([^ ]*\) .*/\1/p' "$T/logp" >"$T/p1"
    $TBDUMP "$1" | grep -P '^lm loss\t' | cut -f3 >"$T/p2"
    check parallel_loss_equals_log same_loss "$T/p1" "$T/p2" 3
else
    skip parallel_one_writer "no MPI in this build"
fi

# 7. flags: refused values exit 2, an unwritable directory exit 1; the
#    companions without --tensorboard-dir are accepted (nothing to write, as Megatron)
BASE="$TB_TINY --train-iters 1"
# shellcheck disable=SC2086
{
run_expect queue_zero 2 "'--tensorboard-queue-size' needs an integer" "$MDSTRAIN" $BASE --tensorboard-dir "$T/x" --tensorboard-queue-size 0
run_expect interval_zero 2 "'--tensorboard-log-interval' needs an integer" "$MDSTRAIN" $BASE --tensorboard-dir "$T/x" --tensorboard-log-interval 0
touch "$T/afile"
run_expect dir_is_file 1 "cannot write TensorBoard events: cannot create directory '$T/afile/sub'" "$MDSTRAIN" $BASE --tensorboard-dir "$T/afile/sub"
run_expect companions_without_dir 0 "" "$MDSTRAIN" -q $BASE --log-timers-to-tensorboard --log-memory-to-tensorboard \
    --log-validation-ppl-to-tensorboard --no-log-loss-scale-to-tensorboard --tensorboard-queue-size 5
# (the timers' NAME-time scalars: tests/cli/test_timers.sh)
run_expect timing_level_without_dir 0 "" "$MDSTRAIN" -q $BASE --log-timers-to-tensorboard --timing-log-level 1
}
# shellcheck disable=SC2086
"$MDSTRAIN" -q $BASE --tensorboard-dir "$T/tbn" --no-log-loss-scale-to-tensorboard --no-log-learnig-rate-to-tensorboard >/dev/null 2>&1
check no_loss_scale_no_lr sh -c "$TBDUMP $T/tbn/* >'$T/n' && grep -Pq '^lm loss\\t' '$T/n' && ! grep -Pq '^(loss-scale|learning-rate)' '$T/n'"
# Megatron-DeepSpeed's --log-optimizer-states-to-tensorboard: the figures of
# the AdamW state and weights the checkpoint of the same iteration holds
# (512-byte header, then n weights, n m, n v as float32)
# shellcheck disable=SC2086
"$MDSTRAIN" -q $TB_TINY --train-iters 2 --tensorboard-dir "$T/tbo" --log-optimizer-states-to-tensorboard --save "$T/cko" >/dev/null 2>&1
check optimizer_states_exit0 test $? -eq 0
$TBDUMP "$T"/tbo/* >"$T/o" 2>/dev/null
check optimizer_states_24_tags test "$(awk -F'\t' '/^optimizer\// {print $1}' "$T/o" | sort -u | wc -l)" -eq 24
check optimizer_states_vs_tokens sh -c "grep -Pq '^optimizer/weight_l2 vs tokens\t$((2 * 32))\t' '$T/o'"
ck=$T/cko/iter_0000002/mp_rank_00/model_optim_rng.bin
n=$(( ($(stat -c %s "$ck") - 512) / 12 ))
od -An -v -f -j 512 -w4 "$ck" | awk -v n="$n" '{ x = $1 + 0; a = x < 0 ? -x : x; i = NR - 1
    if (i < n) { w2 += x * x } else if (i < 2 * n) { m1 += a } else if (a > vm) { vm = a } }
    END { printf "%.9g %.9g %.9g\n", sqrt(w2), m1, vm }' >"$T/ckstats"
awk -F'\t' '$2 == 2 && $1 == "optimizer/weight_l2" { w = $3 } $2 == 2 && $1 == "optimizer/momentum_l1" { m = $3 }
    $2 == 2 && $1 == "optimizer/variance_abs_max" { v = $3 } END { print w, m, v }' "$T/o" >"$T/tbstats"
check optimizer_states_equal_checkpoint awk 'NR == FNR { for (i = 1; i <= 3; i++) a[i] = $i; next }
    { for (i = 1; i <= 3; i++) { d = a[i] - $i; if (d < 0) d = -d; if (!(a[i] > 0) || d > 1e-5 * a[i]) exit 1 } }' "$T/ckstats" "$T/tbstats"
"$MDSTRAIN" --help >"$T/help"
check help_lists_tensorboard grep -q -- '--tensorboard-dir DIR' "$T/help"
finish
