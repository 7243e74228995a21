/*
 * tdsave.c - the torch_dist checkpoint writer (tdsave.h): the ranks'
 * .distcp files, the blobs that carry their records to rank 0, and the
 * .metadata pickle built as a graph of pickle.h nodes whose sharing is the
 * sharing of the Python objects torch and Megatron create (the comments at
 * each builder say which), so that pk_write gives Megatron's bytes.
 */
#include "tdsave.h"

#include "checkpoint.h"
#include "grow.h"
#include "le.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(code, ...) do { tds_fail(err, errlen, __VA_ARGS__); rc = (code); goto cleanup; } while (0)

static void tds_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void tds_fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

const char *tds_strerror(int code)
{
    switch (code) {
    case TDS_OK: return "success";
    case TDS_ERR_IO: return "input/output error";
    case TDS_ERR_FORMAT: return "malformed rank record";
    case TDS_ERR_NOMEM: return "out of memory";
    case TDS_ERR_ARG: return "bad argument";
    default: return "unknown error";
    }
}

static int from_ckpt(int rc) { return rc == CKPT_ERR_ARG ? TDS_ERR_ARG : TDS_ERR_IO; }

/* ---- a rank's file and blob ---------------------------------------------- */

/*
 * The blob: "TDR1", rank, item count (u32 each), then per item in the
 * rank's state-dict order: kind, dtype, ndim, stacked (u8 each), the key's
 * length (u32) and bytes with a NUL, shape, offset, size (ndim u64 each),
 * the archive's offset and length in the file (u64 each).
 */
#define BLOB_MAGIC "TDR1"
#define MAX_KEY 4096

static int check_item(const tds_item *it, size_t i, char *err, size_t errlen)
{
    int rc = 0;
    if (!it->key || !it->key[0] || strlen(it->key) >= MAX_KEY) FAIL(TDS_ERR_ARG, "item %zu: no key, or one of %d bytes or more", i, MAX_KEY);
    if (it->kind == TDS_OBJECT) {
        if (!it->obj || !it->nobj) FAIL(TDS_ERR_ARG, "item '%s': an object without bytes", it->key);
        return 0;
    }
    if (it->kind != TDS_TENSOR) FAIL(TDS_ERR_ARG, "item '%s': kind %d", it->key, it->kind);
    if (!ts_dtype_name(it->dtype) || it->ndim < 1 || it->ndim > TS_MAX_DIMS)
        FAIL(TDS_ERR_ARG, "item '%s': dtype %d or ndim %d not written", it->key, it->dtype, it->ndim);
    for (int d = 0; d < it->ndim; d++)
        if (it->offset[d] > it->shape[d] || it->size[d] > it->shape[d] - it->offset[d])
            FAIL(TDS_ERR_ARG, "item '%s': chunk outside the global shape on axis %d", it->key, d);
    if (!it->data) FAIL(TDS_ERR_ARG, "item '%s': no data", it->key);
cleanup:
    return rc;
}

typedef struct rank_file {
    const tds_item *items;
    size_t n;
    uint64_t *off, *len;             /* (n) where each item's archive went */
} rank_file;

static int put_archive(FILE *f, const char *tmp, const tds_item *it, uint64_t *pos, uint64_t *off, uint64_t *len,
                       char *err, size_t errlen)
{
    int rc = 0;
    ts_buf b = { 0 };
    const unsigned char *p = it->obj;
    size_t n = it->nobj;
    if (it->kind == TDS_TENSOR) {
        ts_tensor t = { .dtype = it->dtype, .ndim = it->ndim, .data = it->data };
        memcpy(t.shape, it->size, sizeof t.shape);
        int trc = ts_tensor_write(&b, &t);
        if (trc) FAIL(trc == TS_ERR_NOMEM ? TDS_ERR_NOMEM : TDS_ERR_ARG, "item '%s': %s", it->key, ts_strerror(trc));
        p = b.data;
        n = b.len;
    }
    if (fwrite(p, 1, n, f) != n) FAIL(TDS_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
    *off = *pos;
    *len = n;
    *pos += n;
cleanup:
    ts_buf_release(&b);
    return rc;
}

/* Objects first, then tensors, each in the caller's order (Megatron's
 * write_preloaded_data writes the BYTE_IO items before the tensors). */
static int emit_rank(FILE *f, const char *tmp, void *ctx, char *err, size_t errlen)
{
    rank_file *rf = ctx;
    uint64_t pos = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < rf->n; i++) {
            if ((rf->items[i].kind == TDS_OBJECT) != (pass == 0)) continue;
            int rc = put_archive(f, tmp, &rf->items[i], &pos, &rf->off[i], &rf->len[i], err, errlen);
            if (rc) return rc;
        }
    return 0;
}

