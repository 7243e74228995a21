"""tok_reference.py - the reference libraries for `make bench` (bench/tokenizers.sh).

    python tok_reference.py FILE.jsonl TYPE MODEL [REPEAT]

Reads the "text" of every JSON line, then encodes all of them on one thread with the library
Megatron's wrapper calls, timed, best of REPEAT:
  HuggingFaceTokenizer: transformers' AutoTokenizer(MODEL) is built first (so the pipeline is
    what transformers makes of the files), then its `tokenizers` backend's encode_batch(texts),
    with RAYON_NUM_THREADS=1 (tokenizers' thread pool) set before import;
  SentencePiece types: sentencepiece's encode(texts, num_threads=1).
It prints MB/s, tokens/s and the FNV-1a checksum of all ids (with Llama2Tokenizer's BOS added
after timing), so that bench_tokenize's checksum for the same type can be compared.  TYPE is
HuggingFaceTokenizer, GPTSentencePieceTokenizer (sentencepiece's encode as it is) or
Llama2Tokenizer.
"""
import json
import os
import sys
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

path, ttype, model = sys.argv[1:4]
repeat = int(sys.argv[4]) if len(sys.argv) > 4 else 3
texts = []
with open(path, encoding="utf-8") as f:
    for line in f:
        if line.strip():
            texts.append(json.loads(line)["text"])
nbytes = sum(len(t.encode("utf-8")) for t in texts)


def fnv(seqs):
    h = 1469598103934665603
    n = 0
    for ids in seqs:
        for i in ids:
            h = ((h ^ i) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
        n += len(ids)
    return h, n


best = 1e9
if ttype == "HuggingFaceTokenizer":
    import tokenizers
    from transformers import AutoTokenizer
    backend = AutoTokenizer.from_pretrained(model).backend_tokenizer
    backend.no_truncation()
    backend.no_padding()
    for _ in range(repeat):
        t = time.perf_counter()
        enc = backend.encode_batch(texts, add_special_tokens=True)
        best = min(best, time.perf_counter() - t)
    out = [e.ids for e in enc]
    lib = "tokenizers %s encode_batch" % tokenizers.__version__
else:
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=model)
    for _ in range(repeat):
        t = time.perf_counter()
        out = sp.encode(texts, out_type=int, num_threads=1)
        best = min(best, time.perf_counter() - t)
    lib = "sentencepiece %s encode" % spm.__version__
    if ttype == "Llama2Tokenizer":
        out = [[sp.bos_id()] + ids for ids in out]
h, n = fnv(out)
print("%s: %.1f MB/s, %.0f tokens/s (1 thread), tokens: %d, ids checksum %016x"
      % (lib, nbytes / 1e6 / best, n / best if n else 0, n, h))
