#!/bin/sh
# test_inspect.sh - mdsinspect on Megatron's own goldens (tests/data/golden)
# and on small datasets built here byte by byte with printf: info counts,
# --json, verify on sound and corrupt files, dump of ids and text (with
# Python's errors='replace'), stats, diff, and merge.
#
# Merge is checked by construction: expect_merge below builds, with od and
# printf only, what Megatron's IndexedDatasetBuilder.add_index + finalize
# writes (docs/formats.md: lengths appended, document indices shifted by the
# sequences so far without their leading 0, pointers recomputed as the
# running byte sum, .bin bytes concatenated), and mdsinspect's output must
# equal it byte for byte.  Assumes a little-endian host (od reads native
# order, and so do the goldens' consumers).
. tests/cli/lib.sh
G=tests/data/golden
I=$MDSINSPECT
EL=$G/edge-list_text_document
TITLE=$G/tiny-keys_title_document
# The bundled vocabulary wherever BUILD is; the lookup next to the binary
# is tested on its own below.
MDS_VOCAB_DIR=$(pwd)/vocab
export MDS_VOCAB_DIR

# le VALUE BYTES: VALUE as BYTES little-endian bytes (two's complement)
le() {
    v=$1 n=$2
    while [ "$n" -gt 0 ]; do
        b=$((v & 255))
        printf "\\$((b / 64))$((b / 8 % 8))$((b % 8))"
        v=$((v >> 8)) n=$((n - 1))
    done
}
# rd FILE OFFSET SIZE COUNT: COUNT signed little-endian integers, one a line
rd() {
    [ "$4" -gt 0 ] || return 0
    od -An -v -t "d$3" -j "$2" -N $(($3 * $4)) "$1" | tr -s ' ' '\n' | grep -v '^$'
}
itemsize() { case $1 in 1|2) echo 1;; 3|8) echo 2;; 4) echo 4;; *) echo 8;; esac; }
# write_idx OUT CODE N D+1 LENS-FILE DOCS-FILE: an .idx with recomputed pointers
write_idx() {
    isz=$(itemsize "$2")
    {
        printf 'MMIDIDX\000\000'; le 1 8; le "$2" 1; le "$3" 8; le "$4" 8
        while read -r l; do le "$l" 4; done < "$5"
        ptr=0
        while read -r l; do le "$ptr" 8; ptr=$((ptr + l * isz)); done < "$5"
        while read -r d; do le "$d" 8; done < "$6"
    } > "$1"
}
# mkds PREFIX CODE "LENGTHS" "DOCUMENT-INDICES" "TOKENS": a dataset from scratch
mkds() {
    for x in $3; do echo "$x"; done > "$T/mk.lens"
    for x in $4; do echo "$x"; done > "$T/mk.docs"
    write_idx "$1.idx" "$2" "$(wc -l < "$T/mk.lens")" "$(wc -l < "$T/mk.docs")" "$T/mk.lens" "$T/mk.docs"
    isz=$(itemsize "$2")
    for t in $5; do le "$t" "$isz"; done > "$1.bin"
}
# expect_merge OUT PREFIX...: Megatron's merge of the prefixes, in that order
expect_merge() {
    out=$1; shift
    code=$(od -An -t u1 -j 17 -N 1 "$1.idx" | tr -d ' ')
    N=0 D=0
    : > "$out.bin"; : > "$T/em.lens"; echo 0 > "$T/em.docs"
    for p in "$@"; do
        n=$(rd "$p.idx" 18 8 1) dc=$(rd "$p.idx" 26 8 1)
        cat "$p.bin" >> "$out.bin"
        rd "$p.idx" 34 4 "$n" >> "$T/em.lens"
        rd "$p.idx" $((34 + 12 * n + 8)) 8 $((dc - 1)) | while read -r d; do echo $((d + N)); done >> "$T/em.docs"
        N=$((N + n)) D=$((D + dc - 1))
    done
    write_idx "$out.idx" "$code" "$N" $((D + 1)) "$T/em.lens" "$T/em.docs"
}
has() { grep -q -- "$1" "$T/out"; }   # has REGEX: in the last run's stdout

