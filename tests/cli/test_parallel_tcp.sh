#!/bin/sh
# test_parallel_tcp.sh - mdstrain over the TCP transport: 2, 4 and 8 local
# processes started by hand as srun would start them (SLURM_PROCID,
# SLURM_NTASKS, SLURM_LOCALID) or as torchrun does (RANK, WORLD_SIZE,
# LOCAL_RANK), meeting at MASTER_ADDR:MASTER_PORT on the loopback.
#
# The losses and norms printed by -v -v are bitwise those of mpirun with the
# same layout (both transports run the same rank-ordered sums) and within
# test_parallel.sh's tolerance of one process, and host-staged
# (--device-comm host-staged) and with --overlap-grad-reduce bitwise the
# same; a rank killed with SIGKILL (or failing for its own reason) ends the
# others within seconds, each naming it, while a rank stopped for a while
# is waited for; a wrong task count, an unreachable master and a Slurm node
# list without MASTER_ADDR give one clear line and exit 1 within
# MDS_RENDEZVOUS_TIMEOUT.  Every process is waited for (each runs under
# timeout(1)); none is left behind.  About 90 s.
. tests/cli/lib.sh
. tests/cli/parallel_lib.sh
# nothing of an outer launcher may leak into the ranks started here
no_launcher_env

have_mpi=0
if command -v "$MPIRUN" >/dev/null 2>&1 && "$MDSTRAIN" --version | grep -q 'MPI ('; then have_mpi=1; fi

# shellcheck disable=SC2086
"$MDSTRAIN" $TINY >"$T/ref.log" 2>"$T/err"
exact "$T/ref.log" >"$T/ref"
check single_5_iters test "$(wc -l <"$T/ref")" -eq 5

# par NAME NP FLAGS...: TCP run close to one process, bitwise equal to mpirun's
par() {
    name=$1 np=$2; shift 2
    # shellcheck disable=SC2086
    tcp "$name" "$np" slurm $TINY "$@"
    exact "$T/$name".*.log >"$T/$name"
    if [ "$rc" -eq 0 ] && close "$T/$name"; then ok "tcp_$name"
    else fail "tcp_$name (exit $rc)"; tail -n 3 "$T/$name".*.err >&2; fi
    [ "$have_mpi" -eq 1 ] || return 0
    # shellcheck disable=SC2086
    timeout -s KILL 120 "$MPIRUN" -np "$np" "$MDSTRAIN" $TINY "$@" >"$T/$name.mpi" 2>"$T/$name.mpierr"
    exact "$T/$name.mpi" >"$T/$name.m"
    check "tcp_${name}_bitwise_as_mpi" cmp -s "$T/$name" "$T/$name.m"
}
par tp2 2 --tensor-model-parallel-size 2
par dp2_pp2 4 --pipeline-model-parallel-size 2
par dp4_distopt 4 --use-distributed-optimizer
par tp2_pp2_dp2 8 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --use-distributed-optimizer
check tcp_backend_named grep -q "| communication  *| TCP (127.0.0.1:$PORT) " "$T/tp2_pp2_dp2.0.err"

# Host staging (--device-comm host-staged; on a GPU it lets ranks share
# one): here the CPU backend's copies stage every buffer, and the losses and
# norms are bitwise the unstaged runs' (staging only moves the bytes).
# TP2, PP2 x DP2, and TP2 x PP2 x DP2 with the distributed optimizer.
staged() {   # NAME NP FLAGS...: NAME is par's unstaged run (launch sets $name: keep ours apart)
    sn=$1 np=$2; shift 2
    # shellcheck disable=SC2086
    tcp "${sn}_staged" "$np" slurm $TINY "$@" --device-comm host-staged
    exact "$T/${sn}_staged".*.log >"$T/${sn}_staged"
    if [ "$rc" -eq 0 ] && cmp -s "$T/${sn}_staged" "$T/$sn"; then ok "staged_${sn}_bitwise_as_tcp"
    else fail "staged_${sn}_bitwise_as_tcp (exit $rc)"; tail -n 3 "$T/${sn}_staged".*.err >&2; fi
    check "staged_${sn}_copies" grep -q ' host-staged [1-9][0-9]* bytes;' "$T/${sn}_staged.0.err"
}
staged tp2 2 --tensor-model-parallel-size 2
staged dp2_pp2 4 --pipeline-model-parallel-size 2
staged tp2_pp2_dp2 8 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --use-distributed-optimizer
check staged_table_row grep -q "| communication  *| TCP (127.0.0.1:$PORT), host-staged " "$T/tp2_pp2_dp2_staged.0.err"
check unstaged_no_copies sh -c "! grep -q 'host-staged' '$T/tp2_pp2_dp2.0.err'"

