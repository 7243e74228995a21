#!/usr/bin/python3
"""make_reference.py - write the PyTorch reference files that
tests/unit/test_reference.c holds the C model (train/model.c) to.

Run by hand from the repository root (not by `make test`; CI needs no torch):

    /usr/bin/python3 tests/reference/make_reference.py [FILE.bin ...]

(with file names, only those files are written).
It needs only python3-torch (Debian's 1.13) and python3-numpy.  It writes

    tests/data/reference/gpt_tiny.bin         tied output layer (the default)
    tests/data/reference/gpt_tiny_untied.bin  --untie-embeddings-and-output-weights
    tests/data/reference/llama_*.bin          the Llama block (RoPE, RMSNorm, SwiGLU,
                                              grouped-query attention, no biases), tied
                                              and untied, with and without GQA
    tests/data/reference/gpt_tiny_embedln*.bin  bigscience's --embed-layernorm, tied
                                              and untied (version 2 files)

and prints, for each, how far the same computation in float64 lies from the
float32 one that is stored: that is the size of fp32 rounding noise, which
the tolerances of test_reference.c must exceed and nothing else may.
Re-running it reproduces the files within that noise, not bitwise on every
CPU (torch's kernels pick their instruction set); the committed GPT files
were written before the Llama ones and are kept as they are.

The model is Megatron's GPT written here from its definition, in plain
torch ops, on purpose not ported from model.c (llm.c's train_gpt2.py /
test_gpt2.c arrangement: an independent reference, not a port):
  - h = wte[token] + wpe[position]  (learned absolute positions, from 0);
  - L pre-LayerNorm blocks (eps 1e-5, biased variance):
      h = h + proj(attn(LN1(h))),  h = h + fc2(gelu_tanh(fc1(LN2(h))));
    attention is causal multi-head with a fused QKV linear whose per-token
    output is [q | k | v], each C wide, head j at columns j*hs of each
    (mds's layout, kernels/kernels.h), scores scaled by 1/sqrt(hs); every
    linear has a bias; ffn = 4C; GELU is the tanh approximation;
  - final LayerNorm, then logits = h @ W^T with W = wte (tied, no bias) or
    a separate output weight (untied), over the PADDED vocabulary;
  - loss = sum(ce * mask) / sum(mask) (Megatron's masked mean), where ce is
    the cross entropy of the softmax over all Vp columns (padding included).
No dropout.  Training: 10 steps on the same batch, each: zero grads,
forward, backward, clip as Megatron's clip_grad_norm_ (global L2 norm over
all gradients; multiply by clip / (norm + 1e-6) when that is < 1), then
torch.optim.AdamW with two groups: weight decay on the weight matrices and
the embeddings, none on biases and LayerNorm parameters.

Weights are NOT mds's initialisation: they are drawn here with a fixed torch
seed and larger spread than Megatron's init (so that gradients and logits
are generic, not near-uniform), LayerNorm weights and all biases included.

The Llama block (version-2 files; Megatron's --position-embedding-type rope
--normalization RMSNorm --swiglu --group-query-attention --disable-bias-linear),
again written from the definitions:
  - no position embedding; RoPE on q and k after the QKV linear, rotating the
    first rot = int(hs * rotary_percent) channels of each head by position t:
    inv_freq = 1 / base^(arange(0, rot, 2) / rot) and freqs = t * inv_freq in
    float32 as Megatron's RotaryEmbedding computes them; not interleaved:
    x * cos + rotate_half(x) * sin with rotate_half([a, b]) = [-b, a] over
    the halves and cos/sin of cat(freqs, freqs); interleaved: over (2i, 2i+1);
  - RMSNorm: x * rsqrt(mean(x^2) + eps) * w (no bias);
  - the QKV linear's per-token output is [q (NH hs) | k (G hs) | v (G hs)]
    (mds's layout); query head j uses key/value head j // (NH / G)
    (Megatron's query groups; torch: repeat_interleave);
  - the MLP: a = fc1(x) is [gate (F) | up (F)], out = fc2(silu(gate) * up);
  - biases on every linear only where the config says so.

The embedding LayerNorm (bigscience-workshop/Megatron-DeepSpeed at 8387ae17,
its --embed-layernorm, megatron/mpu/layers.py: a LayerNorm(C) inside
VocabParallelEmbedding, so with MixedFusedLayerNorm's default eps 1e-5
whatever --layernorm-epsilon says; language_model.py's Embedding then adds
the positions and applies the embedding dropout):
  - h = LN_emb(wte[token]) + wpe[position], the rest as GPT above;
  - its weight and bias are drawn like the other norms' and take no weight
    decay (bigscience's optimizer puts every LayerNorm in the no-decay
    group);
  - the blocks' and the final LayerNorm use eps 1e-3 in these files (the
    header's layernorm eps), so that a model that used that eps for the
    embedding norm too, or 1e-5 for the others, would not match.

File format (little-endian; version 1, and version 2 for the Llama block):
  header, 32 slots of 4 bytes (128 bytes):
    int32  [0] magic 0x4652444d ("MDRF")   [1] version 1
           [2] num_layers L   [3] hidden_size C   [4] num_heads NH
           [5] ffn_hidden_size F   [6] max_position_embeddings maxT
           [7] vocab_size V   [8] make_vocab_size_divisible_by
           [9] padded vocab Vp   [10] untie_embeddings (0/1)
           [11] micro-batch B   [12] sequence length T   [13] steps S
           [14] number of parameters P (floats)   [15] 0
    float32 [16] lr  [17] beta1  [18] beta2  [19] adam eps
            [20] weight decay  [21] clip grad  [22] layernorm eps
            [23..31] 0
  version 2 only, 16 more slots (header 192 bytes):
    int32   [32] position embedding (0 learned, 1 rope)  [33] normalization
                 (0 LayerNorm, 1 RMSNorm)  [34] swiglu  [35] num_query_groups G
                 [36] add_bias_linear  [37] rotary_interleaved
                 [38] embed_layernorm (0/1)  [39] 0
    float32 [40] rotary_base  [41] rotary_percent  [42] the embedding
            LayerNorm's eps (0 without it)  [43..47] 0
  then, packed in this order:
    int32   inputs   (B, T)
    int32   targets  (B, T)
    float32 mask     (B, T)      loss mask, with zeros
    float32 params   (P)         in mds's storage order (model.h gpt_params):
              wte (Vp,C), wpe (maxT,C), ln1w (L,C), ln1b (L,C),
              qkvw (L,3C,C), qkvb (L,3C), attprojw (L,C,C), attprojb (L,C),
              ln2w (L,C), ln2b (L,C), fcw (L,F,C), fcb (L,F),
              fcprojw (L,C,F), fcprojb (L,C), lnfw (C), lnfb (C),
              outw (Vp,C) only when untied, emblnw (C), emblnb (C) only
              with embed_layernorm; in version 2 a tensor the
              architecture lacks is left out (wpe with RoPE, the norm biases
              with RMSNorm, the linear biases without add_bias_linear), qkv
              is (L, C + 2 G hs, C) and fc (L, 2F, C) with SwiGLU
    float32 logits   (B, T, Vp)  of the first forward
    float32 loss     (1)         of the first forward
    float32 grads    (P)         of that loss, same order as params
    float32 losses   (S)         loss before each of the S AdamW steps
                                 (losses[0] == loss)
    float32 norms    (S)         gradient L2 norm before clipping, per step
  and nothing after (the reader checks the exact size).
"""
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

