#!/bin/sh
# test_torch_gpt.sh - bench/torch_gpt.py's speed knobs (make bench-gpu's
# PyTorch baseline) against its plain model, on the CPU at a tiny shape: the
# same seed gives the same model and data, so --sdpa and --fused-adamw must
# give the plain run's losses (fp32, within 1e-5), --bf16 losses near them
# (1e-2) but not equal (autocast is on), --fast (regional torch.compile as
# well) near the --bf16 run's; the Llama block likewise; --device cuda
# without a GPU is one line and a failure; --profile writes its tables and
# keeps the losses.  Needs PyTorch:
# $MDS_TORCH_PYTHON (else /usr/bin/python3) must import torch, otherwise
# skipped; the knobs need torch 2.4 or later (else only the plain run).  About 10 s, plus about a minute for the one compiled run.
. tests/cli/lib.sh
PY=${MDS_TORCH_PYTHON:-/usr/bin/python3}
if ! "$PY" -c 'import torch' 2>/dev/null; then
    skip torch_gpt "'import torch' fails for $PY (set MDS_TORCH_PYTHON)"
    exit 0
fi
SHAPE="--layers 2 --hidden 32 --heads 4 --seq 16 --batch 2 --vocab 128 --iters 3 --skip 1"

# run NAME FLAGS...: the losses of the three iterations in $T/NAME
run() {
    name=$1; shift
    # shellcheck disable=SC2086
    "$PY" bench/torch_gpt.py $SHAPE "$@" >"$T/$name.out" 2>"$T/$name.err" &&
        sed -n 's/^iter [0-9]* ms [0-9.]* loss \([0-9.]*\)$/\1/p' "$T/$name.out" >"$T/$name"
}
# near A B TOL [differ]: three losses each, within TOL relative (and with
# "differ", not all equal)
near() {
    test "$(wc -l <"$T/$1")" -eq 3 && test "$(wc -l <"$T/$2")" -eq 3 &&
        paste -d' ' "$T/$1" "$T/$2" | awk -v tol="$3" -v differ="${4:-}" '
            { d = $1 - $2; if (d < 0) d = -d; if (d > tol * $1) bad = 1; if ($1 != $2) moved = 1 }
            END { exit bad || (differ != "" && !moved) }'
}
run plain
check torch_plain test -s "$T/plain"   # bench/train.sh's model, on any torch
# --profile FILE (bench-gpu's baseline for mdstrain --op-times): the same
# losses, then FILE with the kinds' table (matmuls among them) and the ops'
run profiled --profile "$T/prof.txt"
check torch_profile_same_losses cmp -s "$T/plain" "$T/profiled"
check torch_profile_file sh -c "grep -q '^torch .* on cpu, batch 2, seq 16: one iteration after 3 ' '$T/prof.txt' &&
    grep -q '^gemm  *[0-9.]* *[0-9.]* *[0-9.]* %\$' '$T/prof.txt' && grep -q '^every kernel  *[0-9.]* *[0-9.]*\$' '$T/prof.txt' &&
    grep -q '^aten::' '$T/prof.txt'"
# the knobs need torch >= 2.4 (fused AdamW on the CPU); Debian's is 1.13
if ! "$PY" -c 'import sys, torch; sys.exit(tuple(map(int, torch.__version__.split(".")[:2])) < (2, 4))'; then
    skip torch_gpt_fast "torch $("$PY" -c 'import torch; print(torch.__version__)') < 2.4 (set MDS_TORCH_PYTHON)"
    exit $((nfail > 0))
fi
run sdpa --sdpa
run fused --sdpa --fused-adamw
run bf16 --bf16
check torch_sdpa_is_attention near plain sdpa 1e-5
check torch_fused_adamw near plain fused 1e-5
check torch_bf16_autocast near plain bf16 1e-2 differ
run fast --fast
check torch_fast_compiled near bf16 fast 1e-2
check torch_summary grep -q '^torch ms_per_iter [0-9.]* threads [0-9]* version ' "$T/fast.out"
run lplain --llama 2 64
run lsdpa --llama 2 64 --sdpa --fused-adamw
check torch_llama_sdpa near lplain lsdpa 1e-5
if "$PY" -c 'import torch, sys; sys.exit(torch.cuda.is_available())'; then   # no GPU here
    check torch_no_gpu_refused sh -c "! \"$PY\" bench/torch_gpt.py $SHAPE --device cuda >/dev/null 2>\"$T/cuda.err\" &&
        test \"\$(cat \"$T/cuda.err\")\" = 'torch_gpt: --device cuda: torch.cuda.is_available() is False'"
fi
exit $((nfail > 0))
