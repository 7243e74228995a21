/*
 * optime.c - the time each op of a backend takes (optime.h): a backend
 * whose ops are the inner one's between two marks, the marks resolved into
 * per-op rows when sync() returns.
 */
#include "optime.h"
#include "grow.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROWS 128

struct row {
    const char *op;   /* the op's name (a literal: compared as a pointer) */
    int c, oc;        /* the matmuls' shape, else 0 */
    uint64_t calls;
    double ms;
    double flops;     /* the products' floating-point operations (see OP), or 0 */
};

/* an op's two marks, taken and not yet resolved */
struct pending {
    void *from, *to;
    int row;
    double flops;
};

static const mds_backend *in;   /* the backend timed */
static mds_backend timed;       /* in, each op wrapped */
static int counting;
static struct row rows[MAX_ROWS];
static int nrows;
static struct pending *pend;
static size_t npend, pendcap;
static void **spare;            /* resolved marks, for reuse */
static size_t nspare, sparecap;
static char failure[256];       /* why counting stopped, or "" */

static void stop(const char *what, const char *why)
{
    if (!failure[0])
        snprintf(failure, sizeof failure, "%s: %s", what, why);
    counting = 0;
}

static void *mark(void)
{
    if (nspare)
        return spare[--nspare];
    void *m = NULL;
    if (in->mark_new(&m) != 0) {
        stop("taking a mark", in->error());
        return NULL;
    }
    return m;
}

static void give_back(void *m)
{
    if (mds_grow((void **)&spare, &sparecap, nspare + 1, sizeof *spare) != 0) {
        in->mark_free(m);
        return;
    }
    spare[nspare++] = m;
}

static int row_of(const char *op, int c, int oc)
{
    for (int i = 0; i < nrows; i++)
        if (rows[i].op == op && rows[i].c == c && rows[i].oc == oc)
            return i;
    if (nrows == MAX_ROWS)
        return -1;
    rows[nrows] = (struct row){op, c, oc, 0, 0.0, 0.0};
    return nrows++;
}

/* Before an op: its row and first mark, taken; the pending entry's index,
 * or SIZE_MAX when not counting. */
static size_t begin(const char *op, int c, int oc, double flops)
{
    if (!counting)
        return SIZE_MAX;
    int r = row_of(op, c, oc);
    if (r < 0) {
        stop(op, "more rows than the table holds");
        return SIZE_MAX;
    }
    if (mds_grow((void **)&pend, &pendcap, npend + 1, sizeof *pend) != 0) {
        stop(op, "out of host memory for its marks");
        return SIZE_MAX;
    }
    void *a = mark(), *b = a ? mark() : NULL;
    if (!b) {
        if (a)
            give_back(a);
        return SIZE_MAX;
    }
    in->mark_take(a);
    pend[npend] = (struct pending){a, b, r, flops};
    return npend++;
}

static void end(size_t k)
{
    if (k != SIZE_MAX)
        in->mark_take(pend[k].to);
}

/* One wrapper: the op's row key (kc, koc: the matmuls' C and OC) and the
 * floating-point operations of its products, for the report's TFLOP/s: a
 * linear's forward 2 B T C OC and backward twice that (dinp and dweight),
 * causal attention's forward 2 B T^2 C (QK^T and PV, each half a square)
 * and backward twice that (dQ, dK, dV and dP; its recomputed S not
 * counted, as a model's FLOPs are), every other op 0. */
