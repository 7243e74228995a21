#!/bin/sh
# gpu.sh - `make bench-gpu` (issues 11, 13, 16): mdstrain training on one
# NVIDIA GPU against PyTorch, cuBLAS alone and llm.c in the same run, and
# the host-staged ranks' collectives against bench/comm_plan.py.  Sections:
#
#  1. training, bf16, one GPU: GPT-2 124M (12 layers, hidden 768, 12 heads),
#     350M (24, 1024, 16) and 1.3B (24, 2048, 16) at seq 1024, and a
#     Llama-style 1B (16 layers, 2048, 32 heads, 8 key/value groups, SwiGLU
#     8192, RoPE, RMSNorm, no biases, untied, vocabulary 128256) at seq 2048;
#     all on --mock-data without dropout.  Per shape: a probe at micro-batch 1
#     (2 iterations) gives the bytes held and the activations per sample
#     (mdstrain's configuration table), hence the largest micro-batch that
#     fits in 95 % of the device beside what the probe saw in use, capped so
#     that the timed run keeps to its share of the time budget (the table
#     says which bound won); that run is timed (mean of the iterations after
#     the first); a run that does not fit after all is retried at 3/4.
#     Tokens/s, TFLOP/s from mdstrain's own FLOPs per token (its table's
#     "model FLOPs per token": Megatron's formula, train/model.c
#     gpt_flops_per_token), MFU against the H100's 989 TFLOP/s dense bf16
#     peak (PEAK_TFLOPS), peak memory (mdstrain's report_memory "max
#     allocated").  Beside it, in the same run: bench/torch_gpt.py --fast
#     (torch.compile, flash SDPA, fused AdamW, bf16 autocast) on the same
#     model and micro-batch, its time, the same FLOPs and
#     torch.cuda.max_memory_allocated; where torch runs out of memory at
#     that micro-batch, at 3/4 of it (up to three times), the row naming
#     torch's, and mds/torch always the ratio of tokens/s.
#  2. the matmuls: $BUILD/gemm_gpu (bench/gemm_gpu.cu) times the step's
#     linears alone at the same shapes, bf16 through cuBLASLt (what a
#     --bf16 step runs, mdstrain's and torch's) and fp32 pedantic (what an
#     fp32 run issues): the bf16 products' share of each step.
#  3. llm.c: with LLMC=/path/to/llm.c (a copy carried to the machine and
#     built there by hand, docs/benchmarks.md, "The device call": this
#     script neither fetches nor builds it), its train_gpt2cu trains its d12
#     (GPT-2 124M) on random tokens; else one skip line.
#  4. host-staged ranks (issue 16): 2 ranks on the one GPU over TCP
#     (--device-comm host-staged), TP2, PP2, DP2 and DP2 with
#     --overlap-grad-reduce, against one rank: time per iteration, rank 0's
#     bytes per iteration, and every rank's bytes checked exactly against
#     bench/comm_plan.py.
#
# MDS_BENCH_GPU_SHAPES="gpt2-124m gpt2-1.3b" runs only the shapes named, in
# that order (default: all, 124M, Llama 1B, 1.3B, 350M: the budget may end
# before the last); MDS_BENCH_GPU_STAGED=0 skips section 4 and its reserve.
# MDS_BENCH_COMMIT names the commit in the header (default: git's HEAD, with
# "+changes" when the tree differs from it); a device's copy of the tree has
# a history of its own, so the call that runs it there says which commit.
# Everything keeps to MDS_BENCH_GPU_SECONDS (default 520) of wall time: each
# run is under timeout(1) and a section without time left says so.  The
# report also goes to $BUILD/bench-gpu.txt, and to $OUT/bench-gpu.txt when
# $OUT is set (the device machine's folder that comes back).  Without a GPU:
# one line, exit 1.  MDS_BENCH_GPU_DRYRUN=1 runs the same script on the CPU
# backend at tiny shapes with an imaginary 96 MiB device
# (tests/cli/test_bench_gpu.sh): it checks the arithmetic, not the GPU.
# Run from the repository root with BUILD set (make bench-gpu does).
THREADS=${OMP_NUM_THREADS:-$(nproc)}   # parallel_lib.sh sets 1 (its ranks' setting)
. tests/cli/lib.sh            # $T, next_port
. tests/cli/parallel_lib.sh   # tcp: ranks over TCP, as the tests start them
no_launcher_env
BUILD=${BUILD:-build}
M=$BUILD/mdstrain
PY=${MDS_TORCH_PYTHON:-python3}
PEAK_TFLOPS=${PEAK_TFLOPS:-989}
DRY=${MDS_BENCH_GPU_DRYRUN:-0}
START=$(date +%s)
END=$((START + ${MDS_BENCH_GPU_SECONDS:-520}))
REPORT=${MDS_BENCH_GPU_REPORT:-$BUILD/bench-gpu.txt}
export OMP_NUM_THREADS="$THREADS"   # every core for the weights' initialisation
# ITERS per timed run (the first is not timed); SHAPE_SECONDS: the most a
# timed mdstrain run may take; RESERVE: the seconds kept for section 4
if [ "$DRY" = 1 ]; then
    DEV=cpu ITERS=3 SHAPE_SECONDS=20 MAX_MB=4 RESERVE=0
