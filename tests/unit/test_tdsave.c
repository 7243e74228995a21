/*
 * test_tdsave.c - train/tdsave.h (and pickle.h's writer) against the
 * Megatron-written checkpoints of tests/data/torch_dist:
 * - the pickle writer alone: every fixture's .metadata and every object
 *   item's data.pkl, read with pk_parse and written back with pk_write
 *   (which shares what the reader shares), are the same bytes;
 * - the objects: every [None] _extra_state item is tds_object_archive(NULL)
 *   and the common state is tds_common_state of the values read back;
 * - whole directories: each fixture's items (keys, shapes, chunks from its
 *   all_local_plans, the data from its .distcp files) given to tds_write_rank
 *   rank by rank, tds_write_metadata with its save_id and checkpoint_id and
 *   ckpt_write_latest rebuild every file byte for byte;
 * - bad arguments and bad blobs are refused with one line.
 * With --write DIR it instead writes DIR (a checkpoint for the real readers,
 * tests/data/torch_dist/check_mds_write.py): llama_tp2_bf16mix's items through
 * the writer, with a common state that also holds args and the scheduler.
 */
#include "harness.h"
#include "torchdist_fixtures.h"
#include "checkpoint.h"
#include "pickle.h"
#include "tdsave.h"
#include "torchsave.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DCP "torch.distributed.checkpoint."
#define MAXR 4

/* The fixture's file iter_0000001/NAME (malloc'd), or NULL. */
static unsigned char *fixture_file(const char *fx, const char *name, size_t *n)
{
    char path[512];
    snprintf(path, sizeof path, DIR "%s/iter_0000001/%s", fx, name);
    return read_file_or_null(path, n);
}

static int same_file(const char *a, const char *b)
{
    size_t na, nb;
    unsigned char *pa = read_file_or_null(a, &na), *pb = read_file_or_null(b, &nb);
    int same = pa && pb && na == nb && !memcmp(pa, pb, na);
    if (!same) fprintf(stderr, "differs: '%s' (%zu bytes) and '%s' (%zu bytes)\n", a, pa ? na : 0, b, pb ? nb : 0);
    free(pa);
    free(pb);
    return same;
}

/* pk_parse then pk_write gives the same bytes. */
static int round_trips(const unsigned char *p, size_t n, int proto, const char *what)
{
    pk_doc *d = NULL;
    char err[256];
    unsigned char *q = NULL;
    size_t m = 0;
    int ok = !pk_parse(p, n, what, &d, err, sizeof err) && !pk_write(d, pk_root(d), proto, &q, &m) && m == n && !memcmp(p, q, n);
    if (!ok) fprintf(stderr, "%s: does not round-trip (%zu -> %zu bytes)\n", what, n, m);
    free(q);
    pk_free(d);
    return ok;
}

static void test_pickle_round_trip(void)
{
    for (size_t f = 0; f < sizeof fixtures / sizeof *fixtures; f++) {
        size_t n;
        unsigned char *md = fixture_file(fixtures[f], ".metadata", &n);
        CHECK(md && round_trips(md, n, 4, fixtures[f]));
        free(md);
    }
}

/* ---- a fixture's items, from its .metadata and .distcp files --------------- */

typedef struct fixture {
    pk_doc *md;
    const char *ckpt_id, *save_id;
    unsigned char *file[MAXR];
    size_t nfile[MAXR];
    tds_item *items[MAXR];
    size_t nitems[MAXR];
    int nranks;
    pk_doc *objs;                    /* the objects' trees, for tds_object_archive */
    ts_buf arch[MAXR];               /* the objects' archives as td writes them, back to back */
} fixture;

static const char *str_field(const pk_node *o, const char *k)
{
    const pk_node *v = pk_dict_get(pk_object_dict(o), k);
    return v && v->kind == PK_STR ? v->s : NULL;
}

