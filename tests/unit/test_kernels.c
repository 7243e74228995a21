/*
 * test_kernels.c - unit tests of the CPU reference kernels (kernels/cpu/).
 *
 * For every op, over a small table of shapes, on random inputs:
 *  - the forward against a naive double-precision reference written here
 *    independently of the kernel (|got - ref| <= atol + rtol*|ref|);
 *  - for every op with a backward, the gradient of the scalar
 *    L = sum(R * out) (R random, so dout = R) against central finite
 *    differences of that double reference (step 1e-5, so the numerical
 *    gradient is good to ~1e-9 and the tolerance measures the float kernel);
 *  - the tensor-parallel contract: column-parallel matmul and head-split
 *    attention equal the matching slice of the TP=1 result bitwise,
 *    vocab-parallel embedding sums to it bitwise, row-parallel matmul and
 *    vocab-parallel cross-entropy (through the documented reduction
 *    protocol) agree within tolerance;
 *  - AdamW against a step worked out by hand and 5 steps of a double loop;
 *  - global norm against a double sum, and the clipping factor;
 *  - the blocked matmul on odd shapes against a double loop, within the
 *    error bound of its summation order, on every instruction-set path;
 *  - determinism: every op is bitwise identical with 1, 2 and 3 OpenMP threads.
 *
 * Randomised: prints its seed, `-s SEED` replays one.  Finite differences
 * check at most FD_MAX coordinates per tensor (a random sample beyond that).
 * It does not test a CUDA backend (tests/kernels/test_parity.c will) or the
 * model built from these ops.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "harness.h"
#include "kernels.h"

#define FD_MAX 200
static const mds_dropout NODROP = {0};
#define FD_STEP 1e-5

/* Tolerances (atol, rtol).  Forward: float kernel vs double reference.
 * Gradient: float backward vs finite differences of the double reference. */
#define FWD_ATOL 1e-5
#define FWD_RTOL 1e-5
#define GRAD_ATOL 1e-5
#define GRAD_RTOL 1e-4

static uint64_t seed, rng_state;
/* Largest err / (atol + rtol*|ref|) seen, printed at the end (1 = at the limit). */
static double worst_fwd, worst_grad;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in [-a, a) */
static float frand(float a)
{
    return (float)((double)(rng_next() >> 11) / 9007199254740992.0 * 2.0 - 1.0) * a;
}

static int irand(int n)
{
    return (int)(rng_next() % (uint64_t)n);
}

static float *frandv(size_t n, float a)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = frand(a);
    return x;
}

static float *fzeros(size_t n)
{
    return calloc(n ? n : 1, sizeof(float));
}

static double *todouble(const float *x, size_t n)
{
    double *d = malloc((n ? n : 1) * sizeof *d);
    for (size_t i = 0; i < n; i++)
        d[i] = x[i];
    return d;
}

static double dotd(const double *a, const float *r, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += a[i] * r[i];
    return s;
}

/* Compares n values; prints the first 5 mismatches and returns their count. */
static int close_enough(const char *what, const float *got, const double *ref, size_t n,
                        double atol, double rtol)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - ref[i]), lim = atol + rtol * fabs(ref[i]);
        if (lim > 0 && err / lim > worst_fwd)
            worst_fwd = err / lim;
        if (!(err <= lim)) {
            if (bad < 5)
                fprintf(stderr, "  %s[%zu]: got %.9g, want %.9g (err %.3g)\n", what, i,
                        (double)got[i], ref[i], err);
            bad++;
        }
    }
    return bad;
}

static int bitwise_equal(const char *what, const float *a, const float *b, size_t n)
{
    if (memcmp(a, b, n * sizeof *a) == 0)
        return 1;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof *a) != 0) {
            fprintf(stderr, "  %s[%zu]: %.9g != %.9g\n", what, i, (double)a[i], (double)b[i]);
            break;
        }
    return 0;
}

/*
 * Central differences of loss(ctx) with respect to x (double, perturbed in
 * place and restored), against the analytic float gradient g.  Returns the
 * number of mismatching coordinates.
 */
typedef double (*loss_fn)(void *ctx);

static int grad_check(const char *what, loss_fn loss, void *ctx, double *x, size_t n,
                      const float *g)
{
    int bad = 0;
    size_t count = n < FD_MAX ? n : FD_MAX;
    for (size_t k = 0; k < count; k++) {
        size_t i = n <= FD_MAX ? k : (size_t)(rng_next() % n);
        double x0 = x[i];
        double h = FD_STEP * (fabs(x0) > 1.0 ? fabs(x0) : 1.0);
        x[i] = x0 + h;
        double lp = loss(ctx);
        x[i] = x0 - h;
        double lm = loss(ctx);
        x[i] = x0;
        double num = (lp - lm) / (2.0 * h);
        double err = fabs((double)g[i] - num), lim = GRAD_ATOL + GRAD_RTOL * fabs(num);
        if (err / lim > worst_grad)
            worst_grad = err / lim;
        if (!(err <= lim)) {
            if (bad < 5)
                fprintf(stderr, "  d%s[%zu]: analytic %.9g, numeric %.9g (err %.3g)\n", what, i,
                        (double)g[i], num, err);
            bad++;
        }
    }
    return bad;
}

/* ---- encoder ------------------------------------------------------------- */

struct enc_ctx {
    int B, T, C, V;
    const int *inp;
    double *wte, *wpe;
    const float *R;
};

static void enc_ref(double *out, const struct enc_ctx *c)
{
    for (int bt = 0; bt < c->B * c->T; bt++)
        for (int i = 0; i < c->C; i++)
            out[(size_t)bt * c->C + i] = c->wte[(size_t)c->inp[bt] * c->C + i] +
                                         c->wpe[(size_t)(bt % c->T) * c->C + i];
}

static double enc_loss(void *p)
{
    struct enc_ctx *c = p;
    size_t n = (size_t)c->B * c->T * c->C;
    double *out = malloc(n * sizeof *out);
    enc_ref(out, c);
    double l = dotd(out, c->R, n);
    free(out);
    return l;
}

static void test_encoder(void)
{
    static const int shapes[][4] = { { 1, 1, 1, 1 }, { 2, 3, 5, 7 }, { 2, 4, 16, 11 }, { 3, 5, 33, 9 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], V = shapes[s][3];
        size_t nout = (size_t)B * T * C;
        int *inp = malloc((size_t)B * T * sizeof *inp);
        for (int i = 0; i < B * T; i++)
            inp[i] = irand(V);
        float *wte = frandv((size_t)V * C, 1.0f), *wpe = frandv((size_t)T * C, 1.0f);
        float *out = fzeros(nout), *R = frandv(nout, 1.0f);
        encoder_forward_cpu(out, inp, wte, wpe, B, T, C, V, 0);
        struct enc_ctx c = { B, T, C, V, inp, todouble(wte, (size_t)V * C),
                             todouble(wpe, (size_t)T * C), R };
        double *ref = malloc(nout * sizeof *ref);
        enc_ref(ref, &c);
        int exact = 1; /* one float add, so the rounded double sum exactly */
        for (size_t i = 0; i < nout; i++)
            exact &= out[i] == (float)ref[i];
        CHECK(exact);

        float *dwte = fzeros((size_t)V * C), *dwpe = fzeros((size_t)T * C);
        encoder_backward_cpu(dwte, dwpe, R, inp, B, T, C, V, 0);
        CHECK(grad_check("wte", enc_loss, &c, c.wte, (size_t)V * C, dwte) == 0);
        CHECK(grad_check("wpe", enc_loss, &c, c.wpe, (size_t)T * C, dwpe) == 0);

        /* Vocab-parallel: 2 shards, wpe on the first only; the sum over
         * shards is the TP=1 output bitwise, and each shard's dwte is its
         * rows of the TP=1 dwte. */
        if (V >= 2) {
            int split = V / 2;
            float *o0 = fzeros(nout), *o1 = fzeros(nout), *sum = fzeros(nout);
            encoder_forward_cpu(o0, inp, wte, wpe, B, T, C, split, 0);
            encoder_forward_cpu(o1, inp, wte + (size_t)split * C, NULL, B, T, C, V - split, split);
            for (size_t i = 0; i < nout; i++)
                sum[i] = o0[i] + o1[i];
            CHECK(bitwise_equal("encoder.tp_out", sum, out, nout));
            float *d1 = fzeros((size_t)(V - split) * C), *dp1 = fzeros((size_t)T * C);
            encoder_backward_cpu(d1, dp1, R, inp, B, T, C, V - split, split);
            CHECK(bitwise_equal("encoder.tp_dwte", d1, dwte + (size_t)split * C, (size_t)(V - split) * C));
            CHECK(bitwise_equal("encoder.tp_dwpe", dp1, dwpe, (size_t)T * C));
            free(o0), free(o1), free(sum), free(d1), free(dp1);
        }
        free(inp), free(wte), free(wpe), free(out), free(R), free(c.wte), free(c.wpe);
        free(ref), free(dwte), free(dwpe);
    }
}

