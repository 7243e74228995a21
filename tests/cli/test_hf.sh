#!/bin/sh
# test_hf.sh - HuggingFace folders both ways (--export-hf, --load-hf) against
# the fixtures that tests/reference/make_hf_fixtures.py recorded with the
# real transformers (tests/data/README.md):
#  - export: the same 3-iteration GPT, Llama (GQA, untied, RMSNorm,
#    SwiGLU, RoPE), Llama (tied, biases) and Llama (interleaved RoPE, whose
#    q/k rows are permuted, Llama 3.1 scaling) checkpoints as the recording; mdstrain's own forward on
#    them gives transformers' logits on the exported folder within 1e-4
#    (--check-logits), and so does mdstrain on the folder re-imported;
#  - TP2, PP2, TP2 x PP2: the folder imported into 2 or 4 processes, saved after an
#    iteration at lr 0 (weights unchanged), exports bitwise the same folder;
#  - import: the folders transformers itself saved give transformers'
#    logits; training from one gives the same losses at TP1 and TP2;
#  - tokenizer files with GPT2BPETokenizer, none with NullTokenizer;
#  - bad files and mismatching flags: one line naming the file, tensor or
#    field, exit 1 (usage errors exit 2).
# About 20 s.
. tests/cli/lib.sh
MDSTRAIN=${MDSTRAIN:-$BUILD/mdstrain}
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
no_launcher_env
D=tests/data/hf

# the flags of make_hf_fixtures.py
GPT="--tokenizer-type NullTokenizer --vocab-size 250 --make-vocab-size-divisible-by 8
     --num-layers 2 --hidden-size 32 --num-attention-heads 4 --max-position-embeddings 16"
LLAMA="$GPT --position-embedding-type rope --normalization RMSNorm --swiglu --ffn-hidden-size 48
       --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights --disable-bias-linear"
LLAMA_BIAS="$GPT --position-embedding-type rope --rotary-base 500 --normalization RMSNorm --swiglu --ffn-hidden-size 40"
LLAMA_INTERLEAVED="$GPT --position-embedding-type rope --rotary-interleaved --use-rope-scaling --rope-scaling-factor 8
                   --normalization RMSNorm --swiglu --ffn-hidden-size 40 --group-query-attention --num-query-groups 2"
flags() {
    case $1 in gpt) echo "$GPT" ;; llama) echo "$LLAMA" ;; llama_bias) echo "$LLAMA_BIAS" ;; *) echo "$LLAMA_INTERLEAVED" ;; esac
}
TRAIN="--mock-data --seq-length 16 --micro-batch-size 2 --train-iters 3 --lr 1e-2 --log-interval 1 --eval-iters 0 -q"
G2="--tokenizer-type NullTokenizer --vocab-size 96 --make-vocab-size-divisible-by 16
    --num-layers 2 --hidden-size 32 --num-attention-heads 4 --max-position-embeddings 16"
L2="$G2 --position-embedding-type rope --normalization RMSNorm --swiglu --ffn-hidden-size 48
    --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights --disable-bias-linear"

# logits NAME FLAGS...: --check-logits exits 0 with "logits match"
logits() {
    name=$1; shift
    "$MDSTRAIN" "$@" >"$T/out" 2>"$T/err"
    rc=$?
    if [ "$rc" -eq 0 ] && grep -q '^logits match' "$T/out"; then ok "$name"
    else fail "$name (exit $rc)"; cat "$T/out" "$T/err" | sed 's/^/    /' >&2; fi
}

# ---- export: mdstrain's forward = transformers' on the exported folder ----
for m in gpt llama llama_bias llama_interleaved; do
    F=$(flags $m)
    # shellcheck disable=SC2086
    "$MDSTRAIN" $F $TRAIN --save "$T/$m" >/dev/null 2>"$T/err" || { fail "${m}_train"; cat "$T/err" >&2; }
    # shellcheck disable=SC2086
    run_expect "${m}_export" 0 "exported iteration 3" "$MDSTRAIN" $F --load "$T/$m" --export-hf "$T/${m}_hf"
    check "${m}_export_files" test -s "$T/${m}_hf/config.json" -a -s "$T/${m}_hf/model.safetensors" \
        -a ! -e "$T/${m}_hf/vocab.json" -a ! -e "$T/${m}_hf/model.safetensors.tmp"
    # shellcheck disable=SC2086
    logits "${m}_export_logits_as_transformers" $F --load "$T/$m" --check-logits "$D/export_$m.logits"
    # shellcheck disable=SC2086
    logits "${m}_export_reimported" $F --load-hf "$T/${m}_hf" --check-logits "$D/export_$m.logits"
