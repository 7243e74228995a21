/*
 * safetensors.c - the safetensors reader and writer of safetensors.h.  The
 * header is parsed with jsontree.h and checked completely (dtypes, shapes,
 * sizes, an exact tiling of the data) before st_open returns; tensor bytes
 * are only read by st_read_f32.  Little-endian hosts only.
 */
#include "safetensors.h"

#include "jsontree.h"
#include "le.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c reads and writes little-endian tensors as stored: little-endian hosts only"
#endif

#define MAX_HEADER (100u << 20)   /* the reference implementation's limit */
#define MAX_META 64
#define MAX_DEPTH 64              /* mds's bound (serde_json's is 128; no header nests past 3) */

struct st_file {
    unsigned char *owned;          /* the file's bytes when st_open read them */
    const unsigned char *data;     /* the tensor data (after the header) */
    size_t data_len;
    st_tensor *t;
    size_t n;
    char *meta_keys[MAX_META], *meta_vals[MAX_META];
    size_t nmeta;
};

#define FAIL(code, ...) do { if (err && errlen) snprintf(err, errlen, __VA_ARGS__); rc = (code); goto cleanup; } while (0)

const char *st_strerror(int code)
{
    switch (code) {
    case ST_OK: return "success";
    case ST_ERR_IO: return "input/output error";
    case ST_ERR_FORMAT: return "malformed safetensors file";
    case ST_ERR_NOMEM: return "out of memory";
    case ST_ERR_ARG: return "bad argument";
    default: return "unknown error";
    }
}

const char *st_dtype_name(int dtype)
{
    return dtype == ST_F32 ? "F32" : dtype == ST_F16 ? "F16" : dtype == ST_BF16 ? "BF16" : "?";
}

/* A non-negative integer literal up to 2^53 (shapes and offsets). */
static int as_u64(const jt_node *v, uint64_t *out)
{
    if (v->type != JT_NUMBER || !v->is_int || v->i < 0 || v->i > ((int64_t)1 << 53)) return -1;
    *out = (uint64_t)v->i;
    return 0;
}

static int cmp_begin(const void *a, const void *b)
{
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp((*(const st_tensor *const *)a)->name, (*(const st_tensor *const *)b)->name);
}

/* One tensor's entry {"dtype", "shape", "data_offsets"}. */
static int parse_entry(const char *fname, st_tensor *t, const jt_node *v, char *err, size_t errlen)
{
    int rc = 0, have_dtype = 0, have_shape = 0, have_off = 0;
    if (v->type != JT_OBJECT) FAIL(ST_ERR_FORMAT, "'%s': tensor '%s': entry is not an object", fname, t->name);
    for (size_t i = 0; i < v->len; i++) {
        const jt_node *m = &v->kids[i];
        if (strcmp(m->key, "dtype") == 0) {
            const char *d = jt_str(m);
            if (!d || m->len >= 16)
                FAIL(ST_ERR_FORMAT, "'%s': tensor '%s': dtype is not a short string", fname, t->name);
            if (strcmp(d, "F32") == 0) t->dtype = ST_F32;
            else if (strcmp(d, "F16") == 0) t->dtype = ST_F16;
            else if (strcmp(d, "BF16") == 0) t->dtype = ST_BF16;
            else FAIL(ST_ERR_FORMAT, "'%s': tensor '%s': dtype %s is not supported (F32, F16 or BF16)", fname, t->name, d);
            have_dtype = 1;
        } else if (strcmp(m->key, "shape") == 0) {
            if (m->type != JT_ARRAY) FAIL(ST_ERR_FORMAT, "'%s': tensor '%s': shape is not an array", fname, t->name);
            t->ndim = 0;
            t->numel = 1;
            for (size_t k = 0; k < m->len; k++) {
                uint64_t d;
                if (t->ndim == ST_MAX_DIMS) FAIL(ST_ERR_FORMAT, "'%s': tensor '%s': more than %d dimensions", fname, t->name, ST_MAX_DIMS);
                if (as_u64(&m->kids[k], &d) != 0) FAIL(ST_ERR_FORMAT, "'%s': tensor '%s': a dimension is not a non-negative integer", fname, t->name);
                if (d && t->numel > (UINT64_MAX >> 2) / d)
                    FAIL(ST_ERR_FORMAT, "'%s': tensor '%s': shape too large", fname, t->name);
                t->numel *= d;
                t->shape[t->ndim++] = d;
            }
            have_shape = 1;
        } else if (strcmp(m->key, "data_offsets") == 0) {
            if (m->type != JT_ARRAY) FAIL(ST_ERR_FORMAT, "'%s': tensor '%s': data_offsets is not an array", fname, t->name);
            if (m->len != 2 || as_u64(&m->kids[0], &t->begin) || as_u64(&m->kids[1], &t->end) || t->end < t->begin)
                FAIL(ST_ERR_FORMAT, "'%s': tensor '%s': data_offsets is not [begin, end]", fname, t->name);
            have_off = 1;
        } else {
            FAIL(ST_ERR_FORMAT, "'%s': tensor '%s': unknown field '%s'", fname, t->name, m->key);
        }
    }
    if (!have_dtype || !have_shape || !have_off)
        FAIL(ST_ERR_FORMAT, "'%s': tensor '%s': missing %s", fname, t->name,
             !have_dtype ? "dtype" : !have_shape ? "shape" : "data_offsets");
    uint64_t esz = t->dtype == ST_F32 ? 4 : 2;
    if (t->end - t->begin != t->numel * esz)
        FAIL(ST_ERR_FORMAT, "'%s': tensor '%s': %llu bytes for %llu %s elements", fname, t->name,
             (unsigned long long)(t->end - t->begin), (unsigned long long)t->numel, st_dtype_name(t->dtype));
cleanup:
    return rc;
}