static int buf_add(ts_buf *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        size_t c = b->cap ? b->cap : 1024;
        while (c < b->len + n) c *= 2;
        unsigned char *q = realloc(b->data, c);
        if (!q) return -1;
        b->data = q;
        b->cap = c;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

/* v as n (1, 4 or 8) little-endian bytes */
static int blob_u(ts_buf *b, uint64_t v, size_t n)
{
    unsigned char t[8] = { (unsigned char)v };
    if (n == 8) le_put64(t, v);
    else if (n == 4) le_put32(t, (uint32_t)v);
    return buf_add(b, t, n);
}

static int blob_item(ts_buf *b, const tds_item *it, uint64_t off, uint64_t len)
{
    int nd = it->kind == TDS_TENSOR ? it->ndim : 0, e = 0;
    e |= blob_u(b, (uint64_t)it->kind, 1) | blob_u(b, nd ? (uint64_t)it->dtype : 0, 1) | blob_u(b, (uint64_t)nd, 1);
    e |= blob_u(b, nd && it->stacked ? 1 : 0, 1) | blob_u(b, strlen(it->key), 4) | buf_add(b, it->key, strlen(it->key) + 1);
    for (int d = 0; d < nd; d++) e |= blob_u(b, it->shape[d], 8);
    for (int d = 0; d < nd; d++) e |= blob_u(b, it->offset[d], 8);
    for (int d = 0; d < nd; d++) e |= blob_u(b, it->size[d], 8);
    return e | blob_u(b, off, 8) | blob_u(b, len, 8);
}

int tds_write_rank(const char *iter_dir, int rank, const tds_item *items, size_t n, ts_buf *blob,
                  char *err, size_t errlen)
{
    int rc = 0;
    char path[4200];
    rank_file rf = { items, n, calloc(n + 1, sizeof(uint64_t)), calloc(n + 1, sizeof(uint64_t)) };
    if (!rf.off || !rf.len) FAIL(TDS_ERR_NOMEM, "out of memory");
    if (rank < 0 || n > UINT32_MAX) FAIL(TDS_ERR_ARG, "rank %d with %zu items", rank, n);
    for (size_t i = 0; i < n; i++)
        if ((rc = check_item(&items[i], i, err, errlen)) != 0) goto cleanup;
    if (snprintf(path, sizeof path, "%s/__%d_0.distcp", iter_dir, rank) >= (int)sizeof path)
        FAIL(TDS_ERR_ARG, "checkpoint directory name too long: '%s'", iter_dir);
    if ((rc = ckpt_make_dirs(iter_dir, err, errlen)) != 0) { rc = from_ckpt(rc); goto cleanup; }
    if ((rc = ckpt_write_atomic(iter_dir, path, emit_rank, &rf, err, errlen)) != 0) {
        if (rc == CKPT_ERR_IO || rc == CKPT_ERR_ARG) rc = from_ckpt(rc);
        goto cleanup;
    }
    blob->len = 0;
    int e = buf_add(blob, BLOB_MAGIC, 4) | blob_u(blob, (uint64_t)rank, 4) | blob_u(blob, n, 4);
    for (size_t i = 0; i < n; i++) e |= blob_item(blob, &items[i], rf.off[i], rf.len[i]);
    if (e) FAIL(TDS_ERR_NOMEM, "out of memory");
cleanup:
    free(rf.off);
    free(rf.len);
    return rc;
}

/* One item of a blob, as read back. */
typedef struct rec {
    int kind, dtype, ndim, stacked;
    const char *key;                 /* NUL-terminated, in the blob */
    uint64_t shape[TS_MAX_DIMS], offset[TS_MAX_DIMS], size[TS_MAX_DIMS];
    uint64_t off, len;
} rec;

typedef struct blob_cur {
    const unsigned char *p;
    size_t n, pos;
} blob_cur;

static int cur_u(blob_cur *c, size_t n, uint64_t *v)
{
    if (c->n - c->pos < n) return -1;
    const unsigned char *p = c->p + c->pos;
    *v = n == 8 ? le_get64(p) : n == 4 ? le_get32(p) : p[0];
    c->pos += n;
    return 0;
}

static int read_rec(blob_cur *c, rec *r)
{
    uint64_t v[5];
    for (int i = 0; i < 5; i++)
        if (cur_u(c, i < 4 ? 1 : 4, &v[i])) return -1;
    r->kind = (int)v[0];
    r->dtype = (int)v[1];
    r->ndim = (int)v[2];
    r->stacked = (int)v[3];
    if (r->kind > TDS_OBJECT || r->ndim > TS_MAX_DIMS || (r->kind == TDS_TENSOR) != (r->ndim > 0) || !ts_dtype_name(r->dtype)
        || v[4] == 0 || v[4] >= MAX_KEY || c->n - c->pos < v[4] + 1 || c->p[c->pos + v[4]] != 0
        || memchr(c->p + c->pos, 0, (size_t)v[4]))
        return -1;
    r->key = (const char *)c->p + c->pos;
    c->pos += (size_t)v[4] + 1;
    for (int d = 0; d < r->ndim; d++)
        if (cur_u(c, 8, &r->shape[d])) return -1;
    for (int d = 0; d < r->ndim; d++)
        if (cur_u(c, 8, &r->offset[d])) return -1;
    for (int d = 0; d < r->ndim; d++)
        if (cur_u(c, 8, &r->size[d]) || r->offset[d] > r->shape[d] || r->size[d] > r->shape[d] - r->offset[d]) return -1;
    return cur_u(c, 8, &r->off) || cur_u(c, 8, &r->len) ? -1 : 0;
}

/* ---- the .metadata graph ---------------------------------------------------- */

/* A string shared by value within a scope (a Python str object reached
 * from several places), with what hangs off a key in that scope. */
typedef struct shared {
    const char *s;
    pk_node *str;
    pk_node *size;                   /* stacked tensors: the torch.Size their chunks share */
    pk_node *md;                     /* the global scope: the key's StorageMetadata */
    pk_node *chunks;                 /* ... and its chunk list */
} shared;

typedef struct scope {
    shared *v;
    size_t n, cap;
} scope;

typedef struct md_ctx {
    pk_doc *d;
    scope names;                     /* interned identifiers: field names */
    scope modules;                   /* a module's __name__, shared by its classes */
    scope keys;                      /* state_dict_metadata's keys and their entries */
    pk_node *g_tsm, *g_bsm, *g_csm, *g_tp, *g_mi, *g_si, *g_wi, *g_wit, *g_twd, *g_size;
    pk_node *dtype[3];               /* torch.float32, torch.bfloat16, torch.float16 */
    pk_node *layout, *memfmt;        /* torch.strided, _MEM_FORMAT_ENCODING(0): one object each */
    pk_node *wit[4];                 /* WriteItemType members by value (SHARD 2, BYTE_IO 3) */
} md_ctx;

/* The entry for s in sc, made (with a new string node) when absent; NULL when out of memory. */
static shared *scope_get(pk_doc *d, scope *sc, const char *s)
{
    for (size_t i = 0; i < sc->n; i++)
        if (!strcmp(sc->v[i].s, s)) return &sc->v[i];
    if (mds_grow((void **)&sc->v, &sc->cap, sc->n + 1, sizeof *sc->v)) return NULL;
    pk_node *str = pk_add_str(d, s);
    if (!str) return NULL;
    shared *e = &sc->v[sc->n++];
    *e = (shared){ .s = str->s, .str = str };
    return e;
}

static void scope_release(scope *sc) { free(sc->v); *sc = (scope){ 0 }; }

static pk_node *name(md_ctx *M, const char *s)
{
    shared *e = scope_get(M->d, &M->names, s);
    return e ? e->str : NULL;
}

static pk_node *global(md_ctx *M, const char *module, const char *cls)
{
    shared *e = scope_get(M->d, &M->modules, module);
    return pk_add_global_in(M->d, e ? e->str : NULL, cls);
}

/* A dataclass instance: cls.__new__(cls) then BUILD with its __dict__,
 * filled by the caller (name(), value, ...). */
static pk_node *dataclass(md_ctx *M, pk_node *cls, pk_node **dict)
{
    *dict = pk_add(M->d, PK_DICT);
    return pk_add_object(M->d, cls, pk_add(M->d, PK_TUPLE), *dict, 1);
}

static void field(md_ctx *M, pk_node *dict, const char *key, const pk_node *value)
{
    pk_push(M->d, dict, name(M, key));
    pk_push(M->d, dict, value);
}

/* torch.Size(v): REDUCE(torch.Size, (tuple(v),)), a new object each call. */
static pk_node *size_node(md_ctx *M, const uint64_t *v, int n)
{
    pk_node *t = pk_add(M->d, PK_TUPLE), *args = pk_add(M->d, PK_TUPLE);
    for (int i = 0; i < n; i++) pk_push(M->d, t, pk_add_int(M->d, (int64_t)v[i]));
    pk_push(M->d, args, t);
    return pk_add_object(M->d, M->g_size, args, NULL, 0);
}

static pk_node *reduce1(md_ctx *M, pk_node *fn, pk_node *arg)
{
    pk_node *args = pk_add(M->d, PK_TUPLE);
    pk_push(M->d, args, arg);
    return pk_add_object(M->d, fn, args, NULL, 0);
}

static int md_init(md_ctx *M)
{
    const char *mdm = "torch.distributed.checkpoint.metadata", *plm = "torch.distributed.checkpoint.planner";
    M->g_tsm = global(M, mdm, "TensorStorageMetadata");
    M->g_bsm = global(M, mdm, "BytesStorageMetadata");
    M->g_csm = global(M, mdm, "ChunkStorageMetadata");
    M->g_tp = global(M, mdm, "TensorProperties");
    M->g_mi = global(M, mdm, "MetadataIndex");
    M->g_si = global(M, "torch.distributed.checkpoint.filesystem", "_StorageInfo");
    M->g_wi = global(M, plm, "WriteItem");
    M->g_wit = global(M, plm, "WriteItemType");
    M->g_twd = global(M, plm, "TensorWriteData");
    M->g_size = pk_add_global(M->d, "torch.Size");          /* its __module__ is a new str each time */
    static const char *const dt[3] = { "float32", "bfloat16", "float16" };
    pk_node *torch = pk_add_str(M->d, "torch");             /* sys.modules' key: shared by the dtypes */
    for (int i = 0; i < 3; i++) M->dtype[i] = pk_add_global_in(M->d, torch, dt[i]);
    M->layout = reduce1(M, pk_add_global(M->d, "torch.serialization._get_layout"), pk_add_str(M->d, "torch.strided"));
    M->memfmt = reduce1(M, global(M, mdm, "_MEM_FORMAT_ENCODING"), pk_add_int(M->d, 0));
    for (int v = 2; v <= 3; v++) M->wit[v] = reduce1(M, M->g_wit, pk_add_int(M->d, v));
    return pk_doc_failed(M->d) ? TDS_ERR_NOMEM : 0;
}

/* TensorProperties, pickled through its __getstate__ tuple (dtype, layout,
 * requires_grad, memory format, pin_memory, strides): a new object per
 * write item.  Megatron's layer-stacked tensors go through torch's
 * ShardedTensor, whose properties have no strides. */
static pk_node *properties(md_ctx *M, const rec *r)
{
    pk_node *st = pk_add(M->d, PK_TUPLE);
    pk_push(M->d, st, M->dtype[r->dtype]);
    pk_push(M->d, st, M->layout);
    pk_push(M->d, st, pk_add_bool(M->d, 0));
    pk_push(M->d, st, M->memfmt);
    pk_push(M->d, st, pk_add_bool(M->d, 0));
    if (r->stacked) pk_push(M->d, st, pk_add(M->d, PK_NONE));
    else {
        uint64_t stride[TS_MAX_DIMS], s = 1;
        for (int i = r->ndim - 1; i >= 0; i--) { stride[i] = s; s *= r->size[i]; }
        pk_push(M->d, st, size_node(M, stride, r->ndim)->args->items[0]);
    }
    return pk_add_object(M->d, M->g_tp, pk_add(M->d, PK_TUPLE), st, 1);
}

/* MetadataIndex(fqn, offset): offset becomes a new torch.Size in
 * __post_init__; an object's index has no offset in its __dict__. */
static pk_node *md_index(md_ctx *M, pk_node *fqn, const rec *r)
{
    pk_node *dict, *o = dataclass(M, M->g_mi, &dict);
    field(M, dict, "fqn", fqn);
    field(M, dict, "index", pk_add(M->d, PK_NONE));
    if (r->kind == TDS_TENSOR) field(M, dict, "offset", size_node(M, r->offset, r->ndim));
    return o;
}

/* One rank's SavePlan; each item's TensorWriteData (chunk, properties,
 * size) is also what state_dict_metadata holds for the key's first item,
 * and its chunk is the one listed there. */
static pk_node *save_plan(md_ctx *M, const rec *r, size_t n, pk_node *g_plan)
{
    scope local = { 0 };             /* this rank's key strings (its state dict's keys) */
    pk_node *dict, *plan = dataclass(M, g_plan, &dict), *items = pk_add(M->d, PK_LIST);
    field(M, dict, "items", items);
    for (size_t i = 0; i < n; i++) {
        shared *k = scope_get(M->d, &local, r[i].key), *g = scope_get(M->d, &M->keys, r[i].key);
        if (!k || !g) break;
        pk_node *wd, *wi = dataclass(M, M->g_wi, &wd), *twd = pk_add(M->d, PK_NONE);
        if (!g->md) g->str = k->str;                          /* the key is the first plan's string */
        if (r[i].kind == TDS_TENSOR) {
            pk_node *td, *cd, *chunk = dataclass(M, M->g_csm, &cd);
            field(M, cd, "offsets", size_node(M, r[i].offset, r[i].ndim));
            field(M, cd, "sizes", size_node(M, r[i].size, r[i].ndim));
            pk_node *size = r[i].stacked && k->size ? k->size : size_node(M, r[i].shape, r[i].ndim);
            if (r[i].stacked) k->size = size;
            pk_node *props = properties(M, &r[i]);
            twd = dataclass(M, M->g_twd, &td);
            field(M, td, "chunk", chunk);
            field(M, td, "properties", props);
            field(M, td, "size", size);
            if (!g->md) {
                pk_node *md;
                g->md = dataclass(M, M->g_tsm, &md);
                g->chunks = pk_add(M->d, PK_LIST);
                field(M, md, "properties", props);
                field(M, md, "size", size);
                field(M, md, "chunks", g->chunks);
            }
            pk_push(M->d, g->chunks, chunk);
        } else if (!g->md)
            g->md = pk_add_object(M->d, M->g_bsm, pk_add(M->d, PK_TUPLE), NULL, 1);
        field(M, wd, "index", md_index(M, k->str, &r[i]));
        field(M, wd, "type", M->wit[r[i].kind == TDS_TENSOR ? 2 : 3]);
        field(M, wd, "bytes_io_data", pk_add(M->d, PK_NONE));
        field(M, wd, "tensor_data", twd);
        pk_push(M->d, items, wi);
    }
    scope_release(&local);
    field(M, dict, "storage_data", pk_add(M->d, PK_NONE));
    field(M, dict, "planner_data", pk_add(M->d, PK_DICT));
    field(M, dict, "usable", pk_add_bool(M->d, 1));
    return plan;
}

/* A rank's write results, in its file's order: MetadataIndex ->
 * _StorageInfo.  They reach rank 0 through a pickle of their own, so their
 * strings are shared within the rank (its relative path, a key's chunks)
 * but not with the plans. */
static void storage_data(md_ctx *M, pk_node *sd, const rec *r, size_t n, int rank)
{
    scope local = { 0 };
    char path[32];
    snprintf(path, sizeof path, "__%d_0.distcp", rank);
    pk_node *rel = pk_add_str(M->d, path);
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < n; i++) {
            if ((r[i].kind == TDS_OBJECT) != (pass == 0)) continue;
            shared *k = scope_get(M->d, &local, r[i].key);
            pk_node *si;
            pk_push(M->d, sd, md_index(M, k ? k->str : NULL, &r[i]));
            pk_push(M->d, sd, dataclass(M, M->g_si, &si));
            field(M, si, "relative_path", rel);
            field(M, si, "offset", pk_add_int(M->d, (int64_t)r[i].off));
            field(M, si, "length", pk_add_int(M->d, (int64_t)r[i].len));
        }
    scope_release(&local);
}