done
check gpt_config_gpt2 grep -q '"architectures": \["GPT2LMHeadModel"\]' "$T/gpt_hf/config.json"
check gpt_config_gelu_new grep -q '"activation_function": "gelu_new"' "$T/gpt_hf/config.json"
check llama_config grep -q '"num_key_value_heads": 2' "$T/llama_hf/config.json"
check llama_config_untied grep -q '"tie_word_embeddings": false' "$T/llama_hf/config.json"
check llama_bias_config grep -q '"attention_bias": true' "$T/llama_bias_hf/config.json"
check llama_interleaved_scaling grep -q '"rope_scaling": {"rope_type": "llama3", "factor": 8.0, ' "$T/llama_interleaved_hf/config.json"
# the folder is rotate_half's layout: it also runs in a model without --rotary-interleaved
# shellcheck disable=SC2086
logits llama_interleaved_as_rotate_half $(echo $LLAMA_INTERLEAVED | sed 's/--rotary-interleaved//') \
    --load-hf "$T/llama_interleaved_hf" --check-logits "$D/export_llama_interleaved.logits"
# shellcheck disable=SC2086
run_expect config_rope_scaling 1 "rope_scaling factor is 8 in the folder but 0 in this run" \
    "$MDSTRAIN" $(echo $LLAMA_INTERLEAVED | sed 's/--use-rope-scaling//') --load-hf "$T/llama_interleaved_hf" \
    --check-logits "$D/export_llama_interleaved.logits"
check llama_bias_tensors grep -q 'model.layers.1.mlp.down_proj.bias' "$T/llama_bias_hf/model.safetensors"

# a checkpoint one iteration further does not pass as the recorded one
# shellcheck disable=SC2086
"$MDSTRAIN" $GPT $TRAIN --train-iters 4 --save "$T/gpt4" >/dev/null 2>&1
# shellcheck disable=SC2086
run_expect check_logits_can_fail 1 "" "$MDSTRAIN" $GPT --load "$T/gpt4" --check-logits "$D/export_gpt.logits"
check check_logits_says_differ grep -q '^logits differ' "$T/out"

# ---- TP2, PP2, TP2 x PP2: import, save unchanged (lr 0), export: the same bytes ----
# two NAME FLAGS...: 2 ranks (NP=4: 4) over TCP (torchrun's variables); rc the worst exit
two() {
    name=$1; shift
    pids=""
    np=${NP:-2}
    for _ in 1 2 3; do
        next_port
        pids=""
        for i in $(seq 0 $((np - 1))); do
            RANK=$i WORLD_SIZE=$np LOCAL_RANK=$i MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT MDS_RENDEZVOUS_TIMEOUT=20 \
                timeout -s KILL 120 "$MDSTRAIN" "$@" >"$T/$name.$i.log" 2>"$T/$name.$i.err" &
            pids="$pids $!"
        done
        rc=0
        for p in $pids; do wait "$p"; r=$?; [ "$r" -gt "$rc" ] && rc=$r; done
        grep -q 'cannot listen at' "$T/$name.0.err" || break
    done
}
ZERO="--mock-data --seq-length 16 --micro-batch-size 1 --global-batch-size 2 --train-iters 1 --lr 0 --eval-iters 0 -q"
for m in gpt llama llama_bias llama_interleaved; do
    F=$(flags $m)
    for lay in tp2 pp2 tp2pp2; do
        [ $m = llama_interleaved ] && [ $lay != tp2 ] && continue
        case $lay in
            tp2) P="--tensor-model-parallel-size 2" NP=2 ;;
            pp2) P="--pipeline-model-parallel-size 2" NP=2 ;;
            *) P="--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2" NP=4 ;;
        esac
        # shellcheck disable=SC2086
        NP=$NP two "${m}_$lay" $F $P $ZERO --load-hf "$T/${m}_hf" --save "$T/${m}_$lay"
        # shellcheck disable=SC2086
        "$MDSTRAIN" $F $P --load "$T/${m}_$lay" --export-hf "$T/${m}_${lay}_hf" 2>"$T/err"
        if [ "$rc" -eq 0 ] && cmp -s "$T/${m}_hf/model.safetensors" "$T/${m}_${lay}_hf/model.safetensors" &&
            cmp -s "$T/${m}_hf/config.json" "$T/${m}_${lay}_hf/config.json"; then ok "${m}_${lay}_export_bitwise"
        else fail "${m}_${lay}_export_bitwise (exit $rc)"; cat "$T/${m}_$lay".*.err "$T/err" >&2; fi
    done
