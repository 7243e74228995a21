/*
 * test_backend_ops.c - the generic parity harness: every op of the backend
 * op table (kernels/backend.h) on every backend this build and machine have,
 * against the CPU reference functions of kernels.h, over a table of shapes,
 * on random inputs (ggml's test-backend-ops with llm.c's tolerance formula).
 *
 * Per op and shape: inputs made on the host, uploaded with the backend's
 * copy; output buffers start from the same random values on both sides (so
 * "adds into" and "overwrites" are both checked); the CPU function computes
 * the reference, the backend's table entry the result, which is downloaded
 * and compared element by element at |got - ref| <= atol + rtol |ref|
 * (per op; the CPU backend is held to its own functions, which it must match
 * bitwise in practice).  A failure prints the op, backend, shape, tensor,
 * the first 5 mismatches and stops counting at 10.
 *
 * The harness is checked too: a backend with two deliberately wrong entries
 * (a perturbed matmul_forward, attention_backward's dq left out) must be
 * caught.  The CUDA backend (kernels/cuda/) is in mds_backend_list() when
 * the build has CUDA and the machine a GPU, and is then tested here at its
 * own tolerances (below); without one this prints a skip line naming the
 * GPU tests, and `-b cuda` fails (make test-gpu).
 *
 * Usage: test_backend_ops [-o OP] [-b BACKEND] [-l] [-s SEED] [-t TOL]
 *   -o OP   only this op      -b NAME   only this backend
 *   -l      list the ops and which backend implements each, then exit
 *   -s SEED replay a seed (the seed is printed)
 *   -t TOL  hold the float outputs to TOL + TOL |ref| instead of the
 *           backend's own tolerance (below); -t 0 asks for the CPU's bits
 *           (the fixed tolerances of round_to, unscale_check and the double
 *           reductions stay; the self-test keeps the CPU's 1e-5)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "dtype.h"
#include "kernels.h"

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float frand(float a) { return (float)((double)(rng_next() >> 11) / 9007199254740992.0 * 2.0 - 1.0) * a; }
static int irand(int n) { return (int)(rng_next() % (uint64_t)n); }

/* ---- tensors on both sides ---------------------------------------------------- */

/* ref: the host copy (an input's values, or the reference output); dev: the
 * backend's copy.  Both start equal. */
typedef struct { size_t n; float *ref; float *dev; } tf;
typedef struct { size_t n; int *ref; int *dev; } ti;
typedef struct { size_t n; double *ref; double *dev; } td;

static const mds_backend *be;   /* the backend under test */

static void *upload(const void *host, size_t bytes)
{
    void *d = NULL;
    if (be->alloc(&d, bytes ? bytes : 1) != 0) {
        fprintf(stderr, "%s: %s\n", be->name, be->error());
        exit(1);
    }
    be->copy(d, host, bytes);
    return d;
}

static tf tf_rand(size_t n, float a)
{
    tf t = { n, malloc((n ? n : 1) * sizeof(float)), NULL };
    for (size_t i = 0; i < n; i++)
        t.ref[i] = frand(a);
    t.dev = upload(t.ref, n * sizeof(float));
    return t;
}

/* Positive values in [lo, lo + a) (variances, sum-exps, masks of 0/1 use their own). */
static tf tf_pos(size_t n, float lo, float a)
{
    tf t = tf_rand(n, 1.0f);
    for (size_t i = 0; i < n; i++)
        t.ref[i] = lo + a * (0.5f + 0.5f * t.ref[i]);
    be->copy(t.dev, t.ref, n * sizeof(float));
    return t;
}

static tf tf_mask(size_t n)
{
    tf t = tf_rand(n, 1.0f);
    for (size_t i = 0; i < n; i++)
        t.ref[i] = irand(4) ? 1.0f : 0.0f;
    be->copy(t.dev, t.ref, n * sizeof(float));
    return t;
}

static ti ti_rand(size_t n, int lo, int hi)
{
    ti t = { n, malloc((n ? n : 1) * sizeof(int)), NULL };
    for (size_t i = 0; i < n; i++)
        t.ref[i] = lo + irand(hi - lo);
    t.dev = upload(t.ref, n * sizeof(int));
    return t;
}

static td td_new(size_t n)
{
    td t = { n, calloc(n ? n : 1, sizeof(double)), NULL };
    t.dev = upload(t.ref, n * sizeof(double));
    return t;
}

static void tf_free(tf *t) { free(t->ref); be->free(t->dev); }
static void ti_free(ti *t) { free(t->ref); be->free(t->dev); }
static void td_free(td *t) { free(t->ref); be->free(t->dev); }

/* ---- comparison --------------------------------------------------------------- */

static const char *cur_op, *cur_shape;
static int op_failures, quiet;

static int report(const char *name, size_t i, double got, double ref, int *shown)
{
    if (*shown < 5 && !quiet)
        fprintf(stderr, "  %s on %s [%s] %s[%zu]: got %.9g, want %.9g\n", cur_op, be->name, cur_shape, name, i, got,
                ref);
    return ++*shown >= 10;
}

static int close_enough(double got, double ref, double atol, double rtol)
{
    if (got == ref)
        return 1;   /* equal infinities too */
    if (isnan(ref) || isnan(got))
        return isnan(ref) && isnan(got);
    return fabs(got - ref) <= atol + rtol * fabs(ref);
}

/* A failure the backend noted (a launch refused, a copy failed) fails the
 * op with the backend's message, whatever the values. */
static int synced(const char *name, int *shown)
{
    if (be->sync() == 0)
        return 1;
    if (!quiet)
        fprintf(stderr, "  %s on %s [%s] %s: %s\n", cur_op, be->name, cur_shape, name, be->error());
    ++*shown;
    return 0;
}

static void check_f(const char *name, const tf *t, double atol, double rtol)
{
    float *got = malloc((t->n ? t->n : 1) * sizeof(float));
    be->copy(got, t->dev, t->n * sizeof(float));
    int shown = 0;
    if (!synced(name, &shown)) {
        op_failures += shown;
        free(got);
        return;
    }
    for (size_t i = 0; i < t->n; i++)
        if (!close_enough(got[i], t->ref[i], atol, rtol) && report(name, i, got[i], t->ref[i], &shown))
            break;
    op_failures += shown;
    free(got);
}

static void check_d(const char *name, const td *t, double atol, double rtol)
{
    double got[8];
    be->copy(got, t->dev, t->n * sizeof(double));
    int shown = 0;
    if (!synced(name, &shown)) {
        op_failures += shown;
        return;
    }
    for (size_t i = 0; i < t->n; i++)
        if (!close_enough(got[i], t->ref[i], atol, rtol) && report(name, i, got[i], t->ref[i], &shown))
            break;
    op_failures += shown;
}

/* ---- shapes --------------------------------------------------------------------- */

struct shape {
    int B, T, C, NH, OC, V, v_start;
};

/* Degenerate sizes, sizes that are not multiples of any block (T not of
 * 64, C not of 128), a 64-wide head, and GPT-2's padded vocabulary. */
static const struct shape shapes[] = {
    {1, 1, 1, 1, 1, 1, 0},
    {2, 5, 12, 3, 7, 33, 0},
    {3, 17, 40, 5, 24, 101, 50},
    {1, 65, 128, 2, 130, 257, 0},
    {2, 33, 96, 1, 100, 1001, 400},
    {1, 3, 64, 1, 64, 50304, 0},
};
/* A long sequence (12,300 positions: version 1 of attention.cu kept a row of
 * T floats in shared memory and failed past 48 KiB without its opt-in; the
 * tiled kernels' shared memory no longer grows with T, and this holds them
 * to it): attention only, and on the backends other than the CPU (the CPU
 * against its own functions there costs seconds and shows nothing). */
static const struct shape long_shape = {1, 12300, 2, 1, 3, 5, 0};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

/* Attention's own, besides those: T past several tiles of the CUDA
 * kernel and not a multiple of any (its tiles are 16, 32 or 64 positions),
 * and head sizes 64, 80 (padded to 128), 128, 256 and 75 (odd: the
 * tensor-core kernels' tiles loaded element by element, not as float4);
 * then T a multiple of 64 with heads of 64 and 128, which the tensor-core
 * kernels read from qkv and dout in place, unpacked (am_direct). */
static const struct shape att_shapes[] = {
    {1, 200, 128, 2, 0, 0, 0},
    {2, 130, 320, 4, 0, 0, 0},
    {1, 100, 256, 2, 0, 0, 0},
    {1, 70, 512, 2, 0, 0, 0},
    {1, 150, 150, 2, 0, 0, 0},
    {2, 128, 256, 4, 0, 0, 0},
    {1, 64, 256, 2, 0, 0, 0},
};

/* The column sums' own (the weight and bias gradients of the norms and
 * the linears): 4,500 rows, 71 chunks of 64, past the 32 that the CUDA
 * kernels' final pass adds in one in-order sum (common.cuh,
 * mds_cu_colsum_final); rows that are short and many; and wide rows, for
 * LayerNorm's forward too: 1,496 columns (a multiple of 8: the CUDA column
 * sums' 16-byte loads, mds_cu_colsum_partial8) and 2,100 (not one). */
static const struct shape colsum_shapes[] = {
    {3, 1500, 40, 5, 24, 0, 0},
    {1, 2049, 3, 1, 2, 0, 0},
    {2, 3, 1496, 1, 8, 0, 0},
    {1, 5, 2100, 1, 8, 0, 0},
};

/* The cross-entropy's own: a vocabulary a multiple of 8 too wide for the
 * CUDA forward to keep a 16-bit row in shared memory (65,536: 128 KiB;
 * GPT-2's 50,304 above is kept), as Llama 3's 128,256 is not. */
static const struct shape ce_shapes[] = {
    {2, 3, 8, 1, 8, 65536, 100},
};

