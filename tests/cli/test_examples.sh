#!/bin/sh
# test_examples.sh - examples/1.preprocess.sbatch and examples/2.train.sbatch
# outside Slurm (`sh SCRIPT`), from another directory: the tools and the
# bundled sample are found from the script's location, arguments after the
# script reach the tool and win over the defaults, relative paths are the
# caller's, and a rank count that is not a multiple of TP x PP is refused
# before anything starts.  `make test-slurm` runs them through sbatch.
. tests/cli/lib.sh
ROOT=$(pwd)
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
unset SLURM_JOB_ID SLURM_NTASKS SLURM_PROCID MASTER_ADDR MASTER_PORT RANK WORLD_SIZE MDS_HOME
# the scripts find build/ from their own location; another build directory
# (build/san under SAN=...) is given to them as a site points them at its install
if [ "$(cd "$BUILD" && pwd)" != "$ROOT/build" ]; then
    MDSPREP=$(cd "$BUILD" && pwd)/mdsprep MDSTRAIN=$(cd "$BUILD" && pwd)/mdstrain
    export MDSPREP MDSTRAIN
fi
check parses_1 sh -n examples/1.preprocess.sbatch
check parses_2 sh -n examples/2.train.sbatch
check parses_3 sh -n examples/3.train-llama.sbatch
if ! have lzma; then skip examples "liblzma not built in (the bundled sample is .xz)"; finish; fi
"$BUILD/mdsprep" -q --input examples/sample.jsonl.xz --output-prefix "$T/direct" --append-eod
mkdir -p "$T/w"
(cd "$T/w" && sh "$ROOT/examples/1.preprocess.sbatch" -q)
check prep_exit0 test $? -eq 0
same "$T/direct_text_document" "$T/w/data/sample_text_document" prep_same_as_direct
(cd "$T/w" && OUTPUT=sub/x sh "$ROOT/examples/1.preprocess.sbatch" -q --input "$ROOT/tests/data/corpus/tiny.jsonl")
check prep_input_argument_replaces_default test "$("$BUILD/mdsinspect" info "$T/w/sub/x_text_document" --json |
    sed -n 's/.*"documents": *\([0-9]*\).*/\1/p')" = 210
# training: the arguments win (2 layers, 3 iterations), one process
(cd "$T/w" && NP=1 TP=1 PP=1 sh "$ROOT/examples/2.train.sbatch" --num-layers 2 --hidden-size 32 \
    --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --micro-batch-size 1 \
    --global-batch-size 2 --train-iters 3 --lr-warmup-iters 1 --log-interval 1 --eval-iters 0 >"$T/train.log" 2>"$T/train.err")
check train_exit0 test $? -eq 0
check train_arguments_win grep -q '^| num layers  *| 2 ' "$T/train.err"
check train_three_iterations test "$(grep -c '] iteration ' "$T/train.log")" -eq 3
check train_relative_save test -f "$T/w/checkpoints/gpt-small/latest_checkpointed_iteration.txt"
check train_relative_tensorboard sh -c "ls '$T/w/tensorboard/gpt-small/' | grep -q '^events.out.tfevents'"
# the Llama script: 2.train.sbatch with Llama 3's model flags, the arguments still win
(cd "$T/w" && NP=1 TP=1 PP=1 sh "$ROOT/examples/3.train-llama.sbatch" --num-layers 2 --hidden-size 32 \
    --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --micro-batch-size 1 \
    --global-batch-size 2 --train-iters 3 --lr-warmup-iters 1 --log-interval 1 --eval-iters 0 >"$T/llama.log" 2>"$T/llama.err")
check llama_exit0 test $? -eq 0
check llama_three_iterations test "$(grep -c '] iteration ' "$T/llama.log")" -eq 3
check llama_model grep -q 'RMSNorm' "$T/llama.err"
check llama_own_save test -f "$T/w/checkpoints/llama-small/latest_checkpointed_iteration.txt"
(cd "$T/w" && NP=3 TP=2 PP=2 sh "$ROOT/examples/2.train.sbatch" >"$T/o" 2>"$T/e")
check ranks_not_multiple_exit2 test $? -eq 2
check ranks_not_multiple_message grep -q '^2.train.sbatch: 3 tasks are not a multiple of TP x PP = 2 x 2$' "$T/e"
(cd "$T/w" && NP=2 TP=1 PP=1 sh "$ROOT/examples/2.train.sbatch" --tensor-model-parallel-size=4 >"$T/o" 2>"$T/e")
check ranks_tp_argument_counts test $? -eq 2
finish
