#!/bin/sh
# test_longpiece.sh - no quadratic blow-up: a 3 MB single piece (one run of
# letters, so one BPE word) and edge.jsonl's 3 MB document tokenize in a few
# seconds at most (quadratic BPE takes minutes), and a 3 MB piece round-trips
# through the pipeline with the expected token count bounds.  The limits are
# generous so the test holds under sanitizers; make bench has the real figures.
. tests/cli/lib.sh
elapsed() { s=$(date +%s.%N); "$@" >/dev/null 2>&1; rc=$?; e=$(date +%s.%N); echo "$s $e" | awk '{printf "%.2f", $2 - $1}'; return $rc; }
lt() { echo "$1 $2" | awk '{exit !($1 < $2)}'; }

awk 'BEGIN { srand(7); printf "{\"text\": \""; for (i = 0; i < 3000000; i++) printf "%c", 97 + int(rand() * 26); printf "\"}\n" }' > "$T/piece.jsonl"
t=$(elapsed $MDSPREP -q --input "$T/piece.jsonl" --output-prefix "$T/piece" --workers 1)
check "3 MB single piece in $t s (< 10)" lt "$t" 10
n=$(($(wc -c < "$T/piece_text_document.bin") / 2))
check "3 MB single piece gives $n tokens (between 300k and 3M)" [ "$n" -gt 300000 -a "$n" -lt 3000000 ]
printf '{"text": "' > "$T/a.jsonl"; head -c 3000000 /dev/zero | tr '\0' 'a' >> "$T/a.jsonl"; printf '"}\n' >> "$T/a.jsonl"
t=$(elapsed $MDSPREP -q --input "$T/a.jsonl" --output-prefix "$T/a" --workers 1)
check "3 MB of one letter in $t s (< 10)" lt "$t" 10
sed -n 33p tests/data/corpus/edge.jsonl > "$T/l33.jsonl"
t=$(elapsed $MDSPREP -q --input "$T/l33.jsonl" --output-prefix "$T/l33" --workers 1)
check "edge.jsonl line 33 (3.1 MB document) in $t s (< 5)" lt "$t" 5
finish