/*
 * Tolerances of the float outputs against the CPU functions, per backend
 * (set by run_op; the fixed ones of round_to, unscale_check and the double
 * reductions are written at their checks):
 *  - cpu: 1e-5 + 1e-5 |ref|; it matches its own functions bitwise.
 *  - cuda: 1e-4 + 1e-4 |ref|.  Most CUDA kernels repeat the CPU's
 *    arithmetic (same exp, -fmad=false, the CPU's summation order) and
 *    match bitwise, or differ by double rounding in a float result; the
 *    matmuls sum in cuBLAS's order, an fp32 error of about K 2^-24 times
 *    the sum of |terms| (K <= 1001 here, terms of order 1, values of order
 *    1..10: <= 1e-5 in practice), and device logf/expf differ from glibc's
 *    by an ulp.  1e-4 leaves a margin of ten over that while a real bug (a
 *    lost term, a wrong index, a wrong mask) moves values by 1e-2 or more.
 *    Attention (attention.cu, tiled) gives the CPU's bits backward;
 *    forward, its online softmax rescales and sums in another order: out and lse within 1e-6 of the CPU's on att_shapes
 *    below (measured under the HIP-CPU emulation, make check-cuda-cpu).
 */
static double tol_atol = 1e-5, tol_rtol = 1e-5;
static double tol_forced = -1;   /* -t TOL; negative: the backend's own */
#define ATOL tol_atol
#define RTOL tol_rtol

/* ---- the ops ---------------------------------------------------------------------- */

static void t_encoder_forward(const struct shape *s)
{
    int B = s->B, T = s->T, C = s->C, V = s->V, vs = s->v_start;
    tf out = tf_rand((size_t)B * T * C, 1), wte = tf_rand((size_t)V * C, 1), wpe = tf_rand((size_t)T * C, 1);
    ti inp = ti_rand((size_t)B * T, 0, vs + V + 3);   /* some ids outside the shard */
    encoder_forward_cpu(out.ref, inp.ref, wte.ref, wpe.ref, B, T, C, V, vs);
    be->ops.encoder_forward(out.dev, inp.dev, wte.dev, wpe.dev, B, T, C, V, vs);
    check_f("out", &out, ATOL, RTOL);
    tf_free(&out); tf_free(&wte); tf_free(&wpe); ti_free(&inp);
}

static void *so_input(tf *t, int dt);
static void so_free(const tf *t, void *d);
static const char *dt_name(char *buf, size_t len, const char *base, int dt);

/* dout (the residual stream's gradient) as floats, and stored as bf16 and fp16 */
static void t_encoder_backward(const struct shape *s)
{
    int B = s->B, T = s->T, C = s->C, V = s->V, vs = s->v_start;
    for (int dd = MDS_F32; dd < MDS_NUM_DTYPES; dd++) {
        char name[3][32];
        tf dwte = tf_rand((size_t)V * C, 1), dwpe = tf_rand((size_t)T * C, 1), dout = tf_rand((size_t)B * T * C, 1);
        ti inp = ti_rand((size_t)B * T, 0, vs + V + 3);
        void *d = so_input(&dout, dd);
        encoder_backward_cpu(dwte.ref, dwpe.ref, dout.ref, inp.ref, B, T, C, V, vs);
        be->ops.encoder_backward(dwte.dev, dwpe.dev, d, dd, inp.dev, B, T, C, V, vs);
        check_f(dt_name(name[0], sizeof name[0], "dwte", dd), &dwte, ATOL, RTOL);
        check_f(dt_name(name[1], sizeof name[1], "dwpe", dd), &dwpe, ATOL, RTOL);
        /* the positions alone (the embedding LayerNorm's backward): no dwte */
        encoder_backward_cpu(NULL, dwpe.ref, dout.ref, inp.ref, B, T, C, V, vs);
        be->ops.encoder_backward(NULL, dwpe.dev, d, dd, inp.dev, B, T, C, V, vs);
        check_f(dt_name(name[2], sizeof name[2], "dwpe alone", dd), &dwpe, ATOL, RTOL);
        so_free(&dout, d);
        tf_free(&dwte); tf_free(&dwpe); tf_free(&dout); ti_free(&inp);
    }
}

/* t's values rounded to dt (host and device copies): what the model keeps */
static void tf_round(tf *t, int dt)
{
    for (size_t i = 0; i < t->n; i++)
        t->ref[i] = mds_round_to(dt, t->ref[i]);
    be->copy(t->dev, t->ref, t->n * sizeof(float));
}

/* The backend's compute dtype (set_compute_dtype, where it has one). */
static void set_compute(int dt)
{
    if (be->set_compute_dtype)
        be->set_compute_dtype(dt);
}

/* A check's name: base, and the dtype after it but for fp32. */
static const char *dt_name(char *buf, size_t len, const char *base, int dt)
{
    snprintf(buf, len, "%s%s%s", base, dt == MDS_F32 ? "" : " ", dt == MDS_F32 ? "" : mds_dtype_name(dt));
    return buf;
}

/*
 * The ops of backend.h's rounds_kept list run at fp32, and on a backend that
 * rounds their outputs (CUDA) at bf16 and fp16 too (set_compute_dtype):
 * the kept output (kept_check) must then hold only values of the type, and
 * equal the CPU's output rounded as the model's round_to rounds it, within
 * one unit of the type (2^-7 bf16, 2^-10 fp16, relative: results that
 * differ in their last fp32 bits, as a GEMM's order makes them, can round
 * to neighbours); the other outputs (statistics, weight gradients) keep
 * fp32's tolerance.  KEPT_OP(t_x) defines t_x over those dtypes from
 * t_x_at(shape, dt).
 */
/* The end of the dtype loop of those ops: past bf16 and fp16 where the
 * backend rounds what it keeps, else past fp32. */
static int kept_dtypes_end(void) { return be->rounds_kept ? MDS_NUM_DTYPES : MDS_F32 + 1; }

#define KEPT_OP(fn) \
    static void fn##_at(const struct shape *s, int dt); \
    static void fn(const struct shape *s) \
    { \
        for (int dt = MDS_F32; dt < kept_dtypes_end(); dt++) { \
            set_compute(dt); \
            fn##_at(s, dt); \
            set_compute(MDS_F32); \
        } \
    }

/* Every value of t's device copy one of dt (where the backend rounds). */
static void kept_values(const char *name, const tf *t, int dt)
{
    if (!be->rounds_kept || dt == MDS_F32)
        return;
    float *got = malloc((t->n ? t->n : 1) * sizeof(float));
    be->copy(got, t->dev, t->n * sizeof(float));
    int shown = 0;
    if (synced(name, &shown)) {
        for (size_t i = 0; i < t->n; i++)
            if (mds_round_to(dt, got[i]) != got[i] && !isnan(got[i]) &&
                report(name, i, got[i], mds_round_to(dt, got[i]), &shown))
                break;
    }
    op_failures += shown;
    free(got);
}

/* A kept output against the CPU's: at fp32, or on a backend that leaves
 * the rounding to the model (the matmuls' 16-bit products on the CPU),
 * fp32's tolerance; else kept_values, and the CPU's output rounded. */
static void kept_check(const char *base, tf *t, int dt)
{
    char name[48];
    dt_name(name, sizeof name, base, dt);
    if (dt == MDS_F32 || !be->rounds_kept) {
        check_f(name, t, ATOL, RTOL);
        return;
    }
    kept_values(name, t, dt);
    round_to_cpu(t->ref, t->n, dt);
    check_f(name, t, ATOL, dt == MDS_BF16 ? 1.0 / 128 : 1.0 / 1024);
}

/*
 * Stored dtypes (backend.h): a tensor the op writes or reads as 16-bit
 * values.  so_new: an output of n values of dt on the backend (random
 * 16-bit values first, to be overwritten); so_input: t's values rounded
 * to dt (host copy too: the reference reads what is stored), uploaded as
 * dt; so_check: the stored output against the CPU's float output t->ref
 * rounded to dt, exactly on a backend without rounds_kept (the CPU: its
 * op is the fp32 function, then one rounding), else within one unit of
 * the type as kept_check (or tol, where the products themselves are
 * rounded: the tensor-core attention).  At MDS_F32 they are t's own
 * buffers and check_f / kept_check.
 */
static void *so_new(const tf *t, int dt)
{
    if (dt == MDS_F32)
        return t->dev;
    uint16_t *h = malloc((t->n ? t->n : 1) * sizeof *h);
    for (size_t i = 0; i < t->n; i++)
        h[i] = (uint16_t)rng_next();
    void *d = upload(h, t->n * sizeof *h);
    free(h);
    return d;
}

static void *so_input(tf *t, int dt)
{
    if (dt == MDS_F32)
        return t->dev;
    tf_round(t, dt);
    uint16_t *h = malloc((t->n ? t->n : 1) * sizeof *h);
    for (size_t i = 0; i < t->n; i++)
        mds_store(dt, h, i, t->ref[i]);
    void *d = upload(h, t->n * sizeof *h);
    free(h);
    return d;
}

static void so_free(const tf *t, void *d)
{
    if (d != t->dev)
        be->free(d);
}

static void so_check(const char *base, tf *t, const void *d, int dt, double tol)
{
    char name[48];
    if (dt == MDS_F32 || d == t->dev) {
        kept_check(base, t, dt);
        return;
    }
    snprintf(name, sizeof name, "%s stored %s", base, mds_dtype_name(dt));
    uint16_t *h = malloc((t->n ? t->n : 1) * sizeof *h);
    float *got = malloc((t->n ? t->n : 1) * sizeof *got);
    be->copy(h, d, t->n * sizeof *h);
    for (size_t i = 0; i < t->n; i++)
        got[i] = mds_load(dt, h, i);
    round_to_cpu(t->ref, t->n, dt);
    be->copy(t->dev, got, t->n * sizeof *got);   /* (t's float copy is free to hold it) */
    double rt = !be->rounds_kept ? 0.0 : tol > 0 ? tol : dt == MDS_BF16 ? 1.0 / 128 : 1.0 / 1024;
    check_f(name, t, !be->rounds_kept ? 0.0 : tol > 0 ? tol : ATOL, rt);
    free(h);
    free(got);
}

/*
 * The ops with a stored output run as KEPT_OP's (out_dt fp32, at the
 * dtypes the backend keeps), then on every backend with out_dt bf16 and
 * fp16 at that compute dtype: STORED_OP(t_x) defines t_x over both from
 * t_x_at(shape, dt, od).
 */