/* The records of blob b into *r (malloc'd), *n of them. */
static int read_blob(const ts_buf *b, int rank, rec **r, size_t *n, char *err, size_t errlen)
{
    int rc = 0;
    blob_cur c = { b->data, b->len, 0 };
    uint64_t brank, cnt;
    *r = NULL;
    if (b->len < 12 || memcmp(b->data, BLOB_MAGIC, 4)) FAIL(TDS_ERR_FORMAT, "rank %d: not a torch_dist rank record", rank);
    c.pos = 4;
    if (cur_u(&c, 4, &brank) || cur_u(&c, 4, &cnt) || brank != (uint64_t)rank || cnt > b->len)
        FAIL(TDS_ERR_FORMAT, "rank %d: a record of rank %llu, or a bad item count", rank, (unsigned long long)brank);
    if (!(*r = calloc((size_t)cnt + 1, sizeof **r))) FAIL(TDS_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < cnt; i++)
        if (read_rec(&c, &(*r)[i])) FAIL(TDS_ERR_FORMAT, "rank %d: item %zu of its record is malformed", rank, i);
    if (c.pos != b->len) FAIL(TDS_ERR_FORMAT, "rank %d: %zu bytes after its record", rank, b->len - c.pos);
    *n = (size_t)cnt;
cleanup:
    if (rc) { free(*r); *r = NULL; }
    return rc;
}

