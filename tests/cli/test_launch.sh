#!/bin/sh
# test_launch.sh - the acceptance suite of issue 12: the command lines of real
# Megatron launch scripts, transcribed in tests/launch/*.args (see its
# README.md), run by mdstrain with only the sizes scaled down, on --mock-data
# and on a real dataset; and mdsprep's command lines from Megatron's README,
# aws-samples' 1.data-preprocessing.sbatch and bigscience's start_fast.md run
# verbatim (they make the real dataset, byte-identical three times).
# For each script: the whole list exits 2 naming a listed blocker; each
# blocker alone (the others removed) exits 2 naming itself, so none is
# listed that does not block; without every blocker it trains to
# completion.  Multi-rank scripts run over TCP.  About 40 s.
. tests/cli/lib.sh
MDSTRAIN=${MDSTRAIN:-$BUILD/mdstrain}
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
MDSPREP_ABS=$(cd "$(dirname "$MDSPREP")" && pwd)/$(basename "$MDSPREP")
SCRIPTS=$(ls tests/launch/*.args)
set -f   # the argument lists expand like the scripts' unquoted variables: split, never globbed

# ---- mdsprep, verbatim ---------------------------------------------------------
# a corpus of 26000 short documents: enough that --split 99990,8,2 leaves the
# test split a document
awk 'BEGIN { for (i = 0; i < 26000; i++) printf "{\"text\": \"Document %d of the launch test, %s.\"}\n", i, (i % 3 ? "short" : "a little longer than the others") }' \
    >"$T/corpus.jsonl"
for d in seed readme aws; do mkdir -p "$T/$d"; cp "$MDS_ROOT/vocab/gpt2-vocab.json" "$MDS_ROOT/vocab/gpt2-merges.txt" "$T/$d/"; done
cp "$T/corpus.jsonl" "$T/seed/oscar-1GB.jsonl"
cp "$T/corpus.jsonl" "$T/readme/my-corpus.json"
cp "$T/corpus.jsonl" "$T/aws/oscar-1GB.jsonl"
# the seed command of issue 12 (bigscience Megatron-DeepSpeed's spelling, --vocab)
(cd "$T/seed" && "$MDSPREP_ABS" --input oscar-1GB.jsonl --output-prefix my-gpt2 --vocab gpt2-vocab.json \
    --dataset-impl mmap --tokenizer-type GPT2BPETokenizer --merge-file gpt2-merges.txt --append-eod --workers 8 -q)
check mdsprep_seed_command test $? -eq 0
# NVIDIA/Megatron-LM README.md at d514c6fab18ebd6774f0c8f756c1be4611957978, "GPT data preprocessing"
(cd "$T/readme" && "$MDSPREP_ABS" \
       --input my-corpus.json \
       --output-prefix my-gpt2 \
       --vocab-file gpt2-vocab.json \
       --tokenizer-type GPT2BPETokenizer \
       --merge-file gpt2-merges.txt \
       --append-eod -q)
check mdsprep_megatron_readme test $? -eq 0
# aws-samples/awsome-distributed-training 3.test_cases/1.megatron-lm/1.data-preprocessing.sbatch at
# 0f7641cb3e0d1fdf82646c061f2260b475303ac0, with DATA_PATH=$T/aws
DATA_PATH=$T/aws
"$MDSPREP" \
        --input ${DATA_PATH}/oscar-1GB.jsonl \
        --output-prefix ${DATA_PATH}/my-gpt2 \
        --vocab-file ${DATA_PATH}/gpt2-vocab.json \
        --tokenizer-type GPT2BPETokenizer \
        --merge-file ${DATA_PATH}/gpt2-merges.txt \
        --append-eod \
        --workers 64 -q
check mdsprep_aws_sbatch test $? -eq 0
same "$T/seed/my-gpt2_text_document" "$T/readme/my-gpt2_text_document" mdsprep_seed_equals_readme
same "$T/seed/my-gpt2_text_document" "$T/aws/my-gpt2_text_document" mdsprep_seed_equals_aws
REAL=$T/seed/my-gpt2_text_document
# the same corpus through a SentencePiece model (Llama 2's kind: BPE, byte
# fallback), for the scripts whose header says "# dataset: sp"
SPMODEL=$MDS_ROOT/tests/data/tokenizers/sp-bpe.model
mkdir -p "$T/sp"
"$MDSPREP" --input "$T/corpus.jsonl" --output-prefix "$T/sp/llama2" --tokenizer-type GPTSentencePieceTokenizer \
    --tokenizer-model "$SPMODEL" --append-eod --workers 2 -q
check mdsprep_sentencepiece_dataset test $? -eq 0
REAL_SP=$T/sp/llama2_text_document

# ---- the launch scripts ----------------------------------------------------------
header() { sed -n "s/^# $1: *//p" "$2" | head -n 1; }

# lines FILE DATA(real|mock) SKIP...: the argument lines, placeholders filled,
# the lines of the flags in SKIP left out
lines() {
    lf=$1 ldata=$2
    shift 2
    grep -v '^#' "$lf" | grep -v '^[[:space:]]*$' | while IFS= read -r line; do
        first=${line%% *}
        flag=${first%%=*}
        drop=0
        for b in "$@"; do [ "$flag" = "$b" ] && drop=1; done
        [ $drop = 1 ] && continue
        if [ "$ldata" = mock ] && [ "$flag" = --data-path ]; then line=--mock-data; fi
        if [ "$ldata" = real ] && [ "$line" = --mock-data ]; then line="--data-path @DATA@"; fi
        printf '%s\n' "$line"
    done | sed -e "s|@DATA@|$LDATA_PATH|g" -e "s|@SPMODEL@|$SPMODEL|g" -e "s|@VOCAB@|$MDS_ROOT/vocab/gpt2-vocab.json|g" \
        -e "s|@MERGE@|$MDS_ROOT/vocab/gpt2-merges.txt|g" -e "s|@CKPT@|$RUN/ckpt|g" -e "s|@TB@|$RUN/tb|g" \
        -e "s|@CACHE@|$RUN/cache|g" -e "s|@KILL@|$RUN/kill-switch|g" -e "s|@DSCONFIG@|$DSCONFIG|g"
}

# launch RANKS ARGFILE OUT: mdstrain on RANKS processes (TCP, another port
# if rank 0's was taken); the status of rank 0, the log in OUT
launch() {
    nr=$1 largs=$(cat "$2")
    if [ "$nr" -eq 1 ]; then
        # shellcheck disable=SC2086
        timeout -s KILL 120 "$MDSTRAIN" $largs >"$3" 2>"$3.err"
        return $?
    fi
    for _ in 1 2 3; do
        next_port
        r=1
        while [ $r -lt "$nr" ]; do
            # shellcheck disable=SC2086
            MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT WORLD_SIZE=$nr RANK=$r MDS_RENDEZVOUS_TIMEOUT=20 \
                timeout -s KILL 120 "$MDSTRAIN" $largs >"$3.$r" 2>"$3.$r.err" &
            r=$((r + 1))
        done
        # shellcheck disable=SC2086
        MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT WORLD_SIZE=$nr RANK=0 MDS_RENDEZVOUS_TIMEOUT=20 \
            timeout -s KILL 120 "$MDSTRAIN" $largs >"$3" 2>"$3.err"
        lrc=$?
        wait
        grep -q 'cannot listen at' "$3.err" || break
    done
    # the log lines come from the last rank (Megatron's print_rank_last)
    cat "$3.$((nr - 1))" >>"$3" 2>/dev/null
    return $lrc
}

# names FILE WORD...: the refusal (first line of FILE) names one of the words
names() {
    msg=$(head -n 1 "$1")
    shift
    for w in "$@"; do
        case $w in json:*) w="\"${w#json:}\"" ;; esac
        case $msg in *"$w"*) return 0 ;; esac
    done
    echo "    refusal names none of: $* -- $msg" >&2
    return 1
}

