#!/bin/sh
# check_golden_dev.sh - `make check-golden`: the 38 MB dev corpus (from
# ../shared, when present) against Megatron's golden output, read straight
# from the .xz, with the default scanner and with PCRE2: GPT-2 (the goldens in
# shared) and the ten HuggingFace and SentencePiece configurations
# (tests/data/golden-tok); and mdsinspect verify on every golden dataset there.
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
# The HuggingFace and SentencePiece test tokenizers on dev against Megatron's
# output (tests/data/golden-tok/SHA256SUMS: both files of every dev run).
TK=tests/data/tokenizers
for cfg in hf-llama3:HuggingFaceTokenizer:$TK/hf-llama3 hf-qwen:HuggingFaceTokenizer:$TK/hf-qwen \
           hf-neox:HuggingFaceTokenizer:$TK/hf-neox hf-tekken:HuggingFaceTokenizer:$TK/hf-tekken \
           sp-bpe-sp:SentencePieceTokenizer:$TK/sp-bpe.model sp-bpe-gptsp:GPTSentencePieceTokenizer:$TK/sp-bpe.model \
           sp-bpe-llama2:Llama2Tokenizer:$TK/sp-bpe.model sp-unigram-sp:SentencePieceTokenizer:$TK/sp-unigram.model \
           sp-unigram-gptsp:GPTSentencePieceTokenizer:$TK/sp-unigram.model sp-unigram-llama2:Llama2Tokenizer:$TK/sp-unigram.model; do
    name=${cfg%%:*}; rest=${cfg#*:}; type=${rest%%:*}; model=${rest#*:}
    engines=scan; [ $type = HuggingFaceTokenizer ] && engines="scan pcre2"
    for pt in $engines; do
        flag=; [ $type = HuggingFaceTokenizer ] && flag="--pretokenizer $pt"
        ok=0
        if "$BUILD/mdsprep" -q --input "$S/data/corpus/dev.jsonl.xz" --output-prefix "$T/$name" --tokenizer-type $type \
               --tokenizer-model $model --append-eod --workers 2 $flag; then
            ok=1
            for ext in bin idx; do
                want=$(grep " dev-${name}_text_document.$ext\$" tests/data/golden-tok/SHA256SUMS | cut -d' ' -f1)
                got=$(sha256sum "$T/${name}_text_document.$ext" | cut -d' ' -f1)
                [ -n "$want" ] && [ "$got" = "$want" ] || ok=0
            done
        fi
        if [ $ok = 1 ]; then echo "ok dev $name ($pt)"; pass=$((pass + 1))
        else echo "FAIL dev $name ($pt)"; fail=$((fail + 1)); fi
        rm -f "$T/${name}_text_document".*
    done
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
