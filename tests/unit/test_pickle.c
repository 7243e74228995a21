/*
 * test_pickle.c - train/pickle.h on the .metadata pickles of the fixtures in
 * tests/data/torch_dist: every tensor key, global shape, dtype, chunk
 * (offsets, sizes) and storage (file, offset, length), and every object
 * item, printed as metadata.txt's lines and compared with them; the storage
 * meta's checkpoint_id and save_id; the common state (a torch.save archive's
 * data.pkl, protocol 2) against metadata.txt's "# common_state:" line; then
 * corrupt copies (every truncation, an opcode not read, a global outside
 * the allow-list, huge lengths, a bad memo reference) refused with one line.
 */
#include "harness.h"
#include "torchdist_fixtures.h"
#include "pickle.h"
#include "torchsave.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DCP "torch.distributed.checkpoint."


/* Python's repr of a tuple of ints: "()", "(16,)", "(2, 64)". */
static void tuple_repr(char *out, size_t cap, const int64_t *v, int n)
{
    size_t k = (size_t)snprintf(out, cap, "(");
    for (int i = 0; i < n && k < cap; i++) k += (size_t)snprintf(out + k, cap - k, "%s%lld", i ? ", " : "", (long long)v[i]);
    if (k < cap) snprintf(out + k, cap - k, n == 1 ? ",)" : ")");
}

/* Python's repr of the common state's values (str, int, float, bool, None, dict, list). */
static void repr(char *out, size_t cap, const pk_node *n, int depth)
{
    size_t k = 0;
    if (depth > 8) { snprintf(out, cap, "..."); return; }
    switch (n->kind) {
    case PK_NONE: snprintf(out, cap, "None"); break;
    case PK_BOOL: snprintf(out, cap, n->i ? "True" : "False"); break;
    case PK_INT: snprintf(out, cap, "%lld", (long long)n->i); break;
    case PK_FLOAT: snprintf(out, cap, n->f == (double)(int64_t)n->f ? "%.1f" : "%.17g", n->f); break;
    case PK_STR: snprintf(out, cap, "'%s'", n->s); break;
    case PK_DICT: case PK_LIST:
        k = (size_t)snprintf(out, cap, n->kind == PK_DICT ? "{" : "[");
        for (size_t i = 0; i < n->n && k < cap; i++) {
            const char *sep = i == 0 ? "" : n->kind == PK_DICT && i % 2 ? ": " : ", ";
            k += (size_t)snprintf(out + k, cap - k, "%s", sep);
            if (k < cap) repr(out + k, cap - k, n->items[i], depth + 1);
            k += strlen(out + k);
        }
        if (k < cap) snprintf(out + k, cap - k, n->kind == PK_DICT ? "}" : "]");
        break;
    default: snprintf(out, cap, "<%d>", n->kind);
    }
}

