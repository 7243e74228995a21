/*
 * model.c - Megatron's GPT, per rank, on the ops of a backend; see model.h.
 * The forward/backward are llm.c's train_gpt2.c sequence of ops with
 * Megatron's choices (pre-LN, learned absolute positions, biases, tanh
 * GELU, tied or untied output layer, masked-mean loss), per TP shard and PP
 * stage, with Megatron's TP collectives through model->tp.
 *
 * Every tensor access goes through m->be (allocation, zeroing, copies, the
 * op table); the host touches only its staging buffers.  It does not read
 * data, print, or allocate outside gpt_model_init() and
 * gpt_set_optimizer_shard().
 */
#include "model.h"

#include "kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 0 at build time: the residual stream's gradient always fp32 (model.h's
   rd; the device's A/B runs, bench/gpu_ab.sh) */
#ifndef MDS_RD16
#define MDS_RD16 1
#endif

const char *const gpt_param_names[GPT_NUM_PARAMS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb", "outw", "emblnw", "emblnb"};

const char *gpt_strerror(int code)
{
    switch (code) {
    case GPT_OK: return "success";
    case GPT_ERR_ARG: return "bad argument";
    case GPT_ERR_NOMEM: return "out of memory";
    default: return "unknown error";
    }
}

void gpt_config_init(gpt_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->rotary_base = 10000.0;
    cfg->rotary_percent = 1.0;
    cfg->add_bias_linear = 1;
    cfg->make_vocab_size_divisible_by = 128;
    cfg->init_method_std = 0.02f;
    cfg->layernorm_eps = 1e-5f;
    cfg->seed = 1234;
    cfg->tp_size = 1;
    cfg->pp_size = 1;
}

#define FAIL(...) do { if (err && errlen) snprintf(err, errlen, __VA_ARGS__); return GPT_ERR_ARG; } while (0)

int gpt_default_ffn(int hidden_size, int swiglu)
{
    if (!swiglu)
        return 4 * hidden_size;
    return (int)(4.0 * hidden_size * 2.0 / 3.0 / 64.0) * 64;   /* Python: int((4 * h * 2 / 3) / 64) * 64 */
}

/* The FFN width the model uses. */
static int ffn_of(const gpt_config *cfg)
{
    return cfg->ffn_hidden_size ? cfg->ffn_hidden_size : gpt_default_ffn(cfg->hidden_size, cfg->swiglu);
}

int gpt_padded_vocab_size(const gpt_config *cfg)
{
    long long mult = (long long)cfg->make_vocab_size_divisible_by * cfg->tp_size;
    if (mult <= 0 || cfg->vocab_size <= 0)
        return -1;
    long long v = ((long long)cfg->vocab_size + mult - 1) / mult * mult;
    return v > 0x7fffffff ? -1 : (int)v;
}

int gpt_config_check(const gpt_config *cfg, char *err, size_t errlen)
{
    if (cfg->num_layers <= 0) FAIL("number of layers must be positive (--num-layers)");
    if (cfg->hidden_size <= 0) FAIL("hidden size must be positive (--hidden-size)");
    if (cfg->num_heads <= 0) FAIL("number of attention heads must be positive (--num-attention-heads)");
    if (cfg->hidden_size % cfg->num_heads)
        FAIL("hidden size %d is not a multiple of the number of heads %d", cfg->hidden_size, cfg->num_heads);
    if (cfg->ffn_hidden_size < 0) FAIL("ffn hidden size must be positive");
    if (cfg->max_position_embeddings <= 0) FAIL("max position embeddings must be positive");
    if (cfg->vocab_size <= 0) FAIL("vocabulary size must be positive");
    if (cfg->make_vocab_size_divisible_by <= 0) FAIL("make-vocab-size-divisible-by must be positive");
    if (!(cfg->init_method_std >= 0.0f) || !isfinite(cfg->init_method_std)) FAIL("init method std must be >= 0");
    if (!(cfg->layernorm_eps > 0.0f)) FAIL("layernorm epsilon must be positive");
    if (cfg->tp_size <= 0 || cfg->tp_rank < 0 || cfg->tp_rank >= cfg->tp_size)
        FAIL("tensor model parallel rank %d of %d is out of range", cfg->tp_rank, cfg->tp_size);
    if (cfg->pp_size <= 0 || cfg->pp_rank < 0 || cfg->pp_rank >= cfg->pp_size)
        FAIL("pipeline model parallel rank %d of %d is out of range", cfg->pp_rank, cfg->pp_size);
    if (cfg->act_slots < 0 || cfg->act_slots > 4096) FAIL("activation slots %d out of range", cfg->act_slots);
    if (cfg->recompute_method < GPT_RECOMPUTE_NONE || cfg->recompute_method > GPT_RECOMPUTE_BLOCK)
        FAIL("unknown recompute method %d", cfg->recompute_method);
    if (cfg->recompute_method != GPT_RECOMPUTE_NONE && cfg->recompute_num_layers <= 0)
        FAIL("recompute num layers must be at least 1 with a recompute method (--recompute-num-layers)");
    if (!(cfg->hidden_dropout >= 0.0f && cfg->hidden_dropout < 1.0f) ||
        !(cfg->attention_dropout >= 0.0f && cfg->attention_dropout < 1.0f))
        FAIL("dropout probabilities must lie in [0, 1)");
    if (cfg->dtype != MDS_F32 && cfg->dtype != MDS_BF16 && cfg->dtype != MDS_F16)
        FAIL("unknown working dtype %d", cfg->dtype);
    if (cfg->grad_dtype != MDS_F32 && cfg->grad_dtype != cfg->dtype)
        FAIL("gradient dtype %s with working dtype %s is not supported", mds_dtype_name(cfg->grad_dtype),
             mds_dtype_name(cfg->dtype));
    if (cfg->hidden_size > 0x7fffffff / 4) FAIL("hidden size too large");
    int F = ffn_of(cfg);
    if (F <= 0)
        FAIL("ffn hidden size is 0 (--swiglu's default int(4 h 2/3 / 64) 64 for hidden size %d); give --ffn-hidden-size",
             cfg->hidden_size);
    if (cfg->swiglu && F > 0x3fffffff) FAIL("ffn hidden size too large");
    if (gpt_padded_vocab_size(cfg) < 0) FAIL("padded vocabulary size overflows");
    if (cfg->position_embedding < GPT_POS_LEARNED || cfg->position_embedding > GPT_POS_NONE)
        FAIL("unknown position embedding type %d", cfg->position_embedding);
    if (cfg->normalization != GPT_NORM_LAYERNORM && cfg->normalization != GPT_NORM_RMSNORM)
        FAIL("unknown normalization %d", cfg->normalization);
    int G = cfg->num_query_groups ? cfg->num_query_groups : cfg->num_heads;
    if (G <= 0 || cfg->num_heads % G)
        FAIL("number of attention heads %d is not a multiple of the number of query groups %d", cfg->num_heads, G);
    if (cfg->position_embedding == GPT_POS_ROPE) {
        int hs = cfg->hidden_size / cfg->num_heads;
        int rot = (int)(hs * cfg->rotary_percent);   /* Megatron: int(dim * rotary_percent) */
        if (!(cfg->rotary_percent > 0.0 && cfg->rotary_percent <= 1.0))
            FAIL("rotary percent %g is outside (0, 1]", cfg->rotary_percent);
        if (rot < 2 || rot % 2)
            FAIL("rotary dimension int(%d x %g) = %d is not a positive even number", hs, cfg->rotary_percent, rot);
        if (!(cfg->rotary_base > 0.0)) FAIL("rotary base must be positive");
        if (cfg->rope_scaling_factor < 0.0) FAIL("rope scaling factor must be positive");
    }
    /* bigscience's embedding norm is a LayerNorm; no reference combines it with these */
    if (cfg->embed_layernorm && cfg->normalization != GPT_NORM_LAYERNORM)
        FAIL("the embedding LayerNorm with RMSNorm is not defined by any reference");
    if (cfg->embed_layernorm && cfg->apply_layernorm_1p)
        FAIL("the embedding LayerNorm with apply_layernorm_1p is not defined by any reference");
    /* Megatron's divisibility rules: heads and ffn split evenly over TP (the
       padded vocabulary does by construction), layers over PP. */
    if (cfg->num_heads % cfg->tp_size)
        FAIL("number of attention heads %d is not divisible by the tensor model parallel size %d",
             cfg->num_heads, cfg->tp_size);
    if (G % cfg->tp_size)
        FAIL("number of query groups %d is not divisible by the tensor model parallel size %d", G, cfg->tp_size);
    if (F % cfg->tp_size)
        FAIL("ffn hidden size %d is not divisible by the tensor model parallel size %d", F, cfg->tp_size);
    if (cfg->num_layers % cfg->pp_size)
        FAIL("number of layers %d is not divisible by the pipeline model parallel size %d", cfg->num_layers,
             cfg->pp_size);
    return GPT_OK;
}

int gpt_param_decays(int id)
{
    switch (id) {
    case GPT_WTE: case GPT_WPE: case GPT_QKVW: case GPT_ATTPROJW: case GPT_FCW: case GPT_FCPROJW:
    case GPT_OUTW:
        return 1;
    default:
        return 0;
    }
}

/* ---- initialisation RNG (documented in model.h) ------------------------- */

static uint64_t splitmix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double gpt_init_normal(uint64_t seed, int tensor_id, int layer, uint64_t row, uint64_t col,
                       uint64_t ncols_global)
{
    uint64_t stream = splitmix64(((uint64_t)tensor_id << 40) + ((uint64_t)layer << 20) + 1);
    uint64_t x = splitmix64((seed ^ stream) + (row * ncols_global + col));
    double u1 = ((double)(x >> 40) + 0.5) / 16777216.0;
    double u2 = ((double)((x >> 16) & 0xffffff) + 0.5) / 16777216.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Fill a local (rows, cols) block (host memory) of a tensor whose local rows
 * are `nseg` runs: run k has seg[k].rows local rows that are the global rows
 * seg[k].row0, seg[k].row0 + 1, ... (a column-parallel tensor stacks its
 * parts: qkv [q | k | v], SwiGLU's fc1 [gate | up]); local column c is global
 * column col0 + c of ncols_global. */
struct rows_seg { int rows, row0; };

static void init_rows(float *w, const struct rows_seg *seg, int nseg, int cols, double std, uint64_t seed, int id,
                      int layer, int col0, int ncols_global)
{
    size_t r0 = 0;
    for (int k = 0; k < nseg; r0 += (size_t)seg[k].rows, k++) {
        /* each value is a function of its position alone (counter-based), so
           threads may fill the rows in any order with the same bits: a 1.3B
           model's 1.3e9 draws (a log, a cos, a sqrt each) take about a minute
           on one core */
#pragma omp parallel for schedule(static)
        for (int j = 0; j < seg[k].rows; j++) {
            uint64_t grow = (uint64_t)seg[k].row0 + (uint64_t)j;
            float *row = w + (r0 + (size_t)j) * (size_t)cols;
            for (int c = 0; c < cols; c++)
                row[c] = (float)(std * gpt_init_normal(seed, id, layer, grow, (uint64_t)(col0 + c),
                                                       (uint64_t)ncols_global));
        }
    }
}

/* One run of rows: the whole local block is global rows row0 .. row0 + rows - 1. */
static void init_block(float *w, int rows, int cols, double std, uint64_t seed, int id, int layer, int row0,
                       int col0, int ncols_global)
{
    struct rows_seg seg = { rows, row0 };
    init_rows(w, &seg, 1, cols, std, seed, id, layer, col0, ncols_global);
}

static void fill(float *x, size_t n, float v)
{
    for (size_t i = 0; i < n; i++)
        x[i] = v;
}

static void point_tensors(float **ptrs[], float *base, const size_t *sizes, int n)
{
    for (int i = 0; i < n; i++) {
        *ptrs[i] = sizes[i] ? base : NULL;
        base += sizes[i];
    }
}

static void point_params(gpt_params *p, float *base, const size_t *sizes)
{
    float **ptrs[GPT_NUM_PARAMS] = {
        &p->wte, &p->wpe, &p->ln1w, &p->ln1b, &p->qkvw, &p->qkvb, &p->attprojw, &p->attprojb,
        &p->ln2w, &p->ln2b, &p->fcw, &p->fcb, &p->fcprojw, &p->fcprojb, &p->lnfw, &p->lnfb, &p->outw,
        &p->emblnw, &p->emblnb};
    point_tensors(ptrs, base, sizes, GPT_NUM_PARAMS);
}

/* Sum sizes with overflow detection; returns 0 on overflow. */
static int sum_sizes(const size_t *s, int n, size_t *total)
{
    size_t t = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] > ((size_t)-1) / sizeof(float) - t)
            return 0;
        t += s[i];
    }
    *total = t;
    return 1;
}

