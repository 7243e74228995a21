/*
 * trainer.c - mdstrain's training engine: schedule, layout, 1F1B, gradient
 * reduction, ZeRO-1 shards, update, evaluation, checkpoints; see trainer.h.
 */
#include "trainer.h"

#include "grow.h"
#include "kernels.h"
#include "tdsave.h"
#include "torchdist.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Megatron's learning-rate schedule ---------------------------------------- */

const char *const train_decay_names[TRAIN_DECAY_COUNT + 1] = {
    "constant", "linear", "cosine", "inverse-square-root", "WSD", NULL
};
const char *const train_wsd_names[5] = { "exponential", "linear", "cosine", "minus_sqrt", NULL };

/* Megatron's get_lr (megatron/core/optimizer_param_scheduler.py at
 * d98e8a64), in Python's order of operations. */
double train_schedule_lr(const train_schedule *s, double num_steps)
{
    if (s->warmup_steps > 0 && num_steps <= s->warmup_steps)
        return s->init_lr + (s->max_lr - s->init_lr) * num_steps / s->warmup_steps;
    if (s->style == TRAIN_DECAY_CONSTANT)
        return s->max_lr;
    if (num_steps > s->decay_steps)
        return s->min_lr;
    if (s->style == TRAIN_DECAY_INV_SQRT) {
        /* max_lr * max(warmup, 1) ** 0.5 / (max(num_steps, 1) ** 0.5), then max(min_lr, lr) */
        double w = 1.0 > s->warmup_steps ? 1.0 : s->warmup_steps, n = 1.0 > num_steps ? 1.0 : num_steps;
        double lr = s->max_lr * pow(w, 0.5) / pow(n, 0.5);
        return lr > s->min_lr ? lr : s->min_lr;
    }
    double ratio = (num_steps - s->warmup_steps) / (s->decay_steps - s->warmup_steps);
    double delta = s->max_lr - s->min_lr, coeff;
    if (s->style == TRAIN_DECAY_LINEAR) {
        coeff = 1.0 - ratio;
    } else if (s->style == TRAIN_DECAY_COSINE) {
        coeff = 0.5 * (cos(M_PI * ratio) + 1.0);
    } else {   /* WSD: stable, then the last wsd_decay_steps anneal */
        double start = s->decay_steps - s->wsd_decay_steps;
        if (num_steps <= start) {
            coeff = 1.0;
        } else {
            double r = (num_steps - start) / s->wsd_decay_steps;
            switch (s->wsd_style) {
            case TRAIN_WSD_LINEAR: coeff = 1.0 - r; break;
            case TRAIN_WSD_COSINE: coeff = 0.5 * (cos(M_PI * r) + 1.0); break;
            case TRAIN_WSD_MINUS_SQRT: coeff = 1.0 - sqrt(r); break;
            default: coeff = 2.0 * pow(0.5, r) - 1.0; break;
            }
        }
    }
    return s->min_lr + coeff * delta;
}

/* Megatron-DeepSpeed's get_lr, its lr_warmup_tokens being None when < 0;
 * "step/sample-wise warmup + token-wise decay" sets it, in the call where
 * num_steps == warmup_steps, to the tokens then consumed: latch_tokens. */
double train_schedule_lr_tokens(const train_schedule *s, double num_steps, double num_tokens)
{
    if (s->warmup_tokens < 0 && s->decay_tokens < 0)
        return train_schedule_lr(s, num_steps);
    double lwt = s->warmup_tokens;
    if (lwt < 0 && s->decay_tokens >= 0 && s->warmup_steps > 0 && num_steps > s->warmup_steps)
        lwt = s->latch_tokens;
    if (lwt < 0) {
        if (s->warmup_steps > 0 && num_steps <= s->warmup_steps)
            return s->init_lr + (s->max_lr - s->init_lr) * num_steps / s->warmup_steps;
    } else if (lwt > 0 && num_tokens <= lwt) {
        return s->init_lr + (s->max_lr - s->init_lr) * num_tokens / lwt;
    }
    if (s->style == TRAIN_DECAY_CONSTANT)
        return s->max_lr;
    double ratio;
    if (s->decay_tokens < 0) {
        if (num_steps > s->decay_steps)
            return s->min_lr;
        ratio = (num_steps - s->warmup_steps) / (s->decay_steps - s->warmup_steps);
    } else {
        if (num_tokens > s->decay_tokens)
            return s->min_lr;
        ratio = (num_tokens - lwt) / (s->decay_tokens - lwt);   /* lwt >= 0: train_schedule_init */
    }
    double delta = s->max_lr - s->min_lr;
    double coeff = s->style == TRAIN_DECAY_LINEAR ? 1.0 - ratio : 0.5 * (cos(M_PI * ratio) + 1.0);
    return s->min_lr + coeff * delta;
}

/* In Python's order of operations, so the doubles are DeepSpeed's. */
double train_ds_schedule_lr(const train_ds_schedule *s, double n)
{
    double gamma = 1.0;
    if (n < s->warmup_num_steps)
        gamma = s->linear ? n / s->warmup_num_steps : 1.0 / log(s->warmup_num_steps) * log(n + 1);
    else if (s->type == TRAIN_DS_WARMUP_DECAY_LR)
        gamma = fmax(0.0, (s->total_num_steps - n) / fmax(1.0, s->total_num_steps - s->warmup_num_steps));
    return s->min_lr + (s->max_lr - s->min_lr) * gamma;
}

int train_schedule_init(train_schedule *s, const train_schedule_args *a, char *err, size_t errlen)
{
    s->warmup_tokens = a->have_warmup_tokens ? (double)a->lr_warmup_tokens : -1;
    s->decay_tokens = a->have_decay_tokens ? (double)a->lr_decay_tokens : -1;
    s->max_lr = a->lr;
    s->min_lr = a->min_lr;
    s->init_lr = a->lr_warmup_init;
    s->style = a->decay_style;
    s->wsd_style = a->wsd_style < 0 ? TRAIN_WSD_EXPONENTIAL : a->wsd_style;
    /* Megatron's get_optimizer_param_scheduler: the iterations' count in
       iteration-based training, the samples' in sample-based */
    s->wsd_decay_steps = -1;
    if (a->train_samples && a->have_wsd_samples) s->wsd_decay_steps = (double)a->lr_wsd_decay_samples;
    if (!a->train_samples && a->have_wsd_iters)
        s->wsd_decay_steps = (double)a->lr_wsd_decay_iters * (double)a->global_batch_size;
    if (a->train_samples) {
        s->decay_steps = (double)(a->have_decay_samples ? a->lr_decay_samples : a->train_samples);
        s->warmup_steps = a->have_warmup_fraction ? a->lr_warmup_fraction * s->decay_steps
                                                  : (double)a->lr_warmup_samples;
    } else {
        s->decay_steps = (double)(a->have_decay_iters ? a->lr_decay_iters : a->train_iters) *
                         (double)a->global_batch_size;
        s->warmup_steps = a->have_warmup_fraction ? a->lr_warmup_fraction * s->decay_steps
                                                  : (double)a->lr_warmup_iters * (double)a->global_batch_size;
    }
    /* Megatron's asserts in OptimizerParamScheduler.__init__ */
    if (!(s->decay_steps > 0)) {
        snprintf(err, errlen, "the learning-rate decay length is 0");
        return -1;
    }
    if (!(s->warmup_steps < s->decay_steps)) {
        snprintf(err, errlen, "the warmup (%g samples) is not shorter than the decay (%g samples)", s->warmup_steps,
                 s->decay_steps);
        return -1;
    }
    if (s->style == TRAIN_DECAY_WSD && s->wsd_decay_steps < 0) {   /* its assert */
        snprintf(err, errlen, "--lr-decay-style WSD needs --lr-wsd-decay-%s", a->train_samples ? "samples" : "iters");
        return -1;
    }
    s->latch_tokens = -1;
    /* where Megatron-DeepSpeed fails: a token decay from no known warmup end
       (TypeError), a token warmup not below the token decay (its assert) */
    if (s->decay_tokens >= 0 && s->warmup_tokens < 0 && !(s->warmup_steps > 0)) {
        snprintf(err, errlen, "--lr-decay-tokens needs --lr-warmup-tokens or a warmup in iterations or samples "
                              "(Megatron-DeepSpeed fails there); give --lr-warmup-tokens 0 for none");
        return -1;
    }
    if ((s->decay_tokens >= 0 || s->warmup_tokens >= 0) && s->style > TRAIN_DECAY_COSINE) {
        snprintf(err, errlen, "--lr-decay-style %s with the token schedule (--lr-*-tokens): Megatron-DeepSpeed's "
                              "has constant, linear and cosine", train_decay_names[s->style]);
        return -1;
    }
    if (s->decay_tokens >= 0 && s->warmup_tokens >= 0 && !(s->warmup_tokens < s->decay_tokens)) {
        snprintf(err, errlen, "the warmup (%g tokens) is not shorter than the decay (%g tokens)", s->warmup_tokens,
                 s->decay_tokens);
        return -1;
    }
    return 0;
}

/* ---- Megatron's batch-size ramp-up -------------------------------------------- */

int train_rampup_init(train_rampup *r, uint64_t start, uint64_t incr, uint64_t samples, uint64_t global_batch_size,
                      char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    r->global_batch_size = global_batch_size;
    if (!start)
        return 0;
    if (!incr) {
        snprintf(err, errlen, "batch size increment should be positive, got 0");
        return -1;
    }
    if (start > global_batch_size) {
        snprintf(err, errlen, "expected global batch size to be greater than or equal to start batch size, got %" PRIu64
                 " and %" PRIu64, global_batch_size, start);
        return -1;
    }
    if ((global_batch_size - start) % incr) {
        snprintf(err, errlen, "expected global batch size interval (%" PRIu64 ") to be divisible by global batch size "
                 "increment (%" PRIu64 ")", global_batch_size - start, incr);
        return -1;
    }
    if (start == global_batch_size || !samples) {
        snprintf(err, errlen, "a ramp-up %s (Megatron divides by zero there)",
                 start == global_batch_size ? "that starts at the global batch size has no increments"
                                            : "over 0 samples has no length");
        return -1;
    }
    r->start = start;
    r->incr = incr;
    r->samples = samples;
    r->samples_per_increment = (double)samples / (double)((global_batch_size - start) / incr);
    return 0;
}