/* storage_data's (file, offset, length) for the plan item index mi. */
static int find_storage(const pk_node *sd, const char *fqn, const pk_node *off, int *rank, size_t *o, size_t *l)
{
    int64_t want[TS_MAX_DIMS], have[TS_MAX_DIMS];
    int nw = off ? pk_int_tuple(off, want, TS_MAX_DIMS) : -1;
    for (size_t i = 0; i + 1 < sd->n; i += 2) {
        const pk_node *k = pk_object_dict(sd->items[i]), *v = pk_object_dict(sd->items[i + 1]);
        const char *kf = str_field(sd->items[i], "fqn");
        if (!kf || strcmp(kf, fqn)) continue;
        const pk_node *ko = pk_dict_get(k, "offset");
        int nh = ko ? pk_int_tuple(ko, have, TS_MAX_DIMS) : -1;
        if (nh != nw || (nh > 0 && memcmp(have, want, (size_t)nh * sizeof *have))) continue;
        const char *rel = str_field(sd->items[i + 1], "relative_path");
        if (!rel || sscanf(rel, "__%d_0.distcp", rank) != 1) return -1;
        *o = (size_t)pk_dict_get(v, "offset")->i;
        *l = (size_t)pk_dict_get(v, "length")->i;
        return 0;
    }
    return -1;
}

static int dtype_of(const pk_node *g)
{
    for (int t = 0; t < 3; t++)
        if (pk_is_global(g, ts_dtype_name(t))) return t;
    return -1;
}

/* One plan item into *it (views into the fixture's files). */
static int load_item(fixture *F, const pk_node *wi, const pk_node *sd, tds_item *it)
{
    const pk_node *w = pk_object_dict(wi), *idx = pk_dict_get(w, "index"), *td = pk_dict_get(w, "tensor_data");
    const char *fqn = str_field(idx, "fqn");
    int rank;
    size_t off, len;
    if (!fqn || find_storage(sd, fqn, pk_dict_get(pk_object_dict(idx), "offset"), &rank, &off, &len) || rank >= F->nranks
        || off + len > F->nfile[rank])
        return -1;
    it->key = fqn;
    const unsigned char *p = F->file[rank] + off;
    if (!td || td->kind == PK_NONE) {
        it->kind = TDS_OBJECT;
        it->obj = p;
        it->nobj = len;
        return 0;
    }
    const pk_node *t = pk_object_dict(td), *chunk = pk_object_dict(pk_dict_get(t, "chunk"));
    const pk_node *props = pk_dict_get(t, "properties")->state;      /* the __getstate__ tuple */
    int64_t v[TS_MAX_DIMS];
    it->kind = TDS_TENSOR;
    it->dtype = dtype_of(props->items[0]);
    it->stacked = props->n == 6 && props->items[5]->kind == PK_NONE;
    it->ndim = pk_int_tuple(pk_dict_get(t, "size"), v, TS_MAX_DIMS);
    for (int d = 0; d < it->ndim; d++) it->shape[d] = (uint64_t)v[d];
    if (pk_int_tuple(pk_dict_get(chunk, "offsets"), v, TS_MAX_DIMS) != it->ndim) return -1;
    for (int d = 0; d < it->ndim; d++) it->offset[d] = (uint64_t)v[d];
    if (pk_int_tuple(pk_dict_get(chunk, "sizes"), v, TS_MAX_DIMS) != it->ndim) return -1;
    for (int d = 0; d < it->ndim; d++) it->size[d] = (uint64_t)v[d];
    ts_tensor tt;
    char err[256];
    if (ts_tensor_parse(p, len, fqn, &tt, err, sizeof err) || tt.dtype != it->dtype) return -1;
    it->data = tt.data;
    return 0;
}

static void fixture_free(fixture *F)
{
    pk_free(F->md);
    pk_free(F->objs);
    for (int r = 0; r < MAXR; r++) {
        free(F->file[r]);
        free(F->items[r]);
        ts_buf_release(&F->arch[r]);
    }
}

static int fixture_load(fixture *F, const char *fx)
{
    size_t n;
    char err[256], name[32];
    memset(F, 0, sizeof *F);
    unsigned char *md = fixture_file(fx, ".metadata", &n);
    int rc = !md || pk_parse(md, n, fx, &F->md, err, sizeof err);
    free(md);
    if (rc) return -1;
    const pk_node *m = pk_object_dict(pk_root(F->md)), *sm = pk_dict_get(m, "storage_meta");
    const pk_node *plans = pk_dict_get(m, "all_local_plans"), *sd = pk_dict_get(m, "storage_data");
    F->ckpt_id = str_field(sm, "checkpoint_id");
    F->save_id = str_field(sm, "save_id");
    if (!plans || plans->n > MAXR || !sd || !F->ckpt_id || !F->save_id) return -1;
    F->nranks = (int)plans->n;
    for (int r = 0; r < F->nranks; r++) {
        snprintf(name, sizeof name, "__%d_0.distcp", r);
        if (!(F->file[r] = fixture_file(fx, name, &F->nfile[r]))) return -1;
    }
    for (int r = 0; r < F->nranks; r++) {
        const pk_node *items = pk_dict_get(pk_object_dict(plans->items[r]), "items");
        F->nitems[r] = items->n;
        F->items[r] = calloc(items->n, sizeof(tds_item));
        for (size_t i = 0; i < items->n; i++)
            if (load_item(F, items->items[i], sd, &F->items[r][i])) return -1;
    }
    return 0;
}

