#!/bin/sh
# tokenizers.sh - `make bench`, tokenizers part: one-thread encoding speed of
# every tokenizer kind mdsprep reads besides GPT-2, each against the library
# Megatron's wrapper calls, measured in the same run on the same texts.
#
#   mds        bench_tokenize FILE TYPE MODEL 3: tok_encode on every text
#              (texts in memory, JSON parsing not timed), best of 3, a fresh
#              encoder state (empty caches) for each run;
#   reference  bench/tok_reference.py: HuggingFace `tokenizers` encode_batch
#              with RAYON_NUM_THREADS=1, sentencepiece's encode with
#              num_threads=1; best of 3, same texts.
# The two alternate ROUNDS times (default 3) and each column is its best
# round: on a loaded machine both columns see the same load.
# Both print an FNV-1a checksum of all ids; the line says whether they agree.
#
# The tokenizers are the test ones in tests/data/tokenizers (README there).
# Corpus: shared/data/corpus/dev.jsonl.xz when ../shared is present, else the
# bundled examples/sample.jsonl.xz.  The reference libraries are installed
# from PyPI into $BUILD/bench-venv on first use (pinned to the versions the
# goldens were made with); without network the reference columns are skipped.
#
# GPT-2 through the tokenizer interface, before and after: set BASE to the
# build directory of an earlier checkout (say, the commit before the
# interface) and the GPT-2 rows run both builds' bench_tokenize (its direct
# scan+bpe loop, and in newer builds the same through tok_encode) and mdsprep
# (which goes through the interface in newer builds) alternately.  Not a
# test: it asserts nothing.
BUILD=${BUILD:-build}
S=${MDS_SHARED:-../shared}
XZ=$S/data/corpus/dev.jsonl.xz
[ -f "$XZ" ] || XZ=examples/sample.jsonl.xz
TD=tests/data/tokenizers
ROUNDS=${ROUNDS:-3}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
xz -dc "$XZ" > "$T/corpus.jsonl" || exit 1
BYTES=$(wc -c < "$T/corpus.jsonl")
echo "== tokenizers, one thread: $XZ ($(wc -l < "$T/corpus.jsonl") documents); $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"

VENV=$BUILD/bench-venv
PKGS="tokenizers==0.22.2 transformers==4.57.6 sentencepiece==0.2.3"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import tokenizers, transformers, sentencepiece' 2>/dev/null; then
    (python3 -m venv "$VENV" && "$VENV/bin/pip" install -q $PKGS) >/dev/null 2>&1
fi
REF=0
"$VENV/bin/python" -c 'import tokenizers, transformers, sentencepiece' 2>/dev/null && REF=1
[ $REF = 1 ] || echo "   reference libraries not available (no python3-venv or no PyPI): mds figures only"

ratio() { echo "$1 $2" | awk '{printf "%.2f", $1 / $2}'; }
field() { awk -v k="$2" '{for (i = 2; i <= NF; i++) if ($i == k) print $(i-1)}' "$1" | head -1; }

printf '   %-34s %10s %12s   %10s %12s   %6s  %s\n' tokenizer "mds MB/s" "tokens/s" "ref MB/s" "tokens/s" ratio ids
for spec in "HuggingFaceTokenizer hf-llama3" "HuggingFaceTokenizer hf-qwen" "HuggingFaceTokenizer hf-neox" \
            "HuggingFaceTokenizer hf-tekken" "Llama2Tokenizer sp-bpe.model" "Llama2Tokenizer sp-unigram.model"; do
    set -- $spec
    # mds and the library alternate ROUNDS times (each run itself best of 3)
    # and each keeps its best round, so a burst of load on a shared machine
    # hits both columns alike instead of one.
    OM=0; OT=-; RM=0; RT=-; R=-; SAME=-; ok=1; refok=$REF
    for round in $(seq "$ROUNDS"); do
        "$BUILD/bench_tokenize" "$T/corpus.jsonl" "$1" "$TD/$2" 3 > "$T/ours.txt" 2>&1 || { cat "$T/ours.txt"; ok=0; break; }
        m=$(field "$T/ours.txt" MB/s)
        if [ "$(echo "$m $OM" | awk '{print ($1 > $2)}')" = 1 ]; then OM=$m; OT=$(field "$T/ours.txt" tokens/s); fi
        [ $refok = 1 ] || continue
        if "$VENV/bin/python" bench/tok_reference.py "$T/corpus.jsonl" "$1" "$TD/$2" 3 > "$T/ref.txt" 2>"$T/ref.err"; then
            m=$(field "$T/ref.txt" MB/s,)
            if [ "$(echo "$m $RM" | awk '{print ($1 > $2)}')" = 1 ]; then RM=$m; RT=$(field "$T/ref.txt" tokens/s); fi
            a=$(awk '/checksum/{print $NF}' "$T/ours.txt"); b=$(awk '/checksum/{print $NF}' "$T/ref.txt")
            [ "$a" = "$b" ] && [ "$SAME" != DIFFERENT ] && SAME=same || SAME=DIFFERENT
        else
            refok=0
        fi
    done
    [ $ok = 1 ] || continue
    if [ "$RM" = 0 ]; then RM=-; else R="$(ratio "$OM" "$RM")x"; fi
    printf '   %-34s %10s %12s   %10s %12s   %6s  %s\n' "$1 $2" "$OM" "$OT" "$RM" "$RT" "$R" "$SAME"
done
echo "   (target: ratio >= 5x for each kind)"

if [ -n "$BASE" ]; then
    echo "== GPT-2 through the interface: $BASE (before) and $BUILD (after), alternating"
    VOC="vocab/gpt2-vocab.json"; MER="vocab/gpt2-merges.txt"
    for run in 1 2 3; do
        for b in "$BASE" "$BUILD"; do
            "$b/bench_tokenize" "$T/corpus.jsonl" $VOC $MER 3 |
                awk -v b="$b" '/tokenize scan\+bpe|tokenize tok_encode/{r = r "  " $2 " " $3 " MB/s"} END {print "   " b ":" r}'
        done
    done
    prep() {   # wall seconds of one mdsprep --workers 1 run of build $1
        s=$(date +%s.%N); "$1/mdsprep" -q --input "$T/corpus.jsonl" --output-prefix "$T/o" --append-eod --workers 1 >/dev/null 2>&1
        e=$(date +%s.%N); echo "$s $e" | awk '{print $2 - $1}'
    }
    B0=""; B1=""
    for i in 1 2 3 4 5; do
        t=$(prep "$BASE"); B0=$(echo "$t $B0" | awk '{print ($2 == "" || $1 < $2) ? $1 : $2}')
        t=$(prep "$BUILD"); B1=$(echo "$t $B1" | awk '{print ($2 == "" || $1 < $2) ? $1 : $2}')
    done
    echo "   mdsprep --workers 1 (GPT-2), best of 5 alternating: before $B0 s, after $B1 s, after/before $(ratio "$B1" "$B0")"
fi