/* The storage of (key, chunk offsets) from storage_data: "FILE OFFSET LENGTH". */
static int storage_of(const pk_node *sd, const char *key, const int64_t *off, int n, char *out, size_t cap)
{
    for (size_t i = 0; sd && i + 1 < sd->n; i += 2) {
        const pk_node *idx = pk_object_dict(sd->items[i]), *info = pk_object_dict(sd->items[i + 1]);
        const pk_node *fqn = pk_dict_get(idx, "fqn"), *o = pk_dict_get(idx, "offset");
        if (!pk_is_object(sd->items[i], DCP "metadata.MetadataIndex") || !fqn || fqn->kind != PK_STR || strcmp(fqn->s, key)) continue;
        int64_t v[TS_MAX_DIMS];
        if (off ? pk_int_tuple(o, v, TS_MAX_DIMS) != n || memcmp(v, off, (size_t)n * sizeof *v) : o && o->kind != PK_NONE) continue;
        const pk_node *path = pk_dict_get(info, "relative_path"), *fo = pk_dict_get(info, "offset"), *len = pk_dict_get(info, "length");
        if (!pk_is_object(sd->items[i + 1], DCP "filesystem._StorageInfo") || !path || path->kind != PK_STR || !fo ||
            fo->kind != PK_INT || !len || len->kind != PK_INT)
            return -1;
        snprintf(out, cap, "%s %lld %lld", path->s, (long long)fo->i, (long long)len->i);
        return 0;
    }
    return -1;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* metadata.txt's item lines, from the parsed .metadata; the count, or -1. */
static int metadata_lines(const pk_node *root, char **lines, int max)
{
    const pk_node *md = pk_object_dict(root);
    const pk_node *sdm = pk_dict_get(md, "state_dict_metadata"), *sd = pk_dict_get(md, "storage_data");
    if (!pk_is_object(root, DCP "metadata.Metadata") || !sdm || sdm->kind != PK_DICT || !sd || sd->kind != PK_DICT) return -1;
    int n = 0;
    char line[1024], a[128], b[128], c[128], st[256];
    for (size_t i = 0; i + 1 < sdm->n; i += 2) {
        const pk_node *key = sdm->items[i], *v = sdm->items[i + 1];
        if (key->kind != PK_STR) return -1;
        if (pk_is_object(v, DCP "metadata.BytesStorageMetadata")) {
            if (storage_of(sd, key->s, NULL, 0, st, sizeof st) || n == max) return -1;
            snprintf(line, sizeof line, "%s | bytes | - | - | - | %s", key->s, st);
            lines[n++] = strdup(line);
            continue;
        }
        const pk_node *t = pk_object_dict(v);
        if (!pk_is_object(v, DCP "metadata.TensorStorageMetadata") || !t) return -1;
        const pk_node *props = pk_dict_get(t, "properties"), *chunks = pk_dict_get(t, "chunks");
        if (!pk_is_object(props, DCP "metadata.TensorProperties") || !props->state || props->state->kind != PK_TUPLE ||
            !props->state->n || props->state->items[0]->kind != PK_GLOBAL || !chunks || chunks->kind != PK_LIST)
            return -1;
        int64_t shape[TS_MAX_DIMS], off[TS_MAX_DIMS], sz[TS_MAX_DIMS];
        int nd = pk_int_tuple(pk_dict_get(t, "size"), shape, TS_MAX_DIMS);
        if (nd < 0) return -1;
        tuple_repr(a, sizeof a, shape, nd);
        for (size_t j = 0; j < chunks->n; j++) {
            const pk_node *ch = pk_object_dict(chunks->items[j]);
            if (!pk_is_object(chunks->items[j], DCP "metadata.ChunkStorageMetadata") ||
                pk_int_tuple(pk_dict_get(ch, "offsets"), off, TS_MAX_DIMS) != nd || pk_int_tuple(pk_dict_get(ch, "sizes"), sz, TS_MAX_DIMS) != nd ||
                storage_of(sd, key->s, off, nd, st, sizeof st) || n == max)
                return -1;
            tuple_repr(b, sizeof b, off, nd);
            tuple_repr(c, sizeof c, sz, nd);
            snprintf(line, sizeof line, "%s | tensor | %s | %s | %s/%s | %s", key->s, a, props->state->items[0]->s, b, c, st);
            lines[n++] = strdup(line);
        }
    }
    return n;
}

static void check_fixture(const char *fx)
{
    char path[256], line[4096], common[4096] = "", meta[4096] = "";
    char *want[512], *got[512];
    int nwant = 0;
    snprintf(path, sizeof path, DIR "%s/metadata.txt", fx);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (!f) return;
    while (fgets(line, sizeof line, f) && nwant < 512) {
        line[strcspn(line, "\n")] = 0;
        if (!strncmp(line, "# common_state: ", 16)) snprintf(common, sizeof common, "%s", line + 16);
        if (!strncmp(line, "# storage_meta: ", 16)) snprintf(meta, sizeof meta, "%s", line + 16);
        if (line[0] != '#' && strchr(line, '|')) want[nwant++] = strdup(line);
    }
    fclose(f);
    size_t size;
    snprintf(path, sizeof path, DIR "%s/iter_0000001/.metadata", fx);
    unsigned char *buf = read_file_or_null(path, &size);
    CHECK(buf != NULL);
    pk_doc *d = NULL;
    char err[512];
    int rc = buf ? pk_parse(buf, size, path, &d, err, sizeof err) : -1;
    if (rc) fprintf(stderr, "%s\n", err);
    CHECK(rc == 0);
    if (rc) { free(buf); return; }
    int ngot = metadata_lines(pk_root(d), got, 512);
    CHECK(ngot == nwant);
    if (ngot == nwant) {
        qsort(want, (size_t)nwant, sizeof *want, cmp_str);
        qsort(got, (size_t)ngot, sizeof *got, cmp_str);
        for (int i = 0; i < ngot; i++) {
            if (strcmp(want[i], got[i])) fprintf(stderr, "want %s\n got  %s\n", want[i], got[i]);
            CHECK(!strcmp(want[i], got[i]));
        }
    }
    /* The storage meta: checkpoint_id and save_id as metadata.txt prints them. */
    const pk_node *sm = pk_dict_get(pk_object_dict(pk_root(d)), "storage_meta");
    const pk_node *cid = pk_dict_get(pk_object_dict(sm), "checkpoint_id"), *sid = pk_dict_get(pk_object_dict(sm), "save_id");
    CHECK(pk_is_object(sm, DCP "metadata.StorageMeta") && cid && cid->kind == PK_STR && sid && sid->kind == PK_STR);
    if (cid && sid && cid->kind == PK_STR && sid->kind == PK_STR) {
        snprintf(line, sizeof line, "StorageMeta(checkpoint_id='%s', save_id='%s', ", cid->s, sid->s);
        CHECK(!strncmp(meta, line, strlen(line)));
    }
    /* The common state, an object item in the first file. */
    for (int i = 0; i < ngot; i++) {
        char file[64];
        unsigned long long off, len;
        if (strncmp(got[i], "common_state/", 13) || sscanf(strrchr(got[i], '|') + 1, "%63s %llu %llu", file, &off, &len) != 3) continue;
        snprintf(path, sizeof path, DIR "%s/iter_0000001/%s", fx, file);
        size_t fsize;
        unsigned char *all = read_file_or_null(path, &fsize);
        ts_archive a;
        CHECK(all && off + len <= fsize && ts_archive_parse(all + off, (size_t)len, path, &a, err, sizeof err) == 0);
        const ts_record *pkl = all ? ts_archive_find(&a, "data.pkl") : NULL;
        pk_doc *cs = NULL;
        CHECK(pkl && pk_parse(pkl->data, pkl->size, "common_state", &cs, err, sizeof err) == 0);
        const pk_node *r = cs ? pk_root(cs) : NULL;
        CHECK(r && r->kind == PK_LIST && r->n == 1);
        if (r && r->kind == PK_LIST && r->n == 1) {
            repr(line, sizeof line, r->items[0], 0);
            if (strcmp(line, common)) fprintf(stderr, "want %s\n got  %s\n", common, line);
            CHECK(!strcmp(line, common));
        }
        pk_free(cs);
        free(all);
    }
    for (int i = 0; i < nwant; i++) free(want[i]);
    for (int i = 0; i < ngot; i++) free(got[i]);
    pk_free(d);
    free(buf);
}

static void test_fixtures(void)
{
    for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; i++) check_fixture(fixtures[i]);
}