else
    DEV=cuda ITERS=${MDS_BENCH_GPU_ITERS:-5} SHAPE_SECONDS=${MDS_BENCH_GPU_SHAPE_SECONDS:-30} MAX_MB=64 RESERVE=75
    [ "${MDS_BENCH_GPU_STAGED:-1}" = 0 ] && RESERVE=0
fi

left() { echo $((END - $(date +%s))); }
# ms FILE: mean "elapsed time per iteration (ms)" after the first iteration
ms() { sed -n 's/.*elapsed time per iteration (ms): \([0-9.]*\) .*/\1/p' "$1" |
       awk 'NR > 1 { s += $1; n++ } END { if (n) printf "%.1f", s / n }'; }
# row FILE NAME: the value column of mdstrain's configuration table row NAME
row() { sed -n "s/^| $2 *| \([^|]*\) |\$/\1/p" "$1" | sed 's/ *$//'; }
# mdstrain NAME MB ITERS FLAGS...: one run, output in $T/NAME.{out,err}; exit status of mdstrain
# (POSIX sh has no locals: these use r_* names only)
mdstrain_run() {
    r_name=$1 r_mb=$2 r_n=$3; shift 3
    r_lim=$(left); [ "$r_lim" -gt 300 ] && r_lim=300
    [ "$r_lim" -gt 5 ] || { echo "no time left" >"$T/$r_name.err"; return 124; }
    # shellcheck disable=SC2086
    timeout -s KILL "$r_lim" "$M" --device $DEV --mock-data "$@" --micro-batch-size "$r_mb" --global-batch-size "$r_mb" \
        --train-iters "$r_n" --lr 1e-4 --log-interval 1 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 \
        --bf16 >"$T/$r_name.out" 2>"$T/$r_name.err"
}
# why NAME: the first error line of a failed run
why() { grep -m1 -E 'mdstrain: |error|Error|no time left' "$T/$1.err" || tail -n 1 "$T/$1.err"; }
# nomem FILE: the run that wrote FILE (mdstrain's stderr, torch's output) ran out of memory
nomem() { grep -qE 'cannot allocate|out of memory|cudaErrorMemoryAllocation' "$1"; }

