#!/usr/bin/env python3
"""comm_plan.py - the bytes each rank of mdstrain sends per training
iteration, per communicator group and kind of collective, and the 1F1B
pipeline bubble, computed from the model's shapes and the parallel layout.

One implementation of the formulas, used three ways:
  * `comm_plan.py FLAGS --world-size N` prints the plan of a layout (every
    distinct stage);
  * `comm_plan.py FLAGS --world-size N --check ERR...` compares the plan,
    exactly, with what mdstrain -v -v measured (its "[rank R] (t, d, p) ...
    per iteration:" lines and its parameter counts, read from the ranks'
    stderr files): tests/cli/test_comm_plan.sh and bench/parallel.sh;
  * `comm_plan.py --paper` prints the table of docs/benchmarks.md for
    GPT-3 175B and Llama-3 8B at Megatron's precisions.

FLAGS are mdstrain's (Megatron's) names; flags that do not change the
traffic (--lr, --mock-data, ...) are ignored, and flags that change it in
a way not modelled here (--fp16: its skipped iterations make the traffic
depend on the data; --sequence-parallel: not modelled yet; interleaved stages:
not in mdstrain)
are refused, so a plan is never silently wrong.

The counting is comm.c's, collective by collective (train/trainer.c and
train/model.c decide which collectives run):
  all-reduce (sum) of n elements of e bytes over p ranks:
      2 (p-1) ceil(n/p) e per call (a ring all-reduce's 2 (p-1)/p n e, with
      the padding of the last chunk), in calls of at most 2^28/e elements;
  all-reduce (max), fp32/fp64: the same, in calls of at most 2^30/e elements;
  reduce-scatter and all-gather of `chunk` elements per rank: (p-1) chunk e;
  send/recv: the bytes sent.
A group of one rank sends nothing and counts no call.

Per iteration, m = G / (b DP) micro-batches, on the rank (t, d, s) of a
stage holding Ll = L / PP layers:
  tp: per micro-batch 4 Ll + 2 R all-reduces of b s h activations (2 per
      layer forward, 2 backward, 2 per recomputed layer R), + 1 on the first
      stage (the vocab-parallel embedding), + 1 on the last (the output
      layer's input gradient), + 3 of b s on the last (vocab-parallel cross
      entropy: max, sum of exp, target logit; fp32);
  pp: b s h activations sent forward by every stage but the last and their
      gradients sent back by every stage but the first, once per micro-batch;
  emb: tied embeddings with PP > 1: one all-reduce of the first and last
      stages' (V/TP) h word-embedding gradients, over those two;
  dp: the gradients of the stage's N parameters: one all-reduce (with
      --overlap-grad-reduce one per bucket of layers, --ddp-bucket-size
      elements or more, then one of the embeddings and one of the final
      norm and output layer), or with the
      distributed optimizer a reduce-scatter of ceil(N/DP) per rank and
      an all-gather of the updated parameters (with --overlap-grad-reduce
      one of each per bucket of layers and one for the rest, each
      ceil(bucket/DP) per rank); the last stage all-reduces
      its 2 fp64 loss sums (and every rank 1 fp64 token count with
      --calculate-per-token-loss);
  mp / world: the squared gradient norm, 1 fp64, over TP x PP (over the
      world with the distributed optimizer, whose shards differ per DP rank).
Bubble: 1F1B idles (PP-1) of the m + PP - 1 micro-batch slots of a stage,
a fraction (PP-1)/(m+PP-1) of the iteration (Narayanan et al. 2021 write
it as (PP-1)/m of the ideal time).

Precision: mdstrain communicates fp32 whatever --bf16 (--act-bytes,
--grad-bytes and --param-bytes 4, the defaults, are what it measures);
--paper uses Megatron's defaults with --bf16: bf16 activations and
parameter all-gather (2 bytes), fp32 gradient reduction (4).
Standard library only.
"""
import argparse
import re
import sys

PIECE = 1 << 30          # comm.c: the largest block of one transport call
KINDS = ("all-reduce", "reduce-scatter", "all-gather", "broadcast", "send/recv")
GROUPS = ("tp", "dp", "pp", "mp", "emb", "world")