/* ---- the objects ---------------------------------------------------------- */

/* Rebuild an object item from what it holds: [None] through
 * tds_object_archive(NULL), the common state through tds_common_state; both
 * pickles also round-trip through the reader and writer alone. */
static int rebuild_object(fixture *F, int r, tds_item *it)
{
    ts_tensor unused;
    ts_archive a;
    char err[256];
    pk_doc *d = NULL;
    if (ts_archive_parse(it->obj, it->nobj, it->key, &a, err, sizeof err)) return -1;
    const ts_record *pkl = ts_archive_find(&a, "data.pkl");
    if (!pkl || !round_trips(pkl->data, pkl->size, 2, it->key) || !ts_tensor_parse(it->obj, it->nobj, it->key, &unused, err, sizeof err)
        || pk_parse(pkl->data, pkl->size, it->key, &d, err, sizeof err))
        return -1;
    const pk_node *root = pk_root(d), *obj = root->kind == PK_LIST && root->n == 1 ? root->items[0] : NULL;
    const pk_node *made = NULL;
    if (obj && obj->kind == PK_DICT) {
        const pk_node *it_n = pk_dict_get(obj, "iteration"), *fl = pk_dict_get(obj, "num_floating_point_operations_so_far");
        if (!it_n || !fl) { pk_free(d); return -1; }
        pk_node *flops = fl->kind == PK_INT ? pk_add_int(F->objs, fl->i) : pk_add_float(F->objs, fl->f);
        made = tds_common_state(F->objs, NULL, it_n->i, NULL, flops);
    } else if (!obj || obj->kind != PK_NONE) { pk_free(d); return -1; }
    pk_free(d);
    size_t at = F->arch[r].len;
    if (tds_object_archive(&F->arch[r], F->objs, made)) return -1;
    if (F->arch[r].len - at != it->nobj || memcmp(F->arch[r].data + at, it->obj, it->nobj)) {
        fprintf(stderr, "%s: object rebuilt differs\n", it->key);
        return -1;
    }
    return 0;
}

static int rebuild_objects(fixture *F)
{
    if (!(F->objs = pk_doc_new())) return -1;
    for (int r = 0; r < F->nranks; r++) {
        for (size_t i = 0; i < F->nitems[r]; i++)
            if (F->items[r][i].kind == TDS_OBJECT && rebuild_object(F, r, &F->items[r][i])) return -1;
        /* point the items at td's own archives (the same bytes) */
        size_t at = 0;
        for (size_t i = 0; i < F->nitems[r]; i++) {
            tds_item *it = &F->items[r][i];
            if (it->kind != TDS_OBJECT) continue;
            it->obj = F->arch[r].data + at;
            at += it->nobj;
        }
    }
    return 0;
}

static void test_objects(void)
{
    for (size_t f = 0; f < sizeof fixtures / sizeof *fixtures; f++) {
        fixture F;
        CHECK(fixture_load(&F, fixtures[f]) == 0);
        CHECK(rebuild_objects(&F) == 0);
        fixture_free(&F);
    }
}

/* ---- whole directories ------------------------------------------------------ */