# --overlap-grad-reduce: the last micro-batch's backward hands each layer's
# gradients to a communication thread, which all-reduces them over dp in
# buckets (--ddp-bucket-size 1000: about one per layer) while the layers
# below compute; the rank-ordered sums do not depend on the bucketing, so
# the losses and norms are bitwise those of the one all-reduce after the
# backward, at DP2 (fp32 and fp16 main gradients), DP2 x PP2 and
# TP2 x PP2 x DP2 (and host-staged).  With the distributed optimizer the
# buckets are reduce-scattered (each rank owning a chunk of each bucket, so
# its optimizer state is in pieces): 4 layers' buckets and the rest, 5
# reduce-scatters and 5 all-gathers where one of each ran; the losses
# bitwise the same, the norms within 1e-13 (each rank's squared norm is
# summed piece by piece, so the doubles are grouped otherwise: the last bit
# moves, and the clipping factor, a float, did not in these runs).
OVL="--overlap-grad-reduce --ddp-bucket-size 1000"
overlap() {   # NAME NP BASE FLAGS...: BASE is the run without overlap
    on=$1 np=$2 base=$3; shift 3
    # shellcheck disable=SC2086
    tcp "${on}_ovl" "$np" slurm $TINY "$@" $OVL
    exact "$T/${on}_ovl".*.log >"$T/${on}_ovl"
    if [ "$rc" -eq 0 ] && cmp -s "$T/${on}_ovl" "$T/$base"; then ok "overlap_${on}_bitwise"
    else fail "overlap_${on}_bitwise (exit $rc)"; tail -n 3 "$T/${on}_ovl".*.err >&2; fi
}
# shellcheck disable=SC2086
tcp dp2 2 slurm $TINY
exact "$T"/dp2.*.log >"$T/dp2"
overlap dp2 2 dp2
check overlap_dp2_row grep -q '^| gradient reduce  *| overlapped: all-reduce, buckets of 1000 ' "$T/dp2_ovl.0.err"
# 4 layers: 4 buckets, the tensors outside the layers (2 calls), the loss: 7 all-reduces, not 2
check overlap_dp2_buckets grep -q '^\[rank 0\] (t 0, d 0, p 0) .* dp all-reduce 7.0 calls ' "$T/dp2_ovl.0.err"
check overlap_dp2_one_reduce grep -q '^\[rank 0\] (t 0, d 0, p 0) .* dp all-reduce 2.0 calls ' "$T/dp2.0.err"
overlap dp2_pp2 4 dp2_pp2 --pipeline-model-parallel-size 2
# fp16 main gradients: the hook rounds each slice as the backward's end would
# shellcheck disable=SC2086
tcp dp2_fp16 2 slurm $TINY --fp16
exact "$T"/dp2_fp16.*.log >"$T/dp2_fp16"
check dp2_fp16_fp16_grads grep -q '^| precision  *| fp16, main grads fp16 ' "$T/dp2_fp16.0.err"
overlap dp2_fp16 2 dp2_fp16 --fp16
# shellcheck disable=SC2086
tcp tp2_pp2_dp2_ar 8 slurm $TINY --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
exact "$T"/tp2_pp2_dp2_ar.*.log >"$T/tp2_pp2_dp2_ar"
check tp2_pp2_dp2_allreduce_close close "$T/tp2_pp2_dp2_ar"
overlap tp2_pp2_dp2 8 tp2_pp2_dp2_ar --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
overlap dp2_pp2_staged 4 dp2_pp2 --pipeline-model-parallel-size 2 --device-comm host-staged
# shellcheck disable=SC2086
tcp dp4_distopt_ovl 4 slurm $TINY --use-distributed-optimizer $OVL
exact "$T"/dp4_distopt_ovl.*.log >"$T/dp4_distopt_ovl"
cut -d' ' -f1 "$T/dp4_distopt" >"$T/dp4_distopt.losses"
check overlap_dp4_distopt_losses_bitwise sh -c "test $rc -eq 0 && test \$(wc -l <'$T/dp4_distopt_ovl') -eq 5 &&
    cut -d' ' -f1 '$T/dp4_distopt_ovl' | cmp -s - '$T/dp4_distopt.losses'"