def cdiv(a, b):
    return -(-a // b)


# ---- comm.c's counters -------------------------------------------------------

def _allreduce(n, p, e, seg):
    """(calls, bytes) of comm.c's all-reduce cut into calls of seg elements:
    each call moves a ring all-reduce's 2 (p-1) ceil(k/p) elements."""
    if p == 1 or n == 0:
        return 0, 0
    calls = nbytes = 0
    for off in range(0, n, seg):
        k = min(seg, n - off)
        calls += 1
        nbytes += 2 * (p - 1) * cdiv(k, p) * e
    return calls, nbytes


def allreduce_sum(n, p, e):
    """(calls, bytes) comm_allreduce(SUM) counts for n elements of e bytes."""
    return _allreduce(n, p, e, PIECE // e // 4)


def allreduce_max(n, p, e):
    """(calls, bytes) of comm_allreduce(MAX), fp32 or fp64."""
    return _allreduce(n, p, e, PIECE // e)


def scatter_gather(chunk, p, e):
    """(calls, bytes) of comm_reduce_scatter or comm_allgather."""
    return (1, (p - 1) * chunk * e) if p > 1 else (0, 0)


# ---- the model (train/model.c, gpt_model_init) -------------------------------

class Model:
    def __init__(self, a):
        self.a = a
        self.L, self.C, self.NH = a.num_layers, a.hidden_size, a.num_attention_heads
        self.tp, self.pp = a.tensor_model_parallel_size, a.pipeline_model_parallel_size
        if a.world_size % (self.tp * self.pp):
            sys.exit("comm_plan: world size %d is not a multiple of TP x PP = %d" % (a.world_size, self.tp * self.pp))
        self.dp = a.world_size // (self.tp * self.pp)
        self.swiglu = a.swiglu
        if a.ffn_hidden_size:
            self.F = a.ffn_hidden_size
        elif a.swiglu:
            self.F = int(4.0 * self.C * 2.0 / 3.0 / 64.0) * 64
        else:
            self.F = 4 * self.C
        mult = a.make_vocab_size_divisible_by * self.tp
        self.Vp = cdiv(a.vocab_size, mult) * mult
        self.G = a.num_query_groups if a.group_query_attention and a.num_query_groups else self.NH
        self.hs = self.C // self.NH
        self.Ll = self.L // self.pp
        self.Cl, self.Fl, self.Vl = self.C // self.tp, self.F // self.tp, self.Vp // self.tp
        self.QKVl = self.Cl + 2 * (self.G // self.tp) * self.hs
        self.FC1l = 2 * self.Fl if a.swiglu else self.Fl
        self.tied = not a.untie_embeddings_and_output_weights
        self.bias = not a.disable_bias_linear
        self.lnb = a.normalization == "LayerNorm"
        self.learned = a.position_embedding_type == "learned_absolute" and not a.no_position_embedding
        self.B, self.T = a.micro_batch_size, a.seq_length
        self.maxT = a.max_position_embeddings or a.seq_length
        if a.global_batch_size % (self.B * self.dp):
            sys.exit("comm_plan: global batch %d is not a multiple of micro-batch x DP = %d"
                     % (a.global_batch_size, self.B * self.dp))
        self.m = a.global_batch_size // (self.B * self.dp)
        # full recomputation: the local layers whose forward runs again in backward
        if a.recompute_granularity == "full" and a.recompute_method == "uniform":
            self.rc = self.Ll
        elif a.recompute_granularity == "full" and a.recompute_method == "block":
            self.rc = min(a.recompute_num_layers, self.Ll)
        else:
            self.rc = 0

    def num_params(self, stage):
        """Parameters of a (tensor, pipeline) rank of stage `stage` (gpt_model_init's param_sizes)."""
        first, last = stage == 0, stage == self.pp - 1
        Ll, C, Cl, Fl, Vl = self.Ll, self.C, self.Cl, self.Fl, self.Vl
        n = Vl * C if first or (last and self.tied) else 0                 # wte
        n += self.maxT * C if first and self.learned else 0                # wpe
        n += Ll * C * (2 if self.lnb else 1) * 2                           # ln1, ln2 (w, b)
        n += Ll * self.QKVl * C + Ll * C * Cl + Ll * self.FC1l * C + Ll * C * Fl
        if self.bias:
            n += Ll * self.QKVl + Ll * C + Ll * self.FC1l + Ll * C
        if last:
            n += C * (2 if self.lnb else 1)                                # final norm
            n += Vl * C if not self.tied else 0                            # output layer
        return n

    def overlap_calls(self, stage):
        """The element counts of --overlap-grad-reduce's all-reduces (trainer.c,
        layer_grads_done and finish_overlapped_reduce): the layers' gradients
        packed as the backward finishes them, a bucket started once it holds
        --ddp-bucket-size elements (default max(40M, 1M x DP)), the last one
        after the backward; then the tensors before the layers (word and
        position embeddings) and after them (final norm, output layer)."""
        first, last = stage == 0, stage == self.pp - 1
        C = self.C
        pre = self.Vl * C if first or (last and self.tied) else 0
        pre += self.maxT * C if first and self.learned else 0
        post = (C * (2 if self.lnb else 1) + (self.Vl * C if not self.tied else 0)) if last else 0
        layer = (self.num_params(stage) - pre - post) // self.Ll
        size = self.a.ddp_bucket_size or max(40000000, 1000000 * self.dp)
        calls, fill, start = [], 0, 0
        for _ in range(self.Ll):
            fill += layer
            if fill - start >= size:
                calls.append(fill - start)
                start = fill
        if fill > start:
            calls.append(fill - start)
        return calls + [pre, post]

    def bubble(self):
        return (self.pp - 1) / (self.m + self.pp - 1)

    def plan(self, stage, act=4, grad=4, param=4):
        """{(group, kind): [calls, bytes]} per iteration of a rank of stage `stage`."""
        a = self.a
        first, last = stage == 0, stage == self.pp - 1
        out = {}

        items = self.items = {}   # the same bytes by purpose, for the paper table

        def add(group, kind, cb, times=1, what=None):
            if cb[0]:
                what = what or group
                items[what] = items.get(what, 0) + cb[1] * times
                c = out.setdefault((group, kind), [0, 0])
                c[0] += cb[0] * times
                c[1] += cb[1] * times

        BT = self.B * self.T
        BTC = BT * self.C
        m = self.m
        # tp: the model's activations (act bytes) and the cross entropy's fp32 sums
        n_act = 4 * self.Ll + 2 * self.rc + (1 if first else 0) + (1 if last else 0)
        add("tp", "all-reduce", allreduce_sum(BTC, self.tp, act), m * n_act)
        if last:
            add("tp", "all-reduce", allreduce_max(BT, self.tp, 4), m)
            add("tp", "all-reduce", allreduce_sum(BT, self.tp, 4), 2 * m)
        # pp: 1F1B's sends
        if self.pp > 1:
            sends = (0 if last else m) + (0 if first else m)
            if sends:
                out[("pp", "send/recv")] = [sends, sends * BTC * act]
                items["pp"] = sends * BTC * act
        # emb: the tied word embedding's gradient over {first, last}
        if self.pp > 1 and self.tied and (first or last):
            add("emb", "all-reduce", allreduce_sum(self.Vl * self.C, 2, grad))
        # dp: the gradients, the loss sums, the token count
        N = self.num_params(stage)
        if a.use_distributed_optimizer:
            # one bucket of everything, or (--overlap-grad-reduce, DP > 1) the
            # layers' buckets and one of the rest (trainer.c, plan_buckets):
            # each padded to DP chunks, reduce-scattered and all-gathered
            buckets = [N]
            if a.overlap_grad_reduce and self.dp > 1:
                calls = self.overlap_calls(stage)
                buckets = [n for n in calls[:-2] + [calls[-2] + calls[-1]] if n]
            for n in buckets:
                add("dp", "reduce-scatter", scatter_gather(cdiv(n, self.dp), self.dp, grad))
                add("dp", "all-gather", scatter_gather(cdiv(n, self.dp), self.dp, param))
        elif a.overlap_grad_reduce:
            for n in self.overlap_calls(stage):
                add("dp", "all-reduce", allreduce_sum(n, self.dp, grad))
        else:
            add("dp", "all-reduce", allreduce_sum(N, self.dp, grad))
        if a.calculate_per_token_loss:
            add("dp", "all-reduce", allreduce_sum(1, self.dp, 8), what="small")
        if last:
            add("dp", "all-reduce", allreduce_sum(2, self.dp, 8), what="small")
        # the gradient norm
        if a.use_distributed_optimizer:
            add("world", "all-reduce", allreduce_sum(1, a.world_size, 8), what="small")
        else:
            add("mp", "all-reduce", allreduce_sum(1, self.tp * self.pp, 8), what="small")
        return out


# ---- flags -------------------------------------------------------------------

def parser():
    p = argparse.ArgumentParser(prog="comm_plan.py", allow_abbrev=False,
                                description="bytes per rank and iteration of mdstrain's collectives")
    i = p.add_argument
    i("--num-layers", type=int, default=0)
    i("--hidden-size", type=int, default=0)
    i("--ffn-hidden-size", type=int, default=0)
    i("--num-attention-heads", type=int, default=0)
    i("--group-query-attention", action="store_true")
    i("--num-query-groups", type=int, default=0)
    i("--seq-length", type=int, default=0)
    i("--max-position-embeddings", type=int, default=0)
    i("--vocab-size", type=int, default=0)
    i("--make-vocab-size-divisible-by", type=int, default=128)
    i("--micro-batch-size", type=int, default=1)
    i("--global-batch-size", type=int, default=0)
    i("--tensor-model-parallel-size", type=int, default=1)
    i("--pipeline-model-parallel-size", type=int, default=1)
    i("--world-size", type=int, default=1, help="ranks in all (the launcher's, not an mdstrain flag)")
    i("--use-distributed-optimizer", action="store_true")
    i("--overlap-grad-reduce", action="store_true")
    i("--overlap-param-gather", action="store_true", help="the same all-gathers, only later (no effect on the bytes)")
    i("--ddp-bucket-size", type=int, default=0)
    i("--swiglu", action="store_true")
    i("--untie-embeddings-and-output-weights", action="store_true")
    i("--disable-bias-linear", action="store_true")
    i("--normalization", default="LayerNorm", choices=("LayerNorm", "RMSNorm"))
    i("--position-embedding-type", default="learned_absolute", choices=("learned_absolute", "rope", "none"))
    i("--use-rotary-position-embeddings", action="store_true")
    i("--no-position-embedding", action="store_true")
    i("--recompute-granularity", default="", choices=("", "full", "selective"))
    i("--recompute-method", default="", choices=("", "uniform", "block"))
    i("--recompute-num-layers", type=int, default=1)
    i("--calculate-per-token-loss", action="store_true")
    i("--eval-iters", type=int, default=0)
    i("--act-bytes", type=int, default=4, help="bytes per activation element sent (mdstrain: 4)")
    i("--grad-bytes", type=int, default=4, help="bytes per gradient element reduced (mdstrain: 4)")
    i("--param-bytes", type=int, default=4, help="bytes per parameter all-gathered (mdstrain: 4)")
    i("--check", nargs="+", metavar="ERR", help="mdstrain -v -v stderr files of every rank to compare with")
    i("--paper", action="store_true", help="the table of docs/benchmarks.md")
    return p


REFUSED = ("--fp16", "--sequence-parallel", "--num-layers-per-virtual-pipeline-stage",
           "--context-parallel-size", "--exit-duration-in-mins")


def parse(argv):
    args, rest = parser().parse_known_args(argv)
    for r in rest:
        if r.split("=")[0] in REFUSED:
            sys.exit("comm_plan: %s changes the traffic in a way this plan does not model" % r)
    if args.use_rotary_position_embeddings:
        args.position_embedding_type = "rope"
    if not args.paper and args.eval_iters:
        sys.exit("comm_plan: the plan covers training iterations; run mdstrain with --eval-iters 0 to compare")
    return args


# ---- mdstrain -v -v ----------------------------------------------------------

REPORT = re.compile(r"^\[rank (\d+)\] \(t (\d+), d (\d+), p (\d+)\) [0-9.]+ ms/iter; per iteration:(.*)$")
ITEM = re.compile(r" (\w+) (all-reduce|reduce-scatter|all-gather|broadcast|send/recv) ([0-9.]+) calls ([0-9]+) bytes;")
PARAMS = re.compile(r"number of parameters on \(tensor, pipeline\) model parallel rank \((\d+), (\d+)\): (\d+)$")


def check(model, files):
    """Compare every rank's report with the plan; 0 when all equal exactly."""
    bad = 0
    seen = set()
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.rstrip("\n")
                mp = PARAMS.search(line)
                if mp:
                    t, s, n = int(mp.group(1)), int(mp.group(2)), int(mp.group(3))
                    want = model.num_params(s)
                    if n != want:
                        print("%s: (tensor, pipeline) rank (%d, %d): %d parameters, plan %d" % (path, t, s, n, want))
                        bad = 1
                    continue
                mr = REPORT.match(line)
                if not mr:
                    continue
                rank, s = int(mr.group(1)), int(mr.group(4))
                seen.add(rank)
                got = {(g, k): (c, b) for g, k, c, b in ITEM.findall(mr.group(5))}
                plan = {key: ("%.1f" % v[0], "%d" % v[1]) for key, v in model.plan(s).items()}
                for key in sorted(set(got) | set(plan)):
                    g, w = got.get(key), plan.get(key)
                    if g != w:
                        print("rank %d (stage %d): %s %s measured %s, plan %s" % (
                            rank, s, key[0], key[1],
                            "%s calls %s bytes" % g if g else "nothing",
                            "%s calls %s bytes" % w if w else "nothing"))
                        bad = 1
    missing = sorted(set(range(model.a.world_size)) - seen)
    if missing:
        print("no -v -v report from rank%s %s" % ("s" if len(missing) > 1 else "", " ".join(map(str, missing))))
        bad = 1
    if not bad:
        print("comm_plan: the %d ranks' measured bytes and calls equal the plan" % len(seen))
    return bad


# ---- printing ----------------------------------------------------------------

def stages_of(model):
    """The distinct stages: first, one middle, last."""
    s = [0]
    if model.pp > 2:
        s.append(1)
    if model.pp > 1:
        s.append(model.pp - 1)
    return s


def show(model, act, grad, param):
    a = model.a
    print("layout TP%d x PP%d x DP%d (%d ranks), %d micro-batches of %d per DP rank, bubble (PP-1)/(m+PP-1) = %.4f"
          % (model.tp, model.pp, model.dp, a.world_size, model.m, model.B, model.bubble()))
    for s in stages_of(model):
        plan = model.plan(s, act, grad, param)
        total = sum(v[1] for v in plan.values())
        print("stage %d: %d parameters per rank; bytes sent per iteration %d" % (s, model.num_params(s), total))
        for (g, k), (c, b) in sorted(plan.items()):
            print("   %-5s %-14s %8d calls %18d bytes" % (g, k, c, b))


GB = 1e9

PAPER = [
    # name, flags, Megatron's published figure (docs/benchmarks.md cites it)
    ("GPT-3 175B", "--num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048 "
     "--max-position-embeddings 2048 --vocab-size 51200 --micro-batch-size 1 --global-batch-size 1536 "
     "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 8 --world-size 1024"),
    ("Llama-3 8B", "--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
     "--group-query-attention --num-query-groups 8 --seq-length 8192 --max-position-embeddings 8192 "
     "--vocab-size 128256 --swiglu --normalization RMSNorm --position-embedding-type rope "
     "--untie-embeddings-and-output-weights --disable-bias-linear --micro-batch-size 1 "
     "--global-batch-size 128 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --world-size 16"),
]


def paper():
    print("| model, layout | DP reduction | m | bubble | stage | TP all-reduce | PP send | emb all-reduce "
          "| DP | norm, loss | total, Megatron precisions | total, mdstrain fp32 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, flags in PAPER:
        for dist in (False, True):
            a = parse(flags.split() + (["--use-distributed-optimizer"] if dist else []))
            model = Model(a)
            for s in stages_of(model):
                fp32 = sum(v[1] for v in model.plan(s).values())
                model.plan(s, act=2, grad=4, param=2)
                part = model.items
                where = "first" if s == 0 else "last" if s == model.pp - 1 else "middle"
                if model.pp == 1:
                    where = "all"
                print("| %s TP%d×PP%d×DP%d | %s | %d | %.1f%% | %s | %.2f GB | %.2f GB | %.3f GB | %.2f GB | %d B "
                      "| %.2f GB | %.2f GB |" % (
                          name, model.tp, model.pp, model.dp,
                          "reduce-scatter + all-gather" if dist else "all-reduce",
                          model.m, 100 * model.bubble(), where, part.get("tp", 0) / GB, part.get("pp", 0) / GB,
                          part.get("emb", 0) / GB, part.get("dp", 0) / GB, part.get("small", 0),
                          sum(part.values()) / GB, fp32 / GB))


def main(argv):
    a = parse(argv)
    if a.paper:
        paper()
        return 0
    for need in ("num_layers", "hidden_size", "num_attention_heads", "seq_length", "vocab_size", "global_batch_size"):
        if not getattr(a, need):
            sys.exit("comm_plan: --%s is required" % need.replace("_", "-"))
    model = Model(a)
    if a.check:
        return check(model, a.check)
    show(model, a.act_bytes, a.grad_bytes, a.param_bytes)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
