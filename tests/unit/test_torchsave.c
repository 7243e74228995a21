/*
 * test_torchsave.c - train/torchsave.h against the archives torch.save wrote
 * in tests/data/torch_dist (every item of every fixture's .distcp, placed by
 * the fixture's metadata.txt): each is read, checked against metadata.txt
 * (tensor or object, dtype, chunk shape, the first value of chunks at the
 * origin), written again and compared byte for byte; then corrupt copies
 * (truncation, a flipped data byte, another method, a strided pickle, an
 * unknown record, a stale serialization id) are refused with one line.
 */
#include "harness.h"
#include "torchdist_fixtures.h"
#include "torchsave.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>



/* Parse "(1, 64, 16)" or "(16,)" into v; the count, or -1. */
static int parse_tuple(const char *s, uint64_t *v)
{
    int n = 0;
    if (*s++ != '(') return -1;
    while (*s && *s != ')') {
        char *e;
        v[n++] = strtoull(s, &e, 10);
        if (e == s || n > TS_MAX_DIMS) return -1;
        s = e;
        while (*s == ',' || *s == ' ') s++;
    }
    return n;
}

/* The first value of each tensor from metadata.txt's "# first values:" line. */
static int first_value(const char *line, const char *key, float *out)
{
    char pat[300];
    snprintf(pat, sizeof pat, " %s=", key);
    const char *p = strstr(line, pat);
    if (!p) return -1;
    *out = strtof(p + strlen(pat), NULL);
    return 0;
}

static int items_checked, tensors_checked;

/* One item: FILE OFFSET LENGTH of a metadata.txt line. */
static void check_item(const char *dir, char *line, const char *firsts)
{
    char *f[6];
    int nf = 0;
    for (char *tok = strtok(line, "|"); tok && nf < 6; tok = strtok(NULL, "|")) {
        while (*tok == ' ') tok++;
        size_t l = strlen(tok);
        while (l && (tok[l - 1] == ' ' || tok[l - 1] == '\n')) tok[--l] = 0;
        f[nf++] = tok;
    }
    CHECK(nf == 6);
    if (nf != 6) return;
    char file[128], path[512];
    unsigned long long off, len;
    CHECK(sscanf(f[5], "%127s %llu %llu", file, &off, &len) == 3);
    snprintf(path, sizeof path, DIR "%s/iter_0000001/%s", dir, file);
    size_t size;
    unsigned char *all = read_file_or_null(path, &size);
    CHECK(all && off + len <= size);
    if (!all || off + len > size) { free(all); return; }
    const unsigned char *b = all + off;
    char err[512], name[600];
    snprintf(name, sizeof name, "%s@%llu", path, off);
    ts_archive a;
    int rc = ts_archive_parse(b, (size_t)len, name, &a, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    CHECK(rc == 0);
    ts_buf out = { 0 };
    if (!strcmp(f[1], "tensor")) {
        ts_tensor t;
        rc = ts_tensor_parse(b, (size_t)len, name, &t, err, sizeof err);
        if (rc) fprintf(stderr, "%s\n", err);
        CHECK(rc == 0);
        if (rc) { free(all); return; }
        CHECK(!strcmp(ts_dtype_name(t.dtype), f[3]));
        uint64_t sizes[TS_MAX_DIMS], offs[TS_MAX_DIMS];
        char *slash = strchr(f[4], '/');
        CHECK(slash != NULL);
        int n = slash ? parse_tuple(slash + 1, sizes) : -1;
        CHECK(n == t.ndim && !memcmp(sizes, t.shape, (size_t)n * sizeof *sizes));
        int origin = parse_tuple(f[4], offs) == n;
        for (int i = 0; i < n; i++) origin &= offs[i] == 0;
        float want, got;
        if (origin && t.dtype == TS_F32 && !first_value(firsts, f[0], &want)) {
            memcpy(&got, t.data, 4);
            CHECK(got == want);
        }
        CHECK(ts_tensor_write(&out, &t) == 0);
        tensors_checked++;
    } else {
        CHECK(!strcmp(f[1], "bytes") && !ts_archive_find(&a, "data/0"));
        CHECK(ts_archive_write(&out, a.prefix, a.rec, a.n - 1) == 0);
    }
    CHECK(out.len == len && !memcmp(out.data, b, out.len));
    items_checked++;
    ts_buf_release(&out);
    free(all);
}

static void test_fixtures_rewritten(void)
{
    for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; i++) {
        char path[256], line[4096], firsts[16384] = "";
        snprintf(path, sizeof path, DIR "%s/metadata.txt", fixtures[i]);
        FILE *f = fopen(path, "r");
        CHECK(f != NULL);
        if (!f) continue;
        while (fgets(line, sizeof line, f))     /* the first values come last */
            if (!strncmp(line, "# first values:", 15)) snprintf(firsts, sizeof firsts, " %s", line + 15);
        CHECK(firsts[0] != 0);
        rewind(f);
        while (fgets(line, sizeof line, f))
            if (line[0] != '#' && strchr(line, '|')) check_item(fixtures[i], line, firsts);
        fclose(f);
    }
    printf("# %d items, %d tensors\n", items_checked, tensors_checked);
    CHECK(items_checked > 200 && tensors_checked > 100);
}

