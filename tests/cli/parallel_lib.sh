# parallel_lib.sh - what the parallel trainer tests share (sourced after
# lib.sh by test_parallel.sh and test_parallel_tcp.sh): the Open MPI
# environment, the tiny model, and the comparison with one process.
MDSTRAIN=${MDSTRAIN:-$BUILD/mdstrain}
MPIRUN=${MPIRUN:-mpirun}
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
# Open MPI: run as root in CI containers, more ranks than cores, and no
# cross-memory attach (often forbidden in containers)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_hwloc_base_binding_policy=none
# Open MPI's own allocations outlive MPI_Finalize: no leak report under ASan
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"

# 4 layers (PP4 gets one each), 4 heads (TP4 gets one each), vocabulary
# 127 ids (NullTokenizer: EOD 126) padded to 8 x TP; 8 micro-batches of 1 per iteration so the
# 1F1B schedule has warm-up, steady and cool-down phases.
TINY="--mock-data --tokenizer-type NullTokenizer --vocab-size 127 --make-vocab-size-divisible-by 8
      --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --max-position-embeddings 16
      --micro-batch-size 1 --global-batch-size 8 --train-iters 5 --lr 1e-2 --lr-warmup-iters 1
      --log-interval 1 --eval-iters 0 -q -v -v"

# A 2-layer model of 4 micro-batches of 1 per iteration for single-process
# tests (test_timers.sh, test_log_stats.sh, test_exit_signal.sh), without
# the sequence length, the iterations and the logging, which each sets.
TINY_BASE="--mock-data --tokenizer-type NullTokenizer --vocab-size 127 --make-vocab-size-divisible-by 8
      --num-layers 2 --hidden-size 32 --num-attention-heads 4 --max-position-embeddings 16
      --micro-batch-size 1 --global-batch-size 4 --lr 1e-2 --lr-warmup-iters 1"

# exact FILE...: "loss norm" of each line -v -v adds on the logging rank
exact() { cat "$@" | sed -n 's/^ \[rank [0-9]*\] lm loss \([^ ]*\) grad norm \([^ ]*\)$/\1 \2/p'; }

# close FILE: 5 lines, each loss within LOSS_TOL (2e-7) and norm within
# NORM_TOL (1e-5), relative, of $T/ref, the one-process run's exact lines
# (bf16/fp16 runs set wider ones: a layout changes where sums are rounded)
close() {
    test "$(wc -l <"$1")" -eq 5 && paste -d' ' "$T/ref" "$1" | awk -v lt="${LOSS_TOL:-2e-7}" -v nt="${NORM_TOL:-1e-5}" '
        function rel(a, b) { d = a - b; if (d < 0) d = -d; return d / (a < 0 ? -a : a) }
        { if (rel($1, $3) > lt || rel($2, $4) > nt) { print "  differs: " $0 > "/dev/stderr"; bad = 1 } }
        END { exit bad }'
}

# ---- the TCP transport, ranks started by hand (test_parallel_tcp.sh, test_recompute.sh)
# Ports: next_port (tests/cli/lib.sh).
# launch NAME NP ENVSTYLE FLAGS...: NP ranks in the background, each under
# timeout(1); pids in $pids, output in $T/NAME.RANK.{log,err}
launch() {
    name=$1 np=$2 style=$3; shift 3
    pids=""
    i=0
    while [ "$i" -lt "$np" ]; do
        if [ "$style" = torch ]; then
            RANK=$i WORLD_SIZE=$np LOCAL_RANK=$i MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT \
                MDS_RENDEZVOUS_TIMEOUT=${RDV:-20} timeout -s KILL 120 "$MDSTRAIN" "$@" \
                >"$T/$name.$i.log" 2>"$T/$name.$i.err" &
        elif [ "$style" = pmi2 ]; then   # srun --mpi=pmi2: Slurm's PMI-2 variables as well
            PMI_FD=9 PMI_JOBID=7.0 PMI_RANK=$i PMI_SIZE=$np SLURM_JOB_ID=7 SLURM_STEP_ID=0 SLURM_STEPID=0 \
                SLURM_PROCID=$i SLURM_NTASKS=$np SLURM_LOCALID=$i SLURM_NODELIST=localhost \
                MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT MDS_RENDEZVOUS_TIMEOUT=${RDV:-20} \
                timeout -s KILL 120 "$MDSTRAIN" "$@" >"$T/$name.$i.log" 2>"$T/$name.$i.err" 9</dev/null &
        else
            SLURM_PROCID=$i SLURM_NTASKS=${NTASKS:-$np} SLURM_LOCALID=$i MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT \
                MDS_RENDEZVOUS_TIMEOUT=${RDV:-20} timeout -s KILL 120 "$MDSTRAIN" "$@" \
                >"$T/$name.$i.log" 2>"$T/$name.$i.err" &
        fi
        pids="$pids $!"
        i=$((i + 1))
    done
}
# reap: wait for every pid; rc = the largest exit status
reap() {
    rc=0
    for p in $pids; do
        wait "$p"
        r=$?
        [ "$r" -gt "$rc" ] && rc=$r
    done
    pids=""
}
# tcp NAME NP STYLE FLAGS...: launch and reap, on another port if rank 0's was taken
tcp() {
    for _ in 1 2 3; do
        next_port
        launch "$@"
        reap
        grep -q 'cannot listen at' "$T/$1.0.err" || break
    done
}