MAGIC = 0x4652444D
VERSION = 1

CFG = dict(L=2, C=20, NH=4, maxT=16, V=60, div=64, B=2, T=13, steps=10)
HP = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, wd=0.01, clip=1.0, ln_eps=1e-5)
SEED = 5  # issue 5

# mds's storage order; True where the tensor takes weight decay.
ORDER = [("wte", True), ("wpe", True), ("ln1w", False), ("ln1b", False),
         ("qkvw", True), ("qkvb", False), ("attprojw", True), ("attprojb", False),
         ("ln2w", False), ("ln2b", False), ("fcw", True), ("fcb", False),
         ("fcprojw", True), ("fcprojb", False), ("lnfw", False), ("lnfb", False),
         ("outw", True), ("emblnw", False), ("emblnb", False)]
EMBED_LN_EPS = 1e-5   # MixedFusedLayerNorm(normalized_shape, eps=1e-5), built without eps
EMBEDLN_FILES = [("gpt_tiny_embedln.bin", 0), ("gpt_tiny_embedln_untied.bin", 1)]
EMBEDLN_LN_EPS = 1e-3


def padded_vocab(V, div):
    return (V + div - 1) // div * div


def draw_weights(untie):
    """Weights in float32, keyed by mds's names, shapes as in model.h."""
    L, C, maxT = CFG["L"], CFG["C"], CFG["maxT"]
    Fh, Vp = 4 * C, padded_vocab(CFG["V"], CFG["div"])
    g = torch.Generator().manual_seed(SEED)

    def n(*shape, std=1.0, mean=0.0):
        return mean + std * torch.randn(*shape, generator=g, dtype=torch.float32)

    w = {
        "wte": n(Vp, C, std=0.3), "wpe": n(maxT, C, std=0.1),
        "ln1w": n(L, C, std=0.1, mean=1.0), "ln1b": n(L, C, std=0.1),
        "qkvw": n(L, 3 * C, C, std=0.2), "qkvb": n(L, 3 * C, std=0.1),
        "attprojw": n(L, C, C, std=0.2), "attprojb": n(L, C, std=0.1),
        "ln2w": n(L, C, std=0.1, mean=1.0), "ln2b": n(L, C, std=0.1),
        "fcw": n(L, Fh, C, std=0.2), "fcb": n(L, Fh, std=0.1),
        "fcprojw": n(L, C, Fh, std=0.1), "fcprojb": n(L, C, std=0.1),
        "lnfw": n(C, std=0.1, mean=1.0), "lnfb": n(C, std=0.1),
    }
    if untie:
        w["outw"] = n(Vp, C, std=0.3)
    return w


