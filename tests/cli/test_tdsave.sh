#!/bin/sh
# test_tdsave.sh - mdstrain --save --ckpt-format torch_dist (train/tdsave.h
# through trainer_save_torch_dist):
#  - the files: every rank's __R_0.distcp, .metadata, metadata.json exactly as
#    Megatron writes it, the tracker;
#  - a save at iteration 2 resumed with --no-load-optim (weights only) logs
#    the uninterrupted run's iteration-3 loss: the weights, the iteration and
#    the consumed samples (from the saved args) come back; it holds no RNG
#    state (mds keeps none) and its args say no_save_rng, so a resume needs
#    no --no-load-rng;
#  - resumed with its optimizer (AdamW moments in Megatron's model-space
#    layout, the step, the scheduler) at TP 1, TP 2, PP 2 and DP 2 with the
#    distributed optimizer: iterations 3 and 4 log the uninterrupted run's
#    losses and grad norms;
#  - at TP 1, TP 2 and PP 2, the weights loaded from it (at TP 1) and saved
#    again in mds's format after a step at lr 0 export to the same
#    HuggingFace weights as mds's own save of the same run, bit for bit;
#  - another --ckpt-format: exit 2 naming it;
#  - --no-save-optim: the weights alone, loaded as --no-load-optim loads a
#    full checkpoint; with mds's own format exit 2.
# About 5 s.
. tests/cli/lib.sh
. tests/cli/parallel_lib.sh
no_launcher_env

# tests/data/torch_dist's Llama model
LLAMA="--tokenizer-type NullTokenizer --vocab-size 64 --make-vocab-size-divisible-by 1
       --num-layers 2 --hidden-size 16 --num-attention-heads 4 --max-position-embeddings 8
       --position-embedding-type rope --normalization RMSNorm --swiglu --ffn-hidden-size 32
       --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights --disable-bias-linear"
# a constant lr, so that a 2-iteration run's weights are a 4-iteration run's after 2
RUN="--mock-data --seq-length 8 --micro-batch-size 1 --global-batch-size 2 --lr 1e-3 --lr-decay-style constant
     --log-interval 1 --eval-iters 0"
ZERO="--mock-data --seq-length 8 --micro-batch-size 1 --global-batch-size 2 --lr 0 --eval-iters 0 -q"
loss() { grep -o "iteration *$2/.*lm loss: [0-9.E+-]*" "$1" | sed 's/.*lm loss: //'; }

# ---- TP 1: the files, a resume ----
# shellcheck disable=SC2086
"$MDSTRAIN" $LLAMA $RUN --train-iters 4 >"$T/whole.out" 2>"$T/err"
# shellcheck disable=SC2086
run_expect save 0 "" "$MDSTRAIN" $LLAMA $RUN --train-iters 2 --save "$T/td" --ckpt-format torch_dist
I=$T/td/iter_0000002
check files test -s "$I/.metadata" -a -s "$I/__0_0.distcp" -a ! -e "$I/.metadata.tmp" \
    -a "$(cat "$I/metadata.json")" = '{"sharded_backend": "torch_dist", "sharded_backend_version": 1}' \
    -a "$(cat "$T/td/latest_checkpointed_iteration.txt")" = 2
# shellcheck disable=SC2086
run_expect resume_weights_only 0 "" "$MDSTRAIN" $LLAMA $RUN --train-iters 4 --load "$T/td" --no-load-optim --no-load-rng
whole3=$(loss "$T/whole.out" 3) got=$(loss "$T/out" 3)
check resume_weights_only_loss test -n "$whole3" -a "$whole3" = "$got"
# without --no-load-rng: the saved args say no_save_rng, so no RNG state is asked for (as Megatron's load)
# shellcheck disable=SC2086
run_expect resume_without_no_load_rng 0 "" "$MDSTRAIN" $LLAMA $RUN --train-iters 4 --load "$T/td" --no-load-optim
got=$(loss "$T/out" 3)
check resume_without_no_load_rng_loss test -n "$whole3" -a "$whole3" = "$got"

# ---- bitwise resume with the optimizer: TP 1, TP 2, PP 2, DP 2 with the distributed optimizer ----
# the default cosine schedule over 4 iterations; the interrupted run stops at 2 (--exit-interval)
RES="--mock-data --seq-length 8 --micro-batch-size 1 --global-batch-size 2 --lr 1e-3 --log-interval 1 --eval-iters 0
     --train-iters 4"
