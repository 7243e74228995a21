"""tiktoken_bench.py - the peer tokenizer for `make bench`.

Loads GPT-2 into tiktoken from the local vocab files (no download), reads the
same texts as bench_tokenize (the "text" of each JSON line), encodes them on
one thread with encode_ordinary (plain text, like mds's default), and prints
MB/s and the same FNV-1a checksum of all ids, so equal ids are checked too.
"""
import json
import sys
import time

import tiktoken
from tiktoken.load import data_gym_to_mergeable_bpe_ranks

path, vocab, merges = sys.argv[1:4]
repeat = int(sys.argv[4]) if len(sys.argv) > 4 else 3
ranks = data_gym_to_mergeable_bpe_ranks(merges, vocab)
enc = tiktoken.Encoding(
    "gpt2-local",
    pat_str=r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
    mergeable_ranks=ranks,
    special_tokens={"<|endoftext|>": 50256},
)
texts = []
with open(path, encoding="utf-8") as f:
    for line in f:
        if line.strip():
            texts.append(json.loads(line)["text"])
nbytes = sum(len(t.encode("utf-8")) for t in texts)
best = 1e9
for _ in range(repeat):
    t = time.perf_counter()
    out = [enc.encode_ordinary(s) for s in texts]
    best = min(best, time.perf_counter() - t)
h = 1469598103934665603
ntok = 0
for ids in out:
    for i in ids:
        h = ((h ^ i) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    ntok += len(ids)
print(f"tiktoken {tiktoken.__version__}: {nbytes / 1e6 / best:.1f} MB/s (1 thread), tokens: {ntok}, ids checksum {h:016x}")
