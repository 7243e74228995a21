#!/usr/bin/env python3
"""make_corrupt.py - regenerate the corrupt-dataset catalogue in this directory.

Run once from the repository root: python3 tests/data/corrupt/make_corrupt.py
Every case is derived from tests/data/golden/edge-list_text_document (a
Megatron-LM golden: uint16, 11 sequences, 8 documents, 44 tokens; .idx 238
bytes, .bin 88).  For each case NAME it writes NAME.bin, NAME.idx and
NAME.expect (an extended regex that the stderr of `mdsinspect verify NAME`
must match), then SHA256SUMS.  The test (tests/cli/test_corrupt.sh) needs
only sh and the built tools; this script is not run by `make test`.
"""
import hashlib
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "golden", "edge-list_text_document")

BIN = open(SRC + ".bin", "rb").read()
IDX = open(SRC + ".idx", "rb").read()
assert len(IDX) == 238 and len(BIN) == 88
N, DC = struct.unpack_from("<QQ", IDX, 18)
LENS = list(struct.unpack_from("<%di" % N, IDX, 34))
PTRS = list(struct.unpack_from("<%dq" % N, IDX, 34 + 4 * N))
DOCS = list(struct.unpack_from("<%dq" % DC, IDX, 34 + 12 * N))
ISZ = 2


def ere(s):
    """s as a POSIX extended regex matching it literally."""
    return "".join("\\" + c if c in "\\.[]()*+?{}|^$" else c for c in s)


def idx(version=1, dtype=8, n=None, dc=None, lens=None, ptrs=None, docs=None, magic=b"MMIDIDX\0\0"):
    lens = LENS if lens is None else lens
    ptrs = PTRS if ptrs is None else ptrs
    docs = DOCS if docs is None else docs
    n = len(lens) if n is None else n
    dc = len(docs) if dc is None else dc
    return (magic + struct.pack("<QBQQ", version, dtype, n, dc)
            + struct.pack("<%di" % len(lens), *lens)
            + struct.pack("<%dq" % len(ptrs), *ptrs)
            + struct.pack("<%dq" % len(docs), *docs))


def pointers(lens):
    out, p = [], 0
    for l in lens:
        out.append(p)
        p += l * ISZ
    return out


assert idx() == IDX and pointers(LENS) == PTRS

# The last sequence of every non-empty document holds its EOD (50256).
LAST = [DOCS[k + 1] - 1 for k in range(DC - 1) if DOCS[k + 1] > DOCS[k]]
assert all(struct.unpack_from("<H", BIN, PTRS[s] + ISZ * (LENS[s] - 1))[0] == 50256 for s in LAST)
EOD_SHORT = [l - 1 if i in LAST else l for i, l in enumerate(LENS)]

# Megatron's legacy lazy/cached IndexedDataset index (magic TNTIDX) of the
# same data: version, dtype code and element size, item and size counts,
# document count, then dim_offsets, data_offsets (in elements), sizes and
# doc_idx as int64.
DATA_OFF = [0]
for l in LENS:
    DATA_OFF.append(DATA_OFF[-1] + l)
LEGACY = (b"TNTIDX\0\0" + struct.pack("<QQQQQQ", 1, 8, ISZ, N, N, DC)
          + struct.pack("<%dq" % (N + 1), *range(N + 1))
          + struct.pack("<%dq" % (N + 1), *DATA_OFF)
          + struct.pack("<%dq" % N, *LENS)
          + struct.pack("<%dq" % DC, *DOCS))


def at(name, ext):
    return "'[^']*/" + ere(name + ext) + "': "


def lens_with(i, v):
    l = list(LENS)
    l[i] = v
    return l


def docs_with(k, v):
    d = list(DOCS)
    d[k] = v
    return d


def ptrs_with(i, v):
    p = list(PTRS)
    p[i] = v
    return p


def bin_size_msg(tokens, have):
    return ere("sequence_lengths sum to %d tokens of 2 bytes (%d bytes) but the file has %d" % (tokens, tokens * ISZ, have))