check overlap_dp4_distopt_norms_close sh -c "paste -d' ' '$T/dp4_distopt' '$T/dp4_distopt_ovl' |
    awk '{ d = \$2 - \$4; if (d < 0) d = -d; if (d > 1e-13 * \$2) bad = 1 } END { exit bad }'"
# --overlap-param-gather: each bucket's all-gather waited for by the next
# forward just before the bucket's first layer (the embeddings' first): a
# copy, so the losses and norms bitwise those of the gather after the step,
# at DP4, PP2 x DP2 (the first stage needs the embeddings' bucket first,
# the last the output layer's last) and host-staged; the table says so
# shellcheck disable=SC2086
tcp dp4_pg 4 slurm $TINY --use-distributed-optimizer $OVL --overlap-param-gather
exact "$T"/dp4_pg.*.log >"$T/dp4_pg"
check param_gather_dp4_bitwise sh -c "test $rc -eq 0 && test \$(wc -l <'$T/dp4_pg') -eq 5 && cmp -s '$T/dp4_pg' '$T/dp4_distopt_ovl'"
check param_gather_row grep -q '^| parameter gather  *| overlapped: all-gathers in the forward ' "$T/dp4_pg.0.err"
# and with every collective that runs between a step and the next (the kill
# switch's, --exit-duration-in-mins', --exit-signal-handler's, the timers'
# barriers and blocks, --log-num-zeros-in-grad's, the optimizer states' for
# TensorBoard, evaluation's timer): each waits for the gathers first (they
# share the pairs' connections), and the losses are the same
# shellcheck disable=SC2086
tcp dp4_pg_all 4 slurm $TINY --use-distributed-optimizer $OVL --overlap-param-gather \
    --exit-duration-in-mins 100 --kill-switch-path "$T/no-such-switch" --exit-signal-handler --timing-log-level 2 \
    --log-num-zeros-in-grad --log-params-norm --tensorboard-dir "$T/tb_pg" --log-timers-to-tensorboard \
    --log-optimizer-states-to-tensorboard --eval-iters 1 --eval-interval 2
exact "$T"/dp4_pg_all.*.log >"$T/dp4_pg_all"
check param_gather_collectives_between_steps sh -c "test $rc -eq 0 && test \$(wc -l <'$T/dp4_pg_all') -eq 5 &&
    cmp -s '$T/dp4_pg_all' '$T/dp4_pg'"
check param_gather_same_calls grep -q '^\[rank 0\] (t 0, d 0, p 0) .* dp reduce-scatter 5.0 calls .* dp all-gather 5.0 calls ' "$T/dp4_pg.0.err"
for v in plain pg staged; do
    case $v in plain) f="" ;; pg) f="--overlap-param-gather" ;; staged) f="--overlap-param-gather --device-comm host-staged" ;; esac
    # shellcheck disable=SC2086
    tcp "pp2_dp2_$v" 4 slurm $TINY --pipeline-model-parallel-size 2 --use-distributed-optimizer $OVL $f
    eval "rc_$v=$rc"
    exact "$T/pp2_dp2_$v".*.log >"$T/pp2_dp2_$v"
done
check param_gather_pp2_dp2_bitwise sh -c "test $rc_plain$rc_pg$rc_staged = 000 && test \$(wc -l <'$T/pp2_dp2_pg') -eq 5 &&
    cmp -s '$T/pp2_dp2_pg' '$T/pp2_dp2_plain' && cmp -s '$T/pp2_dp2_staged' '$T/pp2_dp2_plain'"
