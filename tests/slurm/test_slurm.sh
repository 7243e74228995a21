#!/bin/sh
# test_slurm.sh - the examples and mdstrain on a real Slurm (`make test-slurm`,
# as root; the Makefile installs Debian's slurm-wlm and munge first).
#
# A one-host cluster on the loopback, private to this run: munged (as the
# munge user, with its own key and socket), slurmctld and slurmd (-D, in the
# background) with state, spool and logs under a temporary directory and
# ports that are free, SlurmdUser=root, ProctrackType=proctrack/linuxproc,
# TaskPlugin=task/none, SelectType=select/cons_tres, MpiDefault=none, 8 CPUs
# declared (config_overrides) so that 4 ranks fit on a small machine.  Then:
#   - examples/1.preprocess.sbatch through sbatch, from another directory and
#     by a relative path: the bundled sample's dataset equals a direct run;
#     a named pipe as INPUT; mdsprep's workers are the job's CPUs
#   - examples/2.train.sbatch through sbatch and mdstrain through srun, with
#     --mpi=pmix (MPI), --mpi=pmi2 (Open MPI cannot: TCP) and --mpi=none
#     (TCP), TP2, PP2, DP2 and TP2 x PP2: losses and gradient norms of every
#     iteration within 2e-7 / 1e-5 of one process (tests/cli/parallel_lib.sh)
#   - a task count that is not a multiple of TP x PP: exit 2 before srun
#   - a job stopped by --exit-interval and submitted again resumes bitwise
#     (losses, norms and the final checkpoint files equal a straight run)
#   - scancel ends every process of the job; its TensorBoard file stays readable
# The daemons it started are stopped at the end, whatever happens.  About 2 min.
. tests/cli/lib.sh
. tests/cli/parallel_lib.sh
npass=0
ok()   { echo "ok $1"; npass=$((npass + 1)); }
MDSPREP=$(pwd)/$MDSPREP
MDSTRAIN=$(pwd)/$MDSTRAIN
ROOT=$(pwd)
unset MASTER_ADDR MASTER_PORT RANK WORLD_SIZE SLURM_JOB_ID SLURM_PROCID SLURM_NTASKS OMPI_COMM_WORLD_SIZE PMIX_RANK PMI_RANK PMI_SIZE PMI_FD

for tool in munged slurmctld slurmd sbatch srun scontrol; do
    command -v "$tool" >/dev/null 2>&1 || { echo "FAIL slurm_installed ($tool missing: apt-get install slurm-wlm munge)"; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "FAIL slurm_root (the test cluster's daemons run as root and munge)"; exit 1; }

# ---- the cluster ------------------------------------------------------------
chmod 755 "$T"   # munged (the munge user) reaches its socket through it
S=$T/slurm
mkdir -p "$S/state" "$S/spool" "$S/munge"
dpids=""
stop_cluster() {
    # munged forks away from runuser: its own pid file names it
    [ -f "$S/munge/munged.pid" ] && dpids="$dpids $(cat "$S/munge/munged.pid")"
    if [ -n "$dpids" ]; then
        SLURM_CONF=$S/slurm.conf scancel --quiet --full "$(SLURM_CONF=$S/slurm.conf squeue -h -o %i | tr '\n' ' ')" 2>/dev/null
        for p in $dpids; do kill "$p" 2>/dev/null; done
        for p in $dpids; do
            n=0
            while kill -0 "$p" 2>/dev/null && [ "$n" -lt 50 ]; do sleep 0.1; n=$((n + 1)); done
            kill -9 "$p" 2>/dev/null
        done
    fi
    rm -rf "$T"
}
trap stop_cluster EXIT
trap 'exit 1' INT TERM

free_port() {   # a TCP port in 16000-29999 that /proc/net/tcp* does not show
    p=$((16000 + ($$ + $1 * 7) % 14000))
    for _ in $(seq 1 50); do
        hex=$(printf '%04X' "$p")
        cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '{print $2}' | grep -qi ":$hex\$" || { echo "$p"; return; }
        p=$((p + 1))
    done
    echo "$p"
}
CTLD_PORT=$(free_port 0)
D_PORT=$(free_port 1)
[ "$D_PORT" = "$CTLD_PORT" ] && D_PORT=$((CTLD_PORT + 1))
H=$(hostname)

dd if=/dev/urandom of="$S/munge/munge.key" bs=1024 count=1 2>/dev/null
chown -R munge:munge "$S/munge"
chmod 755 "$S/munge"
chmod 400 "$S/munge/munge.key"
runuser -u munge -- munged --foreground --key-file="$S/munge/munge.key" --socket="$S/munge/munge.sock" \
    --pid-file="$S/munge/munged.pid" --log-file="$S/munge/munged.log" --seed-file="$S/munge/munged.seed" \
    >"$S/munged.out" 2>&1 &
dpids="$!"

