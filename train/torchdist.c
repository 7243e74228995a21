/*
 * torchdist.c - the torch_dist mapping and read side; see torchdist.h and
 * docs/architecture.md ("torch_dist checkpoints").  td_items is the one
 * place that knows which Megatron key and chunk each of a rank's tensors
 * is; td_load indexes .metadata (pickle.h), reads each stored chunk that
 * overlaps an item (torchsave.h) and copies the overlap.
 *
 * It does not print or exit; it keeps no state between calls.
 */
#include "torchdist.h"

#include "dtype.h"
#include "grow.h"
#include "jsontree.h"
#include "pickle.h"
#include "readfile.h"
#include "torchsave.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAIL(code, ...) do { if (err && errlen) snprintf(err, errlen, __VA_ARGS__); rc = (code); goto cleanup; } while (0)
#define DCP "torch.distributed.checkpoint."

const char *td_strerror(int code)
{
    switch (code) {
    case TD_OK: return "success";
    case TD_ERR_IO: return "input/output error";
    case TD_ERR_FORMAT: return "malformed checkpoint";
    case TD_ERR_MISMATCH: return "the checkpoint's model is not this model";
    case TD_ERR_UNSUPPORTED: return "unsupported";
    case TD_ERR_NOMEM: return "out of memory";
    default: return "unknown error";
    }
}

size_t td_item_numel(const td_item *it)
{
    size_t n = 1;
    for (int d = 0; d < it->ndim; d++) n *= (size_t)it->size[d];
    return n;
}

/* ---- the mapping ---------------------------------------------------------- */

struct lister {
    td_item *v;
    size_t n, cap;
};

static td_item *add(struct lister *l, const char *key, int param, size_t base)
{
    if (mds_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v)) return NULL;
    td_item *it = &l->v[l->n++];
    memset(it, 0, sizeof *it);
    snprintf(it->key, sizeof it->key, "%s", key);
    it->param = param;
    it->base = base;
    return it;
}

/* dims: ndim, then (shape, off, size) per axis */
static void dims(td_item *it, int ndim, const uint64_t *sos)
{
    it->ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        it->shape[d] = sos[3 * d];
        it->off[d] = sos[3 * d + 1];
        it->size[d] = sos[3 * d + 2];
    }
}

#define LAYERS "decoder.layers."

/* The key of a per-layer tensor, or NULL when the id is not one. */
static const char *layer_key(int id)
{
    switch (id) {
    case GPT_LN1W: return LAYERS "self_attention.linear_qkv.layer_norm_weight";
    case GPT_LN1B: return LAYERS "self_attention.linear_qkv.layer_norm_bias";
    case GPT_QKVW: return LAYERS "self_attention.linear_qkv.weight";
    case GPT_QKVB: return LAYERS "self_attention.linear_qkv.bias";
    case GPT_ATTPROJW: return LAYERS "self_attention.linear_proj.weight";
    case GPT_ATTPROJB: return LAYERS "self_attention.linear_proj.bias";
    case GPT_LN2W: return LAYERS "mlp.linear_fc1.layer_norm_weight";
    case GPT_LN2B: return LAYERS "mlp.linear_fc1.layer_norm_bias";
    case GPT_FCW: return LAYERS "mlp.linear_fc1.weight";
    case GPT_FCB: return LAYERS "mlp.linear_fc1.bias";
    case GPT_FCPROJW: return LAYERS "mlp.linear_fc2.weight";
    case GPT_FCPROJB: return LAYERS "mlp.linear_fc2.bias";
    default: return NULL;
    }
}

/* One local layer's chunk(s) of tensor id: the layer axis (global layer gl
 * of L), then the tensor's own axes with their TP split. */
static int layer_items(struct lister *l, const gpt_model *m, int id, size_t base, uint64_t gl)
{
    uint64_t L = (uint64_t)m->L, C = (uint64_t)m->C, tr = (uint64_t)m->cfg.tp_rank;
    uint64_t QKV = (uint64_t)(m->C + 2 * m->G * m->hs), QKVl = (uint64_t)m->QKVl;
    uint64_t F = (uint64_t)m->F, Fl = (uint64_t)m->Fl, Cl = (uint64_t)m->Cl;
    uint64_t FC1 = m->cfg.swiglu ? 2 * F : F;
    const char *key = layer_key(id);
    td_item *it = add(l, key, id, base);
    if (!it) return TD_ERR_NOMEM;
    switch (id) {
    case GPT_QKVW: case GPT_QKVB: {
        uint64_t s[9] = { L, gl, 1, QKV, tr * QKVl, QKVl, C, 0, C };
        dims(it, id == GPT_QKVW ? 3 : 2, s);
        it->qkv = 1;
        return 0;
    }
    case GPT_ATTPROJW: case GPT_FCPROJW: {   /* row-parallel: split on the input axis */
        uint64_t in = id == GPT_ATTPROJW ? C : F, inl = id == GPT_ATTPROJW ? Cl : Fl;
        uint64_t s[9] = { L, gl, 1, C, 0, C, in, tr * inl, inl };
        dims(it, 3, s);
        return 0;
    }
    case GPT_FCW: case GPT_FCB: {
        uint64_t w = id == GPT_FCW ? C : 1;
        uint64_t s[9] = { L, gl, 1, FC1, tr * Fl, Fl, C, 0, C };
        dims(it, id == GPT_FCW ? 3 : 2, s);
        if (!m->cfg.swiglu) return 0;
        /* the up rows: after every rank's gate rows */
        td_item *up = add(l, key, id, base + (size_t)(Fl * w));
        if (!up) return TD_ERR_NOMEM;
        s[4] = F + tr * Fl;
        dims(up, id == GPT_FCW ? 3 : 2, s);
        return 0;
    }
    default: {   /* norms and row-parallel biases: replicated over TP */
        uint64_t s[6] = { L, gl, 1, C, 0, C };
        dims(it, 2, s);
        it->replica = tr > 0;
        return 0;
    }
    }
}