#define STORED_OP(fn) \
    static void fn##_at(const struct shape *s, int dt, int od); \
    static void fn(const struct shape *s) \
    { \
        for (int dt = MDS_F32; dt < MDS_NUM_DTYPES; dt++) \
            for (int od = MDS_F32; od <= dt; od += dt == MDS_F32 ? 1 : dt - MDS_F32) { \
                if (od == MDS_F32 && dt >= kept_dtypes_end()) \
                    continue; \
                set_compute(dt); \
                fn##_at(s, dt, od); \
                set_compute(MDS_F32); \
            } \
    }

STORED_OP(t_layernorm_forward)
static void t_layernorm_forward_at(const struct shape *s, int dt, int od)
{
    size_t BT = (size_t)s->B * s->T, C = (size_t)s->C;
    tf out = tf_rand(BT * C, 1), mean = tf_rand(BT, 1), rstd = tf_rand(BT, 1), inp = tf_rand(BT * C, 2);
    tf w = tf_rand(C, 1), b = tf_rand(C, 1);
    void *o = so_new(&out, od);
    layernorm_forward_cpu(out.ref, mean.ref, rstd.ref, inp.ref, w.ref, b.ref, s->B, s->T, s->C, 1e-5f);
    be->ops.layernorm_forward(o, od, mean.dev, rstd.dev, inp.dev, w.dev, b.dev, s->B, s->T, s->C, 1e-5f);
    so_check("out", &out, o, dt, 0);
    check_f("mean", &mean, ATOL, RTOL);
    check_f("rstd", &rstd, ATOL, RTOL);
    so_free(&out, o);
    tf_free(&out); tf_free(&mean); tf_free(&rstd); tf_free(&inp); tf_free(&w); tf_free(&b);
}

/* The norms' backward with od 16-bit: dout stored (k 1), dinp stored (the
 * residual stream's gradient, added into: its values rounded to od first;
 * k 2), both (k 3); fp32 both (k 0) where od is fp32. */
static const char *norm_bwd_name(char *buf, size_t len, const char *base, int k)
{
    snprintf(buf, len, "%s%s%s", base, k & 1 ? " (dout stored)" : "", k & 2 ? " (dinp stored)" : "");
    return buf;
}

/* The norms' dinp (case k): fp32 as the model keeps it, or stored as ds */
static void norm_dinp_check(tf *dinp, void *di, int ds, int dt, int k)
{
    char name[64];
    norm_bwd_name(name, sizeof name, "dinp", k);
    if (ds == MDS_F32)
        kept_check(name, dinp, dt);
    else
        so_check(name, dinp, di, ds, 0);
}

STORED_OP(t_layernorm_backward)
static void t_layernorm_backward_at(const struct shape *s, int dt, int od)
{
    size_t BT = (size_t)s->B * s->T, C = (size_t)s->C;
    for (int k = od == MDS_F32 ? 0 : 1; k < (od == MDS_F32 ? 1 : 4); k++) {
        int dd = k & 1 ? od : MDS_F32, ds = k & 2 ? od : MDS_F32;
        char name[2][64];
        tf dinp = tf_rand(BT * C, 1), dw = tf_rand(C, 1), db = tf_rand(C, 1), dout = tf_rand(BT * C, 1);
        tf inp = tf_rand(BT * C, 2), w = tf_rand(C, 1), mean = tf_rand(BT, 0.5f), rstd = tf_pos(BT, 0.5f, 2.0f);
        void *d = so_input(&dout, dd), *di = so_input(&dinp, ds);
        layernorm_backward_cpu(dinp.ref, dw.ref, db.ref, dout.ref, inp.ref, w.ref, mean.ref, rstd.ref, s->B, s->T,
                               s->C);
        be->ops.layernorm_backward(di, ds, dw.dev, db.dev, d, dd, inp.dev, w.dev, mean.dev, rstd.dev, s->B, s->T,
                                   s->C);
        norm_dinp_check(&dinp, di, ds, dt, k);
        check_f(norm_bwd_name(name[0], sizeof name[0], "dweight", k), &dw, ATOL, RTOL);
        check_f(norm_bwd_name(name[1], sizeof name[1], "dbias", k), &db, ATOL, RTOL);
        so_free(&dout, d);
        so_free(&dinp, di);
        tf_free(&dinp); tf_free(&dw); tf_free(&db); tf_free(&dout); tf_free(&inp); tf_free(&w); tf_free(&mean);
        tf_free(&rstd);
    }
}

/* The matmuls in fp32, then with bf16 and fp16 operands (set_compute_dtype:
 * inputs rounded to the type, as the model's are; the CPU's fp32 products
 * of such values are exact, so the tolerance is fp32's; the forward's out
 * is also kept, rounded, where the backend rounds it: kept_check), the
 * input stored as a float array and as the type itself (stored dtypes). */
static void t_matmul_forward(const struct shape *s)
{
    size_t BT = (size_t)s->B * s->T, C = (size_t)s->C, OC = (size_t)s->OC;
    for (int dt = MDS_F32; dt < MDS_NUM_DTYPES; dt++)
        for (int k = 0; k < (dt == MDS_F32 ? 2 : 8); k++) {
            int bias = k & 1, id = k & 2 ? dt : MDS_F32, od = k & 4 ? dt : MDS_F32;
            tf out = tf_rand(BT * OC, 1), inp = tf_rand(BT * C, 1), w = tf_rand(OC * C, 1), b = tf_rand(OC, 1);
            tf_round(&inp, dt); tf_round(&w, dt); tf_round(&b, dt);   /* (the bias too: backend.h) */
            void *x = so_input(&inp, id), *o = so_new(&out, od);
            char name[48];
            snprintf(name, sizeof name, "out%s%s", bias ? " (bias)" : "", id != MDS_F32 ? " (inp stored)" : "");
            set_compute(dt);
            matmul_forward_cpu(out.ref, inp.ref, w.ref, bias ? b.ref : NULL, s->B, s->T, s->C, s->OC);
            be->ops.matmul_forward(o, od, x, id, w.dev, bias ? b.dev : NULL, s->B, s->T, s->C, s->OC);
            if (od == MDS_F32)
                kept_check(name, &out, dt);
            else   /* the CPU's exactly (one rounding), a GEMM's within a unit */
                so_check(name, &out, o, od, 0);
            set_compute(MDS_F32);
            so_free(&inp, x);
            so_free(&out, o);
            tf_free(&out); tf_free(&inp); tf_free(&w); tf_free(&b);
        }
}

static void t_matmul_backward(const struct shape *s)
{
    size_t BT = (size_t)s->B * s->T, C = (size_t)s->C, OC = (size_t)s->OC;
    for (int dt = MDS_F32; dt < MDS_NUM_DTYPES; dt++)
        for (int k = 0; k < (dt == MDS_F32 ? 2 : 16); k++) {
            int bias = k & 1, id = k & 2 ? dt : MDS_F32, dd = k & 4 ? dt : MDS_F32, ds = k & 8 ? dt : MDS_F32;
            tf dinp = tf_rand(BT * C, 1), dw = tf_rand(OC * C, 1), db = tf_rand(OC, 1), dout = tf_rand(BT * OC, 1);
            tf inp = tf_rand(BT * C, 1), w = tf_rand(OC * C, 1);
            tf_round(&dout, dt); tf_round(&inp, dt); tf_round(&w, dt);
            void *x = so_input(&inp, id), *d = so_input(&dout, dd), *di = so_new(&dinp, ds);
            memset(dinp.ref, 0, dinp.n * sizeof(float));   /* written over what di holds (backend.h) */
            char base[48], name[64];
            snprintf(base, sizeof base, "%%s%s%s%s", id != MDS_F32 ? " (inp stored)" : "",
                     dd != MDS_F32 ? " (dout stored)" : "", ds != MDS_F32 ? " (dinp stored)" : "");
            set_compute(dt);
            matmul_backward_cpu(dinp.ref, dw.ref, bias ? db.ref : NULL, dout.ref, inp.ref, w.ref, s->B, s->T, s->C,
                                s->OC);
            be->ops.matmul_backward(di, ds, dw.dev, bias ? db.dev : NULL, d, dd, x, id, w.dev, s->B, s->T,
                                    s->C, s->OC);
            char t[3][56];
            snprintf(t[0], sizeof t[0], base, "dinp");
            snprintf(t[1], sizeof t[1], base, "dweight");
            snprintf(t[2], sizeof t[2], base, "dbias");
            if (ds == MDS_F32)
                check_f(dt_name(name, sizeof name, t[0], dt), &dinp, ATOL, RTOL);
            else   /* rounded once: the CPU exactly, a GEMM within a unit */
                so_check(t[0], &dinp, di, ds, 0);
            check_f(dt_name(name, sizeof name, t[1], dt), &dw, ATOL, RTOL);
            check_f(dt_name(name, sizeof name, t[2], dt), &db, ATOL, RTOL);
            set_compute(MDS_F32);
            so_free(&dout, d);
            so_free(&inp, x);
            so_free(&dinp, di);
            tf_free(&dinp); tf_free(&dw); tf_free(&db); tf_free(&dout); tf_free(&inp); tf_free(&w);
        }
}

static size_t flat(const struct shape *s) { return (size_t)s->B * s->T * s->C; }

/* Attention needs C divisible by NH. */
static int attention_shape(const struct shape *s) { return s->C % s->NH == 0; }

/* A dropout of probability p for rows of batch B (keys on both sides):
 * *host for the CPU reference, *dev for the backend (p = 0: none). */
struct drops { mds_dropout host, dev; uint64_t *keys; void *dkeys; };

static struct drops make_drops(float p, int B, int head0)
{
    struct drops d;
    memset(&d, 0, sizeof d);
    d.keys = malloc((size_t)(B ? B : 1) * sizeof *d.keys);
    for (int b = 0; b < B; b++)
        d.keys[b] = mds_dropout_row(99, (uint64_t)(1000 + 7 * b));
    d.dkeys = upload(d.keys, (size_t)B * sizeof *d.keys);
    if (p > 0) {
        d.host = (mds_dropout){ p, mds_dropout_site(3, 5), d.keys, head0, 0 };
        d.dev = (mds_dropout){ p, mds_dropout_site(3, 5), d.dkeys, head0, 0 };
    }
    return d;
}

static void free_drops(struct drops *d) { free(d->keys); be->free(d->dkeys); }

/* The key/value head counts tried after nkv for NH query heads: NH / 2
 * (groups of two) when that is a grouping other than NH and 1, then 1;
 * 0 ends. */
