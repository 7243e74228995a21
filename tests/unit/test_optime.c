/*
 * test_optime.c - kernels/optime.c, the op timing of mdstrain --op-times,
 * over the CPU backend: every op of the table is wrapped (a field the
 * wrapper missed would go untimed, or NULL where the backend has the op),
 * the wrapped ops give the inner ones' bits, the rows count the calls made
 * while counting is on (the matmuls per shape) and only those, with their
 * TFLOP/s from the flop counts (over a fake clock), and a second wrap is
 * refused.  (mdstrain's table end to end: tests/cli/test_train.sh.)
 */
#include "harness.h"
#include "backend.h"
#include "dtype.h"
#include "optime.h"

#include <stdlib.h>
#include <string.h>

typedef void (*any_fn)(void);

/* the op table as an array of function pointers (every field is one) */
static size_t ops_as_array(const mds_ops *o, any_fn *out)
{
    size_t n = sizeof *o / sizeof(any_fn);
    memcpy(out, o, n * sizeof(any_fn));
    return n;
}

static const mds_backend *timed;

static void test_every_op_wrapped(void)
{
    CHECK(sizeof(mds_ops) % sizeof(any_fn) == 0);
    any_fn a[128], b[128];
    CHECK(sizeof(mds_ops) / sizeof(any_fn) <= 128);
    size_t n = ops_as_array(&mds_backend_cpu()->ops, a);
    CHECK(ops_as_array(&timed->ops, b) == n);
    for (size_t i = 0; i < n; i++) {
        CHECK(a[i] != NULL);
        CHECK(b[i] != NULL && b[i] != a[i]);
        for (size_t j = 0; j < i; j++)
            CHECK(b[j] != b[i]);   /* each field its own wrapper */
    }
    CHECK(timed->sync != mds_backend_cpu()->sync);
    CHECK(timed->zero != mds_backend_cpu()->zero && timed->copy != mds_backend_cpu()->copy);
    CHECK(strcmp(timed->name, "cpu") == 0);
    CHECK(mds_optime_wrap(mds_backend_cpu()) == NULL);   /* one per process */
}

/* The report's line for name split into words: how many (at most 16) into
 * w, each at most 31 characters; 0 when there is no such line. */
static int row_words(const char *report, const char *name, char w[16][32])
{
    char key[80];
    snprintf(key, sizeof key, "\n %s ", name);
    const char *p = strstr(report, key);
    if (!p) return 0;
    p += 2 + strlen(name);
    int n = 0;
    while (*p && *p != '\n' && n < 16) {
        while (*p == ' ') p++;
        if (!*p || *p == '\n') break;
        size_t l = strcspn(p, " \n");
        snprintf(w[n++], 32, "%.*s", (int)(l < 31 ? l : 31), p);
        p += l;
    }
    return n;
}

/* The calls per iteration of name's row (the word three before its '%'),
 * or -1. */
static double row_calls(const char *report, const char *name)
{
    char w[16][32];
    int n = row_words(report, name, w);
    for (int i = 3; i < n; i++)
        if (strcmp(w[i], "%") == 0) return strtod(w[i - 3], NULL);
    return -1;
}

/* The TFLOP/s of name's row (the word before its calls), or -1 without. */
static double row_rate(const char *report, const char *name)
{
    char w[16][32];
    int n = row_words(report, name, w);
    return n == 5 ? strtod(w[0], NULL) : -1;
}