/* One zeroed backend allocation of n elements of size bytes each; on
 * failure a message naming the buffer, the bytes and (when known) the free
 * bytes. */
static int alloc_buffer(const gpt_model *m, void **p, size_t n, size_t size, const char *what, char *err,
                        size_t errlen)
{
    *p = NULL;
    if (n > ((size_t)-1) / size || m->be->alloc(p, n * size) != 0) {
        size_t fr, tot;
        if (err && errlen) {
            if (m->be->mem_info && m->be->mem_info(&fr, &tot) == 0)
                snprintf(err, errlen, "cannot allocate the %s on %s: %zu bytes asked, %zu of %zu free", what,
                         m->be->name, n * size, fr, tot);
            else
                snprintf(err, errlen, "cannot allocate the %s on %s: %zu bytes asked", what, m->be->name, n * size);
        }
        return GPT_ERR_NOMEM;
    }
    return GPT_OK;
}

/* The element counts of the gpt_acts tensors, in struct order, with nl
 * layers' per-layer tensors; with per_slot 0 only those (the working set). */
static void act_sizes_of(const gpt_model *m, size_t *as, size_t nl, int per_slot)
{
    size_t BT = (size_t)m->B * (size_t)m->T, C = (size_t)m->C, Cl = (size_t)m->Cl, Fl = (size_t)m->Fl;
    size_t BTs = (size_t)m->B * (size_t)m->Ts;   /* the tensors outside the TP linears (sequence parallelism) */
    size_t Vl = (size_t)m->Vl, QKVl = (size_t)m->QKVl, FC1l = (size_t)m->FC1l, NHl = (size_t)m->NHl;
    size_t s = per_slot ? 1 : 0;
    int ln = m->cfg.normalization == GPT_NORM_LAYERNORM;   /* LayerNorm keeps mean and rstd; RMSNorm rstd only */
    size_t el = s && m->first_stage && m->cfg.embed_layernorm;   /* the embedding LayerNorm's input and statistics */
    /* the stored tensors (sd, act_dtype, pd) in floats: their bytes / 4, rounded up */
    int sd = m->sd, ad = m->act_dtype, pd = m->pd;
#define STORED(dt, n) (((n) * mds_dtype_size(dt) + 3) / 4)
    size_t sizes[GPT_NUM_ACTS] = {
        s * BTs * C,                               /* encoded */
        STORED(sd, nl * BTs * C), ln ? nl * BTs : 0, nl * BTs, /* ln1, mean, rstd */
        STORED(ad, nl * BT * QKVl), STORED(sd, nl * BT * Cl), nl * NHl * BT, /* qkv, atty, att_lse */
        STORED(pd, nl * BTs * C), nl * BTs * C,       /* attproj, residual2 */
        STORED(sd, nl * BTs * C), ln ? nl * BTs : 0, nl * BTs, /* ln2, mean, rstd */
        STORED(ad, nl * BT * FC1l), STORED(sd, nl * BT * Fl), /* fch, fch_gelu */
        STORED(pd, nl * BTs * C),                     /* fcproj */
        (per_slot ? nl : nl ? nl - 1 : 0) * BTs * C, /* residual3 (a chunk's output is its checkpoint) */
        STORED(sd, s * BTs * C), ln ? s * BTs : 0, s * BTs, /* lnf, mean, rstd */
        STORED(ad, s * BT * Vl),                       /* logits */
        s * BT, s * BT, s * BT, s * BT, s * BT, s * BT, /* losses, maxes, sumexp, tlogits, mask, dlosses */
        STORED(m->rd, s * BT * C), s * BT * C, STORED(ad, s * BT * QKVl), /* backward: dresidual, dln, dqkv, */
        STORED(ad, s * BT * Cl), STORED(ad, s * BT * FC1l), STORED(ad, s * BT * Fl), /* datty, dfch, dfch_gelu */
        s * (size_t)m->nck * BTs * C,              /* ckpt */
        m->sp ? s * BTs * C : 0,                   /* dgrad_in */
        el * BTs * C, el * BTs, el * BTs,          /* emb, emb_mean, emb_rstd */
    };
#undef STORED
    /* every tensor on a 16-byte boundary (the 16-bit matmul operands are
       read in place) */
    for (int i = 0; i < GPT_NUM_ACTS; i++)
        as[i] = (sizes[i] + 3) / 4 * 4;
}

/* Point the tensors of a at base, with the float counts sizes. */
static void point_acts(gpt_acts *a, float *base, const size_t *sizes)
{
    float *ln1, *qkv, *atty, *attproj, *ln2, *fch, *fchg, *fcproj, *lnf, *logits, *dqkv, *datty, *dfch,
        *dfchg;   /* (stored as sd, act_dtype, pd) */
    float **aptrs[GPT_NUM_ACTS] = {
        &a->encoded, &ln1, &a->ln1_mean, &a->ln1_rstd, &qkv, &atty, &a->att_lse,
        &attproj, &a->residual2, &ln2, &a->ln2_mean, &a->ln2_rstd, &fch, &fchg,
        &fcproj, &a->residual3, &lnf, &a->lnf_mean, &a->lnf_rstd, &logits, &a->losses,
        &a->maxes, &a->sumexp, &a->tlogits, &a->mask, &a->dlosses, &a->dresidual, &a->dln,
        &dqkv, &datty, &dfch, &dfchg, &a->ckpt, &a->dgrad_in, &a->emb, &a->emb_mean, &a->emb_rstd};
    point_tensors(aptrs, base, sizes, GPT_NUM_ACTS);
    a->ln1 = ln1, a->qkv = qkv, a->atty = atty, a->attproj = attproj, a->ln2 = ln2, a->fch = fch;
    a->fch_gelu = fchg, a->fcproj = fcproj, a->lnf = lnf, a->logits = logits;
    a->dqkv = dqkv, a->datty = datty, a->dfch = dfch, a->dfch_gelu = dfchg;
}

size_t gpt_activation_bytes(const gpt_model *m)
{
    return (m->num_acts * (size_t)m->slots + m->num_work + m->num_sp) * sizeof(float);
}