done

# ---- import: folders saved by transformers give transformers' logits ----
logits gpt2_import_logits $G2 --load-hf "$D/gpt2_tiny" --check-logits "$D/gpt2_tiny.logits"
# the same GPT-2 weights in the hub's gpt2 layout (GPT2Model names, attn.bias mask buffers)
logits gpt2_hub_layout_import_logits $G2 --load-hf "$D/gpt2_tiny_hub" --check-logits "$D/gpt2_tiny.logits"
logits llama_import_logits $L2 --load-hf "$D/llama_tiny" --check-logits "$D/llama_tiny.logits"
# a padded vocabulary larger than the folder's: the padding rows start at 0, the real logits are the same
# shellcheck disable=SC2086
logits gpt2_import_padded $(echo $G2 | sed 's/divisible-by 16/divisible-by 64/') --load-hf "$D/gpt2_tiny" \
    --check-logits "$D/gpt2_tiny.logits"

# training from an imported folder: TP2's losses are TP1's
RUN="--mock-data --seq-length 16 --micro-batch-size 1 --global-batch-size 2 --train-iters 4 --lr 1e-3
     --log-interval 1 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 -q -v -v"
losses() { cat "$@" | sed -n 's/^ \[rank [0-9]*\] lm loss \([^ ]*\) grad norm .*$/\1/p'; }
for m in gpt2 llama; do
    if [ $m = gpt2 ]; then F=$G2; else F=$L2; fi
    # shellcheck disable=SC2086
    "$MDSTRAIN" $F $RUN --load-hf "$D/${m}_tiny" >"$T/${m}_tp1.log" 2>"$T/err"
    # shellcheck disable=SC2086
    two "${m}_tp2run" $F $RUN --load-hf "$D/${m}_tiny" --tensor-model-parallel-size 2
    losses "$T/${m}_tp1.log" >"$T/a"
    losses "$T/${m}_tp2run".*.log >"$T/b"
    # shellcheck disable=SC2086
    "$MDSTRAIN" $F $RUN >"$T/${m}_fresh.log" 2>/dev/null
    losses "$T/${m}_fresh.log" >"$T/c"
    if [ "$rc" -eq 0 ] && [ "$(wc -l <"$T/a")" -eq 4 ] && paste -d' ' "$T/a" "$T/b" | awk '
        { d = $1 - $2; if (d < 0) d = -d; if (d > 2e-7 * ($1 < 0 ? -$1 : $1)) bad = 1 } END { exit bad }' &&
        ! cmp -s "$T/a" "$T/c"; then ok "${m}_import_tp2_losses_as_tp1"
    else fail "${m}_import_tp2_losses_as_tp1 (exit $rc)"; paste "$T/a" "$T/b" "$T/c" >&2; fi
done
# --load with a checkpoint wins over --load-hf (resume); without one, the folder is the start
# shellcheck disable=SC2086
"$MDSTRAIN" $G2 $RUN --exit-interval 2 --load-hf "$D/gpt2_tiny" --save "$T/resume" >/dev/null 2>&1
# shellcheck disable=SC2086
run_expect load_hf_then_resume 0 "successfully loaded checkpoint" \
    "$MDSTRAIN" $G2 $RUN --load "$T/resume" --load-hf "$D/gpt2_tiny" --save "$T/resume"
check load_hf_not_after_resume sh -c "! grep -q 'HuggingFace folder' '$T/err'"

