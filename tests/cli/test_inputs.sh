#!/bin/sh
# test_inputs.sh - every input route gives the same bytes: plain, .xz (single
# and multi-block), .zst, .gz, stdin, several --input, a glob, CRLF and lone-CR
# line ends, blank lines, no final newline, --partitions, flag abbreviations.
# A compressed format whose library the build lacks is skipped, and checked
# to be refused with the library's name instead.
. tests/cli/lib.sh
C=tests/data/corpus
G=tests/data/golden/tiny_text_document
run() { $MDSPREP -q --append-eod "$@"; }

xz -c < $C/tiny.jsonl > "$T/tiny.jsonl.xz"
xz -T2 --block-size=65536 -c < $C/tiny.jsonl > "$T/multi.xz"
zstd -q -c < $C/tiny.jsonl > "$T/tiny.jsonl.zst"
gzip -c < $C/tiny.jsonl > "$T/tiny.jsonl.gz"
cp "$T/tiny.jsonl.zst" "$T/misnamed.jsonl"     # detected by content, not name
for f in tiny.jsonl.xz multi.xz tiny.jsonl.zst tiny.jsonl.gz misnamed.jsonl; do
    case $f in
        *.xz) lib=lzma format=xz name=liblzma ;;
        *.gz) lib=zlib format=gzip name=zlib ;;
        *) lib=zstd format=zstd name=libzstd ;;
    esac
    if ! have $lib; then
        skip "input $f" "$name not built in"
        run_expect "input $f without $name says so" 1 "'$T/$f': $format-compressed input, but this build has no $name \\(install " \
            $MDSPREP --input "$T/$f" --output-prefix "$T/o"
        continue
    fi
    for w in 1 2; do
        run --workers $w --input "$T/$f" --output-prefix "$T/o"
        same "$T/o_text_document" $G "input $f workers=$w"
    done
done
run --input - --output-prefix "$T/stdin" < $C/tiny.jsonl
same "$T/stdin_text_document" $G "stdin"
if have lzma; then
    xz -c < $C/tiny.jsonl | run --input - --output-prefix "$T/stdinxz"
    same "$T/stdinxz_text_document" $G "compressed stdin"
else
    skip "compressed stdin" "liblzma not built in"
fi

# several inputs = their concatenation
head -n 100 $C/tiny.jsonl > "$T/a.jsonl"; tail -n +101 $C/tiny.jsonl | gzip -c > "$T/b.jsonl.gz"
if have zlib; then
    run --input "$T/a.jsonl" --input "$T/b.jsonl.gz" --output-prefix "$T/two"
    same "$T/two_text_document" $G "two inputs"
else
    skip "two inputs" "zlib not built in"
fi
mkdir "$T/g"; head -n 100 $C/tiny.jsonl > "$T/g/part-0.jsonl"; tail -n +101 $C/tiny.jsonl > "$T/g/part-1.jsonl"
run --input "$T/g/part-*.jsonl" --partitions 2 --output-prefix "$T/glob"
same "$T/glob_text_document" $G "glob input with --partitions 2"

# line ends: CRLF, lone CR (Python universal newlines), blank lines, no final newline
sed 's/$/\r/' $C/tiny.jsonl > "$T/crlf.jsonl"
run --input "$T/crlf.jsonl" --output-prefix "$T/crlf"
same "$T/crlf_text_document" $G "CRLF line ends"
tr '\n' '\r' < $C/tiny.jsonl > "$T/cr.jsonl"
run --input "$T/cr.jsonl" --output-prefix "$T/cr"
same "$T/cr_text_document" $G "lone CR line ends"
awk '{print; if (NR % 7 == 0) print ""; if (NR % 11 == 0) print "   "}' $C/tiny.jsonl > "$T/blank.jsonl"
run_expect "blank lines counted" 0 " 49 blank lines" $MDSPREP --append-eod --input "$T/blank.jsonl" --output-prefix "$T/blank"
same "$T/blank_text_document" $G "blank lines skipped"
head -c -1 $C/tiny.jsonl > "$T/nofinal.jsonl"
run --input "$T/nofinal.jsonl" --output-prefix "$T/nofinal"
same "$T/nofinal_text_document" $G "no final newline"

