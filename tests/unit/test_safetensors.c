/*
 * test_safetensors.c - the safetensors reader and writer (train/safetensors.h):
 * the verdict and the message of every file of the fuzz corpus
 * (tests/fuzz/corpus/safetensors/, whose names say what each holds), the
 * F16 and BF16 conversions against hand-computed values, and a write / read
 * round trip.  Run from the repository root.
 */
#include "harness.h"
#include "safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CORPUS "tests/fuzz/corpus/safetensors/"

/* open CORPUS/name: the code, and the message in err */
static int open_case(const char *name, st_file **f, char *err, size_t errlen)
{
    char path[256];
    snprintf(path, sizeof path, CORPUS "%s", name);
    err[0] = 0;
    return st_open(path, f, err, errlen);
}

static void test_corpus_verdicts(void)
{
    static const struct { const char *name, *msg; } cases[] = {
        {"good-f32", NULL},
        {"good-f16-bf16-empty-scalar", NULL},
        {"escaped-name", NULL},
        {"truncated-length", "truncated header length (5 bytes)"},
        {"truncated-header", "truncated header (200 bytes announced, 56 in the file)"},
        {"huge-header-length", "is over 100 MB"},
        {"bad-json-trailing-comma", "header is not valid JSON (line 1, column 55: expected a string key)"},
        {"bad-json-garbage-after", "header is not valid JSON (line 1, column 3: trailing characters after the JSON value)"},
        {"not-an-object", "header is not a JSON object"},
        {"overlap", "tensor 'b' at data offset 4, expected 8 (overlap)"},
        {"gap", "tensor 'b' at data offset 8, expected 4 (gap)"},
        {"bad-dtype", "tensor 'a': dtype I64 is not supported (F32, F16 or BF16)"},
        {"wrong-size", "tensor 'a': 8 bytes for 3 F32 elements"},
        {"duplicate-name", "tensor 'a' appears twice"},
        {"trailing-bytes", "(trailing bytes)"},
        {"truncated-data", "tensors end at data offset 16 but the file holds 12 data bytes (truncated)"},
        {"offsets-reversed", "data_offsets is not [begin, end]"},
        {"shape-negative", "a dimension is not a non-negative integer"},
        {"shape-float", "a dimension is not a non-negative integer"},
        {"shape-huge", "shape too large"},
        {"deep-nesting", "header is not valid JSON (line 1, column 80: nested deeper than 64 levels)"},
        {"metadata-not-string", "__metadata__ 'a' is not a string"},
        {"missing-field", "tensor 'a': missing data_offsets"},
        {"unknown-field", "tensor 'a': unknown field 'x'"},
        {"lone-surrogate", "header is not valid JSON (line 1, column 4: lone trailing surrogate \\uDC00)"},
        {"control-char", "header is not valid JSON (line 1, column 4: control character in a string)"},
        {"empty", "truncated header length (0 bytes)"},
        {"newline-in-name", "tensor 'a?b': dtype I64 is not supported (F32, F16 or BF16)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        st_file *f = NULL;
        char err[512];
        int rc = open_case(cases[i].name, &f, err, sizeof err);
        if (cases[i].msg) {
            CHECK(rc == ST_ERR_FORMAT && f == NULL);
            if (!strstr(err, cases[i].msg) || !strstr(err, cases[i].name))
                fprintf(stderr, "%s: got '%s', want '%s'\n", cases[i].name, err, cases[i].msg);
            CHECK(strstr(err, cases[i].msg) != NULL);
            CHECK(strstr(err, cases[i].name) != NULL);   /* the file is named */
        } else {
            if (rc) fprintf(stderr, "%s: %s\n", cases[i].name, err);
            CHECK(rc == ST_OK);
        }
        st_close(f);
    }
}

static void test_conversions(void)
{
    st_file *f = NULL;
    char err[512];
    CHECK(open_case("good-f16-bf16-empty-scalar", &f, err, sizeof err) == 0);
    if (!f) return;
    CHECK(st_count(f) == 4);
    const st_tensor *h = st_find(f, "h"), *g = st_find(f, "g"), *e = st_find(f, "e"), *s = st_find(f, "s");
    CHECK(h && g && e && s && !st_find(f, "x"));
    if (!h || !g || !e || !s) { st_close(f); return; }
    float x[4];
    st_read_f32(f, h, x);
    CHECK(h->dtype == ST_F16 && h->numel == 4);
    CHECK(x[0] == 1.0f && x[1] == -2.5f && x[2] == ldexpf(1.0f, -24) && isinf(x[3]) && x[3] > 0);
    st_read_f32(f, g, x);
    CHECK(g->dtype == ST_BF16 && x[0] == 1.0f && x[1] == -2.5f);
    CHECK(e->ndim == 2 && e->numel == 0 && e->begin == e->end);
    CHECK(s->ndim == 0 && s->numel == 1);
    st_read_f32(f, s, x);
    CHECK(x[0] == 5.0f);
    const char *k = st_metadata(f, "k");
    CHECK(k && strcmp(k, "v\xc3\xa9\xf0\x9f\x98\x80") == 0);   /* \u00e9 and a surrogate pair, as UTF-8 */
    st_close(f);
    CHECK(open_case("escaped-name", &f, err, sizeof err) == 0);
    CHECK(f && st_find(f, "a\"b\\cA\n") != NULL);
    st_close(f);
}

static void test_write_read(void)
{
    char dir[] = "/tmp/mds-st.XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[128];
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    float a[6] = {1, 2, 3, 4, 5, 6}, b[2] = {-1.5f, 1e-30f};
    st_entry e[2] = { { "layer.0.w", a, 2, {2, 3} }, { "na\"me", b, 1, {2} } };
    char err[512];
    CHECK(st_write(path, e, 2, err, sizeof err) == 0);
    FILE *fp = fopen(path, "rb");
    unsigned char len[8] = {0};
    CHECK(fp && fread(len, 1, 8, fp) == 8);
    if (fp) fclose(fp);
    CHECK(len[0] % 8 == 0);   /* the header is padded to 8 bytes */
    st_file *f = NULL;
    CHECK(st_open(path, &f, err, sizeof err) == 0);
    if (f) {
        const st_tensor *t = st_find(f, "layer.0.w"), *u = st_find(f, "na\"me");
        CHECK(t && u && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 && t->dtype == ST_F32);
        CHECK(st_metadata(f, "format") && strcmp(st_metadata(f, "format"), "pt") == 0);
        float x[6];
        if (t) { st_read_f32(f, t, x); CHECK(memcmp(x, a, sizeof a) == 0); }
        if (u) { st_read_f32(f, u, x); CHECK(memcmp(x, b, sizeof b) == 0); }
        st_close(f);
    }
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0);   /* renamed, not left behind */
    CHECK(st_open("/nonexistent/m.safetensors", &f, err, sizeof err) == ST_ERR_IO && strstr(err, "cannot open"));
    remove(path);
    rmdir(dir);
}

int main(void)
{
    RUN(test_corpus_verdicts);
    RUN(test_conversions);
    RUN(test_write_read);
    return harness_report();
}