/* ---- layernorm ----------------------------------------------------------- */

#define LN_EPS 1e-5f

struct ln_ctx {
    int B, T, C;
    double *inp, *w, *b;
    const float *R;
};

static void ln_ref(double *out, double *mean, double *rstd, const struct ln_ctx *c)
{
    for (int bt = 0; bt < c->B * c->T; bt++) {
        const double *x = c->inp + (size_t)bt * c->C;
        double m = 0.0, v = 0.0;
        for (int i = 0; i < c->C; i++)
            m += x[i];
        m /= c->C;
        for (int i = 0; i < c->C; i++)
            v += (x[i] - m) * (x[i] - m);
        v /= c->C;
        double r = 1.0 / sqrt(v + (double)LN_EPS);
        for (int i = 0; i < c->C; i++)
            out[(size_t)bt * c->C + i] = (x[i] - m) * r * c->w[i] + c->b[i];
        if (mean)
            mean[bt] = m, rstd[bt] = r;
    }
}

static double ln_loss(void *p)
{
    struct ln_ctx *c = p;
    size_t n = (size_t)c->B * c->T * c->C;
    double *out = malloc(n * sizeof *out);
    ln_ref(out, NULL, NULL, c);
    double l = dotd(out, c->R, n);
    free(out);
    return l;
}

static void test_layernorm(void)
{
    static const int shapes[][3] = { { 1, 1, 1 }, { 1, 1, 2 }, { 2, 3, 8 }, { 2, 2, 37 }, { 1, 3, 64 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2];
        size_t n = (size_t)B * T * C, nr = (size_t)B * T;
        float *inp = frandv(n, 2.0f), *w = frandv((size_t)C, 1.0f), *b = frandv((size_t)C, 1.0f);
        /* A nonzero mean, and rows redrawn until their variance is >= 0.1:
         * dinp scales with rstd, so a near-constant row (likely at C = 2)
         * is ill-conditioned whatever the kernel does. */
        for (size_t r = 0; r < nr; r++) {
            float *x = inp + r * C;
            for (;;) {
                double m = 0.0, v = 0.0;
                for (int i = 0; i < C; i++)
                    m += x[i];
                m /= C;
                for (int i = 0; i < C; i++)
                    v += (x[i] - m) * (x[i] - m);
                if (C == 1 || v / C >= 0.1)
                    break;
                for (int i = 0; i < C; i++)
                    x[i] = frand(2.0f);
            }
            for (int i = 0; i < C; i++)
                x[i] += 0.5f;
        }
        float *out = fzeros(n), *mean = fzeros(nr), *rstd = fzeros(nr), *R = frandv(n, 1.0f);
        layernorm_forward_cpu(out, mean, rstd, inp, w, b, B, T, C, LN_EPS);
        struct ln_ctx c = { B, T, C, todouble(inp, n), todouble(w, (size_t)C), todouble(b, (size_t)C), R };
        double *ref = malloc(n * sizeof *ref), *rm = malloc(nr * sizeof *rm), *rr = malloc(nr * sizeof *rr);
        ln_ref(ref, rm, rr, &c);
        CHECK(close_enough("layernorm.out", out, ref, n, FWD_ATOL, FWD_RTOL) == 0);
        CHECK(close_enough("layernorm.mean", mean, rm, nr, FWD_ATOL, FWD_RTOL) == 0);
        CHECK(close_enough("layernorm.rstd", rstd, rr, nr, FWD_ATOL, FWD_RTOL) == 0);

        float *dinp = fzeros(n), *dw = fzeros((size_t)C), *db = fzeros((size_t)C);
        layernorm_backward_cpu(dinp, dw, db, R, inp, w, mean, rstd, B, T, C);
        CHECK(grad_check("ln.inp", ln_loss, &c, c.inp, n, dinp) == 0);
        CHECK(grad_check("ln.weight", ln_loss, &c, c.w, (size_t)C, dw) == 0);
        CHECK(grad_check("ln.bias", ln_loss, &c, c.b, (size_t)C, db) == 0);
        free(inp), free(w), free(b), free(out), free(mean), free(rstd), free(R);
        free(c.inp), free(c.w), free(c.b), free(ref), free(rm), free(rr), free(dinp), free(dw), free(db);
    }
}

/* ---- matmul -------------------------------------------------------------- */

struct mm_ctx {
    int B, T, C, OC;
    double *inp, *w, *b; /* b may be NULL */
    const float *R;
};

static void mm_ref(double *out, const struct mm_ctx *c)
{
    for (int r = 0; r < c->B * c->T; r++)
        for (int o = 0; o < c->OC; o++) {
            double s = c->b ? c->b[o] : 0.0;
            for (int i = 0; i < c->C; i++)
                s += c->inp[(size_t)r * c->C + i] * c->w[(size_t)o * c->C + i];
            out[(size_t)r * c->OC + o] = s;
        }
}

static double mm_loss(void *p)
{
    struct mm_ctx *c = p;
    size_t n = (size_t)c->B * c->T * c->OC;
    double *out = malloc(n * sizeof *out);
    mm_ref(out, c);
    double l = dotd(out, c->R, n);
    free(out);
    return l;
}

static void test_matmul(void)
{
    static const int shapes[][4] = { { 1, 1, 1, 1 }, { 2, 3, 5, 7 }, { 3, 1, 9, 3 },
                                     { 1, 5, 17, 9 }, { 2, 2, 32, 16 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], OC = shapes[s][3];
        size_t ni = (size_t)B * T * C, no = (size_t)B * T * OC, nw = (size_t)OC * C;
        float *inp = frandv(ni, 1.0f), *w = frandv(nw, 1.0f), *b = frandv((size_t)OC, 1.0f);
        float *R = frandv(no, 1.0f);
        for (int with_bias = 0; with_bias <= 1; with_bias++) {
            float *out = fzeros(no);
            matmul_forward_cpu(out, inp, w, with_bias ? b : NULL, B, T, C, OC);
            struct mm_ctx c = { B, T, C, OC, todouble(inp, ni), todouble(w, nw),
                                with_bias ? todouble(b, (size_t)OC) : NULL, R };
            double *ref = malloc(no * sizeof *ref);
            mm_ref(ref, &c);
            CHECK(close_enough("matmul.out", out, ref, no, FWD_ATOL, FWD_RTOL) == 0);
            float *dinp = fzeros(ni), *dw = fzeros(nw), *db = fzeros((size_t)OC);
            matmul_backward_cpu(dinp, dw, with_bias ? db : NULL, R, inp, w, B, T, C, OC);
            CHECK(grad_check("mm.inp", mm_loss, &c, c.inp, ni, dinp) == 0);
            CHECK(grad_check("mm.weight", mm_loss, &c, c.w, nw, dw) == 0);
            if (with_bias)
                CHECK(grad_check("mm.bias", mm_loss, &c, c.b, (size_t)OC, db) == 0);

            /* Column-parallel: output rows [o0, OC) of the weight give those
             * output columns bitwise. */
            if (with_bias && OC >= 2) {
                int o0 = OC / 2, oc = OC - o0;
                float *part = fzeros((size_t)B * T * oc);
                matmul_forward_cpu(part, inp, w + (size_t)o0 * C, b + o0, B, T, C, oc);
                int same = 1;
                for (int r = 0; r < B * T; r++)
                    same &= memcmp(part + (size_t)r * oc, out + (size_t)r * OC + o0, (size_t)oc * sizeof(float)) == 0;
                CHECK(same);
                free(part);
            }
            /* Row-parallel: two blocks of input channels, bias on the first
             * only; the sum of partial outputs is the output. */
            if (with_bias && C >= 2) {
                int c0 = C / 2;
                float *x0 = fzeros((size_t)B * T * c0), *x1 = fzeros((size_t)B * T * (C - c0));
                float *w0 = fzeros((size_t)OC * c0), *w1 = fzeros((size_t)OC * (C - c0));
                for (int r = 0; r < B * T; r++)
                    for (int i = 0; i < C; i++) {
                        if (i < c0)
                            x0[(size_t)r * c0 + i] = inp[(size_t)r * C + i];
                        else
                            x1[(size_t)r * (C - c0) + i - c0] = inp[(size_t)r * C + i];
                    }
                for (int o = 0; o < OC; o++)
                    for (int i = 0; i < C; i++) {
                        if (i < c0)
                            w0[(size_t)o * c0 + i] = w[(size_t)o * C + i];
                        else
                            w1[(size_t)o * (C - c0) + i - c0] = w[(size_t)o * C + i];
                    }
                float *p0 = fzeros(no), *p1 = fzeros(no);
                matmul_forward_cpu(p0, x0, w0, b, B, T, c0, OC);
                matmul_forward_cpu(p1, x1, w1, NULL, B, T, C - c0, OC);
                for (size_t i = 0; i < no; i++)
                    p0[i] += p1[i];
                CHECK(close_enough("matmul.rowpar", p0, ref, no, FWD_ATOL, FWD_RTOL) == 0);
                free(x0), free(x1), free(w0), free(w1), free(p0), free(p1);
            }
            free(out), free(c.inp), free(c.w), free(c.b), free(ref), free(dinp), free(dw), free(db);
        }
        free(inp), free(w), free(b), free(R);
    }
}