# ---- the construction helpers themselves: the spec's worked example (§1.2)
mkds "$T/spec" 8 "4 2" "0 1 2" "15496 995 0 50256 220 50256"
check "mkds builds the spec example (.idx)" [ "$(od -An -v -tx1 "$T/spec.idx" | tr -d ' \n')" = \
    4d4d4944494458000001000000000000000802000000000000000300000000000000040000000200000000000000000000000800000000000000000000000000000001000000000000000200000000000000 ]
check "mkds builds the spec example (.bin)" [ "$(od -An -v -tx1 "$T/spec.bin" | tr -d ' \n')" = 883ce303000050c4dc0050c4 ]
expect_merge "$T/self" $EL
same "$T/self" $EL "expect_merge of one golden is the golden"

# ---- info
run_expect "info tiny" 0 "" $I info $G/tiny_text_document
check "info tiny: 210 documents" has '^  documents  *210$'
check "info tiny: 210 sequences" has '^  sequences  *210$'
check "info tiny: 171257 tokens" has '^  tokens  *171257$'
check "info tiny: 342514 bin bytes" has '^  bin bytes  *342514$'
check "info tiny: dtype uint16" has '^  dtype  *uint16 (code 8'
run_expect "info edge" 0 "" $I info $G/edge_text_document.idx
check "info edge (.idx form): 66 documents" has '^  documents  *66$'
check "info edge: 65 sequences" has '^  sequences  *65$'
check "info edge: 1481395 tokens" has '^  tokens  *1481395$'
check "info edge: 1 empty document" has '^  empty documents  *1$'
run_expect "info --json, two datasets" 0 "" $I info --json $G/tiny_text_document $TITLE
check "info --json: one object a line" [ "$(grep -c '^{"prefix":".*}$' "$T/out")" -eq 2 ]
check "info --json: counts" has '"documents":210,"empty_documents":0,"sequences":210,"empty_sequences":0,"tokens":171257,'
check "info --json: title counts" has '"documents":210,"empty_documents":13,"sequences":197,.*"tokens":4732,'
check "info --json: dtype" has '"dtype":"uint16","dtype_code":8,"itemsize":2'
mkds "$T/empty" 8 "" "0" ""
run_expect "info --json, no sequences" 0 "" $I info --json "$T/empty"
check "info --json: null lengths" has '"sequences":0,.*"min_sequence_length":null'
run_expect "info missing dataset" 1 "^mdsinspect: cannot open '$T/nope.idx'" $I info "$T/nope"
run_expect "info goes on after a bad dataset" 1 "nope" $I info "$T/nope" $EL
check "info goes on: the good one printed" has '^  sequences  *11$'

# ---- verify
run_expect "verify goldens" 0 "" $I verify $G/tiny_text_document $G/edge_text_document $EL $TITLE
check "verify says ok" [ "$(grep -c ': ok (' "$T/out")" -eq 4 ]
cp $EL.bin "$T/bad.bin"; cp $EL.idx "$T/bad.idx"
le 99 8 | dd of="$T/bad.idx" bs=1 seek=$((34 + 4 * 11 + 8)) conv=notrunc 2>/dev/null
run_expect "verify corrupt pointer" 1 "^mdsinspect: '$T/bad.idx': sequence_pointers\[1\] is 99 but the lengths before it imply 6$" \
    $I verify "$T/bad"