int gpt_model_init(gpt_model *m, const gpt_config *cfg, int B, int T, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    int rc = gpt_config_check(cfg, err, errlen);
    if (rc)
        return rc;
    if (B <= 0 || T <= 0) FAIL("micro-batch size and sequence length must be positive");
    if (T > cfg->max_position_embeddings)
        FAIL("sequence length %d exceeds max position embeddings %d", T, cfg->max_position_embeddings);
    m->cfg = *cfg;
    m->be = cfg->backend ? cfg->backend : mds_backend_cpu();
    m->L = cfg->num_layers;
    m->C = cfg->hidden_size;
    m->NH = cfg->num_heads;
    m->F = ffn_of(cfg);
    m->maxT = cfg->max_position_embeddings;
    m->Vp = gpt_padded_vocab_size(cfg);
    m->Ll = m->L / cfg->pp_size;
    m->layer_begin = cfg->pp_rank * m->Ll;
    m->first_stage = cfg->pp_rank == 0;
    m->last_stage = cfg->pp_rank == cfg->pp_size - 1;
    m->Cl = m->C / cfg->tp_size;
    m->NHl = m->NH / cfg->tp_size;
    m->Fl = m->F / cfg->tp_size;
    m->Vl = m->Vp / cfg->tp_size;
    m->v_start = cfg->tp_rank * m->Vl;
    m->hs = m->C / m->NH;
    m->G = cfg->num_query_groups ? cfg->num_query_groups : m->NH;
    m->Gl = m->G / cfg->tp_size;
    m->KVl = m->Gl * m->hs;
    m->QKVl = m->Cl + 2 * m->KVl;
    m->FC1l = cfg->swiglu ? 2 * m->Fl : m->Fl;
    m->rot = cfg->position_embedding == GPT_POS_ROPE ? (int)(m->hs * cfg->rotary_percent) : 0;
    m->B = B;
    m->T = T;
    m->sp = cfg->sequence_parallel && cfg->tp_size > 1;
    if (m->sp && T % cfg->tp_size)
        FAIL("sequence length %d is not divisible by the tensor model parallel size %d (sequence parallelism)", T,
             cfg->tp_size);
    m->Ts = m->sp ? T / cfg->tp_size : T;
    m->t0 = m->sp ? cfg->tp_rank * m->Ts : 0;
    m->sd = cfg->dtype;
    if (m->sp && (size_t)B * (size_t)m->Ts * (size_t)cfg->hidden_size % 2)
        m->sd = MDS_F32;
    m->act_dtype = cfg->dtype;
    m->gd = cfg->tp_size > 1 ? MDS_F32 : m->act_dtype;
    m->pd = cfg->tp_size > 1 || cfg->hidden_dropout > 0.0f ? MDS_F32 : m->act_dtype;
    m->rd = !MDS_RD16 || cfg->pp_size > 1 || m->sp || cfg->hidden_dropout > 0.0f || cfg->embed_layernorm
                ? MDS_F32 : m->act_dtype;

    size_t Ll = (size_t)m->Ll, C = (size_t)m->C, Cl = (size_t)m->Cl, Fl = (size_t)m->Fl;
    size_t Vl = (size_t)m->Vl, QKVl = (size_t)m->QKVl, FC1l = (size_t)m->FC1l;
    int tied = !cfg->untie_embeddings;
    int bias = cfg->add_bias_linear, lnb = cfg->normalization == GPT_NORM_LAYERNORM;
    /* PP: the first stage holds wte/wpe, the last the final LN and the output
       layer (a copy of wte when tied, kept in sync by an all-reduce of the
       embedding grads over {first, last}).  With PP = 1 they coincide. */
    size_t *ps = m->param_sizes;
    ps[GPT_WTE] = (m->first_stage || (m->last_stage && tied)) ? Vl * C : 0;
    ps[GPT_WPE] = m->first_stage && cfg->position_embedding == GPT_POS_LEARNED ? (size_t)m->maxT * C : 0;
    ps[GPT_LN1W] = Ll * C;
    ps[GPT_LN1B] = lnb ? Ll * C : 0;
    ps[GPT_QKVW] = Ll * QKVl * C;
    ps[GPT_QKVB] = bias ? Ll * QKVl : 0;
    ps[GPT_ATTPROJW] = Ll * C * Cl;
    ps[GPT_ATTPROJB] = bias ? Ll * C : 0;
    ps[GPT_LN2W] = Ll * C;
    ps[GPT_LN2B] = lnb ? Ll * C : 0;
    ps[GPT_FCW] = Ll * FC1l * C;
    ps[GPT_FCB] = bias ? Ll * FC1l : 0;
    ps[GPT_FCPROJW] = Ll * C * Fl;
    ps[GPT_FCPROJB] = bias ? Ll * C : 0;
    ps[GPT_LNFW] = m->last_stage ? C : 0;
    ps[GPT_LNFB] = m->last_stage && lnb ? C : 0;
    ps[GPT_OUTW] = (m->last_stage && !tied) ? Vl * C : 0;
    ps[GPT_EMBLNW] = ps[GPT_EMBLNB] = m->first_stage && cfg->embed_layernorm ? C : 0;
    if (!sum_sizes(ps, GPT_NUM_PARAMS, &m->num_params) || m->num_params > ((size_t)-1) / 8)
        return GPT_ERR_NOMEM;

    /* full recomputation (model.h): which local layers, in chunks of how many */
    int N = cfg->recompute_num_layers;
    if (cfg->recompute_method == GPT_RECOMPUTE_UNIFORM) {
        m->rc_chunk = N < m->Ll ? N : m->Ll;
        m->rc_layers = m->Ll;
    } else if (cfg->recompute_method == GPT_RECOMPUTE_BLOCK) {
        m->rc_chunk = 1;
        m->rc_layers = N < m->Ll ? N : m->Ll;
    }
    m->nck = m->rc_layers ? (m->rc_layers + m->rc_chunk - 1) / m->rc_chunk : 0;
    size_t Lk = Ll - (size_t)m->rc_layers, Lw = m->rc_layers ? (size_t)m->rc_chunk : 0;
    size_t BT = (size_t)B * (size_t)T;
    act_sizes_of(m, m->act_sizes, Lk, 1);
    size_t work_sizes[GPT_NUM_ACTS];
    /* block with kept layers: a recomputed layer's backward comes after every
       kept layer's, so its working set is the slot's last kept layer (a kept
       layer's forward overwrites it after the recomputed layers' forward) */
    m->work_in_slot = m->rc_layers && Lk >= Lw;
    act_sizes_of(m, work_sizes, m->work_in_slot ? 0 : Lw, 0);
    m->slots = cfg->act_slots > 1 ? cfg->act_slots : 1;
    size_t sp_sizes[5] = { BT * C, BT * C, BT * C, BT, BT };   /* sp_full, sp_full2, sp_perm, sp_mean, sp_rstd */
    if (!m->sp)
        memset(sp_sizes, 0, sizeof sp_sizes);
    if (!sum_sizes(m->act_sizes, GPT_NUM_ACTS, &m->num_acts) || !sum_sizes(work_sizes, GPT_NUM_ACTS, &m->num_work) ||
        !sum_sizes(sp_sizes, 5, &m->num_sp) ||
        m->num_acts > ((size_t)-1) / sizeof(float) / (size_t)(m->slots + 1) - m->num_work - m->num_sp)
        return GPT_ERR_NOMEM;

    m->opt_whole = (gpt_opt_piece){0, m->num_params, 0};
    m->opt_pieces = &m->opt_whole;
    m->opt_npieces = 1;
    m->opt_slots = m->num_params;
    for (int i = 0; i < GPT_NUM_PARAMS; i++)
        m->param_dtype[i] = cfg->dtype;
    void *pp = NULL, *gp = NULL, *op = NULL, *ap = NULL, *tp = NULL, *dp = NULL, *rp = NULL, *kp = NULL, *mp = NULL,
         *lp = NULL;
    size_t rope_n = (size_t)T * (size_t)(m->rot / 2);
    if ((cfg->dtype != MDS_F32 &&
         (rc = alloc_buffer(m, &mp, m->num_params, sizeof(float), "fp32 master weights", err, errlen))) ||
        (rc = alloc_buffer(m, &kp, (size_t)B * (size_t)m->slots, sizeof(uint64_t), "dropout keys", err, errlen)) ||
        (rc = alloc_buffer(m, &rp, 2 * rope_n, sizeof(float), "rotary tables", err, errlen)) ||
        (cfg->apply_layernorm_1p &&
         (rc = alloc_buffer(m, &lp, 2 * (size_t)C, sizeof(float), "norm weights + 1", err, errlen))) ||
        (rc = alloc_buffer(m, &pp, m->num_params, sizeof(float), "parameters", err, errlen)) ||
        (rc = alloc_buffer(m, &gp, m->num_params, sizeof(float), "gradients", err, errlen)) ||
        (rc = alloc_buffer(m, &op, 2 * m->num_params, sizeof(float), "AdamW state", err, errlen)) ||
        (rc = alloc_buffer(m, &ap, m->num_acts * (size_t)m->slots + m->num_work + m->num_sp, sizeof(float), "activations", err,
                           errlen)) ||
        (rc = alloc_buffer(m, &tp, 2 * BT * (size_t)m->slots, sizeof(int), "token ids", err, errlen)) ||
        (rc = alloc_buffer(m, &dp, 2, sizeof(double), "reduction scratch", err, errlen))) {
        m->params_memory = pp; m->grads_memory = gp; m->opt_memory = op;
        m->acts_memory = ap; m->tokens_memory = tp; m->dsum = dp; m->rope_memory = rp; m->keys_memory = kp;
        m->master_memory = mp; m->ln1p_memory = lp;
        gpt_model_free(m);
        return rc;
    }
    m->ln1p_memory = lp;
    m->params_memory = pp; m->grads_memory = gp; m->opt_memory = op;
    m->acts_memory = ap; m->tokens_memory = tp; m->dsum = dp; m->rope_memory = rp; m->keys_memory = kp;
    /* fp32 working weights are their own master; 16-bit ones are the
       master rounded (sync_working after every change) */
    m->master_memory = mp ? (float *)mp : m->params_memory;
    m->host_mask = malloc(BT * sizeof(float));
    m->slot_dropout = calloc((size_t)m->slots, sizeof(int));
    m->ce_scale = m->ce_done = -1.0f;
    if (!m->host_mask || !m->slot_dropout) {
        gpt_model_free(m);
        if (err && errlen) snprintf(err, errlen, "cannot allocate the host staging buffers (%zu bytes)", BT * sizeof(float));
        return GPT_ERR_NOMEM;
    }
    point_params(&m->params, m->params_memory, ps);
    point_params(&m->grads, m->grads_memory, ps);
    m->m = m->opt_memory;
    m->v = m->opt_memory + m->num_params;
    m->work_memory = m->acts_memory + m->num_acts * (size_t)m->slots;
    point_acts(&m->work, m->work_memory, work_sizes);
    float **sptrs[5] = { &m->sp_full, &m->sp_full2, &m->sp_perm, &m->sp_mean, &m->sp_rstd };
    point_tensors(sptrs, m->work_memory + m->num_work, sp_sizes, 5);
    gpt_set_slot(m, 0);

    /* Initialisation, tensor by tensor on the host, copied into place.
       Global widths: qkv (3C, C), attproj (C, C), fc (F, C), fcproj (C, F),
       embeddings (Vp, C) / (maxT, C). */
    size_t biggest = 0;
    for (int i = 0; i < GPT_NUM_PARAMS; i++)
        if (ps[i] > biggest) biggest = ps[i];
    float *h = malloc((biggest ? biggest : 1) * sizeof(float));
    if (!h) {
        gpt_model_free(m);
        if (err && errlen) snprintf(err, errlen, "cannot allocate the initialisation buffer (%zu bytes)", biggest * sizeof(float));
        return GPT_ERR_NOMEM;
    }
    gpt_params *p = &m->params;
    double std = cfg->init_method_std, ostd = std / sqrt(2.0 * m->L);
    int iC = m->C, iCl = m->Cl, iFl = m->Fl, iVl = m->Vl, iKV = m->KVl;
    uint64_t sd = cfg->seed;
    int tr = cfg->tp_rank;
    /* the global row layout of the stacked column-parallel tensors:
       qkv [Q (NH hs) | K (G hs) | V (G hs)], fc1 [gate (F) | up (F)] */
    int Gh = m->G * m->hs;
    struct rows_seg qkv_seg[3] = { { iCl, tr * iCl }, { iKV, iC + tr * iKV }, { iKV, iC + Gh + tr * iKV } };
    struct rows_seg fc_seg[2] = { { iFl, tr * iFl }, { iFl, m->F + tr * iFl } };
#define PUT(dst, n) m->be->copy((dst), h, (n) * sizeof(float))
    if (p->wte) { init_block(h, iVl, iC, std, sd, GPT_WTE, 0, m->v_start, 0, iC); PUT(p->wte, ps[GPT_WTE]); }
    if (p->wpe) { init_block(h, m->maxT, iC, std, sd, GPT_WPE, 0, 0, 0, iC); PUT(p->wpe, ps[GPT_WPE]); }
    if (p->outw) { init_block(h, iVl, iC, std, sd, GPT_OUTW, 0, m->v_start, 0, iC); PUT(p->outw, ps[GPT_OUTW]); }
    /* norm weights (0 with apply_layernorm_1p: Megatron's zero-centred gamma); biases stay 0 */
    fill(h, Ll * C > C ? Ll * C : C, cfg->apply_layernorm_1p ? 0.0f : 1.0f);
    if (p->lnfw) PUT(p->lnfw, C);
    if (p->emblnw) PUT(p->emblnw, C);   /* MixedFusedLayerNorm's ones (never 1p: gpt_config_check) */
    PUT(p->ln1w, Ll * C);
    PUT(p->ln2w, Ll * C);
    if (m->ln1p_memory) {   /* the ones that 1 + w adds */
        fill(h, C, 1.0f);
        m->be->copy(m->ln1p_memory, h, (size_t)C * sizeof(float));
    }
    for (int l = 0; l < m->Ll; l++) {
        int gl = m->layer_begin + l;
        init_rows(h, qkv_seg, 3, iC, std, sd, GPT_QKVW, gl, 0, iC);
        PUT(p->qkvw + l * QKVl * C, QKVl * C);
        init_block(h, iC, iCl, ostd, sd, GPT_ATTPROJW, gl, 0, tr * iCl, iC);
        PUT(p->attprojw + l * C * Cl, C * Cl);
        init_rows(h, fc_seg, cfg->swiglu ? 2 : 1, iC, std, sd, GPT_FCW, gl, 0, iC);
        PUT(p->fcw + l * FC1l * C, FC1l * C);
        init_block(h, iC, iFl, ostd, sd, GPT_FCPROJW, gl, 0, tr * iFl, m->F);
        PUT(p->fcprojw + l * C * Fl, C * Fl);
    }
    if (m->rot) {
        float *tabs = malloc(2 * rope_n * sizeof(float));
        if (!tabs) {
            free(h);
            gpt_model_free(m);
            if (err && errlen) snprintf(err, errlen, "cannot allocate the rotary tables (%zu bytes)", 2 * rope_n * 4);
            return GPT_ERR_NOMEM;
        }
        rope_tables(tabs, tabs + rope_n, T, m->rot, cfg->rotary_base, cfg->rope_scaling_factor);
        m->be->copy(m->rope_memory, tabs, 2 * rope_n * sizeof(float));
        free(tabs);
    }
#undef PUT
    free(h);
    if (m->master_memory != m->params_memory) {   /* the fp32 initial values are the master */
        m->be->copy(m->master_memory, m->params_memory, m->num_params * sizeof(float));
        m->be->ops.round_to(m->params_memory, m->num_params, cfg->dtype);
    }
    if (m->be->sync() != 0) {
        if (err && errlen) snprintf(err, errlen, "cannot initialise the model on %s: %s", m->be->name, m->be->error());
        gpt_model_free(m);
        return GPT_ERR_NOMEM;
    }
    return GPT_OK;
}