int tds_metadata_pickle(const char *checkpoint_id, const char *save_id, const ts_buf *blobs, int nranks,
                       unsigned char **out, size_t *len, char *err, size_t errlen)
{
    int rc = 0;
    md_ctx M = { .d = pk_doc_new() };
    rec **r = calloc(nranks > 0 ? (size_t)nranks : 1, sizeof *r);
    size_t *n = calloc(nranks > 0 ? (size_t)nranks : 1, sizeof *n);
    *out = NULL;
    if (!M.d || !r || !n) FAIL(TDS_ERR_NOMEM, "out of memory");
    if (nranks < 1 || !checkpoint_id || !save_id) FAIL(TDS_ERR_ARG, "no ranks, checkpoint id or save id");
    for (int k = 0; k < nranks; k++)
        if ((rc = read_blob(&blobs[k], k, &r[k], &n[k], err, errlen)) != 0) goto cleanup;
    const char *mdm = "torch.distributed.checkpoint.metadata";
    pk_node *g_md = global(&M, mdm, "Metadata");               /* the first global pickled */
    if ((rc = md_init(&M)) != 0) FAIL(rc, "out of memory");
    pk_node *g_plan = global(&M, "torch.distributed.checkpoint.planner", "SavePlan");
    pk_node *plans = pk_add(M.d, PK_LIST), *sdm = pk_add(M.d, PK_DICT), *sd = pk_add(M.d, PK_DICT);
    for (int k = 0; k < nranks; k++) pk_push(M.d, plans, save_plan(&M, r[k], n[k], g_plan));
    for (size_t i = 0; i < M.keys.n; i++) {
        pk_push(M.d, sdm, M.keys.v[i].str);
        pk_push(M.d, sdm, M.keys.v[i].md);
    }
    for (int k = 0; k < nranks; k++) storage_data(&M, sd, r[k], n[k], k);
    pk_node *smd, *sm = dataclass(&M, global(&M, mdm, "StorageMeta"), &smd);
    field(&M, smd, "checkpoint_id", pk_add_str(M.d, checkpoint_id));
    field(&M, smd, "save_id", pk_add_str(M.d, save_id));
    field(&M, smd, "load_id", pk_add(M.d, PK_NONE));
    field(&M, smd, "modules", pk_add(M.d, PK_LIST));
    pk_node *mdd, *md = dataclass(&M, g_md, &mdd);
    field(&M, mdd, "state_dict_metadata", sdm);
    field(&M, mdd, "planner_data", pk_add(M.d, PK_NONE));
    field(&M, mdd, "storage_data", sd);
    field(&M, mdd, "storage_meta", sm);
    field(&M, mdd, "version", pk_add_str(M.d, "1.0.0"));
    field(&M, mdd, "all_local_plans", plans);
    int prc = pk_write(M.d, md, 4, out, len);
    if (prc) FAIL(prc == PK_ERR_NOMEM ? TDS_ERR_NOMEM : TDS_ERR_ARG, "cannot pickle the metadata: %s", pk_strerror(prc));
cleanup:
    for (int k = 0; r && k < nranks; k++) free(r[k]);
    free(r);
    free(n);
    scope_release(&M.names);
    scope_release(&M.modules);
    scope_release(&M.keys);
    pk_free(M.d);
    return rc;
}

