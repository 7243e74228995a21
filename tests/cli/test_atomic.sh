#!/bin/sh
# test_atomic.sh - an interrupted run leaves no temporaries and no new pair,
# and an older complete pair survives untouched.
. tests/cli/lib.sh
C=tests/data/corpus

$MDSPREP -q --input $C/tiny.jsonl --output-prefix "$T/keep" --append-eod
cp "$T/keep_text_document.idx" "$T/old.idx"; cp "$T/keep_text_document.bin" "$T/old.bin"
mkfifo "$T/fifo"
# A non-interactive shell starts background jobs with SIGINT ignored, and
# mdsprep (like Python) leaves an ignored signal ignored, so the job gets the
# default disposition back through env --default-signal (coreutils >= 8.31).
for sig in INT TERM; do
    (cat $C/tiny.jsonl; exec sleep 30) > "$T/fifo" &
    feeder=$!
    env --default-signal=INT $MDSPREP -q --input "$T/fifo" --output-prefix "$T/keep" &
    pid=$!
    sleep 1
    check "SIG$sig: temporaries exist while running" [ -n "$(ls "$T" | grep '\.tmp\.')" ]
    kill -$sig $pid
    wait $pid
    rc=$?
    kill $feeder 2>/dev/null; wait $feeder 2>/dev/null
    check "SIG$sig: killed by the signal (status $rc)" [ "$rc" -gt 128 ]
    check "SIG$sig: no temporaries left" [ -z "$(ls "$T" | grep '\.tmp\.')" ]
    check "SIG$sig: old idx intact" cmp -s "$T/keep_text_document.idx" "$T/old.idx"
    check "SIG$sig: old bin intact" cmp -s "$T/keep_text_document.bin" "$T/old.bin"
done
# a signal ignored at start stays ignored (nohup, background jobs)
(trap '' INT; $MDSPREP -q --input $C/tiny.jsonl --input $C/edge.jsonl --output-prefix "$T/ign" & p=$!; sleep 0.05; kill -INT $p; wait $p)
check "ignored SIGINT stays ignored" [ $? -eq 0 -a -f "$T/ign_text_document.idx" ]
finish
