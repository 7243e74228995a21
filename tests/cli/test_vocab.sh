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
finish
