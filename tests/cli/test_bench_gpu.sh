#!/bin/sh
# test_bench_gpu.sh - what of `make bench-gpu` runs without a GPU: the
# scripts parse (sh -n); without a GPU bench/gpu.sh and bench/gemm_gpu stop
# with one line and exit 1 instead of hanging; and the dry run
# (MDS_BENCH_GPU_DRYRUN=1: the CPU backend, tiny shapes, an imaginary 96 MiB
# device, no PyTorch) goes through every section: a row per shape with its
# figures, the micro-batch the probe predicted fits (and did: the peak stays
# under the 95 % it aimed at), and the host-staged layouts' bytes exactly as
# bench/comm_plan.py computes them; PyTorch run again at a smaller
# micro-batch where it runs out of memory; the shapes run as named, in
# their order; and the token file made for llm.c.
# About 20 s.
. tests/cli/lib.sh
MDSTRAIN=${MDSTRAIN:-$BUILD/mdstrain}
check bench_scripts_parse sh -n bench/gpu.sh

if "$MDSTRAIN" --device cuda --help >/dev/null 2>&1 &&
   ! "$MDSTRAIN" --device cuda --mock-data --tokenizer-type NullTokenizer --vocab-size 127 --num-layers 1 \
       --hidden-size 32 --num-attention-heads 4 --seq-length 16 --max-position-embeddings 16 --micro-batch-size 1 \
       --global-batch-size 1 --train-iters 1 --lr 1e-4 -q >/dev/null 2>&1; then
    BUILD=$BUILD MDS_BENCH_GPU_REPORT="$T/none.txt" sh bench/gpu.sh >"$T/out" 2>"$T/err"
    check bench_gpu_no_gpu sh -c "test $? -eq 1 && test ! -s '$T/out' && test \$(wc -l <'$T/err') -eq 1 &&
        grep -q '^bench-gpu: no GPU to run on (mdstrain: --device cuda: ' '$T/err'"
    if [ -x "$BUILD/gemm_gpu" ]; then
        "$BUILD/gemm_gpu" --tokens 8 --hidden 4 --ffn 16 --layers 1 --vocab 32 --kv 4 >"$T/out" 2>"$T/err"
        check gemm_gpu_no_gpu sh -c "test $? -eq 1 && test \$(wc -l <'$T/err') -eq 1"
    fi
else
    skip bench_gpu_no_gpu "this machine has a GPU"
fi

# llm.c's token file (its dataloader.h: 256 int32 header, magic 20240520,
# version 1, token count; then uint16 ids), ids below the GPT-2 vocabulary
eval "$(sed -n '/^llmc_data() {/,/^}/p' bench/gpu.sh)"
llmc_data "$T/llmc.bin"
check bench_llmc_header test "$(od -An -tu4 -N12 "$T/llmc.bin" | tr -s ' ')" = " 20240520 1 1048576"
check bench_llmc_size test "$(wc -c <"$T/llmc.bin")" -eq $((1024 + 2 * 1048576))
check bench_llmc_ids sh -c "od -An -tu2 -v -j1024 '$T/llmc.bin' | awk '{ for (i = 1; i <= NF; i++) if (\$i >= 50257) exit 1 }'"

BUILD=$BUILD MDS_BENCH_GPU_DRYRUN=1 MDS_TORCH_PYTHON=/nonexistent MDS_BENCH_GPU_REPORT="$T/report.txt" \
    sh bench/gpu.sh >"$T/dry" 2>&1
check bench_dry_exit0 test $? -eq 0
check bench_dry_report cmp -s "$T/dry" "$T/report.txt"
N='[0-9][0-9.]*'
for s in gpt-tiny llama-tiny; do
    check "bench_dry_row_$s" grep -Eq "^  $s +[0-9]+ +64 \\| +$N +$N +$N +$N% +$N \\|" "$T/dry"
done
# gpt-tiny's parameters take most of the 96 MiB: memory is the bound, and the peak fits
check bench_dry_mb_by_memory grep -Eq '^  gpt-tiny +micro-batch ([0-9]+): memory allows \1, bound: memory$' "$T/dry"
check bench_dry_peak_fits awk '$1 == "gpt-tiny" && $4 == "|" { found = 1; if ($9 > 0.95 * 96) exit 1 } END { exit !found }' "$T/dry"
check bench_dry_torch_skipped grep -q "^  torch: 'import torch' fails for /nonexistent" "$T/dry"
check bench_dry_llmc_skipped grep -q '^  llm.c: skipped' "$T/dry"
# PyTorch out of memory at mdstrain's micro-batch (4, the memory bound above):
# run again at 3/4 of it and compared by tokens/s.  A stand-in python whose
# "torch" runs out of memory the first time, then takes 10 ms an iteration.
cat >"$T/python" <<'EOF2'
#!/bin/sh
case "$1" in -c) exit 0 ;; esac
if [ ! -f "$FAKE_TORCH_STATE" ]; then
    : >"$FAKE_TORCH_STATE"
    echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB" >&2; exit 1
fi
echo "torch ms_per_iter 10.0 threads 1 version 0.0+stand-in blas none"
EOF2
chmod +x "$T/python"
BUILD=$BUILD MDS_BENCH_GPU_DRYRUN=1 MDS_BENCH_GPU_STAGED=0 MDS_BENCH_GPU_SHAPES="gpt-tiny nonesuch" MDS_TORCH_PYTHON="$T/python" \
    FAKE_TORCH_STATE="$T/torch.state" MDS_BENCH_GPU_REPORT="$T/report2.txt" sh bench/gpu.sh >"$T/dry2" 2>&1
check bench_dry_torch_smaller grep -Eq '^  gpt-tiny +4 +64 \|.*\| +10\.0 +19200 .*\(torch at micro-batch 3\)$' "$T/dry2"
check bench_dry_torch_ratio awk '$1 == "gpt-tiny" && $4 == "|" { d = $17 - $6 / 19200; found = $17 ~ /x$/ && d < 0.006 && d > -0.006 }
                                 END { exit !found }' "$T/dry2"
check bench_dry_torch_note grep -q '^  gpt-tiny: torch ran out of memory at micro-batch 4 and ran at 3$' "$T/dry2"
check bench_dry_shapes_named sh -c "grep -q '^  nonesuch: no such shape' '$T/dry2' &&
    grep -q '^  llama-tiny: not in MDS_BENCH_GPU_SHAPES' '$T/dry2' && ! grep -q '^  llama-tiny  ' '$T/dry2'"
# the shapes run in the order named
BUILD=$BUILD MDS_BENCH_GPU_DRYRUN=1 MDS_BENCH_GPU_STAGED=0 MDS_BENCH_GPU_SHAPES="llama-tiny gpt-tiny" \
    MDS_TORCH_PYTHON=/nonexistent MDS_BENCH_GPU_REPORT="$T/report3.txt" sh bench/gpu.sh >"$T/dry3" 2>&1
check bench_dry_shapes_order test "$(awk '$4 == "|" && $1 != "model" { printf "%s ", $1 }' "$T/dry3")" = "llama-tiny gpt-tiny "
for l in TP2 PP2 DP2 'DP2 --overlap-grad-reduce'; do
    check "bench_dry_staged_$(echo "$l" | tr -c 'A-Za-z0-9\n' _)" grep -Eq "^  $l +$N  .* exact\$" "$T/dry"
done
exit $((nfail > 0))
