"""torch_gpt.py - the peer for bench/train.sh: PyTorch training the same GPT as mdstrain.

Same model as train/model.c: pre-LN blocks, learned absolute positions, biases,
tanh GELU, output layer tied to the word embedding, fp32, padded vocabulary,
no dropout.  With --llama G F: the Llama block instead (RoPE with base
10000 on every channel, RMSNorm, SwiGLU of width F, G key/value heads, no
biases, untied output layer), as mdstrain's --position-embedding-type rope
--normalization RMSNorm --swiglu --group-query-attention --num-query-groups G
--ffn-hidden-size F --disable-bias-linear --untie-embeddings-and-output-weights.
Both: AdamW (lr 1e-4, betas 0.9/0.999, eps 1e-8, weight decay 0.01 on
matrices and embeddings only) with gradient clipping at 1.0, mdstrain's
defaults.  Random token ids stand in for --mock-data.  Uses every CPU
(torch.set_num_threads(nproc)).

Prints one line per timed iteration ("iter N ms X") and a summary line
"torch ms_per_iter X blas PATH"; it times only, it does not compare.
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1 = nn.LayerNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C, eps=1e-5)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)

    def forward(self, x, causal):
        B, T, C = x.shape
        hs = C // self.NH
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q = q.view(B, T, self.NH, hs).transpose(1, 2)
        k = k.view(B, T, self.NH, hs).transpose(1, 2)
        v = v.view(B, T, self.NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(causal[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class RMSNorm(nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.w = nn.Parameter(torch.ones(C))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.w


def rotate(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class LlamaBlock(nn.Module):
    def __init__(self, C, NH, G, Fh):
        super().__init__()
        self.NH, self.G = NH, G
        hs = C // NH
        self.ln1 = RMSNorm(C)
        self.qkv = nn.Linear(C, C + 2 * G * hs, bias=False)
        self.proj = nn.Linear(C, C, bias=False)
        self.ln2 = RMSNorm(C)
        self.fc = nn.Linear(C, 2 * Fh, bias=False)
        self.fcproj = nn.Linear(Fh, C, bias=False)

    def forward(self, x, causal, cos, sin):
        B, T, C = x.shape
        NH, G = self.NH, self.G
        hs = C // NH
        q, k, v = self.qkv(self.ln1(x)).split([C, G * hs, G * hs], dim=2)
        q = rotate(q.view(B, T, NH, hs), cos, sin).transpose(1, 2)
        k = rotate(k.view(B, T, G, hs), cos, sin).repeat_interleave(NH // G, dim=2).transpose(1, 2)
        v = v.view(B, T, G, hs).repeat_interleave(NH // G, dim=2).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(causal[:T, :T], float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, C))
        gate, up = self.fc(self.ln2(x)).chunk(2, dim=-1)
        return x + self.fcproj(F.silu(gate) * up)


class Llama(nn.Module):
    def __init__(self, L, C, NH, G, Fh, V, maxT):
        super().__init__()
        hs = C // NH
        self.wte = nn.Embedding(V, C)
        self.blocks = nn.ModuleList(LlamaBlock(C, NH, G, Fh) for _ in range(L))
        self.lnf = RMSNorm(C)
        self.out = nn.Linear(C, V, bias=False)
        self.register_buffer("causal", torch.triu(torch.ones(maxT, maxT, dtype=torch.bool), 1))
        inv = 1.0 / (10000 ** (torch.arange(0, hs, 2, dtype=torch.float32) / hs))
        freqs = torch.outer(torch.arange(maxT, dtype=torch.float32), inv)
        emb = torch.cat((freqs, freqs), dim=-1)[:, None, :]
        self.register_buffer("cos", emb.cos())
        self.register_buffer("sin", emb.sin())
        for n, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if n.endswith(("proj.weight", "fcproj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx)
        for blk in self.blocks:
            x = blk(x, self.causal, self.cos[:T], self.sin[:T])
        logits = self.out(self.lnf(x))
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


class GPT(nn.Module):
    def __init__(self, L, C, NH, V, maxT):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(maxT, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C, eps=1e-5)
        self.register_buffer("causal", torch.triu(torch.ones(maxT, maxT, dtype=torch.bool), 1))
        for n, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if n.endswith(("proj.weight", "fcproj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif n.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for blk in self.blocks:
            x = blk(x, self.causal)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def blas_library():
    """The BLAS this process resolves its BLAS calls to (torch's 'generic'
    BLAS is whatever libblas.so.3 the system selects)."""
    try:
        with open("/proc/self/maps") as f:
            libs = {os.path.realpath(line.split()[-1]) for line in f if "/" in line}
    except OSError:
        return "unknown"
    first = sorted(x for x in libs if os.path.basename(x).startswith(("libblas", "libmkl", "libblis")))
    return ",".join(first) or ",".join(sorted(x for x in libs if "blas" in x.lower())) or "none mapped"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--iters", type=int, default=6)
    ap.add_argument("--skip", type=int, default=2)
    ap.add_argument("--llama", type=int, nargs=2, metavar=("GROUPS", "FFN"), default=None)
    a = ap.parse_args()
    torch.manual_seed(1234)
    torch.set_num_threads(os.cpu_count() or 1)
    if a.llama:
        model = Llama(a.layers, a.hidden, a.heads, a.llama[0], a.llama[1], a.vocab, a.seq)
    else:
        model = GPT(a.layers, a.hidden, a.heads, a.vocab, a.seq)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.999), eps=1e-8)
    times = []
    for it in range(a.iters):
        idx = torch.randint(0, 50257, (a.batch, a.seq + 1))
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = model(idx[:, :-1], idx[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ms = (time.perf_counter() - t0) * 1e3
        print(f"iter {it + 1} ms {ms:.1f} loss {loss.item():.4f}", flush=True)
        if it >= a.skip:
            times.append(ms)
    if not times:
        sys.exit("torch_gpt: no timed iterations (--iters must exceed --skip)")
    print(f"torch ms_per_iter {sum(times) / len(times):.1f} threads {torch.get_num_threads()} "
          f"version {torch.__version__} blas {blas_library()}")


if __name__ == "__main__":
    main()