# ---- 1 and 2: one shape -------------------------------------------------
# shape NAME SEQ VOCAB TORCH_FLAGS -- MDSTRAIN_FLAGS...
shape() {
    name=$1 seq=$2 vocab=$3 tflags=$4; shift 5
    if [ "$(left)" -lt $((RESERVE + 30)) ]; then   # section 4 keeps its share
        echo "$name: skipped, $(left) s of the budget left" >>"$T/notes"; return
    fi
    if ! mdstrain_run "$name.probe" 1 2 --seq-length "$seq" --max-position-embeddings "$seq" "$@"; then
        echo "$name: the micro-batch 1 probe failed: $(why "$name.probe")" >>"$T/notes"; return
    fi
    P=$T/$name.probe.err
    act=$(row "$P" 'activation memory (rank 0)' | cut -d' ' -f1)
    held=$(row "$P" 'memory held (rank 0)' | cut -d' ' -f1)
    if [ "$DRY" = 1 ]; then used=$held total=$((96 << 20))   # an imaginary device, nothing else on it
    else
        used=$(row "$P" 'device memory in use' | cut -d' ' -f1)
        total=$(row "$P" 'device memory in use' | cut -d' ' -f3)
    fi
    t1=$(ms "$T/$name.probe.out")
    # the largest micro-batch: activations grow with it, the rest does not
    pick=$(awk -v act="$act" -v held="$held" -v used="$used" -v total="$total" -v t1="$t1" -v n="$ITERS" \
               -v s="$SHAPE_SECONDS" -v cap="$MAX_MB" 'BEGIN {
        mem = int((0.95 * total - (used - held) - (held - act)) / act)
        tim = t1 > 0 ? int(s * 1000 / (n * t1)) : cap
        b = mem; why = "memory"
        if (tim < b) { b = tim; why = "time budget" }
        if (cap < b) { b = cap; why = "cap " cap }
        if (b < 1) b = 1
        printf "%d %d %s\n", b, mem, why }')
    mb=${pick%% *}; rest=${pick#* }; fits=${rest%% *}; bound=${rest#* }
    tries=0
    while :; do
        if mdstrain_run "$name" "$mb" "$ITERS" --seq-length "$seq" --max-position-embeddings "$seq" "$@"; then break; fi
        tries=$((tries + 1))
        if nomem "$T/$name.err" && [ "$mb" -gt 1 ] && [ $tries -lt 3 ]; then
            mb=$((mb * 3 / 4)); bound="memory (retried)"; continue
        fi
        echo "$name: mdstrain at micro-batch $mb failed: $(why "$name")" >>"$T/notes"; return
    done
    fpt=$(row "$T/$name.err" 'model FLOPs per token' | cut -d' ' -f1)
    mds=$(ms "$T/$name.out")
    peak=$(sed -n 's/^\[Rank 0\] .* max allocated: \([0-9.]*\) .*/\1/p' "$T/$name.err")
    # PyTorch, same model and micro-batch; where that does not fit torch's
    # memory, at 3/4 of it (up to three times), and compared by tokens/s
    tms='?' tpeak='?' tmb=$mb ttries=0 tprof=
    # MDS_BENCH_GPU_PROFILE=1: torch's kernels in one more iteration, into
    # $OUT/torch-prof-NAME.txt (bench/devcall.sh; beside mdstrain --op-times)
    [ "${MDS_BENCH_GPU_PROFILE:-0}" = 1 ] && [ -n "${OUT:-}" ] && tprof="--profile $OUT/torch-prof-$name.txt"
    while [ "$HAVE_TORCH" = 1 ] && [ "$(left)" -gt 20 ]; do
        lim=$(left); [ "$lim" -gt 240 ] && lim=240
        # shellcheck disable=SC2086
        if timeout -s KILL "$lim" "$PY" bench/torch_gpt.py --device $DEV --fast $tflags --seq "$seq" --batch "$tmb" \
               --vocab "$vocab" --iters "$ITERS" --skip 2 $tprof >"$T/$name.torch" 2>&1; then
            tms=$(awk '/^torch ms_per_iter/ { print $3 }' "$T/$name.torch")
            tpeak=$(awk '/^torch ms_per_iter/ { for (i = 1; i < NF; i++) if ($i == "peak_mem_bytes")
                                                    printf "%.2f", $(i + 1) / 1048576 }' "$T/$name.torch")
            [ -n "$TORCH_VER" ] || TORCH_VER=$(awk '/^torch ms_per_iter/ { print $7 }' "$T/$name.torch")
            [ "$tmb" = "$mb" ] || echo "$name: torch ran out of memory at micro-batch $mb and ran at $tmb" >>"$T/notes"
            break
        fi
        ttries=$((ttries + 1))
        if nomem "$T/$name.torch" && [ "$tmb" -gt 1 ] && [ $ttries -le 3 ]; then
            tmb=$((tmb * 3 / 4)); continue
        fi
        echo "$name: torch failed at micro-batch $tmb: $(grep -v '^iter ' "$T/$name.torch" | tail -n 1)" >>"$T/notes"
        break
    done
    # cuBLAS alone on the step's linears
    g16='?' g32='?'
    if [ "$DEV" = cuda ] && [ "$(left)" -gt 15 ]; then
        # shellcheck disable=SC2086
        if timeout -s KILL 120 "$BUILD/gemm_gpu" --tokens $((mb * seq)) $GEMM_ARGS >"$T/$name.gemm" 2>&1; then
            g16=$(awk '/^per_step/ { print $3 }' "$T/$name.gemm") g32=$(awk '/^per_step/ { print $5 }' "$T/$name.gemm")
        else
            echo "$name: gemm_gpu failed: $(tail -n 1 "$T/$name.gemm")" >>"$T/notes"
        fi
    fi
    # one line per shape: fields 1-12 (12: torch's micro-batch), then the bound (words)
    echo "$name $mb $seq $fpt $mds ${peak:-?} $fits ${tms:-?} ${tpeak:-?} ${g16:-?} ${g32:-?} $tmb $bound" >>"$T/rows"
}

# ---- 3: llm.c -----------------------------------------------------------
llmc_data() {   # FILE: llm.c's token file of 2^20 random GPT-2 ids (< 50176)
    { printf '\210\330\064\001\001\000\000\000\000\000\020\000'; head -c 1012 /dev/zero
      head -c 2097152 /dev/urandom | LC_ALL=C tr '\304-\377' '\000-\073'; } >"$1"
}
llmc() {
    if [ -z "${LLMC:-}" ]; then echo "llm.c: skipped (set LLMC=/path/to/llm.c, docs/benchmarks.md)"; return; fi
    if [ "$DEV" != cuda ]; then echo "llm.c: skipped (dry run)"; return; fi
    if [ "$(left)" -lt $((RESERVE + 30)) ]; then echo "llm.c: skipped, $(left) s of the budget left"; return; fi
    if [ ! -x "$LLMC/train_gpt2cu" ]; then
        echo "llm.c: skipped, no $LLMC/train_gpt2cu (build it by hand first, docs/benchmarks.md)"; return
    fi
    printf '%-14s %4s %9s %10s %8s %7s\n' program mb ms/step tokens/s TFLOP/s MFU
    llmc_data "$T/llmc_train.bin"
    for b in $LLMC_MB; do
        [ "$(left)" -gt $((RESERVE + 20)) ] || { echo "llm.c: -b $b skipped, no time left"; continue; }
        (cd "$LLMC" && timeout -s KILL 120 ./train_gpt2cu -i "$T/llmc_train.bin" -j "$T/llmc_train.bin" -e d12 \
             -b "$b" -t 1024 -x 12 -v 1000 -m 1 -s 0 -h 0) >"$T/llmc.$b" 2>&1
        # steps after the first two: ms per step, as the mdstrain runs
        awk -v b="$b" -v fpt="$FPT124" -v peak="$PEAK_TFLOPS" '
            /^step +[0-9]+\/[0-9]+ \|/ { for (i = 1; i < NF; i++) if ($(i + 1) == "ms") { k++; if (k > 2) { s += $i; n++ } } }
            END { if (!n) { print "llm.c: -b " b ": no step lines (see its output)"; exit }
                  ms = s / n; tok = b * 1024 * 1000 / ms
                  printf "%-14s %4d %9.1f %10.0f", "llm.c d12", b, ms, tok
                  if (fpt) printf " %8.1f %6.1f%%", fpt * tok / 1e12, 100 * fpt * tok / 1e12 / peak
                  printf "\n" }' "$T/llmc.$b"
    done
}

# ---- 4: host-staged ranks -------------------------------------------------
staged() {
    if [ "$(left)" -lt 60 ]; then echo "host-staged: skipped, $(left) s of the budget left"; return; fi
    if [ "$DRY" = 1 ]; then SARGS="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64"
    else SARGS="--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024"; fi
    SARGS="$SARGS --max-position-embeddings ${SARGS##* } --mock-data --micro-batch-size 1 --global-batch-size 2
           --train-iters 5 --lr 1e-4 --log-interval 1 --eval-iters 0 --bf16 -q -v -v"
    echo "  $(echo "$SARGS" | tr -s ' \n' '  ' | cut -d' ' -f1-8), micro-batch 1, global batch 2, bf16, 5 iterations (mean of 2..5)"
    printf '  %-26s %9s  %-44s %s\n' layout ms/iter "bytes sent per iteration by rank 0" "plan"
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=2 timeout -s KILL 120 "$M" --device $DEV $SARGS >"$T/one.0.log" 2>"$T/one.0.err"
    printf '  %-26s %9s\n' "1 rank" "$(ms "$T/one.0.log")"
    for lay in "TP2:--tensor-model-parallel-size 2" "PP2:--pipeline-model-parallel-size 2" "DP2:" \
               "DP2 --overlap-grad-reduce:--overlap-grad-reduce --ddp-bucket-size 1000000"; do
        name=$(echo "${lay%%:*}" | tr -c 'A-Za-z0-9\n' _) flags=${lay#*:}
        # shellcheck disable=SC2086
        OMP_NUM_THREADS=2 tcp "$name" 2 slurm --device $DEV --device-comm host-staged $SARGS $flags
        if [ "$rc" -ne 0 ]; then
            printf '  %-26s failed: %s\n' "${lay%%:*}" "$(grep -m1 'mdstrain' "$T/$name.0.err" "$T/$name.1.err" | head -n 1)"
            continue
        fi
        sent=$(grep '^\[rank 0\]' "$T/$name.0.err" | sed 's/^.*per iteration://' | tr ';' '\n' |
               sed -n 's/^ *\([a-z]*\) \([a-z/-]*\) \([0-9.]*\) calls \([0-9]*\) bytes$/\1 \2 \4/p' |
               awk '{ printf "%s%s %s %s", n++ ? ", " : "", $1, $2, $3 }')
        # shellcheck disable=SC2086
        if python3 bench/comm_plan.py $SARGS $flags --vocab-size 50257 --world-size 2 \
               --check "$T/$name".*.err >"$T/$name.plan" 2>&1; then plan=exact
        else plan="DIFFERS: $(tail -n 1 "$T/$name.plan")"; fi
        printf '  %-26s %9s  %-44s %s\n' "${lay%%:*}" "$(ms "$T/$name.1.log")" "$sent" "$plan"   # the last rank logs
    done
    echo "  (--overlap-grad-reduce: buckets of 10^6 gradient elements or more, all-reduced while the backward goes on)"
}

# run_shape NAME: one shape of section 1 (and 2); after the 124M, llm.c beside it
run_shape() {
    case $1 in
    gpt-tiny|llama-tiny)
        [ "$DRY" = 1 ] || { echo "$1: a dry-run shape" >>"$T/notes"; return; }
        G="--num-layers 2 --hidden-size 64 --num-attention-heads 4"
        GEMM_ARGS="--hidden 64 --ffn 256 --layers 2 --vocab 50304 --kv 64"
        if [ "$1" = gpt-tiny ]; then
            shape gpt-tiny 64 50304 "--layers 2 --hidden 64 --heads 4" -- $G
        else
            shape llama-tiny 64 1024 "--layers 2 --hidden 64 --heads 4 --llama 2 128" -- $G \
                --position-embedding-type rope --normalization RMSNorm --swiglu --ffn-hidden-size 128 \
                --group-query-attention --num-query-groups 2 --disable-bias-linear --untie-embeddings-and-output-weights \
                --tokenizer-type NullTokenizer --vocab-size 1023
        fi ;;
    gpt2-124m)
        GEMM_ARGS="--hidden 768 --ffn 3072 --layers 12 --vocab 50304 --kv 768"
        shape gpt2-124m 1024 50304 "--layers 12 --hidden 768 --heads 12" -- \
            --num-layers 12 --hidden-size 768 --num-attention-heads 12
        FPT124=$(awk '$1 == "gpt2-124m" { print $4 }' "$T/rows")
        # llm.c beside the 124M (its micro-batch 64 as in its README, and mdstrain's)
        LLMC_MB=${LLMC_MB:-64 $(awk '$1 == "gpt2-124m" && $2 != 64 { print $2 }' "$T/rows")}
        llmc >"$T/llmc" 2>&1
        LLMC_DONE=1 ;;
    llama-1b)   # issue 13's Llama
        GEMM_ARGS="--hidden 2048 --ffn 8192 --layers 16 --vocab 128256 --kv 512 --swiglu"
        shape llama-1b 2048 128256 "--layers 16 --hidden 2048 --heads 32 --llama 8 8192" -- \
            --num-layers 16 --hidden-size 2048 --num-attention-heads 32 --position-embedding-type rope \
            --normalization RMSNorm --swiglu --ffn-hidden-size 8192 --group-query-attention --num-query-groups 8 \
            --disable-bias-linear --untie-embeddings-and-output-weights --tokenizer-type NullTokenizer \
            --vocab-size 128255 ;;
    gpt2-1.3b)
        GEMM_ARGS="--hidden 2048 --ffn 8192 --layers 24 --vocab 50304 --kv 2048"
        shape gpt2-1.3b 1024 50304 "--layers 24 --hidden 2048 --heads 16" -- \
            --num-layers 24 --hidden-size 2048 --num-attention-heads 16 ;;
    gpt2-350m)
        GEMM_ARGS="--hidden 1024 --ffn 4096 --layers 24 --vocab 50304 --kv 1024"
        shape gpt2-350m 1024 50304 "--layers 24 --hidden 1024 --heads 16" -- \
            --num-layers 24 --hidden-size 1024 --num-attention-heads 16 ;;
    *)
        echo "$1: no such shape (MDS_BENCH_GPU_SHAPES)" >>"$T/notes" ;;
    esac
}

