#!/bin/sh
# test_tokenizers.sh - mdsprep with the HuggingFace and SentencePiece tokenizers
# reproduces Megatron's preprocess_data.py output byte for byte on tiny and edge
# (tests/data/golden-tok: every .idx, the .bin by sha256), for 1 and 2 workers
# and, for HuggingFace, both pre-tokenizer engines; mdsinspect decodes with
# them; bad usage is exit 2 naming the flag, a bad tokenizer file exit 1 with
# one line naming it, an unsupported feature exit 2 naming it.
. tests/cli/lib.sh

C=tests/data/corpus
G=tests/data/golden-tok
TK=tests/data/tokenizers

# matches PREFIX GOLDEN NAME: the .idx byte for byte, the .bin by its sha256
matches() {
    g=$(grep " $2_text_document.bin\$" $G/SHA256SUMS | cut -d' ' -f1)
    s=$(sha256sum "$1_text_document.bin" | cut -d' ' -f1)
    if [ -n "$g" ] && [ "$s" = "$g" ] && cmp -s "$1_text_document.idx" "$G/$2_text_document.idx"; then ok "$3"
    else
        fail "$3"
        cmp "$1_text_document.idx" "$G/$2_text_document.idx" 2>&1 | head -2 >&2
    fi
}

run() {   # NAME TYPE MODEL
    name=$1 type=$2 model=$3
    for corpus in tiny edge; do
        for w in 1 2; do
            engines=scan
            [ $type = HuggingFaceTokenizer ] && engines="scan pcre2"
            for pt in $engines; do
                if [ $pt = pcre2 ] && ! have pcre2; then
                    skip "$corpus $name workers=$w $pt" "PCRE2 not built in"; continue
                fi
                flag=; [ $type = HuggingFaceTokenizer ] && flag="--pretokenizer $pt"
                out="$T/$corpus-$name-$w-$pt"
                $MDSPREP -q --input $C/$corpus.jsonl --output-prefix "$out" --tokenizer-type $type \
                    --tokenizer-model $model --append-eod --workers $w $flag
                matches "$out" "$corpus-$name" "$corpus $name workers=$w $pt"
            done
        done
    done
}

run hf-llama3 HuggingFaceTokenizer $TK/hf-llama3
run hf-qwen HuggingFaceTokenizer $TK/hf-qwen/tokenizer.json
run hf-neox HuggingFaceTokenizer $TK/hf-neox
run hf-tekken HuggingFaceTokenizer $TK/hf-tekken