/* A written tensor of each dtype reads back as itself. */
static void test_dtypes_round_trip(void)
{
    unsigned char data[2 * 3 * 300 * 4];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)(i * 7 + 3);
    for (int dt = TS_F32; dt <= TS_F16; dt++) {
        ts_tensor t = { .dtype = dt, .ndim = 3, .shape = { 2, 3, 300 }, .data = data };
        ts_buf b = { 0 };
        CHECK(ts_tensor_write(&b, &t) == 0);
        ts_tensor r;
        char err[256];
        CHECK(ts_tensor_parse(b.data, b.len, "rt", &r, err, sizeof err) == 0);
        CHECK(r.dtype == dt && r.ndim == 3 && r.shape[2] == 300 && r.numel == 1800);
        CHECK(r.nbytes == 1800 * (dt == TS_F32 ? 4u : 2u) && !memcmp(r.data, data, r.nbytes));
        CHECK((size_t)(r.data - b.data) % 64 == 0);
        ts_buf_release(&b);
    }
    ts_tensor scalar = { .dtype = TS_F32, .ndim = 0, .data = data }, big = { .dtype = TS_F32, .ndim = 9 };
    ts_buf b = { 0 };
    ts_tensor r;
    char err[256];
    CHECK(ts_tensor_write(&b, &scalar) == 0 && ts_tensor_parse(b.data, b.len, "scalar", &r, err, sizeof err) == 0 && r.numel == 1);
    CHECK(ts_tensor_write(&b, &big) == TS_ERR_ARG);
    ts_buf_release(&b);
}

/* Parse a corrupt copy: refused, one line naming the archive and cause. */
static void refused(const unsigned char *b, size_t n, const char *cause)
{
    ts_tensor t;
    char err[512] = "";
    int rc = ts_tensor_parse(b, n, "bad", &t, err, sizeof err);
    CHECK(rc == TS_ERR_FORMAT);
    CHECK(!strncmp(err, "'bad': ", 7) && !strchr(err, '\n'));
    if (!strstr(err, cause)) fprintf(stderr, "expected '%s' in: %s\n", cause, err);
    CHECK(strstr(err, cause) != NULL);
}


