"""make_fixtures.py - writes the reference fixtures of tests/data/tokenizers/ from the libraries.

Run by hand (never by the tests), from the repository root, with the venv of make_tokenizers.py
plus Megatron-LM core_v0.8.0 extracted somewhere (tests/data/golden-tok/README.md says how):

    /tmp/tokvenv/bin/python tests/data/tokenizers/make_fixtures.py MEGATRON_DIR tests/data/tokenizers

It writes, each line one JSON object:

  ref-NAME.jsonl   {"text": T, "ids": [...]}: Megatron's own tokenizer wrapper
                   (megatron/training/tokenizer/tokenizer.py) on T, i.e. transformers /
                   sentencepiece underneath, for 600 random strings built to hit the
                   tokenizers' corner cases (whitespace runs, contractions, digits, marks,
                   special and added tokens, characters from several Unicode versions).
                   The first line is {"vocab_size": V, "eod": E} of the wrapper.
  splits-P.jsonl   {"text": T, "ends": [...]}: the byte offsets where tokenizers' Split(P,
                   "isolated") ends its pieces, for the patterns P of the scanners and the
                   general engine (gpt2, llama3, qwen2, tekken).
  nfc.jsonl        {"text": T, "nfc": N}: tokenizers' NFC normalizer: every canonical
                   decomposition recomposed, combining marks of every Unicode version in
                   random orders, Hangul jamo.

The random strings come from a fixed seed, so reruns give the same files.
"""
import json
import os
import random
import sys

from tokenizers import Regex, normalizers, pre_tokenizers

PATTERNS = {
    "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    "llama3": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "tekken": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}

POOL = list(" \t\n\r\x0b\x0c\u00a0\u2009\u3000\u180e\u0085'sStTmMdDrReEvVlL\u017f\u212a0123456789"
            "\u0661\u00bd\u2160aZ\u00e9\u0301\u0300\u4e2d\u6587\u00c5!?.,;:-_/\\\"()[]{}<>|@#$%^&*+=~`"
            "\U0001F600\u0378\u05d0\u0915\u093f\u200d\ufeff\u2581\u088f\u1c89\ua7cb\U00011938\u0f73"
            "\u1100\u1161\u11a8\uac00") + [
    "<s>", "</s>", "<pad>", "<unk>", "<EOD>", "<CLS>", "<SEP>", "<MASK>", "<sep>", "[MASK]", "<br>",
    "<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "[INST]", "[/INST]", "<mask>",
    "  ", "    ", " the", "ing", "hello", "HELLO", "\n\n", "\u212b", "A\u030a", "\ufb01", "\u2460", "12345",
    "'ll", "'LL", "'re", "\u0301\u0316", "ppp", "----", "====", "    return", "x = 1"]


def random_texts(seed, n):
    rnd = random.Random(seed)
    out = ["", " ", "  ", "\n", "a", "<s>", "<|begin_of_text|>", " <mask> ", "hello   world\n\n"]
    while len(out) < n:
        k = rnd.randrange(1, 32)
        s = "".join(rnd.choice(POOL) if rnd.random() < 0.9 else chr(rnd.randrange(0x20, 0x30000))
                    for _ in range(k))
        out.append("".join(c for c in s if not 0xD800 <= ord(c) <= 0xDFFF))
    return out


def write(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def splits(out):
    texts = random_texts(11, 1500)
    for name, pat in PATTERNS.items():
        sp = pre_tokenizers.Split(Regex(pat), behavior="isolated")
        rows = []
        for t in texts:
            ends, pos, byte = [], 0, 0
            for _, (a, e) in sp.pre_tokenize_str(t):
                byte += len(t[pos:e].encode())
                pos = e
                ends.append(byte)
            rows.append({"text": t, "ends": ends})
        write(os.path.join(out, "splits-%s.jsonl" % name), rows)


def nfc(out):
    import unicodedata
    n = normalizers.NFC()
    texts = []
    for c in range(0x110000):
        if 0xD800 <= c <= 0xDFFF:
            continue
        d = unicodedata.decomposition(chr(c))
        if d and not d.startswith("<"):
            texts.append(unicodedata.normalize("NFD", chr(c)))
    for c in [0x105C9, 0x11383, 0x11938, 0x16121, 0x16D68]:   # compositions added after Unicode 9.0
        texts.append("".join(chr(int(x, 16)) for x in
                             {0x105C9: "105D2 0307", 0x11383: "11382 113C9", 0x11938: "11935 11930",
                              0x16121: "1611E 1611E", 0x16D68: "16D67 16D67"}[c].split()))
    marks = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and unicodedata.combining(chr(c))]
    marks += [0x0301, 0x0300, 0x0327, 0x0323, 0x1161, 0x11A8, 0x0F71, 0x0F72, 0x0F74, 0x0B3E, 0x1DF6, 0x1DFA]
    bases = [ord(x) for x in "aeiouAEOUcnsgzyKkLl"] + [0x1100, 0xAC00, 0xAC01, 0x0B47, 0x0CC6, 0x3099, 0x304B,
                                                       0x05D0, 0x0915, 0x0F40, 0x212B, 0x0344]
    rnd = random.Random(13)
    for _ in range(3000):
        s = ""
        for _ in range(rnd.randrange(1, 6)):
            s += chr(rnd.choice(bases)) + "".join(chr(rnd.choice(marks)) for _ in range(rnd.randrange(0, 5)))
        texts.append(s)
    write(os.path.join(out, "nfc.jsonl"), [{"text": t, "nfc": n.normalize_str(t)} for t in texts])


CONFIGS = [
    ("hf-llama3", "HuggingFaceTokenizer", "hf-llama3"),
    ("hf-qwen", "HuggingFaceTokenizer", "hf-qwen"),
    ("hf-neox", "HuggingFaceTokenizer", "hf-neox"),
    ("hf-tekken", "HuggingFaceTokenizer", "hf-tekken"),
    ("sp-bpe-sp", "SentencePieceTokenizer", "sp-bpe.model"),
    ("sp-bpe-gptsp", "GPTSentencePieceTokenizer", "sp-bpe.model"),
    ("sp-bpe-llama2", "Llama2Tokenizer", "sp-bpe.model"),
    ("sp-unigram-sp", "SentencePieceTokenizer", "sp-unigram.model"),
    ("sp-unigram-gptsp", "GPTSentencePieceTokenizer", "sp-unigram.model"),
    ("sp-unigram-llama2", "Llama2Tokenizer", "sp-unigram.model"),
]


def refs(megatron, out):
    sys.path.insert(0, megatron)
    from megatron.training.tokenizer import tokenizer as mt
    classes = {"HuggingFaceTokenizer": mt._HuggingFaceTokenizer, "SentencePieceTokenizer": mt._SentencePieceTokenizer,
               "GPTSentencePieceTokenizer": mt._GPTSentencePieceTokenizer, "Llama2Tokenizer": mt._Llama2Tokenizer}
    texts = random_texts(17, 600)
    for name, ttype, model in CONFIGS:
        t = classes[ttype](os.path.join(out, model))
        rows = [{"vocab_size": t.vocab_size, "eod": t.eod}]
        rows += [{"text": s, "ids": list(t.tokenize(s))} for s in texts]
        write(os.path.join(out, "ref-%s.jsonl" % name), rows)


if __name__ == "__main__":
    megatron, out = sys.argv[1], sys.argv[2]
    splits(out)
    nfc(out)
    refs(megatron, out)