int td_items(const gpt_model *m, td_item **out, size_t *n, char *err, size_t errlen)
{
    int rc = 0;
    struct lister l = {0};
    uint64_t C = (uint64_t)m->C, Vp = (uint64_t)m->Vp, Vl = (uint64_t)m->Vl, vs = (uint64_t)m->v_start;
    int tp0 = m->cfg.tp_rank == 0;
    size_t base = 0;
    *out = NULL;
    *n = 0;
    for (int id = 0; id < GPT_NUM_PARAMS; id++) {
        size_t sz = m->param_sizes[id];
        if (!sz) continue;
        td_item *it = NULL;
        if (layer_key(id)) {
            size_t per = sz / (size_t)m->Ll;
            for (int ll = 0; ll < m->Ll; ll++)
                if ((rc = layer_items(&l, m, id, base + (size_t)ll * per, (uint64_t)(m->layer_begin + ll))) != 0)
                    FAIL(rc, "out of memory listing the checkpoint's items");
            base += sz;
            continue;
        }
        switch (id) {
        case GPT_WTE: case GPT_OUTW: {
            uint64_t s[6] = { Vp, vs, Vl, C, 0, C };
            it = add(&l, id == GPT_WTE ? "embedding.word_embeddings.weight" : "output_layer.weight", id, base);
            if (!it) FAIL(TD_ERR_NOMEM, "out of memory listing the checkpoint's items");
            dims(it, 2, s);
            it->resizable = 1;
            /* the tied copy on a last stage: Megatron saves it as a replica of the embedding */
            it->replica = id == GPT_WTE && !m->first_stage;
            break;
        }
        case GPT_WPE: {
            uint64_t s[6] = { (uint64_t)m->maxT, 0, (uint64_t)m->maxT, C, 0, C };
            if (!(it = add(&l, "embedding.position_embeddings.weight", id, base))) FAIL(TD_ERR_NOMEM, "out of memory");
            dims(it, 2, s);
            it->replica = !tp0;
            break;
        }
        case GPT_LNFW: case GPT_LNFB: {
            uint64_t s[3] = { C, 0, C };
            if (!(it = add(&l, id == GPT_LNFW ? "decoder.final_layernorm.weight" : "decoder.final_layernorm.bias", id, base)))
                FAIL(TD_ERR_NOMEM, "out of memory");
            dims(it, 1, s);
            it->replica = !tp0;
            break;
        }
        default:   /* GPT_EMBLNW, GPT_EMBLNB */
            FAIL(TD_ERR_UNSUPPORTED, "Megatron-Core has no key for the embedding LayerNorm (--embed-layernorm)");
        }
        base += sz;
    }
    *out = l.v;
    *n = l.n;
    return 0;
cleanup:
    free(l.v);
    return rc;
}

/* Local row of chunk row i of a QKV item: the rank's groups hold [q of the
 * group's NH/G heads, k, v] in Megatron's order, [q | k | v] in mds's. */
static size_t qkv_row(const gpt_model *m, size_t i)
{
    size_t hs = (size_t)m->hs, qg = (size_t)(m->NH / m->G) * hs, per = qg + 2 * hs;
    size_t g = i / per, w = i % per;
    if (w < qg) return g * qg + w;
    if (w < qg + hs) return (size_t)m->Cl + g * hs + (w - qg);
    return (size_t)m->Cl + (size_t)m->KVl + g * hs + (w - qg - hs);
}

static void item_move(const gpt_model *m, const td_item *it, float *chunk, float *params, int to_params)
{
    size_t n = td_item_numel(it);
    if (!it->qkv) {
        if (to_params) memcpy(params + it->base, chunk, n * sizeof(float));
        else memcpy(chunk, params + it->base, n * sizeof(float));
        return;
    }
    size_t w = it->ndim == 3 ? (size_t)m->C : 1, rows = (size_t)it->size[1];
    for (size_t i = 0; i < rows; i++) {
        float *p = params + it->base + qkv_row(m, i) * w, *c = chunk + i * w;
        if (to_params) memcpy(p, c, w * sizeof(float));
        else memcpy(c, p, w * sizeof(float));
    }
}

void td_item_gather(const gpt_model *m, const td_item *it, const float *params, float *chunk)
{
    item_move(m, it, chunk, (float *)params, 0);
}

void td_item_scatter(const gpt_model *m, const td_item *it, const float *chunk, float *params)
{
    item_move(m, it, (float *)chunk, params, 1);
}

/* ---- .metadata ------------------------------------------------------------- */

#define TD_MD_DIMS 8

struct chunk {
    int64_t off[TD_MD_DIMS], size[TD_MD_DIMS];
    const char *file;          /* relative_path */
    int64_t foff, len;
};

struct tkey {
    const char *key;
    int bytes;                 /* an object item */
    int dtype;                 /* enum ts_dtype */
    int ndim;
    int64_t shape[TD_MD_DIMS];
    struct chunk *ch;
    size_t nch;
    int used;
};

struct index {
    struct tkey *k;
    size_t n;
    struct chunk *all;
};

static int dtype_of(const pk_node *g)
{
    if (pk_is_global(g, "torch.float32")) return TS_F32;
    if (pk_is_global(g, "torch.bfloat16")) return TS_BF16;
    if (pk_is_global(g, "torch.float16")) return TS_F16;
    return -1;
}

