# lib.sh - helpers sourced by the CLI tests (tests/cli/test_*.sh).
# Each check prints "ok NAME" or "FAIL NAME" for tests/run.sh to count.
BUILD=${BUILD:-build}
MDS_ROOT=${MDS_ROOT:-$(pwd)}
MDSPREP=${MDSPREP:-$BUILD/mdsprep}
MDSINSPECT=${MDSINSPECT:-$BUILD/mdsinspect}
T=$(mktemp -d "${TMPDIR:-/tmp}/mds-test.XXXXXX")
trap 'rm -rf "$T"' EXIT
nfail=0

ok()   { echo "ok $1"; }
fail() { echo "FAIL $1"; nfail=$((nfail + 1)); }
skip() { echo "skip $1: $2"; }   # NAME WHY: counted apart by tests/run.sh
# have LIB: the optional library LIB (pcre2, lzma, zstd, zlib) is built in,
# as the Makefile tells tests/run.sh through MDS_FEATURES (unset: all are)
have() {
    case " ${MDS_FEATURES-pcre2 lzma zstd zlib} " in *" $1 "*) return 0 ;; esac
    return 1
}
# no_launcher_env: forget the variables of an enclosing launch (torchrun,
# Slurm, Open MPI, PMIx/PMI), so that mdstrain runs as one process unless a
# test launches it otherwise
no_launcher_env() {
    unset MASTER_ADDR MASTER_PORT RANK WORLD_SIZE LOCAL_RANK SLURM_JOB_NODELIST SLURM_NODELIST SLURM_JOB_ID \
          SLURM_PROCID SLURM_NTASKS SLURM_LOCALID OMPI_COMM_WORLD_SIZE PMIX_RANK PMI_RANK PMI_SIZE PMI_FD
}
check() {   # NAME CONDITION-COMMAND...
    name=$1; shift
    if "$@"; then ok "$name"; else fail "$name"; fi
}
# same PREFIX-A PREFIX-B NAME: both .bin and .idx byte-identical
same() {
    if cmp -s "$1.bin" "$2.bin" && cmp -s "$1.idx" "$2.idx"; then ok "$3"
    else
        fail "$3"
        cmp "$1.bin" "$2.bin" 2>&1 | head -2 >&2
        cmp "$1.idx" "$2.idx" 2>&1 | head -2 >&2
    fi
}
# run_expect NAME EXIT STDERR-REGEX CMD...: exit code and one stderr line matching
run_expect() {
    name=$1 want=$2 re=$3; shift 3
    "$@" >"$T/out" 2>"$T/err"
    rc=$?
    if [ "$rc" -ne "$want" ]; then
        fail "$name (exit $rc, want $want)"; sed 's/^/    /' "$T/err" >&2; return
    fi
    if [ -n "$re" ] && ! grep -Eq -- "$re" "$T/err"; then
        fail "$name (stderr does not match '$re')"; sed 's/^/    /' "$T/err" >&2; return
    fi
    ok "$name"
}
finish() { [ "$nfail" -eq 0 ]; exit $?; }

# Ports for ranks meeting over TCP: next_port moves PORT to the next one in
# 15000-29999 (below the ephemeral range, from a per-process start) that
# /proc/net/tcp* does not show in use.
PORT=$((15000 + $$ % 15000))
next_port() {
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        PORT=$((PORT + 1))
        [ "$PORT" -gt 29999 ] && PORT=15000
        hex=$(printf '%04X' "$PORT")
        cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '{print $2}' | grep -qi ":$hex\$" || return 0
    done
}
