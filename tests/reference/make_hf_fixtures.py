#!/usr/bin/env python3
"""make_hf_fixtures.py - record the HuggingFace fixtures of tests/data/hf/
with the real `transformers` (run by hand; never by the tests, which need
no Python).

Run from the repository root after `make`, in a throwaway venv that sees
Debian's python3-torch (the project's other reference script uses it):

    /usr/bin/python3 -m venv --system-site-packages /tmp/hfvenv
    /tmp/hfvenv/bin/pip install transformers==4.46.3 safetensors
    /tmp/hfvenv/bin/python tests/reference/make_hf_fixtures.py

It writes, for the export direction (mdstrain -> HuggingFace):

    tests/data/hf/export_gpt.logits
    tests/data/hf/export_llama.logits
    tests/data/hf/export_llama_bias.logits
    tests/data/hf/export_llama_interleaved.logits

transformers' logits on the folder `mdstrain --export-hf` wrote from a
3-iteration mdstrain checkpoint of: GPT (GPT2LMHeadModel); Llama with GQA,
untied, RMSNorm, SwiGLU, RoPE, no biases; Llama multi-head, tied, with
linear biases, RoPE base 500; Llama with interleaved RoPE (q/k rows
permuted to rotate_half on export), Llama 3.1 RoPE scaling factor 8, GQA,
tied, biases (all LlamaForCausalLM);

and for the import direction (HuggingFace -> mdstrain):

    tests/data/hf/gpt2_tiny/             config.json + model.safetensors saved by
    tests/data/hf/llama_tiny/            transformers' save_pretrained of a randomly
                                         initialised model (torch.manual_seed), every
                                         parameter then drawn at random (biases and
                                         norm weights included, so that no mapping
                                         hides behind zeros and ones)
    tests/data/hf/gpt2_tiny.logits       their logits in transformers
    tests/data/hf/llama_tiny.logits
    tests/data/hf/gpt2_tiny_hub/         gpt2_tiny's weights in the hub's `gpt2` layout
                                         (GPT2Model names, attn.bias mask buffers)

The mdstrain flags of each model are MODELS below; tests/cli/test_hf.sh
repeats them.  A .logits file is "MDSLGT01", int32 B, T, V, int32 tokens
(B, T), float32 logits (B, T, V), little-endian; the batch is the fixed
TOKENS below, the logits are transformers' forward in float32 in eval mode
(no dropout) over the whole vocabulary of config.json.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import torch
import transformers
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

ROOT = os.getcwd()
MDSTRAIN = os.path.join(ROOT, os.environ.get("BUILD", "build"), "mdstrain")
OUT = os.path.join(ROOT, "tests", "data", "hf")

# the mdstrain flags of each model (tests/cli/test_hf.sh holds the same)
GPT = ("--tokenizer-type NullTokenizer --vocab-size 250 --make-vocab-size-divisible-by 8 "
       "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --max-position-embeddings 16").split()
LLAMA = ("--tokenizer-type NullTokenizer --vocab-size 250 --make-vocab-size-divisible-by 8 "
         "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --max-position-embeddings 16 "
         "--position-embedding-type rope --normalization RMSNorm --swiglu --ffn-hidden-size 48 "
         "--group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights "
         "--disable-bias-linear").split()
LLAMA_BIAS = ("--tokenizer-type NullTokenizer --vocab-size 250 --make-vocab-size-divisible-by 8 "
              "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --max-position-embeddings 16 "
              "--position-embedding-type rope --rotary-base 500 --normalization RMSNorm --swiglu "
              "--ffn-hidden-size 40").split()
LLAMA_INTERLEAVED = ("--tokenizer-type NullTokenizer --vocab-size 250 --make-vocab-size-divisible-by 8 "
                     "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --max-position-embeddings 16 "
                     "--position-embedding-type rope --rotary-interleaved --use-rope-scaling --rope-scaling-factor 8 "
                     "--normalization RMSNorm --swiglu --ffn-hidden-size 40 "
                     "--group-query-attention --num-query-groups 2").split()
TRAIN = ("--mock-data --seq-length 16 --micro-batch-size 2 --train-iters 3 --lr 1e-2 "
         "--log-interval 1 --eval-iters 0 -q").split()
B, T = 2, 12


def tokens(V):
    return [[(7 * t + 3 * b + 1) % V for t in range(T)] for b in range(B)]


def write_logits(path, toks, logits):
    Bv, Tv, V = logits.shape
    with open(path, "wb") as f:
        f.write(b"MDSLGT01")
        f.write(struct.pack("<3i", Bv, Tv, V))
        for row in toks:
            f.write(struct.pack("<%di" % len(row), *row))
        f.write(logits.contiguous().numpy().astype("<f4").tobytes())


def logits_of(model, toks):
    model.eval()
    with torch.no_grad():
        return model(torch.tensor(toks, dtype=torch.long)).logits.float()


def export_case(name, flags, tmp):
    ckpt = os.path.join(tmp, name)
    folder = os.path.join(tmp, name + "_hf")
    subprocess.run([MDSTRAIN] + flags + TRAIN + ["--save", ckpt], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([MDSTRAIN] + flags + ["--load", ckpt, "--export-hf", folder], check=True)
    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32)
    V = model.config.vocab_size
    toks = tokens(250)
    lg = logits_of(model, toks)
    assert lg.shape == (B, T, V)
    write_logits(os.path.join(OUT, "export_%s.logits" % name), toks, lg)
    print("export_%s: %s, logits %s, max |logit| %.4g" % (name, type(model).__name__, tuple(lg.shape),
                                                          lg.abs().max().item()))


def randomise(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("weight") and p.dim() == 1:   # norm weights around 1
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=g))


def import_case(name, model, seed):
    randomise(model, seed)
    folder = os.path.join(OUT, name)
    shutil.rmtree(folder, ignore_errors=True)
    model.save_pretrained(folder, safe_serialization=True)
    gen = os.path.join(folder, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)   # not read by mdstrain; keeps the fixture to what matters
    toks = tokens(model.config.vocab_size)
    lg = logits_of(model, toks)
    write_logits(os.path.join(OUT, name + ".logits"), toks, lg)
    print("%s: %s, %d bytes of safetensors, logits %s" % (name, type(model).__name__,
          os.path.getsize(os.path.join(folder, "model.safetensors")), tuple(lg.shape)))


def hub_layout(name, model):
    """The same GPT-2 weights as the hub's `gpt2` stores them: GPT2Model's
    names (no "transformer." prefix, no lm_head) plus the old causal-mask
    buffers h.N.attn.bias (1, 1, n_positions, n_positions); config.json copied."""
    from safetensors.torch import save_file
    folder = os.path.join(OUT, name + "_hub")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    sd = {k[len("transformer."):]: v.contiguous() for k, v in model.state_dict().items() if k.startswith("transformer.")}
    n = model.config.n_positions
    for i in range(model.config.n_layer):
        sd["h.%d.attn.bias" % i] = torch.tril(torch.ones(n, n)).view(1, 1, n, n)
    save_file(sd, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    shutil.copy(os.path.join(OUT, name, "config.json"), folder)
    print("%s_hub: %d tensors" % (name, len(sd)))


def main():
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    print("transformers %s, torch %s" % (transformers.__version__, torch.__version__))
    with tempfile.TemporaryDirectory() as tmp:
        export_case("gpt", GPT, tmp)
        export_case("llama", LLAMA, tmp)
        export_case("llama_bias", LLAMA_BIAS, tmp)
        export_case("llama_interleaved", LLAMA_INTERLEAVED, tmp)
    torch.manual_seed(11)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=96, n_positions=16, n_embd=32, n_layer=2, n_head=4,
                                      activation_function="gelu_new", layer_norm_epsilon=1e-5,
                                      bos_token_id=95, eos_token_id=95))
    import_case("gpt2_tiny", gpt2, 11)
    hub_layout("gpt2_tiny", gpt2)
    torch.manual_seed(12)
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16,
                                         rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                                         attention_bias=False, bos_token_id=95, eos_token_id=95))
    import_case("llama_tiny", llama, 12)


if __name__ == "__main__":
    sys.exit(main())