static void test_corrupt(void)
{
    unsigned char v[64];
    for (int i = 0; i < 64; i++) v[i] = (unsigned char)i;
    ts_tensor t = { .dtype = TS_F32, .ndim = 2, .shape = { 4, 4 }, .data = v };
    ts_buf good = { 0 };
    CHECK(ts_tensor_write(&good, &t) == 0);
    size_t n = good.len;
    unsigned char *b = malloc(n);
    for (size_t cut = 0; cut < n; cut += 7) refused(good.data, cut, "");   /* every truncation */
    memcpy(b, good.data, n);
    size_t d = find(b, n, "\x10\x11\x12\x13", 4);
    b[d] ^= 1;
    refused(b, n, "CRC-32 mismatch");
    memcpy(b, good.data, n);
    b[8] = 8;                                    /* the first local header's method: deflate */
    refused(b, n, "local header does not match");
    memcpy(b, good.data, n);
    size_t cdh = find(b, n, "PK\1\2", 4);
    b[cdh + 10] = 8;                             /* the central directory's method */
    refused(b, n, "compressed record (method 8)");
    memcpy(b, good.data, n);
    size_t vr = find(b, n, "archive/version", 15);
    b[vr + 8] = 'w';                            /* an unknown record name (local header) */
    refused(b, n, "local header does not match");
    ts_buf_release(&good);
    free(b);

    /* Records torch.save would not write, in an otherwise valid archive. */
    ts_record rec[6] = { { "data.pkl", (const unsigned char *)"\x80\x02N.", 4 }, { ".format_version", (const unsigned char *)"1", 1 },
                         { ".storage_alignment", (const unsigned char *)"64", 2 }, { "byteorder", (const unsigned char *)"big", 3 },
                         { "version", (const unsigned char *)"3\n", 2 } };
    ts_buf o = { 0 };
    CHECK(ts_archive_write(&o, "archive", rec, 5) == 0);
    refused(o.data, o.len, "record 'byteorder' is not 'little'");
    ts_buf_release(&o);
    rec[3].data = (const unsigned char *)"little";
    rec[3].size = 6;
    rec[4] = (ts_record){ "extra", (const unsigned char *)"x", 1 };
    CHECK(ts_archive_write(&o, "archive", rec, 5) == 0);
    refused(o.data, o.len, "unknown record 'extra'");
    ts_buf_release(&o);
    rec[4] = (ts_record){ "version", (const unsigned char *)"3\n", 2 };
    CHECK(ts_archive_write(&o, "archive", rec, 5) == 0);
    refused(o.data, o.len, "no record 'data/0'");
    ts_buf_release(&o);

    /* A strided view and a stale serialization id, by editing the pickle. */
    unsigned char pkl[256];
    ts_buf p = { 0 };
    CHECK(ts_tensor_write(&p, &t) == 0);
    ts_archive a;
    char err[256];
    CHECK(ts_archive_parse(p.data, p.len, "x", &a, err, sizeof err) == 0);
    memcpy(pkl, a.rec[0].data, a.rec[0].size);
    size_t st = find(pkl, a.rec[0].size, "K\x04K\x01\x86", 5);   /* stride (4, 1) */
    CHECK(st < a.rec[0].size);
    pkl[st + 1] = 8;                                             /* stride (8, 1) */
    ts_record r2[6];
    memcpy(r2, a.rec, sizeof r2);
    r2[0].data = pkl;
    CHECK(ts_archive_write(&o, "archive", r2, 6) == 0);
    refused(o.data, o.len, "stride 8 on axis 0, not contiguous");
    ts_buf_release(&o);
    pkl[st + 1] = 4;
    size_t so = find(pkl, a.rec[0].size, "QK\x00", 3);
    pkl[so + 2] = 2;                                             /* storage offset 2 */
    CHECK(ts_archive_write(&o, "archive", r2, 6) == 0);
    refused(o.data, o.len, "storage offset 2");
    ts_buf_release(&o);
    ts_archive_parse(p.data, p.len, "x", &a, err, sizeof err);
    unsigned char *q = malloc(p.len);
    memcpy(q, p.data, p.len);
    size_t id = (size_t)(a.rec[6].data - p.data);
    q[id] = q[id] == '9' ? '8' : '9';                            /* the descriptor's CRC no longer matches */
    refused(q, p.len, "CRC-32 mismatch");
    free(q);
    ts_buf_release(&p);
}

int main(void)
{
    RUN(test_fixtures_rewritten);
    RUN(test_dtypes_round_trip);
    RUN(test_corrupt);
    return harness_report();
}
