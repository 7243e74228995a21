/*
 * fuzz_safetensors.c - fuzz target for the safetensors reader
 * (train/safetensors.h) and the JSON scanner under it (train/hfjson.h):
 * any bytes are refused with a known code or accepted with every tensor
 * inside the input.  Invariants that abort() when broken:
 *   - the result is ST_OK or ST_ERR_FORMAT (no I/O here; inputs are small);
 *   - an accepted file's tensors tile its data exactly: sorted by offset
 *     they start at 0, follow one another and end at the end of the input,
 *     each of numel x dtype size bytes, with a unique name found by st_find;
 *   - every tensor converts to fp32 (st_read_f32 reads only its bytes);
 *   - parsing twice gives the same verdict (no hidden state);
 *   - the header, walked again as generic JSON with hfjson's iterators,
 *     never hands back a span outside the input.
 * Not covered: the writer (tests/cli/test_hf.sh round-trips it), I/O errors.
 */
#include "hfjson.h"
#include "safetensors.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die(const char *what)
{
    fprintf(stderr, "fuzz_safetensors: %s\n", what);
    abort();
}

static const uint8_t *g_data;
static size_t g_size;

static void check_span(const hj_value *v)
{
    if (v->start && ((const uint8_t *)v->start < g_data || (const uint8_t *)v->start + v->len > g_data + g_size))
        die("a JSON span outside the input");
}

/* Walk every value, nested ones too, decoding strings. */
static void walk(const hj_value *v, int depth)
{
    char buf[512];
    check_span(v);
    if (v->type == HJ_STRING) (void)hj_string(v, buf, sizeof buf);
    if (depth > 70) die("nesting deeper than the scanner allows");
    hj_iter it;
    hj_value c;
    if (v->type == HJ_OBJECT) {
        hj_object_begin(&it, v->start, v->len);
        while (hj_object_next(&it, buf, sizeof buf, &c) == 1) walk(&c, depth + 1);
    } else if (v->type == HJ_ARRAY) {
        hj_array_begin(&it, v->start, v->len);
        while (hj_array_next(&it, &c) == 1) walk(&c, depth + 1);
    }
}

static int cmp_begin(const void *a, const void *b)
{
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    g_data = data;
    g_size = size;
    char err[512];
    st_file *f = NULL;
    int rc = st_parse(data, size, "fuzz", &f, err, sizeof err);
    if (rc != ST_OK && rc != ST_ERR_FORMAT && rc != ST_ERR_NOMEM) die("unknown error code");
    if (rc != ST_OK && (!err[0] || strchr(err, '\n'))) die("an error without a one-line message");
    st_file *g = NULL;
    if ((st_parse(data, size, "fuzz", &g, err, sizeof err) == ST_OK) != (rc == ST_OK)) die("two parses disagree");
    st_close(g);
    if (size >= 8) {
        uint64_t n = 0;
        for (int i = 0; i < 8; i++) n |= (uint64_t)data[i] << (8 * i);
        if (n <= size - 8) {
            hj_iter it;
            hj_value v;
            char key[256];
            if (hj_object_begin(&it, (const char *)data + 8, (size_t)n) == 0)
                while (hj_object_next(&it, key, sizeof key, &v) == 1) walk(&v, 1);
        }
    }
    if (rc != ST_OK) return 0;
    size_t nt = st_count(f), hdr = 8;
    for (int i = 0; i < 8; i++) hdr += (size_t)data[i] << (8 * i);
    const st_tensor **order = malloc((nt ? nt : 1) * sizeof *order);
    if (!order) return 0;
    for (size_t i = 0; i < nt; i++) {
        const st_tensor *t = st_at(f, i);
        order[i] = t;
        if (st_find(f, t->name) != t) die("a name that st_find does not give back");
        uint64_t esz = t->dtype == ST_F32 ? 4 : 2;
        if (t->end - t->begin != t->numel * esz) die("a tensor's bytes do not match its shape");
        uint64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) numel *= t->shape[d];
        if (numel != t->numel) die("numel is not the product of the shape");
        if (t->numel <= ((size_t)1 << 20)) {
            float *x = malloc((t->numel ? t->numel : 1) * sizeof(float));
            if (x) {
                st_read_f32(f, t, x);
                free(x);
            }
        }
    }
    qsort(order, nt, sizeof *order, cmp_begin);
    uint64_t at = 0;
    for (size_t i = 0; i < nt; i++) {
        if (order[i]->begin != at) die("tensors do not tile the data");
        at = order[i]->end;
    }
    if (hdr + at != size) die("the tensors do not end at the end of the input");
    free(order);
    st_close(f);
    return 0;
}
