#!/bin/sh
# test_load_flags.sh - mdstrain's --ckpt-step (Megatron's: the iteration to
# load instead of the tracker's), --skip-train (the end's evaluations of a
# loaded checkpoint, nothing trained, saved or written to TensorBoard) and
# --exit-on-missing-checkpoint, and the
# W&B flags (off with an empty --wandb-project, as Megatron; a project is
# exit 2, mds does not log there).  About 3 s.
. tests/cli/lib.sh
. tests/cli/parallel_lib.sh
no_launcher_env
RUN="$TINY_BASE --seq-length 16 --train-iters 4 --log-interval 1 --eval-iters 0 -q -v -v"

# shellcheck disable=SC2086
"$MDSTRAIN" $RUN --save "$T/ck" --save-interval 2 >"$T/whole" 2>/dev/null
check saved_2_and_4 sh -c "[ -d '$T/ck/iter_0000002' ] && [ -d '$T/ck/iter_0000004' ] && grep -qx 4 '$T/ck/latest_checkpointed_iteration.txt'"
# --ckpt-step 2 resumes at 2 although the tracker says 4: iterations 3 and 4 as the whole run's
# shellcheck disable=SC2086
"$MDSTRAIN" $RUN --load "$T/ck" --ckpt-step 2 >"$T/step2" 2>"$T/step2.err"
check step_resumes sh -c "[ $? -eq 0 ] && grep -q 'loading checkpoint from .* at iteration 2' '$T/step2.err'"
exact "$T/whole" | tail -n 2 >"$T/x1"; exact "$T/step2" >"$T/x2"
check step_same_losses sh -c "[ \"\$(wc -l <'$T/x2')\" -eq 2 ] && cmp -s '$T/x1' '$T/x2'"
# shellcheck disable=SC2086
run_expect step_missing 1 'iter_0000003' "$MDSTRAIN" $RUN --load "$T/ck" --ckpt-step 3
# shellcheck disable=SC2086
run_expect step_without_load 2 'ckpt-step goes with --load' "$MDSTRAIN" $RUN --ckpt-step 2

# --skip-train: the end's evaluations only, at the loaded iteration, equal to
# the training run's own; no iteration, no save, no TensorBoard scalar
RUNE="$TINY_BASE --seq-length 16 --train-iters 4 --log-interval 1 --eval-iters 2 --eval-interval 1000 -q"
# shellcheck disable=SC2086
"$MDSTRAIN" $RUNE --save "$T/cke" >"$T/trained" 2>/dev/null
# shellcheck disable=SC2086
"$MDSTRAIN" $RUNE --load "$T/cke" --save "$T/cke" --skip-train --tensorboard-dir "$T/tb" >"$T/skipped" 2>"$T/skipped.err"
check skip_train_exit0 test $? -eq 0
check skip_train_same_evaluations sh -c "grep 'validation loss at iteration 4 on' '$T/trained' >'$T/e1' &&
    grep 'validation loss at iteration' '$T/skipped' >'$T/e2' && [ \"\$(wc -l <'$T/e2')\" -eq 2 ] && cmp -s '$T/e1' '$T/e2'"
check skip_train_no_iteration sh -c "! grep -q '] iteration' '$T/skipped'"
check skip_train_no_save sh -c "[ \"\$(ls '$T/cke' | grep -c '^iter_')\" -eq 1 ]"
"$BUILD/tests/test_tensorboard" -d "$T"/tb/events.out.tfevents.* >"$T/tbdump" 2>/dev/null
check skip_train_no_scalars sh -c "! grep -q 'lm loss validation' '$T/tbdump'"

mkdir "$T/empty"
# shellcheck disable=SC2086
run_expect missing_starts_afresh 0 "warning: no 'latest_checkpointed_iteration.txt'" "$MDSTRAIN" $RUN --load "$T/empty"
# shellcheck disable=SC2086
run_expect missing_exits 1 'exit-on-missing-checkpoint: no checkpoint in' \
    "$MDSTRAIN" $RUN --load "$T/empty" --exit-on-missing-checkpoint

# shellcheck disable=SC2086
run_expect wandb_off 0 '' "$MDSTRAIN" $RUN --wandb-project '' --wandb-exp-name run1 --wandb-save-dir "$T/wb" --wandb-entity me
check wandb_off_writes_nothing test ! -e "$T/wb"
# shellcheck disable=SC2086
run_expect wandb_project_refused 2 "wandb-project' proj is not supported" "$MDSTRAIN" $RUN --wandb-project proj
finish
