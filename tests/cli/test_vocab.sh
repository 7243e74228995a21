#!/bin/sh
# test_vocab.sh - the bundled GPT-2 files are OpenAI's, byte for byte (the
# hashes tiktoken pins), and the generated Unicode tables match the installed
# UCD when that is the pinned version 15.0.
. tests/cli/lib.sh
check "gpt2-vocab.json sha256" [ "$(sha256sum < vocab/gpt2-vocab.json | cut -d' ' -f1)" = \
    196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783 ]
check "gpt2-merges.txt sha256" [ "$(sha256sum < vocab/gpt2-merges.txt | cut -d' ' -f1)" = \
    1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5 ]
check "corpus fixtures intact" sh -c 'cd tests/data/corpus && sha256sum -c --quiet SHA256SUMS'
check "golden fixtures intact" sh -c 'cd tests/data/golden && sha256sum -c --quiet SHA256SUMS'
if grep -q '^# PropList-15.0.0.txt' /usr/share/unicode/PropList.txt 2>/dev/null; then
    preprocess/gen_unitab.sh /usr/share/unicode > "$T/unitab.c"
    check "unitab.c regenerates from unicode-data 15.0" cmp -s "$T/unitab.c" preprocess/unitab.c
else
    echo "# unicode-data 15.0 not installed: unitab.c regeneration not checked"
fi
# default vocabulary lookup in an installed layout (PREFIX/bin + PREFIX/share/mds/vocab)
mkdir -p "$T/inst/bin" "$T/inst/share/mds/vocab" "$T/lonely"
cp "$MDSPREP" "$T/inst/bin/mdsprep"
cp vocab/gpt2-vocab.json vocab/gpt2-merges.txt "$T/inst/share/mds/vocab/"
(cd "$T" && "$T/inst/bin/mdsprep" -q --input "$MDS_ROOT/tests/data/corpus/tiny.jsonl" --output-prefix "$T/inst-out" --append-eod)
same "$T/inst-out_text_document" tests/data/golden/tiny_text_document "vocabulary found under PREFIX/share/mds/vocab"
cp "$MDSPREP" "$T/lonely/mdsprep"
(cd "$T" && MDS_VOCAB_DIR="$MDS_ROOT/vocab" "$T/lonely/mdsprep" -q --input "$MDS_ROOT/tests/data/corpus/tiny.jsonl" --output-prefix "$T/env-out" --append-eod)
same "$T/env-out_text_document" tests/data/golden/tiny_text_document "vocabulary found through MDS_VOCAB_DIR"
run_expect "bad vocabulary file" 1 "mdsprep: .*" $MDSPREP --input tests/data/corpus/tiny.jsonl --output-prefix "$T/x" \
    --vocab-file tests/data/corpus/tiny.jsonl --merge-file vocab/gpt2-merges.txt
finish
