#!/bin/sh
# test_parallel.sh - mdstrain over MPI (Open MPI's mpirun, oversubscribed on
# this 2-core machine): tensor, pipeline and data parallelism and the
# distributed optimizer each train a tiny GPT for 5 iterations with the
# losses and gradient norms of the one-process run; checkpoints of a
# TP2 x PP2 x DP2 job resume bitwise; a failing rank ends the whole job with
# its message within seconds; bad layouts are refused once, exit 2.
#
# Tolerance (fp32 model, losses summed in double): 2e-7 relative on the loss
# and 1e-5 on the gradient norm.  The parallel runs sum the same numbers in
# other orders (TP splits dot products, DP sums gradients rank by rank, the
# norm is summed per rank), so agreement is to fp32 rounding, not bitwise;
# what is seen is about 1e-8 on losses and 1e-6 on norms.  About 20 s.
. tests/cli/lib.sh
. tests/cli/parallel_lib.sh

if ! command -v "$MPIRUN" >/dev/null 2>&1; then
    fail "mpirun_present (install openmpi-bin: make deps)"; finish
fi
if ! "$MDSTRAIN" --version | grep -q 'MPI ('; then
    fail "mdstrain_built_with_mpi ($("$MDSTRAIN" --version))"; finish
fi

# the communicator alone (rank-ordered sums, groups, send/receive) on 3 and 4 ranks
# test_comm has 26 cases: 15 (among them comm.c's dispatch to a device transport,
# comm_nccl_init returning on every rank with its reason where there is no GPU or
# no NCCL, comm_place over injected GPU counts, host staging's copies), then the
# 11 collective ones again with every buffer host-staged; every one must pass on
# every rank count
for np in 3 4; do
    timeout 60 "$MPIRUN" -np $np "$BUILD/tests/test_comm" >"$T/comm" 2>&1
    rc=$?
    if [ "$rc" -eq 0 ] && [ "$(grep -c '^ok ' "$T/comm")" -eq 26 ]; then ok "comm_np$np"
    else fail "comm_np$np (exit $rc)"; cat "$T/comm" >&2; fi
done
# again with reduce-scatters and all-gathers cut into segments of 7 floats
# per rank (a chunk over 2^26 floats goes in segments; the test's are small)
MDS_TEST_COMM_SEGMENT=7 timeout 60 "$MPIRUN" -np 3 "$BUILD/tests/test_comm" >"$T/comm" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && [ "$(grep -c '^ok ' "$T/comm")" -eq 26 ]; then ok "comm_np3_segments"
else fail "comm_np3_segments (exit $rc)"; cat "$T/comm" >&2; fi

# shellcheck disable=SC2086
"$MDSTRAIN" $TINY >"$T/ref.log" 2>"$T/err"
check single_exit0 test $? -eq 0
exact "$T/ref.log" >"$T/ref"
check single_5_iters test "$(wc -l <"$T/ref")" -eq 5

# par NAME RANKS FLAGS...: a parallel run of TINY compared with the single one
par() {
    name=$1 np=$2; shift 2
    # shellcheck disable=SC2086
    timeout 120 "$MPIRUN" -np "$np" "$MDSTRAIN" $TINY "$@" >"$T/$name.log" 2>"$T/$name.err"
    rc=$?
    exact "$T/$name.log" >"$T/$name"
    if [ "$rc" -eq 0 ] && close "$T/$name"; then ok "$name"
    else fail "$name (exit $rc)"; tail -5 "$T/$name.err" >&2; fi
}
par tp2 2 --tensor-model-parallel-size 2
par tp4 4 --tensor-model-parallel-size 4
par pp2 2 --pipeline-model-parallel-size 2
par pp4 4 --pipeline-model-parallel-size 4
par dp4 4
par dp4_distopt 4 --use-distributed-optimizer
par tp2_pp2_dp2 8 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
par tp2_pp2_dp2_distopt 8 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --use-distributed-optimizer
# fewer micro-batches (2 per DP rank) than pipeline stages: warm-up is cut short
# shellcheck disable=SC2086
"$MDSTRAIN" $TINY --global-batch-size 2 >"$T/ref2.log" 2>/dev/null
exact "$T/ref2.log" >"$T/ref"
par pp4_short 4 --pipeline-model-parallel-size 4 --global-batch-size 2
# untied output layer, held by the last stage's TP ranks
# shellcheck disable=SC2086
"$MDSTRAIN" $TINY --untie-embeddings-and-output-weights >"$T/ref3.log" 2>/dev/null
exact "$T/ref3.log" >"$T/ref"
par untied_tp2_pp2 4 --untie-embeddings-and-output-weights --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2