void gpt_model_free(gpt_model *m)
{
    if (!m || !m->be)
        return;
    if (m->master_memory != m->params_memory)
        m->be->free(m->master_memory);
    m->be->free(m->params_memory);
    m->be->free(m->grads_memory);
    m->be->free(m->opt_memory);
    m->be->free(m->acts_memory);
    m->be->free(m->tokens_memory);
    m->be->free(m->dsum);
    m->be->free(m->rope_memory);
    m->be->free(m->ln1p_memory);
    m->ln1p_memory = NULL;
    m->be->free(m->keys_memory);
    m->rope_memory = NULL;
    m->keys_memory = NULL;
    free(m->slot_dropout);
    m->slot_dropout = NULL;
    free(m->host_mask);
    m->params_memory = m->master_memory = m->grads_memory = m->opt_memory = m->acts_memory = NULL;
    m->work_memory = NULL;
    m->sp_full = m->sp_full2 = m->sp_perm = m->sp_mean = m->sp_rstd = NULL;
    m->m = m->v = NULL;
    if (m->opt_pieces != &m->opt_whole)
        free(m->opt_pieces);
    m->opt_pieces = NULL;
    m->opt_npieces = 0;
    m->tokens_memory = NULL;
    m->dsum = NULL;
    m->host_mask = NULL;
    m->acts.inputs = m->acts.targets = NULL;
}

int gpt_set_optimizer_pieces(gpt_model *m, const gpt_opt_piece *pieces, size_t n, size_t slots, char *err,
                             size_t errlen)
{
    for (size_t k = 0; k < n; k++) {
        const gpt_opt_piece *q = &pieces[k];
        if (q->lo > q->hi || q->hi > m->num_params || q->at > slots || q->hi - q->lo > slots - q->at)
            FAIL("optimizer piece [%zu, %zu) at slot %zu is outside the %zu parameters or %zu slots", q->lo, q->hi,
                 q->at, m->num_params, slots);
    }
    gpt_opt_piece *copy = malloc((n ? n : 1) * sizeof *copy);
    if (!copy) {
        if (err && errlen) snprintf(err, errlen, "out of memory for %zu optimizer pieces", n);
        return GPT_ERR_NOMEM;
    }
    memcpy(copy, pieces, n * sizeof *copy);
    void *p;
    int rc = alloc_buffer(m, &p, 2 * slots, sizeof(float), "AdamW shard", err, errlen);
    if (rc) {
        free(copy);
        return rc;
    }
    m->be->free(m->opt_memory);
    if (m->opt_pieces != &m->opt_whole)
        free(m->opt_pieces);
    m->opt_memory = p;
    m->opt_pieces = copy;
    m->opt_npieces = n;
    m->opt_slots = slots;
    m->m = m->opt_memory;
    m->v = m->opt_memory + slots;
    return GPT_OK;
}

int gpt_set_optimizer_shard(gpt_model *m, size_t lo, size_t hi, char *err, size_t errlen)
{
    gpt_opt_piece one = {lo, hi, 0};
    return gpt_set_optimizer_pieces(m, &one, 1, hi >= lo ? hi - lo : 0, err, errlen);
}

/* Where [off, off + n) of a state section is in backend memory: the
 * weights' flat range, or within one of the optimizer's pieces; NULL
 * otherwise. */
static float *state_at(const gpt_model *m, int which, size_t off, size_t n)
{
    if (which == GPT_STATE_WEIGHTS)
        return off <= m->num_params && n <= m->num_params - off ? m->master_memory + off : NULL;
    float *base = which == GPT_STATE_ADAM_M ? m->m : which == GPT_STATE_ADAM_V ? m->v : NULL;
    for (size_t k = 0; base && k < m->opt_npieces; k++) {
        const gpt_opt_piece *q = &m->opt_pieces[k];
        if (off >= q->lo && off <= q->hi && n <= q->hi - off)
            return base + q->at + (off - q->lo);
    }
    return NULL;
}

int gpt_state_read(const gpt_model *m, int which, size_t off, float *dst, size_t n)
{
    float *at = state_at(m, which, off, n);
    if (!at)
        return GPT_ERR_ARG;
    m->be->copy(dst, at, n * sizeof(float));
    return m->be->sync() == 0 ? GPT_OK : GPT_ERR_ARG;
}

int gpt_state_write(gpt_model *m, int which, size_t off, const float *src, size_t n)
{
    float *at = state_at(m, which, off, n);
    if (!at)
        return GPT_ERR_ARG;
    m->be->copy(at, src, n * sizeof(float));
    if (which == GPT_STATE_WEIGHTS && m->master_memory != m->params_memory) {   /* the working copy follows */
        m->be->copy(m->params_memory + off, src, n * sizeof(float));
        m->be->ops.round_to(m->params_memory + off, n, m->cfg.dtype);
    }
    return m->be->sync() == 0 ? GPT_OK : GPT_ERR_ARG;
}

int gpt_state_write_pieces(gpt_model *m, int which, const float *flat)
{
    if (which != GPT_STATE_ADAM_M && which != GPT_STATE_ADAM_V)
        return GPT_ERR_ARG;
    if (!flat) {
        m->be->zero(which == GPT_STATE_ADAM_M ? m->m : m->v, m->opt_slots * sizeof(float));
        return m->be->sync() == 0 ? GPT_OK : GPT_ERR_ARG;
    }
    for (size_t k = 0; k < m->opt_npieces; k++) {
        size_t lo = m->opt_pieces[k].lo;
        if (gpt_state_write(m, which, lo, flat + lo, m->opt_pieces[k].hi - lo) != GPT_OK)
            return GPT_ERR_ARG;
    }
    return GPT_OK;
}

void gpt_set_slot(gpt_model *m, int s)
{
    gpt_acts *a = &m->acts;
    size_t BT = (size_t)m->B * (size_t)m->T;
    m->slot = s;
    point_acts(a, m->acts_memory + (size_t)s * m->num_acts, m->act_sizes);
    a->inputs = m->tokens_memory + (size_t)s * 2 * BT;
    a->targets = a->inputs + BT;
}

/* dlosses for gpt_backward's scale over a mask sum of nt (Megatron's masked
 * mean; nothing where no token counts): one expression for the fused
 * cross-entropy's forward and for the backward, so that both give the
 * same bits. */
static void loss_grads(gpt_model *m, float scale, float nt)
{
    m->be->ops.loss_grad(m->acts.dlosses, m->acts.mask, nt > 0.0f ? scale / nt : 0.0f, (size_t)m->B * m->T);
}

void gpt_set_loss_grad(gpt_model *m, float scale, int per_token)
{
    m->ce_scale = scale;
    m->ce_per_token = per_token;
}

void gpt_set_dropout_rows(gpt_model *m, const uint64_t *positions)
{
    m->slot_dropout[m->slot] = positions && (m->cfg.hidden_dropout > 0.0f || m->cfg.attention_dropout > 0.0f);
    if (!m->slot_dropout[m->slot])
        return;
    uint64_t keys[64], *k = m->B <= 64 ? keys : malloc((size_t)m->B * sizeof *k);
    if (!k) {   /* cannot happen in practice (B is small); drop nothing rather than draw wrong masks */
        m->slot_dropout[m->slot] = 0;
        return;
    }
    for (int b = 0; b < m->B; b++)
        k[b] = mds_dropout_row(m->cfg.seed, positions[b]);
    m->be->copy(m->keys_memory + (size_t)m->slot * (size_t)m->B, k, (size_t)m->B * sizeof *k);
    if (k != keys) free(k);
}

