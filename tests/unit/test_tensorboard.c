/*
 * test_tensorboard.c - unit tests for train/tensorboard.[ch], and the event
 * dumper the CLI tests use.
 *
 *   test_tensorboard              the unit tests
 *   test_tensorboard -d FILE      every event of FILE, one line each, checked
 *                                 by our reader (framing, both CRCs, protobuf):
 *                                 "file_version\tVERSION\tWALL" and
 *                                 "TAG\tSTEP\tVALUE\tWALL" (numbers as Python's
 *                                 repr), the format of
 *                                 tests/data/tensorboard/read_with_tensorboard.py;
 *                                 exit 1 with the reader's message otherwise
 *   test_tensorboard -w FILE      write the synthetic file of
 *                                 tests/data/tensorboard/ (make_fixtures.sh)
 *
 * Covers CRC-32C against RFC 3720's vectors, the writer's file name, queue
 * and flush, the synthetic file byte for byte against the committed one that
 * the real tensorboard package read, and the reader's refusals (length and
 * data CRC, truncation, bad protobuf).  Temporary files live in a mkdtemp
 * directory that is removed at the end.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "harness.h"
#include "readfile.h"
#include "dataset.h"
#include "tensorboard.h"

#include <dirent.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[64];

/* ---- the dumper ------------------------------------------------------------ */

static int dump_event(void *ctx, const tb_event *ev)
{
    FILE *out = ctx;
    char wall[DS_PY_FLOAT_REPR_MAX], val[DS_PY_FLOAT_REPR_MAX];
    ds_py_float_repr(wall, sizeof wall, ev->wall_time);
    if (ev->file_version)
        fprintf(out, "file_version\t%.*s\t%s\n", (int)ev->file_version_len, ev->file_version, wall);
    for (size_t i = 0; i < ev->nvalues; i++) {
        const tb_value *v = &ev->values[i];
        if (!v->has_simple_value) continue;
        ds_py_float_repr(val, sizeof val, (double)v->simple_value);
        fprintf(out, "%.*s\t%lld\t%s\t%s\n", (int)v->tag_len, v->tag, (long long)ev->step, val, wall);
    }
    return 0;
}

static int dump(const char *path)
{
    char err[512];
    int rc = tb_read_file(path, dump_event, stdout, err, sizeof err);
    if (rc) {
        fprintf(stderr, "test_tensorboard: '%s': %s\n", path, err);
        return 1;
    }
    return 0;
}

/* The synthetic file: every edge a scalar has (a zero step, a negative step,
 * a large step, zero, negative, tiny, huge, NaN-free values, a tag with
 * spaces and a multi-byte UTF-8 tag), at fixed wall times. */
static int write_synthetic(const char *path)
{
    static const struct { const char *tag; double value; int64_t step; } s[] = {
        {"lm loss", 10.641492843627930, 1},
        {"lm loss vs samples", 10.641492843627930, 4},
        {"learning-rate", 0.0, 0},
        {"loss-scale", 1.0, 2},
        {"grad-norm", 2.919, 300},
        {"negative", -1.5e-7, -3},
        {"huge", 3.0e38, 1LL << 40},
        {"tiny", 1e-40, 7},
        {"caf\xc3\xa9 \xe2\x82\xac", 42.0, 5},
    };
    tb_writer *w = NULL;
    int rc = tb_writer_open_path(path, 1000, 1700000000.25, &w);
    for (size_t i = 0; i < sizeof s / sizeof s[0] && !rc; i++)
        rc = tb_writer_add_scalar(w, s[i].tag, s[i].value, s[i].step, 1700000001.5 + (double)i);
    if (rc) fprintf(stderr, "test_tensorboard: %s\n", tb_writer_error(w));
    int rc2 = tb_writer_close(w);
    return rc || rc2 ? 1 : 0;
}

/* ---- helpers ------------------------------------------------------------------ */

struct collect {
    int events, file_versions, scalars;
    char tags[16][64];
    int64_t steps[16];
    float values[16];
    double walls[16];
};

static int collect_event(void *ctx, const tb_event *ev)
{
    struct collect *c = ctx;
    c->events++;
    if (ev->file_version && ev->file_version_len == strlen(TB_FILE_VERSION) &&
        memcmp(ev->file_version, TB_FILE_VERSION, ev->file_version_len) == 0)
        c->file_versions++;
    for (size_t i = 0; i < ev->nvalues && c->scalars < 16; i++) {
        snprintf(c->tags[c->scalars], sizeof c->tags[0], "%.*s", (int)ev->values[i].tag_len, ev->values[i].tag);
        c->steps[c->scalars] = ev->step;
        c->values[c->scalars] = ev->values[i].simple_value;
        c->walls[c->scalars] = ev->wall_time;
        c->scalars++;
    }
    return 0;
}

static int read_buf(const unsigned char *b, size_t len, struct collect *c)
{
    memset(c, 0, sizeof *c);
    char err[256];
    return tb_read_events(b, len, collect_event, c, err, sizeof err);
}