/* storage_data's entries sorted by (fqn, offsets), so that finding each
 * chunk's is a binary search: a large model has tens of thousands. */
struct place {
    const char *fqn;
    int nd;                    /* -1: no offsets (an object item) */
    int64_t off[TD_MD_DIMS];
    const pk_node *info;
};

static int place_cmp(const void *a, const void *b)
{
    const struct place *x = a, *y = b;
    int c = strcmp(x->fqn, y->fqn);
    if (c) return c;
    if (x->nd != y->nd) return x->nd < y->nd ? -1 : 1;
    for (int d = 0; d < x->nd; d++)
        if (x->off[d] != y->off[d]) return x->off[d] < y->off[d] ? -1 : 1;
    return 0;
}

/* The places of sd (malloc'd, sorted); entries that are not a
 * MetadataIndex with a string fqn are left out (no chunk can find them). */
static struct place *places_build(const pk_node *sd, size_t *n)
{
    struct place *p = malloc((sd->n / 2 + 1) * sizeof *p);
    *n = 0;
    if (!p) return NULL;
    for (size_t i = 0; i + 1 < sd->n; i += 2) {
        const pk_node *idx = pk_object_dict(sd->items[i]);
        const pk_node *fqn = pk_dict_get(idx, "fqn"), *o = pk_dict_get(idx, "offset");
        if (!pk_is_object(sd->items[i], DCP "metadata.MetadataIndex") || !fqn || fqn->kind != PK_STR) continue;
        struct place *q = &p[*n];
        memset(q, 0, sizeof *q);
        q->fqn = fqn->s;
        q->nd = o && o->kind != PK_NONE ? pk_int_tuple(o, q->off, TD_MD_DIMS) : -1;
        if (o && o->kind != PK_NONE && q->nd < 0) continue;
        q->info = sd->items[i + 1];
        (*n)++;
    }
    qsort(p, *n, sizeof *p, place_cmp);
    return p;
}

/* storage_data's entry of (key, offsets); NULL offsets: an object item. */
static const pk_node *storage_of(const struct place *p, size_t n, const char *key, const int64_t *off, int nd)
{
    struct place want;
    memset(&want, 0, sizeof want);
    want.fqn = key;
    want.nd = off ? nd : -1;
    if (off) memcpy(want.off, off, (size_t)nd * sizeof *off);
    const struct place *hit = bsearch(&want, p, n, sizeof *p, place_cmp);
    return hit ? hit->info : NULL;
}

static int chunk_place(struct chunk *c, const pk_node *info)
{
    const pk_node *d = pk_object_dict(info);
    const pk_node *path = pk_dict_get(d, "relative_path"), *fo = pk_dict_get(d, "offset"), *len = pk_dict_get(d, "length");
    if (!pk_is_object(info, DCP "filesystem._StorageInfo") || !path || path->kind != PK_STR || !fo || fo->kind != PK_INT ||
        !len || len->kind != PK_INT || fo->i < 0 || len->i <= 0)
        return -1;
    /* a file of this directory: no path, no hidden name */
    if (strchr(path->s, '/') || path->s[0] == '.' || path->len == 0) return -1;
    c->file = path->s;
    c->foff = fo->i;
    c->len = len->i;
    return 0;
}

static int overlap(const int64_t *ao, const int64_t *as, const int64_t *bo, const int64_t *bs, int nd)
{
    for (int d = 0; d < nd; d++)
        if (ao[d] + as[d] <= bo[d] || bo[d] + bs[d] <= ao[d]) return 0;
    return 1;
}

/* Checks a tensor key's chunks: in bounds, disjoint, covering the shape. */
static int chunks_check(const struct tkey *k, const char *md, char *err, size_t errlen)
{
    int rc = 0;
    double vol = 0, total = 1;
    for (int d = 0; d < k->ndim; d++) total *= (double)k->shape[d];
    for (size_t i = 0; i < k->nch; i++) {
        const struct chunk *c = &k->ch[i];
        double v = 1;
        for (int d = 0; d < k->ndim; d++) {
            if (c->off[d] < 0 || c->size[d] <= 0 || c->off[d] + c->size[d] > k->shape[d])
                FAIL(TD_ERR_FORMAT, "'%s': key '%s': a chunk lies outside the global shape (axis %d)", md, k->key, d);
            v *= (double)c->size[d];
        }
        vol += v;
        for (size_t j = 0; j < i; j++)
            if (overlap(c->off, c->size, k->ch[j].off, k->ch[j].size, k->ndim))
                FAIL(TD_ERR_FORMAT, "'%s': key '%s': two chunks overlap", md, k->key);
    }
    if (vol != total) FAIL(TD_ERR_FORMAT, "'%s': key '%s': the chunks do not cover the global shape", md, k->key);
cleanup:
    return rc;
}

