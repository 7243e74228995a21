/*
 * fuzz_safetensors.c - fuzz target for the safetensors reader
 * (train/safetensors.h) and the JSON reader under it (preprocess/jsontree.h):
 * any bytes are refused with a known code or accepted with every tensor
 * inside the input.  Invariants that abort() when broken:
 *   - the result is ST_OK or ST_ERR_FORMAT (no I/O here; inputs are small);
 *   - an accepted file's tensors tile its data exactly: sorted by offset
 *     they start at 0, follow one another and end at the end of the input,
 *     each of numel x dtype size bytes, with a unique name found by st_find;
 *   - every tensor converts to fp32 (st_read_f32 reads only its bytes);
 *   - parsing twice gives the same verdict (no hidden state);
 *   - the header, parsed again as generic JSON with the same depth bound,
 *     gives the same verdict as st_parse's JSON step, and its tree is well
 *     formed: strings terminated at their length, keys exactly inside
 *     objects, nesting within the bound.
 * Not covered: the writer (tests/cli/test_hf.sh round-trips it), I/O errors.
 */
#include "jsontree.h"
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

/* Walk every value, nested ones too. */
static void walk(const jt_node *v, int depth, int in_object)
{
    if (depth > 64) die("nesting deeper than the reader allows");
    if ((v->key != NULL) != in_object) die("a key outside an object, or a member without one");
    if (v->key && v->key[v->keylen] != 0) die("a key not terminated at its length");
    if (v->type == JT_STRING && v->str[v->len] != 0) die("a string not terminated at its length");
    if (v->type == JT_OBJECT || v->type == JT_ARRAY)
        for (size_t i = 0; i < v->len; i++) walk(&v->kids[i], depth + 1, v->type == JT_OBJECT);
}

static int cmp_begin(const void *a, const void *b)
{
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
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
            jt_doc *d = NULL;
            jt_err e;
            jt_options opt = { 64, 0 };
            if (jt_parse_opts(&d, (const char *)data + 8, (size_t)n, &opt, &e) == 0) walk(jt_root(d), 1, 0);
            else if (rc == ST_OK) die("st_parse accepted a header the JSON reader refuses");
            else if (strchr(e.why, '\n') || !e.line) die("a JSON error without a place or on two lines");
            jt_free(d);
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
