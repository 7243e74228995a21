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

--profile FILE: after the timed iterations, one more under torch.profiler,
and into FILE its kernels' own time (on CUDA the device's, per kernel name;
on the CPU each op's self time), grouped by kind (GEMM, attention, fused
Triton, ...) and then kernel by kernel: the baseline beside mdstrain
--op-times in the same device call (bench/devcall.sh).  A failure of the
profiler is written into FILE and does not change the exit status.
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


# The kind of a kernel (or CPU op) by its name, for the summary of --profile:
# the first pattern found in the lower-cased name.
KINDS = (("attention", ("flash", "fmha", "attention", "sdpa")),
         ("gemm", ("gemm", "nvjet", "cutlass", "xmma", "cublas", "aten::mm", "aten::addmm", "aten::bmm")),
         ("optimizer", ("adam", "foreach")),
         ("fused (triton)", ("triton",)),
         ("loss", ("nll", "log_softmax", "cross_entropy")),
         ("copy, fill", ("memcpy", "memset", "copy_", "fill")),
         ("norm", ("layer_norm", "layernorm", "rms_norm")))


def kernel_kind(name):
    n = name.lower()
    for kind, pats in KINDS:
        if any(p in n for p in pats):
            return kind
    return "other"


def profile_report(rows, iters, title):
    """rows: (name, calls, self_us) of the profiled iterations; the report's
    text: kinds, then kernels, in ms per iteration, most first."""
    rows = sorted((r for r in rows if r[2] > 0), key=lambda r: (-r[2], r[0]))
    total = sum(r[2] for r in rows) or 1.0
    kinds = {}
    for name, calls, us in rows:
        k = kernel_kind(name)
        c, t = kinds.get(k, (0, 0.0))
        kinds[k] = (c + calls, t + us)
    out = [title, f"{'kind':<30} {'calls/iter':>10} {'ms/iter':>10} {'share':>8}"]
    for k, (c, t) in sorted(kinds.items(), key=lambda kv: (-kv[1][1], kv[0])):
        out.append(f"{k:<30} {c / iters:>10.1f} {t / 1e3 / iters:>10.3f} {100 * t / total:>6.1f} %")
    out.append(f"{'every kernel':<30} {sum(r[1] for r in rows) / iters:>10.1f} {total / 1e3 / iters:>10.3f}")
    out.append("")
    out.append(f"{'kernel':<100} {'calls/iter':>10} {'ms/iter':>10} {'share':>8}")
    for name, calls, us in rows[:80]:
        out.append(f"{name[:100]:<100} {calls / iters:>10.1f} {us / 1e3 / iters:>10.3f} {100 * us / total:>6.1f} %")
    return "\n".join(out) + "\n"


def profile_rows(prof, device):
    """(name, calls, self microseconds) of each kernel (CUDA: the device's
    kernel events only, so an op and its kernels are not counted twice) or
    CPU op (its self time)."""
    rows = []
    for e in prof.key_averages():
        if device == "cuda":
            if "cuda" not in str(getattr(e, "device_type", "")).lower():
                continue
            us = getattr(e, "self_device_time_total", None)
            if us is None:
                us = getattr(e, "self_cuda_time_total", 0.0)
        else:
            us = e.self_cpu_time_total
        rows.append((e.key, e.count, float(us)))
    return rows


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
    ap.add_argument("--profile", metavar="FILE", help="one more iteration under torch.profiler into FILE")
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
    def step(idx):
        opt.zero_grad(set_to_none=False)
        with attn(), cast:
            loss = model(idx[:, :-1], idx[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    times = []
    for it in range(a.iters):
        idx = torch.randint(0, min(50257, a.vocab), (a.batch, a.seq + 1)).to(dev)
        sync()
        t0 = time.perf_counter()
        loss = step(idx)
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
          f"version {torch.__version__} blas {blas_library()}{gpu}", flush=True)
    if a.profile:
        try:
            from torch.profiler import ProfilerActivity, profile
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if a.device == "cuda" else [])
            idx = torch.randint(0, min(50257, a.vocab), (a.batch, a.seq + 1)).to(dev)
            sync()
            with profile(activities=acts) as prof:
                step(idx)
                sync()
            title = (f"torch {torch.__version__} on {a.device}, batch {a.batch}, seq {a.seq}: one iteration after "
                     f"{a.iters} ({'the device' if a.device == 'cuda' else 'self CPU'} time)")
            text = profile_report(profile_rows(prof, a.device), 1, title)
        except Exception as e:   # the timing above stands; the file says why there is no profile
            text = f"torch_gpt --profile failed: {type(e).__name__}: {e}\n"
        with open(a.profile, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
