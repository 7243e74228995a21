#!/bin/sh
# check_golden_dev.sh - `make check-golden`: the 38 MB dev corpus (from
# ../shared, when present) against Megatron's golden output, read straight
# from the .xz, with the default scanner and with PCRE2; and mdsinspect
# verify on every golden dataset there.
BUILD=${BUILD:-build}
S=${MDS_SHARED:-../shared}
if [ ! -f "$S/data/corpus/dev.jsonl.xz" ]; then
    echo "check-golden: $S/data not found; nothing to check (set MDS_SHARED)"; exit 0
fi
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
pass=0 fail=0
for pt in scan pcre2; do
    if "$BUILD/mdsprep" -q --input "$S/data/corpus/dev.jsonl.xz" --output-prefix "$T/dev" \
           --tokenizer-type GPT2BPETokenizer --append-eod --workers 2 --pretokenizer $pt &&
       cmp "$T/dev_text_document.bin" "$S/data/golden/dev_text_document.bin" &&
       cmp "$T/dev_text_document.idx" "$S/data/golden/dev_text_document.idx"; then
        echo "ok dev golden ($pt)"; pass=$((pass + 1))
    else
        echo "FAIL dev golden ($pt)"; fail=$((fail + 1))
    fi
done
# Every golden in shared (dev included) passes mdsinspect verify.
for idx in "$S"/data/golden/*_document.idx; do
    [ -f "$idx" ] || continue
    if "$BUILD/mdsinspect" verify -q "${idx%.idx}"; then
        echo "ok verify ${idx##*/}"; pass=$((pass + 1))
    else
        echo "FAIL verify ${idx##*/}"; fail=$((fail + 1))
    fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