/* The dropout of one site for the current slot (p = 0: none). */
static mds_dropout site_dropout(const gpt_model *m, float p, int kind, int layer)
{
    mds_dropout d = {0};
    if (!m->slot_dropout[m->slot] || p <= 0.0f)
        return d;
    d.p = p;
    d.site = mds_dropout_site(kind, layer);
    d.row_keys = m->keys_memory + (size_t)m->slot * (size_t)m->B;
    d.head0 = m->cfg.tp_rank * m->NHl;
    return d;
}

float *gpt_stage_input(gpt_model *m) { return m->acts.encoded; }

float *gpt_stage_dgrad(gpt_model *m) { return m->sp ? m->acts.dgrad_in : m->acts.dresidual; }

size_t gpt_stage_elems(const gpt_model *m) { return (size_t)m->B * (size_t)m->Ts * (size_t)m->C; }

/* TP collectives (no-ops with one rank). */
static void tp_sum(const gpt_model *m, float *x, size_t n)
{
    if (m->cfg.tp_size > 1) m->tp->allreduce_sum(m->tp->ctx, x, n);
}

static void tp_max(const gpt_model *m, float *x, size_t n)
{
    if (m->cfg.tp_size > 1) m->tp->allreduce_max(m->tp->ctx, x, n);
}

/* Sequence parallelism.  A (B, T, n) tensor's slices are (B, Ts, n) per
 * rank; the collectives work on rank-major (TP, B, Ts, n) buffers, so the
 * gather and the scatter reorder through sp_perm (B TP copies). */

/* full (B, T, n) = every rank's part (B, Ts, n), all-gathered; es bytes
 * an element (B Ts n es a multiple of 4: the gather moves floats). */
static void sp_gather(const gpt_model *m, void *full, const void *part, size_t n, size_t es)
{
    size_t B = (size_t)m->B, T = (size_t)m->T, Ts = (size_t)m->Ts, piece = Ts * n * es;
    m->tp->allgather(m->tp->ctx, m->sp_perm, (const float *)part, B * piece / sizeof(float));
    for (size_t r = 0; r < (size_t)m->cfg.tp_size; r++)
        for (size_t b = 0; b < B; b++)
            m->be->copy((char *)full + (b * T + r * Ts) * n * es, (char *)m->sp_perm + (r * B + b) * piece, piece);
}

/* part (B, Ts, n) = the rank-ordered sum over ranks of their full (B, T, n)'s
 * slice of this rank (reduce-scatter: the all-reduce's sums, bit for bit). */
static void sp_scatter(const gpt_model *m, float *part, const float *full, size_t n)
{
    size_t B = (size_t)m->B, T = (size_t)m->T, Ts = (size_t)m->Ts, piece = Ts * n;
    for (size_t r = 0; r < (size_t)m->cfg.tp_size; r++)
        for (size_t b = 0; b < B; b++)
            m->be->copy(m->sp_perm + (r * B + b) * piece, full + (b * T + r * Ts) * n, piece * sizeof(float));
    m->tp->reduce_scatter(m->tp->ctx, part, m->sp_perm, B * piece);
}

/* The whole sequence of a kept (B, Ts, n) tensor: itself without sequence
 * parallelism (or when absent), else gathered into scratch. */
static const float *sp_whole(const gpt_model *m, float *scratch, const float *part, size_t n)
{
    if (!m->sp || !part)
        return part;
    sp_gather(m, scratch, part, n, sizeof(float));
    return scratch;
}

/* The same of a stored (sd) (B, Ts, C) tensor, gathered into sp_full. */
static const void *sp_stored(const gpt_model *m, const void *part)
{
    if (!m->sp || !part)
        return part;
    sp_gather(m, m->sp_full, part, (size_t)m->C, mds_dtype_size(m->sd));
    return m->sp_full;
}

/* A row-parallel output (B, T, C) of partial sums, kept (rounded to the working
 * dtype), into dst: summed over TP in place (dst == full), or reduce-scattered
 * into dst (B, Ts, C) with sequence parallelism; then kept again. */
static void tp_reduce_out(const gpt_model *m, float *dst, float *full);

/* ---- forward / backward --------------------------------------------------- */

/* A tensor the working dtype stores: rounded to it (nothing at fp32). */
static void keep(const gpt_model *m, float *x, size_t n)
{
    if (m->act_dtype != MDS_F32)
        m->be->ops.round_to(x, n, m->act_dtype);
}

/* The output of an op on backend.h's rounds_kept list: kept by the op
 * itself where the backend says so, else here. */
static void kept_by_op(const gpt_model *m, float *x, size_t n)
{
    if (!m->be->rounds_kept)
        keep(m, x, n);
}

/* The same of an op's output stored as dt: a 16-bit one the op rounded.
 * (A tensor stored as act_dtype itself never needs it: a 16-bit one the
 * op rounded, an fp32 one has nothing to be rounded to.) */
static void kept_as(const gpt_model *m, int dt, void *x, size_t n)
{
    if (dt == MDS_F32)
        kept_by_op(m, (float *)x, n);
}

static void tp_reduce_out(const gpt_model *m, float *dst, float *full)
{
    size_t BTC = (size_t)m->B * (size_t)m->T * (size_t)m->C;
    kept_by_op(m, full, BTC);   /* (a matmul_forward's output) */
    if (m->cfg.tp_size == 1 && !m->sp)
        return;   /* nothing summed: dst is full, kept (rounding twice changes nothing) */
    if (m->sp)
        sp_scatter(m, dst, full, (size_t)m->C);
    else
        tp_sum(m, dst, BTC);
    keep(m, dst, (size_t)m->B * (size_t)m->Ts * (size_t)m->C);
}

/* x (n), kept, summed over TP (Megatron's f in backward), and kept again:
 * the second rounding only where a sum happened. */
static void tp_sum_kept(const gpt_model *m, float *x, size_t n)
{
    keep(m, x, n);
    if (m->cfg.tp_size > 1) {
        tp_sum(m, x, n);
        keep(m, x, n);
    }
}

/* dln (n) as a matmul_backward wrote it (stored as gd), kept and summed
 * over TP (tp_sum_kept) where it is fp32; a 16-bit one, rounded by the
 * matmul, has no TP to sum over (model.h). */
static void dln_summed(const gpt_model *m, float *dln, size_t n)
{
    if (m->gd == MDS_F32)
        tp_sum_kept(m, dln, n);
}

/* The norm of the configuration, forward over this rank's Ts tokens:
 * LayerNorm (with mean) or RMSNorm. */
/* With apply_layernorm_1p the norm scales by 1 + w (Megatron's
 * zero-centred gamma): formed in fp32 in a scratch row; the gradient with
 * respect to 1 + w is the gradient with respect to w. */
static const float *norm_gamma(const gpt_model *m, const float *w)
{
    if (!m->cfg.apply_layernorm_1p) return w;
    float *ones = m->ln1p_memory, *g = m->ln1p_memory + m->C;
    m->be->ops.residual_forward(g, w, ones, MDS_F32, (size_t)m->C, MDS_F32);
    return g;
}

/* out stored as od: sd for the matmuls' inputs, fp32 for the embedding's
 * norm (the residual stream). */
static void norm_forward(const gpt_model *m, void *out, int od, float *mean, float *rstd, const float *inp,
                         const float *w, const float *b, float eps)
{
    w = norm_gamma(m, w);
    if (m->cfg.normalization == GPT_NORM_RMSNORM)
        m->be->ops.rmsnorm_forward(out, od, rstd, inp, w, m->B, m->Ts, m->C, eps);
    else
        m->be->ops.layernorm_forward(out, od, mean, rstd, inp, w, b, m->B, m->Ts, m->C, eps);
    if (od == MDS_F32)
        kept_by_op(m, (float *)out, (size_t)m->B * m->Ts * m->C);
}

/* Its backward over the whole sequence (see model.h): the input and the
 * statistics are the kept slices, gathered with sequence parallelism. */
static void norm_backward(const gpt_model *m, void *dinp, int ds, float *dw, float *db, const void *dout, int dd,
                          const float *inp, const float *w, const float *mean, const float *rstd)
{
    w = norm_gamma(m, w);
    inp = sp_whole(m, m->sp_full2, inp, (size_t)m->C);
    mean = sp_whole(m, m->sp_mean, mean, 1);
    rstd = sp_whole(m, m->sp_rstd, rstd, 1);
    if (m->cfg.normalization == GPT_NORM_RMSNORM)
        m->be->ops.rmsnorm_backward(dinp, ds, dw, dout, dd, inp, w, rstd, m->B, m->T, m->C);
    else
        m->be->ops.layernorm_backward(dinp, ds, dw, db, dout, dd, inp, w, mean, rstd, m->B, m->T, m->C);
    if (ds == MDS_F32)   /* the residual stream's gradient (a 16-bit one is stored rounded) */
        kept_by_op(m, (float *)dinp, (size_t)m->B * m->T * m->C);
}

/* An optional per-layer slice: NULL when the tensor is absent (size 0). */
static float *layer_part(float *base, size_t l, size_t n) { return base ? base + l * n : NULL; }

/* ---- one transformer layer -------------------------------------------------- */

/* Where layer l's activations live in the current slot: its input (the
 * residual stream entering it) and its tensors.  A kept layer's are the
 * slot's; a recomputed layer's are the working set's (index: its place in
 * its chunk), except the output of a chunk's last layer, which is the slot's
 * checkpoint of that chunk (the next chunk's input, or the stage output). */
typedef struct layer_view {
    const float *in;  // (B, T, C)
    void *ln1, *atty, *ln2, *fchg;   /* stored as sd */
    void *qkv, *fch;                 /* stored as act_dtype */
    void *attproj, *fcproj;          /* stored as pd */
    float *ln1_mean, *ln1_rstd, *att_lse, *res2, *ln2_mean, *ln2_rstd;
    float *res3;
} layer_view;

/* Element i of a tensor stored as dt. */
static void *stored_at(void *base, int dt, size_t i) { return (char *)base + i * mds_dtype_size(dt); }

