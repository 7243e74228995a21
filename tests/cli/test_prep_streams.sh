#!/bin/sh
# test_prep_streams.sh - mdsprep as a job step reads streams and sizes itself
# to its allocation: every input is opened exactly once, so a named pipe
# (mkfifo, as when streaming from object storage inside a job) and a process
# substitution give the file's output and their writer ends normally (not
# SIGPIPE's 141, as when a check opened and closed the pipe first); the
# summary counts the bytes read from pipes and stdin; the default --workers
# is the CPUs the process may use (affinity mask, SLURM_CPUS_PER_TASK).
. tests/cli/lib.sh
C=tests/data/corpus
IN=$C/tiny.jsonl
"$MDSPREP" -v --input "$IN" --output-prefix "$T/file" 2>"$T/file.err"
check file_exit0 test $? -eq 0
inbytes() { sed -n 's/^mdsprep: [0-9]* documents, \(.*\) in (.*/\1/p' "$1"; }

# a named pipe: read once, the writer exits 0
mkfifo "$T/fifo"
( cat "$IN" >"$T/fifo"; echo $? >"$T/writer.rc" ) &
wpid=$!
timeout -s KILL 60 "$MDSPREP" --input "$T/fifo" --output-prefix "$T/fifo" 2>"$T/fifo.err"
check fifo_exit0 test $? -eq 0
wait "$wpid"
check fifo_writer_exit0 test "$(cat "$T/writer.rc")" = 0
same "$T/file_text_document" "$T/fifo_text_document" fifo_same_output
check fifo_bytes_in test "$(inbytes "$T/fifo.err")" = "$(inbytes "$T/file.err")"

# two pipes, one compressed (detected by content), in the order given
if have lzma; then
    mkfifo "$T/p1" "$T/p2"
    ( cat examples/sample.jsonl.xz >"$T/p1" ) &
    ( cat "$IN" >"$T/p2" ) &
    timeout -s KILL 60 "$MDSPREP" -q --input "$T/p1" --input "$T/p2" --output-prefix "$T/two"
    check two_fifos_exit0 test $? -eq 0
    wait
    "$MDSPREP" -q --input examples/sample.jsonl.xz --input "$IN" --output-prefix "$T/twof"
    same "$T/twof_text_document" "$T/two_text_document" two_fifos_same_output
else
    skip two_fifos "liblzma not built in"
fi

# process substitution (bash): /dev/fd/N, opened once
if command -v bash >/dev/null 2>&1; then
    timeout -s KILL 60 bash -c '"$1" --input <(cat "$2") --output-prefix "$3"' _ "$MDSPREP" "$IN" "$T/subst" 2>"$T/subst.err"
    check subst_exit0 test $? -eq 0
    same "$T/file_text_document" "$T/subst_text_document" subst_same_output
else
    skip subst "no bash"
fi

# stdin: the bytes read are counted (a pipe has no size to stat)
cat "$IN" | "$MDSPREP" --input - --output-prefix "$T/stdin" 2>"$T/stdin.err"
check stdin_bytes_in test "$(inbytes "$T/stdin.err")" = "$(inbytes "$T/file.err")"
check bytes_in_not_zero sh -c "! grep -q ' 0 B in ' '$T/stdin.err'"

# a missing input, or a directory, is refused before any output
run_expect missing_input 1 "^mdsprep: cannot open '$T/nope': No such file or directory\$" \
    "$MDSPREP" --input "$T/nope" --output-prefix "$T/m"
run_expect dir_input 1 "^mdsprep: cannot open '$T': Is a directory\$" "$MDSPREP" --input "$T" --output-prefix "$T/m"
check no_output_left sh -c "! ls '$T'/m_* 2>/dev/null | grep -q ."

# --workers: the CPUs this process may use, at most SLURM_CPUS_PER_TASK
workers() { sed -n 's/^mdsprep: \([0-9]*\) worker.*/\1/p' "$1"; }
check workers_default_nproc test "$(workers "$T/file.err")" = "$(nproc)"
SLURM_CPUS_PER_TASK=1 "$MDSPREP" -v --input "$IN" --output-prefix "$T/w1" 2>"$T/w1.err"
check workers_slurm_cpus_per_task test "$(workers "$T/w1.err")" = 1
SLURM_CPUS_PER_TASK=4096 "$MDSPREP" -v --input "$IN" --output-prefix "$T/w2" 2>"$T/w2.err"
check workers_slurm_above_mask test "$(workers "$T/w2.err")" = "$(nproc)"
if command -v taskset >/dev/null 2>&1; then
    taskset -c 0 "$MDSPREP" -v --input "$IN" --output-prefix "$T/w3" 2>"$T/w3.err"
    check workers_affinity_mask test "$(workers "$T/w3.err")" = 1
else
    skip workers_affinity_mask "no taskset"
fi
"$MDSPREP" -v --workers 3 --input "$IN" --output-prefix "$T/w4" 2>"$T/w4.err"
check workers_given test "$(workers "$T/w4.err")" = 3
finish