static void rebuild_dir(const char *fx, const char *out)
{
    fixture F;
    char err[512] = "", iter[512], a[600], b[600];
    ts_buf blobs[MAXR] = { { 0 } };
    CHECK(fixture_load(&F, fx) == 0 && rebuild_objects(&F) == 0);
    snprintf(iter, sizeof iter, "%s/iter_0000001", out);
    for (int r = 0; r < F.nranks; r++) {
        int rc = tds_write_rank(iter, r, F.items[r], F.nitems[r], &blobs[r], err, sizeof err);
        CHECK(rc == 0);
        if (rc) fprintf(stderr, "%s\n", err);
    }
    int rc = tds_write_metadata(iter, F.ckpt_id, F.save_id, blobs, F.nranks, err, sizeof err);
    CHECK(rc == 0);
    if (rc) fprintf(stderr, "%s\n", err);
    CHECK(ckpt_write_latest(out, 1, err, sizeof err) == 0);
    const char *names[] = { ".metadata", "metadata.json", "__0_0.distcp", "__1_0.distcp", "__2_0.distcp", "__3_0.distcp" };
    for (int k = 0; k < 2 + F.nranks; k++) {
        snprintf(a, sizeof a, "%s/%s", iter, names[k]);
        snprintf(b, sizeof b, DIR "%s/iter_0000001/%s", fx, names[k]);
        CHECK(same_file(a, b));
    }
    snprintf(a, sizeof a, "%s/latest_checkpointed_iteration.txt", out);
    snprintf(b, sizeof b, DIR "%s/latest_checkpointed_iteration.txt", fx);
    CHECK(same_file(a, b));
    snprintf(a, sizeof a, "%s/.metadata.tmp", iter);
    CHECK(access(a, F_OK) != 0);
    for (int r = 0; r < MAXR; r++) ts_buf_release(&blobs[r]);
    fixture_free(&F);
}

static char tmpdir[64];

static void test_rebuild_fixtures(void)
{
    for (size_t f = 0; f <= sizeof fixtures / sizeof *fixtures; f++) {
        /* and llama_bf16/ (all bfloat16: make_golden.py's cast; no metadata.txt, so not in fixtures[]) */
        const char *fx = f < sizeof fixtures / sizeof *fixtures ? fixtures[f] : "llama_bf16";
        char out[256];
        snprintf(out, sizeof out, "%s/%s", tmpdir, fx);
        rebuild_dir(fx, out);
    }
}

/* ---- refusals ---------------------------------------------------------------- */

static void test_refusals(void)
{
    char err[512] = "", iter[256];
    float x[4] = { 1, 2, 3, 4 };
    ts_buf blob = { 0 };
    snprintf(iter, sizeof iter, "%s/bad/iter_0000001", tmpdir);
    tds_item it = { .key = "w", .kind = TDS_TENSOR, .dtype = TS_F32, .ndim = 1, .shape = { 4 }, .offset = { 2 }, .size = { 4 }, .data = x };
    CHECK(tds_write_rank(iter, 0, &it, 1, &blob, err, sizeof err) == TDS_ERR_ARG && strstr(err, "'w'") && strstr(err, "outside"));
    it.offset[0] = 0;
    it.data = NULL;
    CHECK(tds_write_rank(iter, 0, &it, 1, &blob, err, sizeof err) == TDS_ERR_ARG && strstr(err, "no data"));
    it.data = x;
    it.key = "";
    CHECK(tds_write_rank(iter, 0, &it, 1, &blob, err, sizeof err) == TDS_ERR_ARG);
    it.key = "w";
    CHECK(tds_write_rank(iter, 0, &it, 1, &blob, err, sizeof err) == 0);
    /* a blob of rank 0 given as rank 1's, truncated, or with bytes after it */
    ts_buf two[2] = { blob, blob };
    unsigned char *md;
    size_t n;
    CHECK(tds_metadata_pickle("c", "s", two, 2, &md, &n, err, sizeof err) == TDS_ERR_FORMAT && strstr(err, "rank 1"));
    for (size_t cut = 0; cut < blob.len; cut++) {
        ts_buf t = { blob.data, cut, cut };
        CHECK(tds_metadata_pickle("c", "s", &t, 1, &md, &n, err, sizeof err) == TDS_ERR_FORMAT);
    }
    CHECK(tds_metadata_pickle("c", "s", &blob, 1, &md, &n, err, sizeof err) == 0);
    free(md);
    CHECK(tds_metadata_pickle("c", "s", &blob, 0, &md, &n, err, sizeof err) == TDS_ERR_ARG);
    ts_buf_release(&blob);
    char id[37];
    CHECK(tds_new_save_id(id) == 0 && strlen(id) == 36 && id[14] == '4' && strchr("89ab", id[19]));
}

/* The writer alone: the forms the fixtures do not reach (wide ints and
 * strings, batches of 1000, frames) as CPython 3.11's C pickler writes them. */
