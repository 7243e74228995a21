"""make_tok_corpus.py - writes the seed corpora of fuzz_hfjson and fuzz_spmodel.

Run by hand (never by the tests) from the repository root, in the venv of
tests/data/tokenizers/make_tokenizers.py:

    /tmp/tokvenv/bin/python tests/fuzz/make_tok_corpus.py

corpus/hfjson/: small byte-level BPE tokenizer.json files (the 256 byte tokens and a
few merges) with each feature mdsprep reads (normalizers, Split patterns of the
scanners and of the general engine, ByteLevel options, added tokens with lstrip and
rstrip, post-processors, tokenizer_config.json classes after the "@@config@@"
separator), and broken ones (cut short, wrong types, bad merges, refused features).
corpus/spmodel/: tiny SentencePiece models trained here (BPE with byte fallback,
unigram with user-defined symbols, unigram with the default nmt_nfkc normalizer) and
damaged copies.
"""
import json
import os
import random

import sentencepiece as spm

OUT = "tests/fuzz/corpus"
SEP = "\n@@config@@\n"


def byte_vocab():
    ok = lambda i: 33 <= i <= 126 or 161 <= i <= 172 or 174 <= i <= 255
    vocab, k = {}, 0
    for b in range(256):
        if ok(b):
            vocab[chr(b)] = b
        else:
            vocab[chr(256 + k)] = b
            k += 1
    return vocab


def tok(pre, normalizer=None, post=None, added=(), merges_as_strings=False, ignore_merges=False):
    v = byte_vocab()
    extra = ["he", "hel", "hell", "hello", "\u0120t", "\u0120th", "\u0120the", "in", "ing"]
    merges = [["h", "e"], ["he", "l"], ["hel", "l"], ["hell", "o"], ["\u0120", "t"], ["\u0120t", "h"],
              ["\u0120th", "e"], ["i", "n"], ["in", "g"]]
    for t in extra:
        v[t] = len(v)
    d = {"version": "1.0", "truncation": None, "padding": None,
         "added_tokens": [dict(id=len(v) + i, content=c, single_word=False, lstrip=ls, rstrip=rs,
                               normalized=norm, special=sp) for i, (c, ls, rs, norm, sp) in enumerate(added)],
         "normalizer": normalizer, "pre_tokenizer": pre, "post_processor": post, "decoder": {"type": "ByteLevel"},
         "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                   "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                   "ignore_merges": ignore_merges, "vocab": v,
                   "merges": [" ".join(m) for m in merges] if merges_as_strings else merges}}
    return json.dumps(d, ensure_ascii=False)


BL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
BL0 = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
TEKKEN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|\p{N}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def split(p, behavior="Isolated", invert=False, kind="Regex"):
    return {"type": "Split", "pattern": {kind: p}, "behavior": behavior, "invert": invert}


def seq(*ps):
    return {"type": "Sequence", "pretokenizers": list(ps)}


TEMPLATE = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                    {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [265], "tokens": ["<s>"]}}}


def hf():
    d = os.path.join(OUT, "hfjson")
    os.makedirs(d, exist_ok=True)
    cases = {
        "bytelevel": tok(BL),
        "bytelevel-prefix-config": tok(BL) + SEP + json.dumps({"tokenizer_class": "GPT2TokenizerFast",
                                                                 "add_prefix_space": True}),
        "nfc": tok(BL, normalizer={"type": "Sequence", "normalizers": [{"type": "NFC"}]}),
        "llama3": tok(seq(split(LLAMA3), BL0), post=TEMPLATE, added=[("<s>", False, False, False, True)],
                      ignore_merges=True) + SEP + json.dumps({"eos_token": "<s>"}),
        "tekken": tok(seq(split(TEKKEN), BL0)),
        "behaviors": tok(seq(split(" ", "MergedWithPrevious", kind="String"), split(r"\d+", "Contiguous", True),
                             split("x", "MergedWithNext", kind="String"), split(r"\s", "Removed"), BL)),
        "added": tok(BL, added=[("<mask>", True, True, False, True), ("  ", False, False, True, False),
                                ("hello", False, False, True, False)]),
        "neox-class": tok(BL, merges_as_strings=True) + SEP + json.dumps(
            {"tokenizer_class": "GPTNeoXTokenizerFast", "add_bos_token": True, "bos_token": "<|endoftext|>"}),
        "roberta": tok(BL, post={"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0],
                                 "trim_offsets": True, "add_prefix_space": False}),
        "bad-truncated": tok(BL)[:500],
        "bad-metaspace": tok({"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always"}),
        "bad-merge": tok(BL).replace('["in", "g"]', '["in", "zz"]'),
        "bad-types": tok(BL).replace('"ignore_merges": false', '"ignore_merges": 3'),
        "bad-regex": tok(seq(split(r"\w+(?<=[[:alpha:]])"), BL0)),
        "bad-config": tok(BL) + SEP + '{"eos_token": {"content": 7}}',
    }
    for name, text in cases.items():
        with open(os.path.join(d, name), "w", encoding="utf-8") as f:
            f.write(text)


def sp():
    d = os.path.join(OUT, "spmodel")
    os.makedirs(d, exist_ok=True)
    text = os.path.join(d, "train.tmp")
    rnd = random.Random(3)
    words = ["hello", "world", "the", "tokenizer", "caf\u00e9", "\u4e2d\u6587", "na\u00efve", "12345", "<br>", "x"]
    with open(text, "w", encoding="utf-8") as f:
        for _ in range(2000):
            f.write(" ".join(rnd.choice(words) for _ in range(rnd.randrange(1, 12))) + "\n")
    common = dict(input=text, num_threads=1, minloglevel=2, hard_vocab_limit=False)
    spm.SentencePieceTrainer.train(model_prefix=os.path.join(d, "bpe"), model_type="bpe", byte_fallback=True, vocab_size=330,
                                   normalization_rule_name="identity", **common)
    spm.SentencePieceTrainer.train(model_prefix=os.path.join(d, "unigram"), model_type="unigram", vocab_size=120,
                                   normalization_rule_name="identity", user_defined_symbols=["<br>"], pad_id=3,
                                   **common)
    spm.SentencePieceTrainer.train(model_prefix=os.path.join(d, "unigram-nfkc"), model_type="unigram",
                                   vocab_size=120, **common)
    os.remove(text)
    for name in ("bpe", "unigram", "unigram-nfkc"):
        os.remove(os.path.join(d, name + ".vocab"))
        os.rename(os.path.join(d, name + ".model"), os.path.join(d, name))
    blob = bytearray(open(os.path.join(d, "unigram-nfkc"), "rb").read())
    for i in range(len(blob) // 2, len(blob), 1009):   # damage the precompiled charsmap
        blob[i] ^= 0xA5
    open(os.path.join(d, "unigram-nfkc-damaged"), "wb").write(bytes(blob))
    for name in ("bpe", "unigram"):
        blob = open(os.path.join(d, name), "rb").read()
        for k, cut in enumerate([7, len(blob) // 3, len(blob) - 5]):
            open(os.path.join(d, "%s-cut%d" % (name, k)), "wb").write(blob[:cut])
        flip = bytearray(blob)
        for i in range(0, len(flip), 97):
            flip[i] ^= 0x5A
        open(os.path.join(d, name + "-flipped"), "wb").write(bytes(flip))


if __name__ == "__main__":
    hf()
    sp()