# ---- tokenizer files ----
TOKM="--num-layers 1 --hidden-size 16 --num-attention-heads 2 --max-position-embeddings 8 --make-vocab-size-divisible-by 1"
# shellcheck disable=SC2086
"$MDSTRAIN" $TOKM --mock-data --seq-length 8 --micro-batch-size 1 --train-iters 1 --lr 1e-3 --eval-iters 0 -q \
    --save "$T/bpe" >/dev/null 2>&1
# shellcheck disable=SC2086
run_expect gpt2_tokenizer_export 0 "" "$MDSTRAIN" $TOKM --load "$T/bpe" --export-hf "$T/bpe_hf"
check gpt2_tokenizer_vocab cmp -s "$T/bpe_hf/vocab.json" vocab/gpt2-vocab.json
check gpt2_tokenizer_merges cmp -s "$T/bpe_hf/merges.txt" vocab/gpt2-merges.txt
check gpt2_tokenizer_config grep -q '"tokenizer_class": "GPT2Tokenizer"' "$T/bpe_hf/tokenizer_config.json"
check gpt2_tokenizer_eos grep -q '"eos_token_id": 50256' "$T/bpe_hf/config.json"
check gpt2_tokenizer_vocab_size grep -q '"vocab_size": 50257' "$T/bpe_hf/config.json"

# ---- errors: one line naming the file / tensor / field ----
# header FILE OUT SED-EXPR: OUT is FILE with its JSON header edited (same length)
header() {
    n=$(od -An -t u8 -j0 -N8 "$1" | tr -d ' ')
    head -c 8 "$1" >"$2"
    head -c $((8 + n)) "$1" | tail -c "$n" | sed "$3" >>"$2"
    tail -c +$((9 + n)) "$1" >>"$2"
}
bad() {   # NAME: a copy of the gpt2 fixture folder in $T/NAME
    rm -rf "${T:?}/$1"; mkdir "$T/$1"; cp "$D/gpt2_tiny/config.json" "$T/$1/"
}
S=$D/gpt2_tiny/model.safetensors
bad shape; header "$S" "$T/shape/model.safetensors" 's/"shape":\[32,96\]/"shape":[96,32]/'
run_expect bad_shape 1 "^mdstrain: rank 0: cannot import: '.*shape/model.safetensors': tensor 'transformer.h.0.attn.c_attn.weight' has shape \[96, 32\], expected \[32, 96\]$" \
    "$MDSTRAIN" $G2 --load-hf "$T/shape" --check-logits "$D/gpt2_tiny.logits"
bad missing; header "$S" "$T/missing/model.safetensors" 's/transformer.ln_f.bias/transformer.ln_f.bia_/'
run_expect missing_tensor 1 "'.*missing/model.safetensors': missing tensor 'transformer.ln_f.bias'$" \
    "$MDSTRAIN" $G2 --load-hf "$T/missing" --check-logits "$D/gpt2_tiny.logits"
bad trunc; head -c 100 "$S" >"$T/trunc/model.safetensors"
run_expect truncated_header 1 "'.*trunc/model.safetensors': truncated header \([0-9]+ bytes announced, 92 in the file\)$" \
    "$MDSTRAIN" $G2 --load-hf "$T/trunc" --check-logits "$D/gpt2_tiny.logits"
bad short; head -c -4 "$S" >"$T/short/model.safetensors"
run_expect truncated_data 1 "'.*short/model.safetensors': tensors end at data offset [0-9]+ but the file holds [0-9]+ data bytes \(truncated\)$" \
    "$MDSTRAIN" $G2 --load-hf "$T/short" --check-logits "$D/gpt2_tiny.logits"
bad json; header "$S" "$T/json/model.safetensors" 's/"dtype"/"dtype /'
run_expect bad_json 1 "'.*json/model.safetensors': header is not valid JSON" \
    "$MDSTRAIN" $G2 --load-hf "$T/json" --check-logits "$D/gpt2_tiny.logits"
bad dtype; header "$S" "$T/dtype/model.safetensors" 's/"F32"/"I32"/'
run_expect bad_dtype 1 "tensor '.*': dtype I32 is not supported \(F32, F16 or BF16\)$" \
    "$MDSTRAIN" $G2 --load-hf "$T/dtype" --check-logits "$D/gpt2_tiny.logits"