check overlap_distopt_row grep -q '^| gradient reduce  *| overlapped: reduce-scatter, buckets of 1000 ' "$T/dp4_distopt_ovl.0.err"
check overlap_distopt_buckets grep -q '^\[rank 0\] (t 0, d 0, p 0) .* dp reduce-scatter 5.0 calls .* dp all-gather 5.0 calls ' "$T/dp4_distopt_ovl.0.err"
check overlap_distopt_one_scatter grep -q '^\[rank 0\] (t 0, d 0, p 0) .* dp reduce-scatter 1.0 calls .* dp all-gather 1.0 calls ' "$T/dp4_distopt.0.err"
# the distributed optimizer's pieces through a checkpoint: overlapped (a
# chunk of each bucket per rank, the parameters gathered in the forward:
# the save and the load finish them first), --bf16 (each rank's share of
# the fp32 masters), 6 iterations straight (saving at 3) equal 3 + save +
# load + 3 bit for bit, and the files of iteration 6 the same
DOV="--use-distributed-optimizer $OVL --overlap-param-gather --bf16 --train-iters 6"
# shellcheck disable=SC2086
tcp dov_a 2 slurm $TINY $DOV --save "$T/dovA" --save-interval 3
ra=$rc
# shellcheck disable=SC2086
tcp dov_b 2 slurm $TINY $DOV --save "$T/dovB" --exit-interval 3
rb=$rc
# shellcheck disable=SC2086
tcp dov_c 2 slurm $TINY $DOV --load "$T/dovB" --save "$T/dovB"
check distopt_overlap_ckpt_exit0 test "$ra$rb$rc" = 000
exact "$T"/dov_a.*.log >"$T/dov_a"
cat "$T"/dov_b.*.log "$T"/dov_c.*.log | exact /dev/stdin >"$T/dov_bc"
check distopt_overlap_resume_bitwise sh -c "test \$(wc -l <'$T/dov_a') -eq 6 && cmp -s '$T/dov_a' '$T/dov_bc'"
check distopt_overlap_resume_same_files cmp -s "$T/dovA/iter_0000006/mp_rank_00/model_optim_rng.bin" \
    "$T/dovB/iter_0000006/mp_rank_00/model_optim_rng.bin"
if [ "$have_mpi" -eq 1 ]; then   # the worker thread under MPI (MPI_THREAD_MULTIPLE)
    # shellcheck disable=SC2086
    timeout -s KILL 120 "$MPIRUN" -np 2 "$MDSTRAIN" $TINY $OVL >"$T/ovl.mpi" 2>"$T/ovl.mpierr"
    check overlap_mpi_exit0 test $? -eq 0
    exact "$T/ovl.mpi" >"$T/ovl.m"
    check overlap_mpi_bitwise_as_tcp cmp -s "$T/ovl.m" "$T/dp2"
fi

# GPU ranks' start-up decision with an injected GPU count (MDS_TEST_GPU_COUNT;
# comm_place's own cases are in tests/mpi/test_comm.c): two ranks on one
# host with one GPU are refused by one line from rank 0 naming the way out,
# exit 2 on both, unless they may share it; without --device the job falls
# back to the CPU, as before.
export MDS_TEST_GPU_COUNT=1
# shellcheck disable=SC2086
tcp over 2 slurm $TINY --device cuda --tensor-model-parallel-size 2
check gpu_oversubscribed_exit2 test "$rc" -eq 2
check gpu_oversubscribed_one_line test "$(cat "$T"/over.*.err | grep -c "^mdstrain: rank 0: 2 ranks on host '[^']*' (local rank 0) but 1 GPU: NCCL needs a GPU per rank; start at most 1 rank per host, or share the GPUs with --device-comm host-staged\$")" -eq 1
check gpu_oversubscribed_only_rank0 test ! -s "$T/over.1.err"
saved_device=${MDS_DEVICE-}
MDS_DEVICE=   # tests/run.sh sets cpu; empty is unset
# shellcheck disable=SC2086
tcp fallback 2 slurm $TINY --tensor-model-parallel-size 2
MDS_DEVICE=$saved_device
check gpu_default_falls_back_exit0 test "$rc" -eq 0
check gpu_default_falls_back_cpu grep -q '^| backend  *| cpu (.*; default)' "$T/fallback.0.err"
unset MDS_TEST_GPU_COUNT

# torchrun's variables instead of Slurm's: the same numbers
# shellcheck disable=SC2086
tcp torch 2 torch $TINY --tensor-model-parallel-size 2
exact "$T/torch".*.log >"$T/torch"
check tcp_torchrun_variables_exit0 test "$rc" -eq 0
check tcp_torchrun_variables_same cmp -s "$T/torch" "$T/tp2"

# Slurm's PMI-2 (srun --mpi=pmi2) with an Open MPI that has no PMI-2 (Debian's):
# MPI_Init would abort every rank, so the ranks meet over TCP instead
if "$MDSTRAIN" --version | grep -q 'Open MPI'; then
    # shellcheck disable=SC2086
    tcp pmi2 2 pmi2 $TINY --tensor-model-parallel-size 2
    exact "$T/pmi2".*.log >"$T/pmi2"
    check pmi2_open_mpi_exit0 test "$rc" -eq 0
    check pmi2_open_mpi_same cmp -s "$T/pmi2" "$T/tp2"
    check pmi2_open_mpi_over_tcp grep -q "| communication  *| TCP (127.0.0.1:$PORT) " "$T/pmi2.0.err"
fi

