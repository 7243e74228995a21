#!/bin/sh
# test_golden.sh - mdsprep reproduces Megatron's preprocess_data.py output byte
# for byte on every small golden (tests/data/README.md says where they came
# from), with Megatron's own command lines, for 1 and 2 workers and for both
# pre-tokenizers (the PCRE2 one skipped in a build without PCRE2, where
# asking for it must say so).
. tests/cli/lib.sh

V="--tokenizer-type GPT2BPETokenizer --vocab-file vocab/gpt2-vocab.json --merge-file vocab/gpt2-merges.txt"
C=tests/data/corpus
G=tests/data/golden

golden() {   # NAME CORPUS EXTRA-FLAGS...
    name=$1 corpus=$2; shift 2
    for w in 1 2; do
        for pt in scan pcre2; do
            if [ $pt = pcre2 ] && ! have pcre2; then
                skip "$name workers=$w pretokenizer=$pt" "PCRE2 not built in"
                continue
            fi
            out="$T/$name-$w-$pt"
            $MDSPREP -q --input "$C/$corpus.jsonl" --output-prefix "$out" $V --workers $w \
                --pretokenizer $pt --dataset-impl mmap "$@"
            same "${out}_text_document" "$G/${name}_text_document" "$name workers=$w pretokenizer=$pt"
        done
    done
}

if ! have pcre2; then
    run_expect "pretokenizer pcre2 without PCRE2 says so" 1 "this build has no PCRE2 \\(install libpcre2-dev and rebuild\\)" \
        $MDSPREP --input $C/tiny.jsonl --output-prefix "$T/nopcre2" $V --pretokenizer pcre2
fi
golden tiny tiny --append-eod
golden tiny-noeod tiny
golden edge edge --append-eod
golden edge-list edge-list --append-eod
golden edge-unicode-version edge-unicode-version --append-eod
for w in 1 2; do
    $MDSPREP -q --input $C/tiny-keys.jsonl --output-prefix "$T/tk$w" $V --json-keys text title --append-eod --workers $w
    same "$T/tk${w}_text_document" "$G/tiny-keys_text_document" "tiny-keys text workers=$w"
    same "$T/tk${w}_title_document" "$G/tiny-keys_title_document" "tiny-keys title workers=$w"
done
# the bundled vocabulary is the default
$MDSPREP -q --input $C/tiny.jsonl --output-prefix "$T/default" --append-eod
same "$T/default_text_document" "$G/tiny_text_document" "default vocabulary"
finish