/* ---- rank 0's files ------------------------------------------------------- */

typedef struct bytes_file {
    const unsigned char *p;
    size_t n;
} bytes_file;

static int emit_bytes(FILE *f, const char *tmp, void *ctx, char *err, size_t errlen)
{
    int rc = 0;
    const bytes_file *b = ctx;
    if (fwrite(b->p, 1, b->n, f) != b->n) FAIL(TDS_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
cleanup:
    return rc;
}

static int write_file(const char *dir, const char *base, const unsigned char *p, size_t n, char *err, size_t errlen)
{
    int rc = 0;
    char path[4200];
    bytes_file b = { p, n };
    if (snprintf(path, sizeof path, "%s/%s", dir, base) >= (int)sizeof path)
        FAIL(TDS_ERR_ARG, "checkpoint directory name too long: '%s'", dir);
    if ((rc = ckpt_write_atomic(dir, path, emit_bytes, &b, err, errlen)) != 0 && (rc == CKPT_ERR_IO || rc == CKPT_ERR_ARG))
        rc = from_ckpt(rc);
cleanup:
    return rc;
}

int tds_write_metadata(const char *iter_dir, const char *checkpoint_id, const char *save_id,
                      const ts_buf *blobs, int nranks, char *err, size_t errlen)
{
    static const char json[] = "{\"sharded_backend\": \"torch_dist\", \"sharded_backend_version\": 1}";
    unsigned char *md = NULL;
    size_t n = 0;
    int rc = tds_metadata_pickle(checkpoint_id, save_id, blobs, nranks, &md, &n, err, errlen);
    if (!rc) rc = ckpt_make_dirs(iter_dir, err, errlen) ? TDS_ERR_IO : 0;
    if (!rc) rc = write_file(iter_dir, ".metadata", md, n, err, errlen);
    if (!rc) rc = write_file(iter_dir, "metadata.json", (const unsigned char *)json, sizeof json - 1, err, errlen);
    free(md);
    return rc;
}

int tds_new_save_id(char out[37])
{
    unsigned char u[16];
    FILE *f = fopen("/dev/urandom", "rb");
    size_t got = f ? fread(u, 1, sizeof u, f) : 0;
    if (f) fclose(f);
    if (got != sizeof u) return TDS_ERR_IO;
    u[6] = (unsigned char)((u[6] & 0x0F) | 0x40);           /* version 4 */
    u[8] = (unsigned char)((u[8] & 0x3F) | 0x80);           /* RFC 4122 variant */
    char *o = out;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) *o++ = '-';
        o += sprintf(o, "%02x", u[i]);
    }
    return 0;
}