static int parse_metadata(const char *fname, st_file *f, const jt_node *v, char *err, size_t errlen)
{
    int rc = 0;
    if (v->type != JT_OBJECT) FAIL(ST_ERR_FORMAT, "'%s': __metadata__ is not an object", fname);
    for (size_t i = 0; i < v->len; i++) {
        const jt_node *m = &v->kids[i];
        if (m->type != JT_STRING) FAIL(ST_ERR_FORMAT, "'%s': __metadata__ '%s' is not a string", fname, m->key);
        if (!jt_str(m)) FAIL(ST_ERR_FORMAT, "'%s': __metadata__ '%s' holds a NUL", fname, m->key);
        if (f->nmeta == MAX_META) continue;   /* more than we look at: ignored */
        char *val = strdup(m->str), *k = strdup(m->key);
        if (!val || !k) { free(val); free(k); FAIL(ST_ERR_NOMEM, "'%s': out of memory", fname); }
        f->meta_keys[f->nmeta] = k;
        f->meta_vals[f->nmeta++] = val;
    }
cleanup:
    return rc;
}

int st_parse(const unsigned char *data, size_t size, const char *name, st_file **out, char *err, size_t errlen)
{
    int rc = 0, r;
    st_file *f = calloc(1, sizeof *f);
    const st_tensor **order = NULL;
    jt_doc *doc = NULL;
    *out = NULL;
    if (!f) FAIL(ST_ERR_NOMEM, "'%s': out of memory", name);
    if (size < 8) FAIL(ST_ERR_FORMAT, "'%s': truncated header length (%zu bytes)", name, size);
    uint64_t hn = le_get64(data);
    if (hn > MAX_HEADER) FAIL(ST_ERR_FORMAT, "'%s': header length %llu is over 100 MB", name, (unsigned long long)hn);
    if (hn > size - 8)
        FAIL(ST_ERR_FORMAT, "'%s': truncated header (%llu bytes announced, %zu in the file)", name,
             (unsigned long long)hn, size - 8);
    const char *h = (const char *)data + 8;
    f->data = data + 8 + hn;
    f->data_len = size - 8 - (size_t)hn;
    jt_options opt = { MAX_DEPTH, 0 };
    jt_err je;
    if ((r = jt_parse_opts(&doc, h, (size_t)hn, &opt, &je)) == JT_ERR_NOMEM)
        FAIL(ST_ERR_NOMEM, "'%s': out of memory for the header", name);
    if (r) FAIL(ST_ERR_FORMAT, "'%s': header is not valid JSON (line %u, column %u: %s)", name, (unsigned)je.line,
                (unsigned)je.col, je.why);
    const jt_node *root = jt_root(doc);
    if (root->type != JT_OBJECT) FAIL(ST_ERR_FORMAT, "'%s': header is not a JSON object", name);
    f->t = calloc(root->len ? root->len : 1, sizeof *f->t);
    order = malloc((root->len ? root->len : 1) * sizeof *order);
    if (!f->t || !order) FAIL(ST_ERR_NOMEM, "'%s': out of memory for %zu tensors", name, root->len);
    for (size_t i = 0; i < root->len; i++) {
        const jt_node *v = &root->kids[i];
        if (strlen(v->key) != v->keylen) FAIL(ST_ERR_FORMAT, "'%s': a tensor name holds a NUL", name);
        if (v->keylen >= ST_MAX_NAME)
            FAIL(ST_ERR_FORMAT, "'%s': a tensor name of %zu bytes is over %d", name, v->keylen, ST_MAX_NAME - 1);
        if (strcmp(v->key, "__metadata__") == 0) {
            if ((rc = parse_metadata(name, f, v, err, errlen)) != 0) goto cleanup;
            continue;
        }
        st_tensor *t = &f->t[f->n];
        memcpy(t->name, v->key, v->keylen + 1);
        if ((rc = parse_entry(name, t, v, err, errlen)) != 0) goto cleanup;
        order[f->n] = t;
        f->n++;
    }
    qsort(order, f->n, sizeof *order, cmp_name);
    for (size_t i = 1; i < f->n; i++)
        if (strcmp(order[i - 1]->name, order[i]->name) == 0)
            FAIL(ST_ERR_FORMAT, "'%s': tensor '%s' appears twice", name, order[i]->name);
    qsort(order, f->n, sizeof *order, cmp_begin);
    uint64_t at = 0;
    for (size_t i = 0; i < f->n; i++) {
        const st_tensor *t = order[i];
        if (t->begin != at)
            FAIL(ST_ERR_FORMAT, "'%s': tensor '%s' at data offset %llu, expected %llu (%s)", name, t->name,
                 (unsigned long long)t->begin, (unsigned long long)at, t->begin < at ? "overlap" : "gap");
        at = t->end;
    }
    if (at != f->data_len)
        FAIL(ST_ERR_FORMAT, "'%s': tensors end at data offset %llu but the file holds %zu data bytes (%s)", name,
             (unsigned long long)at, f->data_len, at > f->data_len ? "truncated" : "trailing bytes");
cleanup:
    free(order);
    jt_free(doc);
    /* a name may hold any character: its control characters are shown as '?' to keep the message one line */
    for (char *q = err; rc && errlen && *q; q++)
        if ((unsigned char)*q < 0x20) *q = '?';
    if (rc) st_close(f);
    else *out = f;
    return rc;
}