static int index_build(struct index *ix, const pk_node *root, const char *md, char *err, size_t errlen)
{
    int rc = 0;
    struct place *places = NULL;
    size_t nplaces = 0;
    const pk_node *d = pk_object_dict(root);
    const pk_node *sdm = pk_dict_get(d, "state_dict_metadata"), *sd = pk_dict_get(d, "storage_data");
    memset(ix, 0, sizeof *ix);
    if (!pk_is_object(root, DCP "metadata.Metadata") || !sdm || sdm->kind != PK_DICT || !sd || sd->kind != PK_DICT)
        FAIL(TD_ERR_FORMAT, "'%s': not a torch.distributed.checkpoint Metadata", md);
    size_t nch = 0;
    for (size_t i = 0; i + 1 < sdm->n; i += 2) {
        const pk_node *t = pk_object_dict(sdm->items[i + 1]), *chunks = pk_dict_get(t, "chunks");
        nch += chunks && chunks->kind == PK_LIST ? chunks->n : 1;   /* an object item: one */
    }
    ix->k = calloc(sdm->n / 2 + 1, sizeof *ix->k);
    ix->all = calloc(nch + 1, sizeof *ix->all);
    places = places_build(sd, &nplaces);
    if (!ix->k || !ix->all || !places) FAIL(TD_ERR_NOMEM, "'%s': out of memory", md);
    struct chunk *next = ix->all;
    for (size_t i = 0; i + 1 < sdm->n; i += 2) {
        const pk_node *key = sdm->items[i], *v = sdm->items[i + 1];
        struct tkey *k = &ix->k[ix->n++];
        if (key->kind != PK_STR) FAIL(TD_ERR_FORMAT, "'%s': a key that is not a string", md);
        k->key = key->s;
        if (pk_is_object(v, DCP "metadata.BytesStorageMetadata")) {
            k->bytes = 1;
            k->ch = next++;
            k->nch = 1;
            const pk_node *info = storage_of(places, nplaces, k->key, NULL, 0);
            if (!info || chunk_place(k->ch, info)) FAIL(TD_ERR_FORMAT, "'%s': key '%s': no valid storage entry", md, k->key);
            continue;
        }
        const pk_node *t = pk_object_dict(v), *props = pk_dict_get(t, "properties"), *chunks = pk_dict_get(t, "chunks");
        if (!pk_is_object(v, DCP "metadata.TensorStorageMetadata") || !pk_is_object(props, DCP "metadata.TensorProperties") ||
            !props->state || props->state->kind != PK_TUPLE || !props->state->n || !chunks || chunks->kind != PK_LIST)
            FAIL(TD_ERR_FORMAT, "'%s': key '%s': not a TensorStorageMetadata", md, k->key);
        k->dtype = dtype_of(props->state->items[0]);
        k->ndim = pk_int_tuple(pk_dict_get(t, "size"), k->shape, TD_MD_DIMS);
        if (k->ndim < 1) FAIL(TD_ERR_FORMAT, "'%s': key '%s': a bad global shape", md, k->key);
        k->ch = next;
        k->nch = chunks->n;
        next += chunks->n;
        for (size_t j = 0; j < chunks->n; j++) {
            struct chunk *c = &k->ch[j];
            const pk_node *cd = pk_object_dict(chunks->items[j]);
            if (!pk_is_object(chunks->items[j], DCP "metadata.ChunkStorageMetadata") ||
                pk_int_tuple(pk_dict_get(cd, "offsets"), c->off, TD_MD_DIMS) != k->ndim ||
                pk_int_tuple(pk_dict_get(cd, "sizes"), c->size, TD_MD_DIMS) != k->ndim)
                FAIL(TD_ERR_FORMAT, "'%s': key '%s': chunk %zu is not a ChunkStorageMetadata of %d axes", md, k->key, j, k->ndim);
            const pk_node *info = storage_of(places, nplaces, k->key, c->off, k->ndim);
            if (!info || chunk_place(c, info))
                FAIL(TD_ERR_FORMAT, "'%s': key '%s': chunk %zu has no valid storage entry", md, k->key, j);
        }
        if ((rc = chunks_check(k, md, err, errlen)) != 0) goto cleanup;
    }
cleanup:
    free(places);
    return rc;
}

static struct tkey *index_find(struct index *ix, const char *key)
{
    for (size_t i = 0; i < ix->n; i++)
        if (!strcmp(ix->k[i].key, key)) return &ix->k[i];
    return NULL;
}

/* ---- reading items --------------------------------------------------------- */

#define TD_MAX_FILES 64

struct reader {
    const char *dir;
    struct { const char *name; int fd; } f[TD_MAX_FILES];
    int nf;
    unsigned char *buf;
    size_t cap;
};

static void reader_close(struct reader *r)
{
    for (int i = 0; i < r->nf; i++) close(r->f[i].fd);
    free(r->buf);
}