static void test_pickle_forms(void)
{
    pk_doc *d = pk_doc_new();
    pk_node *l = pk_add(d, PK_LIST), *dict = pk_add(d, PK_DICT);
    int64_t ints[] = { -1, 255, 256, 65535, 65536, INT32_MAX, (int64_t)INT32_MAX + 1, INT32_MIN, (int64_t)INT32_MIN - 1, INT64_MAX, INT64_MIN };
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) pk_push(d, l, pk_add_int(d, ints[i]));
    for (int i = 0; i < 1000; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        pk_push(d, dict, pk_add_str(d, k));
        pk_push(d, dict, pk_add_int(d, i));
    }
    pk_push(d, l, dict);
    unsigned char *p;
    size_t n;
    CHECK(pk_write(d, l, 4, &p, &n) == 0);
    /* python3 -c "import pickle,sys; d={'k%d'%i:i for i in range(1000)}; ..." gives these pieces: */
    static const unsigned char head[] = { 0x80, 4, 0x95 };
    CHECK(n > 20 && !memcmp(p, head, 3));
    static const unsigned char ints_bytes[] = {
        ']', 0x94, '(', 'J', 0xff, 0xff, 0xff, 0xff, 'K', 0xff, 'M', 0, 1, 'M', 0xff, 0xff, 'J', 0, 0, 1, 0,
        'J', 0xff, 0xff, 0xff, 0x7f, 0x8a, 5, 0, 0, 0, 0x80, 0, 'J', 0, 0, 0, 0x80, 0x8a, 5, 0xff, 0xff, 0xff, 0x7f, 0xff,
        0x8a, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x8a, 8, 0, 0, 0, 0, 0, 0, 0, 0x80 };
    CHECK(!memcmp(p + 11, ints_bytes, sizeof ints_bytes));
    /* a dict of exactly 1000 items: MARK ... SETITEMS, then an empty MARK SETITEMS */
    CHECK(n >= 7 && !memcmp(p + n - 5, "u(ue.", 5));
    free(p);
    pk_free(d);
}

/* Frames: the FRAME opcodes (offset, length) of
 *     python3.11 -c "import pickle,pickletools; p = pickle.dumps([('x' * (i % 300 + 2), i)
 *         for i in range(3000)] + ['y' * 70000, 7], 4); print(len(p), [(pos, arg) for op, arg,
 *         pos in pickletools.genops(p) if op.name == 'FRAME'])"
 * (CPython 3.11.7's C pickler; its bytes were compared whole with pk_write's when this test
 * was written): a frame closes at the first object after 64 KiB, the 70000-byte string is
 * written outside frames, the last frame holds STOP. */
static void test_pickle_frames(void)
{
    static const size_t want[][2] = { { 2, 65640 }, { 65651, 65553 }, { 131213, 65609 }, { 196831, 65628 },
        { 262468, 65732 }, { 328209, 65596 }, { 393814, 65565 }, { 459388, 20310 }, { 549712, 5 } };
    static char s[70001];
    pk_doc *d = pk_doc_new();
    pk_node *l = pk_add(d, PK_LIST);
    memset(s, 'x', 302);
    for (int i = 0; i < 3000; i++) {
        pk_node *t = pk_add(d, PK_TUPLE);
        char c = s[i % 300 + 2];
        s[i % 300 + 2] = 0;
        pk_push(d, t, pk_add_str(d, s));
        s[i % 300 + 2] = c;
        pk_push(d, t, pk_add_int(d, i));
        pk_push(d, l, t);
    }
    memset(s, 'y', 70000);
    s[70000] = 0;
    pk_push(d, l, pk_add_str(d, s));
    pk_push(d, l, pk_add_int(d, 7));
    unsigned char *p;
    size_t n, k = 0;
    CHECK(pk_write(d, l, 4, &p, &n) == 0 && n == 549726);
    /* walk the frames: each header's length leads to the next header, past the big string */
    for (size_t at = 2; at < n && k < 9; k++) {
        if (p[at] != 0x95) break;
        size_t len = 0;
        for (int i = 0; i < 8; i++) len |= (size_t)p[at + 1 + i] << (8 * i);
        CHECK(at == want[k][0] && len == want[k][1]);
        at += 9 + len;
        if (k == 7) at += 5 + 70000;             /* BINUNICODE header and payload (its MEMOIZE is framed) */
    }
    CHECK(k == 9);
    free(p);
    pk_free(d);
}

/* The common state of --write: args (an argparse.Namespace with the fields
 * Megatron's load_checkpoint reads and check_checkpoint_args compares, for
 * the llama fixtures' model) and the scheduler. */