# The Llama block (RoPE, RMSNorm, SwiGLU, no biases, untied, 2 query groups
# over 4 heads): TP splits the query groups, PP the layers, DP the batch.
LLAMA="--position-embedding-type rope --rotary-base 500000 --normalization RMSNorm --swiglu --ffn-hidden-size 48
       --group-query-attention --num-query-groups 2 --disable-bias-linear --untie-embeddings-and-output-weights"
# shellcheck disable=SC2086
"$MDSTRAIN" $TINY $LLAMA >"$T/ref4.log" 2>/dev/null
exact "$T/ref4.log" >"$T/ref"
check llama_single_5_iters test "$(wc -l <"$T/ref")" -eq 5
# shellcheck disable=SC2086
{
par llama_tp2 2 $LLAMA --tensor-model-parallel-size 2
par llama_pp2_dp2_distopt 4 $LLAMA --pipeline-model-parallel-size 2 --use-distributed-optimizer
par llama_tp2_pp2_dp2 8 $LLAMA --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
}
# bf16 and fp16 (rounded storage on the CPU): layouts agree with one process
# to the 16-bit formats' precision (a layout changes where partial sums are
# rounded: seen up to 8e-5 on the loss, 3.4e-3 on the norm)
for prec in bf16 fp16; do
    PREC="--$prec"; [ $prec = fp16 ] && PREC="--fp16 --initial-loss-scale 4096"
    # shellcheck disable=SC2086
    "$MDSTRAIN" $TINY $PREC >"$T/ref_$prec.log" 2>/dev/null
    exact "$T/ref_$prec.log" >"$T/ref"
    LOSS_TOL=5e-4 NORM_TOL=2e-2
    export LOSS_TOL NORM_TOL
    # shellcheck disable=SC2086
    {
    par ${prec}_tp2 2 $PREC --tensor-model-parallel-size 2
    par ${prec}_dp2 2 $PREC
    par ${prec}_pp2_dp2_distopt 4 $PREC --pipeline-model-parallel-size 2 --use-distributed-optimizer
    }
    unset LOSS_TOL NORM_TOL
done

# more tensor-parallel ranks than query groups: refused once, exit 2
# shellcheck disable=SC2086
timeout 60 "$MPIRUN" -np 4 "$MDSTRAIN" $TINY $LLAMA --tensor-model-parallel-size 4 >"$T/l4.log" 2>"$T/l4.err"
check llama_tp4_refused sh -c "test $? -eq 2 && grep -q 'query groups 2 is not divisible by the tensor model parallel size 4' '$T/l4.err'"

# Real data, DP2 x PP2, with validation: the log and validation lines on the
# last rank, the same validation losses as one process (to the printed 7 digits).
DATA=tests/data/golden/tiny_text_document
REAL="--data-path $DATA --split 90,10,0 --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32
      --max-position-embeddings 32 --micro-batch-size 1 --global-batch-size 4 --train-iters 4 --lr 1e-2
      --log-interval 1 --eval-interval 2 --eval-iters 1"
# shellcheck disable=SC2086
"$MDSTRAIN" -q $REAL >"$T/real1" 2>"$T/err"
# shellcheck disable=SC2086
timeout 120 "$MPIRUN" -np 4 "$MDSTRAIN" -q $REAL --pipeline-model-parallel-size 2 >"$T/real4" 2>"$T/err"
check real_dp2_pp2_exit0 test $? -eq 0
check real_log_lines test "$(grep -c '] iteration ' "$T/real4")" -eq 4
vals() { sed -n 's/^ validation loss at \(.*\) | lm loss value: \([^ ]*\) .*/\1 \2/p' "$1"; }
vals "$T/real1" >"$T/v1"; vals "$T/real4" >"$T/v4"
check real_validation_lines test "$(wc -l <"$T/v4")" -eq 3
# the same to the printed 7 digits (up to a unit of the last one)
same_vals() {
    test "$(wc -l <"$T/v1")" -eq "$(wc -l <"$T/v4")" && paste -d'|' "$T/v1" "$T/v4" | awk -F'|' '
        { split($1, a, " "); split($2, b, " "); d = a[length(a)] - b[length(b)]; if (d < 0) d = -d
          if (d > 2e-6 * a[length(a)]) bad = 1 }
        END { exit bad }'
}
check real_same_validation same_vals