/* The bytes of a stored item into r->buf (valid until the next call). */
static int read_item(struct reader *r, const struct chunk *c, const char *key, char *err, size_t errlen)
{
    int rc = 0, fd = -1;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", r->dir, c->file);
    for (int i = 0; i < r->nf; i++)
        if (!strcmp(r->f[i].name, c->file)) fd = r->f[i].fd;
    if (fd < 0) {
        if (r->nf == TD_MAX_FILES) FAIL(TD_ERR_UNSUPPORTED, "'%s': more than %d .distcp files", r->dir, TD_MAX_FILES);
        if ((fd = open(path, O_RDONLY)) < 0) FAIL(TD_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
        r->f[r->nf].name = c->file;
        r->f[r->nf++].fd = fd;
    }
    if ((size_t)c->len > r->cap) {
        unsigned char *b = realloc(r->buf, (size_t)c->len);
        if (!b) FAIL(TD_ERR_NOMEM, "out of memory reading '%s'", path);
        r->buf = b;
        r->cap = (size_t)c->len;
    }
    size_t got = 0;
    while (got < (size_t)c->len) {
        ssize_t k = pread(fd, r->buf + got, (size_t)c->len - got, (off_t)(c->foff + (int64_t)got));
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) FAIL(TD_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
        if (k == 0) FAIL(TD_ERR_FORMAT, "'%s': key '%s': truncated (its item ends at byte %lld)", path, key,
                         (long long)(c->foff + c->len));
        got += (size_t)k;
    }
cleanup:
    return rc;
}

/* Copies the overlap of a stored chunk (src, row-major over c's sizes)
 * into the item's chunk (dst, row-major over it's sizes); the count. */
static size_t copy_overlap(float *dst, const td_item *it, const unsigned char *src, int dtype, const struct chunk *c)
{
    int nd = it->ndim;
    int64_t lo[TD_MAX_DIMS], hi[TD_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        int64_t a = (int64_t)it->off[d], b = c->off[d];
        lo[d] = a > b ? a : b;
        int64_t ea = a + (int64_t)it->size[d], eb = c->off[d] + c->size[d];
        hi[d] = ea < eb ? ea : eb;
        if (lo[d] >= hi[d]) return 0;
    }
    int mdt = dtype == TS_F32 ? MDS_F32 : dtype == TS_BF16 ? MDS_BF16 : MDS_F16;
    int64_t idx[TD_MAX_DIMS];
    memcpy(idx, lo, sizeof lo);
    size_t run = (size_t)(hi[nd - 1] - lo[nd - 1]), count = 0;
    for (;;) {
        size_t di = 0, si = 0;
        for (int d = 0; d < nd; d++) {
            di = di * (size_t)it->size[d] + (size_t)(idx[d] - (int64_t)it->off[d]);
            si = si * (size_t)c->size[d] + (size_t)(idx[d] - c->off[d]);
        }
        for (size_t j = 0; j < run; j++) dst[di + j] = mds_load(mdt, src, si + j);
        count += run;
        int d = nd - 2;
        while (d >= 0 && ++idx[d] == hi[d]) { idx[d] = lo[d]; d--; }
        if (d < 0) break;
    }
    return count;
}

static int load_item(struct reader *r, struct index *ix, const td_item *it, float *chunk, const char *md,
                     char *err, size_t errlen)
{
    int rc = 0;
    struct tkey *k = index_find(ix, it->key);
    if (!k || k->bytes) FAIL(TD_ERR_MISMATCH, "'%s': no tensor '%s' in the checkpoint", md, it->key);
    k->used = 1;
    if (k->dtype < 0) FAIL(TD_ERR_FORMAT, "'%s': key '%s': dtype is not float32, bfloat16 or float16", md, it->key);
    if (k->ndim != it->ndim) FAIL(TD_ERR_MISMATCH, "'%s': key '%s' has %d axes in the checkpoint, this model %d", md, it->key, k->ndim, it->ndim);
    for (int d = 0; d < it->ndim; d++)
        if ((uint64_t)k->shape[d] != it->shape[d] && !(it->resizable && d == 0))
            FAIL(TD_ERR_MISMATCH, "'%s': key '%s' has %lld on axis %d in the checkpoint but %llu in this model",
                 md, it->key, (long long)k->shape[d], d, (unsigned long long)it->shape[d]);
    size_t n = td_item_numel(it), got = 0;
    if (it->resizable) memset(chunk, 0, n * sizeof(float));   /* rows the checkpoint lacks */
    for (size_t j = 0; j < k->nch; j++) {
        const struct chunk *c = &k->ch[j];
        int inside = 1;
        for (int d = 0; d < it->ndim; d++)
            if (c->off[d] + c->size[d] <= (int64_t)it->off[d] || (int64_t)(it->off[d] + it->size[d]) <= c->off[d]) inside = 0;
        if (!inside) continue;
        if ((rc = read_item(r, c, it->key, err, errlen)) != 0) goto cleanup;
        char name[4300];
        snprintf(name, sizeof name, "%s/%s@%lld", r->dir, c->file, (long long)c->foff);
        ts_tensor t;
        char why[1024];
        if (ts_tensor_parse(r->buf, (size_t)c->len, name, &t, why, sizeof why) != 0)
            FAIL(TD_ERR_FORMAT, "%s (key '%s')", why, it->key);
        if (t.dtype != k->dtype)
            FAIL(TD_ERR_FORMAT, "'%s': key '%s': the archive holds %s but .metadata says %s", name, it->key,
                 ts_dtype_name(t.dtype), ts_dtype_name(k->dtype));
        int same = t.ndim == k->ndim;
        for (int d = 0; same && d < k->ndim; d++) same = (int64_t)t.shape[d] == c->size[d];
        if (!same) FAIL(TD_ERR_FORMAT, "'%s': key '%s': the archive's shape is not the chunk's in .metadata", name, it->key);
        got += copy_overlap(chunk, it, t.data, t.dtype, c);
    }
    if (got != n && !it->resizable)
        FAIL(TD_ERR_FORMAT, "'%s': key '%s': the chunks hold %zu of this rank's %zu elements", md, it->key, got, n);
cleanup:
    return rc;
}

/* ---- metadata.json and the common state ------------------------------------ */

int td_is_checkpoint(const char *iter_dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/metadata.json", iter_dir);
    if (access(path, F_OK) == 0) return 1;
    snprintf(path, sizeof path, "%s/.metadata", iter_dir);
    return access(path, F_OK) == 0 ? -1 : 0;
}

/* Megatron's load checks the config: {"sharded_backend": "torch_dist", "sharded_backend_version": 1}. */
static int check_config(const char *iter_dir, char *err, size_t errlen)
{
    int rc = 0;
    char path[4200], jerr[512];
    snprintf(path, sizeof path, "%s/metadata.json", iter_dir);
    jt_doc *doc = NULL;
    int jr = jt_parse_file(&doc, path, jerr, sizeof jerr);
    if (jr == JT_ERR_IO) FAIL(TD_ERR_IO, "%s", jerr);
    if (jr != 0) FAIL(TD_ERR_FORMAT, "%s", jerr);
    const jt_node *root = jt_root(doc);
    if (root->type != JT_OBJECT) FAIL(TD_ERR_FORMAT, "'%s': not a JSON object", path);
    const jt_node *b = jt_get(root, "sharded_backend"), *v = jt_get(root, "sharded_backend_version");
    if (!b || !v) FAIL(TD_ERR_FORMAT, "'%s': no %s", path, b ? "sharded_backend_version" : "sharded_backend");
    const char *bs = jt_str(b);
    if (!bs) FAIL(TD_ERR_UNSUPPORTED, "'%s': sharded_backend is %s, not \"torch_dist\"", path, jt_type_name(b->type));
    if (strcmp(bs, "torch_dist")) {
        char q[64];
        if (jt_quote(q, sizeof q, bs) < 0) snprintf(q, sizeof q, "a long string");
        FAIL(TD_ERR_UNSUPPORTED, "'%s': sharded_backend is %s, not \"torch_dist\"", path, q);
    }
    if (v->type != JT_NUMBER || v->num != 1)
        FAIL(TD_ERR_UNSUPPORTED, "'%s': sharded_backend_version is not 1", path);
cleanup:
    jt_free(doc);
    return rc;
}

static uint64_t uint_of(const pk_node *n) { return n && n->kind == PK_INT && n->i >= 0 ? (uint64_t)n->i : 0; }
static double num_of(const pk_node *n) { return !n ? 0 : n->kind == PK_INT ? (double)n->i : n->kind == PK_FLOAT ? n->f : 0; }

/* The optimizer's common part, wherever a ChainedOptimizer or the
 * distributed optimizer nests it: its sharding type and the step of every
 * param group (torch's Adam keeps it per parameter, Megatron's state_dict
 * puts it in the groups as a number); -1 when two steps differ. */
static int optim_walk(const pk_node *n, int depth, td_state *st)
{
    if (!n || depth > 8) return 0;
    if (n->kind == PK_LIST || n->kind == PK_TUPLE) {
        for (size_t i = 0; i < n->n; i++)
            if (optim_walk(n->items[i], depth + 1, st)) return -1;
        return 0;
    }
    if (n->kind != PK_DICT) return 0;
    for (size_t i = 0; i + 1 < n->n; i += 2) {
        const pk_node *k = n->items[i], *v = n->items[i + 1];
        if (k->kind == PK_STR && !strcmp(k->s, "param_state_sharding_type") && v->kind == PK_STR) {
            snprintf(st->optim_sharding, sizeof st->optim_sharding, "%s", v->s);
        } else if (k->kind == PK_STR && !strcmp(k->s, "param_groups") && v->kind == PK_LIST) {
            for (size_t g = 0; g < v->n; g++) {
                const pk_node *step = pk_dict_get(v->items[g], "step");
                double x = num_of(step);
                if (!step || (step->kind != PK_INT && step->kind != PK_FLOAT) || x < 0 || x != (double)(uint64_t)x) continue;
                if (st->has_step && st->step != (uint64_t)x) return -1;
                st->has_step = 1;
                st->step = (uint64_t)x;
            }
        } else if (optim_walk(v, depth + 1, st)) {
            return -1;
        }
    }
    return 0;
}
static int64_t int_or(const pk_node *n, int64_t dflt) { return n && n->kind == PK_INT ? n->i : dflt; }

/* The common state: [dict] of torch.save in the object item common_state/... */
static int read_common(struct reader *r, struct index *ix, td_state *st, const char *md, char *err, size_t errlen)
{
    int rc = 0;
    pk_doc *doc = NULL;
    struct tkey *k = NULL;
    for (size_t i = 0; i < ix->n && !k; i++)
        if (ix->k[i].bytes && !strncmp(ix->k[i].key, "common_state/", 13)) k = &ix->k[i];
    if (!k) FAIL(TD_ERR_FORMAT, "'%s': no common_state item (iteration and args)", md);
    k->used = 1;
    if ((rc = read_item(r, k->ch, k->key, err, errlen)) != 0) goto cleanup;
    char name[4300];
    snprintf(name, sizeof name, "%s/%s@%lld", r->dir, k->ch->file, (long long)k->ch->foff);
    ts_archive a;
    if (ts_archive_parse(r->buf, (size_t)k->ch->len, name, &a, err, errlen) != 0) { rc = TD_ERR_FORMAT; goto cleanup; }
    const ts_record *pkl = ts_archive_find(&a, "data.pkl");
    if (!pkl) FAIL(TD_ERR_FORMAT, "'%s': key '%s': no data.pkl", name, k->key);
    if (pk_parse(pkl->data, pkl->size, name, &doc, err, errlen) != 0) { rc = TD_ERR_FORMAT; goto cleanup; }
    const pk_node *root = pk_root(doc), *cs = root && root->kind == PK_LIST && root->n == 1 ? root->items[0] : NULL;
    if (!cs || cs->kind != PK_DICT) FAIL(TD_ERR_FORMAT, "'%s': key '%s': not a list of one dict", name, k->key);
    const pk_node *it = pk_dict_get(cs, "iteration");
    if (!it || it->kind != PK_INT || it->i < 0) FAIL(TD_ERR_FORMAT, "'%s': key '%s': no iteration", name, k->key);
    st->iteration = (uint64_t)it->i;
    const pk_node *sched = pk_dict_get(cs, "opt_param_scheduler"), *optim = pk_dict_get(cs, "optimizer");
    st->has_scheduler = sched && sched->kind == PK_DICT;
    if (st->has_scheduler) {
        const pk_node *style = pk_dict_get(sched, "lr_decay_style");
        st->sched_max_lr = num_of(pk_dict_get(sched, "max_lr"));
        st->sched_min_lr = num_of(pk_dict_get(sched, "min_lr"));
        st->sched_warmup_steps = num_of(pk_dict_get(sched, "lr_warmup_steps"));
        st->sched_decay_steps = num_of(pk_dict_get(sched, "lr_decay_steps"));
        st->sched_num_steps = num_of(pk_dict_get(sched, "num_steps"));
        if (style && style->kind == PK_STR) snprintf(st->sched_decay_style, sizeof st->sched_decay_style, "%s", style->s);
    }
    st->has_optimizer |= optim != NULL;
    if (optim_walk(optim, 0, st)) FAIL(TD_ERR_FORMAT, "'%s': key '%s': the optimizer's param groups hold different steps", name, k->key);
    const pk_node *args = pk_dict_get(cs, "args");
    st->args_tp = st->args_pp = 1;
    st->args_num_layers = st->args_hidden_size = st->args_num_attention_heads = -1;
    st->args_max_position_embeddings = st->args_make_vocab_size_divisible_by = -1;
    if (args && args->kind != PK_NONE) {
        const pk_node *ns = pk_object_dict(args);
        if (!pk_is_object(args, "argparse.Namespace") || !ns)
            FAIL(TD_ERR_FORMAT, "'%s': key '%s': args is not an argparse.Namespace", name, k->key);
        st->has_args = 1;
        st->consumed_train_samples = uint_of(pk_dict_get(ns, "consumed_train_samples"));
        st->consumed_valid_samples = uint_of(pk_dict_get(ns, "consumed_valid_samples"));
        const pk_node *tp = pk_dict_get(ns, "tensor_model_parallel_size"), *pp = pk_dict_get(ns, "pipeline_model_parallel_size");
        if (tp && tp->kind == PK_INT) st->args_tp = (int)tp->i;
        if (pp && pp->kind == PK_INT) st->args_pp = (int)pp->i;
        const pk_node *nso = pk_dict_get(ns, "no_save_optim"), *nsr = pk_dict_get(ns, "no_save_rng");
        st->args_no_save_optim = nso && nso->kind == PK_BOOL && nso->i;
        st->args_no_save_rng = nsr && nsr->kind == PK_BOOL && nsr->i;
        st->args_num_layers = int_or(pk_dict_get(ns, "num_layers"), -1);
        st->args_hidden_size = int_or(pk_dict_get(ns, "hidden_size"), -1);
        st->args_num_attention_heads = int_or(pk_dict_get(ns, "num_attention_heads"), -1);
        st->args_max_position_embeddings = int_or(pk_dict_get(ns, "max_position_embeddings"), -1);
        st->args_make_vocab_size_divisible_by = int_or(pk_dict_get(ns, "make_vocab_size_divisible_by"), -1);
        const pk_node *tt = pk_dict_get(ns, "tokenizer_type");
        if (tt && tt->kind == PK_STR) snprintf(st->args_tokenizer_type, sizeof st->args_tokenizer_type, "%s", tt->s);
    }
cleanup:
    pk_free(doc);
    return rc;
}

/* A key of the model part of the checkpoint (not optimizer, RNG, common or
 * _extra_state objects). */
static int model_key(const struct tkey *k)
{
    return !k->bytes && strncmp(k->key, "optimizer.", 10) && strncmp(k->key, "rng_state", 9) &&
           strncmp(k->key, "rerun_state_machine", 19);
}

/* The index of iter_dir's .metadata, after its metadata.json is checked;
 * *buf and *doc own what the index points into. */
static int open_index(const char *iter_dir, char *md, size_t mdcap, unsigned char **buf, pk_doc **doc, struct index *ix,
                      char *err, size_t errlen)
{
    int rc = 0;
    size_t size = 0;
    if ((rc = check_config(iter_dir, err, errlen)) != 0) goto cleanup;
    snprintf(md, mdcap, "%s/.metadata", iter_dir);
    int rf = read_whole_file(md, buf, &size);
    if (rf != READFILE_OK)
        FAIL(TD_ERR_IO, "cannot read '%s': %s", md, rf == READFILE_NOMEM ? "out of memory" : strerror(errno));
    if (pk_parse(*buf, size, md, doc, err, errlen) != 0) { rc = TD_ERR_FORMAT; goto cleanup; }
    rc = index_build(ix, pk_root(*doc), md, err, errlen);
cleanup:
    return rc;
}

/* Every item of m under key prefix (e.g. "optimizer.state.exp_avg.") into
 * out (the rank's flat layout); chunk holds the largest item. */
static int load_all(struct reader *r, struct index *ix, const gpt_model *m, const td_item *items, size_t n,
                    const char *prefix, int optional, float *out, float *chunk, const char *md, char *err, size_t errlen)
{
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        td_item it = items[i];
        if (snprintf(it.key, sizeof it.key, "%s%s", prefix, items[i].key) >= (int)sizeof it.key)
            FAIL(TD_ERR_UNSUPPORTED, "'%s': key '%s%s' is too long", md, prefix, items[i].key);
        if (optional && !index_find(ix, it.key)) continue;
        if ((rc = load_item(r, ix, &it, chunk, md, err, errlen)) != 0) goto cleanup;
        td_item_scatter(m, &it, chunk, out);
    }
cleanup:
    return rc;
}