def draw_embedln_weights(untie):
    """GPT's weights plus the embedding LayerNorm's, from a generator of
    their own (the GPT weights are draw_weights' exactly)."""
    w = draw_weights(untie)
    g = torch.Generator().manual_seed(SEED + 3)
    C = CFG["C"]
    w["emblnw"] = 1.0 + 0.1 * torch.randn(C, generator=g, dtype=torch.float32)
    w["emblnb"] = 0.1 * torch.randn(C, generator=g, dtype=torch.float32)
    return w


def draw_batch():
    B, T, V = CFG["B"], CFG["T"], CFG["V"]
    g = torch.Generator().manual_seed(SEED + 1)
    inputs = torch.randint(0, V, (B, T), generator=g, dtype=torch.int64)
    targets = torch.randint(0, V, (B, T), generator=g, dtype=torch.int64)
    inputs[0, 0], targets[1, -1] = V - 1, V - 1   # the last real token id
    mask = (torch.rand(B, T, generator=g) > 0.25).to(torch.float32)
    mask[0, 2] = mask[1, 0] = 0.0                  # zeros in both rows for sure
    mask[0, 0] = 1.0
    return inputs, targets, mask


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_freqs(T, rot, base):
    """Megatron's RotaryEmbedding in float32: (T, rot/2) angles."""
    inv_freq = 1.0 / (base ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))
    seq = torch.arange(T, dtype=torch.float32)
    return torch.outer(seq, inv_freq)


def apply_rope(t, freqs, rot, interleaved):
    """t (B, T, H, hs): the first rot channels rotated, Megatron's
    _apply_rotary_pos_emb_bshd."""
    if interleaved:
        emb = torch.stack((freqs, freqs), dim=-1).reshape(freqs.shape[0], -1)
    else:
        emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[None, :, None, :], emb.sin()[None, :, None, :]
    r, rest = t[..., :rot], t[..., rot:]
    if interleaved:
        x1, x2 = r[..., 0::2], r[..., 1::2]
        half = torch.stack((-x2, x1), dim=-1).reshape(r.shape)
    else:
        x1, x2 = r.chunk(2, dim=-1)
        half = torch.cat((-x2, x1), dim=-1)
    return torch.cat((r * cos + half * sin, rest), dim=-1)


