#!/bin/sh
# test_embedln.sh - bigscience's --embed-layernorm in mdstrain (the model is
# held to PyTorch by test_reference, its gradient by test_model): with
# dropout on (0.1), TP2, PP2, DP2 with the distributed optimizer and
# TP2 x PP2 over TCP give the one-process losses and gradient norms (within
# parallel_lib.sh's tolerance); --sequence-parallel is bitwise TP2 (losses,
# norms, checkpoint); a run stopped by --exit-interval and resumed from its
# checkpoint is bitwise the straight run, in one process and at TP2; a
# checkpoint with the norm does not load without the flag, nor one without
# it with the flag (exit 1 naming the field); the combinations no reference
# defines (--export-hf, --load-hf, RMSNorm, --apply-layernorm-1p) exit 2
# naming them; --layernorm-epsilon is --norm-epsilon.  About 20 s.
. tests/cli/lib.sh
. tests/cli/parallel_lib.sh
no_launcher_env
E=--embed-layernorm
CKF=iter_0000005/mp_rank_00/model_optim_rng.bin

# one process: the reference lines and checkpoint
# shellcheck disable=SC2086
"$MDSTRAIN" $TINY $E --save "$T/one.ckpt" >"$T/one.log" 2>"$T/one.err"
check one_exit0 test $? -eq 0
exact "$T/one.log" >"$T/ref"
check one_5_iters test "$(wc -l <"$T/ref")" -eq 5
check one_named grep -q '^| norm / mlp / linear bias  *| LayerNorm (+ embedding) / GELU' "$T/one.err"
# shellcheck disable=SC2086
"$MDSTRAIN" $TINY --save "$T/plain.ckpt" >"$T/plain.log" 2>"$T/plain.err"
exact "$T/plain.log" >"$T/plain"
check not_the_plain_model sh -c "test -s '$T/plain' && ! cmp -s '$T/plain' '$T/ref'"

# bigscience's spelling of the blocks' epsilon, --layernorm-epsilon, is
# --norm-epsilon (the embedding norm keeps 1e-5: test_reference)
# shellcheck disable=SC2086
"$MDSTRAIN" $TINY $E --norm-epsilon 1e-2 >"$T/eps1.log" 2>"$T/err"
# shellcheck disable=SC2086
"$MDSTRAIN" $TINY $E --layernorm-epsilon 1e-2 >"$T/eps2.log" 2>"$T/err"
exact "$T/eps1.log" >"$T/eps1"
exact "$T/eps2.log" >"$T/eps2"
check layernorm_epsilon_spelling sh -c "test -s '$T/eps1' && cmp -s '$T/eps1' '$T/eps2' && ! cmp -s '$T/eps1' '$T/ref'"

# par NAME NP FLAGS...: over TCP, close to one process; lines in $T/NAME,
# the checkpoint in $T/NAME.ckpt
par() {
    name=$1 np=$2; shift 2
    # shellcheck disable=SC2086
    tcp "$name" "$np" slurm $TINY $E --save "$T/$name.ckpt" "$@"
    exact "$T/$name".*.log >"$T/$name"
    if [ "$rc" -eq 0 ] && close "$T/$name"; then ok "$name"
    else fail "$name (exit $rc)"; tail -n 3 "$T/$name".*.err >&2; fi
}
par tp2 2 --tensor-model-parallel-size 2
par pp2 2 --pipeline-model-parallel-size 2
par dp2_distopt 2 --use-distributed-optimizer
par tp2_pp2 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
# its weight and bias are 2 C = 64 more floats in each of the checkpoint's
# three sections: 768 bytes (test_model: on the first pipeline stage only)
size() { wc -c <"$1"; }
check ckpt_768_bytes_more test "$(size "$T/one.ckpt/$CKF")" -eq "$(($(size "$T/plain.ckpt/$CKF") + 768))"

# sequence parallelism: bitwise TP2
# shellcheck disable=SC2086
tcp tp2_sp 2 slurm $TINY $E --save "$T/tp2_sp.ckpt" --tensor-model-parallel-size 2 --sequence-parallel
exact "$T/tp2_sp".*.log >"$T/tp2_sp"
check tp2_sp_exit0 test "$rc" -eq 0
check tp2_sp_bitwise cmp -s "$T/tp2" "$T/tp2_sp"
check tp2_sp_same_checkpoint diff -r "$T/tp2.ckpt" "$T/tp2_sp.ckpt"

# resume: stopped at 3, resumed to 5, bitwise the straight runs
# shellcheck disable=SC2086
"$MDSTRAIN" $TINY $E --save "$T/rs" --exit-interval 3 >"$T/rs1.log" 2>"$T/rs1.err" &&
    "$MDSTRAIN" $TINY $E --save "$T/rs" --load "$T/rs" >"$T/rs2.log" 2>"$T/rs2.err"
check resume_exit0 test $? -eq 0
check resume_loaded grep -q 'successfully loaded checkpoint from .* at iteration 3' "$T/rs2.err"
exact "$T/rs1.log" "$T/rs2.log" >"$T/rs.lines"
check resume_same_lines cmp -s "$T/ref" "$T/rs.lines"
check resume_same_checkpoint cmp -s "$T/one.ckpt/$CKF" "$T/rs/$CKF"
# shellcheck disable=SC2086
tcp tp2_rs1 2 slurm $TINY $E --save "$T/tp2rs" --tensor-model-parallel-size 2 --exit-interval 3
r1=$rc
# shellcheck disable=SC2086
tcp tp2_rs2 2 slurm $TINY $E --save "$T/tp2rs" --load "$T/tp2rs" --tensor-model-parallel-size 2
exact "$T"/tp2_rs1.*.log "$T"/tp2_rs2.*.log >"$T/tp2rs.lines"
check tp2_resume_exit0 test "$r1" -eq 0 -a "$rc" -eq 0
check tp2_resume_same_lines cmp -s "$T/tp2" "$T/tp2rs.lines"
check tp2_resume_same_checkpoint diff -r "$T/tp2.ckpt/iter_0000005" "$T/tp2rs/iter_0000005"

# the architecture is recorded: no load across it (exit 1, the field named)
# shellcheck disable=SC2086
run_expect ckpt_needs_flag 1 "embed_layernorm is 1 in the checkpoint but 0 in this run" \
    "$MDSTRAIN" $TINY --load "$T/one.ckpt" --train-iters 6
# shellcheck disable=SC2086
run_expect ckpt_without_norm 1 "embed_layernorm is 0 in the checkpoint but 1 in this run" \
    "$MDSTRAIN" $TINY $E --load "$T/plain.ckpt" --train-iters 6

# what no reference defines: exit 2, named
# shellcheck disable=SC2086
run_expect no_export_hf 2 "--embed-layernorm with --export-hf is not supported" \
    "$MDSTRAIN" $TINY $E --load "$T/one.ckpt" --export-hf "$T/hf"
# shellcheck disable=SC2086
run_expect no_load_hf 2 "--embed-layernorm with --load-hf is not supported" \
    "$MDSTRAIN" $TINY $E --load-hf "$T/no-such-folder"
# shellcheck disable=SC2086
run_expect no_rmsnorm 2 "--embed-layernorm with --normalization RMSNorm is not defined by any reference" \
    "$MDSTRAIN" $TINY $E --normalization RMSNorm
# shellcheck disable=SC2086
run_expect no_ln1p 2 "--embed-layernorm with --apply-layernorm-1p is not defined by any reference" \
    "$MDSTRAIN" $TINY $E --apply-layernorm-1p
finish