/* What both reads hold open: the index of .metadata (and the bytes and
 * tree it points into), the files, this rank's items, a flat array of the
 * rank's parameters and a buffer of the largest item. */
struct session {
    char md[4200];
    unsigned char *buf;
    pk_doc *doc;
    struct index ix;
    struct reader r;
    td_item *items;
    size_t nitems;
    float *flat, *chunk;
};

static int session_open(struct session *s, const gpt_model *m, const char *iter_dir, char *err, size_t errlen)
{
    int rc = 0;
    size_t maxn = 0;
    memset(s, 0, sizeof *s);
    s->r.dir = iter_dir;
    if ((rc = open_index(iter_dir, s->md, sizeof s->md, &s->buf, &s->doc, &s->ix, err, errlen)) != 0) goto cleanup;
    if ((rc = td_items(m, &s->items, &s->nitems, err, errlen)) != 0) goto cleanup;
    for (size_t i = 0; i < s->nitems; i++)
        if (td_item_numel(&s->items[i]) > maxn) maxn = td_item_numel(&s->items[i]);
    s->flat = malloc((m->num_params ? m->num_params : 1) * sizeof(float));
    s->chunk = malloc((maxn ? maxn : 1) * sizeof(float));
    if (!s->flat || !s->chunk) FAIL(TD_ERR_NOMEM, "out of memory loading '%s'", iter_dir);
cleanup:
    return rc;
}