BIG = 1 << 62
CASES = [
    # name, .bin, .idx, message after "'PATH': " (already a regex), file the message names
    ("truncated-bin", BIN[:87], IDX, bin_size_msg(44, 87), ".bin"),
    ("bin-doubled", BIN + BIN, IDX, bin_size_msg(44, 176), ".bin"),
    ("truncated-idx", BIN, IDX[:230],
     ere("sequence_count 11 and document_count 9 imply 238 bytes but the file has 230"), ".idx"),
    ("idx-shorter-than-header", BIN, IDX[:20], ere("file has 20 bytes, shorter than the 34-byte header"), ".idx"),
    ("idx-empty", BIN, b"", ere("file has 0 bytes, shorter than the 34-byte header"), ".idx"),
    ("wrong-magic", IDX, BIN,
     ere("bad magic %s(expected 4d 4d 49 44 49 44 58 00 00, \"MMIDIDX\\0\\0\")"
         % "".join("%02x " % b for b in BIN[:9])), ".idx"),
    ("legacy-tntidx", BIN, LEGACY,
     ere("legacy lazy/cached format (magic TNTIDX) not supported, only MMIDIDX"), ".idx"),
    ("wrong-version", BIN, idx(version=2), ere("version 2, only version 1 is supported"), ".idx"),
    ("unknown-dtype", BIN, idx(dtype=9), ere("unknown dtype code 9 (known: 1-8)"), ".idx"),
    ("dtype-7-ambiguous", BIN, idx(dtype=7), ere("dtype code 7 is ambiguous (float32 in current Megatron, ") + ".*not supported", ".idx"),
    ("count-too-big", BIN, idx(n=BIG),
     ere("sequence_count %d is too large: its arrays overflow a 64-bit size" % BIG), ".idx"),
    ("count-sum-overflow", BIN, idx(n=1 << 59, dc=(1 << 61) - 1),
     ere("sequence_count %d and document_count %d overflow a 64-bit size" % (1 << 59, (1 << 61) - 1)), ".idx"),
    ("sequence-count-off-by-one", BIN, idx(n=12),
     ere("sequence_count 12 and document_count 9 imply 250 bytes but the file has 238"), ".idx"),
    ("document-count-zero", b"", idx(lens=[], ptrs=[], docs=[]),
     ere("document_count is 0, must be at least 1 (document_indices starts with 0)"), ".idx"),
    ("multimodal", BIN, IDX + bytes(N),
     ere("file has 11 bytes after the arrays, as a multimodal dataset (sequence_modes) would: not supported"), ".idx"),
    ("doc-index-not-starting-at-0", BIN, idx(docs=docs_with(0, 1)),
     ere("document_indices[0] is 1, must be 0"), ".idx"),
    ("doc-index-decreasing", BIN, idx(docs=docs_with(3, 2)),
     ere("document_indices[3] is 2, less than document_indices[2] = 3 (must be non-decreasing)"), ".idx"),
    ("doc-index-not-ending-at-N", BIN, idx(docs=docs_with(8, 10)),
     ere("document_indices[8] (the last) is 10 but sequence_count is 11"), ".idx"),
    ("negative-length", BIN, idx(lens=lens_with(4, -1)),
     ere("sequence_lengths[4] is -1, must be non-negative"), ".idx"),
    ("pointer-drift", BIN, idx(lens=EOD_SHORT, ptrs=pointers(EOD_SHORT)),
     bin_size_msg(44 - len(LAST), 88), ".bin"),
    ("pointer-drift-only", BIN, idx(ptrs=pointers(EOD_SHORT)),
     ere("sequence_pointers[3] is 16 but the lengths before it imply 18"), ".idx"),
    ("pointer-out-of-bounds", BIN, idx(ptrs=ptrs_with(10, 1 << 40)),
     ere("sequence_pointers[10] is %d but the lengths before it imply %d" % (1 << 40, PTRS[10])), ".idx"),
]

sums = []
for name, b, i, msg, ext in CASES:
    for suffix, data in ((".bin", b), (".idx", i)):
        with open(os.path.join(HERE, name + suffix), "wb") as f:
            f.write(data)
        sums.append("%s  %s" % (hashlib.sha256(data).hexdigest(), name + suffix))
    with open(os.path.join(HERE, name + ".expect"), "w") as f:
        f.write("^mdsinspect: " + at(name, ext) + msg + "$\n")
with open(os.path.join(HERE, "SHA256SUMS"), "w") as f:
    f.write("\n".join(sums) + "\n")
print("%d cases" % len(CASES))
