#!/bin/sh
# indices.sh - speed of Megatron GPT index building (mdsinspect samples):
# synthetic datasets totalling ~10 billion tokens in 5 million documents in
# 3 prefixes (2.5M/1.5M/1M documents, lengths uniform in [1, 3999]), blended
# 0.5/0.3/0.2 at seq-length 2048, 9M training samples (about two epochs of
# each prefix's train split) with Megatron's eval counts for a 512 batch.
#
# Prints our build time and peak RSS (in memory, and writing the .npy
# cache) and the cached start-up time; then the same configuration built by
# Megatron-Core itself (bench/megatron_indices.py: its
# BlendedMegatronDatasetBuilder, GPTDataset, C++ helpers and np.save), the
# ratios, and whether both tools wrote byte-identical cache files (sha256 of
# every .npy).  Megatron-Core comes from PyPI into a throwaway venv
# ($MCORE_VENV, default $TMPDIR/mds-mcore-venv, made once with
# --system-site-packages on /usr/bin/python3 for numpy and torch; wheel
# megatron-core==$MCORE_VERSION with its prebuilt helpers_cpp, --no-deps).
# When that cannot be set up (no network, no torch), it falls back to an
# estimate: Megatron's numpy steps re-run with numpy, its C++ helpers counted
# free, which is a lower bound.  The output says which baseline was used.
#
# Only the .idx files are real (100 MB); each .bin is a sparse file of the
# right size.  Everything but the venv lives in a temporary directory
# removed at exit.  Run from the repository root with BUILD set (make bench
# does).
BUILD=${BUILD:-build}
I=$(pwd)/$BUILD/mdsinspect
SRC=$(pwd)
T=$(mktemp -d "${TMPDIR:-/tmp}/mds-indices.XXXXXX"); trap 'rm -rf "$T"' EXIT
MCORE_VENV=${MCORE_VENV:-${TMPDIR:-/tmp}/mds-mcore-venv}
MCORE_VERSION=${MCORE_VERSION:-0.16.1}
PY=python3
for c in /usr/bin/python3 python3; do
    if $c -c 'import numpy' 2>/dev/null; then PY=$c; break; fi
done

${CC:-cc} -O2 -std=c11 -D_GNU_SOURCE bench/make_synth.c -o "$T/make_synth" || exit 1
cd "$T" || exit 1
TOK=0
for spec in "a 2500000 1" "b 1500000 2" "c 1000000 3"; do
    set -- $spec
    n=$(./make_synth "$1" "$2" "$3") || exit 1
    TOK=$((TOK + n))
done
echo "== index building: 3 prefixes, 5000000 documents, $TOK tokens; $(nproc) CPUs"
ARGS="--data-path 0.5 a 0.3 b 0.2 c --seq-length 2048 --train-samples 9000000 --global-batch-size 512
      --eval-iters 10 --eval-interval 1000 --vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt"

# timed CMD...: "seconds peak-KB" of one run
timed() { /usr/bin/time -f "%e %M" -o "$T/time" "$@" >/dev/null 2>&1; cat "$T/time"; }
best3() {   # best wall time of 3 runs, and the peak RSS of the best
    best=""
    for i in 1 2 3; do
        r=$(timed "$@")
        best=$(echo "$r $best" | awk '{if ($3 == "" || $1 < $3) print $1, $2; else print $3, $4}')
    done
    echo "$best"
}
"$I" samples $ARGS > plan.txt 2>&1 || { cat plan.txt; exit 1; }
sed -n '/^train:/,/blend/p' plan.txt | sed 's/^/   /'
SIZES=$(for sp in train valid test; do sed -n "s/^$sp: \([0-9]*\) samples asked.*/\1/p" plan.txt; done | paste -sd,)
set -- $(best3 "$I" samples $ARGS)
BUILD_S=$1
echo "   build, in memory:        $1 s   peak RSS $(($2 / 1024)) MB   (best of 3)"
BUILD1_S=$(OMP_NUM_THREADS=1 best3 "$I" samples $ARGS | cut -d' ' -f1)
echo "   build, one thread:       $BUILD1_S s"
best=""
for i in 1 2 3; do   # each into an empty cache directory
    rm -rf cache
    r=$(timed "$I" samples $ARGS --cache cache)
    best=$(echo "$r $best" | awk '{if ($3 == "" || $1 < $3) print $1, $2; else print $3, $4}')