main() {
    commit=${MDS_BENCH_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo ?)}
    [ -n "${MDS_BENCH_COMMIT:-}" ] || git diff --quiet HEAD 2>/dev/null || commit="$commit+changes"
    echo "== bench-gpu: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $commit," \
         "budget $((END - START)) s$( [ "$DRY" = 1 ] && echo ', DRY RUN on the CPU backend (not a GPU figure)')"
    HAVE_TORCH=0
    if "$PY" -c 'import torch' 2>/dev/null; then HAVE_TORCH=1; fi
    GEMM_ARGS='' FPT124='' TORCH_VER=''
    : >"$T/rows"; : >"$T/notes"; : >"$T/llmc"
    if [ "$DRY" = 1 ]; then ALL="gpt-tiny llama-tiny"; else ALL="gpt2-124m llama-1b gpt2-1.3b gpt2-350m"; fi
    LLMC_DONE=0
    for n in ${MDS_BENCH_GPU_SHAPES:-$ALL}; do run_shape "$n"; done
    for n in $ALL; do
        case " ${MDS_BENCH_GPU_SHAPES:-$ALL} " in *" $n "*) ;; *) echo "$n: not in MDS_BENCH_GPU_SHAPES" >>"$T/notes" ;; esac
    done
    [ "$LLMC_DONE" = 1 ] || llmc >"$T/llmc" 2>&1
    echo
    echo "== 1. training on one $DEV device, bf16, --mock-data: mdstrain | PyTorch ${TORCH_VER:-(not run)} --fast, same model and micro-batch"
    echo "   (where torch runs out of memory at mdstrain's micro-batch, at its own, named; mds/torch: tokens/s over tokens/s)"
    echo "   (TFLOP/s and MFU from mdstrain's FLOPs per token for both; MFU against $PEAK_TFLOPS TFLOP/s; peak = MiB allocated at most)"
    printf '  %-10s %4s %5s | %9s %9s %7s %6s %9s | %9s %9s %7s %6s %9s | %s\n' model mb seq ms/iter tokens/s TFLOP/s MFU \
        peakMiB ms/iter tokens/s TFLOP/s MFU peakMiB "mds/torch"
    awk -v peak="$PEAK_TFLOPS" '
        function rate(mb, ms) { return mb * $3 * 1000 / ms }
        { tok = rate($2, $5); tf = $4 * tok / 1e12
          printf "  %-10s %4d %5d | %9.1f %9.0f %7.2f %5.1f%% %9s |", $1, $2, $3, $5, tok, tf, 100 * tf / peak, $6
          if ($8 == "?") printf " %9s %9s %7s %6s %9s | -\n", "-", "-", "-", "-", "-"
          else { ttok = rate($12, $8); ttf = $4 * ttok / 1e12
                 printf " %9.1f %9.0f %7.2f %5.1f%% %9s | %.2fx%s\n", $8, ttok, ttf, 100 * ttf / peak, $9, tok / ttok,
                        ($12 == $2) ? "" : " (torch at micro-batch " $12 ")" } }' "$T/rows"
    awk '{ b = $13; for (i = 14; i <= NF; i++) b = b " " $i
           printf "  %-10s micro-batch %d: memory allows %d, bound: %s\n", $1, $2, $7, b }' "$T/rows"
    [ "$HAVE_TORCH" = 1 ] || echo "  torch: 'import torch' fails for $PY (set MDS_TORCH_PYTHON); skipped"
    echo
    echo "== 2. the matmuls of one step (the linears: forward, input and weight gradients) alone, against the step"
    if awk '$10 != "?" { found = 1 } END { exit !found }' "$T/rows"; then
        printf '  %-10s | %13s | %9s %6s | %9s %6s | %11s\n' model "cuBLASLt bf16" "mds ms" share "torch ms" share "cuBLAS fp32"
        awk '$10 != "?" {
            printf "  %-10s | %10.1f ms | %9.1f %5.0f%% |", $1, $10, $5, 100 * $10 / $5
            if ($8 == "?" || $12 != $2) printf " %9s %6s |", "-", "-"
            else printf " %9.1f %5.0f%% |", $8, 100 * $10 / $8
            printf " %8.1f ms\n", $11 }' "$T/rows"
        echo "  (bf16: the products of a --bf16 step on the tensor cores, what mdstrain's CUDA backend and autocast"
        echo "   both run, and their share of each step; fp32: the same products pedantic, what an fp32 run issues)"
        for f in "$T"/*.gemm; do
            [ -f "$f" ] || continue
            awk -v n="$(basename "$f" .gemm)" '/^per_step/ && $9 != "" {
                printf "  %-10s mds16 (bf16 operands, fp32 out, as matmul.cu issues it) %.1f ms; fast (fp32 operands, COMPUTE_32F_FAST_16BF) %.1f ms\n", n, $9, $11 }' "$f"
        done
    else echo "  skipped (no GPU run of bench/gemm_gpu)"; fi
    echo
    echo "== 3. llm.c train_gpt2cu (GPT-2 124M, seq 1024, random tokens) on the same device, beside mdstrain's 124M above"
    sed 's/^/  /' "$T/llmc"
    echo
    echo "== 4. host-staged ranks on one $DEV device (issue 16): 2 ranks over TCP against 1"
    if [ "${MDS_BENCH_GPU_STAGED:-1}" = 0 ]; then echo "  skipped (MDS_BENCH_GPU_STAGED=0)"; else staged; fi
    if [ -s "$T/notes" ]; then echo; echo "== notes"; sed 's/^/  /' "$T/notes"; fi
    echo
    echo "== bench-gpu: $(( $(date +%s) - START )) s"
}

if [ "$DRY" != 1 ]; then
    "$M" --device cuda --mock-data --tokenizer-type NullTokenizer --vocab-size 127 --num-layers 1 --hidden-size 32 \
        --num-attention-heads 4 --seq-length 16 --max-position-embeddings 16 --micro-batch-size 1 \
        --global-batch-size 1 --train-iters 1 --lr 1e-4 -q >"$T/gpu.out" 2>"$T/gpu.err"
    if [ $? -ne 0 ]; then
        echo "bench-gpu: no GPU to run on ($(head -n 1 "$T/gpu.err"))" >&2
        exit 1
    fi
fi
main 2>&1 | tee "$REPORT"
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then cp "$REPORT" "$OUT/bench-gpu.txt"; fi