/*
 * The blocked GEMM behind matmul (kernels/cpu/matmul.c) against a plain
 * double loop, on shapes that are not multiples of its tiles or blocks
 * (1 row, 1 output, K past the 256-wide K block, rows past the 256-row
 * block, one shape big enough that neither operand is packed whole), for
 * each instruction-set path (MDS_CPU_ISA).  Each output is one float
 * accumulator over k in order (plus the starting gradient, plus the bias),
 * so the error is bounded by (K + 2) u sum_k |a_k b_k| (+ |start| + |bias|),
 * u = 2^-24: the tolerance is that bound, times 1.01.  The AVX2 and AVX-512
 * paths, both fused multiply-add in the same order, must agree bitwise, and
 * every path must give the same bits with 1, 2 and 3 threads.
 */
struct mm_odd_run {
    float *out, *dinp, *dw, *db;
};

static void mm_odd_once(struct mm_odd_run *r, const float *inp, const float *w, const float *b,
                        const float *dout, const float *dinp0, const float *dw0, int M, int C, int OC)
{
    size_t ni = (size_t)M * C, nw = (size_t)OC * C;
    matmul_forward_cpu(r->out, inp, w, b, 1, M, C, OC);
    memcpy(r->dinp, dinp0, ni * sizeof(float));
    memcpy(r->dw, dw0, nw * sizeof(float));
    memset(r->db, 0, (size_t)OC * sizeof(float));
    matmul_backward_cpu(r->dinp, r->dw, r->db, dout, inp, w, 1, M, C, OC);
}

/* |got - ref| <= 1.01 (K + 2) u (sum |terms|); returns mismatches. */
static int mm_within(const char *what, const float *got, const double *ref, const double *mag,
                     size_t n, int K)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double lim = 1.01 * (K + 2) * 5.9604644775390625e-8 * mag[i];
        double err = fabs((double)got[i] - ref[i]);
        if (lim > 0 && err / lim > worst_fwd)
            worst_fwd = err / lim;
        if (!(err <= lim)) {
            if (bad < 5)
                fprintf(stderr, "  %s[%zu] (K %d): got %.9g, want %.9g (err %.3g, bound %.3g)\n",
                        what, i, K, (double)got[i], ref[i], err, lim);
            bad++;
        }
    }
    return bad;
}

static void test_matmul_blocked(void)
{
    /* rows M, C, OC */
    static const int shapes[][3] = { { 1, 1, 1 }, { 1, 300, 50 }, { 13, 7, 33 }, { 37, 257, 45 },
                                     { 300, 40, 1 }, { 29, 513, 70 }, { 260, 33, 601 },
                                     { 64, 66000, 64 } };
    static const char *isas[] = { "avx512", "avx2", "generic" };
    const char *saved_env = getenv("MDS_CPU_ISA");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int M = shapes[s][0], C = shapes[s][1], OC = shapes[s][2];
        size_t ni = (size_t)M * C, no = (size_t)M * OC, nw = (size_t)OC * C;
        float *inp = frandv(ni, 1.0f), *w = frandv(nw, 1.0f), *b = frandv((size_t)OC, 1.0f);
        float *dout = frandv(no, 1.0f), *dinp0 = frandv(ni, 1.0f), *dw0 = frandv(nw, 1.0f);
        double *ref = malloc(no * sizeof *ref), *mag = malloc(no * sizeof *mag);
        double *rdi = malloc(ni * sizeof *rdi), *mdi = malloc(ni * sizeof *mdi);
        double *rdw = malloc(nw * sizeof *rdw), *mdw = malloc(nw * sizeof *mdw);
        for (int r = 0; r < M; r++)
            for (int o = 0; o < OC; o++) {
                double acc = b[o], m = fabs(b[o]);
                for (int c = 0; c < C; c++) {
                    double t = (double)inp[(size_t)r * C + c] * w[(size_t)o * C + c];
                    acc += t, m += fabs(t);
                }
                ref[(size_t)r * OC + o] = acc, mag[(size_t)r * OC + o] = m;
            }
        for (int r = 0; r < M; r++)
            for (int c = 0; c < C; c++) {
                double acc = dinp0[(size_t)r * C + c], m = fabs(acc);
                for (int o = 0; o < OC; o++) {
                    double t = (double)dout[(size_t)r * OC + o] * w[(size_t)o * C + c];
                    acc += t, m += fabs(t);
                }
                rdi[(size_t)r * C + c] = acc, mdi[(size_t)r * C + c] = m;
            }
        for (int o = 0; o < OC; o++)
            for (int c = 0; c < C; c++) {
                double acc = dw0[(size_t)o * C + c], m = fabs(acc);
                for (int r = 0; r < M; r++) {
                    double t = (double)dout[(size_t)r * OC + o] * inp[(size_t)r * C + c];
                    acc += t, m += fabs(t);
                }
                rdw[(size_t)o * C + c] = acc, mdw[(size_t)o * C + c] = m;
            }
        struct mm_odd_run runs[3];
        for (int k = 0; k < 3; k++) {
            struct mm_odd_run *r = &runs[k];
            r->out = fzeros(no), r->dinp = fzeros(ni), r->dw = fzeros(nw), r->db = fzeros((size_t)OC);
            setenv("MDS_CPU_ISA", isas[k], 1);
            mm_odd_once(r, inp, w, b, dout, dinp0, dw0, M, C, OC);
            CHECK(mm_within("matmul.out", r->out, ref, mag, no, C) == 0);
            CHECK(mm_within("matmul.dinp", r->dinp, rdi, mdi, ni, OC) == 0);
            CHECK(mm_within("matmul.dweight", r->dw, rdw, mdw, nw, M) == 0);
#ifdef _OPENMP
            /* Bitwise the same with 1, 2 and 3 threads. */
            int saved = omp_get_max_threads();
            for (int nt = 1; nt <= 3; nt++) {
                struct mm_odd_run t = { fzeros(no), fzeros(ni), fzeros(nw), fzeros((size_t)OC) };
                omp_set_num_threads(nt);
                mm_odd_once(&t, inp, w, b, dout, dinp0, dw0, M, C, OC);
                CHECK(bitwise_equal("matmul.threads.out", t.out, r->out, no));
                CHECK(bitwise_equal("matmul.threads.dinp", t.dinp, r->dinp, ni));
                CHECK(bitwise_equal("matmul.threads.dweight", t.dw, r->dw, nw));
                CHECK(bitwise_equal("matmul.threads.dbias", t.db, r->db, (size_t)OC));
                free(t.out), free(t.dinp), free(t.dw), free(t.db);
            }
            omp_set_num_threads(saved);
#endif
        }
        /* Both FMA paths: the same bits (equal trivially on a CPU without AVX-512). */
        CHECK(bitwise_equal("matmul.avx512_vs_avx2", runs[0].out, runs[1].out, no));
        CHECK(bitwise_equal("matmul.avx512_vs_avx2.dinp", runs[0].dinp, runs[1].dinp, ni));
        CHECK(bitwise_equal("matmul.avx512_vs_avx2.dweight", runs[0].dw, runs[1].dw, nw));
        for (int k = 0; k < 3; k++)
            free(runs[k].out), free(runs[k].dinp), free(runs[k].dw), free(runs[k].db);
        free(inp), free(w), free(b), free(dout), free(dinp0), free(dw0);
        free(ref), free(mag), free(rdi), free(mdi), free(rdw), free(mdw);
    }
    if (saved_env)
        setenv("MDS_CPU_ISA", saved_env, 1);
    else
        unsetenv("MDS_CPU_ISA");
}

/* ---- attention ----------------------------------------------------------- */

struct att_ctx {
    int B, T, C, NH, NKV;
    double *qkv;
    const float *R;
    mds_dropout drop;   /* p = 0: none */
};

/* Grouped-query attention in double: head h reads the k and v of group
 * h / (NH / NKV); each row is [q (C) | k (NKV hs) | v (NKV hs)]. */