done
set -- $best
OURS_CACHE_S=$1
echo "   build + write the cache: $1 s   peak RSS $(($2 / 1024)) MB   ($(du -sm cache | cut -f1) MB of .npy; best of 3)"
CACHED=$(best3 "$I" samples $ARGS --cache cache | awk '{printf "%.0f", $1 * 1000}')
"$I" samples $ARGS --cache cache > plan2.txt 2>&1
echo "   cached start-up:         $CACHED ms   (whole process, best of 3; $(grep -c ' cached$' plan2.txt) of 9 datasets mapped; target < 100 ms)"

# ---- the baseline: Megatron-Core itself when it can be had ----
VPY=$MCORE_VENV/bin/python
mcore_ok() { [ -x "$VPY" ] && [ "$("$VPY" "$SRC/bench/megatron_indices.py" --check 2>/dev/null)" = "$MCORE_VERSION" ]; }
if ! mcore_ok && /usr/bin/python3 -c 'import numpy, torch' 2>/dev/null; then
    echo "   setting up megatron-core $MCORE_VERSION in $MCORE_VENV (once)"
    { [ -x "$VPY" ] || /usr/bin/python3 -m venv --system-site-packages "$MCORE_VENV"; } &&
        timeout 300 "$MCORE_VENV/bin/pip" install -q --disable-pip-version-check --no-deps \
            "megatron-core==$MCORE_VERSION" > "$T/pip.log" 2>&1 ||
        echo "   megatron-core setup failed: $(tail -n 1 "$T/pip.log" 2>/dev/null)"
fi
if mcore_ok; then
    MEG="$VPY $SRC/bench/megatron_indices.py --data-path 0.5 a 0.3 b 0.2 c --seq-length 2048 --sizes $SIZES --threads $(nproc)"
    # in-process build seconds of one run (the import of torch and megatron is not counted)
    meg() { $MEG "$@" 2>/dev/null | awk '/^build_s/ {s = $2} /^peak_rss_mb/ {m = $2} END {print s, m}'; }
    best_meg() {   # best of 3, each from a fresh start: no cache anywhere
        best=""
        for i in 1 2 3; do
            rm -rf a b c meg meg.pg
            r=$(meg "$@")
            best=$(echo "$r $best" | awk '{if ($3 == "" || $1 < $3) print $1, $2; else print $3, $4}')
        done
        echo "$best"
    }
    echo "   baseline: megatron-core $MCORE_VERSION from PyPI, run as pretrain_gpt.py builds (BlendedMegatronDatasetBuilder + GPTDatasetConfig, $(nproc) builder threads)"
    set -- $(best_meg --no-save)
    MEG_MEM=$1
    echo "   Megatron-Core, computing only:   $1 s   peak RSS $2 MB   (np.save patched out; best of 3)"
    set -- $(best_meg --no-save --threads 1)
    MEG_MEM1=$1
    echo "   Megatron-Core, one thread:       $1 s   (np.save patched out; best of 3)"
    set -- $(best_meg --cache meg)
    MEG_CACHE=$1
    echo "   Megatron-Core, writing the cache: $1 s   peak RSS $2 MB   (best of 3)"
    set -- $(timed $MEG --cache meg)
    MEG_WARM=$(meg --cache meg | awk '{printf "%.0f", $1 * 1000}')
    echo "   Megatron-Core, cached start-up:  $MEG_WARM ms in the builder, $1 s whole process (importing torch + megatron)"
    (cd meg && sha256sum *.npy) | sort > meg.sha
    (cd cache && sha256sum *.npy) | sort > ours.sha
    if cmp -s meg.sha ours.sha; then
        echo "   cache files: all $(wc -l < ours.sha) .npy byte-identical (sha256) between Megatron-Core and mds, same names"
    else
        echo "   cache files: DIFFER between Megatron-Core and mds:"; diff meg.sha ours.sha | head -5
    fi
    echo "   Megatron / mds, computing:       $(echo "$MEG_MEM $BUILD_S" | awk '{printf "%.1f", $1 / $2}')x   (target >= 3x)"
    echo "   Megatron / mds, one thread each: $(echo "$MEG_MEM1 $BUILD1_S" | awk '{printf "%.1f", $1 / $2}')x"
    echo "   Megatron / mds, with the cache:  $(echo "$MEG_CACHE $OURS_CACHE_S" | awk '{printf "%.1f", $1 / $2}')x"
    exit 0