# Checkpoints of TP2 x PP2 x DP2 with the distributed optimizer: 6 straight
# (saving at 3) equal 3 + save + load + 3, bit for bit.
CK="--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --use-distributed-optimizer --train-iters 6"
# shellcheck disable=SC2086
timeout 120 "$MPIRUN" -np 8 "$MDSTRAIN" $TINY $CK --save "$T/ckA" --save-interval 3 >"$T/a" 2>"$T/err"
check ckpt_straight_exit0 test $? -eq 0
for d in mp_rank_00_000 mp_rank_01_000 mp_rank_00_001 mp_rank_01_001; do
    check "ckpt_layout_$d" test -f "$T/ckA/iter_0000003/$d/model_optim_rng.bin"
done
check ckpt_layout_4_ranks test "$(ls "$T/ckA/iter_0000003" | wc -l)" -eq 4
check ckpt_latest test "$(cat "$T/ckA/latest_checkpointed_iteration.txt")" = 6
cp -r "$T/ckA" "$T/ckB"
echo 3 >"$T/ckB/latest_checkpointed_iteration.txt"
rm -rf "$T/ckB/iter_0000006"
# shellcheck disable=SC2086
timeout 120 "$MPIRUN" -np 8 "$MDSTRAIN" $TINY $CK --load "$T/ckB" --save "$T/ckB" >"$T/b" 2>"$T/err"
check ckpt_resume_exit0 test $? -eq 0
exact "$T/a" | tail -3 >"$T/la"; exact "$T/b" >"$T/lb"
check ckpt_resume_3_iters test "$(wc -l <"$T/lb")" -eq 3
check ckpt_resume_bitwise cmp -s "$T/la" "$T/lb"
ok_same=1
for d in mp_rank_00_000 mp_rank_01_000 mp_rank_00_001 mp_rank_01_001; do
    cmp -s "$T/ckA/iter_0000006/$d/model_optim_rng.bin" "$T/ckB/iter_0000006/$d/model_optim_rng.bin" || ok_same=0
done
check ckpt_resume_same_files test "$ok_same" -eq 1
# the same with --bf16 on PP2 x DP2: each rank updates only its shard of the
# fp32 masters; the files gather them, and a resume continues bitwise
CKB="--bf16 --pipeline-model-parallel-size 2 --use-distributed-optimizer --train-iters 6"
# shellcheck disable=SC2086
{
timeout 120 "$MPIRUN" -np 4 "$MDSTRAIN" $TINY $CKB --save "$T/ckE" --save-interval 3 >"$T/e1" 2>"$T/err"
timeout 120 "$MPIRUN" -np 4 "$MDSTRAIN" $TINY $CKB --save "$T/ckF" --exit-interval 3 >"$T/f1" 2>"$T/err"
timeout 120 "$MPIRUN" -np 4 "$MDSTRAIN" $TINY $CKB --load "$T/ckF" --save "$T/ckF" >"$T/f2" 2>"$T/err"
}
exact "$T/e1" >"$T/le"; cat "$T/f1" "$T/f2" | exact /dev/stdin >"$T/lf"
check ckpt_bf16_distopt_resume_bitwise sh -c "test \$(wc -l <'$T/le') -eq 6 && cmp -s '$T/le' '$T/lf'"
check ckpt_bf16_distopt_same_files cmp -s "$T/ckE/iter_0000006/mp_rank_00_001/model_optim_rng.bin" \
    "$T/ckF/iter_0000006/mp_rank_00_001/model_optim_rng.bin"
# another layout is refused by the rank that finds it (exit 1)
# shellcheck disable=SC2086
timeout 120 "$MPIRUN" -np 4 "$MDSTRAIN" $TINY --tensor-model-parallel-size 4 --load "$T/ckA" >"$T/c" 2>"$T/err"
check ckpt_other_layout_fails test $? -ne 0
check ckpt_other_layout_message grep -q "cannot load the checkpoint: .*mp_rank_0[0-3]/model_optim_rng.bin" "$T/err"

# A failing rank ends the job: damage rank (t 1, p 1)'s file; that rank
# stops with its message while the others wait in a collective, and
# MPI_Abort ends them all.
printf 'x' | dd of="$T/ckB/iter_0000003/mp_rank_01_001/model_optim_rng.bin" bs=1 seek=5000 conv=notrunc 2>/dev/null
echo 3 >"$T/ckB/latest_checkpointed_iteration.txt"
t0=$(date +%s)
# shellcheck disable=SC2086
timeout 120 "$MPIRUN" -np 8 "$MDSTRAIN" $TINY $CK --load "$T/ckB" >"$T/d" 2>"$T/err"
rc=$?
t1=$(date +%s)
check failing_rank_exit_nonzero test "$rc" -ne 0 -a "$rc" -ne 124
check failing_rank_message grep -q "rank [0-9]: cannot load the checkpoint: .*mp_rank_01_001/model_optim_rng.bin': weights checksum mismatch" "$T/err"
check failing_rank_fast test $((t1 - t0)) -lt 30
check failing_rank_no_training test "$(grep -c '] iteration ' "$T/d")" -eq 0