static void att_ref(double *out, double *lse, const struct att_ctx *c)
{
    int hs = c->C / c->NH, R = c->NH / c->NKV;
    size_t C3 = (size_t)c->C + 2 * (size_t)c->NKV * hs;
    double scale = 1.0 / sqrt((double)hs);
    double *sc = malloc((size_t)c->T * sizeof *sc);
    for (int b = 0; b < c->B; b++)
        for (int t = 0; t < c->T; t++)
            for (int h = 0; h < c->NH; h++) {
                const double *q = c->qkv + ((size_t)b * c->T + t) * C3 + (size_t)h * hs;
                double mx = -INFINITY, sum = 0.0;
                for (int s = 0; s <= t; s++) {
                    const double *k = c->qkv + ((size_t)b * c->T + s) * C3 + c->C + (size_t)(h / R) * hs;
                    double d = 0.0;
                    for (int i = 0; i < hs; i++)
                        d += q[i] * k[i];
                    sc[s] = d * scale;
                    mx = sc[s] > mx ? sc[s] : mx;
                }
                for (int s = 0; s <= t; s++)
                    sum += exp(sc[s] - mx);
                double *o = out + ((size_t)b * c->T + t) * c->C + (size_t)h * hs;
                uint32_t thr = mds_dropout_threshold(c->drop.p);
                for (int i = 0; i < hs; i++) {
                    double a = 0.0;
                    for (int s = 0; s <= t; s++)
                        a += exp(sc[s] - mx) / sum *
                             (c->drop.p > 0 ? (mds_dropout_keep(c->drop.row_keys[b], c->drop.site,
                                                                ((uint64_t)(c->drop.head0 + h) * c->T + t) * c->T + s, thr)
                                                   ? 1.0 / (1.0 - c->drop.p) : 0.0) : 1.0) *
                             c->qkv[((size_t)b * c->T + s) * C3 + (size_t)c->C + ((size_t)c->NKV + h / R) * hs + i];
                    o[i] = a;
                }
                if (lse)
                    lse[((size_t)b * c->NH + h) * c->T + t] = mx + log(sum);
            }
    free(sc);
}

static double att_loss(void *p)
{
    struct att_ctx *c = p;
    size_t n = (size_t)c->B * c->T * c->C;
    double *out = malloc(n * sizeof *out);
    att_ref(out, NULL, c);
    double l = dotd(out, c->R, n);
    free(out);
    return l;
}

static void test_attention(void)
{
    static const int shapes[][4] = { { 1, 1, 4, 1 }, { 2, 4, 8, 2 }, { 1, 7, 12, 3 },
                                     { 2, 5, 16, 4 }, { 1, 9, 6, 1 },
                                     { 1, 70, 128, 2 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], NH = shapes[s][3];
        size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
        float *qkv = frandv(nq, 2.0f), *out = fzeros(no), *lse = fzeros(nl), *R = frandv(no, 1.0f);
        attention_forward_cpu(out, lse, qkv, B, T, C, NH, NH, NODROP);
        struct att_ctx c = { B, T, C, NH, NH, todouble(qkv, nq), R, NODROP };
        double *ref = malloc(no * sizeof *ref), *rl = malloc(nl * sizeof *rl);
        att_ref(ref, rl, &c);
        CHECK(close_enough("attention.out", out, ref, no, FWD_ATOL, FWD_RTOL) == 0);
        CHECK(close_enough("attention.lse", lse, rl, nl, FWD_ATOL, FWD_RTOL) == 0);
        float *dqkv = fzeros(nq);
        attention_backward_cpu(dqkv, R, qkv, out, lse, B, T, C, NH, NH, NODROP);
        CHECK(grad_check("att.qkv", att_loss, &c, c.qkv, nq, dqkv) == 0);

        /* Head split (TP): the last NH - NH/2 heads as a local qkv of width
         * Cl give bitwise the same out, lse and dqkv slices. */
        if (NH >= 2) {
            int hs = C / NH, h0 = NH / 2, nh = NH - h0, Cl = nh * hs;
            size_t nql = (size_t)B * T * 3 * Cl, nol = (size_t)B * T * Cl;
            float *q = fzeros(nql), *o = fzeros(nol), *l = fzeros((size_t)B * nh * T);
            float *dq = fzeros(nql), *Rl = fzeros(nol);
            for (int bt = 0; bt < B * T; bt++) {
                for (int part = 0; part < 3; part++)
                    memcpy(q + (size_t)bt * 3 * Cl + (size_t)part * Cl,
                           qkv + (size_t)bt * 3 * C + (size_t)part * C + (size_t)h0 * hs, (size_t)Cl * sizeof(float));
                memcpy(Rl + (size_t)bt * Cl, R + (size_t)bt * C + (size_t)h0 * hs, (size_t)Cl * sizeof(float));
            }
            attention_forward_cpu(o, l, q, B, T, Cl, nh, nh, NODROP);
            attention_backward_cpu(dq, Rl, q, o, l, B, T, Cl, nh, nh, NODROP);
            int same = 1;
            for (int bt = 0; bt < B * T; bt++) {
                same &= memcmp(o + (size_t)bt * Cl, out + (size_t)bt * C + (size_t)h0 * hs, (size_t)Cl * sizeof(float)) == 0;
                for (int part = 0; part < 3; part++)
                    same &= memcmp(dq + (size_t)bt * 3 * Cl + (size_t)part * Cl,
                                   dqkv + (size_t)bt * 3 * C + (size_t)part * C + (size_t)h0 * hs,
                                   (size_t)Cl * sizeof(float)) == 0;
            }
            for (int b = 0; b < B; b++)
                same &= memcmp(l + (size_t)b * nh * T, lse + ((size_t)b * NH + h0) * T, (size_t)nh * T * sizeof(float)) == 0;
            CHECK(same);
            free(q), free(o), free(l), free(dq), free(Rl);
        }
        free(qkv), free(out), free(lse), free(R), free(c.qkv), free(ref), free(rl), free(dqkv);
    }
    /* T = 1: the output is v. */
    float qkv1[12] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 }, o1[4], l1[1];
    attention_forward_cpu(o1, l1, qkv1, 1, 1, 4, 1, 1, NODROP);
    CHECK(o1[0] == 9 && o1[1] == 10 && o1[2] == 11 && o1[3] == 12);
}

/* Grouped-query attention: against the double reference and finite
 * differences, and equal to multi-head attention on the same heads with
 * each group's k and v repeated (what Megatron and PyTorch compute). */
static void test_attention_gqa(void)
{
    static const int shapes[][5] = { { 1, 3, 8, 2, 1 }, { 2, 5, 16, 4, 2 }, { 1, 9, 24, 6, 3 },
                                     { 2, 17, 48, 6, 1 }, { 1, 66, 256, 4, 2 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], NH = shapes[s][3], NKV = shapes[s][4];
        int hs = C / NH, Rg = NH / NKV;
        size_t row = (size_t)C + 2 * (size_t)NKV * hs;
        size_t nq = (size_t)B * T * row, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
        float *qkv = frandv(nq, 2.0f), *out = fzeros(no), *lse = fzeros(nl), *R = frandv(no, 1.0f);
        attention_forward_cpu(out, lse, qkv, B, T, C, NH, NKV, NODROP);
        struct att_ctx c = { B, T, C, NH, NKV, todouble(qkv, nq), R, NODROP };
        double *ref = malloc(no * sizeof *ref), *rl = malloc(nl * sizeof *rl);
        att_ref(ref, rl, &c);
        CHECK(close_enough("gqa.out", out, ref, no, FWD_ATOL, FWD_RTOL) == 0);
        CHECK(close_enough("gqa.lse", lse, rl, nl, FWD_ATOL, FWD_RTOL) == 0);
        float *dqkv = fzeros(nq);
        attention_backward_cpu(dqkv, R, qkv, out, lse, B, T, C, NH, NKV, NODROP);
        CHECK(grad_check("gqa.qkv", att_loss, &c, c.qkv, nq, dqkv) == 0);
        /* the same heads as multi-head attention with k, v repeated: equal
           outputs bitwise (each head's arithmetic is the same) */
        size_t nm = (size_t)B * T * 3 * C;
        float *mh = fzeros(nm), *mo = fzeros(no), *ml = fzeros(nl);
        for (int bt = 0; bt < B * T; bt++) {
            const float *src = qkv + (size_t)bt * row;
            float *dst = mh + (size_t)bt * 3 * C;
            memcpy(dst, src, (size_t)C * sizeof(float));
            for (int h = 0; h < NH; h++) {
                memcpy(dst + C + (size_t)h * hs, src + C + (size_t)(h / Rg) * hs, (size_t)hs * sizeof(float));
                memcpy(dst + 2 * (size_t)C + (size_t)h * hs, src + C + ((size_t)NKV + h / Rg) * hs,
                       (size_t)hs * sizeof(float));
            }
        }
        attention_forward_cpu(mo, ml, mh, B, T, C, NH, NH, NODROP);
        CHECK(bitwise_equal("gqa vs repeated mha", out, mo, no));
        free(mh), free(mo), free(ml);
        free(qkv), free(out), free(lse), free(R), free(c.qkv), free(ref), free(rl), free(dqkv);
    }
}

/* ---- dropout ------------------------------------------------------------------- */

/* Hidden dropout: the drop rate, the kept values scaled exactly by 1/(1-p),
 * the backward's mask equal to the forward's, the mask a function of the
 * row key (not of the batch position), and attention dropout against the
 * double reference with the same mask (values and finite differences),
 * with a head split (TP) drawing its heads' masks by global head index. */