static int next_nkv(int NH, int nkv)
{
    if (nkv == NH && NH % 2 == 0 && NH / 2 > 1)
        return NH / 2;
    return nkv > 1 ? 1 : 0;
}

/* Multi-head, and grouped-query (groups of two, and one key/value head)
 * when NH > 1; each without and with attention dropout (a rank's heads from
 * global head 3). */
static void t_attention_16(const struct shape *s, int backward);

/* Attention with the fp32 kernels: fp32, and where the backend rounds what
 * it keeps (rounds_kept) bf16 and fp16 with dropout too (the fp32 kernels
 * then the wrapper's rounding; without dropout a 16-bit dtype takes the
 * tensor-core kernels, t_attention_16): out and dqkv kept_check'd. */
static void t_attention_forward(const struct shape *s)
{
    if (!attention_shape(s)) return;
    for (int dt = MDS_F32; dt < kept_dtypes_end(); dt++)
    for (int dv = dt != MDS_F32; dv < 2; dv++)
    for (int od = MDS_F32; od <= dt; od += dt == MDS_F32 ? 1 : dt - MDS_F32)   /* out and qkv fp32, and stored as dt */
    for (int nkv = s->NH; nkv >= 1; nkv = next_nkv(s->NH, nkv)) {
        struct drops dd = make_drops(dv ? 0.3f : 0.0f, s->B, 3);
        mds_dropout drop = dd.host, ddrop = dd.dev;
        int hs = s->C / s->NH;
        size_t BT = (size_t)s->B * s->T, C = (size_t)s->C, row = C + 2 * (size_t)nkv * hs;
        tf out = tf_rand(BT * C, 1), lse = tf_rand((size_t)s->B * s->NH * s->T, 1), qkv = tf_rand(BT * row, 1);
        void *o = so_new(&out, od), *q = so_input(&qkv, od);
        set_compute(dt);
        attention_forward_cpu(out.ref, lse.ref, qkv.ref, s->B, s->T, s->C, s->NH, nkv, drop);
        be->ops.attention_forward(o, od, lse.dev, q, od, s->B, s->T, s->C, s->NH, nkv, ddrop);
        so_check(dv ? "out (dropout)" : nkv == s->NH ? "out" : "out (gqa)", &out, o, dt, 0);
        check_f(dv ? "lse (dropout)" : nkv == s->NH ? "lse" : "lse (gqa)", &lse, ATOL, RTOL);
        set_compute(MDS_F32);
        so_free(&out, o);
        so_free(&qkv, q);
        tf_free(&out); tf_free(&lse); tf_free(&qkv);
        free_drops(&dd);
    }
    t_attention_16(s, 0);
}

static void t_attention_backward(const struct shape *s)
{
    if (!attention_shape(s)) return;
    for (int dt = MDS_F32; dt < kept_dtypes_end(); dt++)
    for (int dv = dt != MDS_F32; dv < 2; dv++)
    for (int od = MDS_F32; od <= dt; od += dt == MDS_F32 ? 1 : dt - MDS_F32)   /* out, dout, qkv: fp32, and dt */
    for (int nkv = s->NH; nkv >= 1; nkv = next_nkv(s->NH, nkv)) {
        struct drops dd = make_drops(dv ? 0.3f : 0.0f, s->B, 3);
        mds_dropout drop = dd.host, ddrop = dd.dev;
        int hs = s->C / s->NH;
        size_t BT = (size_t)s->B * s->T, C = (size_t)s->C, row = C + 2 * (size_t)nkv * hs;
        size_t nl = (size_t)s->B * s->NH * s->T;
        tf qkv = tf_rand(BT * row, 1), out = tf_rand(BT * C, 1), lse = tf_rand(nl, 1);
        void *q = so_input(&qkv, od);
        set_compute(dt);
        /* a consistent forward (out, lse) for the backward to start from */
        attention_forward_cpu(out.ref, lse.ref, qkv.ref, s->B, s->T, s->C, s->NH, nkv, drop);
        be->copy(out.dev, out.ref, BT * C * sizeof(float));
        be->copy(lse.dev, lse.ref, nl * sizeof(float));
        void *o = so_input(&out, od);
        tf dqkv = tf_rand(BT * row, 1), dout = tf_rand(BT * C, 1);
        void *d = so_input(&dout, od), *dq = so_new(&dqkv, od);
        memset(dqkv.ref, 0, dqkv.n * sizeof(float));   /* written over what dq holds (backend.h) */
        attention_backward_cpu(dqkv.ref, dout.ref, qkv.ref, out.ref, lse.ref, s->B, s->T, s->C, s->NH, nkv, drop);
        be->ops.attention_backward(dq, od, d, od, q, od, o, od, lse.dev, s->B, s->T, s->C, s->NH, nkv, ddrop);
        so_check(od != MDS_F32 ? dv ? "dqkv (all stored; dropout)" : "dqkv (all stored)"
                 : dv ? "dqkv (dropout)" : nkv == s->NH ? "dqkv" : "dqkv (gqa)", &dqkv, dq, dt, 0);
        set_compute(MDS_F32);
        so_free(&dqkv, dq);
        so_free(&qkv, q);
        so_free(&dout, d);
        so_free(&out, o);
        tf_free(&qkv); tf_free(&out); tf_free(&lse); tf_free(&dqkv); tf_free(&dout);
        free_drops(&dd);
    }
    t_attention_16(s, 1);
}

/* An output of the tensor-core attention (t_attention_16): stored as sd
 * (so_check at tol), else floats within tol of the CPU's, each a value of
 * dt (kept_values). */
static void am_check(const char *name, tf *t, const void *d, int sd, int dt, double tol)
{
    if (sd != MDS_F32) {
        so_check(name, t, d, sd, tol);
        return;
    }
    check_f(name, t, tol, tol);
    kept_values(name, t, dt);
}

/*
 * Attention with 16-bit products (set_compute_dtype bf16 / fp16, no
 * dropout: the CUDA backend's tensor-core kernels; the CPU computes in
 * fp32 whatever it is told): q, k, v and dO rounded to the type as the
 * model keeps them.  Scores and dP are then exact products summed in
 * fp32, but the probabilities P and score gradients dS are rounded to the
 * type before their products (as flash attention does), each by at most
 * one unit u (2^-9 bf16, 2^-12 fp16; P <= 1 and the values here <= 1), so
 * out, dq, dk and dv move by a few u: held at 8 u absolute and relative.
 * lse comes from the fp32 scores: fp32's tolerance.  A wrong mask or index
 * moves values by 1/T or more, above 8 u for the fp16 runs at these T.
 * Where the backend rounds what it keeps (rounds_kept), out and dqkv hold
 * values of the type only.
 */
static void t_attention_16(const struct shape *s, int backward)
{
    if (!attention_shape(s) || s->C / s->NH > 128 || s->T > 4096) return;
    for (int dt = MDS_BF16; dt <= MDS_F16; dt++)
    for (int od = MDS_F32; od <= dt; od += dt - MDS_F32)   /* out fp32, and stored as dt */
    for (int dd = MDS_F32; dd <= (backward ? dt : MDS_F32); dd += dt - MDS_F32)   /* dout and qkv the same */
    for (int nkv = s->NH; nkv >= 1; nkv = next_nkv(s->NH, nkv)) {
        double u = dt == MDS_BF16 ? 1.0 / 512 : 1.0 / 4096;
        struct drops drops = make_drops(0.0f, s->B, 3);
        int hs = s->C / s->NH;
        size_t BT = (size_t)s->B * s->T, C = (size_t)s->C, row = C + 2 * (size_t)nkv * hs;
        size_t nl = (size_t)s->B * s->NH * s->T;
        char name[48];
        tf qkv = tf_rand(BT * row, 1), out = tf_rand(BT * C, 1), lse = tf_rand(nl, 1);
        tf_round(&qkv, dt);
        set_compute(dt);
        attention_forward_cpu(out.ref, lse.ref, qkv.ref, s->B, s->T, s->C, s->NH, nkv, drops.host);
        if (!backward) {
            void *o = so_new(&out, od), *q = so_input(&qkv, od);
            be->ops.attention_forward(o, od, lse.dev, q, od, s->B, s->T, s->C, s->NH, nkv, drops.dev);
            snprintf(name, sizeof name, "out %s%s", mds_dtype_name(dt), nkv == s->NH ? "" : " (gqa)");
            am_check(name, &out, o, od, dt, 8 * u);
            so_free(&out, o);
            so_free(&qkv, q);
            snprintf(name, sizeof name, "lse %s%s", mds_dtype_name(dt), nkv == s->NH ? "" : " (gqa)");
            check_f(name, &lse, ATOL, RTOL);
        } else {
            be->copy(out.dev, out.ref, BT * C * sizeof(float));
            be->copy(lse.dev, lse.ref, nl * sizeof(float));
            void *o = so_input(&out, od);
            tf dqkv = tf_rand(BT * row, 1), dout = tf_rand(BT * C, 1);
            tf_round(&dout, dt);
            void *d = so_input(&dout, dd), *q = so_input(&qkv, dd), *dq = so_new(&dqkv, dd);   /* (with dout) */
            memset(dqkv.ref, 0, dqkv.n * sizeof(float));   /* written over what dq holds (backend.h) */
            attention_backward_cpu(dqkv.ref, dout.ref, qkv.ref, out.ref, lse.ref, s->B, s->T, s->C, s->NH, nkv,
                                   drops.host);
            be->ops.attention_backward(dq, dd, d, dd, q, dd, o, od, lse.dev, s->B, s->T, s->C, s->NH, nkv,
                                       drops.dev);
            snprintf(name, sizeof name, "dqkv %s%s%s%s", mds_dtype_name(dt), nkv == s->NH ? "" : " (gqa)",
                     od == MDS_F32 ? "" : " (out stored)", dd == MDS_F32 ? "" : " (d, qkv stored)");
            am_check(name, &dqkv, dq, dd, dt, 8 * u);
            so_free(&dqkv, dq);
            so_free(&qkv, q);
            so_free(&dout, d);
            so_free(&out, o);
            tf_free(&dqkv); tf_free(&dout);
        }
        set_compute(MDS_F32);
        tf_free(&qkv); tf_free(&out); tf_free(&lse);
        free_drops(&drops);
    }
}