/* The tensors of layer l: index i of the per-layer tensors of a. */
static void layer_tensors(const gpt_model *m, const gpt_acts *a, size_t i, layer_view *v)
{
    size_t BT = (size_t)m->B * (size_t)m->T, BTs = (size_t)m->B * (size_t)m->Ts, BTC = BTs * (size_t)m->C;
    v->ln1 = stored_at(a->ln1, m->sd, i * BTC);
    v->ln1_mean = layer_part(a->ln1_mean, i, BTs);
    v->ln1_rstd = a->ln1_rstd + i * BTs;
    v->qkv = stored_at(a->qkv, m->act_dtype, i * BT * (size_t)m->QKVl);
    v->atty = stored_at(a->atty, m->sd, i * BT * (size_t)m->Cl);
    v->att_lse = a->att_lse + i * (size_t)m->NHl * BT;
    v->attproj = stored_at(a->attproj, m->pd, i * BTC);
    v->res2 = a->residual2 + i * BTC;
    v->ln2 = stored_at(a->ln2, m->sd, i * BTC);
    v->ln2_mean = layer_part(a->ln2_mean, i, BTs);
    v->ln2_rstd = a->ln2_rstd + i * BTs;
    v->fch = stored_at(a->fch, m->act_dtype, i * BT * (size_t)m->FC1l);
    v->fchg = stored_at(a->fch_gelu, m->sd, i * BT * (size_t)m->Fl);
    v->fcproj = stored_at(a->fcproj, m->pd, i * BTC);
    v->res3 = a->residual3 + i * BTC;
}

/* The output (residual3) of local layer l in the current slot. */
static float *layer_output(const gpt_model *m, int l)
{
    size_t BTC = (size_t)m->B * (size_t)m->Ts * (size_t)m->C;
    if (l >= m->rc_layers)
        return m->acts.residual3 + (size_t)(l - m->rc_layers) * BTC;
    int k = l / m->rc_chunk;
    if (l == m->rc_layers - 1 || (l + 1) % m->rc_chunk == 0)
        return m->acts.ckpt + (size_t)k * BTC;
    if (m->work_in_slot)
        return m->acts.residual3 + (size_t)(m->Ll - m->rc_layers - m->rc_chunk + l % m->rc_chunk) * BTC;
    return m->work.residual3 + (size_t)(l - k * m->rc_chunk) * BTC;
}

static void layer_view_of(const gpt_model *m, int l, layer_view *v)
{
    if (l >= m->rc_layers)
        layer_tensors(m, &m->acts, (size_t)(l - m->rc_layers), v);
    else if (m->work_in_slot)
        layer_tensors(m, &m->acts, (size_t)(m->Ll - m->rc_layers - m->rc_chunk + l % m->rc_chunk), v);
    else
        layer_tensors(m, &m->work, (size_t)(l % m->rc_chunk), v);
    v->res3 = layer_output(m, l);
    v->in = l == 0 ? m->acts.encoded : layer_output(m, l - 1);
}

/* A row-parallel projection's output as matmul_forward wrote it: stored
 * as pd, a 16-bit one rounded by the matmul and never summed (model.h),
 * else fp32 partial sums in full (tp_reduce_out into dst). */
static void proj_out(const gpt_model *m, void *dst, float *full)
{
    if (m->pd == MDS_F32)
        tp_reduce_out(m, (float *)dst, full);
}

/* Layer l's forward in the current slot: pre-LN attention, then the MLP,
 * Megatron's TP collectives (f and g) and bias-dropout-adds. */
static void layer_forward(gpt_model *m, int l)
{
    int B = m->B, T = m->T, C = m->C, Cl = m->Cl, NHl = m->NHl, Fl = m->Fl, Ts = m->Ts;
    size_t BT = (size_t)B * T, QKVl = (size_t)m->QKVl, FC1l = (size_t)m->FC1l;
    size_t BTsC = (size_t)B * Ts * (size_t)C;   /* the tensors outside the TP linears */
    const gpt_params *p = &m->params;
    const mds_ops *ops = &m->be->ops;
    int tp0 = m->cfg.tp_rank == 0;
    const float *rcos = m->rope_memory, *rsin = m->rope_memory + (size_t)T * (size_t)(m->rot / 2);
    size_t lC = (size_t)l * C;
    int gl = m->layer_begin + l;
    mds_dropout dh1 = site_dropout(m, m->cfg.hidden_dropout, 1, gl);
    mds_dropout dh2 = site_dropout(m, m->cfg.hidden_dropout, 2, gl);
    mds_dropout da = site_dropout(m, m->cfg.attention_dropout, 3, gl);
    dh1.t0 = dh2.t0 = m->t0;   /* on this rank's tokens */
    layer_view v;
    layer_view_of(m, l, &v);
    norm_forward(m, v.ln1, m->sd, v.ln1_mean, v.ln1_rstd, v.in, p->ln1w + lC, layer_part(p->ln1b, l, C),
                 m->cfg.layernorm_eps);
    /* column-parallel QKV (Megatron's f: identity forward; with sequence
       parallelism the all-gather of the sequence) */
    const void *ln1 = sp_stored(m, v.ln1);
    int ad = m->act_dtype;   /* qkv's and fch's */
    ops->matmul_forward(v.qkv, ad, ln1, m->sd, p->qkvw + (size_t)l * QKVl * C, layer_part(p->qkvb, l, QKVl), B, T, C,
                        (int)QKVl);
    if (m->rot)   /* (a 16-bit qkv rounded as it is turned; fp32 needs no keeping) */
        ops->rope_forward(v.qkv, ad, rcos, rsin, B, T, NHl, m->Gl, m->hs, m->rot, m->cfg.rotary_interleaved);
    ops->attention_forward(v.atty, m->sd, v.att_lse, v.qkv, ad, B, T, Cl, NHl, m->Gl, da);
    kept_as(m, m->sd, v.atty, BT * (size_t)Cl);
    /* row-parallel projection: partial sums, bias on TP rank 0, then g (the
       all-reduce, or the reduce-scatter); Megatron's bias-dropout-add:
       residual + dropout(proj + bias) */
    float *proj = m->sp ? m->sp_full2 : (float *)v.attproj;   /* (stored as pd: proj_out) */
    ops->matmul_forward(proj, m->pd, v.atty, m->sd,
                        p->attprojw + (size_t)l * C * Cl, tp0 ? layer_part(p->attprojb, l, C) : NULL, B, T, Cl, C);
    proj_out(m, v.attproj, proj);
    if (dh1.p > 0.0f) {   /* (pd is fp32 then) */
        ops->dropout_forward(v.attproj, v.attproj, B, Ts, C, dh1);
        keep(m, v.attproj, BTsC);
    }
    ops->residual_forward(v.res2, v.in, v.attproj, m->pd, BTsC, m->act_dtype);   /* kept */
    norm_forward(m, v.ln2, m->sd, v.ln2_mean, v.ln2_rstd, v.res2, p->ln2w + lC, layer_part(p->ln2b, l, C),
                 m->cfg.layernorm_eps);
    const void *ln2 = sp_stored(m, v.ln2);
    if (m->cfg.swiglu) {
        ops->matmul_forward(v.fch, ad, ln2, m->sd, p->fcw + (size_t)l * FC1l * C, layer_part(p->fcb, l, FC1l), B, T,
                            C, (int)FC1l);
        ops->swiglu_forward(v.fchg, m->sd, v.fch, ad, BT, Fl);
    } else {   /* fch, then GELU of it (one GEMM where the backend can) */
        ops->matmul_gelu_forward(v.fchg, m->sd, v.fch, ad, ln2, m->sd, p->fcw + (size_t)l * FC1l * C,
                                 layer_part(p->fcb, l, FC1l), B, T, C, (int)FC1l);
    }
    kept_as(m, m->sd, v.fchg, BT * (size_t)Fl);
    float *mlp = m->sp ? m->sp_full2 : (float *)v.fcproj;
    ops->matmul_forward(mlp, m->pd, v.fchg, m->sd,
                        p->fcprojw + (size_t)l * C * Fl, tp0 ? layer_part(p->fcprojb, l, C) : NULL, B, T, Fl, C);
    proj_out(m, v.fcproj, mlp);
    if (dh2.p > 0.0f) {
        ops->dropout_forward(v.fcproj, v.fcproj, B, Ts, C, dh2);
        keep(m, v.fcproj, BTsC);
    }
    ops->residual_forward(v.res3, v.res2, v.fcproj, m->pd, BTsC, m->act_dtype);   /* kept */
}

/* The residual stream's gradient as the next backward op reads it: dresidual
 * itself (stored as rd, *dt), or its image through hidden dropout d in dln
 * (fp32; rd is fp32 then too: model.h). */
static float *resid_grad(gpt_model *m, mds_dropout d, int *dt)
{
    gpt_acts *a = &m->acts;
    *dt = m->rd;
    if (d.p <= 0.0f)
        return a->dresidual;
    m->be->ops.dropout_backward(a->dln, a->dresidual, m->B, m->T, m->C, d);
    keep(m, a->dln, (size_t)m->B * m->T * m->C);
    *dt = MDS_F32;
    return a->dln;
}

/* Layer l's backward: on entry dresidual is d(residual3[l]), on return
 * d(layer input); the weight gradients are added. */