static void test_dropout(void)
{
    int B = 2, T = 64, C = 96;
    size_t n = (size_t)B * T * C;
    uint64_t keys[2] = { mds_dropout_row(1234, 17), mds_dropout_row(1234, 18) };
    mds_dropout d = { 0.3f, mds_dropout_site(1, 4), keys, 0, 0 };
    float *x = frandv(n, 1.0f), *y = fzeros(n), *g = fzeros(n), *ones = fzeros(n);
    for (size_t i = 0; i < n; i++) ones[i] = 1.0f;
    dropout_forward_cpu(y, x, B, T, C, d);
    dropout_backward_cpu(g, ones, B, T, C, d);
    size_t dropped = 0;
    int exact = 1;
    float scale = 1.0f / (1.0f - 0.3f);
    for (size_t i = 0; i < n; i++) {
        if (y[i] == 0.0f && x[i] != 0.0f) dropped++;
        exact &= y[i] == (g[i] != 0.0f ? x[i] * scale : 0.0f);   /* same mask in both directions */
        exact &= g[i] == 0.0f || g[i] == scale;
    }
    CHECK(exact);
    CHECK(fabs((double)dropped / (double)n - 0.3) < 0.02);
    /* row 1 alone (B = 1, its key first) draws the same mask as row 1 of the batch */
    float *y1 = fzeros((size_t)T * C);
    mds_dropout d1 = d;
    d1.row_keys = keys + 1;
    dropout_forward_cpu(y1, x + (size_t)T * C, 1, T, C, d1);
    CHECK(bitwise_equal("dropout row", y1, y + (size_t)T * C, (size_t)T * C));
    /* a sequence slice (tokens [40, 64) of each row, t0 = 40) draws the masks of those tokens */
    int Ts = 24, t0 = 40;
    float *xs = malloc((size_t)B * Ts * C * sizeof *xs), *ys = fzeros((size_t)B * Ts * C);
    for (int b = 0; b < B; b++)
        memcpy(xs + (size_t)b * Ts * C, x + ((size_t)b * T + t0) * C, (size_t)Ts * C * sizeof *xs);
    mds_dropout ds = d;
    ds.t0 = t0;
    dropout_forward_cpu(ys, xs, B, Ts, C, ds);
    int slice_ok = 1;
    for (int b = 0; b < B; b++)
        slice_ok &= memcmp(ys + (size_t)b * Ts * C, y + ((size_t)b * T + t0) * C, (size_t)Ts * C * sizeof *ys) == 0;
    CHECK(slice_ok);
    free(xs), free(ys);
    /* in place */
    float *z = malloc(n * sizeof *z);
    memcpy(z, x, n * sizeof *z);
    dropout_forward_cpu(z, z, B, T, C, d);
    CHECK(bitwise_equal("dropout in place", z, y, n));
    free(x), free(y), free(g), free(ones), free(y1), free(z);

    /* attention dropout */
    static const int shapes[][5] = { { 2, 5, 16, 4, 2 }, { 1, 9, 24, 6, 3 }, { 2, 7, 16, 2, 2 } };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int Bk = shapes[k][0], Tk = shapes[k][1], Ck = shapes[k][2], NH = shapes[k][3], NKV = shapes[k][4];
        int hs = Ck / NH;
        size_t row = (size_t)Ck + 2 * (size_t)NKV * hs;
        size_t nq = (size_t)Bk * Tk * row, no = (size_t)Bk * Tk * Ck, nl = (size_t)Bk * NH * Tk;
        mds_dropout da = { 0.2f, mds_dropout_site(3, 1), keys, 0, 0 };
        float *qkv = frandv(nq, 2.0f), *out = fzeros(no), *lse = fzeros(nl), *R = frandv(no, 1.0f);
        attention_forward_cpu(out, lse, qkv, Bk, Tk, Ck, NH, NKV, da);
        struct att_ctx c = { Bk, Tk, Ck, NH, NKV, todouble(qkv, nq), R, da };
        double *ref = malloc(no * sizeof *ref), *rl = malloc(nl * sizeof *rl);
        att_ref(ref, rl, &c);
        CHECK(close_enough("attdrop.out", out, ref, no, FWD_ATOL, FWD_RTOL) == 0);
        CHECK(close_enough("attdrop.lse", lse, rl, nl, FWD_ATOL, FWD_RTOL) == 0);
        float *dqkv = fzeros(nq);
        attention_backward_cpu(dqkv, R, qkv, out, lse, Bk, Tk, Ck, NH, NKV, da);
        CHECK(grad_check("attdrop.qkv", att_loss, &c, c.qkv, nq, dqkv) == 0);
        /* the second half of the heads (and their groups) as a rank of its
           own from global head NH/2: the same outputs, bitwise */
        if (NKV % 2 == 0) {
            int nh = NH / 2, nkv = NKV / 2, Cl = nh * hs;
            size_t rl2 = (size_t)Cl + 2 * (size_t)nkv * hs;
            float *q = fzeros((size_t)Bk * Tk * rl2), *o = fzeros((size_t)Bk * Tk * Cl), *l = fzeros((size_t)Bk * nh * Tk);
            for (int bt = 0; bt < Bk * Tk; bt++) {
                const float *src = qkv + (size_t)bt * row;
                float *dst = q + (size_t)bt * rl2;
                memcpy(dst, src + (size_t)nh * hs, (size_t)Cl * sizeof(float));
                memcpy(dst + Cl, src + Ck + (size_t)nkv * hs, (size_t)nkv * hs * sizeof(float));
                memcpy(dst + Cl + (size_t)nkv * hs, src + Ck + ((size_t)NKV + nkv) * hs, (size_t)nkv * hs * sizeof(float));
            }
            mds_dropout dl = da;
            dl.head0 = nh;
            attention_forward_cpu(o, l, q, Bk, Tk, Cl, nh, nkv, dl);
            int same = 1;
            for (int bt = 0; bt < Bk * Tk; bt++)
                same &= memcmp(o + (size_t)bt * Cl, out + (size_t)bt * Ck + (size_t)nh * hs, (size_t)Cl * sizeof(float)) == 0;
            CHECK(same);
            free(q), free(o), free(l);
        }
        free(qkv), free(out), free(lse), free(R), free(c.qkv), free(ref), free(rl), free(dqkv);
    }
}

/* ---- rmsnorm ---------------------------------------------------------------- */

struct rms_ctx {
    int N, C;
    double *x, *w;
    const float *R;
    float eps;
};

static void rms_ref(double *out, double *rstd, const struct rms_ctx *c)
{
    for (int n = 0; n < c->N; n++) {
        const double *x = c->x + (size_t)n * c->C;
        double ss = 0.0;
        for (int i = 0; i < c->C; i++)
            ss += x[i] * x[i];
        double r = 1.0 / sqrt(ss / c->C + c->eps);
        for (int i = 0; i < c->C; i++)
            out[(size_t)n * c->C + i] = x[i] * r * c->w[i];
        if (rstd) rstd[n] = r;
    }
}

static double rms_loss(void *p)
{
    struct rms_ctx *c = p;
    size_t n = (size_t)c->N * c->C;
    double *out = malloc(n * sizeof *out);
    rms_ref(out, NULL, c);
    double l = dotd(out, c->R, n);
    free(out);
    return l;
}

static void test_rmsnorm(void)
{
    static const int shapes[][3] = { { 1, 1, 1 }, { 2, 3, 5 }, { 1, 7, 33 }, { 3, 4, 64 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2];
        size_t n = (size_t)B * T * C, N = (size_t)B * T;
        float *x = frandv(n, 2.0f), *w = frandv((size_t)C, 1.5f), *out = fzeros(n), *rstd = fzeros(N);
        float *R = frandv(n, 1.0f), *dx = fzeros(n), *dw = fzeros((size_t)C);
        rmsnorm_forward_cpu(out, rstd, x, w, B, T, C, 1e-5f);
        struct rms_ctx c = { B * T, C, todouble(x, n), todouble(w, (size_t)C), R, 1e-5f };
        double *ref = malloc(n * sizeof *ref), *rr = malloc(N * sizeof *rr);
        rms_ref(ref, rr, &c);
        CHECK(close_enough("rmsnorm.out", out, ref, n, FWD_ATOL, FWD_RTOL) == 0);
        CHECK(close_enough("rmsnorm.rstd", rstd, rr, N, FWD_ATOL, FWD_RTOL) == 0);
        rmsnorm_backward_cpu(dx, dw, R, x, w, rstd, B, T, C);
        CHECK(grad_check("rmsnorm.x", rms_loss, &c, c.x, n, dx) == 0);
        CHECK(grad_check("rmsnorm.w", rms_loss, &c, c.w, (size_t)C, dw) == 0);
        free(x), free(w), free(out), free(rstd), free(R), free(dx), free(dw), free(c.x), free(c.w), free(ref), free(rr);
    }
}

/* ---- rope ---------------------------------------------------------------------- */

struct rope_ctx {
    int B, T, NH, NKV, hs, rot, inter;
    double *x;
    const float *cs, *sn;
    const float *R;
};

