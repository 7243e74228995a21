#!/bin/sh
# run.sh - the test runner: every unit test binary, fuzz-corpus replay and CLI
# script, counted into one closing line "N passed, N failed" (followed by
# ", N skipped" when some cases were skipped).
#
# Each test program prints "ok NAME" or "FAIL NAME" per test case on stdout,
# or "skip NAME: WHY" for a case that needs a library this build lacks; a
# program that exits non-zero without printing a FAIL line counts as one
# failure (a crash, a sanitizer report).  Run from the repository root with
# BUILD set to the build directory and MDS_FEATURES to the optional libraries
# built in (the Makefile does both; unset MDS_FEATURES means all of them).
BUILD=${BUILD:-build}
export BUILD
export MDS_ROOT=$(pwd)
export MDS_FEATURES="${MDS_FEATURES-pcre2 lzma zstd zlib}"
# mdstrain's default device is cuda when a GPU is found; the golden results
# of these tests are the CPU's, on any machine (make test-gpu tests the GPU)
export MDS_DEVICE=cpu
passed=0
failed=0
skipped=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

run_one() {   # NAME CMD...
    name=$1; shift
    "$@" >"$log" 2>&1
    rc=$?
    p=$(grep -c '^ok ' "$log")
    f=$(grep -c '^FAIL ' "$log")
    k=$(grep -c '^skip ' "$log")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    if [ "$p" -eq 0 ] && [ "$f" -eq 0 ] && [ "$k" -eq 0 ]; then p=1; fi   # a program with no cases that exited 0
    passed=$((passed + p))
    failed=$((failed + f))
    skipped=$((skipped + k))
    if [ "$f" -ne 0 ]; then
        echo "FAIL $name (exit $rc)"
        sed 's/^/    /' "$log" | tail -n 40
    elif [ "$k" -ne 0 ]; then
        echo "ok   $name ($p, $k skipped)"
        grep '^skip ' "$log" | sed 's/^/    /'
    else
        echo "ok   $name ($p)"
    fi
}

for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    run_one "$(basename "$t")" "$t"
done
for f in "$BUILD"/tests/fuzz_*; do
    [ -x "$f" ] || continue
    name=$(basename "$f")
    run_one "$name corpus" "$f" "tests/fuzz/corpus/${name#fuzz_}"
done
for s in tests/cli/test_*.sh; do
    [ -f "$s" ] || continue
    run_one "cli/$(basename "$s")" sh "$s"
done
if [ "$skipped" -ne 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
else
    echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