/* A corrupt copy: refused, one line naming the file and the cause. */
static void refused(const unsigned char *b, size_t n, const char *cause)
{
    pk_doc *d = NULL;
    char err[512] = "";
    int rc = pk_parse(b, n, "bad", &d, err, sizeof err);
    CHECK(rc == PK_ERR_FORMAT && d == NULL);
    CHECK(!strncmp(err, "'bad': offset ", 14) && !strchr(err, '\n'));
    if (!strstr(err, cause)) fprintf(stderr, "expected '%s' in: %s\n", cause, err);
    CHECK(strstr(err, cause) != NULL);
}


static void test_corrupt(void)
{
    size_t n;
    unsigned char *good = read_file_or_null(DIR "llama/iter_0000001/.metadata", &n);
    CHECK(good != NULL);
    if (!good) return;
    unsigned char *b = malloc(n + 16);
    for (size_t cut = 0; cut < n; cut += 13) refused(good, cut, "");        /* truncations */
    refused(good, n - 1, "a frame of");        /* FRAME says how long the rest is */
    memcpy(b, good, n);
    b[n] = '.';
    refused(b, n + 1, "1 bytes after STOP");
    memcpy(b, good, n);
    size_t m = find(b, n, "\x94", 1);
    b[m] = 'P';                                                         /* PERSID, not read */
    refused(b, n, "opcode 0x50 ('P') is not read");
    memcpy(b, good, n);
    m = find(b, n, "Metadata\x94", 9);
    b[m + 7] = 'b';                                                     /* ...metadata.Metadatb */
    refused(b, n, "global 'torch.distributed.checkpoint.metadata.Metadatb' is not allowed");
    static const unsigned char huge_str[] = "\x80\x04X\xf0\xff\xff\xff" "ab.";
    refused(huge_str, sizeof huge_str - 1, "a string of 4294967280 bytes past the end of the input");
    static const unsigned char huge_str8[] = "\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\xff" "ab.";
    refused(huge_str8, sizeof huge_str8 - 1, "a string of 18446744073709551615 bytes past the end of the input");
    static const unsigned char no_stop[] = "\x80\x04N";
    refused(no_stop, sizeof no_stop - 1, "truncated (no STOP)");
    memcpy(b, good, n);
    b[3] = 0xFF;                                                        /* FRAME of 2^64 - 1 bytes */
    b[4] = b[5] = b[6] = b[7] = b[8] = b[9] = b[10] = 0xFF;
    refused(b, n, "a frame of 18446744073709551615 bytes past the end");
    memcpy(b, good, n);
    m = find(b, n, "h\x00", 2);
    b[m + 1] = 0xEE;                                                    /* BINGET of a memo never stored */
    refused(b, n, "memo entry 238 was never stored");
    memcpy(b, good, n);
    b[1] = 5;
    refused(b, n, "PROTO 5");
    unsigned char deep[300];
    memset(deep, '(', sizeof deep);
    deep[0] = 0x80;
    deep[1] = 4;
    refused(deep, sizeof deep, "more than 256 nested MARKs");
        static const unsigned char setitems_list[] = "\x80\x04](K\x01K\x02u.";
    refused(setitems_list, sizeof setitems_list - 1, "SETITEMS into something that is not a dict");
    static const unsigned char reduce_str[] = "\x80\x04\x8c\x01x)R.";
    refused(reduce_str, sizeof reduce_str - 1, "REDUCE of something that is not a global");
    static const unsigned char old_global[] = "\x80\x02" "cos\nsystem\nX\x02\0\0\0ls\x85R.";
    refused(old_global, sizeof old_global - 1, "global 'os.system' is not allowed");
    static const unsigned char newline_global[] = "\x80\x04\x8c\x02" "a\n\x8c\x01" "b\x93.";
    refused(newline_global, sizeof newline_global - 1, "a global whose name is not printable ASCII");
    free(b);
    free(good);
}