static void rope_ref(double *out, const struct rope_ctx *c)
{
    size_t row = ((size_t)c->NH + 2 * (size_t)c->NKV) * c->hs;
    int half = c->rot / 2;
    memcpy(out, c->x, (size_t)c->B * c->T * row * sizeof *out);
    for (int bt = 0; bt < c->B * c->T; bt++) {
        int t = bt % c->T;
        for (int h = 0; h < c->NH + c->NKV; h++) {
            const double *x = c->x + (size_t)bt * row + (size_t)h * c->hs;
            double *o = out + (size_t)bt * row + (size_t)h * c->hs;
            for (int i = 0; i < half; i++) {
                int a = c->inter ? 2 * i : i, b = c->inter ? 2 * i + 1 : i + half;
                double co = c->cs[(size_t)t * half + i], si = c->sn[(size_t)t * half + i];
                o[a] = x[a] * co - x[b] * si;
                o[b] = x[b] * co + x[a] * si;
            }
        }
    }
}

static double rope_loss(void *p)
{
    struct rope_ctx *c = p;
    size_t n = (size_t)c->B * c->T * ((size_t)c->NH + 2 * (size_t)c->NKV) * c->hs;
    double *out = malloc(n * sizeof *out);
    rope_ref(out, c);
    double l = dotd(out, c->R, n);
    free(out);
    return l;
}

