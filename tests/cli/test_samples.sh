#!/bin/sh
# test_samples.sh - mdsinspect samples: Megatron's GPT index arrays for the
# golden configs B1/B2 (dev, L=128, 3 epochs; too big to keep, so only
# their sha256 sums are in tests/data/indices/B*/meta.json), in both the
# v0.8.0 and the main flavour, checked through the .npy cache files it
# writes under Megatron's names; cache reuse; a sample shown as ids; the
# empty-split guard (Megatron loops forever there); usage errors;
# --mock-data against numpy-made reference values; --show-masks with the
# EOD mask/reset flags; per-split data paths (--train-data-path ...)
# against config E, written by Megatron-Core itself.
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
run_expect bad-version 2 "must be main or 0.8" $I samples --data-path golden/tiny_text_document \
    --seq-length 8 --train-samples 10 --megatron-version 0.9
run_expect show-range 1 "out of range" $I samples --data-path golden/tiny_text_document --seq-length 64 \
    --split 1 --train-samples 10 --show 100000
# --mock-data (MockGPTDataset) against tests/data/mock/reference.txt, made
# with numpy by tests/data/mock/make_reference.py: the cache arrays
# byte for byte, the description md5 and the first samples
REF=$ROOT/tests/data/mock/reference.txt
MV="--vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt"
# check_mock NAME SPLIT DIR: the three .npy of SPLIT in DIR against REF
check_mock() {
    md5=$(awk -v n="$1" '$1 == n && $2 == "md5" {print $3}' "$REF")
    for a in document_index sample_index shuffle_index; do
        want=$(awk -v n="$1" -v a="$a" '$1 == n && $2 == a {print $3}' "$REF")
        got=$(sha256sum "$3/$md5-MockGPTDataset-$2-$a.npy" 2>/dev/null | cut -d' ' -f1)
        [ -n "$want" ] && [ "$got" = "$want" ] || { echo "    $1 $a: '$got' != '$want'" >&2; return 1; }
    done
}
$I samples --mock-data --seq-length 1024 --train-samples 100000 --valid-samples 0 --test-samples 0 \
    --split 98,2,0 $MV --cache c-mock >out 2>err
check mock-runs [ $? -eq 0 ]
check mock-plan grep -q '^datasets: 1 (mock), seq_length 1024, seed 1234, split "1,1,1"' out
check mock-split grep -q '^  \[0\] sequences \[0, 33333)  tokens/epoch 68190290  num_samples 100000  epochs 2 (separate final epoch)  length 133184  f59ed1e83dcad0333e34be4cd0f6c267' out
check mock-t1024-arrays check_mock t1024 train c-mock
$I samples --mock-data --seq-length 512 --seed 7 --train-samples 10 --valid-samples 1000 --test-samples 0 \
    $MV --cache c-mock >out 2>err
check mock-v512-arrays check_mock v512 valid c-mock
$I samples --mock-data --seq-length 1024 --train-samples 100000 --valid-samples 0 --test-samples 0 \
    $MV --cache c-mock >out 2>err
check mock-cached [ "$(grep -c ' cached$' out)" -eq 3 ]
mock_ok=1
for k in 0 1 2 3 4; do
    got=$($I samples --mock-data --seq-length 1024 --train-samples 100000 --valid-samples 0 --test-samples 0 \
        --show $k -q | awk '{s = 0; for (i = 1; i <= NF; i++) s += $i; print "sum", s, "first", $1, $2, $3, $4, $5, $6}')
    grep -q "^t1024 sample $k $got\$" "$REF" || { echo "    mock sample $k: $got" >&2; mock_ok=0; }
done
check mock-samples [ $mock_ok -eq 1 ]
run_expect mock-and-path 2 "--mock-data and --data-path are exclusive" $I samples --mock-data --data-path golden/tiny_text_document \
    --seq-length 8 --train-samples 10