static void layer_backward(gpt_model *m, int l)
{
    int B = m->B, T = m->T, C = m->C, Cl = m->Cl, NHl = m->NHl, Fl = m->Fl;
    size_t BT = (size_t)B * T, BTC = BT * (size_t)C, QKVl = (size_t)m->QKVl, FC1l = (size_t)m->FC1l;
    const gpt_params *p = &m->params, *g = &m->grads;
    gpt_acts *a = &m->acts;
    const mds_ops *ops = &m->be->ops;
    const float *rcos = m->rope_memory, *rsin = m->rope_memory + (size_t)T * (size_t)(m->rot / 2);
    size_t lC = (size_t)l * C;
    int gl = m->layer_begin + l;
    mds_dropout dh1 = site_dropout(m, m->cfg.hidden_dropout, 1, gl);
    mds_dropout dh2 = site_dropout(m, m->cfg.hidden_dropout, 2, gl);
    mds_dropout da = site_dropout(m, m->cfg.attention_dropout, 3, gl);
    layer_view v;
    layer_view_of(m, l, &v);
    /* dresidual is d(residual3[l]); the skip passes it to residual2 as is.
       Row-parallel biases: every TP rank sees the same dresidual, so each
       computes the same bias gradient and the replicas stay equal. */
    int dmd, dad;
    const float *dmlp = resid_grad(m, dh2, &dmd);   /* d(fcproj): through the MLP output's dropout */
    /* the MLP's gradients stored as act_dtype (a 16-bit dinp the matmul
       rounds); the backward ops write their dinp (backend.h): nothing to zero */
    if (m->cfg.swiglu) {
        ops->matmul_backward(a->dfch_gelu, m->act_dtype, g->fcprojw + (size_t)l * C * Fl,
                             layer_part(g->fcprojb, l, C), dmlp, dmd, v.fchg, m->sd,
                             p->fcprojw + (size_t)l * C * Fl, B, T, Fl, C);
        ops->swiglu_backward(a->dfch, v.fch, m->act_dtype, a->dfch_gelu, m->act_dtype, BT, Fl);
    } else {   /* d(fch_gelu) in dfch_gelu, then d(fch) (one GEMM where the backend can) */
        ops->matmul_gelu_backward(a->dfch, a->dfch_gelu, m->act_dtype, g->fcprojw + (size_t)l * C * Fl,
                                  layer_part(g->fcprojb, l, C), dmlp, dmd, v.fchg, m->sd,
                                  p->fcprojw + (size_t)l * C * Fl, v.fch, m->act_dtype, B, T, Fl, C);
    }
    ops->matmul_backward(a->dln, m->gd, g->fcw + (size_t)l * FC1l * C, layer_part(g->fcb, l, FC1l), a->dfch,
                         m->act_dtype, sp_stored(m, v.ln2), m->sd, p->fcw + (size_t)l * FC1l * C, B, T, C, (int)FC1l);
    dln_summed(m, a->dln, BTC);   /* f in backward */
    norm_backward(m, a->dresidual, m->rd, g->ln2w + lC, layer_part(g->ln2b, l, C), a->dln, m->gd, v.res2,
                  p->ln2w + lC, v.ln2_mean, v.ln2_rstd);
    /* now dresidual is d(residual2[l]) */
    const float *datt = resid_grad(m, dh1, &dad);   /* d(attproj): through the attention output's dropout */
    ops->matmul_backward(a->datty, m->act_dtype, g->attprojw + (size_t)l * C * Cl, layer_part(g->attprojb, l, C),
                         datt, dad, v.atty, m->sd, p->attprojw + (size_t)l * C * Cl, B, T, Cl, C);
    int ad = m->act_dtype;   /* datty's, dqkv's */
    ops->attention_backward(a->dqkv, ad, a->datty, ad, v.qkv, ad, v.atty, m->sd, v.att_lse, B, T, Cl, NHl, m->Gl, da);
    if (m->rot)   /* back through the rotation: d(q, k) before it (16-bit: rounded as it is turned) */
        ops->rope_backward(a->dqkv, ad, rcos, rsin, B, T, NHl, m->Gl, m->hs, m->rot, m->cfg.rotary_interleaved);
    ops->matmul_backward(a->dln, m->gd, g->qkvw + (size_t)l * QKVl * C, layer_part(g->qkvb, l, QKVl), a->dqkv, ad,
                         sp_stored(m, v.ln1), m->sd, p->qkvw + (size_t)l * QKVl * C, B, T, C, (int)QKVl);
    dln_summed(m, a->dln, BTC);
    norm_backward(m, a->dresidual, m->rd, g->ln1w + lC, layer_part(g->ln1b, l, C), a->dln, m->gd, v.in,
                  p->ln1w + lC, v.ln1_mean, v.ln1_rstd);
}

const float *gpt_stage_output(const gpt_model *m) { return layer_output(m, m->Ll - 1); }

/* ---- the embedding (first stage) ------------------------------------------ */

/* Vocab-parallel embedding: each TP rank looks up its vocabulary rows, the
 * all-reduce (or reduce-scatter) sums them, then Megatron's embedding
 * dropout.  The position term (learned positions only) is added by TP rank
 * 0 before the sum; with embed_layernorm the sum holds the word embeddings
 * alone, and every rank normalises them and adds the positions after
 * (bigscience's norm sits inside VocabParallelEmbedding, model.h). */
static void embed_forward(gpt_model *m)
{
    int B = m->B, T = m->T, C = m->C, eln = m->cfg.embed_layernorm;
    const gpt_params *p = &m->params;
    gpt_acts *a = &m->acts;
    const mds_ops *ops = &m->be->ops;
    size_t TsC = (size_t)m->Ts * (size_t)C, BTsC = (size_t)B * TsC;
    float *words = eln ? a->emb : a->encoded;
    float *emb = m->sp ? m->sp_full2 : words;
    ops->encoder_forward(emb, a->inputs, p->wte, m->cfg.tp_rank == 0 && !eln ? p->wpe : NULL, B, T, C, m->Vl,
                         m->v_start);
    tp_reduce_out(m, words, emb);
    if (eln) {
        norm_forward(m, a->encoded, MDS_F32, a->emb_mean, a->emb_rstd, a->emb, p->emblnw, p->emblnb, GPT_EMBED_LN_EPS);
        for (size_t b = 0; p->wpe && b < (size_t)B; b++)   /* positions t0 .. t0 + Ts - 1 */
            ops->residual_forward(a->encoded + b * TsC, a->encoded + b * TsC, p->wpe + (size_t)m->t0 * C, MDS_F32,
                                  TsC, m->act_dtype);   /* kept */
    }
    mds_dropout d = site_dropout(m, m->cfg.hidden_dropout, 0, 0);
    d.t0 = m->t0;
    if (d.p > 0.0f) {
        ops->dropout_forward(a->encoded, a->encoded, B, m->Ts, C, d);
        keep(m, a->encoded, BTsC);
    }
}

/* Its backward from dresidual = d(stage input) over the whole sequence:
 * through the dropout, into wpe, then (embed_layernorm) through the norm
 * into the word embeddings' rows; dln and dresidual serve as scratch. */
static void embed_backward(gpt_model *m)
{
    int B = m->B, T = m->T, C = m->C;
    size_t BTC = (size_t)B * (size_t)T * (size_t)C;
    const gpt_params *p = &m->params, *g = &m->grads;
    gpt_acts *a = &m->acts;
    const mds_ops *ops = &m->be->ops;
    int ded;   /* (fp32 with dropout or the embedding LayerNorm: model.h) */
    float *demb = resid_grad(m, site_dropout(m, m->cfg.hidden_dropout, 0, 0), &ded);
    if (!m->cfg.embed_layernorm) {
        ops->encoder_backward(g->wte, g->wpe, demb, ded, a->inputs, B, T, C, m->Vl, m->v_start);
        return;
    }
    if (g->wpe)
        ops->encoder_backward(NULL, g->wpe, demb, ded, a->inputs, B, T, C, m->Vl, m->v_start);
    float *dwords = demb == a->dln ? a->dresidual : a->dln;
    m->be->zero(dwords, BTC * sizeof(float));
    norm_backward(m, dwords, MDS_F32, g->emblnw, g->emblnb, demb, ded, a->emb, p->emblnw, a->emb_mean,
                  a->emb_rstd);
    ops->encoder_backward(g->wte, NULL, dwords, MDS_F32, a->inputs, B, T, C, m->Vl, m->v_start);
}

/* Every matmul and attention input the model keeps is a value of its
 * working dtype (keep() and the rounded weights): the backend may multiply
 * in it. */
static void set_compute_dtype(const gpt_model *m)
{
    if (m->be->set_compute_dtype)
        m->be->set_compute_dtype(m->act_dtype);
}

int gpt_forward(gpt_model *m, const int *inputs, const int *targets, const float *mask,
                double *loss_sum, double *num_tokens)
{
    int B = m->B, T = m->T, C = m->C, Vl = m->Vl;
    size_t BT = (size_t)B * T;
    gpt_params *p = &m->params;
    gpt_acts *a = &m->acts;
    const mds_ops *ops = &m->be->ops;
    if (m->cfg.tp_size > 1 && !m->tp)
        return GPT_ERR_ARG;
    set_compute_dtype(m);
    for (size_t i = 0; m->first_stage && i < BT; i++)
        if (inputs[i] < 0 || inputs[i] >= m->cfg.vocab_size)
            return GPT_ERR_ARG;
    /* host -> backend: the mask (ones when NULL), token ids, targets */
    if (!mask)
        for (size_t i = 0; i < BT; i++)
            m->host_mask[i] = 1.0f;
    m->be->copy(a->mask, mask ? mask : m->host_mask, BT * sizeof(float));
    if (m->first_stage)
        m->be->copy(a->inputs, inputs, BT * sizeof(int));
    if (m->last_stage)
        m->be->copy(a->targets, targets, BT * sizeof(int));

    if (m->first_stage) {
        if (m->params_needed) m->params_needed(m->params_needed_ctx, -1);
        embed_forward(m);
    }
    /* else: the caller received `encoded` from the previous stage */
    for (int l = 0; l < m->Ll; l++) {
        if (m->params_needed) m->params_needed(m->params_needed_ctx, l);
        layer_forward(m, l);
    }
    const float *residual = layer_output(m, m->Ll - 1);
    double sums[2];
    /* gpt_set_loss_grad's request, for this forward only */
    float ce_scale = m->ce_scale;
    m->ce_scale = m->ce_done = -1.0f;
    if (!m->last_stage) {
        ops->loss_reduce(m->dsum, NULL, a->mask, BT);
        m->be->copy(sums, m->dsum, sizeof sums);
        m->num_tokens = (float)sums[1];
        *num_tokens = sums[1];
        *loss_sum = 0.0;
        return GPT_OK;   /* the caller sends gpt_stage_output() on */
    }
    if (m->params_needed) m->params_needed(m->params_needed_ctx, m->Ll);
    norm_forward(m, a->lnf, m->sd, a->lnf_mean, a->lnf_rstd, residual, p->lnfw, p->lnfb, m->cfg.layernorm_eps);
    const float *outw = m->cfg.untie_embeddings ? p->outw : p->wte;
    ops->matmul_forward(a->logits, m->act_dtype, sp_stored(m, a->lnf), m->sd, outw, NULL, B, T, C, Vl);
    if (ce_scale >= 0.0f && m->slots == 1 && m->cfg.tp_size == 1) {
        /* the loss and the logits' gradient together: dlosses as
           gpt_backward would form them (the mask sum as loss_reduce gives
           it below), then one op (crossentropy_fused) */
        ops->loss_reduce(m->dsum, NULL, a->mask, BT);
        m->be->copy(sums, m->dsum, sizeof sums);
        float nt = (float)sums[1];
        m->ce_done = m->ce_per_token ? ce_scale * nt : ce_scale;
        loss_grads(m, m->ce_done, nt);
        ops->crossentropy_fused(a->losses, a->maxes, a->sumexp, a->tlogits, a->logits, m->act_dtype, a->targets,
                                a->mask, a->dlosses, B, T, Vl, m->v_start);
    } else {
        ops->crossentropy_forward(a->losses, a->maxes, a->sumexp, a->tlogits, a->logits, m->act_dtype, a->targets,
                                  a->mask, B, T, Vl, m->v_start);
    }
    if (m->cfg.tp_size > 1) {
        /* Megatron's _VocabParallelCrossEntropy: max, rescale, two sums
           (dlosses serves as the global-max scratch; backward refills it). */
        m->be->copy(a->dlosses, a->maxes, BT * sizeof(float));
        tp_max(m, a->dlosses, BT);
        ops->crossentropy_rescale(a->sumexp, a->maxes, a->dlosses, B, T);
        tp_sum(m, a->sumexp, BT);
        tp_sum(m, a->tlogits, BT);
        ops->crossentropy_loss(a->losses, a->maxes, a->sumexp, a->tlogits, a->mask, B, T);
    }
    ops->loss_reduce(m->dsum, a->losses, a->mask, BT);   /* losses are 0 where mask is 0 */
    m->be->copy(sums, m->dsum, sizeof sums);
    m->num_tokens = (float)sums[1];
    *num_tokens = sums[1];
    *loss_sum = sums[0];
    return GPT_OK;
}