cat >"$S/slurm.conf" <<EOF
ClusterName=mdstest
SlurmctldHost=$H(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$D_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$S/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/slurmctld.log
SlurmdLogFile=$S/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SlurmdParameters=config_overrides
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
KillWait=3
MinJobAge=300
NodeName=$H NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=debug Nodes=$H Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
export SLURM_CONF=$S/slurm.conf
export MDS_DEVICE=cpu   # the losses are compared with one CPU process
n=0
while [ ! -S "$S/munge/munge.sock" ] && [ "$n" -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
slurmctld -D -f "$SLURM_CONF" >"$S/slurmctld.out" 2>&1 &
dpids="$dpids $!"
slurmd -D -f "$SLURM_CONF" >"$S/slurmd.out" 2>&1 &
dpids="$dpids $!"
n=0
while [ "$(sinfo -h -o %t 2>/dev/null)" != idle ] && [ "$n" -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
if [ "$(sinfo -h -o %t 2>/dev/null)" != idle ]; then
    echo "FAIL cluster_up"
    tail -n 5 "$S"/*.out "$S"/*.log >&2
    exit 1
fi
ok cluster_up
srun --mpi=list >"$T/mpilist" 2>&1
check mpi_list_pmix_pmi2_none sh -c "grep -qw pmix '$T/mpilist' && grep -qw pmi2 '$T/mpilist' && grep -qw none '$T/mpilist'"

W=$T/work   # where jobs are submitted from
mkdir -p "$W"

# ---- 1.preprocess.sbatch ------------------------------------------------------
"$MDSPREP" -q --input examples/sample.jsonl.xz --output-prefix "$T/direct" --append-eod
(cd "$W" && sbatch --wait -c 2 -o prep.log "$ROOT/examples/1.preprocess.sbatch" -v >/dev/null)
check prep_sbatch_exit0 test $? -eq 0
same "$T/direct_text_document" "$W/data/sample_text_document" prep_sbatch_same_as_direct
check prep_workers_are_the_jobs grep -q '^mdsprep: 2 workers ' "$W/prep.log"
# by a relative path from examples/, writing into another directory
(cd examples && OUTPUT=rel/sample sbatch --wait -c 1 -D "$W" -o "$W/prep2.log" 1.preprocess.sbatch >/dev/null)
check prep_relative_exit0 test $? -eq 0
same "$T/direct_text_document" "$W/rel/sample_text_document" prep_relative_same
# a named pipe as the input, its writer outside the job
mkfifo "$W/in.fifo"
( cat examples/sample.jsonl.xz >"$W/in.fifo"; echo $? >"$W/writer.rc" ) &
wpid=$!
(cd "$W" && INPUT=$W/in.fifo OUTPUT=fifo/sample timeout -s KILL 120 sbatch --wait -c 1 -o prep3.log \
    "$ROOT/examples/1.preprocess.sbatch" >/dev/null)
check prep_fifo_exit0 test $? -eq 0
wait "$wpid"
check prep_fifo_writer_exit0 test "$(cat "$W/writer.rc" 2>/dev/null)" = 0
same "$T/direct_text_document" "$W/fifo/sample_text_document" prep_fifo_same

# ---- 2.train.sbatch and srun: losses equal one process's --------------------
DATA=$W/data/sample_text_document
MODEL="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
       --make-vocab-size-divisible-by 64 --micro-batch-size 1 --global-batch-size 4 --train-iters 5
       --lr 1e-2 --lr-warmup-iters 1 --log-interval 1 --eval-iters 0 -q -v -v
       --min-lr 6e-5 --lr-decay-style cosine --weight-decay 0.1"   # the schedule of 2.train.sbatch
# shellcheck disable=SC2086
"$MDSTRAIN" --data-path "$DATA" --split 949,50,0 $MODEL >"$T/ref.log" 2>&1
exact "$T/ref.log" >"$T/ref"
check reference_5_iters test "$(wc -l <"$T/ref")" -eq 5

# train NAME NTASKS TP PP MPI [ARGS...]: 2.train.sbatch from examples/ by a
# relative path, writing into $W; $T/NAME.log, $T/NAME the exact lines
train() {
    name=$1 nt=$2 tp=$3 pp=$4 mpi=$5; shift 5
    # shellcheck disable=SC2086
    (cd examples && DATA=$DATA TP=$tp PP=$pp SAVE=ck/$name TENSORBOARD=tb/$name SRUN_ARGS=--mpi=$mpi \
        timeout -s KILL 300 sbatch --wait -n "$nt" -c 1 -D "$W" -o "$T/$name.log" 2.train.sbatch $MODEL "$@" >/dev/null)
    rc=$?
    exact "$T/$name.log" >"$T/$name"
}
ranks() {   # NAME RC TRANSPORT: exit status, closeness, transport
    check "$1_exit0" test "$2" -eq 0
    if close "$T/$1"; then ok "$1_losses_as_one_process"; else fail "$1_losses_as_one_process"; tail -n 5 "$T/$1.log" >&2; fi
    check "$1_over_$3" grep -q "| communication  *| $3 " "$T/$1.log"
}
train sbatch_tp2_none 2 2 1 none
ranks sbatch_tp2_none "$rc" TCP
train sbatch_pp2_pmix 2 1 2 pmix
ranks sbatch_pp2_pmix "$rc" MPI
train sbatch_tp2_pmi2 2 2 1 pmi2
ranks sbatch_tp2_pmi2 "$rc" TCP
train sbatch_tp2_pp2_none 4 2 2 none
ranks sbatch_tp2_pp2_none "$rc" TCP
# srun directly, DP2 (the global batch split over two data-parallel ranks)
for mpi in pmix pmi2 none; do
    # shellcheck disable=SC2086
    (cd "$W" && OMP_NUM_THREADS=1 timeout -s KILL 300 srun --mpi=$mpi -n 2 -c 1 "$MDSTRAIN" --data-path "$DATA" \
        --split 949,50,0 $MODEL >"$T/srun_dp2_$mpi.log" 2>&1)
    rc=$?
    exact "$T/srun_dp2_$mpi.log" >"$T/srun_dp2_$mpi"
    [ "$mpi" = pmix ] && want=MPI || want=TCP
    ranks "srun_dp2_$mpi" "$rc" "$want"
done

# the task count against TP x PP: refused before anything starts
(cd "$W" && TP=2 PP=2 sbatch --wait -n 3 -c 1 -o "$T/badcount.log" "$ROOT/examples/2.train.sbatch" >/dev/null)
check task_count_exit2 test $? -eq 2
check task_count_message grep -q '^2.train.sbatch: 3 tasks are not a multiple of TP x PP = 2 x 2$' "$T/badcount.log"
# a TP given as an argument counts too
(cd "$W" && TP=1 PP=1 sbatch --wait -n 3 -c 1 -o "$T/badcount2.log" "$ROOT/examples/2.train.sbatch" \
    --tensor-model-parallel-size 2 >/dev/null)
check task_count_from_arguments test $? -eq 2

# ---- resume: --exit-interval, then the same submission again ------------------
train straight 2 2 1 none --train-iters 6 --save-interval 3
check straight_exit0 test "$rc" -eq 0
train resumed 2 2 1 none --train-iters 6 --save-interval 3 --exit-interval 3
cp "$T/resumed" "$T/resumed.1"
train resumed 2 2 1 none --train-iters 6 --save-interval 3 --exit-interval 3
check resubmitted_exit0 test "$rc" -eq 0
check resubmitted_loaded grep -q 'successfully loaded checkpoint from .* at iteration 3' "$T/resumed.log"
cat "$T/resumed.1" "$T/resumed" >"$T/resumed.all"
check resume_bitwise_losses sh -c "[ \$(wc -l <'$T/straight') -eq 6 ] && cmp -s '$T/straight' '$T/resumed.all'"
check resume_bitwise_checkpoint sh -c "for f in '$W'/ck/straight/iter_0000006/*/*; do
    cmp -s \"\$f\" \"\$(echo \"\$f\" | sed 's|/ck/straight/|/ck/resumed/|')\" || exit 1; done"

# ---- scancel: no process of the job is left ------------------------------------
job=$(cd examples && DATA=$DATA TP=2 PP=1 SAVE=ck/cancel TENSORBOARD=tb/cancel sbatch --parsable -n 2 -c 1 -D "$W" \
    -o "$T/cancel.log" 2.train.sbatch $MODEL --train-iters 100000 --lr-decay-iters 100000 --log-interval 5)
n=0
while [ "$n" -lt 600 ] && ! grep -q '] iteration ' "$T/cancel.log" 2>/dev/null; do sleep 0.1; n=$((n + 1)); done
check cancel_job_trains grep -q '] iteration ' "$T/cancel.log"
scancel "$job"
n=0
while [ "$n" -lt 300 ] && squeue -h -j "$job" -t all -o %T 2>/dev/null | grep -Eq 'RUNNING|COMPLETING|PENDING'; do
    sleep 0.1; n=$((n + 1))
done
left() {   # processes whose environment names the job
    for e in /proc/[0-9]*/environ; do
        { tr '\0' '\n' <"$e"; } 2>/dev/null | grep -qx "SLURM_JOB_ID=$1" && echo "${e%/environ}"
    done
}
check cancel_job_ended test "$n" -lt 300
check cancel_no_process_left test -z "$(left "$job")"
set -- "$W"/tb/cancel/events.out.tfevents.*
check cancel_tensorboard_readable sh -c "'$BUILD/tests/test_tensorboard' -d '$1' | grep -Pq '^lm loss\t5\t'"

echo "$npass passed, $nfail failed"
[ "$nfail" -eq 0 ]