# argparse-style spellings
$MDSPREP -q --input=$C/tiny.jsonl --output-pre "$T/abbr" --append --workers=2 --keep-sequential-samples --log-interval 50
same "$T/abbr_text_document" $G "--flag=value and unique prefixes"

# --json-keys as argparse: a repeated flag replaces the list; -qq and -j2 spellings
$MDSPREP -qq -j2 --append-eod --input $C/tiny-keys.jsonl --json-keys text --json-keys title --output-prefix "$T/jk"
check "repeated --json-keys keeps the last" [ -f "$T/jk_title_document.idx" -a ! -f "$T/jk_text_document.idx" ]
same "$T/jk_title_document" tests/data/golden/tiny-keys_title_document "title key alone"

# nohup: an ignored SIGHUP stays ignored
nohup $MDSPREP -q --input $C/edge.jsonl --input $C/edge.jsonl --input $C/edge.jsonl --output-prefix "$T/nh" >/dev/null 2>&1 &
pid=$!
sleep 0.1; kill -HUP $pid 2>/dev/null
wait $pid
check "SIGHUP ignored under nohup" [ $? -eq 0 -a -f "$T/nh_text_document.idx" ]

# empty input: a valid empty dataset
: > "$T/empty.jsonl"
run --input "$T/empty.jsonl" --output-prefix "$T/empty"
check "empty input gives a 34+8-byte idx" [ "$(wc -c < "$T/empty_text_document.idx")" -eq 42 ]
check "empty input gives an empty bin" [ "$(wc -c < "$T/empty_text_document.bin")" -eq 0 ]

# Megatron's progress line format
$MDSPREP --input $C/tiny.jsonl --output-prefix "$T/log" --log-interval 100 2> "$T/log.err"
check "progress lines" [ "$(grep -Ec '^Processed (100|200) documents \([0-9.e+-]+ docs/s, [0-9.e+-]+ MB/s\)\.$' "$T/log.err")" -eq 2 ]

# --special-tokens maps a literal <|endoftext|> to 50256
echo '{"text": "a<|endoftext|>b"}' > "$T/sp.jsonl"
$MDSPREP -q --special-tokens --input "$T/sp.jsonl" --output-prefix "$T/sp"
check "special tokens" [ "$(od -An -tu2 -w100 "$T/sp_text_document.bin" | tr -s ' ')" = " 64 50256 65" ]
$MDSPREP -q --input "$T/sp.jsonl" --output-prefix "$T/nosp"
check "plain text by default" [ "$(od -An -tu2 -w100 "$T/nosp_text_document.bin" | tr -s ' ')" = " 64 27 91 437 1659 5239 91 29 65" ]
# on a terminal: a live bar with position, rate and ETA (script(1) provides the terminal)
if ! have lzma; then
    skip "progress bar on a terminal" "liblzma not built in"
    skip "no bar when stderr is not a terminal" "liblzma not built in"
elif command -v script >/dev/null 2>&1; then
    xz -c < $C/edge.jsonl > "$T/edge.xz"
    many=""; for i in 1 2 3 4 5 6 7 8; do many="$many --input $T/edge.xz"; done
    script -qc "$MDSPREP $many --output-prefix $T/bar --workers 1" "$T/tty.txt" >/dev/null 2>&1
    check "progress bar on a terminal" grep -q 'ETA [0-9][0-9]:[0-9][0-9]' "$T/tty.txt"
    $MDSPREP --input "$T/edge.xz" --output-prefix "$T/nobar" 2> "$T/notty.txt"
    check "no bar when stderr is not a terminal" sh -c "! grep -q ETA '$T/notty.txt'"
fi
finish
