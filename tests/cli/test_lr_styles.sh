#!/bin/sh
# test_lr_styles.sh - mdstrain's --lr-decay-style inverse-square-root and WSD
# (--lr-wsd-decay-style, --lr-wsd-decay-iters, --lr-wsd-decay-samples) end to
# end: each iteration's learning rate (-v -v's exact value) is Megatron's
# get_lr at that many samples (the formula, restated here in awk; the C
# function against Megatron's own code: tests/unit/test_schedule.c), the
# table names the schedule, a run saved and resumed (mds's format and
# torch_dist) keeps it, and Megatron's argument rules exit 2.  About 5 s.
. tests/cli/lib.sh
MDSTRAIN=${MDSTRAIN:-$BUILD/mdstrain}
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
no_launcher_env
BASE="--mock-data --tokenizer-type NullTokenizer --vocab-size 127 --make-vocab-size-divisible-by 8
      --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 16 --max-position-embeddings 16
      --micro-batch-size 1 --global-batch-size 2 --train-iters 10 --lr 1e-3 --min-lr 1e-4
      --lr-warmup-iters 2 --log-interval 1 --eval-iters 0 -v -v"
# lrs FILE: "iteration lr" of each log line, exact
lrs() { awk '/\] iteration / { split($0, a, "iteration +"); split(a[2], b, "/"); it = b[1] + 0 }
             /^ \[rank [0-9]*\] learning rate / { print it, $5 }' "$1"; }
# expect STYLE WSD-STYLE WSD-SAMPLES: Megatron's get_lr at k x 2 samples, k = 1..10
# (warmup 4 samples, decay 20, max 1e-3, min 1e-4, init 0)
expect() {
    awk -v style="$1" -v ws="$2" -v wsd="$3" 'BEGIN {
        mx = 1e-3; mn = 1e-4; w = 4; d = 20; pi = atan2(0, -1)
        for (k = 1; k <= 10; k++) {
            s = 2 * k
            if (s <= w) lr = mx * s / w
            else if (s > d) lr = mn
            else if (style == "isr") { lr = mx * sqrt(w) / sqrt(s); if (!(lr > mn)) lr = mn }
            else {
                st = d - wsd
                if (s <= st) c = 1
                else { r = (s - st) / wsd
                       if (ws == "linear") c = 1 - r; else if (ws == "cosine") c = 0.5 * (cos(pi * r) + 1)
                       else if (ws == "minus_sqrt") c = 1 - sqrt(r); else c = 2 * exp(r * log(0.5)) - 1 }
                lr = mn + c * (mx - mn)
            }
            printf "%d %.17g\n", k, lr
        } }'
}
# same_lrs GOT WANT: the same iterations, each rate within 1e-14 relative
same_lrs() {
    [ "$(wc -l <"$1")" -eq 10 ] && paste -d' ' "$1" "$2" | awk '{ d = $2 - $4; if (d < 0) d = -d;
        a = $4 < 0 ? -$4 : $4; if ($1 != $3 || d > 1e-14 * a) { print "  differs: " $0 > "/dev/stderr"; bad = 1 } }
        END { exit bad }'
}

for ws in exponential linear cosine minus_sqrt; do
    # shellcheck disable=SC2086
    "$MDSTRAIN" $BASE --lr-decay-style WSD --lr-wsd-decay-style "$ws" --lr-wsd-decay-iters 4 >"$T/$ws" 2>"$T/$ws.err"
    lrs "$T/$ws" >"$T/$ws.lr"; expect wsd "$ws" 8 >"$T/$ws.want"
    check "wsd_${ws}_rates" same_lrs "$T/$ws.lr" "$T/$ws.want"