def llama_loss(p, inputs, targets, mask, cfg):
    """The Llama block: returns (logits (B,T,Vp), loss)."""
    L, C, NH, G = cfg["L"], cfg["C"], cfg["NH"], cfg["G"]
    B, T = inputs.shape
    hs = C // NH
    rot = int(hs * cfg["rotary_percent"])
    eps = HP["ln_eps"]
    freqs = rope_freqs(T, rot, cfg["rotary_base"]).to(p["wte"].dtype)
    h = F.embedding(inputs, p["wte"])
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    bias = cfg["bias"]
    for l in range(L):
        x = rms_norm(h, p["ln1w"][l], eps)
        qkv = F.linear(x, p["qkvw"][l], p["qkvb"][l] if bias else None)
        q, k, v = qkv.split([C, G * hs, G * hs], dim=-1)
        q, k, v = q.view(B, T, NH, hs), k.view(B, T, G, hs), v.view(B, T, G, hs)
        q = apply_rope(q, freqs, rot, cfg["interleaved"])
        k = apply_rope(k, freqs, rot, cfg["interleaved"])
        k, v = k.repeat_interleave(NH // G, dim=2), v.repeat_interleave(NH // G, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))               # (B, NH, T, hs)
        scores = (q @ k.transpose(-2, -1)) / (hs ** 0.5)
        scores = scores.masked_fill(~causal, float("-inf"))
        y = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
        h = h + F.linear(y, p["attprojw"][l], p["attprojb"][l] if bias else None)
        x = rms_norm(h, p["ln2w"][l], eps)
        gate, up = F.linear(x, p["fcw"][l], p["fcb"][l] if bias else None).chunk(2, dim=-1)
        h = h + F.linear(F.silu(gate) * up, p["fcprojw"][l], p["fcprojb"][l] if bias else None)
    h = rms_norm(h, p["lnfw"], eps)
    logits = F.linear(h, p["outw"] if "outw" in p else p["wte"])
    ce = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1), reduction="none")
    m = mask.reshape(-1)
    return logits, torch.sum(ce * m) / m.sum()


# The Llama configurations: every combination of tied/untied and MHA/GQA,
# spread over the RoPE options (interleaved, a partial rotary width, the
# base) and a biased variant.
LLAMA = [
    ("llama_tiny_gqa_untied.bin", dict(L=2, C=32, NH=4, G=2, F=40, untie=1, bias=0, interleaved=0,
                                       rotary_percent=1.0, rotary_base=10000.0)),
    ("llama_tiny_mha_tied.bin", dict(L=2, C=32, NH=4, G=4, F=40, untie=0, bias=0, interleaved=1,
                                     rotary_percent=0.5, rotary_base=10000.0)),
    ("llama_tiny_mqa_tied_bias.bin", dict(L=2, C=32, NH=4, G=1, F=24, untie=0, bias=1, interleaved=0,
                                          rotary_percent=1.0, rotary_base=500000.0)),
    ("llama_tiny_mha_untied.bin", dict(L=1, C=24, NH=2, G=2, F=48, untie=1, bias=0, interleaved=0,
                                       rotary_percent=0.5, rotary_base=10000.0)),
]


def draw_llama_weights(cfg):
    """The Llama block's weights in float32, mds's names and shapes."""
    L, C, NH, G, Fh = cfg["L"], cfg["C"], cfg["NH"], cfg["G"], cfg["F"]
    hs, Vp = C // NH, padded_vocab(CFG["V"], CFG["div"])
    QKV = C + 2 * G * hs
    g = torch.Generator().manual_seed(SEED + 2)

    def n(*shape, std=1.0, mean=0.0):
        return mean + std * torch.randn(*shape, generator=g, dtype=torch.float32)

    w = {"wte": n(Vp, C, std=0.3), "ln1w": n(L, C, std=0.1, mean=1.0), "qkvw": n(L, QKV, C, std=0.2),
         "attprojw": n(L, C, C, std=0.2), "ln2w": n(L, C, std=0.1, mean=1.0), "fcw": n(L, 2 * Fh, C, std=0.2),
         "fcprojw": n(L, C, Fh, std=0.1), "lnfw": n(C, std=0.1, mean=1.0)}
    if cfg["bias"]:
        w.update({"qkvb": n(L, QKV, std=0.1), "attprojb": n(L, C, std=0.1), "fcb": n(L, 2 * Fh, std=0.1),
                  "fcprojb": n(L, C, std=0.1)})
    if cfg["untie"]:
        w["outw"] = n(Vp, C, std=0.3)
    return w