# A rank killed with SIGKILL in the middle of training ends the others
# within seconds, each with one line naming the dead rank and the collective
# it was in: the ranks connected to it see the connection close, and rank 0
# tells the others over the side channel, so a rank that only hears of it
# from a neighbour (TP2 x PP2: rank 2 waits on rank 0, rank 3 on rank 1)
# names the dead rank, not the neighbour.  Victims: rank 1, then rank 0.
# (--log-interval 10: rank 3's first iteration line, which says training is
# under way, comes 10 iterations in; at 100 it once took longer than the
# 30 s wait on a loaded machine.)
for v in 1 0; do
    next_port
    # shellcheck disable=SC2086
    launch kill 4 slurm $TINY --train-iters 1000000 --log-interval 10 --tensor-model-parallel-size 2 \
        --pipeline-model-parallel-size 2
    n=0
    while [ "$n" -lt 300 ] && ! grep -q '] iteration ' "$T/kill.3.log" 2>/dev/null; do sleep 0.1; n=$((n + 1)); done
    check "tcp_kill${v}_training_started" grep -q '] iteration ' "$T/kill.3.log"
    victim=$(echo "$pids" | awk -v k=$((v + 1)) '{print $k}')   # timeout(1) of rank v, and its mdstrain:
    child=$(for s in /proc/[0-9]*/stat; do awk -v p="$victim" '$4 == p { print $1 }' "$s" 2>/dev/null; done | head -n 1)
    kill -9 "${child:-$victim}" 2>/dev/null
    t0=$(date +%s)
    reap
    t1=$(date +%s)
    check "tcp_kill${v}_others_fail" test "$rc" -ne 0
    check "tcp_kill${v}_fast" test $((t1 - t0)) -lt 15
    for r in 0 1 2 3; do
        [ "$r" -eq "$v" ] && continue
        check "tcp_kill${v}_rank${r}_one_line" test "$(grep -c '^mdstrain: ' "$T/kill.$r.err")" -eq 1
        check "tcp_kill${v}_rank${r}_names_rank$v" grep -q "^mdstrain: rank $r: [a-z][^:]*: \(lost the connection to rank $v (127.0.0.1): \(connection closed\|Connection reset by peer\)\|rank $v is gone (rank 0 lost its connection to it)\)\$" "$T/kill.$r.err"
    done
done

# A rank that is only slow is no failure: rank 1 stopped (SIGSTOP) for 3 s
# in the middle of training, then continued; the job finishes normally.
next_port
# shellcheck disable=SC2086
launch slow 4 slurm $TINY --train-iters 60 --log-interval 10 --tensor-model-parallel-size 2 \
    --pipeline-model-parallel-size 2
n=0
while [ "$n" -lt 300 ] && ! grep -q '] iteration ' "$T/slow.3.log" 2>/dev/null; do sleep 0.1; n=$((n + 1)); done
victim=$(echo "$pids" | awk '{print $2}')
child=$(for s in /proc/[0-9]*/stat; do awk -v p="$victim" '$4 == p { print $1 }' "$s" 2>/dev/null; done | head -n 1)
check tcp_slow_rank_stopped kill -STOP "${child:-$victim}"
sleep 3
kill -CONT "${child:-$victim}" 2>/dev/null
reap
check tcp_slow_rank_exit0 test "$rc" -eq 0
check tcp_slow_rank_finished grep -q '] iteration  *60/' "$T/slow.3.log"

# A rank stopped for good (SIGSTOP) under --distributed-timeout-minutes
# 0.05 (3 s): its neighbours give up after the timeout and say so, and
# every other rank ends with one line too — its own timeout, or the word
# that a rank failed (the timed-out rank tells before it exits).
next_port
# shellcheck disable=SC2086
launch stuck 4 slurm $TINY --train-iters 1000000 --log-interval 100 --tensor-model-parallel-size 2 \
    --pipeline-model-parallel-size 2 --distributed-timeout-minutes 0.05
n=0
while [ "$n" -lt 300 ] && ! grep -q '] iteration ' "$T/stuck.3.log" 2>/dev/null; do sleep 0.1; n=$((n + 1)); done
victim=$(echo "$pids" | awk '{print $4}')   # rank 3
child=$(for s in /proc/[0-9]*/stat; do awk -v p="$victim" '$4 == p { print $1 }' "$s" 2>/dev/null; done | head -n 1)
kill -STOP "${child:-$victim}"
t0=$(date +%s)
for p in $(echo "$pids" | awk '{print $1, $2, $3}'); do wait "$p"; done
t1=$(date +%s)
kill -KILL "${child:-$victim}" 2>/dev/null
reap
check tcp_timeout_others_end test $((t1 - t0)) -lt 30
for r in 0 1 2; do
    check "tcp_timeout_rank${r}_one_line" test "$(grep -c '^mdstrain: ' "$T/stuck.$r.err")" -eq 1
    check "tcp_timeout_rank${r}_says_why" grep -Eq "^mdstrain: rank $r: (waited [0-9.]+ s in a collective, more than --distributed-timeout-minutes 0.05; ending the job|[a-z][^:]*: rank [0-9] failed \(its own message says why\))\$" "$T/stuck.$r.err"
