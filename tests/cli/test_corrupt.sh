#!/bin/sh
# test_corrupt.sh - the corrupt-dataset catalogue (tests/data/corrupt/, see
# its README.md): for every NAME.expect there, `mdsinspect verify NAME` exits
# 1 with one stderr line matching the extended regex in NAME.expect, `info`
# does not crash (exit 1 with the same message when ds_reader_open refuses
# the files, exit 0 for the cases only verify catches: those whose message
# names sequence_pointers), and `merge` either refuses the input with the same
# message or, for the pointer-only cases, rebuilds the sound original (merge
# recomputes pointers from the lengths).  Also: every golden verifies, and
# merging tiny + edge gives the concatenated .bin and the summed counts
# (tests/unit/test_dataset.c compares the same merge with a document-by-
# document rewrite, byte for byte).
#
# Needs only sh, coreutils and the built mdsinspect; the fixtures were made
# once by tests/data/corrupt/make_corrupt.py and are pinned by SHA256SUMS.
. tests/cli/lib.sh
G=tests/data/golden
C=tests/data/corrupt
I=$MDSINSPECT
SRC=$G/edge-list_text_document
has() { grep -q -- "$1" "$T/out"; }   # has REGEX: in the last run's stdout
pair() { [ -f "$1.bin" ] && [ -f "$1.idx" ]; }
no_pair() { [ ! -e "$1.bin" ] && [ ! -e "$1.idx" ]; }
one_error_line() { [ "$(wc -l < "$T/err")" -eq 1 ] && [ ! -s "$T/out" ]; }

check "corrupt fixtures intact" sh -c "cd $C && sha256sum -c --quiet SHA256SUMS"
run_expect "the source of the catalogue verifies" 0 "" $I verify $SRC

# ---- the catalogue
ncases=0
for e in $C/*.expect; do
    [ -f "$e" ] || continue
    p=${e%.expect}
    name=${p##*/}
    ncases=$((ncases + 1))
    re=$(cat "$e")
    check "$name: has its .bin and .idx" pair "$p"
    run_expect "verify $name" 1 "$re" $I verify "$p"
    check "verify $name: one error line, nothing on stdout" one_error_line
    run_expect "verify --json $name" 1 "$re" $I verify --json "$p"
    check "verify --json $name: ok false" has '^{"prefix":".*","ok":false,"error":".*"}$'
    rm -f "$T/merged.bin" "$T/merged.idx"
    if grep -q 'sequence_pointers' "$e"; then
        # Open does not read pointers (neither does Megatron): only verify sees these.
        run_expect "info $name (pointers are not checked by open)" 0 "" $I info "$p"
        run_expect "merge $name" 0 "" $I merge -q --input "$p" --output-prefix "$T/merged"
        same "$T/merged" $SRC "merge $name recomputes the pointers: the sound original"
    else
        run_expect "info $name" 1 "$re" $I info "$p"
        run_expect "merge $name refused" 1 "$re" $I merge --input $SRC "$p" --output-prefix "$T/merged"
        check "merge $name: no output left" no_pair "$T/merged"
    fi
done
check "the catalogue has its 22 cases" [ "$ncases" -ge 22 ]
run_expect "verify goes on after a corrupt dataset" 1 "wrong-magic" $I verify $C/wrong-magic $SRC
check "verify goes on: the sound one is ok" has ': ok (8 documents, 11 sequences, 44 tokens)$'

# ---- every golden verifies (dev_text_document.idx comes without its
# 38 MB .bin: only the index-building tests use it)
for idx in $G/*_document.idx; do
    [ -f "${idx%.idx}.bin" ] || continue
    run_expect "verify golden ${idx##*/}" 0 "" $I verify "${idx%.idx}"
    check "verify golden ${idx##*/} says ok" has ': ok ('
done

# ---- merge of tiny + edge: the .bin is the concatenation, counts add up
run_expect "merge tiny edge" 0 "merged 2 datasets" \
    $I merge --input $G/tiny_text_document $G/edge_text_document --output-prefix "$T/m"
cat $G/tiny_text_document.bin $G/edge_text_document.bin > "$T/cat.bin"
check "merge tiny edge: .bin is tiny.bin + edge.bin" cmp -s "$T/m.bin" "$T/cat.bin"
run_expect "merge tiny edge: verify" 0 "" $I verify "$T/m"
run_expect "merge tiny edge: info --json" 0 "" $I info --json "$T/m"
check "merge tiny edge: 276 documents" has '"documents":276,'
check "merge tiny edge: 275 sequences" has '"sequences":275,'
check "merge tiny edge: 1652652 tokens" has '"tokens":1652652,'
check "merge tiny edge: 1 empty document" has '"empty_documents":1,'
finish
