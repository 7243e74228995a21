#!/bin/sh
# check_golden_dev.sh - `make check-golden`: the 38 MB dev corpus (from
# ../shared, when present) against Megatron's golden output, read straight
# from the .xz, with the default scanner and with PCRE2.
BUILD=${BUILD:-build}
S=${MDS_SHARED:-../shared}
if [ ! -f "$S/data/corpus/dev.jsonl.xz" ]; then
    echo "check-golden: $S/data not found; nothing to check (set MDS_SHARED)"; exit 0
fi
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
for pt in scan pcre2; do
    "$BUILD/mdsprep" -q --input "$S/data/corpus/dev.jsonl.xz" --output-prefix "$T/dev" \
        --tokenizer-type GPT2BPETokenizer --append-eod --workers 2 --pretokenizer $pt || fail=1
    if cmp "$T/dev_text_document.bin" "$S/data/golden/dev_text_document.bin" &&
       cmp "$T/dev_text_document.idx" "$S/data/golden/dev_text_document.idx"; then
        echo "ok dev golden ($pt)"
    else
        echo "FAIL dev golden ($pt)"; fail=1
    fi
done
echo "$((2 - fail)) passed, $fail failed"
exit $fail