uint64_t train_rampup_batch(const train_rampup *r, uint64_t consumed)
{
    if (!r->start || consumed > r->samples)
        return r->global_batch_size;
    uint64_t steps = (uint64_t)((double)consumed / r->samples_per_increment);   /* int(a / b) */
    return r->start + steps * r->incr;
}

uint64_t train_rampup_train_iters(const train_rampup *r, uint64_t train_samples)
{
    if (!r->start)
        return train_samples / r->global_batch_size;
    uint64_t iterations = 0, consumed = 0;
    while (consumed <= r->samples && consumed <= train_samples) {
        consumed += train_rampup_batch(r, consumed);
        iterations++;
    }
    if (train_samples > consumed)
        iterations += (train_samples - consumed) / r->global_batch_size;
    return iterations;
}

void train_rampup_consumed(const train_rampup *r, uint64_t k, uint64_t *before, uint64_t *after)
{
    uint64_t prev = 0, cur = 0;
    for (uint64_t i = 0; i < k; i++) {
        if (!r->start || cur > r->samples) {   /* constant from here on */
            uint64_t rest = k - i;
            prev = cur + (rest - 1) * r->global_batch_size;
            cur += rest * r->global_batch_size;
            break;
        }
        prev = cur;
        cur += train_rampup_batch(r, cur);
    }
    *before = prev;
    *after = cur;
}

int train_rampup_warmup_tokens(const train_rampup *r, double warmup_steps, uint64_t seq_length, double *tokens)
{
    uint64_t prev = 0, cur = 0;
    while ((double)cur < warmup_steps) {
        prev = cur;
        cur += train_rampup_batch(r, cur);
    }
    if ((double)cur != warmup_steps)
        return -1;
    *tokens = (double)prev * (double)seq_length;
    return 0;
}

/* ---- errors ------------------------------------------------------------------------ */

