#!/bin/sh
# test_errors.sh - bad input gives one line "mdsprep: FILE:LINE: cause" and
# exit 1, leaves no output behind; --skip-invalid counts and goes on; bad
# usage exits 2.
. tests/cli/lib.sh
C=tests/data/corpus
good='{"text": "Hello world"}'

bad_line() {   # NAME LINE-CONTENT REGEX
    printf '%s\n%s\n%s\n' "$good" "$2" "$good" > "$T/bad.jsonl"
    run_expect "$1" 1 "^mdsprep: $T/bad.jsonl:2: $3" $MDSPREP --input "$T/bad.jsonl" --output-prefix "$T/res"
    check "$1: no output left" [ -z "$(ls "$T" | grep '^res')" ]
}
bad_line "invalid json" '{"text": "a",}' "invalid JSON"
bad_line "missing key" '{"title": "a"}' "missing key 'text'"
bad_line "number value" '{"text": 12}' "key 'text' is not a string"
bad_line "list of numbers" '{"text": ["a", 1]}' "key 'text' is not a string"
bad_line "lone surrogate" '{"text": "a\ud800b"}' "lone surrogate"
bad_line "not an object" '["text"]' "top-level value is not an object"
printf '%s\n{"text": "\377"}\n' "$good" > "$T/bad.jsonl"
run_expect "invalid utf-8" 1 "^mdsprep: $T/bad.jsonl:2: invalid UTF-8" $MDSPREP --input "$T/bad.jsonl" --output-prefix "$T/res"
printf '%s\n{"text": "a\tb"}\n' "$good" > "$T/bad.jsonl"
run_expect "raw control character" 1 "^mdsprep: $T/bad.jsonl:2: " $MDSPREP --input "$T/bad.jsonl" --output-prefix "$T/res"

# the error names the first bad line in file order, with several workers too
cat $C/tiny.jsonl > "$T/late.jsonl"; echo '{"text": 1}' >> "$T/late.jsonl"; cat $C/tiny.jsonl >> "$T/late.jsonl"
echo 'oops' >> "$T/late.jsonl"
run_expect "first bad line, 2 workers" 1 "^mdsprep: $T/late.jsonl:211: key 'text' is not a string" \
    $MDSPREP --workers 2 --input "$T/late.jsonl" --output-prefix "$T/res"

# --skip-invalid: counted, reported, exit 0, and the output equals the clean input's
{ echo "$good"; echo '{"text": 1}'; echo '{"text": "a"'; echo '{"text": "\ud800"}'; echo "$good"; } > "$T/mixed.jsonl"
{ echo "$good"; echo "$good"; } > "$T/clean.jsonl"
run_expect "skip-invalid exit 0" 0 "3 skipped" $MDSPREP --skip-invalid --input "$T/mixed.jsonl" --output-prefix "$T/skip"
$MDSPREP -q --input "$T/clean.jsonl" --output-prefix "$T/clean"
same "$T/skip_text_document" "$T/clean_text_document" "skip-invalid output equals clean input"
run_expect "skip-invalid -v names lines" 0 "mixed.jsonl:3: skipped: invalid JSON" \
    $MDSPREP -v --skip-invalid --input "$T/mixed.jsonl" --output-prefix "$T/skip"

# truncated and corrupt compressed inputs
head -c 200000 $C/tiny.jsonl > "$T/part.jsonl"
for z in xz zstd gzip; do
    case $z in xz) lib=lzma name=liblzma ;; zstd) lib=zstd name=libzstd ;; gzip) lib=zlib name=zlib ;; esac
    if ! have $lib; then
        for n in "truncated $z" "truncated $z: no output left" "truncated $z with --skip-invalid"; do
            skip "$n" "$name not built in"
        done
        continue
    fi
    $z -c < $C/tiny.jsonl > "$T/t.$z"
    size=$(wc -c < "$T/t.$z")
    head -c $((size / 2)) "$T/t.$z" > "$T/trunc.$z"
    run_expect "truncated $z" 1 "^mdsprep: $T/trunc.$z:[0-9]+: .*(truncat|unexpected end|corrupt)" \
        $MDSPREP --input "$T/trunc.$z" --output-prefix "$T/res"
    check "truncated $z: no output left" [ -z "$(ls "$T" | grep '^res')" ]
    run_expect "truncated $z with --skip-invalid" 0 "rest of this input is skipped" \
        $MDSPREP --skip-invalid --input "$T/trunc.$z" --output-prefix "$T/skipz"