fi

if $PY -c 'import numpy' 2>/dev/null; then
    cat > megatron_numpy.py <<'PYEOF'
import os, sys, time
import numpy as np
# Megatron-Core (main)'s numpy work for a weighted blend, split "969, 30, 1";
# build_sample_idx / build_blending_indices (C++) are not run (free), no np.save.
L = int(sys.argv[1]); sizes = [int(x) for x in sys.argv[2].split(",")]; out = sys.argv[3]
args = sys.argv[4:]; w = np.array([float(x) for x in args[0::2]]); prefixes = args[1::2]
w = w / np.sum(w)
v = np.array([969.0, 30.0, 1.0]); v = v / np.sum(v); e = [0, v[0], v[0] + v[1], v[0] + v[1] + v[2]]
t0 = time.perf_counter()
for d, p in enumerate(prefixes):
    buf = np.memmap(p + ".idx", mode="r", order="C")
    n = int(np.frombuffer(buf[18:26], dtype=np.int64)[0])
    lengths = np.frombuffer(buf, dtype=np.int32, count=n, offset=34)
    for s in range(3):
        beg, end = int(round(e[s] * n)), int(round(e[s + 1] * n))
        indices = np.arange(beg, end, dtype=np.int32)
        ns = int(np.ceil(np.ceil(sizes[s] * w[d]) * 1.005))
        T = int(np.sum(lengths[indices]))
        epochs, t = 1, T
        while t < ns * L + 1:
            epochs += 1; t += T
        sep, sans = False, 0
        if epochs > 1:
            per = (T - 1) // L; sans = ((epochs - 1) * T - 1) // L
            sep = (ns - sans) < int(0.8 * per)
        rs = np.random.RandomState(1234)
        def doc_index(ep):
            di = np.mgrid[0:ep, 0:len(indices)][1]; di[:] = indices
            di = di.reshape(-1).astype(np.int32); rs.shuffle(di); return di
        doc = np.concatenate((doc_index(epochs - 1), doc_index(1))) if sep else doc_index(epochs)
        total = (epochs * T - 1) // L
        sample = np.zeros((total + 1, 2), dtype=np.int32)   # build_sample_idx's output, not computed
        first = sans if sep else total
        sh = np.arange(0, first, dtype=np.uint32); rs.shuffle(sh)
        if sep:
            sh2 = np.arange(first, total, dtype=np.uint32); rs.shuffle(sh2); sh = np.concatenate((sh, sh2))
print("%.3f" % (time.perf_counter() - t0))
PYEOF
    best=""
    for i in 1 2 3; do
        rm -rf np; mkdir np
        r=$($PY megatron_numpy.py 2048 $SIZES np 0.5 a 0.3 b 0.2 c) || break
        best=$(echo "$r $best" | awk '{if ($2 == "" || $1 < $2) print $1; else print $2}')
    done
    echo "   baseline: ESTIMATE (megatron-core could not be set up; see above)"
    echo "   Megatron-Core estimate:  >= $best s   (numpy $($PY -c 'import numpy; print(numpy.__version__)') part measured, C++ helpers counted free; best of 3)"
    echo "   Megatron / mds:          >= $(echo "$best $BUILD_S" | awk '{printf "%.1f", $1 / $2}')x   (both in memory; target >= 3x)"
else
    echo "   Megatron-Core estimate:  skipped (no python3 with numpy)"
fi