bad cfgjson; cp "$S" "$T/cfgjson/"; printf '{"model_type": "gpt2",' >"$T/cfgjson/config.json"
run_expect bad_config_json 1 "'.*cfgjson/config.json': not valid JSON \\(line 1, column 23: unexpected end of input\\)$" \
    "$MDSTRAIN" $G2 --load-hf "$T/cfgjson" --check-logits "$D/gpt2_tiny.logits"
# shellcheck disable=SC2086
run_expect config_mismatch 1 "'.*gpt2_tiny/config.json': n_layer is 2 in the folder but 3 in this run \(--num-layers\)$" \
    "$MDSTRAIN" $(echo $G2 | sed 's/--num-layers 2/--num-layers 3/') --load-hf "$D/gpt2_tiny" --check-logits "$D/gpt2_tiny.logits"
run_expect config_other_model 1 "'.*llama_tiny/config.json': model_type is \"llama\" in the folder but \"gpt2\"" \
    "$MDSTRAIN" $G2 --load-hf "$D/llama_tiny" --check-logits "$D/llama_tiny.logits"
# shellcheck disable=SC2086
run_expect config_vocab 1 "vocab_size is 96 in the folder but this run needs 100 to 112" \
    "$MDSTRAIN" $(echo $G2 | sed 's/--vocab-size 96/--vocab-size 100/') --load-hf "$D/gpt2_tiny" \
    --check-logits "$D/gpt2_tiny.logits"
# shellcheck disable=SC2086
run_expect config_gqa 1 "num_key_value_heads is 2 in the folder but 4 in this run \(--num-query-groups\)$" \
    "$MDSTRAIN" $(echo $L2 | sed 's/--num-query-groups 2/--num-query-groups 4/') --load-hf "$D/llama_tiny" \
    --check-logits "$D/llama_tiny.logits"
mkdir "$T/sharded"; cp "$D/gpt2_tiny/config.json" "$T/sharded/"; echo '{}' >"$T/sharded/model.safetensors.index.json"
run_expect sharded_refused 1 "'.*sharded': sharded safetensors \(model.safetensors.index.json\) are not read yet" \
    "$MDSTRAIN" $G2 --load-hf "$T/sharded" --check-logits "$D/gpt2_tiny.logits"
# shellcheck disable=SC2086
run_expect import_other_architecture 2 "cannot import: neither GPT2LMHeadModel nor LlamaForCausalLM has --position-embedding-type none" \
    "$MDSTRAIN" $G2 --position-embedding-type none --load-hf "$D/gpt2_tiny" --check-logits "$D/gpt2_tiny.logits"
# shellcheck disable=SC2086
run_expect import_in_training_names_rank 1 "^mdstrain: rank 0: cannot import: .*missing tensor" \
    "$MDSTRAIN" $G2 $RUN --load-hf "$T/missing"
# shellcheck disable=SC2086
run_expect export_untied_gpt 2 "GPT2LMHeadModel ties its output layer" \
    "$MDSTRAIN" $GPT --untie-embeddings-and-output-weights --load "$T/gpt" --export-hf "$T/x"
# shellcheck disable=SC2086
run_expect export_wrong_layout 1 "cannot export: '.*mp_rank_00/model_optim_rng.bin': tensor_model_parallel_size is 1 in the checkpoint but 2 in this run$" \
    "$MDSTRAIN" $GPT --tensor-model-parallel-size 2 --load "$T/gpt" --export-hf "$T/x"
# shellcheck disable=SC2086
run_expect export_wrong_flags 1 "num_layers is 2 in the checkpoint but 3 in this run" \
    "$MDSTRAIN" $(echo $GPT | sed 's/--num-layers 2/--num-layers 3/') --load "$T/gpt" --export-hf "$T/x"
# shellcheck disable=SC2086
run_expect export_needs_load 2 "--export-hf needs --load" "$MDSTRAIN" $GPT --export-hf "$T/x"
# shellcheck disable=SC2086
run_expect export_alone 2 "--export-hf goes alone" "$MDSTRAIN" $GPT --load "$T/gpt" --load-hf "$T/gpt_hf" --export-hf "$T/x"
finish