static void t_dropout(const struct shape *s, int backward)
{
    struct drops dd = make_drops(0.25f, s->B, 0);
    dd.host.t0 = dd.dev.t0 = 3;   /* a sequence-parallel slice's first global token */
    tf x = tf_rand(flat(s), 1), y = tf_rand(flat(s), 1);
    if (backward) {
        dropout_backward_cpu(y.ref, x.ref, s->B, s->T, s->C, dd.host);
        be->ops.dropout_backward(y.dev, x.dev, s->B, s->T, s->C, dd.dev);
    } else {
        dropout_forward_cpu(y.ref, x.ref, s->B, s->T, s->C, dd.host);
        be->ops.dropout_forward(y.dev, x.dev, s->B, s->T, s->C, dd.dev);
    }
    check_f(backward ? "dinp" : "out", &y, ATOL, RTOL);
    tf_free(&x); tf_free(&y);
    free_drops(&dd);
}
static void t_dropout_forward(const struct shape *s) { t_dropout(s, 0); }
static void t_dropout_backward(const struct shape *s) { t_dropout(s, 1); }

/* RoPE on the q heads and one kv head, every rotary width and layout. */
static void t_rope(const struct shape *s, int backward)
{
    if (!attention_shape(s) || (s->C / s->NH) % 2) return;
    int hs = s->C / s->NH;
    size_t row = ((size_t)s->NH + 2) * hs, n = (size_t)s->B * s->T * row;
    for (int inter = 0; inter < 2; inter++)
        for (int rot = hs; rot >= 2; rot = rot / 2 % 2 ? 0 : rot / 2) {
            size_t nt = (size_t)s->T * (size_t)(rot / 2);
            float *cs = malloc((nt ? nt : 1) * sizeof *cs), *sn = malloc((nt ? nt : 1) * sizeof *sn);
            rope_tables(cs, sn, s->T, rot, 10000.0, 0.0);
            float *dcs = upload(cs, nt * sizeof *cs), *dsn = upload(sn, nt * sizeof *sn);
            for (int qd = MDS_F32; qd < MDS_NUM_DTYPES; qd++) {   /* qkv (dqkv) stored as qd */
                tf x = tf_rand(n, 2);
                void *d = so_input(&x, qd);
                if (backward) {
                    rope_backward_cpu(x.ref, cs, sn, s->B, s->T, s->NH, 1, hs, rot, inter);
                    be->ops.rope_backward(d, qd, dcs, dsn, s->B, s->T, s->NH, 1, hs, rot, inter);
                } else {
                    rope_forward_cpu(x.ref, cs, sn, s->B, s->T, s->NH, 1, hs, rot, inter);
                    be->ops.rope_forward(d, qd, dcs, dsn, s->B, s->T, s->NH, 1, hs, rot, inter);
                }
                if (qd == MDS_F32)
                    check_f(backward ? "dqkv" : "qkv", &x, ATOL, RTOL);
                else   /* turned and rounded once: the CPU exactly */
                    so_check(backward ? "dqkv" : "qkv", &x, d, qd, 0);
                so_free(&x, d);
                tf_free(&x);
            }
            be->free(dcs);
            be->free(dsn);
            free(cs);
            free(sn);
        }
}
static void t_rope_forward(const struct shape *s) { t_rope(s, 0); }
static void t_rope_backward(const struct shape *s) { t_rope(s, 1); }

STORED_OP(t_rmsnorm_forward)
static void t_rmsnorm_forward_at(const struct shape *s, int dt, int od)
{
    size_t BT = (size_t)s->B * s->T, C = (size_t)s->C;
    tf out = tf_rand(BT * C, 1), rstd = tf_rand(BT, 1), inp = tf_rand(BT * C, 2), w = tf_rand(C, 1);
    void *o = so_new(&out, od);
    rmsnorm_forward_cpu(out.ref, rstd.ref, inp.ref, w.ref, s->B, s->T, s->C, 1e-5f);
    be->ops.rmsnorm_forward(o, od, rstd.dev, inp.dev, w.dev, s->B, s->T, s->C, 1e-5f);
    so_check("out", &out, o, dt, 0);
    check_f("rstd", &rstd, ATOL, RTOL);
    so_free(&out, o);
    tf_free(&out); tf_free(&rstd); tf_free(&inp); tf_free(&w);
}

/* (dout and dinp stored as t_layernorm_backward's) */
STORED_OP(t_rmsnorm_backward)
static void t_rmsnorm_backward_at(const struct shape *s, int dt, int od)
{
    size_t BT = (size_t)s->B * s->T, C = (size_t)s->C;
    for (int k = od == MDS_F32 ? 0 : 1; k < (od == MDS_F32 ? 1 : 4); k++) {   /* (as the LayerNorm's) */
        int dd = k & 1 ? od : MDS_F32, ds = k & 2 ? od : MDS_F32;
        char name[64];
        tf dinp = tf_rand(BT * C, 1), dw = tf_rand(C, 1), dout = tf_rand(BT * C, 1), inp = tf_rand(BT * C, 2);
        tf w = tf_rand(C, 1), rstd = tf_pos(BT, 0.5f, 2.0f);
        void *d = so_input(&dout, dd), *di = so_input(&dinp, ds);
        rmsnorm_backward_cpu(dinp.ref, dw.ref, dout.ref, inp.ref, w.ref, rstd.ref, s->B, s->T, s->C);
        be->ops.rmsnorm_backward(di, ds, dw.dev, d, dd, inp.dev, w.dev, rstd.dev, s->B, s->T, s->C);
        norm_dinp_check(&dinp, di, ds, dt, k);
        check_f(norm_bwd_name(name, sizeof name, "dweight", k), &dw, ATOL, RTOL);
        so_free(&dout, d);
        so_free(&dinp, di);
        tf_free(&dinp); tf_free(&dw); tf_free(&dout); tf_free(&inp); tf_free(&w); tf_free(&rstd);
    }
}

STORED_OP(t_swiglu_forward)
static void t_swiglu_forward_at(const struct shape *s, int dt, int od)
{
    size_t N = (size_t)s->B * s->T;
    tf out = tf_rand(N * s->OC, 1), inp = tf_rand(N * 2 * s->OC, 5);
    void *o = so_new(&out, od), *x = so_input(&inp, od);
    swiglu_forward_cpu(out.ref, inp.ref, N, s->OC);
    be->ops.swiglu_forward(o, od, x, od, N, s->OC);
    so_check("out", &out, o, dt, 0);
    so_free(&out, o);
    so_free(&inp, x);
    tf_free(&out); tf_free(&inp);
}

/* (dinp, written, dout and inp stored as od) */
STORED_OP(t_swiglu_backward)
static void t_swiglu_backward_at(const struct shape *s, int dt, int od)
{
    size_t N = (size_t)s->B * s->T;
    tf dinp = tf_rand(N * 2 * s->OC, 1), inp = tf_rand(N * 2 * s->OC, 5), dout = tf_rand(N * s->OC, 1);
    void *di = so_new(&dinp, od), *d = so_input(&dout, od), *x = so_input(&inp, od);
    memset(dinp.ref, 0, dinp.n * sizeof(float));   /* written over what di holds (backend.h) */
    swiglu_backward_cpu(dinp.ref, inp.ref, dout.ref, N, s->OC);
    be->ops.swiglu_backward(di, x, od, d, od, N, s->OC);
    so_check("dinp", &dinp, di, dt, 0);
    so_free(&dinp, di);
    so_free(&inp, x);
    so_free(&dout, d);
    tf_free(&dinp); tf_free(&inp); tf_free(&dout);
}

/* Elementwise sizes: the shape's, plus B (mostly not a multiple of 8: the
 * CUDA kernels that take 8 elements a load leave a tail). */
static size_t flat_odd(const struct shape *s) { return flat(s) + (size_t)s->B; }

STORED_OP(t_gelu_forward)
static void t_gelu_forward_at(const struct shape *s, int dt, int od)
{
    size_t n = flat_odd(s);
    tf out = tf_rand(n, 1), inp = tf_rand(n, 4);
    void *o = so_new(&out, od), *x = so_input(&inp, od);
    gelu_forward_cpu(out.ref, inp.ref, n);
    be->ops.gelu_forward(o, od, x, od, n);
    so_check("out", &out, o, dt, 0);
    so_free(&out, o);
    so_free(&inp, x);
    tf_free(&out); tf_free(&inp);
}

STORED_OP(t_gelu_backward)
static void t_gelu_backward_at(const struct shape *s, int dt, int od)
{
    size_t n = flat_odd(s);
    tf dinp = tf_rand(n, 1), inp = tf_rand(n, 4), dout = tf_rand(n, 1);
    void *di = so_new(&dinp, od), *d = so_input(&dout, od), *x = so_input(&inp, od);
    memset(dinp.ref, 0, dinp.n * sizeof(float));   /* written over what di holds (backend.h) */
    gelu_backward_cpu(dinp.ref, inp.ref, dout.ref, n);
    be->ops.gelu_backward(di, x, od, d, od, n);
    so_check("dinp", &dinp, di, dt, 0);
    so_free(&dinp, di);
    so_free(&inp, x);
    so_free(&dout, d);
    tf_free(&dinp); tf_free(&inp); tf_free(&dout);
}

/*
 * The MLP's linear and GELU as one op (backend.h: matmul_gelu_forward and
 * matmul_gelu_backward) against the CPU's two functions.  In fp32 the
 * CPU's tolerance.  With 16-bit products (bf16, fp16; the model's pre and
 * out, dpre and dmid stored as the type, or fp32 kept as it) a GPU may
 * apply GELU in the GEMM's epilogue (cuBLASLt's tanh form, its own way):
 * GELU then reads the fp32 sum where the CPU reads it rounded (half a unit
 * u of pre, times |GELU'| <= 1.13), the backward rounds once where the
 * CPU rounds dmid too, and tanh differs by fp32 ulps: a few u (2^-8 bf16,
 * 2^-11 fp16) relative, plus as much absolute for values near GELU's
 * zero; held at 4 u absolute and relative.  A lost product term (about
 * 0.25 here) or a GELU not applied (out = pre) is far outside that.
 */