#define OP(name, kc, koc, fl, params, args) \
    static void t_##name params \
    { \
        size_t k_ = begin(#name, kc, koc, fl); \
        in->ops.name args; \
        end(k_); \
    }
#define LINEAR(B, T, C, OC) (2.0 * (double)(B) * (double)(T) * (double)(C) * (double)(OC))
#define CAUSAL(B, T, C) (2.0 * (double)(B) * (double)(T) * (double)(T) * (double)(C))

OP(encoder_forward, 0, 0, 0,
   (float *out, const int *inp, const float *wte, const float *wpe, int B, int T, int C, int V, int v_start),
   (out, inp, wte, wpe, B, T, C, V, v_start))
OP(encoder_backward, 0, 0, 0,
   (float *dwte, float *dwpe, const void *dout, int dout_dt, const int *inp, int B, int T, int C, int V, int v_start),
   (dwte, dwpe, dout, dout_dt, inp, B, T, C, V, v_start))
OP(layernorm_forward, 0, 0, 0,
   (void *out, int out_dt, float *mean, float *rstd, const float *inp, const float *weight, const float *bias, int B,
    int T, int C, float eps),
   (out, out_dt, mean, rstd, inp, weight, bias, B, T, C, eps))
OP(layernorm_backward, 0, 0, 0,
   (void *dinp, int dinp_dt, float *dweight, float *dbias, const void *dout, int dout_dt, const float *inp,
    const float *weight, const float *mean, const float *rstd, int B, int T, int C),
   (dinp, dinp_dt, dweight, dbias, dout, dout_dt, inp, weight, mean, rstd, B, T, C))
OP(matmul_forward, C, OC, LINEAR(B, T, C, OC),
   (void *out, int out_dt, const void *inp, int inp_dt, const float *weight, const float *bias, int B, int T, int C,
    int OC),
   (out, out_dt, inp, inp_dt, weight, bias, B, T, C, OC))
OP(matmul_backward, C, OC, 2 * LINEAR(B, T, C, OC),
   (void *dinp, int dinp_dt, float *dweight, float *dbias, const void *dout, int dout_dt, const void *inp, int inp_dt,
    const float *weight, int B, int T, int C, int OC),
   (dinp, dinp_dt, dweight, dbias, dout, dout_dt, inp, inp_dt, weight, B, T, C, OC))
OP(attention_forward, 0, 0, CAUSAL(B, T, C),
   (void *out, int out_dt, float *lse, const void *qkv, int qkv_dt, int B, int T, int C, int NH, int NKV,
    mds_dropout drop),
   (out, out_dt, lse, qkv, qkv_dt, B, T, C, NH, NKV, drop))
OP(attention_backward, 0, 0, 2 * CAUSAL(B, T, C),
   (void *dqkv, int dqkv_dt, const void *dout, int dout_dt, const void *qkv, int qkv_dt, const void *out, int out_dt,
    const float *lse, int B, int T, int C, int NH, int NKV, mds_dropout drop),
   (dqkv, dqkv_dt, dout, dout_dt, qkv, qkv_dt, out, out_dt, lse, B, T, C, NH, NKV, drop))
OP(dropout_forward, 0, 0, 0, (float *out, const float *inp, int B, int T, int C, mds_dropout drop),
   (out, inp, B, T, C, drop))
OP(dropout_backward, 0, 0, 0, (float *dinp, const float *dout, int B, int T, int C, mds_dropout drop),
   (dinp, dout, B, T, C, drop))
OP(rope_forward, 0, 0, 0,
   (void *qkv, int qkv_dt, const float *cos_t, const float *sin_t, int B, int T, int NH, int NKV, int hs, int rot,
    int interleaved),
   (qkv, qkv_dt, cos_t, sin_t, B, T, NH, NKV, hs, rot, interleaved))
OP(rope_backward, 0, 0, 0,
   (void *dqkv, int dqkv_dt, const float *cos_t, const float *sin_t, int B, int T, int NH, int NKV, int hs, int rot,
    int interleaved),
   (dqkv, dqkv_dt, cos_t, sin_t, B, T, NH, NKV, hs, rot, interleaved))
OP(rmsnorm_forward, 0, 0, 0,
   (void *out, int out_dt, float *rstd, const float *inp, const float *weight, int B, int T, int C, float eps),
   (out, out_dt, rstd, inp, weight, B, T, C, eps))
OP(rmsnorm_backward, 0, 0, 0,
   (void *dinp, int dinp_dt, float *dweight, const void *dout, int dout_dt, const float *inp, const float *weight,
    const float *rstd, int B, int T, int C),
   (dinp, dinp_dt, dweight, dout, dout_dt, inp, weight, rstd, B, T, C))
OP(swiglu_forward, 0, 0, 0, (void *out, int out_dt, const void *inp, int inp_dt, size_t N, int F),
   (out, out_dt, inp, inp_dt, N, F))
OP(swiglu_backward, 0, 0, 0, (void *dinp, const void *inp, int inp_dt, const void *dout, int dt, size_t N, int F),
   (dinp, inp, inp_dt, dout, dt, N, F))
OP(gelu_forward, 0, 0, 0, (void *out, int out_dt, const void *inp, int inp_dt, size_t N), (out, out_dt, inp, inp_dt, N))
OP(gelu_backward, 0, 0, 0, (void *dinp, const void *inp, int inp_dt, const void *dout, int dt, size_t N),
   (dinp, inp, inp_dt, dout, dt, N))
OP(matmul_gelu_forward, C, OC, LINEAR(B, T, C, OC),
   (void *out, int out_dt, void *pre, int pre_dt, const void *inp, int inp_dt, const float *weight, const float *bias,
    int B, int T, int C, int OC),
   (out, out_dt, pre, pre_dt, inp, inp_dt, weight, bias, B, T, C, OC))
OP(matmul_gelu_backward, C, OC, 2 * LINEAR(B, T, C, OC),
   (void *dpre, void *dmid, int dt, float *dweight, float *dbias, const void *dout, int dout_dt, const void *inp,
    int inp_dt, const float *weight, const void *pre, int pre_dt, int B, int T, int C, int OC),
   (dpre, dmid, dt, dweight, dbias, dout, dout_dt, inp, inp_dt, weight, pre, pre_dt, B, T, C, OC))
OP(residual_forward, 0, 0, 0, (float *out, const float *inp1, const void *inp2, int inp2_dt, size_t N, int dt),
   (out, inp1, inp2, inp2_dt, N, dt))
OP(residual_backward, 0, 0, 0, (float *dinp1, float *dinp2, const float *dout, size_t N), (dinp1, dinp2, dout, N))
OP(crossentropy_forward, 0, 0, 0,
   (float *losses, float *maxes, float *sumexp, float *tlogits, const void *logits, int logits_dt, const int *targets,
    const float *mask, int B, int T, int V, int v_start),
   (losses, maxes, sumexp, tlogits, logits, logits_dt, targets, mask, B, T, V, v_start))
OP(crossentropy_rescale, 0, 0, 0, (float *sumexp, float *maxes, const float *gmax, int B, int T),
   (sumexp, maxes, gmax, B, T))
OP(crossentropy_loss, 0, 0, 0,
   (float *losses, const float *maxes, const float *sumexp, const float *tlogits, const float *mask, int B, int T),
   (losses, maxes, sumexp, tlogits, mask, B, T))
OP(crossentropy_backward, 0, 0, 0,
   (void *dlogits, const void *logits, int dt, const float *maxes, const float *sumexp, const int *targets,
    const float *dlosses, int B, int T, int V, int v_start),
   (dlogits, logits, dt, maxes, sumexp, targets, dlosses, B, T, V, v_start))
OP(crossentropy_fused, 0, 0, 0,
   (float *losses, float *maxes, float *sumexp, float *tlogits, void *logits, int dt, const int *targets,
    const float *mask, const float *dlosses, int B, int T, int V, int v_start),
   (losses, maxes, sumexp, tlogits, logits, dt, targets, mask, dlosses, B, T, V, v_start))
OP(loss_reduce, 0, 0, 0, (double *out, const float *losses, const float *mask, size_t N), (out, losses, mask, N))
OP(loss_grad, 0, 0, 0, (float *dlosses, const float *mask, float inv, size_t N), (dlosses, mask, inv, N))
OP(round_to, 0, 0, 0, (float *x, size_t N, int dtype), (x, N, dtype))
OP(unscale_check, 0, 0, 0, (double *nonfinite, float *x, size_t N, float factor), (nonfinite, x, N, factor))
OP(adamw_update, 0, 0, 0,
   (float *params, float *m, float *v, const float *grads, size_t N, int t, float lr, float beta1, float beta2,
    float eps, float weight_decay, float grad_scale),
   (params, m, v, grads, N, t, lr, beta1, beta2, eps, weight_decay, grad_scale))
OP(global_norm_squared, 0, 0, 0, (double *out, const float *x, size_t N), (out, x, N))
#undef OP
#undef LINEAR
#undef CAUSAL

static void t_zero(void *ptr, size_t bytes)
{
    size_t k = begin("zero", 0, 0, 0);
    in->zero(ptr, bytes);
    end(k);
}

static void t_copy(void *dst, const void *src, size_t bytes)
{
    size_t k = begin("copy", 0, 0, 0);
    in->copy(dst, src, bytes);
    end(k);
}

/* The inner sync, then every pending pair's time into its row (and a
 * second sync, where there were any, for a failed elapsed-time query). */
static int t_sync(void)
{
    int rc = in->sync();
    if (rc != 0 || npend == 0)
        return rc;
    for (size_t i = 0; i < npend; i++) {
        rows[pend[i].row].calls++;
        rows[pend[i].row].ms += in->mark_ms(pend[i].from, pend[i].to);
        rows[pend[i].row].flops += pend[i].flops;
        give_back(pend[i].from);
        give_back(pend[i].to);
    }
    npend = 0;
    return in->sync();
}

/* The op table of in, each op that in has replaced by its timed one: a
 * macro per field, so that the list is the struct's. */
static void wrap_ops(mds_ops *o, const mds_ops *i)
{
#define W(name) o->name = i->name ? t_##name : NULL
    W(encoder_forward);
    W(encoder_backward);
    W(layernorm_forward);
    W(layernorm_backward);
    W(matmul_forward);
    W(matmul_backward);
    W(attention_forward);
    W(attention_backward);
    W(dropout_forward);
    W(dropout_backward);
    W(rope_forward);
    W(rope_backward);
    W(rmsnorm_forward);
    W(rmsnorm_backward);
    W(swiglu_forward);
    W(swiglu_backward);
    W(gelu_forward);
    W(gelu_backward);
    W(matmul_gelu_forward);
    W(matmul_gelu_backward);
    W(residual_forward);
    W(residual_backward);
    W(crossentropy_forward);
    W(crossentropy_rescale);
    W(crossentropy_loss);
    W(crossentropy_backward);
    W(crossentropy_fused);
    W(loss_reduce);
    W(loss_grad);
    W(round_to);
    W(unscale_check);
    W(adamw_update);
    W(global_norm_squared);
#undef W
}

const mds_backend *mds_optime_wrap(const mds_backend *inner)
{
    if (in || !inner->mark_new || !inner->mark_take || !inner->mark_ms || !inner->mark_free)
        return NULL;
    in = inner;
    timed = *inner;
    timed.zero = t_zero;
    timed.copy = t_copy;
    timed.sync = t_sync;
    wrap_ops(&timed.ops, &inner->ops);
    return &timed;
}

void mds_optime_count(int on) { counting = on && !failure[0]; }

static int by_time(const void *a, const void *b)
{
    const struct row *x = a, *y = b;
    return x->ms < y->ms ? 1 : x->ms > y->ms ? -1 : strcmp(x->op, y->op);
}

void mds_optime_report(FILE *f, const char *title, uint64_t iterations, double wall_ms)
{
    if (failure[0]) {
        fprintf(f, " %s: op timing stopped (%s)\n", title, failure);
        return;
    }
    if (!iterations || !nrows) {
        fprintf(f, " %s: no iteration timed\n", title);
        return;
    }
    struct row sorted[MAX_ROWS];
    memcpy(sorted, rows, (size_t)nrows * sizeof *rows);
    qsort(sorted, (size_t)nrows, sizeof *sorted, by_time);
    double n = (double)iterations, total = 0.0, calls = 0.0;
    for (int i = 0; i < nrows; i++) {
        total += sorted[i].ms;
        calls += (double)sorted[i].calls;
    }
    fprintf(f, " %s, %" PRIu64 " iteration%s:\n", title, iterations, iterations == 1 ? "" : "s");
    fprintf(f, " %-44s %9s %10s %12s %8s\n", "op", "TFLOP/s", "calls/iter", "ms/iter", "share");
    for (int i = 0; i < nrows; i++) {
        const struct row *r = &sorted[i];
        char name[64], rate[32] = "";
        if (r->c || r->oc)
            snprintf(name, sizeof name, "%s %d -> %d", r->op, r->c, r->oc);
        else
            snprintf(name, sizeof name, "%s", r->op);
        if (r->flops > 0 && r->ms > 0)
            snprintf(rate, sizeof rate, "%.4g", r->flops / (r->ms * 1e9));
        fprintf(f, " %-44s %9s %10.1f %12.3f %7.1f %%\n", name, rate, (double)r->calls / n, r->ms / n,
                total > 0 ? 100.0 * r->ms / total : 0.0);
    }
    fprintf(f, " %-44s %9s %10.1f %12.3f %7.1f %% of the wall clock's %.3f ms/iter\n", "every op", "", calls / n, total / n,
            wall_ms > 0 ? 100.0 * total / n / wall_ms : 0.0, wall_ms);
}