/* ---- objects ---------------------------------------------------------------- */

int tds_object_archive(ts_buf *out, pk_doc *d, const pk_node *obj)
{
    pk_node *list = pk_add(d, PK_LIST);
    pk_push(d, list, obj ? obj : pk_add(d, PK_NONE));
    unsigned char *p;
    size_t n;
    int rc = pk_write(d, list, 2, &p, &n);
    if (rc) return rc == PK_ERR_NOMEM ? TDS_ERR_NOMEM : TDS_ERR_ARG;
    rc = ts_object_write(out, p, n);
    free(p);
    return rc == TS_ERR_NOMEM ? TDS_ERR_NOMEM : rc ? TDS_ERR_ARG : 0;
}

static void entry(pk_doc *d, pk_node *dict, const char *key, const pk_node *v)
{
    pk_push(d, dict, pk_add_str(d, key));
    pk_push(d, dict, v);
}

pk_node *tds_common_state(pk_doc *d, const pk_node *args, int64_t iteration, const pk_node *scheduler,
                         const pk_node *flops)
{
    pk_node *s = pk_add(d, PK_DICT), *cm = pk_add(d, PK_DICT);
    if (args) entry(d, s, "args", args);
    entry(d, s, "checkpoint_version", pk_add_float(d, 3.0));
    entry(d, s, "iteration", pk_add_int(d, iteration));
    if (scheduler) entry(d, s, "opt_param_scheduler", scheduler);
    if (flops) entry(d, s, "num_floating_point_operations_so_far", flops);
    entry(d, cm, "singleton_local_shards", pk_add_bool(d, 0));
    entry(d, cm, "chained_optim_avoid_prefix", pk_add_bool(d, 1));
    entry(d, s, "content_metadata", cm);
    return s;
}