/* ---- tests ---------------------------------------------------------------------- */

static void test_crc32c(void)
{
    /* RFC 3720 B.4 and the classic check value */
    unsigned char z[32], f[32], inc[32];
    memset(z, 0, 32);
    memset(f, 0xff, 32);
    for (int i = 0; i < 32; i++) inc[i] = (unsigned char)i;
    CHECK(tb_crc32c(0, "123456789", 9) == 0xe3069283u);
    CHECK(tb_crc32c(0, z, 32) == 0x8a9136aau);
    CHECK(tb_crc32c(0, f, 32) == 0x62a8ab43u);
    CHECK(tb_crc32c(0, inc, 32) == 0x46dd794eu);
    CHECK(tb_crc32c(tb_crc32c(0, "1234", 4), "56789", 5) == 0xe3069283u);   /* continuation */
    uint32_t c = 0xe3069283u;
    CHECK(tb_masked_crc32c("123456789", 9) == ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

static void test_synthetic_fixture(void)
{
    /* tests/data/tensorboard/synthetic.tfevents was written by this writer
       and read by the real tensorboard package (synthetic.tensorboard.txt);
       today's writer must give the same bytes */
    char path[128];
    snprintf(path, sizeof path, "%s/synthetic", tmpdir);
    CHECK(write_synthetic(path) == 0);
    size_t a = 0, b = 0;
    unsigned char *mine = read_file_or_null(path, &a);
    unsigned char *ref = read_file_or_null("tests/data/tensorboard/synthetic.tfevents", &b);
    CHECK(mine && ref);
    CHECK(a == b && a > 0 && memcmp(mine, ref, a) == 0);
    struct collect c;
    CHECK(mine && read_buf(mine, a, &c) == 0);
    CHECK(c.events == 10 && c.file_versions == 1 && c.scalars == 9);
    CHECK(strcmp(c.tags[0], "lm loss") == 0 && c.steps[0] == 1 && c.values[0] == 10.641492843627930f);
    CHECK(c.steps[2] == 0 && c.values[2] == 0.0f);
    CHECK(c.steps[5] == -3 && c.values[5] == -1.5e-7f);
    CHECK(c.steps[6] == 1LL << 40);
    CHECK(c.walls[8] == 1700000009.5);
    free(mine);
    free(ref);
}

/* the file name, the first event, the queue and flush */
static void test_writer_queue(void)
{
    char dir[160];
    snprintf(dir, sizeof dir, "%s/runs/a/b", tmpdir);   /* parents created */
    tb_writer *w = NULL;
    CHECK(tb_writer_open(dir, 3, &w) == 0);
    const char *p = tb_writer_path(w);
    regex_t re;
    CHECK(regcomp(&re, "/runs/a/b/events\\.out\\.tfevents\\.[0-9]{10}\\.[^/]+\\.[0-9]+\\.0$", REG_EXTENDED) == 0);
    CHECK(regexec(&re, p, 0, NULL, 0) == 0);
    regfree(&re);
    char path[512];
    snprintf(path, sizeof path, "%s", p);
    size_t len = 0;
    struct collect c;
    unsigned char *b = read_file_or_null(path, &len);   /* the file version, flushed at open */
    CHECK(b && read_buf(b, len, &c) == 0 && c.events == 1 && c.file_versions == 1);
    CHECK(c.scalars == 0);
    free(b);
    CHECK(tb_writer_add_scalar(w, "x", 1.0, 1, -1) == 0);
    CHECK(tb_writer_add_scalar(w, "x", 2.0, 2, -1) == 0);
    b = read_file_or_null(path, &len);                   /* queued: not in the file yet */
    CHECK(b && read_buf(b, len, &c) == 0 && c.events == 1);
    free(b);
    CHECK(tb_writer_add_scalar(w, "x", 3.0, 3, -1) == 0);   /* the third fills the queue */
    b = read_file_or_null(path, &len);
    CHECK(b && read_buf(b, len, &c) == 0 && c.events == 4 && c.values[2] == 3.0f);
    double now = tb_now();
    CHECK(c.walls[0] > now - 60 && c.walls[0] <= now);
    free(b);
    CHECK(tb_writer_add_scalar(w, "y", 4.0, 4, -1) == 0);
    CHECK(tb_writer_flush(w) == 0);
    b = read_file_or_null(path, &len);
    CHECK(b && read_buf(b, len, &c) == 0 && c.events == 5 && strcmp(c.tags[3], "y") == 0);
    free(b);
    CHECK(tb_writer_add_scalar(w, "z", 5.0, 5, -1) == 0);
    CHECK(tb_writer_close(w) == 0);          /* close flushes */
    b = read_file_or_null(path, &len);
    CHECK(b && read_buf(b, len, &c) == 0 && c.events == 6);
    free(b);
    /* a second writer in the same directory gets another file */
    tb_writer *w2 = NULL;
    CHECK(tb_writer_open(dir, 1, &w2) == 0);
    CHECK(strcmp(tb_writer_path(w2), path) != 0);
    CHECK(tb_writer_close(w2) == 0);
    CHECK(tb_writer_close(NULL) == 0);
    /* refusals */
    tb_writer *w3 = NULL;
    CHECK(tb_writer_open_path(path, 1, 1.0, &w3) == TB_ERR_IO);   /* exists */
    CHECK(strstr(tb_writer_error(w3), "cannot create") != NULL);
    tb_writer_close(w3);
    char file_as_dir[600];
    snprintf(file_as_dir, sizeof file_as_dir, "%s/sub", path);
    w3 = NULL;
    CHECK(tb_writer_open(file_as_dir, 1, &w3) == TB_ERR_IO);
    CHECK(strstr(tb_writer_error(w3), path) != NULL);
    tb_writer_close(w3);
}

/* every damaged copy of a good file is refused with the right code */
static void test_reader_refuses(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/refuse", tmpdir);
    CHECK(write_synthetic(path) == 0);
    size_t len = 0;
    unsigned char *b = read_file_or_null(path, &len);
    CHECK(b && len > 100);
    if (!b) return;
    struct collect c;
    unsigned char *d = malloc(len);
    /* a flipped bit anywhere is caught: by a CRC (or, in the length, as a
       truncation when the length CRC happens to be the flipped byte) */
    int caught = 0;
    for (size_t i = 0; i < len; i++) {
        memcpy(d, b, len);
        d[i] ^= 0x10;
        int rc = read_buf(d, len, &c);
        caught += rc == TB_ERR_CRC || rc == TB_ERR_TRUNCATED;
    }
    CHECK(caught == (int)len);
    /* every proper prefix that does not end between records is truncated */
    int cut_ok = 1;
    size_t rec_end = 0, next = 0;
    for (size_t n = 0; n < len; n++) {
        if (n == next) {   /* a record boundary: a whole-record prefix reads */
            rec_end = n;
            cut_ok &= read_buf(b, n, &c) == 0;
            if (n + 8 <= len) {
                uint64_t l = 0;
                for (int k = 7; k >= 0; k--) l = l << 8 | b[n + k];
                next = n + 16 + l;
            }
            continue;
        }
        cut_ok &= read_buf(b, n, &c) == TB_ERR_TRUNCATED;
    }
    CHECK(cut_ok && rec_end > 0);
    /* valid framing around an invalid protobuf: a group, a cut varint, a
       length past the end, a wrong wire type for a known field */
    static const unsigned char bad[][4] = {{0x0b, 0, 0, 0}, {0x10, 0x80, 0, 0}, {0x1a, 0x05, 'a', 0}, {0x11, 0, 0, 0}};
    static const size_t badlen[] = {1, 2, 3, 1};
    for (size_t i = 0; i < 4; i++) {
        unsigned char r[32];
        size_t n = badlen[i];
        for (int k = 0; k < 8; k++) r[k] = (unsigned char)(n >> 8 * k);
        uint32_t lc = tb_masked_crc32c(r, 8);
        for (int k = 0; k < 4; k++) r[8 + k] = (unsigned char)(lc >> 8 * k);
        memcpy(r + 12, bad[i], n);
        uint32_t dc = tb_masked_crc32c(r + 12, n);
        for (int k = 0; k < 4; k++) r[12 + n + k] = (unsigned char)(dc >> 8 * k);
        CHECK(read_buf(r, 16 + n, &c) == TB_ERR_FORMAT);
    }
    /* an empty record is an empty Event, and an unknown field is skipped */
    unsigned char e[20] = {0};
    uint32_t lc = tb_masked_crc32c(e, 8), dc = tb_masked_crc32c(e + 12, 0);
    for (int k = 0; k < 4; k++) e[8 + k] = (unsigned char)(lc >> 8 * k), e[12 + k] = (unsigned char)(dc >> 8 * k);
    CHECK(read_buf(e, 16, &c) == 0 && c.events == 1 && c.scalars == 0);
    char err[128];
    CHECK(tb_read_file("/nonexistent/x", collect_event, &c, err, sizeof err) == TB_ERR_IO);
    CHECK(strstr(err, "/nonexistent/x") != NULL);
    free(d);
    free(b);
}

static void rm_rf(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) rm_rf(p);
        else unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "-d") == 0) return dump(argv[2]);
    if (argc == 3 && strcmp(argv[1], "-w") == 0) return write_synthetic(argv[2]);
    if (argc != 1) {
        fprintf(stderr, "usage: test_tensorboard [-d EVENTFILE | -w FILE]\n");
        return 2;
    }
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mds-tb.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_crc32c);
    RUN(test_synthetic_fixture);
    RUN(test_writer_queue);
    RUN(test_reader_refuses);
    rm_rf(tmpdir);
    return harness_report();
}