static void session_close(struct session *s)
{
    reader_close(&s->r);
    free(s->items);
    free(s->flat);
    free(s->chunk);
    free(s->ix.k);
    free(s->ix.all);
    pk_free(s->doc);
    free(s->buf);
}

int td_load_optimizer(gpt_model *m, const char *iter_dir, const td_state *st, char *err, size_t errlen)
{
    int rc = 0;
    struct session s;
    if ((rc = session_open(&s, m, iter_dir, err, errlen)) != 0) goto cleanup;
    for (size_t i = 0; i < s.ix.n; i++)
        if (!strncmp(s.ix.k[i].key, "optimizer.distributed.", 22))
            FAIL(TD_ERR_UNSUPPORTED, "'%s': the optimizer state is in the distributed optimizer's bucket layout ('%s', "
                 "dp_reshardable): only the model-space layout (fully_reshardable) is read", s.md, s.ix.k[i].key);
    if (st->optim_sharding[0] && strcmp(st->optim_sharding, "fully_reshardable"))
        FAIL(TD_ERR_UNSUPPORTED, "'%s': optimizer sharding type '%s' is not read (only fully_reshardable)", s.md, st->optim_sharding);
    if (!st->has_step) FAIL(TD_ERR_FORMAT, "'%s': no Adam step in the optimizer's param_groups", s.md);
    /* the masters first (the whole flat array; the moments only the
       optimizer's pieces), where stored: the plain optimizer keeps fp32_param only for
       16-bit weights, the others' masters are their weights */
    static const char *const masters[2] = { "optimizer.state.param.", "optimizer.state.fp32_param." };
    if (gpt_state_read(m, GPT_STATE_WEIGHTS, 0, s.flat, m->num_params) != 0)
        FAIL(TD_ERR_NOMEM, "cannot read the weights of '%s'", iter_dir);
    for (int w = 0; w < 2; w++)
        if ((rc = load_all(&s.r, &s.ix, m, s.items, s.nitems, masters[w], 1, s.flat, s.chunk, s.md, err, errlen)) != 0)
            goto cleanup;
    if (gpt_state_write(m, GPT_STATE_WEIGHTS, 0, s.flat, m->num_params) != 0)
        FAIL(TD_ERR_NOMEM, "cannot write the master weights of '%s'", iter_dir);
    static const char *const moments[2] = { "optimizer.state.exp_avg.", "optimizer.state.exp_avg_sq." };
    for (int w = 0; w < 2; w++) {
        if ((rc = load_all(&s.r, &s.ix, m, s.items, s.nitems, moments[w], 0, s.flat, s.chunk, s.md, err, errlen)) != 0)
            goto cleanup;
        if (gpt_state_write_pieces(m, w ? GPT_STATE_ADAM_V : GPT_STATE_ADAM_M, s.flat) != 0)
            FAIL(TD_ERR_NOMEM, "cannot write the optimizer state of '%s'", iter_dir);
    }
    m->step = (int)st->step;
cleanup:
    session_close(&s);
    return rc;
}