# A rank killed with SIGKILL mid-training under mpirun: Open MPI's launcher
# ends every other rank within seconds and names the dead rank in one line
# (the ranks themselves are killed, so they print nothing; over TCP each
# rank names it: test_parallel_tcp.sh).
# shellcheck disable=SC2086
timeout -s KILL 120 "$MPIRUN" -np 4 "$MDSTRAIN" $TINY --train-iters 1000000 --log-interval 100 \
    --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 >"$T/k" 2>"$T/kerr" &
kp=$!
n=0
while [ "$n" -lt 300 ] && ! grep -q '] iteration ' "$T/k" 2>/dev/null; do sleep 0.1; n=$((n + 1)); done
# rank 1: the child of this mpirun (the child of timeout(1)) whose
# environment has Open MPI's rank 1
children() { for s in /proc/[0-9]*/stat; do awk -v p="$1" '$4 == p { print $1 }' "$s" 2>/dev/null; done; }
victim=
for mp in $(children "$kp"); do
    for c in $(children "$mp"); do
        tr '\0' '\n' <"/proc/$c/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && victim=$c
    done
done
check mpi_kill_found_rank1 test -n "$victim"
t0=$(date +%s)
[ -n "$victim" ] && kill -9 "$victim"
wait "$kp"
rc=$?
t1=$(date +%s)
check mpi_kill_job_fails test "$rc" -ne 0   # 137: mpirun passes on the signal's status
check mpi_kill_fast test $((t1 - t0)) -lt 60
check mpi_kill_names_rank grep -q 'process rank 1 with PID .* exited on signal 9' "$T/kerr"

# layouts that do not fit: one message (from rank 0), exit 2
timeout 60 "$MPIRUN" -np 3 "$MDSTRAIN" $TINY --tensor-model-parallel-size 2 >"$T/out" 2>"$T/err"
check bad_world_exit2 test $? -eq 2
check bad_world_message_once test "$(grep -c 'world size 3 is not divisible by tensor (2) x pipeline (1)' "$T/err")" -eq 1
# shellcheck disable=SC2086
timeout 60 "$MPIRUN" -np 3 "$MDSTRAIN" $TINY >"$T/out" 2>"$T/err"
check bad_batch_exit2 test $? -eq 2
check bad_batch_message grep -q 'global-batch-size 8 is not divisible by micro-batch size (1) times data parallel size (3)' "$T/err"
timeout 60 "$MPIRUN" -np 2 "$MDSTRAIN" $TINY --tensor-model-parallel-size 2 --num-attention-heads 3 --hidden-size 33 \
    >"$T/out" 2>"$T/err"
check bad_heads_exit2 test $? -eq 2
check bad_heads_message grep -q 'number of attention heads 3 is not divisible by the tensor model parallel size 2' "$T/err"
# NCCL needs the GPU backend: refused from one rank, the same everywhere
# shellcheck disable=SC2086
timeout 60 "$MPIRUN" -np 2 "$MDSTRAIN" $TINY --device cpu --device-comm nccl >"$T/out" 2>"$T/err"
check nccl_on_cpu_exit2 test $? -eq 2
check nccl_on_cpu_message_once test "$(grep -c -- 'rank 0: --device-comm nccl needs --device cuda' "$T/err")" -eq 1
# two ranks on the GPU: without one (this machine, or a build without CUDA)
# refused once before anything starts; with GPUs it is make test-gpu's
# shellcheck disable=SC2086
timeout 60 "$MPIRUN" -np 2 "$MDSTRAIN" $TINY --device cuda --train-iters 1 >"$T/out" 2>"$T/err"
rc=$?
if grep -q -- '--device cuda: \(no CUDA device found\|this mdstrain was built without CUDA\)' "$T/err"; then
    check cuda_two_ranks_no_gpu_exit2 test "$rc" -eq 2
    check cuda_two_ranks_no_gpu_message_once test "$(grep -c -- '--device cuda: ' "$T/err")" -eq 1
else
    skip cuda_two_ranks_no_gpu "a GPU is present (make test-gpu runs several ranks on it)"
fi
finish
