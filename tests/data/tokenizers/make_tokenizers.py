"""make_tokenizers.py - trains the small tokenizers in tests/data/tokenizers/.

Run by hand (never by the tests), from the repository root, in a throwaway venv:

    python3 -m venv /tmp/tokvenv
    /tmp/tokvenv/bin/pip install tokenizers==0.22.2 sentencepiece==0.2.3 transformers==4.57.6
    xz -dc ../shared/data/corpus/dev.jsonl.xz > /tmp/dev.jsonl
    /tmp/tokvenv/bin/python tests/data/tokenizers/make_tokenizers.py /tmp/dev.jsonl tests/data/tokenizers

Every tokenizer is trained on the "text" of the dev corpus (shared/data/corpus, 14,421 documents).
Training is deterministic for a given corpus and library version (tokenizers' BPE trainer breaks
ties by pair order, sentencepiece is run with one thread); the committed files are what this
script wrote with the versions above.  Each one imitates a family of real models, so that mdsprep
is tested on the features those models use (tests/data/README.md lists them):

  hf-llama3   Llama 3: Split(Llama-3 regex) + ByteLevel(use_regex=false), BPE with
              ignore_merges, 256 special tokens after the vocabulary, BOS added by a
              TemplateProcessing post-processor; 65,536 ids in all, so Megatron writes int32
  hf-qwen     Qwen2: NFC normalizer, Split(Qwen2 regex, single digits) + ByteLevel, no BOS
  hf-neox     GPT-NeoX: NFC, ByteLevel(use_regex=true) (the GPT-2 regex), specials at ids 0 and 1,
              non-special normalized added tokens for runs of spaces, tokenizer_class
              GPTNeoXTokenizerFast and add_prefix_space in tokenizer_config.json (transformers
              rewrites the pre-tokenizer)
  hf-tekken   Mistral-Nemo (Tekken) / o200k-style regex with case-aware letter classes (its
              own scanner in mds; test_tokenizers.sh respells it for the general PCRE2
              engine), BOS template, a special token with lstrip and rstrip
  sp-bpe.model      Llama 2: SentencePiece BPE, byte fallback, identity normalization, no
                    extra-whitespace removal, split digits, whitespace-only pieces
  sp-unigram.model  SentencePiece unigram with the default nmt_nfkc normalizer, user-defined
                    symbols and a pad piece, no byte fallback
"""
import json
import os
import sys

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
TEKKEN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
          r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|"
          r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def texts(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)["text"]


def save(tok, config, out, pretty=True, string_merges=False):
    """tokenizer.json as tokenizers writes it (pretty or compact); string_merges rewrites the
    merges in the older "a b" form (tokenizers < 0.20, the original Llama 3 and GPT-2 files)."""
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "tokenizer.json")
    if string_merges:
        data = json.loads(tok.to_str())
        data["model"]["merges"] = [" ".join(m) for m in data["model"]["merges"]]
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, indent=2)
    else:
        tok.save(path, pretty=pretty)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


def bpe_trainer(vocab_size, special=()):
    return trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                               special_tokens=list(special),
                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet())


def llama3(corpus, out):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts(corpus), bpe_trainer(65536 - 256))
    n = tok.get_vocab_size()
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>",
                "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
                "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
    specials += ["<|reserved_special_token_%d|>" % i for i in range(3, 3 + 256 - len(specials))]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    bos = tok.token_to_id("<|begin_of_text|>")
    assert bos == n
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    save(tok, {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
               "eos_token": "<|end_of_text|>", "model_max_length": 131072,
               "clean_up_tokenization_spaces": True}, out, pretty=False)


def qwen(corpus, out):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.train_from_iterator(texts(corpus), bpe_trainer(8000 - 3))
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False)
                            for s in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]])
    save(tok, {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": None,
               "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
               "model_max_length": 32768}, out)


def neox(corpus, out):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                                 use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    tok.train_from_iterator(texts(corpus), bpe_trainer(4096, ["<|endoftext|>", "<|padding|>"]))
    tok.add_tokens([AddedToken(" " * k, special=False, normalized=True) for k in range(24, 1, -1)])
    save(tok, {"tokenizer_class": "GPTNeoXTokenizerFast", "add_prefix_space": True,
               "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
               "unk_token": "<|endoftext|>", "model_max_length": 2048}, out, string_merges=True)


def tekken(corpus, out):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(TEKKEN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts(corpus), bpe_trainer(8000, ["<unk>", "<s>", "</s>"]))
    tok.add_special_tokens([AddedToken("[INST]", special=True, normalized=False),
                            AddedToken("[/INST]", special=True, normalized=False),
                            AddedToken("<mask>", special=True, normalized=False, lstrip=True,
                                       rstrip=True)])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B:1", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    save(tok, {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
               "eos_token": "</s>", "unk_token": "<unk>", "model_max_length": 1024000}, out)


def sentencepiece_models(corpus, out):
    import sentencepiece as spm
    lines = os.path.join(out, "sp-train.txt.tmp")
    with open(lines, "w", encoding="utf-8") as f:
        for t in texts(corpus):
            for line in t.split("\n"):
                if line.strip():
                    f.write(line + "\n")
    common = dict(input=lines, vocab_size=8000, character_coverage=0.9995, num_threads=1,
                  input_sentence_size=400000, shuffle_input_sentence=False, minloglevel=2)
    spm.SentencePieceTrainer.train(model_prefix=os.path.join(out, "sp-bpe"), model_type="bpe",
                                   byte_fallback=True, normalization_rule_name="identity",
                                   remove_extra_whitespaces=False, split_digits=True,
                                   allow_whitespace_only_pieces=True, **common)
    spm.SentencePieceTrainer.train(model_prefix=os.path.join(out, "sp-unigram"),
                                   model_type="unigram", pad_id=3,
                                   user_defined_symbols=["<sep>", "[MASK]", "<br>"], **common)
    os.remove(lines)
    for name in ("sp-bpe", "sp-unigram"):
        os.remove(os.path.join(out, name + ".vocab"))


if __name__ == "__main__":
    corpus, out = sys.argv[1], sys.argv[2]
    llama3(corpus, os.path.join(out, "hf-llama3"))
    qwen(corpus, os.path.join(out, "hf-qwen"))
    neox(corpus, os.path.join(out, "hf-neox"))
    tekken(corpus, os.path.join(out, "hf-tekken"))
    sentencepiece_models(corpus, out)