done
check wsd_table grep -q '^| lr / min lr / style  *| 0.001 / 0.0001 / WSD (minus_sqrt, last 4 iters) ' "$T/minus_sqrt.err"
# shellcheck disable=SC2086
"$MDSTRAIN" $BASE --lr-decay-style WSD --lr-wsd-decay-iters 4 >"$T/default" 2>/dev/null
lrs "$T/default" >"$T/default.lr"
check wsd_default_exponential cmp -s "$T/default.lr" "$T/exponential.lr"
# shellcheck disable=SC2086
"$MDSTRAIN" $BASE --lr-decay-style inverse-square-root >"$T/isr" 2>"$T/isr.err"
lrs "$T/isr" >"$T/isr.lr"; expect isr >"$T/isr.want"
check isr_rates same_lrs "$T/isr.lr" "$T/isr.want"
check isr_table grep -q '^| lr / min lr / style  *| 0.001 / 0.0001 / inverse-square-root ' "$T/isr.err"
# samples: --lr-wsd-decay-samples with --train-samples
# shellcheck disable=SC2046,SC2086
"$MDSTRAIN" $(echo $BASE | sed 's/--train-iters 10/--train-samples 20/; s/--lr-warmup-iters 2/--lr-warmup-samples 4/') \
    --lr-decay-style WSD --lr-wsd-decay-style linear --lr-wsd-decay-samples 8 >"$T/samples" 2>/dev/null
lrs "$T/samples" >"$T/samples.lr"
check wsd_samples_rates cmp -s "$T/samples.lr" "$T/linear.lr"

# saved at 6 and resumed: the same rates as the whole run, in both formats
for fmt in mds torch_dist; do
    F=""; [ "$fmt" = torch_dist ] && F="--ckpt-format torch_dist"
    # shellcheck disable=SC2086
    "$MDSTRAIN" $BASE $F --lr-decay-style WSD --lr-wsd-decay-style cosine --lr-wsd-decay-iters 4 \
        --save "$T/ck_$fmt" --exit-interval 6 >"$T/a_$fmt" 2>/dev/null
    # shellcheck disable=SC2086
    "$MDSTRAIN" $BASE $F --lr-decay-style WSD --lr-wsd-decay-style cosine --lr-wsd-decay-iters 4 \
        --load "$T/ck_$fmt" >"$T/b_$fmt" 2>"$T/b_$fmt.err"
    cat "$T/a_$fmt" "$T/b_$fmt" >"$T/ab_$fmt"
    lrs "$T/ab_$fmt" >"$T/ab_$fmt.lr"
    check "resume_${fmt}_rates" cmp -s "$T/ab_$fmt.lr" "$T/cosine.lr"
done
# a checkpoint's style must be this run's
# shellcheck disable=SC2086
run_expect resume_other_style 1 'decay style is WSD in the checkpoint but cosine in this run' \
    "$MDSTRAIN" $BASE --lr-decay-style cosine --load "$T/ck_mds"

# Megatron's rules: WSD's length in the training's unit; the WSD flags go with WSD
run_expect wsd_needs_length 2 'WSD needs --lr-wsd-decay-iters' "$MDSTRAIN" $BASE --lr-decay-style WSD
run_expect wsd_samples_with_iters 2 'lr-wsd-decay-samples needs --train-samples' \
    "$MDSTRAIN" $BASE --lr-decay-style WSD --lr-wsd-decay-samples 8
run_expect wsd_flag_without_wsd 2 'lr-wsd-decay-iters goes with --lr-decay-style WSD' \
    "$MDSTRAIN" $BASE --lr-decay-style cosine --lr-wsd-decay-iters 4
run_expect wsd_style_without_wsd 2 'lr-wsd-decay-style goes with --lr-decay-style WSD' \
    "$MDSTRAIN" $BASE --lr-wsd-decay-style linear
run_expect wsd_style_unknown 2 'lr-wsd-decay-style' "$MDSTRAIN" $BASE --lr-decay-style WSD --lr-wsd-decay-iters 4 \
    --lr-wsd-decay-style step
run_expect isr_with_tokens 2 'inverse-square-root with the token schedule' \
    "$MDSTRAIN" $BASE --lr-decay-style inverse-square-root --lr-warmup-tokens 0 --lr-decay-tokens 320
finish