static void gelu_check(const char *name, tf *t, const void *d, int sd, int dt)
{
    double tol = dt == MDS_F32 ? 0.0 : dt == MDS_BF16 ? 1.0 / 64 : 1.0 / 512;
    if (dt == MDS_F32) {
        check_f(name, t, ATOL, RTOL);
        return;
    }
    if (be->rounds_kept || sd != MDS_F32)
        round_to_cpu(t->ref, t->n, dt);
    am_check(name, t, d, sd, dt, tol);
}

static void t_matmul_gelu_forward(const struct shape *s)
{
    size_t BT = (size_t)s->B * s->T, C = (size_t)s->C, OC = (size_t)s->OC;
    for (int dt = MDS_F32; dt < MDS_NUM_DTYPES; dt++)
        for (int k = 0; k < (dt == MDS_F32 ? 2 : 8); k++) {
            /* od: out and pre stored as dt (the model's), or fp32 kept */
            int bias = k & 1, id = k & 2 ? dt : MDS_F32, od = k & 4 ? dt : MDS_F32;
            if (od == MDS_F32 && dt >= kept_dtypes_end())
                continue;
            tf out = tf_rand(BT * OC, 1), pre = tf_rand(BT * OC, 1), inp = tf_rand(BT * C, 1);
            tf w = tf_rand(OC * C, 1), b = tf_rand(OC, 1);
            tf_round(&inp, dt); tf_round(&w, dt); tf_round(&b, dt);
            void *x = so_input(&inp, id), *o = so_new(&out, od), *pr = so_new(&pre, od);
            char name[2][48];
            snprintf(name[0], sizeof name[0], "pre%s%s", bias ? " (bias)" : "", id != MDS_F32 ? " (inp stored)" : "");
            snprintf(name[1], sizeof name[1], "out%s%s", bias ? " (bias)" : "", id != MDS_F32 ? " (inp stored)" : "");
            set_compute(dt);
            matmul_forward_cpu(pre.ref, inp.ref, w.ref, bias ? b.ref : NULL, s->B, s->T, s->C, s->OC);
            if (dt != MDS_F32)   /* GELU of pre as the CPU keeps it */
                round_to_cpu(pre.ref, pre.n, dt);
            gelu_forward_cpu(out.ref, pre.ref, out.n);
            be->ops.matmul_gelu_forward(o, od, pr, od, x, id, w.dev, bias ? b.dev : NULL, s->B, s->T, s->C, s->OC);
            gelu_check(name[0], &pre, pr, od, dt);
            gelu_check(name[1], &out, o, od, dt);
            set_compute(MDS_F32);
            so_free(&inp, x);
            so_free(&out, o);
            so_free(&pre, pr);
            tf_free(&out); tf_free(&pre); tf_free(&inp); tf_free(&w); tf_free(&b);
        }
}

/* (C: the GELU's width, the linear's input) */
static void t_matmul_gelu_backward(const struct shape *s)
{
    size_t BT = (size_t)s->B * s->T, C = (size_t)s->C, OC = (size_t)s->OC;
    for (int dt = MDS_F32; dt < MDS_NUM_DTYPES; dt++)
        for (int k = 0; k < (dt == MDS_F32 ? 2 : 8); k++) {
            /* ds: dpre, dmid and pre stored as dt (the model's), or fp32 kept */
            int bias = k & 1, id = k & 2 ? dt : MDS_F32, ds = k & 4 ? dt : MDS_F32;
            if (ds == MDS_F32 && dt >= kept_dtypes_end())
                continue;
            tf dpre = tf_rand(BT * C, 1), dmid = tf_rand(BT * C, 1), dw = tf_rand(OC * C, 1), db = tf_rand(OC, 1);
            tf dout = tf_rand(BT * OC, 1), inp = tf_rand(BT * C, 1), w = tf_rand(OC * C, 1), pre = tf_rand(BT * C, 3);
            tf_round(&dout, dt); tf_round(&inp, dt); tf_round(&w, dt); tf_round(&pre, dt);
            void *x = so_input(&inp, id), *pr = so_input(&pre, ds), *dp = so_new(&dpre, ds), *dm = so_new(&dmid, ds);
            char base[40], name[3][56];
            snprintf(base, sizeof base, "%%s%s", id != MDS_F32 ? " (inp stored)" : "");
            snprintf(name[0], sizeof name[0], base, "dpre");
            snprintf(name[1], sizeof name[1], base, "dweight");
            snprintf(name[2], sizeof name[2], base, "dbias");
            set_compute(dt);
            memset(dmid.ref, 0, dmid.n * sizeof(float));
            memset(dpre.ref, 0, dpre.n * sizeof(float));
            matmul_backward_cpu(dmid.ref, dw.ref, bias ? db.ref : NULL, dout.ref, inp.ref, w.ref, s->B, s->T, s->C,
                                s->OC);
            if (dt != MDS_F32)
                round_to_cpu(dmid.ref, dmid.n, dt);
            gelu_backward_cpu(dpre.ref, pre.ref, dmid.ref, dpre.n);
            be->ops.matmul_gelu_backward(dp, dm, ds, dw.dev, bias ? db.dev : NULL, dout.dev, MDS_F32, x, id, w.dev,
                                         pr, ds, s->B, s->T, s->C, s->OC);
            gelu_check(name[0], &dpre, dp, ds, dt);
            char wname[64];
            check_f(dt_name(wname, sizeof wname, name[1], dt), &dw, ATOL, RTOL);
            check_f(name[2], &db, ATOL, RTOL);
            set_compute(MDS_F32);
            so_free(&inp, x);
            so_free(&pre, pr);
            so_free(&dpre, dp);
            so_free(&dmid, dm);
            tf_free(&dpre); tf_free(&dmid); tf_free(&dw); tf_free(&db); tf_free(&dout); tf_free(&inp); tf_free(&w);
            tf_free(&pre);
        }
}

/* the sum kept as each dtype, inp2 fp32 and stored as it: the CPU's
 * bits, then round_to's */
static void t_residual_forward(const struct shape *s)
{
    for (int dt = MDS_F32; dt < MDS_NUM_DTYPES; dt++)
        for (int bd = MDS_F32; bd <= dt; bd += dt == MDS_F32 ? 1 : dt - MDS_F32) {
            tf out = tf_rand(flat_odd(s), 1), a = tf_rand(flat_odd(s), 1), b = tf_rand(flat_odd(s), 1);
            void *y = so_input(&b, bd);
            char name[48];
            residual_forward_cpu(out.ref, a.ref, b.ref, flat_odd(s));
            if (dt != MDS_F32)
                round_to_cpu(out.ref, flat_odd(s), dt);
            be->ops.residual_forward(out.dev, a.dev, y, bd, flat_odd(s), dt);
            check_f(dt_name(name, sizeof name, bd != MDS_F32 ? "out (inp2 stored)" : "out", dt), &out, 0.0, 0.0);
            so_free(&b, y);
            tf_free(&out); tf_free(&a); tf_free(&b);
        }
}

static void t_residual_backward(const struct shape *s)
{
    tf d1 = tf_rand(flat(s), 1), d2 = tf_rand(flat(s), 1), dout = tf_rand(flat(s), 1);
    residual_backward_cpu(d1.ref, d2.ref, dout.ref, flat(s));
    be->ops.residual_backward(d1.dev, d2.dev, dout.dev, flat(s));
    check_f("dinp1", &d1, ATOL, RTOL);
    check_f("dinp2", &d2, ATOL, RTOL);
    tf_free(&d1); tf_free(&d2); tf_free(&dout);
}

/* the logits as floats, and stored as bf16 and fp16 (their values) */
static void t_crossentropy_forward(const struct shape *s)
{
    size_t BT = (size_t)s->B * s->T, V = (size_t)s->V;
    for (int ld = MDS_F32; ld < MDS_NUM_DTYPES; ld++)
    for (int with_mask = 0; with_mask < 2; with_mask++) {
        char name[4][32];
        tf losses = tf_rand(BT, 1), maxes = tf_rand(BT, 1), sumexp = tf_rand(BT, 1), tl = tf_rand(BT, 1);
        tf logits = tf_rand(BT * V, 5), mask = tf_mask(BT);
        ti targets = ti_rand(BT, -1, s->v_start + s->V + 2);
        void *lg = so_input(&logits, ld);
        set_compute(ld);
        crossentropy_forward_cpu(losses.ref, maxes.ref, sumexp.ref, tl.ref, logits.ref, targets.ref,
                                 with_mask ? mask.ref : NULL, s->B, s->T, s->V, s->v_start);
        be->ops.crossentropy_forward(losses.dev, maxes.dev, sumexp.dev, tl.dev, lg, ld, targets.dev,
                                     with_mask ? mask.dev : NULL, s->B, s->T, s->V, s->v_start);
        check_f(dt_name(name[0], sizeof name[0], "losses", ld), &losses, ATOL, RTOL);
        check_f(dt_name(name[1], sizeof name[1], "maxes", ld), &maxes, ATOL, RTOL);
        check_f(dt_name(name[2], sizeof name[2], "sumexp", ld), &sumexp, ATOL, RTOL);
        check_f(dt_name(name[3], sizeof name[3], "tlogits", ld), &tl, ATOL, RTOL);
        set_compute(MDS_F32);
        so_free(&logits, lg);
        tf_free(&losses); tf_free(&maxes); tf_free(&sumexp); tf_free(&tl); tf_free(&logits); tf_free(&mask);
        ti_free(&targets);
    }
}

static void t_crossentropy_rescale(const struct shape *s)
{
    size_t BT = (size_t)s->B * s->T;
    tf sumexp = tf_pos(BT, 1, 10), maxes = tf_rand(BT, 3), gmax = tf_pos(BT, 3, 1);
    crossentropy_rescale_cpu(sumexp.ref, maxes.ref, gmax.ref, s->B, s->T);
    be->ops.crossentropy_rescale(sumexp.dev, maxes.dev, gmax.dev, s->B, s->T);
    check_f("sumexp", &sumexp, ATOL, RTOL);
    check_f("maxes", &maxes, ATOL, RTOL);
    tf_free(&sumexp); tf_free(&maxes); tf_free(&gmax);
}

