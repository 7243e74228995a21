#!/bin/sh
# run.sh - `make bench`: speed figures for mdsprep, each with a baseline
# measured in the same run on the same machine.
#
# Corpus: shared/data/corpus/dev.jsonl.xz (38 MB, 14,421 documents, single-block
# xz) when ../shared is present, else the bundled examples/sample.jsonl.xz.
# Each ratio's two sides alternate and each keeps its best: the tokenizer
# and tiktoken for ROUNDS rounds (default 3), the commands of sections 2 and
# 3 five times.  tiktoken (the peer tokenizer) is installed into
# build/bench-venv from PyPI on first use; without network it is skipped.
BUILD=${BUILD:-build}
S=${MDS_SHARED:-../shared}
XZ=$S/data/corpus/dev.jsonl.xz
[ -f "$XZ" ] || XZ=examples/sample.jsonl.xz
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
VOC="vocab/gpt2-vocab.json"; MER="vocab/gpt2-merges.txt"

wall() {    # prints the wall time of one run of CMD, in seconds
    s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N)
    echo "$s $e" | awk '{print $2 - $1}'
}
min() { echo "$1 $2" | awk '{print ($2 == "" || $1 < $2) ? $1 : $2}'; }
# best_pair "CMD A" "CMD B": runs A and B one after the other 5 times and
# sets BA and BB to the best wall time of each, so that a burst of load on a
# shared machine hits the two figures of a ratio alike.
best_pair() {
    BA=""; BB=""
    for i in 1 2 3 4 5; do
        BA=$(min "$(wall sh -c "$1")" "$BA")
        BB=$(min "$(wall sh -c "$2")" "$BB")
    done
}
ratio() { echo "$1 $2" | awk '{printf "%.2f", $1 / $2}'; }
mbs() { echo "$1 $2" | awk '{printf "%.1f", $1 / 1e6 / $2}'; }

xz -dc "$XZ" > "$T/corpus.jsonl"
BYTES=$(wc -c < "$T/corpus.jsonl")
echo "== corpus: $XZ ($(wc -l < "$T/corpus.jsonl") lines, $BYTES bytes of JSON; $(xz -l "$XZ" | awk 'NR==2{print $2}') xz block(s)); $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"

echo "== 1. tokenizer, one thread (bench_tokenize: texts in memory, JSON not timed)"
# mds and tiktoken alternate ROUNDS times (each run itself best of 3) and
# each keeps its best round, so a burst of load on a shared machine hits
# both columns alike (the same binary has been seen to move by half
# between rounds on a loaded VM).
VENV=$BUILD/bench-venv
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import tiktoken' 2>/dev/null; then
    (python3 -m venv "$VENV" && "$VENV/bin/pip" install -q tiktoken) >/dev/null 2>&1
fi
TTOK=0; "$VENV/bin/python" -c 'import tiktoken' 2>/dev/null && TTOK=1
OURS=0; TT=0
for round in $(seq "${ROUNDS:-3}"); do
    "$BUILD/bench_tokenize" "$T/corpus.jsonl" $VOC $MER 3 > "$T/tok1.txt" || exit 1
    m=$(awk '/tokenize scan\+bpe/{print $3}' "$T/tok1.txt")
    if [ "$(echo "$m $OURS" | awk '{print ($1 > $2)}')" = 1 ]; then OURS=$m; cp "$T/tok1.txt" "$T/tok.txt"; fi
    [ $TTOK = 1 ] || continue
    "$VENV/bin/python" bench/tiktoken_bench.py "$T/corpus.jsonl" $VOC $MER 3 > "$T/tt1.txt" || { TTOK=0; continue; }
    m=$(awk '{for (i = 1; i < NF; i++) if ($(i+1) == "MB/s") print $i}' "$T/tt1.txt")
    if [ "$(echo "$m $TT" | awk '{print ($1 > $2)}')" = 1 ]; then TT=$m; cp "$T/tt1.txt" "$T/tt.txt"; fi
done
cat "$T/tok.txt"
echo "   (best of ${ROUNDS:-3} rounds, alternating with tiktoken)"
if [ $TTOK = 1 ]; then
    cat "$T/tt.txt"
    echo "   mds / tiktoken = $(ratio "$OURS" "$TT")x   (target >= 6x)"
    a=$(awk '/checksum/{print $NF}' "$T/tok.txt"); b=$(awk '/checksum/{print $NF}' "$T/tt.txt")
    [ "$a" = "$b" ] && echo "   token ids identical to tiktoken's" || echo "   WARNING: token ids differ from tiktoken's"
else
    echo "   tiktoken: not available (no python3-venv or no PyPI); skipped"
fi

echo "== 2. mdsprep on the .xz vs the decompression floor"
best_pair "xz -dc '$XZ'" "'$BUILD/mdsprep' -q --input '$XZ' --output-prefix '$T/o' --append-eod --workers 2"
TXZ=$BA; TP2=$BB
echo "   xz -dc alone            $TXZ s"
echo "   mdsprep --workers 2     $TP2 s   ratio $(ratio "$TP2" "$TXZ")x of xz -dc   (target <= 1.15x)"

echo "== 3. scaling on the decompressed file"
best_pair "'$BUILD/mdsprep' -q --input '$T/corpus.jsonl' --output-prefix '$T/o' --append-eod --workers 1" \
          "'$BUILD/mdsprep' -q --input '$T/corpus.jsonl' --output-prefix '$T/o' --append-eod --workers 2"
T1=$BA; T2=$BB
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
