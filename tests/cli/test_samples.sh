#!/bin/sh
# test_samples.sh - mdsinspect samples: Megatron's GPT index arrays for the
# golden configs B1/B2 (dev, L=128, 3 epochs; too big to keep, so only
# their sha256 sums are in tests/data/indices/B*/meta.json), in both the
# v0.8.0 and the main flavour, checked through the .npy cache files it
# writes under Megatron's names; cache reuse; a sample shown as ids; the
# empty-split guard (Megatron loops forever there); usage errors.
#
# The dev .bin is not in tests/data: a sparse file of Σ lengths × 2 bytes
# stands next to a link to the .idx (building indices reads only the .idx).
. tests/cli/lib.sh
case $MDSINSPECT in /*) I=$MDSINSPECT ;; *) I=$(pwd)/$MDSINSPECT ;; esac
ROOT=$(pwd)
check "index fixtures intact" sh -c 'cd tests/data/indices && sha256sum -c --quiet SHA256SUMS'
mkdir -p "$T/run/golden"
for n in tiny edge; do
    ln -s "$ROOT/tests/data/golden/${n}_text_document.idx" "$ROOT/tests/data/golden/${n}_text_document.bin" "$T/run/golden/"
done
ln -s "$ROOT/tests/data/golden/dev_text_document.idx" "$T/run/golden/"
# Σ lengths: int32 at offset 34, N of them (N = u64 at offset 18)
N=$(od -An -t u8 -j 18 -N 8 tests/data/golden/dev_text_document.idx | tr -d ' ')
TOK=$(od -An -v -t u4 -j 34 -N $((N * 4)) tests/data/golden/dev_text_document.idx | tr -s ' ' '\n' | awk '{s += $1} END {print s}')
truncate -s $((TOK * 2)) "$T/run/golden/dev_text_document.bin"
cd "$T/run" || exit 1

# check_meta CONFIG FLAVOUR-DIR CACHE: every array of meta.json against
# the cache file of the same split and name
check_meta() {
    awk '/"file":/ {gsub(/[",]/, "", $2); f = $2} /"sha256":/ {gsub(/[",]/, "", $2); print f, $2}' \
        "$ROOT/tests/data/indices/$1/$2meta.json" | {
        bad=0
        while read -r f sum; do
            rest=${f#dev-}; split=${rest%%-*}; name=${rest#*-}
            got=$(sha256sum "$3"/*-GPTDataset-"$split"-"$name" | cut -d' ' -f1)
            [ "$got" = "$sum" ] || { echo "    $1 $2$f: $got != $sum" >&2; bad=1; }
        done
        return $bad
    }
}

B="--data-path golden/dev_text_document --seq-length 128 --seed 42 --split 98,2,0 --test-samples 1280
   --vocab-file vocab/gpt2-vocab.json --merge-file vocab/gpt2-merges.txt"
$I samples $B --train-samples 324319 --valid-samples 6700 --cache c-b1-08 --megatron-version 0.8 >out 2>err
check b1-v080-runs [ $? -eq 0 ]
check b1-v080-sha256 check_meta B1 "" c-b1-08
check b1-md5 grep -q '9dfff4b64800026c2a1ed8644856000b built+cached' out
check b1-split-none grep -q '^test: none' out
$I samples $B --train-samples 324319 --valid-samples 6700 --cache c-b1-main >out 2>err
check b1-main-sha256 check_meta B1 main/ c-b1-main
$I samples $B --train-samples 324318 --valid-samples 6699 --cache c-b2-08 --megatron-version 0.8 >out 2>err
check b2-v080-sha256 check_meta B2 "" c-b2-08
check b2-separate grep -q 'epochs 3 (separate final epoch)' out
$I samples $B --train-samples 324318 --valid-samples 6699 --cache c-b2-main >out 2>err
check b2-main-sha256 check_meta B2 main/ c-b2-main

# a second run maps the cache instead of building
$I samples $B --train-samples 324318 --valid-samples 6699 --cache c-b2-main >out 2>err
check cache-reused [ "$(grep -c ' cached$' out)" -eq 2 ]

# C: sample 0 comes from tiny (real tokens): first ids of the golden JSON
C="--data-path 0.3 golden/dev_text_document 0.7 golden/tiny_text_document --seq-length 256 --split 98,1,1
   --train-samples 5000 --valid-samples 100 --test-samples 10"
$I samples $C --show 0 -q >out 2>err
check c-show-0 grep -q '^244 140 117 22177 18849 141 227 12466 119 16142 ' out
check c-show-len [ "$(wc -w <out)" -eq 257 ]
$I samples $C --show 3 >out 2>err
check c-show-origin grep -q '^sample 3 of train: dataset 1 ' out
check c-plan grep -q '^train: 5000 samples asked, length 5000' out
# --train-iters × --global-batch-size and the eval formula: (1000 // 500 + 1) × 2 × 5
$I samples --data-path golden/tiny_text_document --seq-length 64 --split 98,1,1 --train-iters 1000 \
    --global-batch-size 5 --eval-iters 2 --eval-interval 500 >out 2>err
check counts-from-iters grep -q '^valid: 30 samples asked' out

# C969: tiny's test split is empty -> clear error, not an endless loop
run_expect empty-split 1 "test split of 'golden/tiny_text_document' holds no tokens.*loop forever" \
    $I samples --data-path 0.3 golden/dev_text_document 0.7 golden/tiny_text_document --seq-length 256 \
    --split 969,30,1 --train-samples 5000 --valid-samples 100 --test-samples 10
run_expect no-seq-length 2 "needs --seq-length" $I samples --data-path golden/tiny_text_document --train-samples 10
run_expect bad-version 2 "needs 'main' or '0.8'" $I samples --data-path golden/tiny_text_document \
    --seq-length 8 --train-samples 10 --megatron-version 0.9
run_expect show-range 1 "out of range" $I samples --data-path golden/tiny_text_document --seq-length 64 \
    --split 1 --train-samples 10 --show 100000
finish