static void t_crossentropy_loss(const struct shape *s)
{
    size_t BT = (size_t)s->B * s->T;
    tf losses = tf_rand(BT, 1), maxes = tf_rand(BT, 3), sumexp = tf_pos(BT, 1, 50), tl = tf_rand(BT, 3);
    tf mask = tf_mask(BT);
    crossentropy_loss_cpu(losses.ref, maxes.ref, sumexp.ref, tl.ref, mask.ref, s->B, s->T);
    be->ops.crossentropy_loss(losses.dev, maxes.dev, sumexp.dev, tl.dev, mask.dev, s->B, s->T);
    check_f("losses", &losses, ATOL, RTOL);
    tf_free(&losses); tf_free(&maxes); tf_free(&sumexp); tf_free(&tl); tf_free(&mask);
}

STORED_OP(t_crossentropy_backward)
static void t_crossentropy_backward_at(const struct shape *s, int dt, int od)
{
    size_t BT = (size_t)s->B * s->T, V = (size_t)s->V;
    tf logits = tf_rand(BT * V, 5), losses = tf_rand(BT, 1), maxes = tf_rand(BT, 1), sumexp = tf_rand(BT, 1);
    tf tl = tf_rand(BT, 1);
    ti targets = ti_rand(BT, -1, s->v_start + s->V + 2);
    void *lg = so_input(&logits, od);   /* logits and dlogits stored as od */
    crossentropy_forward_cpu(losses.ref, maxes.ref, sumexp.ref, tl.ref, logits.ref, targets.ref, NULL, s->B, s->T,
                             s->V, s->v_start);
    be->copy(maxes.dev, maxes.ref, BT * sizeof(float));
    be->copy(sumexp.dev, sumexp.ref, BT * sizeof(float));
    tf dlosses = tf_rand(BT, 0.01f), dlogits = tf_rand(BT * V, 1);
    void *dl = so_new(&dlogits, od);
    crossentropy_backward_cpu(dlogits.ref, logits.ref, maxes.ref, sumexp.ref, targets.ref, dlosses.ref, s->B, s->T,
                              s->V, s->v_start);
    be->ops.crossentropy_backward(dl, lg, od, maxes.dev, sumexp.dev, targets.dev, dlosses.dev, s->B, s->T, s->V,
                                  s->v_start);
    so_check("dlogits", &dlogits, dl, dt, 0);
    /* in place, as the model runs it */
    crossentropy_backward_cpu(logits.ref, logits.ref, maxes.ref, sumexp.ref, targets.ref, dlosses.ref, s->B, s->T,
                              s->V, s->v_start);
    be->ops.crossentropy_backward(lg, lg, od, maxes.dev, sumexp.dev, targets.dev, dlosses.dev, s->B, s->T, s->V,
                                  s->v_start);
    so_check("dlogits (in place)", &logits, lg, dt, 0);
    so_free(&dlogits, dl);
    so_free(&logits, lg);
    tf_free(&logits); tf_free(&losses); tf_free(&maxes); tf_free(&sumexp); tf_free(&tl); tf_free(&dlosses);
    tf_free(&dlogits); ti_free(&targets);
}

/* Device buffers a and b hold the same bytes (an op against the ops it
 * promises the bits of). */
static void same_bytes(const char *name, const void *a, const void *b, size_t bytes)
{
    unsigned char *x = malloc(bytes ? bytes : 1), *y = malloc(bytes ? bytes : 1);
    be->copy(x, a, bytes);
    be->copy(y, b, bytes);
    int shown = 0;
    if (synced(name, &shown) && memcmp(x, y, bytes) != 0) {
        size_t i = 0;
        while (x[i] == y[i])
            i++;
        if (!quiet)
            fprintf(stderr, "  %s on %s [%s] %s: byte %zu differs (%u, %u apart)\n", cur_op, be->name, cur_shape, name,
                    i, x[i], y[i]);
        shown = 1;
    }
    op_failures += shown;
    free(x);
    free(y);
}

/* crossentropy_fused: the bits of crossentropy_forward followed by
 * crossentropy_backward in place, on the same backend, at every compute
 * dtype (the logits stored as it), with masked tokens, rows whose dloss is
 * 0 and targets outside the shard. */
static void t_crossentropy_fused(const struct shape *s)
{
    size_t BT = (size_t)s->B * s->T, V = (size_t)s->V;
    for (int dt = MDS_F32; dt < MDS_NUM_DTYPES; dt++) {
        tf logits = tf_rand(BT * V, 5), mask = tf_mask(BT), dlosses = tf_rand(BT, 0.01f);
        for (size_t i = 0; i < BT; i++)
            if (irand(5) == 0)
                dlosses.ref[i] = 0.0f;
        be->copy(dlosses.dev, dlosses.ref, BT * sizeof(float));
        ti targets = ti_rand(BT, s->v_start - 2, s->v_start + s->V + 2);
        tf st[2][4];
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 4; j++)
                st[k][j] = tf_rand(BT, 1);
        void *l1 = so_input(&logits, dt), *l2 = NULL;
        size_t bytes = BT * V * mds_dtype_size(dt);
        if (be->alloc(&l2, bytes ? bytes : 1) != 0) {
            fprintf(stderr, "%s: %s\n", be->name, be->error());
            exit(1);
        }
        be->copy(l2, l1, bytes);   /* (device to device) */
        set_compute(dt);
        be->ops.crossentropy_forward(st[0][0].dev, st[0][1].dev, st[0][2].dev, st[0][3].dev, l1, dt, targets.dev,
                                     mask.dev, s->B, s->T, s->V, s->v_start);
        be->ops.crossentropy_backward(l1, l1, dt, st[0][1].dev, st[0][2].dev, targets.dev, dlosses.dev, s->B, s->T,
                                      s->V, s->v_start);
        be->ops.crossentropy_fused(st[1][0].dev, st[1][1].dev, st[1][2].dev, st[1][3].dev, l2, dt, targets.dev,
                                   mask.dev, dlosses.dev, s->B, s->T, s->V, s->v_start);
        set_compute(MDS_F32);
        const char *what[4] = {"losses", "maxes", "sumexp", "tlogits"};
        char name[48];
        for (int j = 0; j < 4; j++)
            same_bytes(dt_name(name, sizeof name, what[j], dt), st[1][j].dev, st[0][j].dev, BT * sizeof(float));
        same_bytes(dt_name(name, sizeof name, "dlogits", dt), l2, l1, bytes);
        be->free(l2);
        so_free(&logits, l1);
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 4; j++)
                tf_free(&st[k][j]);
        tf_free(&logits); tf_free(&mask); tf_free(&dlosses); ti_free(&targets);
    }
}

static void t_loss_reduce(const struct shape *s)
{
    size_t BT = (size_t)s->B * s->T;
    tf losses = tf_pos(BT, 0, 10), mask = tf_mask(BT);
    for (int v = 0; v < 3; v++) {   /* both, no losses, no mask */
        td out = td_new(2);
        const float *lr = v == 1 ? NULL : losses.ref, *ld = v == 1 ? NULL : losses.dev;
        const float *mr = v == 2 ? NULL : mask.ref, *md = v == 2 ? NULL : mask.dev;
        loss_reduce_cpu(out.ref, lr, mr, BT);
        be->ops.loss_reduce(out.dev, ld, md, BT);
        check_d("out", &out, 1e-12, 1e-12);
        td_free(&out);
    }
    tf_free(&losses); tf_free(&mask);
}

static void t_loss_grad(const struct shape *s)
{
    size_t BT = (size_t)s->B * s->T;
    tf dl = tf_rand(BT, 1), mask = tf_mask(BT);
    loss_grad_cpu(dl.ref, mask.ref, 0.0625f / 3, BT);
    be->ops.loss_grad(dl.dev, mask.dev, 0.0625f / 3, BT);
    check_f("dlosses", &dl, ATOL, RTOL);
    tf_free(&dl); tf_free(&mask);
}

static void t_round_to(const struct shape *s)
{
    for (int dt = MDS_F32; dt <= MDS_F16; dt++) {
        tf x = tf_rand(flat(s), 1e5f);   /* fp16 overflows beyond 65504 */
        round_to_cpu(x.ref, flat(s), dt);
        be->ops.round_to(x.dev, flat(s), dt);
        check_f(dt == MDS_F32 ? "x (fp32)" : dt == MDS_BF16 ? "x (bf16)" : "x (fp16)", &x, 0, 0);
        tf_free(&x);
        /* from one element past an aligned start to one before the end:
           the CUDA kernel's single elements before a 16-byte boundary and
           after the last whole four, and nothing outside */
        size_t n = flat(s) + 9;
        x = tf_rand(n, 1e5f);
        round_to_cpu(x.ref + 1, n - 2, dt);
        be->ops.round_to(x.dev + 1, n - 2, dt);
        check_f(dt == MDS_F32 ? "x+1 (fp32)" : dt == MDS_BF16 ? "x+1 (bf16)" : "x+1 (fp16)", &x, 0, 0);
        tf_free(&x);
    }
}

static void t_unscale_check(const struct shape *s)
{
    tf x = tf_rand(flat(s), 1e3f);
    x.ref[flat(s) / 2] = INFINITY;
    be->copy(x.dev, x.ref, flat(s) * sizeof(float));
    td out = td_new(1);
    unscale_check_cpu(out.ref, x.ref, flat(s), 1.0f / 1024);
    be->ops.unscale_check(out.dev, x.dev, flat(s), 1.0f / 1024);
    check_f("x", &x, 0, 0);
    check_d("nonfinite", &out, 0, 0);
    tf_free(&x); td_free(&out);
}

static void t_adamw_update(const struct shape *s)
{
    size_t n = flat(s) + 3;
    tf p = tf_rand(n, 1), m = tf_rand(n, 0.01f), v = tf_pos(n, 0, 1e-4f), g = tf_rand(n, 0.1f);
    adamw_update_cpu(p.ref, m.ref, v.ref, g.ref, n, 7, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f);
    be->ops.adamw_update(p.dev, m.dev, v.dev, g.dev, n, 7, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f);
    check_f("params", &p, ATOL, RTOL);
    check_f("m", &m, ATOL, RTOL);
    check_f("v", &v, ATOL, RTOL);
    tf_free(&p); tf_free(&m); tf_free(&v); tf_free(&g);
}

static void t_global_norm_squared(const struct shape *s)
{
    size_t n = flat(s) * 7 + 1;
    tf x = tf_rand(n, 1);
    td out = td_new(1);
    global_norm_squared_cpu(out.ref, x.ref, n);
    be->ops.global_norm_squared(out.dev, x.dev, n);
    check_d("out", &out, 1e-9, 1e-9);
    tf_free(&x); td_free(&out);
}