check "verify corrupt: one error line" [ "$(wc -l < "$T/err")" -eq 1 ]
run_expect "info does not read pointers" 0 "" $I info "$T/bad"
run_expect "dump of a bad pointer" 1 "sequence_pointers\[1\] lies outside the .bin" $I dump "$T/bad" --doc 0
run_expect "verify --json corrupt" 1 "" $I verify --json "$T/bad" $EL
check "verify --json: error field" has '"ok":false,"error":".*sequence_pointers\[1\]'
check "verify --json: ok field" has '"prefix":"'$EL'","ok":true}'
head -c 80 $EL.bin > "$T/short.bin"; cp $EL.idx "$T/short.idx"
run_expect "verify short .bin" 1 "^mdsinspect: '$T/short.bin': sequence_lengths sum to 44 tokens of 2 bytes \(88 bytes\) but the file has 80$" \
    $I verify "$T/short"
printf 'XXIDIDX\000\000' > "$T/magic.idx"; tail -c +10 $EL.idx >> "$T/magic.idx"; cp $EL.bin "$T/magic.bin"
run_expect "verify bad magic" 1 "^mdsinspect: '$T/magic.idx': bad magic" $I verify "$T/magic"

# ---- dump
run_expect "dump --doc ids" 0 "" $I dump $EL --doc 0 --ids
check "dump --doc: one line per sequence" [ "$(cat "$T/out")" = "$(printf '5962 6827 13\n5498 6827 13\n10467 13 50256')" ]
run_expect "dump --seq" 0 "" $I dump $EL.bin --seq 3
check "dump --seq: ids by default" [ "$(cat "$T/out")" = "8807 262 1218 318 1729 12 28920 50256" ]
run_expect "dump --range" 0 "" $I dump $EL --range 1:4
check "dump --range: headers, empty document" [ "$(cat "$T/out")" = "$(printf '# document 1\n# document 2\n8807 262 1218 318 1729 12 28920 50256\n# document 3\n220 220 220 50256')" ]
run_expect "dump --range clamps" 0 "" $I dump $EL --range 7:
check "dump --range 7: is the last document" [ "$(grep -c '^# document' "$T/out")" -eq 1 ]
run_expect "dump --text" 0 "" $I dump $EL --doc 7 --text
printf '多语言\n mixed\n 😀<|endoftext|>\n' > "$T/want"
check "dump --text: GPT-2 text, one line per sequence" cmp -s "$T/out" "$T/want"
run_expect "dump --text doc 0" 0 "" $I dump $EL --doc 0 --text
check "dump --text doc 0" [ "$(cat "$T/out")" = "$(printf 'First sentence.\n Second sentence.\n Third.<|endoftext|>')" ]
run_expect "dump --json --text" 0 "" $I dump $EL --doc 7 --text --json
check "dump --json --text" [ "$(cat "$T/out")" = '{"document":7,"first_sequence":8,"text":["多语言"," mixed"," 😀<|endoftext|>"]}' ]
run_expect "dump --json --seq" 0 "" $I dump $EL --seq 9 --json
check "dump --json --seq names its document" [ "$(cat "$T/out")" = '{"document":7,"first_sequence":9,"ids":[[7668]]}' ]
run_expect "dump --json --text newline escaped" 0 "" $I dump $EL --doc 4 --text --json
check "dump --json: newline escaped" [ "$(cat "$T/out")" = '{"document":4,"first_sequence":5,"text":["\n<|endoftext|>"]}' ]
# errors='replace': decode([447]) = "\ufffd", decode([447, 227]) = "\u2005", [447, 447] = 2 x U+FFFD
mkds "$T/utf" 8 "1 2 2" "0 1 2 3" "447 447 227 447 447"
run_expect "dump --text errors=replace" 0 "" $I dump "$T/utf" --range 0:3 --text
printf '# document 0\n\357\277\275\n# document 1\n\342\200\205\n# document 2\n\357\277\275\357\277\275\n' > "$T/want"
check "dump --text: U+FFFD per maximal subpart" cmp -s "$T/out" "$T/want"
run_expect "dump --json --text errors=replace" 0 "" $I dump "$T/utf" --doc 0 --text --json
check "dump --json: U+FFFD" [ "$(cat "$T/out")" = "$(printf '{"document":0,"first_sequence":0,"text":["\357\277\275"]}')" ]
mkds "$T/wide" 4 "2" "0 1" "70000 -3"
run_expect "dump --ids int32, negative id" 0 "" $I dump "$T/wide" --doc 0
check "dump int32 ids" [ "$(cat "$T/out")" = "70000 -3" ]
run_expect "dump --text, id outside the vocabulary" 1 "sequence 0: token 70000 at position 0 is not in the vocabulary \(50257 tokens\)" \
    $I dump "$T/wide" --doc 0 --text
