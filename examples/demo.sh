#!/bin/sh
# demo.sh - the main job end to end on the bundled sample (run by `make demo`):
# preprocess examples/sample.jsonl.xz (210 documents, many languages) with the
# bundled GPT-2 vocabulary, then inspect the dataset.  Nothing is downloaded.
set -e
BUILD=${BUILD:-build}
OUT=${OUT:-$BUILD/demo}
mkdir -p "$OUT"
echo "== mdsprep: examples/sample.jsonl.xz -> $OUT/sample_text_document.{bin,idx}"
if "$BUILD/mdsprep" --version | grep -q 'inputs: [^;]*xz'; then
    set -x
    "$BUILD/mdsprep" --input examples/sample.jsonl.xz --output-prefix "$OUT/sample" \
        --tokenizer-type GPT2BPETokenizer --append-eod --workers 2 --log-interval 50
    { set +x; } 2>/dev/null
else   # a build without liblzma: xz decompresses, mdsprep reads stdin
    set -x
    xz -dc examples/sample.jsonl.xz | "$BUILD/mdsprep" --input - --output-prefix "$OUT/sample" \
        --tokenizer-type GPT2BPETokenizer --append-eod --workers 2 --log-interval 50
    { set +x; } 2>/dev/null
fi
ls -l "$OUT"/sample_text_document.*
if [ -x "$BUILD/mdsinspect" ]; then
    echo "== mdsinspect"
    set -x
    "$BUILD/mdsinspect" info "$OUT/sample_text_document"
    "$BUILD/mdsinspect" verify "$OUT/sample_text_document"
    "$BUILD/mdsinspect" dump "$OUT/sample_text_document" --doc 0 --text | head -c 600
    { set +x; } 2>/dev/null
    echo
else
    echo "== .idx header (mdsinspect not built yet)"
    od -A d -t x1 -N 34 "$OUT/sample_text_document.idx"
fi
if [ -x "$BUILD/mdstrain" ]; then
    echo "== mdstrain: a tiny GPT, 5 CPU steps on the dataset just made"
    set -x
    OMP_WAIT_POLICY=passive "$BUILD/mdstrain" --data-path "$OUT/sample_text_document" --split 949,50,0 \
        --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64 \
        --micro-batch-size 2 --global-batch-size 4 --train-iters 5 --lr 1e-3 --log-interval 1 \
        --eval-interval 5 --eval-iters 1
    { set +x; } 2>/dev/null
    if command -v mpirun >/dev/null 2>&1 && "$BUILD/mdstrain" --version | grep -q 'MPI ('; then
        echo "== mdstrain on 4 MPI ranks: tensor parallel 2 x pipeline parallel 2 (1F1B), the same steps"
        echo "   (TP2 pads the vocabulary to a multiple of 128 x 2 = 50432, as Megatron does, so the losses differ a little)"
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
        export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_hwloc_base_binding_policy=none
        set -x
        OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive mpirun -np 4 "$BUILD/mdstrain" -q \
            --data-path "$OUT/sample_text_document" --split 949,50,0 \
            --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64 \
            --micro-batch-size 2 --global-batch-size 4 --train-iters 5 --lr 1e-3 --log-interval 1 \
            --eval-interval 5 --eval-iters 1 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
        { set +x; } 2>/dev/null
    fi
fi
echo "== demo done"