int st_open(const char *path, st_file **out, char *err, size_t errlen)
{
    int rc = 0;
    unsigned char *buf = NULL;
    FILE *fp = fopen(path, "rb");
    struct stat sb;
    *out = NULL;
    if (!fp) FAIL(ST_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    if (fstat(fileno(fp), &sb) != 0) FAIL(ST_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    size_t size = (size_t)sb.st_size;
    buf = malloc(size ? size : 1);
    if (!buf) FAIL(ST_ERR_NOMEM, "cannot read '%s': out of memory (%zu bytes)", path, size);
    if (fread(buf, 1, size, fp) != size) FAIL(ST_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    if ((rc = st_parse(buf, size, path, out, err, errlen)) != 0) goto cleanup;
    (*out)->owned = buf;
    buf = NULL;
cleanup:
    free(buf);
    if (fp) fclose(fp);
    return rc;
}

void st_close(st_file *f)
{
    if (!f) return;
    for (size_t i = 0; i < f->nmeta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_vals[i]);
    }
    free(f->t);
    free(f->owned);
    free(f);
}

size_t st_count(const st_file *f) { return f->n; }
const st_tensor *st_at(const st_file *f, size_t i) { return i < f->n ? &f->t[i] : NULL; }

const st_tensor *st_find(const st_file *f, const char *name)
{
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    return NULL;
}

const char *st_metadata(const st_file *f, const char *key)
{
    for (size_t i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_vals[i];
    return NULL;
}

static float half_to_float(uint16_t h)
{
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 0x3ff, x;
    if (e == 31) x = s | 0x7f800000u | (m << 13);
    else if (e) x = s | ((e + 112) << 23) | (m << 13);
    else if (!m) x = s;
    else {   /* subnormal: normalise */
        e = 113;
        while (!(m & 0x400)) { m <<= 1; e--; }
        x = s | (e << 23) | ((m & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

void st_read_f32(const st_file *f, const st_tensor *t, float *dst)
{
    const unsigned char *p = f->data + t->begin;
    if (t->dtype == ST_F32) {
        memcpy(dst, p, (size_t)t->numel * 4);
        return;
    }
    for (uint64_t i = 0; i < t->numel; i++) {
        uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
        if (t->dtype == ST_BF16) {
            uint32_t x = (uint32_t)h << 16;
            memcpy(&dst[i], &x, 4);
        } else {
            dst[i] = half_to_float(h);
        }
    }
}

int st_write(const char *path, const st_entry *e, size_t n, char *err, size_t errlen)
{
    int rc = 0;
    char *hdr = NULL, tmp[4200];
    FILE *fp = NULL;
    size_t cap = 64 + n * (ST_MAX_NAME * 2 + 64 + ST_MAX_DIMS * 24), len = 0;
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) FAIL(ST_ERR_ARG, "path too long: '%s'", path);
    hdr = malloc(cap);
    if (!hdr) FAIL(ST_ERR_NOMEM, "cannot write '%s': out of memory", path);
    len += (size_t)snprintf(hdr + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t numel = 1;
        for (int d = 0; d < e[i].ndim; d++) numel *= e[i].shape[d];
        if (strlen(e[i].name) >= ST_MAX_NAME || e[i].ndim > ST_MAX_DIMS)
            FAIL(ST_ERR_ARG, "cannot write '%s': tensor name '%s' too long", path, e[i].name);
        len += (size_t)snprintf(hdr + len, cap - len, ",");
        long q = jt_quote(hdr + len, cap - len, e[i].name);
        if (q < 0) FAIL(ST_ERR_ARG, "cannot write '%s': tensor name '%s' too long", path, e[i].name);
        len += (size_t)q;
        len += (size_t)snprintf(hdr + len, cap - len, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < e[i].ndim; d++)
            len += (size_t)snprintf(hdr + len, cap - len, "%s%llu", d ? "," : "", (unsigned long long)e[i].shape[d]);
        len += (size_t)snprintf(hdr + len, cap - len, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
                                (unsigned long long)(at + numel * 4));
        at += numel * 4;
    }
    len += (size_t)snprintf(hdr + len, cap - len, "}");
    while (len % 8) hdr[len++] = ' ';
    unsigned char lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)((uint64_t)len >> (8 * i));
    fp = fopen(tmp, "wb");
    if (!fp) FAIL(ST_ERR_IO, "cannot create '%s': %s", tmp, strerror(errno));
    if (fwrite(lenb, 1, 8, fp) != 8 || fwrite(hdr, 1, len, fp) != len)
        FAIL(ST_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
    for (size_t i = 0; i < n; i++) {
        size_t numel = 1;
        for (int d = 0; d < e[i].ndim; d++) numel *= (size_t)e[i].shape[d];
        if (fwrite(e[i].data, sizeof(float), numel, fp) != numel)
            FAIL(ST_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
    }
    if (fflush(fp) != 0 || fsync(fileno(fp)) != 0) FAIL(ST_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
    int cr = fclose(fp);
    fp = NULL;
    if (cr != 0) FAIL(ST_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
    if (rename(tmp, path) != 0) FAIL(ST_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
cleanup:
    if (fp) {
        fclose(fp);
        remove(tmp);
    }
    free(hdr);
    return rc;
}