done
check tcp_timeout_someone_timed_out grep -q 'waited [0-9.]* s in a collective' "$T/stuck.0.err" "$T/stuck.1.err" "$T/stuck.2.err"

# A rank that fails for its own reason (a damaged checkpoint file of rank
# (t 1, p 1), world rank 3) says so before it exits: the others name it.
CK="--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --train-iters 3"
# shellcheck disable=SC2086
tcp ck 4 slurm $TINY $CK --save "$T/ck" --save-interval 3
check tcp_ckpt_saved test "$rc" -eq 0
printf 'x' | dd of="$T/ck/iter_0000003/mp_rank_01_001/model_optim_rng.bin" bs=1 seek=5000 conv=notrunc 2>/dev/null
# shellcheck disable=SC2086
tcp bad 4 slurm $TINY $CK --train-iters 6 --load "$T/ck"
check tcp_failing_rank_exit1 test "$rc" -eq 1
check tcp_failing_rank_message grep -q "^mdstrain: rank 3: cannot load the checkpoint: .*mp_rank_01_001/model_optim_rng.bin': weights checksum mismatch" "$T/bad.3.err"
for r in 0 1 2; do
    check "tcp_failing_rank_named_by_rank$r" grep -q "^mdstrain: rank $r: [a-z][^:]*: rank 3 failed (its own message says why)\$" "$T/bad.$r.err"
done

# A task count that does not match the tasks started: rank 0 gives up after
# MDS_RENDEZVOUS_TIMEOUT naming the address; every rank exits 1.
next_port
t0=$(date +%s)
# shellcheck disable=SC2086
RDV=2; NTASKS=3
launch short 2 slurm $TINY
reap
unset RDV NTASKS
t1=$(date +%s)
check tcp_wrong_ntasks_exit1 test "$rc" -eq 1
check tcp_wrong_ntasks_message grep -q "^mdstrain: cannot start the communication: rank 0: 1 of 2 ranks did not reach 127.0.0.1:$PORT within 2 s (rank 2 missing" "$T/short.0.err"
check tcp_wrong_ntasks_one_line test "$(wc -l <"$T/short.0.err")" -eq 1
check tcp_wrong_ntasks_rank1_message grep -Eq "rank 1: the master at 127.0.0.1:$PORT (ended the rendezvous|did not gather all 3 ranks)" "$T/short.1.err"
check tcp_wrong_ntasks_bounded test $((t1 - t0)) -lt 15

# No master: rank 1 alone retries until the timeout, then one line, exit 1.
next_port
# shellcheck disable=SC2086
run_expect tcp_no_master 1 "^mdstrain: cannot start the communication: rank 1: cannot reach the master at 127.0.0.1:$PORT within 1 s: Connection refused\$" \
    env SLURM_PROCID=1 SLURM_NTASKS=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT MDS_RENDEZVOUS_TIMEOUT=1 \
    timeout -s KILL 30 "$MDSTRAIN" $TINY
check tcp_no_master_one_line test "$(wc -l <"$T/err")" -eq 1

# Under Slurm without MASTER_ADDR/MASTER_PORT: the first node of the list
# and 10000 + the job id's last 4 digits
# shellcheck disable=SC2086
run_expect tcp_slurm_nodelist 1 "rank 1: cannot (resolve|reach) the master (at )?mds-no-such-node07:13456" \
    env SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_JOB_NODELIST='mds-no-such-node[07-09,12],other[1-2]' \
    SLURM_JOB_ID=123456 MDS_RENDEZVOUS_TIMEOUT=1 timeout -s KILL 30 "$MDSTRAIN" $TINY
# shellcheck disable=SC2086
run_expect tcp_bad_rank 1 "SLURM_PROCID='5' is not a rank below SLURM_NTASKS=2" \
    env SLURM_PROCID=5 SLURM_NTASKS=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 timeout -s KILL 30 "$MDSTRAIN" $TINY
finish