int td_load(gpt_model *m, const char *iter_dir, td_state *st, char *err, size_t errlen)
{
    int rc = 0;
    struct session s;
    memset(st, 0, sizeof *st);
    if ((rc = session_open(&s, m, iter_dir, err, errlen)) != 0) goto cleanup;
    for (size_t i = 0; i < s.ix.n; i++) {
        if (!strncmp(s.ix.k[i].key, "optimizer.", 10)) st->has_optimizer = 1;
        if (!strncmp(s.ix.k[i].key, "rng_state", 9)) st->has_rng = 1;
    }
    if ((rc = read_common(&s.r, &s.ix, st, s.md, err, errlen)) != 0) goto cleanup;
    if ((rc = load_all(&s.r, &s.ix, m, s.items, s.nitems, "", 0, s.flat, s.chunk, s.md, err, errlen)) != 0) goto cleanup;
    /* a model key this rank leaves unread is another stage's (the
       embedding is the first stage's, the final norm and the output layer
       the last's; every stage reads every layer key) or one this model
       lacks */
    for (size_t i = 0; i < s.ix.n; i++) {
        const struct tkey *k = &s.ix.k[i];
        if (!model_key(k) || k->used) continue;
        int other = strncmp(k->key, LAYERS, strlen(LAYERS)) &&
                    (!strncmp(k->key, "embedding.", 10) ? !m->first_stage : !m->last_stage);
        if (!other) FAIL(TD_ERR_MISMATCH, "'%s': the checkpoint holds '%s', which this model does not have", s.md, k->key);
    }
    if (gpt_state_write(m, GPT_STATE_WEIGHTS, 0, s.flat, m->num_params) != 0)
        FAIL(TD_ERR_NOMEM, "cannot write the weights of '%s'", iter_dir);
cleanup:
    session_close(&s);
    return rc;
}