stats() { cat "$@" | grep -o "iteration *[34]/.*" | sed 's/.*\(lm loss: [^|]*\).*\(grad norm: [^|]*\).*/\1 \2/'; }
for lay in tp1 tp2 pp2 dp2; do
    case $lay in
        tp1) P="" np=1 ;;
        tp2) P="--tensor-model-parallel-size 2" np=2 ;;
        pp2) P="--pipeline-model-parallel-size 2" np=2 ;;
        *) P="--use-distributed-optimizer" np=2 ;;
    esac
    # shellcheck disable=SC2086
    tcp "r${lay}_whole" $np torch $LLAMA $RES $P
    # shellcheck disable=SC2086
    tcp "r${lay}_save" $np torch $LLAMA $RES $P --exit-interval 2 --save "$T/r$lay" --ckpt-format torch_dist
    # shellcheck disable=SC2086
    tcp "r${lay}_res" $np torch $LLAMA $RES $P --load "$T/r$lay" --no-load-rng
    want=$(stats "$T/r${lay}_whole".*.log) got=$(stats "$T/r${lay}_res".*.log)
    check "resume_${lay}_bitwise" test -n "$want" -a "$want" = "$got"
    [ "$want" = "$got" ] || { echo "    want $want"; echo "    got  $got"; cat "$T/r${lay}_res".*.err | tail -3; } >&2
done

# ---- TP 1, TP 2, PP 2: the weights bit for bit, against mds's own save ----
for lay in tp1 tp2 pp2; do
    case $lay in
        tp1) P="" np=1 ;;
        tp2) P="--tensor-model-parallel-size 2" np=2 ;;
        *) P="--pipeline-model-parallel-size 2" np=2 ;;
    esac
    for fmt in own td; do
        F=
        [ $fmt = td ] && F="--ckpt-format torch_dist"
        # shellcheck disable=SC2086
        tcp "${lay}_$fmt" $np torch $LLAMA $RUN $P --train-iters 2 --save "$T/${lay}_$fmt" $F
        if [ $fmt = own ]; then   # mds's own files: exported at their TP/PP (the export merges)
            # shellcheck disable=SC2086
            [ "$rc" -eq 0 ] && "$MDSTRAIN" $LLAMA $P --load "$T/${lay}_own" --export-hf "$T/${lay}_own_hf" >/dev/null 2>"$T/err"
        else                      # torch_dist: loaded at TP 1 PP 1, one step at lr 0, saved, exported
            # shellcheck disable=SC2086
            [ "$rc" -eq 0 ] && "$MDSTRAIN" $LLAMA $ZERO --train-iters 3 --load "$T/${lay}_td" --no-load-optim \
                --no-load-rng --save "$T/${lay}_td_re" >/dev/null 2>"$T/err" &&
                "$MDSTRAIN" $LLAMA --load "$T/${lay}_td_re" --export-hf "$T/${lay}_td_hf" >/dev/null 2>>"$T/err"
        fi
    done
    [ $lay = tp1 ] || check "${lay}_files" test -s "$T/${lay}_td/iter_0000002/__1_0.distcp"
    check "${lay}_same_weights" cmp "$T/${lay}_own_hf/model.safetensors" "$T/${lay}_td_hf/model.safetensors"
done

# shellcheck disable=SC2086
run_expect other_format_refused 2 "'--ckpt-format' torch is not supported" \
    "$MDSTRAIN" $LLAMA $RUN --train-iters 2 --save "$T/x" --ckpt-format torch

# --no-save-optim: the weights alone (a third of the bytes), args no_save_optim,
# so that a plain --load starts AdamW and the scheduler afresh, as Megatron's
# load_optim does: the losses of a full checkpoint resumed with --no-load-optim
# shellcheck disable=SC2086
"$MDSTRAIN" $LLAMA $RUN --train-iters 4 --exit-interval 2 --ckpt-format torch_dist --save "$T/nso" \
    --no-save-optim >/dev/null 2>&1
check no_save_optim_saved test $? -eq 0
# shellcheck disable=SC2086
"$MDSTRAIN" $LLAMA $RUN --train-iters 4 --exit-interval 2 --ckpt-format torch_dist --save "$T/full" >/dev/null 2>&1
a=$(wc -c <"$T/nso/iter_0000002/__0_0.distcp"); b=$(wc -c <"$T/full/iter_0000002/__0_0.distcp")
check no_save_optim_weights_only sh -c "[ $a -gt 0 ] && [ $((a * 2)) -lt $b ]"
# shellcheck disable=SC2086
"$MDSTRAIN" $LLAMA $RUN --train-iters 4 --load "$T/nso" -v -v >"$T/nso.log" 2>"$T/nso.err"
check no_save_optim_loads_plain test $? -eq 0
# shellcheck disable=SC2086
"$MDSTRAIN" $LLAMA $RUN --train-iters 4 --load "$T/full" --no-load-optim -v -v >"$T/full.log" 2>/dev/null
exact "$T/nso.log" >"$T/x1"; exact "$T/full.log" >"$T/x2"
check no_save_optim_as_no_load_optim sh -c "[ -s '$T/x1' ] && cmp -s '$T/x1' '$T/x2'"
# shellcheck disable=SC2086
run_expect no_save_optim_own_format 2 'no-save-optim needs --ckpt-format torch_dist' \
    "$MDSTRAIN" $LLAMA $RUN --train-iters 2 --save "$T/y" --no-save-optim
finish