def gpt_loss(p, inputs, targets, mask, eps=HP["ln_eps"]):
    """Megatron GPT forward: returns (logits (B,T,Vp), loss).  With the
    embedding LayerNorm's weights in p, bigscience's --embed-layernorm."""
    L, C, NH = CFG["L"], CFG["C"], CFG["NH"]
    B, T = inputs.shape
    hs = C // NH
    h = F.embedding(inputs, p["wte"])
    if "emblnw" in p:
        h = F.layer_norm(h, (C,), p["emblnw"], p["emblnb"], EMBED_LN_EPS)
    h = h + p["wpe"][:T].unsqueeze(0)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        x = F.layer_norm(h, (C,), p["ln1w"][l], p["ln1b"][l], eps)
        qkv = F.linear(x, p["qkvw"][l], p["qkvb"][l])                 # (B, T, 3C)
        q, k, v = qkv.split(C, dim=-1)                                 # [q | k | v]
        q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in (q, k, v))  # (B, NH, T, hs)
        scores = (q @ k.transpose(-2, -1)) / (hs ** 0.5)
        scores = scores.masked_fill(~causal, float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v                          # (B, NH, T, hs)
        y = y.transpose(1, 2).reshape(B, T, C)
        h = h + F.linear(y, p["attprojw"][l], p["attprojb"][l])
        x = F.layer_norm(h, (C,), p["ln2w"][l], p["ln2b"][l], eps)
        x = F.gelu(F.linear(x, p["fcw"][l], p["fcb"][l]), approximate="tanh")
        h = h + F.linear(x, p["fcprojw"][l], p["fcprojb"][l])
    h = F.layer_norm(h, (C,), p["lnfw"], p["lnfb"], eps)
    logits = F.linear(h, p["outw"] if "outw" in p else p["wte"])      # (B, T, Vp)
    ce = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1), reduction="none")
    m = mask.reshape(-1)
    loss = torch.sum(ce * m) / m.sum()
    return logits, loss


def clip_grad_norm(params, max_norm):
    """Megatron's clip_grad_norm_ (L2): returns the norm before clipping."""
    norm = torch.sqrt(sum(torch.sum(q.grad * q.grad) for q in params))
    coeff = max_norm / (norm + 1.0e-6)
    if coeff < 1.0:
        for q in params:
            q.grad.mul_(coeff)
    return norm


def run(weights, dtype, inputs, targets, mask, llama=None, ln_eps=HP["ln_eps"]):
    """First forward/backward, then the training steps, in dtype."""
    p = {k: v.to(dtype).clone().requires_grad_(True) for k, v in weights.items()}
    names = [k for k, _ in ORDER if k in p]
    decay = [p[k] for k, d in ORDER if k in p and d]
    no_decay = [p[k] for k, d in ORDER if k in p and not d]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": HP["wd"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=HP["lr"], betas=(HP["beta1"], HP["beta2"]), eps=HP["eps"])
    mask = mask.to(dtype)
    out = {"losses": [], "norms": []}
    for step in range(CFG["steps"]):
        opt.zero_grad(set_to_none=False)
        if llama:
            logits, loss = llama_loss(p, inputs, targets, mask, llama)
        else:
            logits, loss = gpt_loss(p, inputs, targets, mask, ln_eps)
        loss.backward()
        if step == 0:
            out["logits"] = logits.detach().clone()
            out["loss"] = loss.detach().clone()
            out["grads"] = {k: p[k].grad.detach().clone() for k in names}
        out["losses"].append(loss.item())
        out["norms"].append(clip_grad_norm([p[k] for k in names], HP["clip"]).item())
        opt.step()
    return out


def f32(t):
    return np.ascontiguousarray(t.detach().to(torch.float32).numpy(), dtype="<f4").tobytes()


def write(path, weights, inputs, targets, mask, r, untie, llama=None, ln_eps=HP["ln_eps"]):
    c = llama or dict(L=CFG["L"], C=CFG["C"], NH=CFG["NH"], F=4 * CFG["C"])
    embedln = "emblnw" in weights
    Vp = padded_vocab(CFG["V"], CFG["div"])
    names = [k for k, _ in ORDER if k in weights]
    P = sum(weights[k].numel() for k in names)
    ints = [MAGIC, 2 if llama or embedln else VERSION, c["L"], c["C"], c["NH"], c["F"], CFG["maxT"], CFG["V"], CFG["div"],
            Vp, int(untie), CFG["B"], CFG["T"], CFG["steps"], P, 0]
    floats = [HP["lr"], HP["beta1"], HP["beta2"], HP["eps"], HP["wd"], HP["clip"], ln_eps]
    floats += [0.0] * (16 - len(floats))
    data = struct.pack("<16i16f", *ints, *floats)
    if llama:
        data += struct.pack("<8i8f", 1, 1, 1, llama["G"], llama["bias"], llama["interleaved"], 0, 0,
                            llama["rotary_base"], llama["rotary_percent"], *([0.0] * 6))
    elif embedln:   # GPT's architecture, with the embedding LayerNorm
        data += struct.pack("<8i8f", 0, 0, 0, c["NH"], 1, 0, 1, 0, 10000.0, 1.0, EMBED_LN_EPS, *([0.0] * 5))
    data += np.ascontiguousarray(inputs.numpy(), dtype="<i4").tobytes()
    data += np.ascontiguousarray(targets.numpy(), dtype="<i4").tobytes()
    data += f32(mask)
    data += b"".join(f32(weights[k]) for k in names)
    data += f32(r["logits"]) + f32(r["loss"].reshape(1))
    data += b"".join(f32(r["grads"][k]) for k in names)
    data += f32(torch.tensor(r["losses"])) + f32(torch.tensor(r["norms"]))
    with open(path, "wb") as f:
        f.write(data)
    return len(data), P