/* Values of every kind read as Python wrote them (protocol 2 and 4). */
static void test_values(void)
{
    /* pickle.dumps([None, True, -1, 2**40, -2**63, 1.5, 'é', (), {'k': [1]}], protocol=2) */
    static const unsigned char p2[] = "\x80\x02]q\x00(N\x88J\xff\xff\xff\xff\x8a\x06\x00\x00\x00\x00\x00\x01\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80G\x3f\xf8\x00\x00\x00\x00\x00\x00X\x02\x00\x00\x00\xc3\xa9q\x01)}q\x02X\x01\x00\x00\x00kq\x03]q\x04K\x01" "ase.";
    /* pickle.dumps([b'ab', 'x' * 300], protocol=4) */
    static const unsigned char p4[] = "\x80\x04\x95<\x01\x00\x00\x00\x00\x00\x00]\x94(C\x02" "ab\x94X,\x01\x00\x00xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\x94" "e.";
    pk_doc *d = NULL;
    char err[256];
    int rc = pk_parse(p2, sizeof p2 - 1, "p2", &d, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    CHECK(rc == 0);
    const pk_node *r = d ? pk_root(d) : NULL;
    CHECK(r && r->kind == PK_LIST && r->n == 9);
    if (r && r->n == 9) {
        CHECK(r->items[0]->kind == PK_NONE && r->items[1]->kind == PK_BOOL && r->items[1]->i == 1);
        CHECK(r->items[2]->kind == PK_INT && r->items[2]->i == -1);
        CHECK(r->items[3]->i == (int64_t)1 << 40 && r->items[4]->i == INT64_MIN);
        CHECK(r->items[5]->kind == PK_FLOAT && r->items[5]->f == 1.5);
        CHECK(r->items[6]->kind == PK_STR && !strcmp(r->items[6]->s, "\xc3\xa9"));
        CHECK(r->items[7]->kind == PK_TUPLE && r->items[7]->n == 0);
        const pk_node *l = pk_dict_get(r->items[8], "k");
        CHECK(l && l->kind == PK_LIST && l->n == 1 && l->items[0]->i == 1);
    }
    pk_free(d);
    d = NULL;
    CHECK(pk_parse(p4, sizeof p4 - 1, "p4", &d, err, sizeof err) == 0);
    r = d ? pk_root(d) : NULL;
    CHECK(r && r->kind == PK_LIST && r->n == 2 && r->items[0]->kind == PK_BYTES && r->items[0]->len == 2 &&
          r->items[1]->kind == PK_STR && r->items[1]->len == 300);
    pk_free(d);
    pk_free(NULL);
}

int main(void)
{
    RUN(test_fixtures);
    RUN(test_corrupt);
    RUN(test_values);
    return harness_report();
}