/* The op table's entries, in its order, with the harness of each (and
 * the op's own shapes, run after the common ones). */
#define ENTRY(op) { #op, offsetof(mds_ops, op), t_##op, NULL, 0 }
#define ENTRY_MORE(op, more) { #op, offsetof(mds_ops, op), t_##op, more, sizeof more / sizeof more[0] }
static const struct op {
    const char *name;
    size_t offset;          /* of the entry in mds_ops, to check coverage */
    void (*run)(const struct shape *s);
    const struct shape *more;
    size_t nmore;
} ops[] = {
    ENTRY(encoder_forward), ENTRY(encoder_backward), ENTRY_MORE(layernorm_forward, colsum_shapes),
    ENTRY_MORE(layernorm_backward, colsum_shapes), ENTRY(matmul_forward), ENTRY_MORE(matmul_backward, colsum_shapes),
    ENTRY_MORE(attention_forward, att_shapes),
    ENTRY_MORE(attention_backward, att_shapes),
    ENTRY(dropout_forward), ENTRY(dropout_backward), ENTRY(rope_forward), ENTRY(rope_backward), ENTRY(rmsnorm_forward),
    ENTRY_MORE(rmsnorm_backward, colsum_shapes),
    ENTRY(swiglu_forward), ENTRY(swiglu_backward), ENTRY(gelu_forward), ENTRY(gelu_backward),
    ENTRY(matmul_gelu_forward), ENTRY_MORE(matmul_gelu_backward, colsum_shapes), ENTRY(residual_forward), ENTRY(residual_backward),
    ENTRY_MORE(crossentropy_forward, ce_shapes), ENTRY(crossentropy_rescale), ENTRY(crossentropy_loss),
    ENTRY_MORE(crossentropy_backward, ce_shapes), ENTRY_MORE(crossentropy_fused, ce_shapes), ENTRY(loss_reduce), ENTRY(loss_grad), ENTRY(round_to), ENTRY(unscale_check), ENTRY(adamw_update),
    ENTRY(global_norm_squared),
};
#define NOPS (sizeof ops / sizeof ops[0])

static int has_op(const mds_backend *b, const struct op *o)
{
    void *p;
    memcpy(&p, (const char *)&b->ops + o->offset, sizeof p);
    return p != NULL;
}

/* Runs op o on backend b over every shape; returns the mismatches. */
static int run_op(const mds_backend *b, const struct op *o)
{
    be = b;
    tol_atol = tol_rtol = strcmp(b->name, "cuda") == 0 ? 1e-4 : 1e-5;
    if (tol_forced >= 0 && !quiet)
        tol_atol = tol_rtol = tol_forced;
    cur_op = o->name;
    op_failures = 0;
    int long_too = strncmp(b->name, "cpu", 3) != 0 &&
                   (o->run == t_attention_forward || o->run == t_attention_backward);
    for (size_t k = 0; k < NSHAPES + o->nmore + (size_t)long_too; k++) {
        char sh[96];
        const struct shape *s = k < NSHAPES ? &shapes[k] : k < NSHAPES + o->nmore ? &o->more[k - NSHAPES] : &long_shape;
        snprintf(sh, sizeof sh, "B%d T%d C%d NH%d OC%d V%d v_start %d", s->B, s->T, s->C, s->NH, s->OC, s->V,
                 s->v_start);
        cur_shape = sh;
        o->run(s);
    }
    return op_failures;
}

/* ---- the harness, checked: a backend with wrong entries must be caught ---------------- */

static void wrong_matmul_forward(void *out, int out_dt, const void *inp, int inp_dt, const float *weight,
                                 const float *bias, int B, int T, int C, int OC)
{
    mds_backend_cpu()->ops.matmul_forward(out, out_dt, inp, inp_dt, weight, bias, B, T, C, OC);
    size_t i = (size_t)B * T * OC / 2;
    mds_store(out_dt, out, i, mds_load(out_dt, out, i) + 1e-3f);
}

static void wrong_attention_backward(void *dqkv, int dqkv_dt, const void *dout, int dout_dt, const void *qkv,
                                     int qkv_dt, const void *out, int out_dt, const float *lse, int B, int T, int C,
                                     int NH, int NKV, mds_dropout drop)
{
    /* dq dropped: only dk and dv written */
    size_t es = mds_dtype_size(dqkv_dt), row = (size_t)C + 2 * (size_t)NKV * (C / NH), n = (size_t)B * T * row;
    char *keep = malloc(n * es), *x = dqkv;
    memcpy(keep, dqkv, n * es);
    mds_backend_cpu()->ops.attention_backward(dqkv, dqkv_dt, dout, dout_dt, qkv, qkv_dt, out, out_dt, lse, B, T, C,
                                              NH, NKV, drop);
    for (size_t i = 0; i < (size_t)B * T; i++)
        memcpy(x + i * row * es, keep + i * row * es, (size_t)C * es);
    free(keep);
}

static int self_test(void)
{
    mds_backend wrong = *mds_backend_cpu();
    wrong.name = "cpu-with-two-wrong-ops";
    wrong.ops.matmul_forward = wrong_matmul_forward;
    wrong.ops.attention_backward = wrong_attention_backward;
    int bad = 0;
    quiet = 1;   /* the expected mismatches are not printed */
    for (size_t i = 0; i < NOPS; i++) {
        int f = run_op(&wrong, &ops[i]);
        int expect = ops[i].run == t_matmul_forward || ops[i].run == t_attention_backward;
        if ((f > 0) != expect)
            bad++;
    }
    quiet = 0;
    return bad;
}

/* mem_held() against the blocks this test allocates and frees: "now" goes
 * up and down by their sizes, "peak" keeps the most held at once (the
 * figure mdstrain's memory report and make bench-gpu print). */
static int check_mem_held(const mds_backend *b)
{
    size_t now0, peak0, now, peak;
    void *x = NULL, *y = NULL, *z = NULL;
    b->mem_held(&now0, &peak0);
    if (b->alloc(&x, 1000) != 0 || b->alloc(&y, 3000) != 0)
        return 1;
    b->free(x);
    if (b->alloc(&z, 500) != 0)
        return 1;
    b->mem_held(&now, &peak);
    int bad = now != now0 + 3500 || peak != (peak0 > now0 + 4000 ? peak0 : now0 + 4000);
    b->free(y);
    b->free(z);
    b->free(NULL);
    b->mem_held(&now, &peak);
    return bad || now != now0 || peak < now0 + 4000;
}

int main(int argc, char **argv)
{
    const char *only_op = NULL, *only_be = NULL;
    int list = 0;
    uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) only_op = argv[++i];
        else if (strcmp(argv[i], "-b") == 0 && i + 1 < argc) only_be = argv[++i];
        else if (strcmp(argv[i], "-s") == 0 && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "-l") == 0) list = 1;
        else if (strcmp(argv[i], "-t") == 0 && i + 1 < argc) {
            char *end;
            tol_forced = strtod(argv[++i], &end);
            if (*end || end == argv[i] || !(tol_forced >= 0)) {
                fprintf(stderr, "%s: -t: want a tolerance >= 0, got '%s'\n", argv[0], argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: %s [-o OP] [-b BACKEND] [-l] [-s SEED] [-t TOL]\n", argv[0]);
            return 2;
        }
    }
    const mds_backend *list_be[8];
    size_t nb = mds_backend_list(list_be, 8);
    if (list) {
        printf("%-24s", "op");
        for (size_t b = 0; b < nb; b++)
            printf(" %-6s", list_be[b]->name);
        putchar('\n');
        for (size_t i = 0; i < NOPS; i++) {
            printf("%-24s", ops[i].name);
            for (size_t b = 0; b < nb; b++)
                printf(" %-6s", has_op(list_be[b], &ops[i]) ? "yes" : "-");
            putchar('\n');
        }
        return 0;
    }
    printf("seed %llu (replay with -s)\n", (unsigned long long)seed);
    /* The GPU's tests are named, never silently absent: asked for with
       -b cuda and missing, they fail (make test-gpu). */
    if (!mds_backend_find("cuda") && (!only_be || strcmp(only_be, "cuda") == 0)) {
#ifdef MDS_HAVE_CUDA
        const char *why = "no CUDA device";
#else
        const char *why = "built without CUDA";
#endif
        if (only_be) {
            printf("FAIL test_backend_ops[cuda]: %s\n", why);
            return 1;
        }
        printf("skip test_backend_ops[cuda]: %s (every op on the GPU; make test-gpu on a GPU machine)\n", why);
    }
    int failed = 0, matched = 0;
    /* every entry of the table is a test: a new op without one fails here */
    if (sizeof(mds_ops) != NOPS * sizeof(void (*)(void))) {
        printf("FAIL op table has %zu entries, the harness knows %zu\n", sizeof(mds_ops) / sizeof(void (*)(void)),
               (size_t)NOPS);
        failed++;
    }
    for (size_t b = 0; b < nb; b++) {
        if (only_be && strcmp(only_be, list_be[b]->name) != 0) continue;
        for (size_t i = 0; i < NOPS; i++) {
            if (only_op && strcmp(only_op, ops[i].name) != 0) continue;
            matched++;
            rng_state = seed;
            if (!has_op(list_be[b], &ops[i])) {
                printf("FAIL %s %s (missing from the op table)\n", list_be[b]->name, ops[i].name);
                failed++;
                continue;
            }
            int f = run_op(list_be[b], &ops[i]);
            printf("%s %s %s\n", f ? "FAIL" : "ok", list_be[b]->name, ops[i].name);
            failed += f > 0;
        }
        if (!only_op) {
            int f = check_mem_held(list_be[b]);
            printf("%s %s mem_held\n", f ? "FAIL" : "ok", list_be[b]->name);
            failed += f;
        }
    }
    if (!matched) {
        fprintf(stderr, "no op or backend matches\n");
        return 2;
    }
    if (!only_op && !only_be) {
        rng_state = seed;
        int bad = self_test();
        printf("%s harness catches a wrong matmul_forward and a wrong attention_backward, and nothing else\n",
               bad ? "FAIL" : "ok");
        failed += bad > 0;
    }
    return failed ? 1 : 0;
}
