#!/usr/bin/env python3
"""make_reference.py - reference values for mds's MockGPTDataset (--mock-data).

Run by hand (needs numpy; Debian's python3-numpy 1.24.2 was used):
    python3 tests/data/mock/make_reference.py > tests/data/mock/reference.txt

It re-implements, with numpy only, what Megatron-Core (main) does for
--mock-data: MockGPTLowLevelDataset (default_rng(0) lengths, computed
tokens), the split "1,1,1", and GPTDataset's document / sample / shuffle
index construction (a line-by-line port of _build_document_index,
helpers.build_sample_idx and _build_shuffle_index), then prints, per
config, the sha256 of each array as numpy.save writes it (what mds writes
into --cache) and the first five training samples' token windows summed
and their first tokens.  tests/cli/test_samples.sh compares mds against
these lines.  Not Megatron itself: the port follows spec §4.6/§4.10.
"""
import hashlib
import io
import json

import numpy as np

N, MAXLEN, VOCAB, EOD = 100000, 4096, 50257, 50256


def npy_sha(a):
    b = io.BytesIO()
    np.save(b, a)
    return hashlib.sha256(b.getvalue()).hexdigest()


def doc_index(docs, epochs, rs, separate):
    if not separate or epochs == 1:
        d = np.mgrid[0:epochs, 0:len(docs)][1]
        d[:] = docs
        d = d.reshape(-1).astype(np.int32)
        rs.shuffle(d)
        return d
    return np.concatenate((doc_index(docs, epochs - 1, rs, False), doc_index(docs, 1, rs, False)))


def sample_index(sizes, doc, L, epochs, T, E1):
    M = (epochs * T - E1) // L
    out = np.zeros((M + 1, 2), dtype=np.int64)
    sizes = sizes.tolist()
    docl = doc.tolist()
    d, off = 0, 0
    for s in range(1, M + 1):
        need = L + E1
        while need != 0:
            ln = sizes[docl[d]] - off
            need -= ln
            if need <= 0:
                off += need + ln - E1
                need = 0
            elif d == len(docl) - 1:
                off = sizes[docl[d]] - E1
                break
            else:
                d += 1
                off = 0
        out[s] = (d, off)
    if max(len(doc), max(sizes)) <= np.iinfo(np.int32).max:
        out = out.astype(np.int32)
    return out


def shuffle_index(num, total, rs):
    dt = np.uint32 if total < np.iinfo(np.uint32).max - 1 else np.int64
    first = np.arange(0, num, dtype=dt)
    rs.shuffle(first)
    if num == total:
        return first
    last = np.arange(num, total, dtype=dt)
    rs.shuffle(last)
    return np.concatenate((first, last))


def mock_tokens(lengths, i, off, n):
    ln = int(lengths[i])
    seq = np.concatenate([(np.arange(ln - 1) + 1) % VOCAB, [EOD]]).astype(np.int64)
    return seq[off:off + n]


def describe(split_name, num_samples, L, seed):
    ids = {"class": "MockGPTDataset", "dataset_path": None, "num_samples": num_samples,
           "index_split": split_name, "random_seed": seed, "sequence_length": L,
           "split": "1,1,1", "split_matrix": None,
           "tokenizer": {"class": "_GPT2BPETokenizer",
                         "tokenizer_path": ["gpt2-vocab.json", "gpt2-merges.txt"]}}
    v = np.array([1.0, 1.0, 1.0])
    v = v / np.sum(v)
    e = [0, v[0], v[0] + v[1], v[0] + v[1] + v[2]]
    ids["split_matrix"] = [(e[i], e[i + 1]) for i in range(3)]
    return json.dumps(ids, indent=4)


def build(lengths, split, num_samples, L, seed, E1=1):
    v = np.array([1.0, 1.0, 1.0])
    v = v / np.sum(v)
    e = [0, v[0], v[0] + v[1], v[0] + v[1] + v[2]]
    beg, end = int(round(e[split] * float(N))), int(round(e[split + 1] * float(N)))
    docs = np.arange(beg, end, dtype=np.int32)
    T = int(np.sum(lengths[docs]))
    epochs, t = 1, T
    while t < num_samples * L + E1:
        epochs += 1
        t += T
    sep = False
    if epochs > 1:
        per = (T - E1) // L
        sans = ((epochs - 1) * T - E1) // L
        sep = (num_samples - sans) < int(0.80 * per)
    rs = np.random.RandomState(seed)
    doc = doc_index(docs, epochs, rs, sep)
    si = sample_index(lengths, doc, L, epochs, T, E1)
    total = si.shape[0] - 1
    sh = shuffle_index(sans if sep else total, total, rs)
    return doc, si, sh, epochs, sep


def text(lengths, doc, si, sh, k, L, E1=1):
    j = int(sh[k])
    d0, o0 = int(si[j][0]), int(si[j][1])
    d1, o1 = int(si[j + 1][0]), int(si[j + 1][1])
    if d0 == d1:
        return mock_tokens(lengths, doc[d0], o0, o1 - o0 + E1)
    parts = [mock_tokens(lengths, doc[d0], o0, MAXLEN)]
    for i in range(d0 + 1, d1):
        parts.append(mock_tokens(lengths, doc[i], 0, MAXLEN))
    parts.append(mock_tokens(lengths, doc[d1], 0, o1 + E1))
    return np.concatenate(parts)


def main():
    lengths = np.random.default_rng(0).integers(1, MAXLEN, size=N, dtype=np.int32)
    print("# made by tests/data/mock/make_reference.py with numpy", np.__version__)
    print("lengths first10", " ".join(str(x) for x in lengths[:10]), "sum", int(lengths.sum(dtype=np.int64)))
    # (name, split, num_samples, L, seed)
    configs = [("t1024", 0, 100000, 1024, 1234), ("v512", 1, 1000, 512, 7)]
    names = ["train", "valid", "test"]
    for name, split, ns, L, seed in configs:
        doc, si, sh, epochs, sep = build(lengths, split, ns, L, seed)
        desc = describe(names[split], ns, L, seed)
        md5 = hashlib.md5(desc.encode()).hexdigest()
        print(name, "md5", md5, "epochs", epochs, "separate", int(sep), "length", len(sh))
        for an, a in (("document_index", doc), ("sample_index", si), ("shuffle_index", sh)):
            print(name, an, npy_sha(a))
        for k in range(5):
            t = text(lengths, doc, si, sh, k, L)
            assert len(t) == L + 1
            print(name, "sample", k, "sum", int(t.sum()), "first", " ".join(str(x) for x in t[:6]))


main()