static void test_rows_and_bits(void)
{
    const mds_backend *cpu = mds_backend_cpu();
    enum { B = 2, T = 3, C = 8, OC = 4 };
    float inp[B * T * C], w[OC * C], bias[OC], out1[B * T * OC], out2[B * T * OC], g1[B * T * OC], g2[B * T * OC];
    for (int i = 0; i < B * T * C; i++) inp[i] = (float)((i * 37) % 11) * 0.25f - 1.0f;
    for (int i = 0; i < OC * C; i++) w[i] = (float)((i * 13) % 7) * 0.125f - 0.4f;
    for (int i = 0; i < OC; i++) bias[i] = 0.1f * (float)i;
    cpu->ops.matmul_forward(out1, MDS_F32, inp, MDS_F32, w, bias, B, T, C, OC);
    cpu->ops.gelu_forward(g1, MDS_F32, out1, MDS_F32, (size_t)B * T * OC);

    timed->ops.matmul_forward(out2, MDS_F32, inp, MDS_F32, w, bias, B, T, C, OC);   /* not counted */
    mds_optime_count(1);
    timed->ops.matmul_forward(out2, MDS_F32, inp, MDS_F32, w, bias, B, T, C, OC);
    timed->ops.matmul_forward(out2, MDS_F32, inp, MDS_F32, w, bias, B, T, C, OC);
    timed->ops.matmul_forward(out2, MDS_F32, inp, MDS_F32, w, NULL, B, T, OC, C / 2);   /* another shape */
    timed->ops.matmul_forward(out2, MDS_F32, inp, MDS_F32, w, bias, B, T, C, OC);
    timed->ops.gelu_forward(g2, MDS_F32, out2, MDS_F32, (size_t)B * T * OC);
    timed->zero(out1 + 0, 0);
    mds_optime_count(0);
    timed->ops.gelu_forward(g2, MDS_F32, out2, MDS_F32, (size_t)B * T * OC);   /* not counted */
    CHECK(timed->sync() == 0);
    CHECK(memcmp(out1, out2, sizeof out1) == 0);
    CHECK(memcmp(g1, g2, sizeof g1) == 0);

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(f != NULL);
    if (!f) return;
    mds_optime_report(f, "test", 2, 10.0);
    fclose(f);
    CHECK(strstr(buf, " test, 2 iterations:\n") == buf);
    CHECK(row_calls(buf, "matmul_forward 8 -> 4") == 1.5);   /* 3 calls over 2 iterations */
    CHECK(row_calls(buf, "matmul_forward 4 -> 4") == 0.5);
    CHECK(row_calls(buf, "gelu_forward") == 0.5);
    CHECK(row_calls(buf, "zero") == 0.5);
    CHECK(row_calls(buf, "every op") == 3.0);
    CHECK(row_calls(buf, "layernorm_forward") == -1);
    /* a tick an op: the 8 -> 4 linear's 2 B T C OC = 384 flops a tick are
       384 TFLOP/s, the 4 -> 4 one's 192; GELU has no products (no rate);
       6 ticks over 2 iterations are 3e-9 ms an iteration, 0.0 % of 10 ms */
    CHECK(row_rate(buf, "matmul_forward 8 -> 4") == 384.0);
    CHECK(row_rate(buf, "matmul_forward 4 -> 4") == 192.0);
    CHECK(row_rate(buf, "gelu_forward") == -1);
    char tot[16][32];
    CHECK(row_words(buf, "every op", tot) == 10);   /* calls, ms, share, "% of the wall clock's", 10.000, ms/iter */
    CHECK(strcmp(tot[1], "0.000") == 0 && strcmp(tot[2], "0.0") == 0 && strcmp(tot[8], "10.000") == 0);
    free(buf);
}

/* The CPU backend with a clock that ticks once a mark, a picosecond (1e-9
 * ms) a tick: each op takes exactly one tick, so the rows' times and the
 * TFLOP/s are known. */
static double ticks;
static int fake_mark_new(void **m)
{
    *m = malloc(sizeof(double));
    return *m ? 0 : -1;
}
static void fake_mark_take(void *m) { *(double *)m = ++ticks; }
static double fake_mark_ms(void *from, void *to) { return (*(double *)to - *(double *)from) * 1e-9; }
static void fake_mark_free(void *m) { free(m); }

int main(void)
{
    static mds_backend fake;
    fake = *mds_backend_cpu();
    fake.mark_new = fake_mark_new;
    fake.mark_take = fake_mark_take;
    fake.mark_ms = fake_mark_ms;
    fake.mark_free = fake_mark_free;
    timed = mds_optime_wrap(&fake);
    if (!timed) {
        printf("FAIL wrap\n");
        return 1;
    }
    RUN(test_every_op_wrapped);
    RUN(test_rows_and_bits);
    return harness_report();
}
