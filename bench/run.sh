#!/bin/sh
# run.sh - `make bench`: speed figures for mdsprep, each with a baseline
# measured in the same run on the same machine.
#
# Corpus: shared/data/corpus/dev.jsonl.xz (38 MB, 14,421 documents, single-block
# xz) when ../shared is present, else the bundled examples/sample.jsonl.xz.
# Times are the best of 3 runs.  tiktoken (the peer tokenizer) is installed into
# build/bench-venv from PyPI on first use; without network it is skipped.
BUILD=${BUILD:-build}
S=${MDS_SHARED:-../shared}
XZ=$S/data/corpus/dev.jsonl.xz
[ -f "$XZ" ] || XZ=examples/sample.jsonl.xz
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
VOC="vocab/gpt2-vocab.json"; MER="vocab/gpt2-merges.txt"

best3() {   # prints the best wall time of 3 runs of CMD, in seconds
    best=""
    for i in 1 2 3; do
        s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N)
        best=$(echo "$s $e $best" | awk '{t = $2 - $1; if ($3 == "" || t < $3) print t; else print $3}')
    done
    echo "$best"
}
ratio() { echo "$1 $2" | awk '{printf "%.2f", $1 / $2}'; }
mbs() { echo "$1 $2" | awk '{printf "%.1f", $1 / 1e6 / $2}'; }

xz -dc "$XZ" > "$T/corpus.jsonl"
BYTES=$(wc -c < "$T/corpus.jsonl")
echo "== corpus: $XZ ($(wc -l < "$T/corpus.jsonl") lines, $BYTES bytes of JSON; $(xz -l "$XZ" | awk 'NR==2{print $2}') xz block(s)); $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"

echo "== 1. tokenizer, one thread (bench_tokenize: texts in memory, JSON not timed)"
"$BUILD/bench_tokenize" "$T/corpus.jsonl" $VOC $MER 3 | tee "$T/tok.txt"
OURS=$(awk '/tokenize scan\+bpe/{print $3}' "$T/tok.txt")
VENV=$BUILD/bench-venv
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import tiktoken' 2>/dev/null; then
    (python3 -m venv "$VENV" && "$VENV/bin/pip" install -q tiktoken) >/dev/null 2>&1
fi
if "$VENV/bin/python" -c 'import tiktoken' 2>/dev/null; then
    "$VENV/bin/python" bench/tiktoken_bench.py "$T/corpus.jsonl" $VOC $MER 3 | tee "$T/tt.txt"
    TT=$(awk '{for (i = 1; i < NF; i++) if ($(i+1) == "MB/s") print $i}' "$T/tt.txt")
    echo "   mds / tiktoken = $(ratio "$OURS" "$TT")x   (target >= 6x)"
    a=$(awk '/checksum/{print $NF}' "$T/tok.txt"); b=$(awk '/checksum/{print $NF}' "$T/tt.txt")
    [ "$a" = "$b" ] && echo "   token ids identical to tiktoken's" || echo "   WARNING: token ids differ from tiktoken's"
else
    echo "   tiktoken: not available (no python3-venv or no PyPI); skipped"
fi

echo "== 2. mdsprep on the .xz vs the decompression floor"
TXZ=$(best3 xz -dc "$XZ")
TP2=$(best3 "$BUILD/mdsprep" -q --input "$XZ" --output-prefix "$T/o" --append-eod --workers 2)
echo "   xz -dc alone            $TXZ s"
echo "   mdsprep --workers 2     $TP2 s   ratio $(ratio "$TP2" "$TXZ")x of xz -dc   (target <= 1.15x)"

echo "== 3. scaling on the decompressed file"
T1=$(best3 "$BUILD/mdsprep" -q --input "$T/corpus.jsonl" --output-prefix "$T/o" --append-eod --workers 1)
T2=$(best3 "$BUILD/mdsprep" -q --input "$T/corpus.jsonl" --output-prefix "$T/o" --append-eod --workers 2)
echo "   --workers 1             $T1 s   $(mbs "$BYTES" "$T1") MB/s of JSON"
echo "   --workers 2             $T2 s   $(mbs "$BYTES" "$T2") MB/s of JSON   speed-up $(ratio "$T1" "$T2")x   (target >= 1.8x)"

echo "== 4. peak memory (RSS) against corpus size"
if [ -x /usr/bin/time ]; then
    for k in 1 4; do
        args=""; for i in $(seq $k); do args="$args --input $T/corpus.jsonl"; done
        /usr/bin/time -f "%M" -o "$T/rss" "$BUILD/mdsprep" -q $args --output-prefix "$T/o" --append-eod --workers 2
        echo "   ${k}x corpus ($((BYTES * k / 1000000)) MB): peak RSS $(($(cat "$T/rss") / 1024)) MiB"
    done
else
    echo "   /usr/bin/time not installed; skipped"
fi