# --show-masks with Megatron's --eod-mask-loss / --reset-position-ids /
# --reset-attention-mask: tiny's train sample 3 (L=32) has an EOD at input 3
S="--data-path golden/tiny_text_document --seq-length 32 --split 1 --train-samples 20 --show 3 -q --show-masks"
$I samples $S >out 2>err
check masks-plain grep -qx 'loss_mask: 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1' out
check masks-plain-pos grep -qx 'position_ids: 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31' out
check masks-tokens grep -q '^tokens: 262 2393 13 50256 2215 ' out
check masks-labels grep -q '^labels: 2393 13 50256 2215 .* 3712 198$' out
$I samples $S --eod-mask-loss --reset-position-ids --reset-attention-mask >out 2>err
check masks-eod-loss grep -qx 'loss_mask: 1 1 1 0 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1' out
check masks-reset-pos grep -qx 'position_ids: 0 1 2 3 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27' out
check masks-reset-att grep -qx 'attention_start: 0 0 0 0 4 4 4 4 4 4 4 4 4 4 4 4 4 4 4 4 4 4 4 4 4 4 4 4 4 4 4 4' out
$I samples $S --reset-position-ids >out 2>err
check masks-only-pos grep -qx 'attention_start: 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0' out
# Per-split data paths (Megatron's blend_per_split) against config E, which
# Megatron-Core 0.16.1 wrote (tests/data/README.md): every cache file of
# ours, named by the md5 of its description, holds E's bytes
E=$ROOT/tests/data/indices/E
PS="--train-data-path 0.7 golden/tiny_text_document 0.3 golden/edge_text_document
    --valid-data-path golden/edge_text_document
    --test-data-path golden/tiny_text_document golden/edge_text_document
    --seq-length 256 --train-samples 3000 --valid-samples 200 --test-samples 50
    --vocab-file vocab/gpt2-vocab.json --merge-file vocab/gpt2-merges.txt"
$I samples $PS --cache c-e >out 2>err
check per-split-runs [ $? -eq 0 ]
check per-split-plan grep -q '^valid: 200 samples asked, length 5786' out
check per-split-owner grep -q '^  \[2\] weight 1  golden/edge_text_document  (65 sequences)  valid$' out
# same_as_e: each E/{name}-{split}-description.txt, found in c-e by its md5,
# with the same bytes in every array next to it
same_as_e() {
    bad=0 n=0
    for d in "$E"/*-description.txt; do
        base=$(basename "$d" -description.txt); split=${base#*-}; name=${base%%-*}
        cls=GPTDataset; [ "$name" = blend ] && cls=BlendedDataset
        h=$(md5sum <"$d" | cut -d' ' -f1)
        for f in "$E/$base"-*; do
            got=c-e/$h-$cls-$split-${f#"$E/$base"-}
            cmp -s "$f" "$got" || { echo "    $f != $got" >&2; bad=1; }
            n=$((n + 1))
        done
    done
    [ $bad -eq 0 ] && [ $n -eq 26 ] && [ "$(ls c-e | wc -l)" -eq 26 ]
}
check per-split-megatron-bytes same_as_e
$I samples $PS >out2 2>err
check per-split-deterministic sh -c "sed 's/built+cached/built/' out | diff - out2"
# the lone valid prefix is, sample for sample, --data-path P --split 0,1,0
V="--seq-length 256 --train-samples 3000 --valid-samples 200 --test-samples 50 --show-split valid -q"
same_samples=1
for k in 0 1 57 199; do
    a=$($I samples --valid-data-path golden/edge_text_document $V --show $k 2>&1)
    b=$($I samples --data-path golden/edge_text_document --split 0,1,0 $V --show $k 2>&1)
    [ -n "$a" ] && [ "$a" = "$b" ] || same_samples=0
done
check per-split-valid-equals-split-010 [ $same_samples -eq 1 ]
run_expect per-split-with-data-path 2 "and --data-path are exclusive" $I samples --data-path golden/tiny_text_document \
    --train-data-path golden/tiny_text_document --seq-length 8 --train-samples 10
run_expect per-split-with-split 2 "--split does not apply" $I samples --train-data-path golden/tiny_text_document \
    --split 1,0,0 --seq-length 8 --train-samples 10
run_expect per-split-with-mock 2 "and --mock-data are exclusive" $I samples --mock-data \
    --valid-data-path golden/tiny_text_document --seq-length 8 --train-samples 10
run_expect per-split-no-path 2 "needs at least one path" $I samples --train-data-path --seq-length 8 --train-samples 10
run_expect per-split-show-absent 1 "out of range: the train split has 0" $I samples \
    --valid-data-path golden/tiny_text_document --seq-length 8 --train-samples 10 --show 0
finish