static void test_rope(void)
{
    /* the tables: cos/sin of t / base^(2i/rot), to float precision */
    {
        int T = 40, rot = 16;
        float cs[40 * 8], sn[40 * 8];
        rope_tables(cs, sn, T, rot, 10000.0, 0.0);
        double worst = 0;
        for (int t = 0; t < T; t++)
            for (int i = 0; i < rot / 2; i++) {
                double a = t / pow(10000.0, 2.0 * i / rot);
                worst = fmax(worst, fabs(cs[t * 8 + i] - cos(a)) + fabs(sn[t * 8 + i] - sin(a)));
            }
        CHECK(worst < 2e-5);
        CHECK(cs[0] == 1.0f && sn[0] == 0.0f);
        /* Llama 3.1 scaling leaves the high frequencies and divides the low ones by the factor */
        float cs2[40 * 8], sn2[40 * 8];
        rope_tables(cs2, sn2, T, rot, 500000.0, 8.0);
        rope_tables(cs, sn, T, rot, 500000.0, 0.0);
        CHECK(cs2[1 * 8 + 0] == cs[1 * 8 + 0]);   /* i = 0: wavelength 2 pi < 2048 */
        double inv7 = 1.0 / pow(500000.0, 14.0 / 16.0);   /* wavelength > 8192: divided by 8 */
        CHECK(fabs(sn2[39 * 8 + 7] - sin(39 * inv7 / 8.0)) < 1e-6);
    }
    static const int shapes[][7] = { /* B, T, NH, NKV, hs, rot, interleaved */
        { 1, 1, 1, 1, 2, 2, 0 }, { 2, 5, 2, 2, 8, 8, 0 }, { 1, 7, 4, 2, 8, 8, 1 },
        { 2, 6, 3, 1, 12, 6, 0 }, { 1, 9, 2, 1, 16, 8, 1 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int B = shapes[s][0], T = shapes[s][1], NH = shapes[s][2], NKV = shapes[s][3], hs = shapes[s][4];
        int rot = shapes[s][5], inter = shapes[s][6];
        size_t row = ((size_t)NH + 2 * (size_t)NKV) * hs, n = (size_t)B * T * row;
        float *cs = fzeros((size_t)T * rot / 2), *sn = fzeros((size_t)T * rot / 2);
        rope_tables(cs, sn, T, rot, 10000.0, 0.0);
        float *x = frandv(n, 2.0f), *y = malloc(n * sizeof *y), *R = frandv(n, 1.0f);
        memcpy(y, x, n * sizeof *y);
        rope_forward_cpu(y, cs, sn, B, T, NH, NKV, hs, rot, inter);
        struct rope_ctx c = { B, T, NH, NKV, hs, rot, inter, todouble(x, n), cs, sn, R };
        double *ref = malloc(n * sizeof *ref);
        rope_ref(ref, &c);
        CHECK(close_enough("rope.out", y, ref, n, FWD_ATOL, FWD_RTOL) == 0);
        /* v and the channels past rot are untouched */
        int same = 1;
        for (int bt = 0; bt < B * T; bt++) {
            same &= memcmp(y + (size_t)bt * row + ((size_t)NH + NKV) * hs, x + (size_t)bt * row + ((size_t)NH + NKV) * hs,
                           (size_t)NKV * hs * sizeof(float)) == 0;
            for (int h = 0; h < NH + NKV; h++)
                same &= memcmp(y + (size_t)bt * row + (size_t)h * hs + rot, x + (size_t)bt * row + (size_t)h * hs + rot,
                               (size_t)(hs - rot) * sizeof(float)) == 0;
        }
        CHECK(same);
        /* the backward is the gradient of sum(R * rope(x)) */
        float *g = malloc(n * sizeof *g);
        memcpy(g, R, n * sizeof *g);
        rope_backward_cpu(g, cs, sn, B, T, NH, NKV, hs, rot, inter);
        CHECK(grad_check("rope.x", rope_loss, &c, c.x, n, g) == 0);
        free(cs), free(sn), free(x), free(y), free(R), free(c.x), free(ref), free(g);
    }
}

/* ---- swiglu -------------------------------------------------------------------- */

struct swi_ctx {
    size_t N;
    int F;
    double *x;
    const float *R;
};

static double swi_loss(void *p)
{
    struct swi_ctx *c = p;
    double l = 0.0;
    for (size_t n = 0; n < c->N; n++)
        for (int i = 0; i < c->F; i++) {
            double g = c->x[n * 2 * c->F + i], u = c->x[n * 2 * c->F + c->F + i];
            l += g / (1.0 + exp(-g)) * u * c->R[n * c->F + i];
        }
    return l;
}

static void test_swiglu(void)
{
    static const int shapes[][2] = { { 1, 1 }, { 3, 5 }, { 7, 33 }, { 4, 64 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t N = (size_t)shapes[s][0];
        int F = shapes[s][1];
        size_t ni = N * 2 * F, no = N * F;
        float *x = frandv(ni, 5.0f), *out = fzeros(no), *R = frandv(no, 1.0f), *dx = fzeros(ni);
        swiglu_forward_cpu(out, x, N, F);
        double *ref = malloc(no * sizeof *ref);
        for (size_t n = 0; n < N; n++)
            for (int i = 0; i < F; i++) {
                double g = x[n * 2 * F + i], u = x[n * 2 * F + F + i];
                ref[n * F + i] = g / (1.0 + exp(-g)) * u;
            }
        CHECK(close_enough("swiglu.out", out, ref, no, FWD_ATOL, FWD_RTOL) == 0);
        struct swi_ctx c = { N, F, todouble(x, ni), R };
        swiglu_backward_cpu(dx, x, R, N, F);
        CHECK(grad_check("swiglu.x", swi_loss, &c, c.x, ni, dx) == 0);
        free(x), free(out), free(R), free(dx), free(ref), free(c.x);
    }
}

/* ---- gelu and residual --------------------------------------------------- */

struct ew_ctx {
    size_t N;
    double *x, *y; /* y: the second residual input */
    const float *R;
};

static double gelu_ref(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

static double gelu_loss(void *p)
{
    struct ew_ctx *c = p;
    double l = 0.0;
    for (size_t i = 0; i < c->N; i++)
        l += gelu_ref(c->x[i]) * c->R[i];
    return l;
}

static double residual_loss(void *p)
{
    struct ew_ctx *c = p;
    double l = 0.0;
    for (size_t i = 0; i < c->N; i++)
        l += (c->x[i] + c->y[i]) * c->R[i];
    return l;
}

static void test_gelu(void)
{
    size_t N = 101;
    float *x = frandv(N, 6.0f), *out = fzeros(N), *R = frandv(N, 1.0f), *dx = fzeros(N);
    x[0] = 0.0f;
    gelu_forward_cpu(out, x, N);
    double *ref = malloc(N * sizeof *ref);
    for (size_t i = 0; i < N; i++)
        ref[i] = gelu_ref(x[i]);
    CHECK(close_enough("gelu.out", out, ref, N, FWD_ATOL, FWD_RTOL) == 0);
    CHECK(out[0] == 0.0f);
    struct ew_ctx c = { N, todouble(x, N), NULL, R };
    gelu_backward_cpu(dx, x, R, N);
    CHECK(grad_check("gelu", gelu_loss, &c, c.x, N, dx) == 0);
    /* Known values of the tanh form (computed in double): GELU(1), GELU(-2). */
    float k[2] = { 1.0f, -2.0f }, ko[2];
    gelu_forward_cpu(ko, k, 2);
    CHECK(fabs(ko[0] - 0.8411919906082768) < 1e-6 && fabs(ko[1] - -0.04540230591222) < 1e-6);
    free(x), free(out), free(R), free(dx), free(ref), free(c.x);
}

static void test_residual(void)
{
    size_t N = 77;
    float *a = frandv(N, 1.0f), *b = frandv(N, 1.0f), *out = fzeros(N), *R = frandv(N, 1.0f);
    float *da = fzeros(N), *db = fzeros(N);
    residual_forward_cpu(out, a, b, N);
    int exact = 1;
    for (size_t i = 0; i < N; i++)
        exact &= out[i] == a[i] + b[i];
    CHECK(exact);
    struct ew_ctx c = { N, todouble(a, N), todouble(b, N), R };
    residual_backward_cpu(da, db, R, N);
    CHECK(grad_check("residual.inp1", residual_loss, &c, c.x, N, da) == 0);
    CHECK(grad_check("residual.inp2", residual_loss, &c, c.y, N, db) == 0);
    free(a), free(b), free(out), free(R), free(da), free(db), free(c.x), free(c.y);
}

/* ---- crossentropy -------------------------------------------------------- */

struct ce_ctx {
    int B, T, V;
    double *logits;
    const int *targets;
    const float *mask, *dlosses;
};

static void ce_ref(double *losses, const struct ce_ctx *c)
{
    for (int bt = 0; bt < c->B * c->T; bt++) {
        const double *l = c->logits + (size_t)bt * c->V;
        double mx = -INFINITY, s = 0.0;
        for (int v = 0; v < c->V; v++)
            mx = l[v] > mx ? l[v] : mx;
        for (int v = 0; v < c->V; v++)
            s += exp(l[v] - mx);
        losses[bt] = c->mask[bt] == 0.0f ? 0.0 : log(s) + mx - l[c->targets[bt]];
    }
}

static double ce_loss(void *p)
{
    struct ce_ctx *c = p;
    size_t n = (size_t)c->B * c->T;
    double *l = malloc(n * sizeof *l);
    ce_ref(l, c);
    double s = dotd(l, c->dlosses, n);
    free(l);
    return s;
}

static void test_crossentropy(void)
{
    static const int shapes[][3] = { { 1, 1, 1 }, { 2, 3, 5 }, { 2, 4, 50 }, { 1, 6, 129 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int B = shapes[s][0], T = shapes[s][1], V = shapes[s][2];
        size_t n = (size_t)B * T, nl = n * V;
        float *logits = frandv(nl, 4.0f), *mask = fzeros(n), *dlosses = fzeros(n);
        int *targets = malloc(n * sizeof *targets), *tref = malloc(n * sizeof *tref);
        double msum = 0.0;
        for (size_t i = 0; i < n; i++) {
            mask[i] = i == 0 || irand(4) ? 1.0f : 0.0f;
            tref[i] = irand(V);
            targets[i] = mask[i] != 0.0f ? tref[i] : -1; /* masked: out of range */
            msum += mask[i];
        }
        for (size_t i = 0; i < n; i++)
            dlosses[i] = (float)(mask[i] / msum); /* Megatron's masked mean */
        float *losses = fzeros(n), *maxes = fzeros(n), *sumexp = fzeros(n), *tl = fzeros(n);
        crossentropy_forward_cpu(losses, maxes, sumexp, tl, logits, targets, mask, B, T, V, 0);
        struct ce_ctx c = { B, T, V, todouble(logits, nl), tref, mask, dlosses };
        double *ref = malloc(n * sizeof *ref);
        ce_ref(ref, &c);
        CHECK(close_enough("crossentropy.losses", losses, ref, n, FWD_ATOL, FWD_RTOL) == 0);

        float *dlogits = fzeros(nl);
        crossentropy_backward_cpu(dlogits, logits, maxes, sumexp, targets, dlosses, B, T, V, 0);
        CHECK(grad_check("ce.logits", ce_loss, &c, c.logits, nl, dlogits) == 0);
        /* In place gives the same bits. */
        float *inplace = malloc(nl * sizeof *inplace);
        memcpy(inplace, logits, nl * sizeof *inplace);
        crossentropy_backward_cpu(inplace, inplace, maxes, sumexp, targets, dlosses, B, T, V, 0);
        CHECK(bitwise_equal("crossentropy.inplace", inplace, dlogits, nl));

        /* Vocab-parallel over 3 uneven shards, through the protocol of
         * kernels.h with the all-reduces done here in rank order. */
        if (V >= 3) {
            int cut[4] = { 0, V / 3, V / 3 + V / 2 - V / 6, V };
            float *m[3], *se[3], *t3[3], *lg[3], gmax[64], sum_se[64], sum_tl[64], l3[64];
            CHECK(n <= 64);
            for (int r = 0; r < 3; r++) {
                int Vr = cut[r + 1] - cut[r];
                m[r] = fzeros(n), se[r] = fzeros(n), t3[r] = fzeros(n), lg[r] = fzeros(n * Vr);
                for (size_t bt = 0; bt < n; bt++)
                    memcpy(lg[r] + bt * Vr, logits + bt * V + cut[r], (size_t)Vr * sizeof(float));
                float *junk = fzeros(n);
                crossentropy_forward_cpu(junk, m[r], se[r], t3[r], lg[r], targets, mask, B, T, Vr, cut[r]);
                free(junk);
            }
            for (size_t bt = 0; bt < n; bt++) {
                gmax[bt] = m[0][bt];
                for (int r = 1; r < 3; r++)
                    gmax[bt] = m[r][bt] > gmax[bt] ? m[r][bt] : gmax[bt];
            }
            for (int r = 0; r < 3; r++)
                crossentropy_rescale_cpu(se[r], m[r], gmax, B, T);
            for (size_t bt = 0; bt < n; bt++) {
                sum_se[bt] = se[0][bt] + se[1][bt] + se[2][bt];
                sum_tl[bt] = t3[0][bt] + t3[1][bt] + t3[2][bt];
            }
            crossentropy_loss_cpu(l3, gmax, sum_se, sum_tl, mask, B, T);
            CHECK(close_enough("crossentropy.vocab_parallel", l3, ref, n, FWD_ATOL, FWD_RTOL) == 0);
            for (int r = 0; r < 3; r++) {
                int Vr = cut[r + 1] - cut[r];
                float *d = fzeros(n * Vr);
                double *want = malloc(n * Vr * sizeof *want);
                crossentropy_backward_cpu(d, lg[r], gmax, sum_se, targets, dlosses, B, T, Vr, cut[r]);
                for (size_t bt = 0; bt < n; bt++)
                    for (int v = 0; v < Vr; v++)
                        want[bt * Vr + v] = dlogits[bt * V + cut[r] + v];
                CHECK(close_enough("crossentropy.vp_dlogits", d, want, n * Vr, 1e-7, FWD_RTOL) == 0);
                free(d), free(want), free(m[r]), free(se[r]), free(t3[r]), free(lg[r]);
            }
        }
        free(logits), free(mask), free(dlosses), free(targets), free(tref), free(losses);
        free(maxes), free(sumexp), free(tl), free(c.logits), free(ref), free(dlogits), free(inplace);
    }
    /* Uniform logits: the loss is log V. */
    float u[8] = { 0 }, lo, mx, se, tl, ml = 1.0f;
    int tg = 3;
    crossentropy_forward_cpu(&lo, &mx, &se, &tl, u, &tg, &ml, 1, 1, 8, 0);
    CHECK(fabsf(lo - logf(8.0f)) < 1e-6f);
}

/* ---- adamw --------------------------------------------------------------- */

static void test_adamw(void)
{
    /* By hand, t = 1 from m = v = 0, p = 1, g = 0.5, lr 0.1, betas 0.9/0.999,
     * wd 0.01: m = 0.05, v = 0.00025, m_hat = 0.5, v_hat = 0.25,
     * update = 0.5 / (0.5 + 1e-8) + 0.01 * 1 = 1.00999998,
     * p = 1 - 0.1 * 1.00999998 = 0.899000002. */
    float p = 1.0f, m = 0.0f, v = 0.0f, g = 0.5f;
    adamw_update_cpu(&p, &m, &v, &g, 1, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f);
    /* 1 - beta in float is off by up to 5e-5 relative (1 - 0.999f). */
    CHECK(fabsf(m - 0.05f) < 0.05f * 1e-6f);
    CHECK(fabsf(v - 0.00025f) < 0.00025f * 1e-4f);
    CHECK(fabsf(p - 0.899f) < 1e-6f);
    /* Zero gradient, fresh state: only the decoupled decay acts. */
    p = 2.0f, m = 0.0f, v = 0.0f, g = 0.0f;
    adamw_update_cpu(&p, &m, &v, &g, 1, 1, 0.1f, 0.9f, 0.95f, 1e-8f, 0.5f, 1.0f);
    CHECK(p == 2.0f - 0.1f * (0.5f * 2.0f));

    /* 5 steps on a vector against the same formulas in double. */
    size_t N = 33;
    float *pf = frandv(N, 1.0f), *mf = fzeros(N), *vf = fzeros(N);
    double *pd = todouble(pf, N), *md = calloc(N, sizeof *md), *vd = calloc(N, sizeof *vd);
    const double lr = 3e-3, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, gs = 0.5;
    for (int t = 1; t <= 5; t++) {
        float *gr = frandv(N, 1.0f);
        adamw_update_cpu(pf, mf, vf, gr, N, t, (float)lr, (float)b1, (float)b2, (float)eps,
                         (float)wd, (float)gs);
        for (size_t i = 0; i < N; i++) {
            double gg = gr[i] * gs;
            md[i] = b1 * md[i] + (1 - b1) * gg;
            vd[i] = b2 * vd[i] + (1 - b2) * gg * gg;
            double mh = md[i] / (1 - pow(b1, t)), vh = vd[i] / (1 - pow(b2, t));
            pd[i] -= lr * (mh / (sqrt(vh) + eps) + wd * pd[i]);
        }
        free(gr);
    }
    CHECK(close_enough("adamw.params", pf, pd, N, 1e-6, 1e-5) == 0);
    free(pf), free(mf), free(vf), free(pd), free(md), free(vd);
}

/* ---- global norm --------------------------------------------------------- */

static void test_global_norm(void)
{
    static const size_t sizes[] = { 0, 1, 5, 63, 64, 65, 1000, 4099 };
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t N = sizes[s];
        float *x = frandv(N, 3.0f);
        double got = -1.0, want = 0.0;
        for (size_t i = 0; i < N; i++)
            want += (double)x[i] * x[i];
        global_norm_squared_cpu(&got, x, N);
        CHECK(fabs(got - want) <= 1e-12 * want);
        free(x);
    }
    CHECK(global_norm_clip_scale(0.5f, 1.0f) == 1.0f);
    CHECK(global_norm_clip_scale(4.0f, 1.0f) == 1.0f / (4.0f + 1e-6f));
    CHECK(global_norm_clip_scale(100.0f, 0.0f) == 1.0f);
}

/* ---- determinism across thread counts ------------------------------------ */

#ifdef _OPENMP
enum { DB = 2, DT = 16, DC = 48, DNH = 3, DOC = 40, DV = 300 };

struct det_run {
    float enc[DB * DT * DC], dwte[DV * DC], dwpe[DT * DC];
    float ln[DB * DT * DC], mean[DB * DT], rstd[DB * DT], lndx[DB * DT * DC], lndw[DC], lndb[DC];
    float mm[DB * DT * DOC], mmdx[DB * DT * DC], mmdw[DOC * DC], mmdb[DOC];
    float att[DB * DT * DC], lse[DB * DNH * DT], dqkv[DB * DT * 3 * DC];
    float gatt[DB * DT * DC], glse[DB * DNH * DT], gdqkv[DB * DT * 3 * DC];
    float rms[DB * DT * DC], rrstd[DB * DT], rmsdx[DB * DT * DC], rmsdw[DC], rope[DB * DT * 3 * DC];
    float swi[DB * DT * DC / 2], dswi[DB * DT * DC];
    float ce[DB * DT], cemax[DB * DT], cese[DB * DT], cetl[DB * DT], dlogits[DB * DT * DV];
    float gelu[DB * DT * DC], dgelu[DB * DT * DC], adam[DOC * DC];
    double norm;
};

static void det_all(struct det_run *r, const int *tok, const float *wte, const float *wpe,
                    const float *x, const float *w, const float *b, const float *qkv,
                    const float *logits, const float *dout)
{
    memset(r, 0, sizeof *r);
    encoder_forward_cpu(r->enc, tok, wte, wpe, DB, DT, DC, DV, 0);
    encoder_backward_cpu(r->dwte, r->dwpe, dout, tok, DB, DT, DC, DV, 0);
    layernorm_forward_cpu(r->ln, r->mean, r->rstd, x, w, b, DB, DT, DC, LN_EPS);
    layernorm_backward_cpu(r->lndx, r->lndw, r->lndb, dout, x, w, r->mean, r->rstd, DB, DT, DC);
    matmul_forward_cpu(r->mm, x, wte, b, DB, DT, DC, DOC);
    matmul_backward_cpu(r->mmdx, r->mmdw, r->mmdb, logits, x, wte, DB, DT, DC, DOC);
    attention_forward_cpu(r->att, r->lse, qkv, DB, DT, DC, DNH, DNH, NODROP);
    attention_backward_cpu(r->dqkv, dout, qkv, r->att, r->lse, DB, DT, DC, DNH, DNH, NODROP);
    /* grouped-query (NKV = 1) over the same buffer's first C + 2 hs columns */
    attention_forward_cpu(r->gatt, r->glse, qkv, DB, DT, DC, DNH, 1, NODROP);
    attention_backward_cpu(r->gdqkv, dout, qkv, r->gatt, r->glse, DB, DT, DC, DNH, 1, NODROP);
    rmsnorm_forward_cpu(r->rms, r->rrstd, x, w, DB, DT, DC, LN_EPS);
    rmsnorm_backward_cpu(r->rmsdx, r->rmsdw, dout, x, w, r->rrstd, DB, DT, DC);
    memcpy(r->rope, qkv, sizeof r->rope);
    float cs[DT * 4], sn[DT * 4];
    rope_tables(cs, sn, DT, 8, 10000.0, 0.0);
    rope_forward_cpu(r->rope, cs, sn, DB, DT, DNH, DNH, DC / DNH, 8, 0);
    rope_backward_cpu(r->rope, cs, sn, DB, DT, DNH, DNH, DC / DNH, 8, 1);
    swiglu_forward_cpu(r->swi, x, (size_t)DB * DT / 2, DC);
    swiglu_backward_cpu(r->dswi, x, dout, (size_t)DB * DT / 2, DC);
    crossentropy_forward_cpu(r->ce, r->cemax, r->cese, r->cetl, logits, tok, NULL, DB, DT, DV, 0);
    crossentropy_backward_cpu(r->dlogits, logits, r->cemax, r->cese, tok, w, DB, DT, DV, 0);
    gelu_forward_cpu(r->gelu, x, (size_t)DB * DT * DC);
    gelu_backward_cpu(r->dgelu, x, dout, (size_t)DB * DT * DC);
    memcpy(r->adam, wte, sizeof r->adam);
    float *m = fzeros(DOC * DC), *v = fzeros(DOC * DC);
    adamw_update_cpu(r->adam, m, v, logits, DOC * DC, 1, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f);
    free(m), free(v);
    global_norm_squared_cpu(&r->norm, logits, (size_t)DB * DT * DV);
}

#endif

static void test_threads_deterministic(void)
{
#ifdef _OPENMP
    int *tok = malloc(DB * DT * sizeof *tok);
    for (int i = 0; i < DB * DT; i++)
        tok[i] = irand(DV);
    float *wte = frandv(DV * DC, 1.0f), *wpe = frandv(DT * DC, 1.0f), *x = frandv(DB * DT * DC, 2.0f);
    float *w = frandv(DC, 1.0f), *b = frandv(DC, 1.0f), *qkv = frandv(DB * DT * 3 * DC, 2.0f);
    float *logits = frandv(DB * DT * DV, 4.0f), *dout = frandv(DB * DT * DC, 1.0f);
    struct det_run *r1 = malloc(sizeof *r1), *r3 = malloc(sizeof *r3);
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    det_all(r1, tok, wte, wpe, x, w, b, qkv, logits, dout);
    for (int nt = 2; nt <= 3; nt++) {
        omp_set_num_threads(nt);
        det_all(r3, tok, wte, wpe, x, w, b, qkv, logits, dout);
        CHECK(memcmp(r1, r3, sizeof *r1) == 0);
    }
    omp_set_num_threads(saved);
    free(tok), free(wte), free(wpe), free(x), free(w), free(b), free(qkv), free(logits), free(dout);
    free(r1), free(r3);
#else
    printf("# test_threads_deterministic: built without OpenMP, nothing to compare\n");
#endif
}

int main(int argc, char **argv)
{
    seed = (uint64_t)time(NULL) ^ (uint64_t)getpid() << 16;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-s") == 0 && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 0);
        else {
            fprintf(stderr, "usage: test_kernels [-s SEED]\n");
            return 2;
        }
    }
    printf("# seed = %llu (replay with -s %llu)\n", (unsigned long long)seed, (unsigned long long)seed);
    rng_state = seed;
    RUN(test_encoder);
    RUN(test_layernorm);
    RUN(test_matmul);
    RUN(test_matmul_blocked);
    RUN(test_attention);
    RUN(test_attention_gqa);
    RUN(test_dropout);
    RUN(test_rmsnorm);
    RUN(test_rope);
    RUN(test_swiglu);
    RUN(test_gelu);
    RUN(test_residual);
    RUN(test_crossentropy);
    RUN(test_adamw);
    RUN(test_global_norm);
    RUN(test_threads_deterministic);
    printf("# worst error / tolerance: forward %.3f, gradient %.3f\n", worst_fwd, worst_grad);
    return harness_report();
}
