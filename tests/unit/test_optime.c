/*
 * test_optime.c - kernels/optime.c, the op timing of mdstrain --op-times,
 * over the CPU backend: every op of the table is wrapped (a field the
 * wrapper missed would go untimed, or NULL where the backend has the op),
 * the wrapped ops give the inner ones' bits, the rows count the calls made
 * while counting is on (the matmuls per shape) and only those, and a second
 * wrap is refused.  (mdstrain's table end to end: tests/cli/test_train.sh.)
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

/* the report's row for name: its calls per iteration, or -1 */
static double row_calls(const char *report, const char *name)
{
    char key[80];
    snprintf(key, sizeof key, "\n %s ", name);
    const char *p = strstr(report, key);
    if (!p) return -1;
    p += strlen(key);
    while (*p == ' ') p++;
    return strtod(p, NULL);
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
    free(buf);
}

int main(void)
{
    timed = mds_optime_wrap(mds_backend_cpu());
    if (!timed) {
        printf("FAIL wrap\n");
        return 1;
    }
    RUN(test_every_op_wrapped);
    RUN(test_rows_and_bits);
    return harness_report();
}