for f in $SCRIPTS; do
    name=$(basename "$f" .args)
    ranks=$(header ranks "$f")
    blocks="$(header blocks "$f") $(header cannot "$f")"
    flags=
    for b in $blocks; do case $b in json:*) ;; *) flags="$flags $b" ;; esac; done
    ds=$(header ds-config "$f")
    LDATA_PATH=$REAL
    [ "$(header dataset "$f")" = sp ] && LDATA_PATH=$REAL_SP
    for data in real mock; do
        RUN=$T/$name.$data
        mkdir -p "$RUN"
        [ -n "$ds" ] && DSCONFIG=$MDS_ROOT/tests/launch/$ds
        if [ -n "${blocks# }" ]; then
            # the whole list: refused, naming a blocker
            lines "$f" $data >"$RUN/full.args"
            launch "$ranks" "$RUN/full.args" "$RUN/full.out"
            rc=$?
            if [ $rc -eq 2 ] && names "$RUN/full.out.err" $blocks; then ok "$name.$data.refused"
            else fail "$name.$data.refused (exit $rc)"; sed 's/^/    /' "$RUN/full.out.err" | head -3 >&2; fi
            # each flag blocker alone (only on the real data: the verdict does not depend on it)
            if [ $data = real ]; then
                for b in $flags; do
                    others=
                    for o in $flags; do [ "$o" = "$b" ] || others="$others $o"; done
                    [ -n "$ds" ] && case " $blocks " in *" json:"*) DSCONFIG=$MDS_ROOT/tests/launch/${ds%.json}.stripped.json ;; esac
                    # shellcheck disable=SC2086
                    rm -rf "$RUN/ckpt"   # a run that saved must not hand its model to the next
                    lines "$f" $data $others >"$RUN/one.args"
                    launch "$ranks" "$RUN/one.args" "$RUN/one.out"
                    rc=$?
                    [ -n "$ds" ] && DSCONFIG=$MDS_ROOT/tests/launch/$ds
                    if [ $rc -eq 2 ] && names "$RUN/one.out.err" "$b"; then ok "$name.blocker$b"
                    else fail "$name.blocker$b (exit $rc)"; sed 's/^/    /' "$RUN/one.out.err" | head -3 >&2; fi
                done
            fi
            case " $blocks " in *" json:"*) DSCONFIG=$MDS_ROOT/tests/launch/${ds%.json}.stripped.json ;; esac
        fi
        # without the blockers: trains to the end
        rm -rf "$RUN/ckpt"
        # shellcheck disable=SC2086
        lines "$f" $data $flags >"$RUN/run.args"
        launch "$ranks" "$RUN/run.args" "$RUN/run.out"
        rc=$?
        if [ $rc -eq 0 ] && grep -Eq '^( \[.*\])? iteration +[0-9]+/' "$RUN/run.out"; then ok "$name.$data.runs"
        else fail "$name.$data.runs (exit $rc)"; sed 's/^/    /' "$RUN/run.out.err" | tail -3 >&2; fi
    done
done
finish