def noise_report(r32, r64):
    """How far float32 lies from float64 for the same weights."""
    def rel(a, b):
        return (a.double() - b).abs().max().item() / b.abs().max().item()
    lg = (r32["logits"].double() - r64["logits"]).abs().max().item()
    gmax = max((r32["grads"][k].double() - r64["grads"][k]).abs().max().item() for k in r64["grads"])
    grel = max(rel(r32["grads"][k], r64["grads"][k]) for k in r64["grads"])
    ls = max(abs(a - b) / abs(b) for a, b in zip(r32["losses"], r64["losses"]))
    print("  fp32 vs fp64: logits max abs %.2e, loss rel %.2e, grads max abs %.2e "
          "(max per-tensor %.2e of the tensor's largest), 10-step losses max rel %.2e"
          % (lg, abs(r32["loss"].item() - r64["loss"].item()) / r64["loss"].item(), gmax, grel, ls))


def main():
    torch.set_num_threads(1)  # one summation order, the same on every run
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "reference")
    os.makedirs(out_dir, exist_ok=True)
    inputs, targets, mask = draw_batch()
    only = set(sys.argv[1:])   # file names to write; none: all of them
    for untie, name in ((0, "gpt_tiny.bin"), (1, "gpt_tiny_untied.bin")):
        if only and name not in only:
            continue
        w = draw_weights(untie)
        r32 = run(w, torch.float32, inputs, targets, mask)
        r64 = run(w, torch.float64, inputs, targets, mask)
        path = os.path.join(out_dir, name)
        size, P = write(path, w, inputs, targets, mask, r32, untie)
        print("%s: %d bytes, %d parameters, torch %s" % (os.path.relpath(path), size, P, torch.__version__))
        print("  loss %.6f; losses %s" % (r32["loss"].item(), " ".join("%.6f" % x for x in r32["losses"])))
        print("  grad norms %s" % " ".join("%.4f" % x for x in r32["norms"]))
        noise_report(r32, r64)
    for name, untie in EMBEDLN_FILES:
        if only and name not in only:
            continue
        w = draw_embedln_weights(untie)
        r32 = run(w, torch.float32, inputs, targets, mask, ln_eps=EMBEDLN_LN_EPS)
        r64 = run(w, torch.float64, inputs, targets, mask, ln_eps=EMBEDLN_LN_EPS)
        path = os.path.join(out_dir, name)
        size, P = write(path, w, inputs, targets, mask, r32, untie, ln_eps=EMBEDLN_LN_EPS)
        print("%s: %d bytes, %d parameters, torch %s" % (os.path.relpath(path), size, P, torch.__version__))
        print("  loss %.6f; losses %s" % (r32["loss"].item(), " ".join("%.6f" % x for x in r32["losses"])))
        print("  grad norms %s" % " ".join("%.4f" % x for x in r32["norms"]))
        noise_report(r32, r64)
    for name, cfg in LLAMA:
        if only and name not in only:
            continue
        w = draw_llama_weights(cfg)
        r32 = run(w, torch.float32, inputs, targets, mask, cfg)
        r64 = run(w, torch.float64, inputs, targets, mask, cfg)
        path = os.path.join(out_dir, name)
        size, P = write(path, w, inputs, targets, mask, r32, cfg["untie"], cfg)
        print("%s: %d bytes, %d parameters, torch %s" % (os.path.relpath(path), size, P, torch.__version__))
        print("  loss %.6f; losses %s" % (r32["loss"].item(), " ".join("%.6f" % x for x in r32["losses"])))
        print("  grad norms %s" % " ".join("%.4f" % x for x in r32["norms"]))
        noise_report(r32, r64)
    return 0


if __name__ == "__main__":
    sys.exit(main())