run_expect "dump --doc out of range" 1 "no document 8 \(it has 8\)" $I dump $EL --doc 8
run_expect "dump --seq out of range" 1 "no sequence 11 \(it has 11\)" $I dump $EL --seq 11
run_expect "dump --vocab-file missing" 1 "cannot open '$T/none.json'|$T/none.json" \
    $I dump $EL --doc 0 --text --vocab-file "$T/none.json"
MDS_VOCAB_DIR=vocab run_expect "dump with a relative MDS_VOCAB_DIR" 0 "" $I dump $EL --doc 5 --text
check "dump with a relative MDS_VOCAB_DIR" [ "$(cat "$T/out")" = "single<|endoftext|>" ]
case $I in
build/*)   # inside the repository: ../vocab or ../../vocab from the binary
    MDS_VOCAB_DIR=$T run_expect "MDS_VOCAB_DIR without the files falls back" 0 "" $I dump $EL --doc 5 --text
    (unset MDS_VOCAB_DIR; $I dump $EL --doc 5 --text > "$T/out" 2>&1)
    check "default vocabulary found from the binary" [ "$(cat "$T/out")" = "single<|endoftext|>" ];;
esac

# ---- stats
run_expect "stats tiny" 0 "" $I stats $G/tiny_text_document
check "stats: EOD count 210" has '^  EOD tokens  *210 (id 50256); 210 of 210 documents end with one$'
check "stats: tokens" has '^  tokens  *171257 in 210 sequences, 210 documents$'
check "stats: top token" has '^ *220  *24482 .*" "$'
check "stats: histogram" has '^  *512-1023  *74 '
check "stats: nothing on stderr off a terminal" [ ! -s "$T/err" ]
cp "$T/out" "$T/stats2"
run_expect "stats -j1" 0 "" $I stats -j1 $G/tiny_text_document
check "stats: same result on 1 and 2 threads" cmp -s "$T/out" "$T/stats2"
run_expect "stats tiny-noeod" 0 "" $I stats --json $G/tiny-noeod_text_document
check "stats --json: no EOD" has '"eod_tokens":0,"documents_ending_with_eod":0'
run_expect "stats --json edge-list" 0 "" $I stats --json --top 2 $EL
check "stats --json" [ "$(cat "$T/out")" = "$(printf '%s' '{"prefix":"'$EL'","dtype":"uint16","documents":8,"sequences":11,"tokens":44,' \
    '"distinct_tokens":32,"eod_id":50256,"eod_tokens":7,"documents_ending_with_eod":7,"min_sequence_length":1,' \
    '"mean_sequence_length":4.0000,"max_sequence_length":8,"length_histogram":[{"min":1,"max":1,"count":1},' \
    '{"min":2,"max":3,"count":6},{"min":4,"max":7,"count":2},{"min":8,"max":15,"count":2}],"top_tokens":' \
    '[{"id":50256,"count":7,"text":"<|endoftext|>"},{"id":13,"count":3,"text":"."}]}')" ]
run_expect "stats --eod" 0 "" $I stats --eod 13 -n 0 $EL
check "stats --eod 13" has 'EOD tokens  *3 (id 13); 0 of 8 documents'
run_expect "stats int32 with ids outside the dense range" 0 "" $I stats --json "$T/wide"
check "stats int32" has '"top_tokens":\[{"id":-3,"count":1},{"id":70000,"count":1}\]'

# ---- diff
run_expect "diff identical" 0 "" $I diff $G/tiny_text_document $G/tiny-keys_text_document
check "diff identical says so" has 'are identical: 210 documents'
run_expect "diff tiny vs tiny-noeod" 1 "" $I diff $G/tiny_text_document $G/tiny-noeod_text_document
check "diff names document 0" has '^first difference: document 0, token 75 of the document$'
check "diff shows the EOD" has '13 | 50256 (end)$'
run_expect "diff -q" 1 "" $I diff -q $G/tiny_text_document $G/tiny-noeod_text_document
check "diff -q prints nothing" [ ! -s "$T/out" ]
run_expect "diff --json" 1 "" $I diff --json -C 2 $G/tiny_text_document $G/tiny-noeod_text_document
check "diff --json" has '"identical":false,"difference":"tokens","document":0,"token":75,"context_start":73,"context_a":\[102,13,50256\],"context_b":\[102,13\]}$'
mkds "$T/split2" 8 "2 2" "0 2" "7 8 9 10"
mkds "$T/split1" 8 "4" "0 1" "7 8 9 10"
run_expect "diff sequence boundaries" 1 "" $I diff "$T/split2" "$T/split1"
check "diff sequence boundaries" has 'document 0 has the same tokens but different sequence boundaries'
mkds "$T/dup" 8 "2 2" "0 1 2" "7 8 7 8"
cp "$T/dup.bin" "$T/dupptr.bin"; cp "$T/dup.idx" "$T/dupptr.idx"
le 0 8 | dd of="$T/dupptr.idx" bs=1 seek=$((34 + 8 + 8)) conv=notrunc 2>/dev/null
run_expect "diff pointers only" 1 "" $I diff "$T/dup" "$T/dupptr"
check "diff pointers only" has 'sequence_pointers\[1\] differ: 4 in'
mkds "$T/dup32" 4 "2 2" "0 1 2" "7 8 7 8"
run_expect "diff dtype only" 1 "" $I diff "$T/dup" "$T/dup32"
check "diff dtype only" has 'only the dtype differs'
run_expect "diff missing" 1 "cannot open" $I diff "$T/dup" "$T/nope"

# ---- merge
run_expect "merge one dataset" 0 "merged 1 dataset" $I merge --input $G/edge_text_document --output-prefix "$T/m1"
same "$T/m1" $G/edge_text_document "merge of one Megatron dataset is the identity"
run_expect "merge two" 0 "" $I merge --input $G/tiny-keys_text_document $TITLE --output-prefix "$T/m2"
cat $G/tiny-keys_text_document.bin $TITLE.bin > "$T/cat.bin"
check "merge: .bin is the concatenation" cmp -s "$T/m2.bin" "$T/cat.bin"
expect_merge "$T/e2" $G/tiny-keys_text_document $TITLE
same "$T/m2" "$T/e2" "merge text+title equals Megatron's add_index construction"
run_expect "merge: verify" 0 "" $I verify "$T/m2"
run_expect "merge: documents shifted" 0 "" $I dump "$T/m2" --doc 210
$I dump $TITLE --doc 0 > "$T/want"
check "merge: document 210 is title's document 0" cmp -s "$T/out" "$T/want"
run_expect "merge three, a repeat, new-style -o" 0 "" $I merge $EL "$T/spec" $EL -o "$T/m3"
expect_merge "$T/e3" $EL "$T/spec" $EL
same "$T/m3" "$T/e3" "merge edge-list+spec+edge-list equals the construction"
mkdir "$T/dir"
for x in b_part:$EL a_part:$TITLE C_part:"$T/spec"; do
    cp "${x#*:}.idx" "$T/dir/${x%%:*}.idx"; cp "${x#*:}.bin" "$T/dir/${x%%:*}.bin"
done
run_expect "merge --input DIR (Megatron's form)" 0 "" $I merge --input "$T/dir" --output-prefix "$T/md"
expect_merge "$T/ed" "$T/dir/C_part" "$T/dir/a_part" "$T/dir/b_part"
same "$T/md" "$T/ed" "merge DIR: every pair, in sorted() byte order"
run_expect "merge --output-prefix= form, DIR/" 0 "" $I merge --input="$T/dir/" --output-prefix="$T/md2" -q
same "$T/md2" "$T/ed" "merge --opt=value"
check "merge -q: quiet" [ ! -s "$T/err" ]
touch "$T/dir/notes.txt"
run_expect "merge DIR with an unpaired file" 1 "'$T/dir/notes.txt' has no '.idx' beside it" \
    $I merge --input "$T/dir" --output-prefix "$T/mx"
mkdir "$T/void"
run_expect "merge empty DIR" 1 "holds no .bin/.idx pair" $I merge --input "$T/void" --output-prefix "$T/mx"
run_expect "merge different dtypes" 1 "cannot merge '$T/wide.idx' \(dtype int32\) after '$EL.idx' \(dtype uint16\)" \
    $I merge --input $EL "$T/wide" --output-prefix "$T/mx"
run_expect "merge a corrupt input" 1 "'$T/short.bin': sequence_lengths sum" $I merge --input $EL "$T/short" -o "$T/mx"
check "failed merges leave nothing" [ -z "$(ls "$T" | grep '^mx')" ]
run_expect "merge into a missing directory" 1 "cannot create" $I merge --input $EL -o "$T/no/such/out"

# ---- usage: exit 2 with a hint
run_expect "no command" 2 "missing command" $I
check "no command: hint" grep -q '^hint: ' "$T/err"
run_expect "unknown command" 2 "unknown command 'frob'" $I frob
run_expect "unknown option" 2 "unknown option '--frob' for 'info'" $I info --frob $EL
check "unknown option: hint names the command" grep -q "^hint: see 'mdsinspect info --help'" "$T/err"
run_expect "info without a dataset" 2 "needs at least 1 dataset" $I info
run_expect "dump without a selector" 2 "exactly one of --doc, --seq and --range" $I dump $EL
run_expect "dump --doc and --seq" 2 "exactly one of" $I dump $EL --doc 1 --seq 2
run_expect "dump --ids and --text" 2 "exclude each other" $I dump $EL --doc 1 --ids --text
run_expect "dump bad number" 2 "'--doc' needs an integer" $I dump $EL --doc 1x
run_expect "dump negative number" 2 "'--doc' needs an integer" $I dump $EL --doc -1
run_expect "dump bad range" 2 "'--range' needs A:B" $I dump $EL --range 3
run_expect "dump missing value" 2 "'--doc' needs a value" $I dump $EL --doc
run_expect "stats -j 0" 2 "'--threads' needs an integer in \[1, 1024\]" $I stats -j 0 $EL
run_expect "merge without output" 2 "missing --output-prefix" $I merge --input $EL
run_expect "merge without input" 2 "missing --input" $I merge -o "$T/x"
run_expect "diff with one dataset" 2 "takes 2 datasets, got 1" $I diff $EL
run_expect "flag takes no value" 2 "'--json' takes no value" $I info --json=1 $EL

# ---- help: stdout, exit 0, generated from each command's option table
run_expect "--help" 0 "" $I --help
for c in info verify dump stats merge diff; do check "--help lists $c" has "^  $c "; done
run_expect "dump --help" 0 "" $I dump --help
for o in --doc --seq --range --ids --text --json --vocab-file --merge-file; do check "dump --help lists $o" has " $o"; done
run_expect "help merge" 0 "" $I help merge
check "help merge lists --output-prefix" has '^  -o, --output-prefix PREFIX'
run_expect "stats --help" 0 "" $I stats --help
check "stats --help lists -j" has '^  -j, --threads N'
run_expect "--version" 0 "" $I --version
finish