static int fail(trainer *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(trainer *t, const char *fmt, ...)
{
    int n = snprintf(t->err, sizeof t->err, "rank %d: ", t->P->rank);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->err + n, sizeof t->err - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

/* A collective's result: -1 with "rank R: WHAT: cause" on failure. */
#define COMM(t, expr, what) do { if ((expr) < 0) return fail((t), "%s: %s", (what), comm_error()); } while (0)
#define TRY(expr) do { if ((expr) < 0) return -1; } while (0)

/* ---- the parallel layout -------------------------------------------------------- */

/* Megatron's timer id (timers.h) started or stopped; a failed sync or
 * barrier fails the trainer. */
#define TIMER(t, op, id, barrier) do { \
        if (mds_timers_##op((t)->cfg.timers, (id), (barrier)) != 0) return fail((t), "%s", (t)->cfg.timers->err); \
    } while (0)

int train_layout_init(train_layout *P, mds_comm *world, int tp_size, int pp_size, char *err, size_t errlen)
{
    memset(P, 0, sizeof *P);
    P->world = world;
    P->rank = comm_rank(world);
    P->size = comm_size(world);
    P->tp_size = tp_size;
    P->pp_size = pp_size;
    P->dp_size = P->size / (tp_size * pp_size);
    int tp = tp_size, dp = P->dp_size, r = P->rank;
    P->tp_rank = r % tp;
    P->dp_rank = r / tp % dp;
    P->pp_rank = r / (tp * dp);
    int ends = P->pp_rank == 0 || P->pp_rank == P->pp_size - 1;
    const char *what = NULL;
    if (comm_split(world, r / tp, P->tp_rank, &P->tp) < 0) what = "tensor-parallel";
    else if (comm_split(world, P->tp_rank + tp * P->pp_rank, P->dp_rank, &P->dp) < 0) what = "data-parallel";
    else if (comm_split(world, P->tp_rank + tp * P->dp_rank, P->pp_rank, &P->pp) < 0) what = "pipeline";
    else if (comm_split(world, P->dp_rank, P->tp_rank + tp * P->pp_rank, &P->mp) < 0) what = "model-parallel";
    else if (comm_split(world, ends ? P->tp_rank + tp * P->dp_rank : tp * dp + r, P->pp_rank, &P->emb) < 0)
        what = "embedding";
    if (what) {
        snprintf(err, errlen, "rank %d: splitting the %s groups: %s", P->rank, what, comm_error());
        return -1;
    }
    return 0;
}

void train_layout_release(train_layout *P)
{
    comm_free(P->tp);
    comm_free(P->dp);
    comm_free(P->pp);
    comm_free(P->mp);
    comm_free(P->emb);
    P->tp = P->dp = P->pp = P->mp = P->emb = NULL;
}

void train_layout_reset_stats(train_layout *P)
{
    mds_comm *g[] = {P->world, P->tp, P->dp, P->pp, P->mp, P->emb};
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
        comm_reset_stats(g[i]);
}

/* ---- set-up ----------------------------------------------------------------------- */

/* The model's TP collectives: a failure cannot return through the model. */
static void tp_collective(trainer *t, float *buf, size_t n, enum comm_op op)
{
    if (comm_allreduce(t->P->tp, buf, n, COMM_F32, op) < 0) {
        fail(t, "tensor-parallel all-reduce%s: %s", op == COMM_MAX ? " (max)" : "", comm_error());
        t->cfg.fatal(t->err);
    }
}
static void tp_sum(void *ctx, float *buf, size_t n) { tp_collective(ctx, buf, n, COMM_SUM); }
static void tp_max(void *ctx, float *buf, size_t n) { tp_collective(ctx, buf, n, COMM_MAX); }
static void tp_reduce_scatter(void *ctx, float *out, const float *in, size_t chunk)
{
    trainer *t = ctx;
    if (comm_reduce_scatter(t->P->tp, out, in, chunk) < 0) {
        fail(t, "tensor-parallel reduce-scatter: %s", comm_error());
        t->cfg.fatal(t->err);
    }
}
static void tp_allgather(void *ctx, float *out, const float *in, size_t chunk)
{
    trainer *t = ctx;
    if (comm_allgather(t->P->tp, out, in, chunk) < 0) {
        fail(t, "tensor-parallel all-gather: %s", comm_error());
        t->cfg.fatal(t->err);
    }
}

void trainer_set_global_batch(trainer *t, uint64_t global_batch_size)
{
    t->nmicro = trainer_micro_batches(global_batch_size, t->m->B, t->P->dp_size);
}

uint64_t trainer_micro_batches(uint64_t global_batch_size, int micro_batch_size, int dp_size)
{
    return global_batch_size / ((uint64_t)micro_batch_size * (uint64_t)dp_size);
}

int trainer_act_slots(const train_layout *P, uint64_t nmicro)
{
    uint64_t slots = (uint64_t)(P->pp_size - P->pp_rank);
    return (int)(slots < nmicro ? slots : nmicro);
}

/* The flat offset of tensor k in params_memory and grads_memory. */
static size_t param_offset(const gpt_model *m, int k)
{
    size_t off = 0;
    for (int i = 0; i < k; i++) off += m->param_sizes[i];
    return off;
}

/* ---- Data-parallel buckets ------------------------------------------------
 *
 * A bucket is a list of slices of the flat parameters, packed one after
 * another (pack, at pack_at).  The layers' buckets (--overlap-grad-reduce,
 * DP > 1): the local layers from the last to the first (the backward's
 * order), each layer's slices of the per-layer tensors in tensor order, a
 * bucket closed once it holds bucket_size elements, the last one after the
 * backward; the all-reduce path reduces the tensors outside the layers
 * after the wait, the distributed optimizer as one more bucket (the rest,
 * in flat order).  The distributed optimizer without overlap: one bucket,
 * the whole flat array.  Under the distributed optimizer each bucket is
 * padded with zeros to dp * chunk, chunk = ceil(len / dp), and rank r owns
 * packed positions [r chunk, (r + 1) chunk) of it: those positions' flat
 * elements are its optimizer pieces, at slots slot_at + (position - r
 * chunk) of gshard and of the model's moments.  With one bucket of the
 * whole array that is the contiguous shard [r chunk, (r + 1) chunk) at
 * slot 0; with overlap, Megatron's layout (each rank a chunk of each
 * bucket), so every bucket's reduce-scatter can start as soon as the
 * backward has finished its layers.
 */
struct dp_bucket {
    size_t s0, ns;        /* slices [s0, s0 + ns) */
    size_t len, chunk;    /* packed elements; per-rank chunk (len without the distributed optimizer) */
    size_t pack_at, slot_at;
    int last_layer;       /* the local layer whose backward completes it; -1 a layers' bucket, -2 the
                             rest, both started after the backward */
    int started;
    size_t ticket;        /* --overlap-param-gather: its all-gather's place among the step's */
    int gathered;         /* ... and whether its parameters are back in place */
};

/* cap[3]: the capacities of sl_off, sl_len and sl_pack */
static int add_slice(trainer *t, size_t cap[3], size_t off, size_t len)
{
    if (!len) return 0;
    if (mds_grow((void **)&t->sl_off, &cap[0], t->nsl + 1, sizeof *t->sl_off) ||
        mds_grow((void **)&t->sl_len, &cap[1], t->nsl + 1, sizeof *t->sl_len) ||
        mds_grow((void **)&t->sl_pack, &cap[2], t->nsl + 1, sizeof *t->sl_pack))
        return -1;
    t->sl_off[t->nsl] = off;
    t->sl_len[t->nsl++] = len;
    return 0;
}

/* Close the bucket of the slices since the last one (none: nothing). */
static int close_bucket(trainer *t, size_t *bcap, int last_layer)
{
    size_t s0 = t->nbk ? t->bk[t->nbk - 1].s0 + t->bk[t->nbk - 1].ns : 0;
    if (s0 == t->nsl) return 0;
    if (mds_grow((void **)&t->bk, bcap, t->nbk + 1, sizeof *t->bk)) return -1;
    t->bk[t->nbk++] = (struct dp_bucket){ .s0 = s0, .ns = t->nsl - s0, .last_layer = last_layer };
    return 0;
}

/* The part of slice s of bucket k that lies in the bucket's packed
 * positions [from, to): [*a0, *a1), the slice starting at packed position
 * *pos; 0 when they do not meet. */
static int slice_part(const trainer *t, const struct dp_bucket *k, size_t s, size_t from, size_t to, size_t *pos,
                      size_t *a0, size_t *a1)
{
    *pos = t->sl_pack[s] - k->pack_at;
    *a0 = *pos > from ? *pos : from;
    *a1 = *pos + t->sl_len[s] < to ? *pos + t->sl_len[s] : to;
    return *a0 < *a1;
}

/* This rank's packed positions [*from, *to) of bucket k (its chunk, less
 * the padding past len). */
static void my_chunk(const trainer *t, const struct dp_bucket *k, size_t *from, size_t *to)
{
    *from = (size_t)t->P->dp_rank * k->chunk;
    *to = *from + k->chunk < k->len ? *from + k->chunk : k->len;
    if (*to < *from) *to = *from;
}

/* The bucket of the tensors outside the layers (the distributed optimizer
 * with overlap: the last one), or -1. */
static int rest_bucket(const trainer *t)
{
    return t->nbk && t->bk[t->nbk - 1].last_layer == -2 ? (int)t->nbk - 1 : -1;
}

static int plan_buckets(trainer *t)
{
    gpt_model *m = t->m;
    size_t p = (size_t)t->P->dp_size, N = m->num_params, scap[3] = {0, 0, 0}, bcap = 0;
    int dist = t->cfg.dist_opt;
    t->overlap = t->cfg.overlap_grad_reduce && p > 1;
    if (!dist && !t->overlap) return 0;
    if (t->overlap) {
        size_t off0 = param_offset(m, GPT_LN1W), since = 0;
        t->layer_sl = malloc(((size_t)m->Ll + 1) * sizeof *t->layer_sl);
        if (!t->layer_sl) return fail(t, "out of memory");
        for (int l = m->Ll - 1; l >= 0; l--) {
            size_t off = off0, first = t->nsl;
            t->layer_sl[l] = first;
            for (int i = GPT_LN1W; i <= GPT_FCPROJB; off += m->param_sizes[i], i++) {
                size_t per = m->param_sizes[i] / (size_t)m->Ll;
                if (add_slice(t, scap, off + (size_t)l * per, per)) return fail(t, "out of memory");
                since += per;
            }
            t->layer_nsl = t->nsl - first;
            if (since >= t->cfg.bucket_size) {
                if (close_bucket(t, &bcap, l)) return fail(t, "out of memory");
                since = 0;
            }
        }
        if (close_bucket(t, &bcap, -1)) return fail(t, "out of memory");
        if (dist) {
            size_t hi = param_offset(m, GPT_FCPROJB + 1);
            if (add_slice(t, scap, 0, off0) || add_slice(t, scap, hi, N - hi) || close_bucket(t, &bcap, -2))
                return fail(t, "out of memory");
        }
    } else if (add_slice(t, scap, 0, N) || close_bucket(t, &bcap, -2)) {
        return fail(t, "out of memory");
    }
    /* sizes and places */
    size_t pack = 0, slots = 0;
    for (size_t b = 0; b < t->nbk; b++) {
        struct dp_bucket *k = &t->bk[b];
        k->pack_at = pack;
        k->slot_at = slots;
        for (size_t s = k->s0; s < k->s0 + k->ns; s++) {
            t->sl_pack[s] = pack + k->len;
            k->len += t->sl_len[s];
        }
        k->chunk = dist ? (k->len + p - 1) / p : k->len;
        pack += dist ? p * k->chunk : k->len;
        slots += dist ? k->chunk : 0;
    }
    void *a;
    if (m->be->alloc(&a, (pack ? pack : 1) * sizeof(float)) != 0)
        return fail(t, "gradient buckets (%zu elements): %s", pack, m->be->error());
    t->pack = a;
    if (!dist) return 0;
    /* the distributed optimizer: this rank's chunks, and their pieces */
    if (m->be->alloc(&a, (slots ? slots : 1) * sizeof(float)) != 0)
        return fail(t, "distributed optimizer buffers (%zu slots): %s", slots, m->be->error());
    t->gshard = a;
    t->slots = slots;
    gpt_opt_piece *pc = malloc((t->nsl + 1) * sizeof *pc);
    if (!pc) return fail(t, "out of memory");
    size_t np = 0;
    for (size_t b = 0; b < t->nbk; b++) {
        const struct dp_bucket *k = &t->bk[b];
        size_t from, to, pos, a0, a1;
        my_chunk(t, k, &from, &to);
        for (size_t s = k->s0; s < k->s0 + k->ns; s++) {
            if (!slice_part(t, k, s, from, to, &pos, &a0, &a1)) continue;
            gpt_opt_piece q = { t->sl_off[s] + (a0 - pos), t->sl_off[s] + (a1 - pos), k->slot_at + (a0 - from) };
            if (np && pc[np - 1].hi == q.lo && pc[np - 1].at + (pc[np - 1].hi - pc[np - 1].lo) == q.at)
                pc[np - 1].hi = q.hi;
            else
                pc[np++] = q;
        }
    }
    char err[256];
    int rc = gpt_set_optimizer_pieces(m, pc, np, slots, err, sizeof err);
    free(pc);
    if (rc) return fail(t, "%s", err);
    /* --overlap-param-gather: which bucket each layer's parameters are in */
    t->param_gather = t->cfg.overlap_param_gather && t->overlap;
    for (size_t b = 0; b < t->nbk; b++) t->bk[b].gathered = 1;
    if (t->param_gather) {
        t->layer_bk = malloc(((size_t)m->Ll + 1) * sizeof *t->layer_bk);
        if (!t->layer_bk) return fail(t, "out of memory");
        for (int l = 0; l < m->Ll; l++)
            for (size_t b = 0; b < t->nbk; b++)
                if (t->layer_sl[l] >= t->bk[b].s0 && t->layer_sl[l] < t->bk[b].s0 + t->bk[b].ns) t->layer_bk[l] = (int)b;
    }
    return 0;
}

/* Bucket b's packed positions [from, to) of the flat array src into dst
 * (backend memory; dst[0] is position from), or (unpack) the reverse. */
static void pack_positions(trainer *t, size_t b, float *flat, float *dst, size_t from, size_t to, int unpack)
{
    const struct dp_bucket *k = &t->bk[b];
    size_t pos, a0, a1;
    for (size_t s = k->s0; s < k->s0 + k->ns; s++) {
        if (!slice_part(t, k, s, from, to, &pos, &a0, &a1)) continue;
        float *f = flat + t->sl_off[s] + (a0 - pos), *d = dst + (a0 - from);
        if (unpack) t->m->be->copy(f, d, (a1 - a0) * sizeof(float));
        else t->m->be->copy(d, f, (a1 - a0) * sizeof(float));
    }
}

/* This rank's chunk of bucket b of the flat array (backend memory) into
 * its place in the bucket's area of pack, the padding zeroed; returns it
 * (the all-gather's input). */
static float *fill_my_chunk(trainer *t, size_t b, float *flat)
{
    const struct dp_bucket *k = &t->bk[b];
    float *mine = t->pack + k->pack_at + (size_t)t->P->dp_rank * k->chunk;
    size_t from, to;
    my_chunk(t, k, &from, &to);
    t->m->be->zero(mine, k->chunk * sizeof(float));
    pack_positions(t, b, flat, mine, from, to, 0);
    return mine;
}

/* The distributed optimizer's all-gather of a flat array (backend memory:
 * the working weights after the step, the masters for a checkpoint):
 * bucket by bucket, every rank's chunk of it, into every rank's array.
 * Collective over DP. */
static int dp_allgather_flat(trainer *t, float *flat, const char *what);

/* --overlap-param-gather.  After the step, every bucket's all-gather is
 * started at once, in the order the next forward needs them (the rest,
 * which holds the embeddings, then the layers' buckets from layer 0's);
 * gpt_forward's hook before the embedding, each layer and the output layer
 * waits for the bucket it needs (comm_wait_some: the ones started before
 * it too) and puts its parameters in place, so the later buckets' gathers
 * run beside the forward (on a communication thread, or on NCCL's stream).
 * An all-gather copies, so the parameters are bitwise those of the
 * all-gather after the step.  Anything else that reads the parameters
 * (evaluation, a checkpoint, the next step) first finishes them all
 * (trainer_params_sync). */
static void start_gathers(trainer *t)
{
    size_t p = (size_t)t->P->dp_size, k = 0;
    int rest = rest_bucket(t);
    for (int i = -1; i < (int)t->nbk; i++) {
        int b = i < 0 ? rest : rest >= 0 ? rest - 1 - i : (int)t->nbk - 1 - i;
        if (b < 0) continue;
        struct dp_bucket *q = &t->bk[b];
        float *area = t->pack + q->pack_at, *mine = fill_my_chunk(t, (size_t)b, t->m->params_memory);
        q->gathered = 0;
        q->ticket = ++k;
        t->gathers_left++;
        if (p > 1 && comm_allgather_start(t->P->dp, area, mine, q->chunk) < 0 && !t->overlap_err[0])
            snprintf(t->overlap_err, sizeof t->overlap_err, "%s", comm_error());
    }
}

/* Bucket b's all-gather waited for and its parameters put in place. */
static void finish_gather(trainer *t, size_t b)
{
    struct dp_bucket *q = &t->bk[b];
    if (q->gathered) return;
    if (comm_wait_some(t->P->dp, q->ticket) < 0 && !t->overlap_err[0])
        snprintf(t->overlap_err, sizeof t->overlap_err, "%s", comm_error());
    pack_positions(t, b, t->m->params_memory, t->pack + q->pack_at, 0, q->len, 1);
    q->gathered = 1;
    if (--t->gathers_left == 0 && comm_wait(t->P->dp) < 0 && !t->overlap_err[0])   /* the round ends */
        snprintf(t->overlap_err, sizeof t->overlap_err, "%s", comm_error());
}

/* The model's hook before the forward first reads the embedding's (l =
 * -1), local layer l's or the output layer's (l = Ll) parameters. */
static void params_needed(void *ctx, int l)
{
    trainer *t = ctx;
    if (!t->gathers_left) return;
    int b = l < 0 || l >= t->m->Ll ? rest_bucket(t) : t->layer_bk[l];
    if (b >= 0) finish_gather(t, (size_t)b);
}

/* Every outstanding all-gather finished, in the order started. */
int trainer_params_sync(trainer *t)
{
    for (size_t k = 1; t->gathers_left && k <= t->nbk; k++)
        for (size_t b = 0; b < t->nbk; b++)
            if (t->bk[b].ticket == k) finish_gather(t, b);
    if (t->overlap_err[0]) return fail(t, "data-parallel parameter all-gather (overlapped): %s", t->overlap_err);
    return 0;
}

static int dp_allgather_flat(trainer *t, float *flat, const char *what)
{
    if (t->P->dp_size == 1) return 0;   /* every chunk is this rank's, and in place */
    for (size_t b = 0; b < t->nbk; b++) {
        const struct dp_bucket *k = &t->bk[b];
        float *area = t->pack + k->pack_at, *mine = fill_my_chunk(t, b, flat);
        if (comm_allgather(t->P->dp, area, mine, k->chunk) < 0) return fail(t, "%s: %s", what, comm_error());
        pack_positions(t, b, flat, area, 0, k->len, 1);
    }
    return 0;
}

/* Start bucket b's reduction over dp: its all-reduce, or (distributed
 * optimizer) its reduce-scatter into this rank's chunk of gshard, the
 * padding zeroed first. */
static void start_bucket(trainer *t, size_t b)
{
    struct dp_bucket *k = &t->bk[b];
    if (k->started || t->overlap_err[0]) return;
    k->started = 1;
    int rc;
    if (t->cfg.dist_opt) {
        size_t p = (size_t)t->P->dp_size;
        t->m->be->zero(t->pack + k->pack_at + k->len, (p * k->chunk - k->len) * sizeof(float));
        rc = comm_reduce_scatter_start(t->P->dp, t->gshard + k->slot_at, t->pack + k->pack_at, k->chunk);
    } else {
        rc = comm_allreduce_start(t->P->dp, t->pack + k->pack_at, k->len, COMM_F32, COMM_SUM);
    }
    if (rc < 0) snprintf(t->overlap_err, sizeof t->overlap_err, "%s", comm_error());
}

/* Slice s of the gradients into its place in pack (fp16 main gradients
 * rounded first, as gpt_backward's end would round them). */
static void pack_slice(trainer *t, size_t s)
{
    gpt_model *m = t->m;
    if (m->cfg.grad_dtype != MDS_F32) m->be->ops.round_to(m->grads_memory + t->sl_off[s], t->sl_len[s], m->cfg.grad_dtype);
    m->be->copy(t->pack + t->sl_pack[s], m->grads_memory + t->sl_off[s], t->sl_len[s] * sizeof(float));
}

/*
 * The model's hook after layer l's backward of the last micro-batch: pack
 * the layer's gradient slices into their bucket and start the bucket when
 * it is the one this layer completes (Megatron's --ddp-bucket-size: a
 * bucket closes when it reaches the size).  Each element is summed over dp
 * in rank order wherever it sits in a bucket, so the sums are bitwise those
 * of one reduction after the backward.
 */
static void layer_grads_done(void *ctx, int l)
{
    trainer *t = ctx;
    for (size_t s = t->layer_sl[l]; s < t->layer_sl[l] + t->layer_nsl; s++) pack_slice(t, s);
    for (size_t b = 0; b < t->nbk; b++)
        if (t->bk[b].last_layer == l) start_bucket(t, b);
}

/* After the backward: the rest packed and every bucket not yet started
 * started, the wait; without the distributed optimizer the layers' sums go
 * back in place, then the tensors outside the layers (embeddings, final
 * norm, output layer), which the backward finishes last, in one all-reduce
 * each side.  (The distributed optimizer's last bucket holds those.) */
static int finish_overlapped_reduce(trainer *t)
{
    gpt_model *m = t->m;
    for (size_t b = 0; b < t->nbk; b++) {
        if (t->bk[b].last_layer >= 0) continue;
        for (size_t s = t->bk[b].s0; s < t->bk[b].s0 + t->bk[b].ns; s++)
            if (t->bk[b].last_layer == -2) pack_slice(t, s);   /* the rest: finished by now */
        start_bucket(t, b);
    }
    int rc = comm_wait(t->P->dp);
    const char *what = t->cfg.dist_opt ? "data-parallel gradient reduce-scatter (overlapped)"
                                       : "data-parallel gradient all-reduce (overlapped)";
    if (t->overlap_err[0]) return fail(t, "%s: %s", what, t->overlap_err);
    COMM(t, rc, what);
    if (t->cfg.dist_opt) return 0;
    for (size_t s = 0; s < t->nsl; s++)
        m->be->copy(m->grads_memory + t->sl_off[s], t->pack + t->sl_pack[s], t->sl_len[s] * sizeof(float));
    size_t lo = param_offset(m, GPT_LN1W), hi = param_offset(m, GPT_FCPROJB + 1);
    COMM(t, comm_allreduce(t->P->dp, m->grads_memory, lo, COMM_F32, COMM_SUM), "data-parallel gradient all-reduce");
    COMM(t, comm_allreduce(t->P->dp, m->grads_memory + hi, m->num_params - hi, COMM_F32, COMM_SUM),
         "data-parallel gradient all-reduce");
    return 0;
}

int trainer_init(trainer *t, gpt_model *m, const train_layout *P, const ds_pipeline *data,
                 const trainer_config *cfg)
{
    memset(t, 0, sizeof *t);
    t->m = m;
    t->P = P;
    t->data = data;
    t->cfg = *cfg;
    t->nmicro = trainer_micro_batches(cfg->global_batch_size, m->B, P->dp_size);
    t->tp_ops = (gpt_tp_ops){ t, tp_sum, tp_max, tp_reduce_scatter, tp_allgather };
    t->scaler = cfg->scaler;
    m->tp = &t->tp_ops;
    size_t BT = (size_t)m->B * (size_t)m->T, T = (size_t)m->T;
    t->inputs = malloc(BT * sizeof *t->inputs);
    t->targets = malloc(BT * sizeof *t->targets);
    t->mask = malloc(BT * sizeof *t->mask);
    t->tok = malloc(T * sizeof *t->tok);
    t->lab = malloc(T * sizeof *t->lab);
    t->lm = malloc(T * sizeof *t->lm);
    if (!t->inputs || !t->targets || !t->mask || !t->tok || !t->lab || !t->lm)
        return fail(t, "out of memory for the batch buffers");
    TRY(plan_buckets(t));
    if (t->param_gather) {
        m->params_needed = params_needed;
        m->params_needed_ctx = t;
    }
    return 0;
}

void trainer_release(trainer *t)
{
    if (t->gathers_left) trainer_params_sync(t);   /* nothing may still write into pack */
    free(t->inputs);
    free(t->targets);
    free(t->mask);
    free(t->tok);
    free(t->lab);
    free(t->lm);
    free(t->bk);
    free(t->sl_off);
    free(t->sl_len);
    free(t->sl_pack);
    free(t->layer_sl);
    free(t->layer_bk);
    if (t->m) {
        t->m->be->free(t->pack);
        t->m->be->free(t->gshard);
        t->m->tp = NULL;
        t->m->layer_grads_done = NULL;
        t->m->params_needed = NULL;
    }
    memset(t, 0, sizeof *t);
}

/* ---- one iteration's micro-batches: Megatron's schedules ------------------------- */

/* Samples first .. first + B - 1 of split into the host batch, checked
 * against the vocabulary. */
static int load_micro_batch(trainer *t, int split, uint64_t first)
{
    const ds_pipeline *p = t->data;
    int B = t->m->B, T = t->m->T, V = t->cfg.vocab_size;
    static const char *const names[3] = {"train", "validation", "test"};
    for (int i = 0; i < B; i++) {
        uint64_t k = first + (uint64_t)i;
        if (k >= ds_pipeline_length(p, split))
            return fail(t, "sample %" PRIu64 " is past the end of the %s split (%" PRIu64 " samples)", k, names[split],
                        ds_pipeline_length(p, split));
        if (ds_pipeline_sample(p, split, k, t->tok, t->lab, t->lm, NULL, NULL) < 0)
            return fail(t, "%s (the dataset or its cache is damaged; check it with 'mdsinspect verify')",
                        ds_pipeline_error(p));
        for (int s = 0; s < T; s++) {
            if (t->tok[s] < 0 || t->tok[s] >= V || t->lab[s] < 0 || t->lab[s] >= V)
                return fail(t, "token id %" PRId64 " in sample %" PRIu64 " is outside the vocabulary (%d ids); "
                            "train with the tokenizer the data was made with",
                            t->tok[s] < 0 || t->tok[s] >= V ? t->tok[s] : t->lab[s], k, V);
            t->inputs[(size_t)i * T + s] = (int)t->tok[s];
            t->targets[(size_t)i * T + s] = (int)t->lab[s];
            t->mask[(size_t)i * T + s] = t->lm[s];
        }
    }
    return 0;
}

/*
 * Micro-batch j of an iteration on data-parallel rank d holds the samples
 * base + j B DP + d B ... + B - 1 (Megatron's MegatronPretrainingSampler:
 * each micro-batch step takes B x DP consecutive samples, rank d the d-th
 * slice), so the ranks together consume the global batch in order.
 */
struct step {
    trainer *t;
    int split;
    uint64_t base;      /* the first sample of this global batch */
    float scale;        /* backward scale: 1 / (nmicro * DP); per-token loss: the loss scale */
};

static void use_slot(gpt_model *m, uint64_t j) { gpt_set_slot(m, (int)(j % (uint64_t)m->slots)); }

static int step_forward(struct step *st, uint64_t j)
{
    trainer *t = st->t;
    gpt_model *m = t->m;
    use_slot(m, j);
    uint64_t first = st->base + j * (uint64_t)m->B * (uint64_t)t->P->dp_size + (uint64_t)t->P->dp_rank * (uint64_t)m->B;
    /* Megatron: forward_step's forward-compute holds pretrain_gpt's
       batch-generator (the batch and, here, its dropout rows) */
    TIMER(t, start, TM_FORWARD_COMPUTE, 0);
    TIMER(t, start, TM_BATCH_GENERATOR, 0);
    TRY(load_micro_batch(t, st->split, first));
    /* dropout while training, keyed by the rows' positions in the training
       stream (the same in every parallel layout); none in evaluation */
    if (st->split == DS_SPLIT_TRAIN && st->scale > 0.0f) {
        uint64_t pos[256], *pp = m->B <= 256 ? pos : malloc((size_t)m->B * sizeof *pp);
        if (!pp) return fail(t, "out of memory");
        for (int b = 0; b < m->B; b++) pp[b] = first + (uint64_t)b;
        gpt_set_dropout_rows(m, pp);
        if (pp != pos) free(pp);
    } else {
        gpt_set_dropout_rows(m, NULL);
    }
    TIMER(t, stop, TM_BATCH_GENERATOR, 0);
    /* a training forward is followed by step_backward's gpt_backward: the
       model may form the logits' gradient with the loss (same bits) */
    if (st->split == DS_SPLIT_TRAIN && st->scale > 0.0f)
        gpt_set_loss_grad(m, st->scale, t->cfg.per_token_loss);
    double ls, nt;
    if (gpt_forward(m, t->inputs, t->targets, t->mask, &ls, &nt) != GPT_OK)
        return fail(t, "the model refused micro-batch %" PRIu64, j);
    t->ls += ls;
    t->nt += nt;
    TIMER(t, stop, TM_FORWARD_COMPUTE, 0);
    return 0;
}

static int step_backward(struct step *st, uint64_t j)
{
    trainer *t = st->t;
    gpt_model *m = t->m;
    /* the last micro-batch's backward finishes the gradients: reduce them as it goes */
    if (t->overlap && j + 1 == t->nmicro) {
        for (size_t b = 0; b < t->nbk; b++) t->bk[b].started = 0;   /* (a failure is fatal: overlap_err stays) */
        m->layer_grads_done = layer_grads_done;
        m->layer_grads_ctx = t;
    }
    use_slot(m, j);
    TIMER(t, start, TM_BACKWARD_COMPUTE, 0);
    /* per-token loss: the seed of the micro-batch's token sum, not its mean
       (gpt_backward divides by the mask sum; a power-of-two loss scale times
       a token count below 2^24 makes that division exact) */
    gpt_backward(m, t->cfg.per_token_loss ? st->scale * m->num_tokens : st->scale);
    m->layer_grads_done = NULL;
    TIMER(t, stop, TM_BACKWARD_COMPUTE, 0);
    return 0;
}

/* Point-to-point between neighbouring stages of gpt_stage_elems() floats
 * (B T C, or a sequence-parallel slice); the buffers are slot j's. */
static float *slot_input(gpt_model *m, uint64_t j) { use_slot(m, j); return gpt_stage_input(m); }
static const float *slot_output(gpt_model *m, uint64_t j) { use_slot(m, j); return gpt_stage_output(m); }
static float *slot_dgrad(gpt_model *m, uint64_t j) { use_slot(m, j); return gpt_stage_dgrad(m); }

static int p2p(const struct step *st, int timer, const void *sbuf, int to_next, void *rbuf, int from_next)
{
    trainer *t = st->t;
    const train_layout *P = t->P;
    int prev = P->pp_rank - 1, next = P->pp_rank + 1 < P->pp_size ? P->pp_rank + 1 : -1;
    size_t n = gpt_stage_elems(t->m) * sizeof(float);
    int speer = sbuf ? (to_next ? next : prev) : -1, rpeer = rbuf ? (from_next ? next : prev) : -1;
    TIMER(t, start, timer, 0);   /* (Megatron's p2p_communication names the pair) */
    COMM(t, comm_sendrecv(P->pp, sbuf, n, speer, rbuf, n, rpeer), "pipeline send/receive");
    TIMER(t, stop, timer, 0);
    return 0;
}

/* Receive micro-batch j's input from the previous stage (unless first),
 * forward it, send its output to the next stage (unless last): a warm-up
 * step of 1F1B and each step of evaluation. */
static int forward_in_chain(struct step *st, uint64_t j)
{
    const train_layout *P = st->t->P;
    if (P->pp_rank > 0) TRY(p2p(st, TM_FORWARD_RECV, NULL, 0, slot_input(st->t->m, j), 0));
    TRY(step_forward(st, j));
    if (P->pp_rank < P->pp_size - 1) TRY(p2p(st, TM_FORWARD_SEND, slot_output(st->t->m, j), 1, NULL, 0));
    return 0;
}

/*
 * Forward and backward of every micro-batch of one global batch.  PP = 1:
 * Megatron's forward_backward_no_pipelining (forward j, backward j).  PP > 1:
 * forward_backward_pipelining_without_interleaving, the 1F1B schedule:
 * PP - stage - 1 warm-up forwards, then one forward and one backward in
 * turn, then the remaining backwards; neighbours exchange activations and
 * gradients with paired send/receive calls in Megatron's order
 * (send_forward_recv_backward, send_backward_recv_forward), which cannot
 * deadlock.  Activations of up to PP - stage micro-batches are alive.
 */
static int run_schedule(struct step *st)
{
    trainer *t = st->t;
    gpt_model *m = t->m;
    const train_layout *P = t->P;
    int first = P->pp_rank == 0, last = P->pp_rank == P->pp_size - 1;
    uint64_t n = t->nmicro;
    uint64_t warmup = (uint64_t)(P->pp_size - P->pp_rank - 1);
    if (warmup > n) warmup = n;
    uint64_t steady = n - warmup;
    for (uint64_t i = 0; i < warmup; i++)
        TRY(forward_in_chain(st, i));
    if (steady && !first) TRY(p2p(st, TM_FORWARD_RECV, NULL, 0, slot_input(m, warmup), 0));
    for (uint64_t i = 0; i < steady; i++) {
        uint64_t jf = warmup + i, jb = i;
        TRY(step_forward(st, jf));
        if (!last) {   /* send_forward_recv_backward */
            const float *out = slot_output(m, jf);
            TRY(p2p(st, TM_FORWARD_SEND_BACKWARD_RECV, out, 1, slot_dgrad(m, jb), 1));
        }
        TRY(step_backward(st, jb));
        if (!first) {
            const float *dgrad = slot_dgrad(m, jb);
            if (i + 1 == steady) TRY(p2p(st, TM_BACKWARD_SEND, dgrad, 0, NULL, 0));   /* send_backward */
            else TRY(p2p(st, TM_BACKWARD_SEND_FORWARD_RECV, dgrad, 0, slot_input(m, jf + 1), 0));   /* send_backward_recv_forward */
        }
    }
    for (uint64_t i = 0; i < warmup; i++) {
        uint64_t jb = steady + i;
        if (!last) TRY(p2p(st, TM_BACKWARD_RECV, NULL, 0, slot_dgrad(m, jb), 1));
        TRY(step_backward(st, jb));
        if (!first) TRY(p2p(st, TM_BACKWARD_SEND, slot_dgrad(m, jb), 0, NULL, 0));
    }
    return 0;
}

/* Sum of losses / sum of the mask over the data-parallel ranks; meaningful
 * on the last stage (where the losses are). */
static int dp_mean_loss(trainer *t, double *loss)
{
    double v[2] = {t->ls, t->nt};
    COMM(t, comm_allreduce(t->P->dp, v, 2, COMM_F64, COMM_SUM), "data-parallel loss all-reduce");
    *loss = v[1] > 0 ? v[0] / v[1] : 0.0;
    return 0;
}

/*
 * After the backward of every micro-batch (Megatron's finalize_model_grads,
 * within its forward-backward timer): the tied embedding's gradients of the
 * first and last stage are summed (_allreduce_word_embedding_grads), and
 * the data-parallel gradients (all-reduce, or reduce-scatter into this
 * rank's shard with the distributed optimizer).
 */
static int finalize_grads(trainer *t)
{
    gpt_model *m = t->m;
    const train_layout *P = t->P;
    /* (no barrier while --overlap-grad-reduce's all-reduces are in flight:
       see trainer.h) */
    int barrier = t->overlap ? 0 : TM_BARRIER_L1;
    TIMER(t, start, TM_EMBEDDING_GRADS, barrier);
    if (P->pp_size > 1 && !m->cfg.untie_embeddings && comm_size(P->emb) > 1)
        COMM(t, comm_allreduce(P->emb, m->grads.wte, m->param_sizes[GPT_WTE], COMM_F32, COMM_SUM),
             "embedding gradient all-reduce");
    TIMER(t, stop, TM_EMBEDDING_GRADS, 0);
    TIMER(t, start, TM_ALL_GRADS_SYNC, barrier);
    if (t->overlap) {
        TRY(finish_overlapped_reduce(t));
    } else if (!t->cfg.dist_opt) {
        COMM(t, comm_allreduce(P->dp, m->grads_memory, m->num_params, COMM_F32, COMM_SUM),
             "data-parallel gradient all-reduce");
    } else if (t->nbk) {
        /* one bucket, the whole array: packed, padded, reduce-scattered */
        const struct dp_bucket *k = &t->bk[0];
        size_t p = (size_t)P->dp_size;
        m->be->copy(t->pack, m->grads_memory, m->num_params * sizeof(float));
        m->be->zero(t->pack + k->len, (p * k->chunk - k->len) * sizeof(float));
        /* one data-parallel rank: the shard is the whole buffer, copied by
           the backend (the communicator's own copy would touch device
           memory from the host) */
        if (p == 1)
            m->be->copy(t->gshard, t->pack, k->chunk * sizeof(float));
        else
            COMM(t, comm_reduce_scatter(P->dp, t->gshard, t->pack, k->chunk), "data-parallel gradient reduce-scatter");
    }
    TIMER(t, stop, TM_ALL_GRADS_SYNC, 0);
    return 0;
}

/*
 * The optimizer's side of the reduced gradients (Megatron's prepare_grads
 * and get_grad_norm, within its optimizer timer): a 16-bit buffer rounded,
 * the main gradients unscaled with a scaler's found_inf over every rank, and
 * the global norm's square summed over the ranks that hold distinct
 * gradients.
 */
static int prepare_grads(trainer *t, double *norm)
{
    gpt_model *m = t->m;
    const train_layout *P = t->P;
    double sq;
    /* the gradients this rank reduced (all, or its shard's slots) */
    float *g = m->grads_memory;
    size_t ng = m->num_params;
    if (t->cfg.dist_opt) {
        g = t->gshard;
        ng = t->slots;
    }
    /* an fp16 gradient buffer's reduction: summed in fp32 in rank order and
       rounded once (what comm.h's F16 sum gives); Megatron's copy of the
       model's gradients to the main ones */
    TIMER(t, start, TM_COPY_TO_MAIN_GRAD, TM_BARRIER_L1);
    if (m->cfg.grad_dtype != MDS_F32)
        m->be->ops.round_to(g, ng, m->cfg.grad_dtype);
    TIMER(t, stop, TM_COPY_TO_MAIN_GRAD, 0);
    /* unscale the main gradients; with a scaler, the optimizer's found_inf
       over every rank (each checked what it reduced) */
    t->found_inf = 0;
    /* Megatron's --calculate-per-token-loss: the summed gradients divided by
       the tokens of the whole global batch (finalize_model_grads) */
    double factor = 1.0 / t->scaler.scale;
    if (t->cfg.per_token_loss) {
        double tokens = t->nt;
        COMM(t, comm_allreduce(P->dp, &tokens, 1, COMM_F64, COMM_SUM), "data-parallel token count all-reduce");
        factor /= tokens > 1.0 ? tokens : 1.0;   /* Megatron clamps the count to at least 1 */
    }
    if (t->scaler.enabled) TIMER(t, start, TM_UNSCALE_CHECK_INF, TM_BARRIER_L1);
    if (t->scaler.enabled || factor != 1.0) {
        double bad = 0.0;
        m->be->ops.unscale_check(m->dsum, g, ng, (float)factor);
        m->be->copy(&bad, m->dsum, sizeof bad);
        if (t->scaler.enabled) {
            COMM(t, comm_allreduce(P->world, &bad, 1, COMM_F64, COMM_MAX), "found-inf all-reduce");
            t->found_inf = bad > 0.0;
        }
    }
    if (t->scaler.enabled) TIMER(t, stop, TM_UNSCALE_CHECK_INF, 0);
    if (t->found_inf) {
        *norm = NAN;
        return 0;
    }
    sq = t->cfg.dist_opt ? gpt_grad_sq_shard(m, g) : gpt_grad_sq_range(m, g, 0, ng);
    COMM(t, comm_allreduce(t->cfg.dist_opt ? P->world : P->mp, &sq, 1, COMM_F64, COMM_SUM), "gradient norm all-reduce");
    *norm = sqrt(sq);
    return 0;
}

/* Ops are void and a device runs them asynchronously: a failed kernel,
 * copy or library call surfaces at the backend's sync, checked once per
 * pass (free on the CPU). */
static int backend_check(trainer *t, const char *what)
{
    const mds_backend *be = t->m->be;
    if (be->sync() != 0)
        return fail(t, "%s on the %s backend: %s", what, be->name, be->error());
    return 0;
}

int trainer_backward_pass(trainer *t, uint64_t base, double *loss, double *grad_norm)
{
    gpt_model *m = t->m;
    gpt_zero_grad(m);
    t->ls = t->nt = 0;
    /* the loss scale rides on the backward's seed (Megatron scales the loss) */
    uint64_t n = t->nmicro * (uint64_t)t->P->dp_size;
    struct step st = { t, DS_SPLIT_TRAIN, base,
                       t->cfg.per_token_loss ? (float)t->scaler.scale
                       : t->scaler.scale == 1.0 ? 1.0f / (float)n : (float)(t->scaler.scale / (double)n) };
    /* the level-1 barrier over the world waits for the last step's
       overlapped all-gathers first (see trainer.h) */
    const mds_timers *tm = t->cfg.timers;
    if (tm && tm->level >= 1 && tm->barrier_l1) TRY(trainer_params_sync(t));
    TIMER(t, start, TM_FORWARD_BACKWARD, TM_BARRIER_L1);
    TRY(run_schedule(&st));
    TRY(trainer_params_sync(t));   /* the forward's hooks finished them; a failure there is reported here */
    TRY(finalize_grads(t));
    TIMER(t, stop, TM_FORWARD_BACKWARD, 0);
    /* (stopped at the end of trainer_update) */
    TIMER(t, start, TM_OPTIMIZER, TM_BARRIER_L1);
    TRY(prepare_grads(t, grad_norm));
    TRY(backend_check(t, "forward/backward"));
    *loss = 0.0;
    if (t->P->pp_rank == t->P->pp_size - 1)
        TRY(dp_mean_loss(t, loss));
    return 0;
}

int trainer_update(trainer *t, double lr, double lr_embed, double grad_norm)
{
    gpt_model *m = t->m;
    const trainer_config *c = &t->cfg;
    TRY(trainer_params_sync(t));
    train_loss_scaler_update(&t->scaler, t->found_inf);
    if (t->found_inf) {
        TIMER(t, stop, TM_OPTIMIZER, 0);
        return 0;   /* Megatron's skipped iteration: no step, the scale backs off */
    }
    float scale = global_norm_clip_scale((float)grad_norm, c->clip_grad);
    /* (the working copy is written by the same kernels: Megatron's
       optimizer-copy-main-to-model-params is part of this timer's time) */
    TIMER(t, start, TM_INNER_STEP, TM_BARRIER_L1);
    if (!c->dist_opt)
        gpt_update(m, (float)lr, (float)lr_embed, c->beta1, c->beta2, c->eps, c->weight_decay, scale);
    else
        gpt_update_shard(m, t->gshard, (float)lr, (float)lr_embed, c->beta1, c->beta2, c->eps, c->weight_decay, scale);
    TIMER(t, stop, TM_INNER_STEP, 0);
    /* all-gather the updated working weights, bucket by bucket (with
       --overlap-param-gather beside the next forward) */
    if (c->dist_opt && t->param_gather) {
        start_gathers(t);
        if (t->overlap_err[0]) return fail(t, "data-parallel parameter all-gather (overlapped): %s", t->overlap_err);
    } else if (c->dist_opt) {
        /* (Megatron times it unless --overlap-param-gather, which with one
           data-parallel rank gathers here as well) */
        if (!c->overlap_param_gather) TIMER(t, start, TM_PARAMS_ALL_GATHER, TM_BARRIER_L1);
        TRY(dp_allgather_flat(t, m->params_memory, "data-parallel parameter all-gather"));
        if (!c->overlap_param_gather) TIMER(t, stop, TM_PARAMS_ALL_GATHER, 0);
    }
    TRY(backend_check(t, "the optimizer step"));
    TIMER(t, stop, TM_OPTIMIZER, 0);
    return 0;
}

int trainer_params_norm(trainer *t, double *norm)
{
    gpt_model *m = t->m;
    const train_layout *P = t->P;
    int sharded = m->cfg.dtype == MDS_BF16 && t->cfg.dist_opt;
    double sq = 0.0;
    TRY(trainer_params_sync(t));
    if (sharded) {   /* (a shard's masters are current only in its pieces) */
        for (size_t k = 0; k < m->opt_npieces; k++) {
            const gpt_opt_piece *q = &m->opt_pieces[k];
            sq += gpt_grad_sq_range(m, m->master_memory + q->lo, q->lo, q->hi);
        }
    } else {
        sq = gpt_grad_sq_range(m, m->cfg.dtype == MDS_BF16 ? m->master_memory : m->params_memory, 0, m->num_params);
    }
    COMM(t, comm_allreduce(sharded ? P->world : P->mp, &sq, 1, COMM_F64, COMM_SUM), "parameter norm all-reduce");
    *norm = sqrt(sq);
    return backend_check(t, "the parameter norm");
}

int trainer_grad_zeros(trainer *t, double grad_norm, double *zeros)
{
    gpt_model *m = t->m;
    const train_layout *P = t->P;
    TRY(trainer_params_sync(t));   /* (its all-reduce below: see trainer.h) */
    float scale = global_norm_clip_scale((float)grad_norm, t->cfg.clip_grad);
    int64_t z = t->cfg.dist_opt ? gpt_grad_zeros_shard(m, t->gshard, scale)
                                : gpt_grad_zeros_range(m, m->grads_memory, 0, m->num_params, scale);
    if (z < 0) return fail(t, "out of memory counting the gradients' zeros");
    double v = (double)z;
    COMM(t, comm_allreduce(t->cfg.dist_opt ? P->world : P->mp, &v, 1, COMM_F64, COMM_SUM), "zero-count all-reduce");
    *zeros = v;
    return backend_check(t, "counting the gradients' zeros");
}

int trainer_evaluate(trainer *t, int split, uint64_t *cursor, uint64_t iters, double *loss)
{
    gpt_model *m = t->m;
    TRY(trainer_params_sync(t));
    t->ls = t->nt = 0;
    struct step st = { t, split, 0, 0.0f };
    /* Megatron evaluates with the full global batch, ramp-up or not */
    uint64_t nmicro = trainer_micro_batches(t->cfg.global_batch_size, m->B, t->P->dp_size);
    for (uint64_t it = 0; it < iters; it++) {
        st.base = *cursor;
        /* Megatron's evaluate runs forward_backward_func: its timers count
           in the next training log's */
        TIMER(t, start, TM_FORWARD_BACKWARD, TM_BARRIER_L1);
        for (uint64_t j = 0; j < nmicro; j++)
            TRY(forward_in_chain(&st, j));
        TIMER(t, stop, TM_FORWARD_BACKWARD, 0);
        *cursor += nmicro * (uint64_t)m->B * (uint64_t)t->P->dp_size;
    }
    TRY(backend_check(t, "evaluation"));
    return dp_mean_loss(t, loss);
}

/* ---- checkpoints ---------------------------------------------------------------- */

/* The distributed optimizer's AdamW shards gathered over DP into *full
 * (2 x the padded size, the caller frees it), *am and *av pointing into it,
 * so that a checkpoint does not depend on DP; without it all stay NULL (the
 * model holds every moment).  Collective over DP. */
static int gather_moments(trainer *t, float **full, const float **am, const float **av)
{
    gpt_model *m = t->m;
    const train_layout *P = t->P;
    *full = NULL;
    *am = *av = NULL;
    if (!t->cfg.dist_opt) return 0;
    size_t N = m->num_params, p = (size_t)P->dp_size, most = 0;
    for (size_t b = 0; b < t->nbk; b++) if (t->bk[b].chunk > most) most = t->bk[b].chunk;
    float *all = malloc((2 * N + 1) * sizeof(float)), *area = malloc((p * most + 1) * sizeof(float));
    int rc = -1;
    if (!all || !area) { fail(t, "out of memory gathering the optimizer state (%zu floats)", 2 * N); goto cleanup; }
    /* bucket by bucket: this rank's chunk of each moment (its slots; the
       padding zeros), all-gathered, unpacked into the flat arrays */
    for (int w = 0; w < 2; w++)
        for (size_t b = 0; b < t->nbk; b++) {
            const struct dp_bucket *k = &t->bk[b];
            float *mine = area + (size_t)P->dp_rank * k->chunk;
            memset(mine, 0, k->chunk * sizeof(float));
            for (size_t q = 0; q < m->opt_npieces; q++) {
                const gpt_opt_piece *pc = &m->opt_pieces[q];
                if (pc->at < k->slot_at || pc->at >= k->slot_at + k->chunk) continue;
                if (gpt_state_read(m, w ? GPT_STATE_ADAM_V : GPT_STATE_ADAM_M, pc->lo, mine + (pc->at - k->slot_at),
                                   pc->hi - pc->lo) != 0) {
                    fail(t, "cannot read the optimizer shard");
                    goto cleanup;
                }
            }
            if (comm_allgather(P->dp, area, mine, k->chunk) < 0) {
                fail(t, "optimizer state all-gather: %s", comm_error());
                goto cleanup;
            }
            for (size_t s = k->s0; s < k->s0 + k->ns; s++)
                memcpy(all + (size_t)w * N + t->sl_off[s], area + (t->sl_pack[s] - k->pack_at),
                       t->sl_len[s] * sizeof(float));
        }
    *full = all;
    *am = all;
    *av = all + N;
    all = NULL;
    rc = 0;
cleanup:
    free(all);
    free(area);
    return rc;
}

/* 16-bit working weights under the distributed optimizer: each rank updated
 * only its shard of the fp32 masters; gather them for a checkpoint.  Collective over DP. */
static int gather_masters(trainer *t)
{
    gpt_model *m = t->m;
    if (!t->cfg.dist_opt || m->master_memory == m->params_memory) return 0;
    return dp_allgather_flat(t, m->master_memory, "master weight all-gather");
}

int trainer_save(trainer *t, const char *dir, const ckpt_state *st)
{
    gpt_model *m = t->m;
    const train_layout *P = t->P;
    char err[4600];
    TRY(trainer_params_sync(t));
    float *full = NULL;
    const float *am = NULL, *av = NULL;
    if (gather_moments(t, &full, &am, &av) != 0) return -1;
    if (gather_masters(t) != 0) {
        free(full);
        return -1;
    }
    int rc = 0;
    if (P->dp_rank == 0) rc = ckpt_save_rank(dir, m, am, av, st, err, sizeof err);
    free(full);
    if (rc != 0) return fail(t, "cannot save the checkpoint: %s", err);
    COMM(t, comm_barrier(P->world), "checkpoint barrier");
    if (P->rank == 0 && ckpt_write_latest(dir, st->iteration, err, sizeof err) != 0)
        return fail(t, "cannot save the checkpoint: %s", err);
    return 0;
}

/* What a rank writes into a torch_dist checkpoint, and the memory behind it. */
struct td_out {
    tds_item *items;
    size_t n;
    float *chunks;                   /* the tensors' elements */
    char (*keys)[TD_MAX_KEY];        /* the _extra_state keys */
    char (*okeys)[TD_MAX_KEY + 32];  /* optimizer.state.exp_avg(_sq).KEY */
    pk_doc *d;
    ts_buf none, common;             /* the [None] archive, the common state's */
    td_item *ti;                     /* td_items' list (the tensor items' keys) */
};

static void td_out_release(struct td_out *o)
{
    free(o->items);
    free(o->chunks);
    free(o->keys);
    free(o->okeys);
    pk_free(o->d);
    ts_buf_release(&o->none);
    ts_buf_release(&o->common);
}

static void ns_int(pk_doc *d, pk_node *attrs, const char *k, int64_t v)
{
    pk_push(d, attrs, pk_add_str(d, k));
    pk_push(d, attrs, pk_add_int(d, v));
}

/* The common state: args with what Megatron's load_checkpoint reads
 * (consumed samples, the parallel sizes) and check_checkpoint_args compares
 * (the model's sizes), the iteration, the scheduler and the optimizer's
 * common part; no RNG state (mds has none to keep: args say no_save_rng), no
 * FLOP count (mds keeps none). */
static pk_node *common_state(trainer *t, pk_doc *d, const ckpt_state *st)
{
    const gpt_model *m = t->m;
    const train_layout *P = t->P;
    pk_node *attrs, *args = tds_namespace(d, &attrs);
    ns_int(d, attrs, "num_layers", m->L);
    ns_int(d, attrs, "hidden_size", m->C);
    ns_int(d, attrs, "ffn_hidden_size", m->F);
    ns_int(d, attrs, "num_attention_heads", m->NH);
    ns_int(d, attrs, "num_query_groups", m->G);
    ns_int(d, attrs, "max_position_embeddings", m->cfg.max_position_embeddings);
    ns_int(d, attrs, "make_vocab_size_divisible_by", m->cfg.make_vocab_size_divisible_by);
    ns_int(d, attrs, "padded_vocab_size", m->Vp);
    ns_int(d, attrs, "tensor_model_parallel_size", P->tp_size);
    ns_int(d, attrs, "pipeline_model_parallel_size", P->pp_size);
    ns_int(d, attrs, "data_parallel_size", P->dp_size);
    ns_int(d, attrs, "iteration", (int64_t)st->iteration);
    ns_int(d, attrs, "consumed_train_samples", (int64_t)st->consumed_train_samples);
    ns_int(d, attrs, "consumed_valid_samples", (int64_t)st->consumed_valid_samples);
    pk_push(d, attrs, pk_add_str(d, "add_position_embedding"));
    pk_push(d, attrs, pk_add_bool(d, m->cfg.position_embedding == GPT_POS_LEARNED));
    pk_push(d, attrs, pk_add_str(d, "ckpt_format"));
    pk_push(d, attrs, pk_add_str(d, "torch_dist"));
    /* true: no rng_state item is written (the data order and dropout masks
       are functions of the seed), and Megatron's load (checkpointing.py
       2573-2579, at d98e8a64) then asks for none */
    pk_push(d, attrs, pk_add_str(d, "no_save_rng"));
    pk_push(d, attrs, pk_add_bool(d, 1));
    /* --no-save-optim: Megatron's generate_state_dict then writes neither the
       optimizer nor the scheduler, and its load skips both (load_optim) */
    pk_push(d, attrs, pk_add_str(d, "no_save_optim"));
    pk_push(d, attrs, pk_add_bool(d, t->cfg.no_save_optim));
    if (t->cfg.no_save_optim) return tds_common_state(d, args, (int64_t)st->iteration, NULL, NULL);
    double wd = t->cfg.weight_decay_arg ? t->cfg.weight_decay_arg : t->cfg.weight_decay;
    tds_sched sc = { .max_lr = st->max_lr, .min_lr = st->min_lr, .start_wd = wd, .end_wd = wd, .lr_warmup_steps = (int64_t)st->warmup_steps,
                     .num_steps = (int64_t)st->num_steps, .lr_decay_steps = (int64_t)st->decay_steps,
                     .wd_incr_steps = (int64_t)st->decay_steps,
                     .lr_decay_style = st->decay_style < TRAIN_DECAY_COUNT ? train_decay_names[st->decay_style] : "constant",
                     .wd_incr_style = "constant" };
    pk_node *cs = tds_common_state(d, args, (int64_t)st->iteration, tds_scheduler(d, &sc), NULL);
    /* the optimizer's common part: one param group with the Adam step (what
       td_load_optimizer reads), and the sharding type of the distributed one */
    pk_node *optim = pk_add(d, PK_DICT), *groups = pk_add(d, PK_LIST), *g = pk_add(d, PK_DICT);
    pk_push(d, g, pk_add_str(d, "step"));
    pk_push(d, g, pk_add_int(d, m->step));
    pk_push(d, groups, g);
    pk_push(d, optim, pk_add_str(d, "param_groups"));
    pk_push(d, optim, groups);
    if (t->cfg.dist_opt) {
        pk_push(d, optim, pk_add_str(d, "param_state_sharding_type"));
        pk_push(d, optim, pk_add_str(d, "fully_reshardable"));
    }
    pk_push(d, cs, pk_add_str(d, "optimizer"));
    pk_push(d, cs, optim);
    return cs;
}

/* This rank's items: its chunks that no other rank writes (td_items), the
 * [None] _extra_state of each local layer's four linears (TP rank 0), the
 * common state (global rank 0); data-parallel ranks above 0 write none. */
static int td_collect(trainer *t, const ckpt_state *st, const float *am, const float *av, struct td_out *o)
{
    gpt_model *m = t->m;
    const train_layout *P = t->P;
    static const char *const linears[4] = { "self_attention.linear_proj", "self_attention.linear_qkv",
                                            "mlp.linear_fc1", "mlp.linear_fc2" };
    char err[512];
    td_item *ti = NULL;
    size_t nti = 0, total = 0;
    float *host = NULL;
    int rc = -1;
    if (P->dp_rank != 0) return 0;
    if (td_items(m, &ti, &nti, err, sizeof err) != 0) return fail(t, "cannot save the checkpoint: %s", err);
    for (size_t i = 0; i < nti; i++)
        if (!ti[i].replica) total += td_item_numel(&ti[i]);
    o->items = calloc(3 * nti + 4 * (size_t)m->Ll + 1, sizeof *o->items);
    o->keys = calloc(4 * (size_t)m->Ll + 1, sizeof *o->keys);
    o->okeys = calloc(2 * nti + 1, sizeof *o->okeys);
    o->chunks = malloc((3 * total + 1) * sizeof(float));
    host = malloc(m->num_params * sizeof(float));
    o->d = pk_doc_new();
    if (!o->items || !o->keys || !o->okeys || !o->chunks || !host || !o->d) {
        fail(t, "out of memory saving the checkpoint");
        goto cleanup;
    }
    float *at = o->chunks;
    size_t nk = 0;
    /* the weights, then Megatron's model-space optimizer keys (the plain
       optimizer's and fully_reshardable's): each moment with the weight's chunks */
    for (int w = 0; w < (t->cfg.no_save_optim ? 1 : 3); w++) {
        const float *src = w == 0 ? NULL : w == 1 ? am : av;
        if (!src) {
            int which = w == 0 ? GPT_STATE_WEIGHTS : w == 1 ? GPT_STATE_ADAM_M : GPT_STATE_ADAM_V;
            if (gpt_state_read(m, which, 0, host, m->num_params) != 0) { fail(t, "cannot read the checkpoint's state"); goto cleanup; }
            src = host;
        }
        for (size_t i = 0; i < nti; i++) {
            if (ti[i].replica) continue;
            tds_item *it = &o->items[o->n++];
            td_item_gather(m, &ti[i], src, at);
            const char *key = ti[i].key;
            if (w) {
                snprintf(o->okeys[nk], sizeof o->okeys[nk], "optimizer.state.%s.%s", w == 1 ? "exp_avg" : "exp_avg_sq", key);
                key = o->okeys[nk++];
            }
            *it = (tds_item){ .key = key, .kind = TDS_TENSOR, .dtype = TS_F32, .ndim = ti[i].ndim, .data = at,
                              .stacked = !strncmp(ti[i].key, "decoder.layers.", 15) };
            memcpy(it->shape, ti[i].shape, sizeof ti[i].shape);
            memcpy(it->offset, ti[i].off, sizeof ti[i].off);
            memcpy(it->size, ti[i].size, sizeof ti[i].size);
            at += td_item_numel(&ti[i]);
        }
    }
    if (P->tp_rank == 0) {
        if (tds_object_archive(&o->none, o->d, NULL) != 0) { fail(t, "out of memory saving the checkpoint"); goto cleanup; }
        for (int ll = 0; ll < m->Ll; ll++)
            for (int k = 0; k < 4; k++) {
                char *key = o->keys[ll * 4 + k];
                snprintf(key, TD_MAX_KEY, "decoder.layers.%s._extra_state/shard_%d_%d", linears[k], m->layer_begin + ll, m->L);
                o->items[o->n++] = (tds_item){ .key = key, .kind = TDS_OBJECT, .obj = o->none.data, .nobj = o->none.len };
            }
    }
    if (P->rank == 0) {
        if (tds_object_archive(&o->common, o->d, common_state(t, o->d, st)) != 0) {
            fail(t, "out of memory saving the checkpoint");
            goto cleanup;
        }
        o->items[o->n++] = (tds_item){ .key = "common_state/shard_0_1", .kind = TDS_OBJECT, .obj = o->common.data,
                                       .nobj = o->common.len };
    }
    rc = 0;
cleanup:
    /* the items' keys point into ti: keep it with the items */
    if (rc) free(ti);
    else o->ti = ti;
    free(host);
    return rc;
}

/* Every rank's blob to rank 0 (blobs[r] there), one broadcast of its size
 * and one of its bytes per rank. */
static int gather_blobs(trainer *t, const ts_buf *mine, ts_buf *blobs)
{
    const train_layout *P = t->P;
    for (int r = 0; r < P->size; r++) {
        uint64_t n = r == P->rank ? mine->len : 0;
        COMM(t, comm_broadcast(P->world, &n, sizeof n, r), "checkpoint record size");
        if (!n) continue;
        unsigned char *b = r == P->rank ? mine->data : malloc((size_t)n);
        if (!b) return fail(t, "out of memory gathering the checkpoint's records");
        int rc = comm_broadcast(P->world, b, (size_t)n, r);
        if (P->rank == 0 && r != 0) blobs[r] = (ts_buf){ b, (size_t)n, (size_t)n };
        else if (r != P->rank) free(b);
        if (rc < 0) return fail(t, "checkpoint records: %s", comm_error());
    }
    if (P->rank == 0) blobs[0] = *mine;
    return 0;
}

int trainer_save_torch_dist(trainer *t, const char *dir, const ckpt_state *st)
{
    const train_layout *P = t->P;
    char err[4600], iter[4200], id[37];
    struct td_out o = { 0 };
    TRY(trainer_params_sync(t));
    float *moments = NULL;
    const float *am = NULL, *av = NULL;
    ts_buf blob = { 0 }, *blobs = calloc((size_t)P->size, sizeof *blobs);
    int rc = -1;
    if (!blobs) return fail(t, "out of memory saving the checkpoint");
    if (snprintf(iter, sizeof iter, "%s/iter_%07" PRIu64, dir, st->iteration) >= (int)sizeof iter) {
        fail(t, "checkpoint directory name too long: '%s'", dir);
        goto cleanup;
    }
    if ((!t->cfg.no_save_optim && gather_moments(t, &moments, &am, &av) != 0) || gather_masters(t) != 0 ||
        td_collect(t, st, am, av, &o) != 0)
        goto cleanup;
    if (tds_write_rank(iter, P->rank, o.items, o.n, &blob, err, sizeof err) != 0) {
        fail(t, "cannot save the checkpoint: %s", err);
        goto cleanup;
    }
    if (gather_blobs(t, &blob, blobs) != 0) goto cleanup;
    if (P->rank == 0 && (tds_new_save_id(id) != 0 || tds_write_metadata(iter, iter, id, blobs, P->size, err, sizeof err) != 0)) {
        fail(t, "cannot save the checkpoint: %s", err[0] ? err : "no random save id");
        goto cleanup;
    }
    if (comm_barrier(P->world) < 0) { fail(t, "checkpoint barrier: %s", comm_error()); goto cleanup; }
    if (P->rank == 0 && ckpt_write_latest(dir, st->iteration, err, sizeof err) != 0) {
        fail(t, "cannot save the checkpoint: %s", err);
        goto cleanup;
    }
    rc = 0;
cleanup:
    for (int r = 1; P->rank == 0 && r < P->size; r++) ts_buf_release(&blobs[r]);
    free(blobs);
    ts_buf_release(&blob);
    free(o.ti);
    free(moments);
    td_out_release(&o);
    return rc;
}

int trainer_load(trainer *t, const char *dir, uint64_t iteration, ckpt_state *st, int *code)
{
    gpt_model *m = t->m;
    char err[4600];
    float *full = NULL;
    TRY(trainer_params_sync(t));
    *code = 0;
    if (t->cfg.dist_opt) {
        full = malloc(2 * m->num_params * sizeof(float));
        if (!full) return fail(t, "out of memory loading the optimizer state (%zu floats)", 2 * m->num_params);
    }
    int rc = ckpt_load_rank(dir, iteration, m, full, full ? full + m->num_params : NULL, st, err, sizeof err);
    if (rc == 0 && full &&
        (gpt_state_write_pieces(m, GPT_STATE_ADAM_M, full) != 0 ||
         gpt_state_write_pieces(m, GPT_STATE_ADAM_V, full + m->num_params) != 0)) {
        rc = CKPT_ERR_ARG;
        snprintf(err, sizeof err, "cannot write the optimizer shard");
    }
    free(full);
    if (rc != 0) {
        *code = rc;
        return fail(t, "cannot load the checkpoint: %s", err);
    }
    COMM(t, comm_barrier(t->P->world), "checkpoint barrier");
    return 0;
}

int trainer_optimizer_stats(trainer *t, double out[12])
{
    gpt_model *m = t->m;
    const train_layout *P = t->P;
    double sum[8] = {0}, mx[4] = {0};
    enum { CHUNK = 1 << 16 };
    TRY(trainer_params_sync(t));   /* (its collectives below: see trainer.h) */
    float *buf = malloc(3 * CHUNK * sizeof(float));
    if (!buf) return fail(t, "out of memory for the optimizer statistics");
    for (size_t q = 0; q < m->opt_npieces; q++) {
    size_t lo = m->opt_pieces[q].lo, n = m->opt_pieces[q].hi - lo, at = m->opt_pieces[q].at;
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t k = n - i < CHUNK ? n - i : CHUNK;
        float *v = buf, *mm = buf + CHUNK, *w = buf + 2 * CHUNK;
        m->be->copy(v, m->v + at + i, k * sizeof(float));
        m->be->copy(mm, m->m + at + i, k * sizeof(float));
        m->be->copy(w, m->master_memory + lo + i, k * sizeof(float));
        for (size_t j = 0; j < k; j++) {
            double a = v[j], r = sqrt(fabs(a)), b = mm[j], c = w[j];
            sum[0] += a * a; sum[1] += r * r; sum[2] += b * b; sum[3] += c * c;
            sum[4] += fabs(a); sum[5] += r; sum[6] += fabs(b); sum[7] += fabs(c);
            if (fabs(a) > mx[0]) mx[0] = fabs(a);
            if (r > mx[1]) mx[1] = r;
            if (fabs(b) > mx[2]) mx[2] = fabs(b);
            if (fabs(c) > mx[3]) mx[3] = fabs(c);
        }
    }
    }
    free(buf);
    mds_comm *groups[3] = { t->cfg.dist_opt ? P->dp : NULL, P->tp, P->pp };
    for (int g = 0; g < 3; g++) {
        if (!groups[g] || comm_size(groups[g]) < 2) continue;
        COMM(t, comm_allreduce(groups[g], sum, 8, COMM_F64, COMM_SUM), "optimizer statistics all-reduce");
        COMM(t, comm_allreduce(groups[g], mx, 4, COMM_F64, COMM_MAX), "optimizer statistics all-reduce");
    }
    for (int i = 0; i < 4; i++) out[i] = sqrt(sum[i]);
    for (int i = 0; i < 4; i++) out[4 + i] = sum[4 + i];
    for (int i = 0; i < 4; i++) out[8 + i] = mx[i];
    return 0;
}