void gpt_zero_grad(gpt_model *m)
{
    m->be->zero(m->grads_memory, m->num_params * sizeof(float));
}

void gpt_backward(gpt_model *m, float scale)
{
    int B = m->B, T = m->T, C = m->C, Vl = m->Vl;
    size_t BT = (size_t)B * T, BTC = BT * (size_t)C;
    gpt_params *p = &m->params, *g = &m->grads;
    gpt_acts *a = &m->acts;
    const mds_ops *ops = &m->be->ops;
    set_compute_dtype(m);
    if (m->last_stage) {
        if (m->ce_done < 0.0f) {
            loss_grads(m, scale, m->num_tokens);
            ops->crossentropy_backward(a->logits, a->logits, m->act_dtype, a->maxes, a->sumexp, a->targets,
                                       a->dlosses, B, T, Vl, m->v_start);
        } else if (m->ce_done != scale) {   /* (gpt_set_loss_grad's promise broken: a bug, not an input) */
            fprintf(stderr, "mdstrain: internal error: gpt_backward's scale %.9g is not the %.9g its forward "
                    "was told\n", (double)scale, (double)m->ce_done);
            abort();
        }
        m->ce_done = -1.0f;   /* (the logits now hold their gradient) */
        const float *outw = m->cfg.untie_embeddings ? p->outw : p->wte;
        float *doutw = m->cfg.untie_embeddings ? g->outw : g->wte;
        ops->matmul_backward(a->dln, m->gd, doutw, NULL, a->logits, m->act_dtype, sp_stored(m, a->lnf), m->sd, outw, B,
                             T, C, Vl);
        dln_summed(m, a->dln, BTC);   /* the output layer is column-parallel */
        const float *last = layer_output(m, m->Ll - 1);
        m->be->zero(a->dresidual, BTC * mds_dtype_size(m->rd));
        norm_backward(m, a->dresidual, m->rd, g->lnfw, g->lnfb, a->dln, m->gd, last, p->lnfw, a->lnf_mean, a->lnf_rstd);
    } else if (m->sp) {
        /* the caller put this rank's slice of the next stage's gradient in
           dgrad_in (else in dresidual); the residual stream's gradient is
           kept whole (model.h) */
        sp_gather(m, a->dresidual, a->dgrad_in, (size_t)C, sizeof(float));
    }
    for (int l = m->Ll - 1; l >= 0; l--) {
        if (l < m->rc_layers && (l == m->rc_layers - 1 || (l + 1) % m->rc_chunk == 0))   /* a chunk's last layer */
            for (int j = l / m->rc_chunk * m->rc_chunk; j <= l; j++)
                layer_forward(m, j);   /* recompute the chunk */
        layer_backward(m, l);
        if (m->layer_grads_done) m->layer_grads_done(m->layer_grads_ctx, l);
    }
    /* dresidual is now d(stage input): sent back by the caller on later
       stages, the embedding's gradient on the first.  Tied embeddings under
       PP: the caller all-reduces the wte gradients of the first and last
       stage. */
    if (m->sp && !m->first_stage)   /* this rank's slice of d(stage input), to send back */
        for (size_t b = 0; b < (size_t)B; b++)
            m->be->copy(a->dgrad_in + b * (size_t)m->Ts * C, a->dresidual + (b * (size_t)T + (size_t)m->t0) * C,
                        (size_t)m->Ts * C * sizeof(float));
    if (m->first_stage)
        embed_backward(m);
    /* fp16 main gradients (--fp16 without --accumulate-allreduce-grads-in-fp32):
       the buffer holds what an fp16 buffer would after this micro-batch */
    if (m->cfg.grad_dtype != MDS_F32)
        ops->round_to(m->grads_memory, m->num_params, m->cfg.grad_dtype);
}

int gpt_param_counts_in_norm(const gpt_model *m, int id)
{
    switch (id) {
    case GPT_WTE:
        return m->first_stage;   /* the last stage's tied copy is Megatron's shared one */
    case GPT_QKVW: case GPT_QKVB: case GPT_ATTPROJW: case GPT_FCW: case GPT_FCB: case GPT_FCPROJW: case GPT_OUTW:
        return 1;                /* split over TP */
    default:
        return m->cfg.tp_rank == 0;   /* replicated over TP */
    }
}

/* The part [*b, *e) of tensor id (whose flat elements start at off) inside
 * [lo, hi); returns 0 when empty. */
static int tensor_in_range(const gpt_model *m, int id, size_t off, size_t lo, size_t hi, size_t *b, size_t *e)
{
    *b = off > lo ? off : lo;
    *e = off + m->param_sizes[id] < hi ? off + m->param_sizes[id] : hi;
    return *b < *e;
}

double gpt_grad_sq_range(const gpt_model *m, const float *g, size_t lo, size_t hi)
{
    double total = 0.0;
    size_t off = 0, b, e;
    for (int i = 0; i < GPT_NUM_PARAMS; off += m->param_sizes[i], i++) {
        if (!tensor_in_range(m, i, off, lo, hi, &b, &e) || !gpt_param_counts_in_norm(m, i))
            continue;
        double s;
        m->be->ops.global_norm_squared(m->dsum, g + (b - lo), e - b);
        m->be->copy(&s, m->dsum, sizeof s);
        total += s;
    }
    return total;
}

double gpt_grad_norm(const gpt_model *m)
{
    return sqrt(gpt_grad_sq_range(m, m->grads_memory, 0, m->num_params));
}

double gpt_grad_sq_shard(const gpt_model *m, const float *g)
{
    double total = 0.0;
    for (size_t k = 0; k < m->opt_npieces; k++) {
        const gpt_opt_piece *q = &m->opt_pieces[k];
        total += gpt_grad_sq_range(m, g + q->at, q->lo, q->hi);
    }
    return total;
}

int64_t gpt_grad_zeros_range(const gpt_model *m, const float *g, size_t lo, size_t hi, float scale)
{
    enum { CHUNK = 1 << 16 };
    float *h = malloc(CHUNK * sizeof *h);
    if (!h) return -1;
    int64_t zeros = 0;
    size_t off = 0, b, e;
    for (int i = 0; i < GPT_NUM_PARAMS; off += m->param_sizes[i], i++) {
        if (!tensor_in_range(m, i, off, lo, hi, &b, &e) || !gpt_param_counts_in_norm(m, i))
            continue;
        for (size_t k = b; k < e; k += CHUNK) {
            size_t n = e - k < CHUNK ? e - k : CHUNK;
            m->be->copy(h, g + (k - lo), n * sizeof *h);
            for (size_t j = 0; j < n; j++) {
                float x = h[j] * scale;   /* (a float product, as the clip's) */
                zeros += x == 0.0f;
            }
        }
    }
    free(h);
    return zeros;
}

int64_t gpt_grad_zeros_shard(const gpt_model *m, const float *g, float scale)
{
    int64_t total = 0;
    for (size_t k = 0; k < m->opt_npieces; k++) {
        const gpt_opt_piece *q = &m->opt_pieces[k];
        int64_t z = gpt_grad_zeros_range(m, g + q->at, q->lo, q->hi, scale);
        if (z < 0) return -1;
        total += z;
    }
    return total;
}

/* The AdamW step of gpt_update (g: the model's gradients, by flat index)
 * and gpt_update_shard (g: by slot). */
static void update_pieces(gpt_model *m, const float *g, int by_slot, float lr, float lr_embed, float beta1,
                          float beta2, float eps, float weight_decay, float grad_scale)
{
    m->step++;
    for (size_t k = 0; k < m->opt_npieces; k++) {
        size_t lo = m->opt_pieces[k].lo, hi = m->opt_pieces[k].hi, at = m->opt_pieces[k].at, off = 0, b, e;
        const float *gk = by_slot ? g + at : g + lo;   /* element lo's gradient */
        for (int i = 0; i < GPT_NUM_PARAMS; off += m->param_sizes[i], i++) {
            if (!tensor_in_range(m, i, off, lo, hi, &b, &e))
                continue;
            m->be->ops.adamw_update(m->master_memory + b, m->m + at + (b - lo), m->v + at + (b - lo), gk + (b - lo),
                                    e - b, m->step, i == GPT_WTE || i == GPT_OUTW ? lr_embed : lr, beta1, beta2,
                                    eps, gpt_param_decays(i) ? weight_decay : 0.0f, grad_scale);
        }
        if (m->master_memory != m->params_memory && hi > lo) {   /* the working copy: the master, rounded */
            m->be->copy(m->params_memory + lo, m->master_memory + lo, (hi - lo) * sizeof(float));
            m->be->ops.round_to(m->params_memory + lo, hi - lo, m->cfg.dtype);
        }
    }
}

void gpt_update_shard(gpt_model *m, const float *g, float lr, float lr_embed, float beta1, float beta2, float eps,
                      float weight_decay, float grad_scale)
{
    update_pieces(m, g, 1, lr, lr_embed, beta1, beta2, eps, weight_decay, grad_scale);
}

void gpt_update(gpt_model *m, float lr, float lr_embed, float beta1, float beta2, float eps,
                float weight_decay, float grad_scale)
{
    update_pieces(m, m->grads_memory, 0, lr, lr_embed, beta1, beta2, eps, weight_decay, grad_scale);
}

double gpt_flops_per_token(const gpt_model *m)
{
    double C = m->C, F = m->F, L = m->L, T = m->T, V = m->Vp, KV = (double)m->G * m->hs;
    double mlp = (m->cfg.swiglu ? 3 : 2) * C * F;
    double matmul_weights = L * (C * C + 2 * C * KV + C * C + mlp) + C * V;
    return 6.0 * matmul_weights + 6.0 * L * C * T;
}