static pk_node *demo_common_state(pk_doc *d)
{
    pk_node *attrs, *args = tds_namespace(d, &attrs);
    static const struct { const char *k; int64_t v; } ints[] = {
        { "num_layers", 2 }, { "hidden_size", 16 }, { "ffn_hidden_size", 32 }, { "num_attention_heads", 4 },
        { "num_query_groups", 2 }, { "max_position_embeddings", 8 }, { "seq_length", 8 },
        { "make_vocab_size_divisible_by", 64 }, { "padded_vocab_size", 64 }, { "tensor_model_parallel_size", 2 },
        { "pipeline_model_parallel_size", 1 }, { "micro_batch_size", 2 }, { "global_batch_size", 4 },
        { "train_iters", 10 }, { "iteration", 1 }, { "consumed_train_samples", 4 }, { "skipped_train_samples", 0 },
        { "consumed_valid_samples", 0 } };
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
        pk_push(d, attrs, pk_add_str(d, ints[i].k));
        pk_push(d, attrs, pk_add_int(d, ints[i].v));
    }
    static const char *const strs[][2] = { { "tokenizer_type", "GPT2BPETokenizer" }, { "position_embedding_type", "rope" },
                                           { "normalization", "RMSNorm" }, { "ckpt_format", "torch_dist" } };
    for (size_t i = 0; i < sizeof strs / sizeof *strs; i++) {
        pk_push(d, attrs, pk_add_str(d, strs[i][0]));
        pk_push(d, attrs, pk_add_str(d, strs[i][1]));
    }
    pk_push(d, attrs, pk_add_str(d, "add_position_embedding"));
    pk_push(d, attrs, pk_add_bool(d, 0));
    pk_push(d, attrs, pk_add_str(d, "bf16"));
    pk_push(d, attrs, pk_add_bool(d, 1));
    pk_push(d, attrs, pk_add_str(d, "params_dtype"));
    pk_push(d, attrs, pk_add_global(d, "torch.bfloat16"));
    pk_push(d, attrs, pk_add_str(d, "lr"));
    pk_push(d, attrs, pk_add_float(d, 3e-4));
    tds_sched sc = { .max_lr = 3e-4, .min_lr = 3e-5, .start_wd = 0.1, .end_wd = 0.1, .lr_warmup_steps = 8,
                    .num_steps = 4, .lr_decay_steps = 40, .wd_incr_steps = 40, .lr_decay_style = "cosine",
                    .wd_incr_style = "constant" };
    return tds_common_state(d, args, 1, tds_scheduler(d, &sc), pk_add_float(d, 1.5e9));
}

static int write_demo(const char *out)
{
    fixture F;
    char err[512] = "", iter[4096], id[37];
    ts_buf blobs[MAXR] = { { 0 } }, common = { 0 };
    int rc = fixture_load(&F, "llama_tp2_bf16mix") || rebuild_objects(&F) || tds_new_save_id(id);
    if (!rc) rc = tds_object_archive(&common, F.objs, demo_common_state(F.objs));
    for (size_t i = 0; !rc && i < F.nitems[0]; i++)
        if (!strcmp(F.items[0][i].key, "common_state/shard_0_1")) {
            F.items[0][i].obj = common.data;
            F.items[0][i].nobj = common.len;
        }
    snprintf(iter, sizeof iter, "%s/iter_0000001", out);
    for (int r = 0; !rc && r < F.nranks; r++) rc = tds_write_rank(iter, r, F.items[r], F.nitems[r], &blobs[r], err, sizeof err);
    if (!rc) rc = tds_write_metadata(iter, iter, id, blobs, F.nranks, err, sizeof err);
    if (!rc) rc = ckpt_write_latest(out, 1, err, sizeof err);
    if (rc) fprintf(stderr, "test_tdsave: cannot write '%s': %s\n", out, err[0] ? err : "fixture llama_tp2_bf16mix unreadable");
    for (int r = 0; r < MAXR; r++) ts_buf_release(&blobs[r]);
    ts_buf_release(&common);
    fixture_free(&F);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--write")) return write_demo(argv[2]);
    if (argc != 1) { fprintf(stderr, "usage: test_tdsave [--write DIR]\n"); return 2; }
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_tdsave.XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    RUN(test_pickle_round_trip);
    RUN(test_pickle_forms);
    RUN(test_pickle_frames);
    RUN(test_objects);
    RUN(test_rebuild_fixtures);
    RUN(test_refusals);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", tmpdir);
    return harness_report();
}
