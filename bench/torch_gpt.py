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

The speed knobs, off by default (the CPU benchmark's plain fp32 model), all
on with --fast, make bench-gpu's PyTorch baseline (bench/gpu.sh):
  --sdpa         F.scaled_dot_product_attention (causal; on CUDA only the
                 flash kernel is allowed) instead of the explicit softmax;
  --compile      torch.compile of each transformer block (the default
                 inductor mode; regional compilation, PyTorch's recipe for
                 repeated blocks: one compilation serves every layer, which
                 keeps bench-gpu's compile time to seconds), the embedding,
                 final norm and loss eager;
  --fused-adamw  torch.optim.AdamW(fused=True);
  --bf16         torch.autocast to bf16 around the forward and the loss
                 (fp32 parameters, gradients and optimizer state).
--device cuda runs it on the GPU (timed after torch.cuda.synchronize) and
adds the peak memory torch allocated (torch.cuda.max_memory_allocated).
tests/cli/test_torch_gpt.sh holds the knobs to the plain model on the CPU.

Prints one line per iteration ("iter N ms X loss L") and a summary line
"torch ms_per_iter X threads N version V blas PATH [peak_mem_bytes M device
NAME]"; it times only, it does not compare.
"""
import argparse
import contextlib
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SDPA = False   # --sdpa: set before the model is built or compiled


def attend(q, k, v, causal):
    """Causal softmax attention of (B, NH, T, hs) heads."""
    if SDPA:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.size(-2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))
    return att.masked_fill(causal[:T, :T], float("-inf")).softmax(dim=-1) @ v


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
        y = attend(q, k, v, causal).transpose(1, 2).reshape(B, T, C)
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
        x = x + self.proj(attend(q, k, v, causal).transpose(1, 2).reshape(B, T, C))
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
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
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
    global SDPA
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
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--sdpa", action="store_true")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--fused-adamw", action="store_true")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--fast", action="store_true", help="--sdpa --compile --fused-adamw --bf16")
    a = ap.parse_args()
    if a.fast:
        a.sdpa = a.compile = a.fused_adamw = a.bf16 = True
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_gpt: --device cuda: torch.cuda.is_available() is False")
    SDPA = a.sdpa
    dev = torch.device(a.device)
    torch.manual_seed(1234)
    torch.set_num_threads(os.cpu_count() or 1)
    if a.llama:
        model = Llama(a.layers, a.hidden, a.heads, a.llama[0], a.llama[1], a.vocab, a.seq)
    else:
        model = GPT(a.layers, a.hidden, a.heads, a.vocab, a.seq)
    model.to(dev)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.999), eps=1e-8,
                            **({"fused": True} if a.fused_adamw else {}))   # torch < 2 knows no fused
    if a.compile:   # regional: each block (one compilation serves them all), the rest eager
        for blk in model.blocks:
            blk.compile()
    attn = contextlib.nullcontext   # a fresh context each iteration: sdpa_kernel's is single-use
    if a.sdpa and a.device == "cuda":   # flash only: a fallback would time another kernel
        from torch.nn.attention import SDPBackend, sdpa_kernel
        attn = lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)
    cast = torch.autocast(a.device, dtype=torch.bfloat16) if a.bf16 else contextlib.nullcontext()
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    times = []
    for it in range(a.iters):
        idx = torch.randint(0, min(50257, a.vocab), (a.batch, a.seq + 1)).to(dev)
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        with attn(), cast:
            loss = model(idx[:, :-1], idx[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        ms = (time.perf_counter() - t0) * 1e3
        print(f"iter {it + 1} ms {ms:.1f} loss {loss.item():.6f}", flush=True)
        if it >= a.skip:
            times.append(ms)
    if not times:
        sys.exit("torch_gpt: no timed iterations (--iters must exceed --skip)")
    gpu = ""
    if a.device == "cuda":
        gpu = (f" peak_mem_bytes {torch.cuda.max_memory_allocated()} device "
               f"{torch.cuda.get_device_name().replace(' ', '_')}")
    print(f"torch ms_per_iter {sum(times) / len(times):.1f} threads {torch.get_num_threads()} "
          f"version {torch.__version__} blas {blas_library()}{gpu}")


if __name__ == "__main__":
    main()
