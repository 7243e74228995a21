#!/bin/sh
# test_comm_plan.sh - bench/comm_plan.py's formulas against what mdstrain
# measures: small layouts over the TCP transport (as test_parallel_tcp.sh
# starts them), each rank's -v -v report of the bytes and calls each group's
# collectives sent per iteration, compared exactly with the plan the script
# computes from the same flags (and the parameter counts per (tensor,
# pipeline) rank).  TP2, PP2 (tied embeddings), DP2 with and without the
# distributed optimizer, DP2 and PP2 x DP2 with --overlap-grad-reduce, TP2 x PP2 x DP2 with it, DP3 and PP2 x
# DP2 with both, and a Llama-shaped TP2 x
# PP2 (untied, SwiGLU, GQA, RoPE, RMSNorm, no biases, full recomputation,
# per-token loss, bf16).  A plan made for other flags must not match.
# Needs python3 (standard library only); skipped without it.  About 40 s.
. tests/cli/lib.sh
. tests/cli/parallel_lib.sh
no_launcher_env
PLAN="python3 bench/comm_plan.py"
if ! command -v python3 >/dev/null 2>&1; then
    skip comm_plan "python3 not found"
    exit 0
fi

# plan NAME NP FLAGS...: NP ranks over TCP, then the plan checked against their reports
plan() {
    name=$1 np=$2; shift 2
    # shellcheck disable=SC2086
    tcp "$name" "$np" slurm $TINY "$@"
    if [ "$rc" -ne 0 ]; then fail "plan_$name (mdstrain exit $rc)"; tail -n 3 "$T/$name".*.err >&2; return; fi
    # shellcheck disable=SC2086
    if $PLAN $TINY "$@" --world-size "$np" --check "$T/$name".*.err >"$T/$name.plan" 2>&1; then ok "plan_$name"
    else fail "plan_$name"; sed 's/^/    /' "$T/$name.plan" >&2; fi
}
plan tp2 2 --tensor-model-parallel-size 2
plan pp2_tied 2 --pipeline-model-parallel-size 2
plan dp2 2
plan dp2_distopt 2 --use-distributed-optimizer
# --overlap-grad-reduce: buckets of a layer or two (whatever the bucket size
# cuts), then the embeddings and the final norm apart, at DP2 and PP2 x DP2
plan dp2_overlap 2 --overlap-grad-reduce --ddp-bucket-size 20000
plan pp2_dp2_overlap 4 --pipeline-model-parallel-size 2 --overlap-grad-reduce --ddp-bucket-size 1
plan tp2_pp2_dp2_distopt 8 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --use-distributed-optimizer
# the distributed optimizer overlapped: a reduce-scatter and an all-gather
# per bucket of layers and one of each for the rest, at DP3 (chunks padded)
# and PP2 x DP2
plan dp3_distopt_overlap 3 --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 20000 --global-batch-size 6
plan pp2_dp2_distopt_overlap 4 --pipeline-model-parallel-size 2 --use-distributed-optimizer --overlap-grad-reduce \
    --ddp-bucket-size 1 --overlap-param-gather
LLAMA="--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --untie-embeddings-and-output-weights
       --swiglu --group-query-attention --num-query-groups 2 --position-embedding-type rope --normalization RMSNorm
       --disable-bias-linear --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
       --calculate-per-token-loss --bf16"
# shellcheck disable=SC2086
plan llama_tp2_pp2 4 $LLAMA

# the comparison can fail: the TP2 reports against plans of other layouts
# shellcheck disable=SC2086
run_expect plan_wrong_layout 1 "" $PLAN $TINY --pipeline-model-parallel-size 2 --world-size 2 --check "$T"/tp2.*.err
check plan_wrong_layout_names_bytes grep -q "^rank 0 (stage 0): tp all-reduce measured .* plan nothing" "$T/out"
# shellcheck disable=SC2086
run_expect plan_wrong_distopt 1 "" $PLAN $TINY --use-distributed-optimizer --world-size 2 --check "$T"/dp2.*.err
# shellcheck disable=SC2086
run_expect plan_wrong_buckets 1 "" $PLAN $TINY --overlap-grad-reduce --world-size 2 --check "$T"/dp2_overlap.*.err
# shellcheck disable=SC2086
run_expect plan_wrong_distopt_buckets 1 "" $PLAN $TINY --use-distributed-optimizer --global-batch-size 6 --world-size 3 \
    --check "$T"/dp3_distopt_overlap.*.err
check plan_wrong_distopt_buckets_named grep -q "^rank 0 (stage 0): dp reduce-scatter measured " "$T/out"
# shellcheck disable=SC2086
run_expect plan_missing_rank 1 "" $PLAN $TINY --tensor-model-parallel-size 2 --world-size 2 --check "$T/tp2.0.err"
check plan_missing_rank_named grep -q "^no -v -v report from rank 1$" "$T/out"
# shellcheck disable=SC2086
run_expect plan_refuses_fp16 1 "fp16 changes the traffic" $PLAN $TINY --fp16 --world-size 2

# the paper table: 175B's 1F1B bubble (8-1)/(96+8-1), and a figure by hand
$PLAN --paper >"$T/paper"
check plan_paper_bubble grep -q "^| GPT-3 175B TP8×PP8×DP16 | all-reduce | 96 | 6.8% | first |" "$T/paper"
# Llama-3 8B, TP1 DP16, all-reduce of N = 8,030,261,248 fp32 gradients: 2 (15) ceil(N/16) 4 bytes = 60.23 GB
check plan_paper_llama grep -q "^| Llama-3 8B TP1×PP1×DP16 | all-reduce | 8 | 0.0% | all | 0.00 GB | 0.00 GB | 0.000 GB | 60.23 GB |" "$T/paper"
finish