pk_node *tds_namespace(pk_doc *d, pk_node **attrs)
{
    *attrs = pk_add(d, PK_DICT);
    return pk_add_object(d, pk_add_global(d, "argparse.Namespace"), pk_add(d, PK_TUPLE), *attrs, 1);
}

pk_node *tds_scheduler(pk_doc *d, const tds_sched *s)
{
    pk_node *o = pk_add(d, PK_DICT);
    entry(d, o, "max_lr", pk_add_float(d, s->max_lr));
    entry(d, o, "lr_warmup_steps", pk_add_int(d, s->lr_warmup_steps));
    entry(d, o, "num_steps", pk_add_int(d, s->num_steps));
    entry(d, o, "lr_decay_style", pk_add_str(d, s->lr_decay_style));
    entry(d, o, "lr_decay_steps", pk_add_int(d, s->lr_decay_steps));
    entry(d, o, "min_lr", pk_add_float(d, s->min_lr));
    entry(d, o, "start_wd", pk_add_float(d, s->start_wd));
    entry(d, o, "end_wd", pk_add_float(d, s->end_wd));
    entry(d, o, "wd_incr_style", pk_add_str(d, s->wd_incr_style));
    entry(d, o, "wd_incr_steps", pk_add_int(d, s->wd_incr_steps));
    return o;
}