done

# a truncated stream: the lines before the damage are kept (like zcat), the
# error names the line it cut, and the cause is the truncation, not the half line
if have zlib; then
    gzip -c < $C/tiny.jsonl > "$T/t.gz"
    head -c $(($(wc -c < "$T/t.gz") * 2 / 3)) "$T/t.gz" > "$T/cut.gz"
    whole=$(zcat "$T/cut.gz" 2>/dev/null | wc -l)
    run_expect "truncated gzip names the cut line" 1 "^mdsprep: $T/cut.gz:$((whole + 1)): truncated gzip stream" \
        $MDSPREP --input "$T/cut.gz" --output-prefix "$T/res"
    $MDSPREP -q --skip-invalid --input "$T/cut.gz" --output-prefix "$T/cut"
    zcat "$T/cut.gz" 2>/dev/null | head -n "$whole" > "$T/whole.jsonl"
    $MDSPREP -q --input "$T/whole.jsonl" --output-prefix "$T/whole"
    same "$T/cut_text_document" "$T/whole_text_document" "--skip-invalid keeps every complete line before the damage"
else
    skip "truncated gzip names the cut line" "zlib not built in"
    skip "--skip-invalid keeps every complete line before the damage" "zlib not built in"
fi

# a slow pipe: the first bad line is reported at once, not when the pipe closes
(printf '{bad\n'; sleep 3) | { s=$(date +%s.%N); $MDSPREP --input - --output-prefix "$T/slow" 2>/dev/null
    e=$(date +%s.%N); echo "$s $e" | awk '{print $2 - $1}' > "$T/slow.t"; }
check "error on a slow pipe reported before it closes ($(cat "$T/slow.t") s)" awk '{exit !($1 < 2)}' "$T/slow.t"

# missing input file, unwritable output
run_expect "missing input" 1 "cannot open '$T/nope.jsonl'" $MDSPREP --input "$T/nope.jsonl" --output-prefix "$T/res"
run_expect "unwritable output" 1 "" $MDSPREP --input $C/tiny.jsonl --output-prefix "$T/no/such/dir/out"

# bad usage: exit 2 with a hint
run_expect "no arguments" 2 "missing --input" $MDSPREP
run_expect "unknown flag" 2 "unknown option '--frobnicate'" $MDSPREP --input x --output-prefix y --frobnicate
run_expect "split-sentences refused" 2 "option '--split-sentences' is not supported" \
    $MDSPREP --input $C/tiny.jsonl --output-prefix "$T/o" --split-sentences
run_expect "other tokenizer refused" 2 "tokenizer type 'BertWordPieceCase' is not supported" \
    $MDSPREP --input $C/tiny.jsonl --output-prefix "$T/o" --tokenizer-type BertWordPieceCase
run_expect "tokenizer-model required" 2 "HuggingFaceTokenizer needs --tokenizer-model" \
    $MDSPREP --input $C/tiny.jsonl --output-prefix "$T/o" --tokenizer-type HuggingFaceTokenizer
run_expect "lazy dataset-impl refused" 2 "dataset implementation 'lazy'" \
    $MDSPREP --input $C/tiny.jsonl --output-prefix "$T/o" --dataset-impl lazy
run_expect "bad number" 2 "'--workers' needs an integer" $MDSPREP --input $C/tiny.jsonl --output-prefix "$T/o" --workers 0x
run_expect "help" 0 "" $MDSPREP --help
check "help lists --append-eod" grep -q -- '--append-eod' "$T/out"
finish