# A pattern no scanner knows runs on PCRE2 by default: Tekken's with \p{N}
# spelled [\p{N}] (the same language) gives Tekken's goldens again; a build
# without PCRE2 refuses it, exit 1 naming what is missing.
mkdir "$T/tekken-re" && cp $TK/hf-tekken/* "$T/tekken-re/"
sed -i 's/|\\\\p{N}|/|[\\\\p{N}]|/' "$T/tekken-re/tokenizer.json"
check "the rewritten Tekken pattern differs" sh -c "! cmp -s $TK/hf-tekken/tokenizer.json '$T/tekken-re/tokenizer.json'"
runs_on() {   # MODEL ENGINE: mdsprep -vvv names the engine that pre-tokenizes
    check "$1 runs on the $2" sh -c "$MDSPREP -vvv --input $C/tiny.jsonl --output-prefix '$T/v' \
        --tokenizer-type HuggingFaceTokenizer --tokenizer-model '$1' 2>&1 | grep -q ', $2,'"
}
runs_on $TK/hf-tekken "Tekken scanner"
have pcre2 && runs_on "$T/tekken-re" "PCRE2 pipeline"
for corpus in tiny edge; do
    if have pcre2; then
        $MDSPREP -q --input $C/$corpus.jsonl --output-prefix "$T/$corpus-re" --tokenizer-type HuggingFaceTokenizer \
            --tokenizer-model "$T/tekken-re" --append-eod --workers 2
        matches "$T/$corpus-re" "$corpus-hf-tekken" "$corpus hf-tekken pattern unknown to the scanners, on PCRE2"
    else
        run_expect "$corpus a pattern the scanners do not know, without PCRE2, says so" 1 "this build has no PCRE2" \
            $MDSPREP --input $C/$corpus.jsonl --output-prefix "$T/x" --tokenizer-type HuggingFaceTokenizer \
            --tokenizer-model "$T/tekken-re"
    fi
done
for m in sp-bpe sp-unigram; do
    run $m-sp SentencePieceTokenizer $TK/$m.model
    run $m-gptsp GPTSentencePieceTokenizer $TK/$m.model
    run $m-llama2 Llama2Tokenizer $TK/$m.model
done

# the two .bin kept whole, and the int32 choice (vocabulary 65,536)
$MDSPREP -q --input $C/tiny.jsonl --output-prefix "$T/l3" --tokenizer-type HuggingFaceTokenizer \
    --tokenizer-model $TK/hf-llama3 --append-eod
same "$T/l3_text_document" "$G/tiny-hf-llama3_text_document" "tiny hf-llama3 .bin whole"
check "hf-llama3 writes int32" sh -c "$MDSINSPECT info '$T/l3_text_document' | grep -q int32"
$MDSPREP -q --input $C/tiny.jsonl --output-prefix "$T/su" --tokenizer-type SentencePieceTokenizer \
    --tokenizer-model $TK/sp-unigram.model --append-eod --workers 1
same "$T/su_text_document" "$G/tiny-sp-unigram-sp_text_document" "tiny sp-unigram-sp .bin whole"

# mdsinspect decodes with the tokenizer: BOS and EOD show as their text
$MDSINSPECT dump "$T/l3_text_document" --doc 0 --text --tokenizer-type HuggingFaceTokenizer \
    --tokenizer-model $TK/hf-llama3 > "$T/dump.txt"
check "dump --text with a tokenizer.json" sh -c "head -1 '$T/dump.txt' | grep -q '^<|begin_of_text|>..' && grep -q '<|end_of_text|>\$' '$T/dump.txt'"
$MDSINSPECT stats "$T/su_text_document" --tokenizer-type SentencePieceTokenizer --tokenizer-model $TK/sp-unigram.model \
    > "$T/stats.txt"
check "stats counts the tokenizer's EOD (8002)" grep -q 'EOD tokens       210 (id 8002); 210 of 210' "$T/stats.txt"

# bad usage: exit 2 naming the flag
run_expect "HF without --tokenizer-model" 2 "HuggingFaceTokenizer needs --tokenizer-model" \
    $MDSPREP --input $C/tiny.jsonl --output-prefix "$T/o" --tokenizer-type HuggingFaceTokenizer
run_expect "--special-tokens is GPT-2's" 2 "option '--special-tokens' is for GPT2BPETokenizer" \
    $MDSPREP --input $C/tiny.jsonl --output-prefix "$T/o" --tokenizer-type Llama2Tokenizer --tokenizer-model $TK/sp-bpe.model --special-tokens
run_expect "--pretokenizer is not SentencePiece's" 2 "option '--pretokenizer' is for GPT2BPETokenizer and HuggingFaceTokenizer" \
    $MDSPREP --input $C/tiny.jsonl --output-prefix "$T/o" --tokenizer-type Llama2Tokenizer --tokenizer-model $TK/sp-bpe.model --pretokenizer pcre2
run_expect "unknown type" 2 "tokenizer type 'TikTokenizer' is not supported" \
    $MDSPREP --input $C/tiny.jsonl --output-prefix "$T/o" --tokenizer-type TikTokenizer

# bad tokenizer files: exit 1, one line naming the file and the cause, no output left
mkdir -p "$T/bad" "$T/unsup"
printf '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}}' > "$T/bad/tokenizer.json"
run_expect "malformed tokenizer.json" 1 "^mdsprep: invalid tokenizer file '$T/bad/tokenizer.json': line 1: merge 1 .* not in the vocabulary" \
    $MDSPREP --input $C/tiny.jsonl --output-prefix "$T/o" --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$T/bad"
check "malformed tokenizer.json: one line" test "$(wc -l < "$T/err")" -eq 1
check "malformed tokenizer.json: no output left" sh -c "! ls '$T'/o_* 2>/dev/null | grep -q ."
printf '{"model": {"type": "WordPiece", "vocab": {"a": 0}}}' > "$T/unsup/tokenizer.json"
run_expect "unsupported model" 2 "'$T/unsup/tokenizer.json': the model type 'WordPiece' .*is not supported" \
    $MDSPREP --input $C/tiny.jsonl --output-prefix "$T/o" --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$T/unsup"
head -c 3000 $TK/sp-bpe.model > "$T/cut.model"
run_expect "truncated .model" 1 "^mdsprep: invalid SentencePiece model '$T/cut.model': truncated" \
    $MDSPREP --input $C/tiny.jsonl --output-prefix "$T/o" --tokenizer-type Llama2Tokenizer --tokenizer-model "$T/cut.model"
check "truncated .model: one line" test "$(wc -l < "$T/err")" -eq 1
run_expect "missing .model" 1 "cannot open '$T/none.model'" \
    $MDSPREP --input $C/tiny.jsonl --output-prefix "$T/o" --tokenizer-type SentencePieceTokenizer --tokenizer-model "$T/none.model"
# a tokenizer without an EOS cannot append one
mkdir -p "$T/noeos"
cp $TK/hf-qwen/tokenizer.json "$T/noeos/"
run_expect "--append-eod without an eos_token" 1 "the tokenizer has no EOD" \
    $MDSPREP --input $C/tiny.jsonl --output-prefix "$T/o" --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$T/noeos" --append-eod
$MDSPREP -q --input $C/tiny.jsonl --output-prefix "$T/ne" --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$T/noeos"
check "without --append-eod it runs" test -s "$T/ne_text_document.bin"
finish
