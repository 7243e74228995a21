/*
 * test_input.c - unit tests for preprocess/input.[ch].
 *
 * Fixtures are made on the fly with the gzip, xz and zstd commands in a
 * mkdtemp directory under /tmp, which is removed at the end.  Covers format
 * detection by magic, round trips at several read sizes, multi-block xz with
 * 1 and 2 threads, concatenated members/streams/frames, padding, truncation,
 * corruption, trailing garbage, stdin through a pipe, and open errors.
 * A format whose library this build lacks (mds_input_features()) is left
 * out of the mixed cases, its own case is reported skipped, and
 * test_not_built checks that it is refused at open with a message naming the
 * library.  Does not test read errors from the device or out-of-memory paths.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "harness.h"
#include "hugealloc.h"
#include "readfile.h"
#include "input.h"

#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmpdir[64];
static unsigned char *plain;  /* (plain_len) the reference bytes */
static size_t plain_len;

static char *path_of(const char *name)
{
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static int write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    size_t n = len ? fwrite(data, 1, len, f) : 0;
    return (fclose(f) == 0 && n == len) ? 0 : -1;
}

/* Whether this build decodes `format` ("gzip", "xz", "zstd"). */
static int built(const char *format)
{
    const char *f = mds_input_features();
    size_t n = strlen(format);
    for (const char *p = f; (p = strstr(p, format)) != NULL; p += n)
        if ((p == f || p[-1] == ' ') && (p[n] == 0 || p[n] == ' '))
            return 1;
    return 0;
}

/* Whether this build decodes the fixture `name`, by its suffix. */
static int built_name(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (dot == NULL)
        return 1;
    if (strcmp(dot, ".gz") == 0)
        return built("gzip");
    if (strcmp(dot, ".xz") == 0)
        return built("xz");
    if (strcmp(dot, ".zst") == 0)
        return built("zstd");
    return 1;
}

static int built_any(void)
{
    return mds_input_features()[0] != 0;
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return system(cmd);
}

/* Reads the whole input with reads of at most `cap` bytes.  Returns 0 at a
 * clean end or the first negative code; *data and *len hold what was decoded. */
static int read_all(const char *path, int threads, size_t cap, unsigned char **data, size_t *len,
                    mds_input **keep)
{
    mds_input *in = NULL;
    int rc = mds_input_open(path, threads, &in);
    *data = NULL;
    *len = 0;
    if (rc < 0) {
        if (keep)
            *keep = in;
        else
            mds_input_close(in);
        return rc;
    }
    size_t size = 0, capacity = 1 << 16;
    unsigned char *buf = malloc(capacity);
    long long n;
    for (;;) {
        if (capacity - size < cap) {
            capacity = 2 * capacity + cap;
            buf = realloc(buf, capacity);
        }
        n = mds_input_read(in, buf + size, cap);
        if (n <= 0)
            break;
        if ((size_t)n > cap) {  /* never more than asked */
            n = MDS_INPUT_ERR_ARG;
            break;
        }
        size += (size_t)n;
    }
    if (n == 0) {  /* the end is sticky */
        if (mds_input_read(in, buf, cap) != 0)
            n = -100;
        if (mds_input_compressed_size(in) != 0 && mds_input_compressed_pos(in) != mds_input_compressed_size(in))
            n = -101;
    } else if (mds_input_read(in, buf, cap) != n) {  /* errors are sticky */
        n = -102;
    }
    *data = buf;
    *len = size;
    if (keep)
        *keep = in;
    else
        mds_input_close(in);
    return (int)n;
}

static int same_as(const unsigned char *data, size_t len, const unsigned char *ref, size_t ref_len, int times)
{
    if (len != ref_len * (size_t)times)
        return 0;
    for (int t = 0; t < times; t++)
        if (memcmp(data + (size_t)t * ref_len, ref, ref_len) != 0)
            return 0;
    return 1;
}

/* Checks that `name` decodes to `times` copies of the plain bytes, at three
 * read sizes, and that its format is `fmt`. */
static void check_round_trip(const char *name, int fmt, int threads, int times)
{
    static const size_t caps[] = { 4093, 1 << 16, 3 << 20 };
    for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
        unsigned char *data;
        size_t len;
        mds_input *in;
        int rc = read_all(path_of(name), threads, caps[c], &data, &len, &in);
        CHECK(rc == 0);
        if (rc != 0)
            fprintf(stderr, "  %s cap %zu: rc %d: %s\n", name, caps[c], rc, mds_input_error(in));
        CHECK(mds_input_format(in) == fmt);
        CHECK(same_as(data, len, plain, plain_len, times));
        mds_input_close(in);
        free(data);
    }
}

/* Expects decoding of `name` to fail with code `want` (or any error if
 * want == 0) and a message containing `msg` (if not NULL). */
static void check_fails(const char *name, int want, const char *msg)
{
    unsigned char *data;
    size_t len;
    mds_input *in;
    int rc = read_all(path_of(name), 2, 1 << 16, &data, &len, &in);
    CHECK(rc < 0 && rc > -100);
    if (want)
        CHECK(rc == want);
    if (msg)
        CHECK(strstr(mds_input_error(in), msg) != NULL);
    if (rc >= 0 || (want && rc != want) || (msg && !strstr(mds_input_error(in), msg)))
        fprintf(stderr, "  %s: rc %d, message '%s'\n", name, rc, mds_input_error(in));
    mds_input_close(in);
    free(data);
}

static void make_plain(void)
{
    /* About 3 MB of JSON-like lines with a fixed LCG, so every compressor
     * works but the result is not trivially small. */
    static const char *words[] = { "the", "kernel", "Dokumentation", "знач", "数据", "a", "of",
                                   "\\n", "driver", "\"q\"", "0x1f8b", "😀", "memory", "é" };
    size_t cap = 3300000;
    plain = malloc(cap + 256);
    uint64_t s = 12345;
    plain_len = 0;
    int doc = 0;
    while (plain_len < cap) {
        plain_len += (size_t)sprintf((char *)plain + plain_len, "{\"id\": %d, \"text\": \"", doc++);
        int nw = 5 + (int)((s >> 33) % 60);
        for (int i = 0; i < nw; i++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            const char *w = words[(s >> 35) % (sizeof words / sizeof words[0])];
            plain_len += (size_t)sprintf((char *)plain + plain_len, "%s%s", i ? " " : "", w);
        }
        plain_len += (size_t)sprintf((char *)plain + plain_len, "\"}\n");
    }
}

static void setup(void)
{
    strcpy(tmpdir, "/tmp/mds_test_input_XXXXXX");
    if (mkdtemp(tmpdir) == NULL) {
        perror("mkdtemp");
        exit(1);
    }
    make_plain();
    CHECK(write_file(path_of("p"), plain, plain_len) == 0);
    CHECK(sh("cd %s && xz -q -1 -c p > p.xz && xz -q -1 -T2 --block-size=262144 -c p > pm.xz"
             " && zstd -q -c p > p.zst && gzip -c p > p.gz && gzip -1 -c p > p1.gz"
             " && cat p.gz p1.gz > cc.gz && cat p.xz pm.xz > cc.xz && zstd -q -12 -c p > p12.zst"
             " && cat p.zst p12.zst > cc.zst && xz -q -0 --format=lzma -c p > p.lzma"
             " && xz -q -1 -T2 --block-size=8388608 -c p > ps.xz && cat ps.xz ps.xz > ps2.xz"
             " && xz -q --lzma2=preset=1,dict=24MiB -c p > pd.xz", tmpdir) == 0);
}

static void test_plain(void)
{
    check_round_trip("p", MDS_INPUT_PLAIN, 1, 1);
}

static void test_gzip(void)
{
    check_round_trip("p.gz", MDS_INPUT_GZIP, 1, 1);
    check_round_trip("cc.gz", MDS_INPUT_GZIP, 1, 2);
}

/* Threads of this process (Linux: the entries of /proc/self/task). */
static int thread_count(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* With threads > 1, liblzma's threaded decoder starts a thread for each
 * block whose header records its sizes (`xz -T` writes them; ps.xz is one
 * such block, pm.xz several).  input.c reads the index first and decodes a
 * file of one such block in the calling thread instead; two streams of one
 * block each (ps2.xz) still take the threaded decoder. */
static void check_decoder_threads(const char *name, int want_extra)
{
    mds_input *in = NULL;
    unsigned char buf[4096];
    int before = thread_count();
    CHECK(mds_input_open(path_of(name), 2, &in) == 0);
    CHECK(mds_input_read(in, buf, sizeof buf) > 0);
    int during = thread_count();
    CHECK(before > 0 && (during > before) == want_extra);
    mds_input_close(in);
}

static void test_xz_single_block(void)
{
    check_decoder_threads("ps.xz", 0);
    check_decoder_threads("pm.xz", 1);
    check_decoder_threads("ps2.xz", 1);
    check_round_trip("ps.xz", MDS_INPUT_XZ, 2, 1);
    check_round_trip("ps2.xz", MDS_INPUT_XZ, 2, 2);
}

static void test_xz(void)
{
    check_round_trip("p.xz", MDS_INPUT_XZ, 1, 1);
    check_round_trip("p.xz", MDS_INPUT_XZ, 2, 1);
    check_round_trip("pm.xz", MDS_INPUT_XZ, 1, 1);
    check_round_trip("pm.xz", MDS_INPUT_XZ, 2, 1);
    check_round_trip("pm.xz", MDS_INPUT_XZ, 4, 1);
    check_round_trip("cc.xz", MDS_INPUT_XZ, 1, 2);
    check_round_trip("cc.xz", MDS_INPUT_XZ, 2, 2);
}

/* A dictionary of 24 MiB: the single-threaded decoder takes it from
 * input.c's allocator in huge pages (hugealloc.h), the 1 MiB ones above from
 * malloc. */
static void test_xz_big_dictionary(void)
{
    check_round_trip("pd.xz", MDS_INPUT_XZ, 1, 1);
    check_round_trip("pd.xz", MDS_INPUT_XZ, 2, 1);
}

/* mds_huge_alloc: whole 2 MiB pages, aligned to one, every byte usable;
 * NULL where the rounding would overflow. */
static void test_huge_alloc(void)
{
    CHECK(mds_huge_alloc(SIZE_MAX) == NULL);
    CHECK(mds_huge_alloc(SIZE_MAX - MDS_HUGE_PAGE + 1) == NULL);
    const size_t sizes[] = { 0, 1, MDS_HUGE_PAGE - 1, MDS_HUGE_PAGE, MDS_HUGE_PAGE + 1, (size_t)5 << 20 };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i], whole = n ? (n + MDS_HUGE_PAGE - 1) / MDS_HUGE_PAGE * MDS_HUGE_PAGE : MDS_HUGE_PAGE;
        unsigned char *p = mds_huge_alloc(n);
        CHECK(p != NULL);
        if (!p) continue;
        CHECK((uintptr_t)p % MDS_HUGE_PAGE == 0);
        CHECK(malloc_usable_size(p) >= whole);
        memset(p, 0xA5, whole);
        CHECK(p[0] == 0xA5 && p[whole - 1] == 0xA5);
        free(p);
    }
}

static void test_zstd(void)
{
    check_round_trip("p.zst", MDS_INPUT_ZSTD, 1, 1);
    check_round_trip("cc.zst", MDS_INPUT_ZSTD, 1, 2);
}

/* Copies fixture `src` to `dst` with edits: keep the first `keep` bytes
 * (or all if keep == SIZE_MAX), flip the byte at `flip` (if < SIZE_MAX),
 * and append `tail` (tail_len bytes). */
static void derive(const char *src, const char *dst, size_t keep, size_t flip, const void *tail, size_t tail_len)
{
    size_t len;
    unsigned char *p = read_file_or_null(path_of(src), &len);
    CHECK(p != NULL);
    if (p == NULL)
        return;
    if (keep < len)
        len = keep;
    if (flip < len)
        p[flip] ^= 0x55;
    unsigned char *q = malloc(len + tail_len + 1);
    memcpy(q, p, len);
    if (tail_len)
        memcpy(q + len, tail, tail_len);
    CHECK(write_file(path_of(dst), q, len + tail_len) == 0);
    free(p);
    free(q);
}

static void test_padding(void)
{
    static const unsigned char zeros[8] = { 0 };
    if (built("xz")) {
        derive("p.xz", "pad.xz", SIZE_MAX, SIZE_MAX, zeros, 8);  /* xz stream padding */
        check_round_trip("pad.xz", MDS_INPUT_XZ, 1, 1);
        check_round_trip("pad.xz", MDS_INPUT_XZ, 2, 1);
    }
    if (built("gzip")) {
        derive("p.gz", "pad.gz", SIZE_MAX, SIZE_MAX, zeros, 5);  /* gzip -dc ignores zeros */
        check_round_trip("pad.gz", MDS_INPUT_GZIP, 1, 1);
    }
}

static void test_truncated(void)
{
    static const char *names[] = { "p.gz", "p.xz", "pm.xz", "p.zst", "cc.gz", "cc.xz", "cc.zst" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!built_name(names[i]))
            continue;
        size_t len;
        unsigned char *p = read_file_or_null(path_of(names[i]), &len);
        free(p);
        const size_t keeps[] = { 6, 7, 20, len / 2, len - 5, len - 1 };
        for (size_t k = 0; k < sizeof keeps / sizeof keeps[0]; k++) {
            derive(names[i], "trunc", keeps[k], SIZE_MAX, NULL, 0);
            check_fails("trunc", MDS_INPUT_ERR_TRUNCATED, "truncated");
        }
    }
    /* Only the gzip magic: a gzip file with nothing in it. */
    if (built("gzip")) {
        CHECK(write_file(path_of("magic.gz"), "\x1f\x8b", 2) == 0);
        check_fails("magic.gz", MDS_INPUT_ERR_TRUNCATED, "truncated gzip stream");
    }
    if (built("zstd")) {
        CHECK(write_file(path_of("magic.zst"), "\x28\xb5\x2f\xfd", 4) == 0);
        check_fails("magic.zst", MDS_INPUT_ERR_TRUNCATED, "truncated zstd stream");
    }
}

static void test_corrupt(void)
{
    static const char *names[] = { "p.gz", "p.xz", "pm.xz", "p.zst", "p12.zst" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!built_name(names[i]))
            continue;
        size_t len;
        unsigned char *p = read_file_or_null(path_of(names[i]), &len);
        free(p);
        const size_t flips[] = { len / 3, len / 2, len - 9 };
        for (size_t k = 0; k < sizeof flips / sizeof flips[0]; k++) {
            derive(names[i], "bad", SIZE_MAX, flips[k], NULL, 0);
            check_fails("bad", 0, NULL);
        }
    }
    /* The messages name the format. */
    if (built("xz")) {
        derive("p.xz", "bad", SIZE_MAX, 1000, NULL, 0);
        check_fails("bad", MDS_INPUT_ERR_CORRUPT, "corrupt xz data");
    }
    if (built("zstd")) {
        derive("p.zst", "bad", SIZE_MAX, 1000, NULL, 0);
        check_fails("bad", MDS_INPUT_ERR_CORRUPT, "corrupt zstd data: ");
    }
    if (built("gzip")) {
        derive("p.gz", "bad", SIZE_MAX, 1000, NULL, 0);
        check_fails("bad", MDS_INPUT_ERR_CORRUPT, "gzip: invalid compressed data");
    }
}

static void test_trailing_garbage(void)
{
    static const char *names[] = { "p.gz", "cc.gz", "p.xz", "pm.xz", "p.zst", "cc.zst" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!built_name(names[i]))
            continue;
        /* xz reports short garbage as a truncated stream header, as xz -dc does. */
        derive(names[i], "junk", SIZE_MAX, SIZE_MAX, "junk!", 5);
        check_fails("junk", 0, NULL);
        derive(names[i], "junk", SIZE_MAX, SIZE_MAX, "junk", 4);
        check_fails("junk", 0, NULL);
        derive(names[i], "junk", SIZE_MAX, SIZE_MAX, "junkjunkjunkjunkjunk", 20);
        check_fails("junk", MDS_INPUT_ERR_CORRUPT, NULL);
        derive(names[i], "junk", SIZE_MAX, SIZE_MAX, "\0\0\0\0x", 5);
        check_fails("junk", 0, NULL);
        derive(names[i], "junk", SIZE_MAX, SIZE_MAX, "\n", 1);
        check_fails("junk", 0, NULL);
    }
    if (built("gzip")) {
        derive("p.gz", "junk", SIZE_MAX, SIZE_MAX, "junk", 4);
        check_fails("junk", MDS_INPUT_ERR_CORRUPT, "gzip: trailing garbage after compressed data");
        /* A zero byte then data after a gzip member: padding must be the end. */
        derive("p.gz", "junk", SIZE_MAX, SIZE_MAX, "\0\x1f\x8b", 3);
        check_fails("junk", MDS_INPUT_ERR_CORRUPT, "gzip: trailing garbage");
    }
    if (built("zstd")) {
        derive("p.zst", "junk", SIZE_MAX, SIZE_MAX, "junk", 4);
        check_fails("junk", MDS_INPUT_ERR_CORRUPT, "zstd: trailing garbage after compressed data");
    }
}

/* Small files: empty, shorter than any magic, a prefix of a magic, and
 * formats we do not decode (they are plain bytes). */
static void test_small(void)
{
    static const struct { const char *data; size_t len; } cases[] = {
        { "", 0 }, { "x", 1 }, { "\x1f", 1 }, { "\xfd" "7zX", 4 }, { "\x28\xb5\x2f", 3 },
        { "{\"text\": \"a\"}\n", 15 }, { "\x1f\x9d\x90", 3 } /* compress(1) */,
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK(write_file(path_of("small"), cases[i].data, cases[i].len) == 0);
        unsigned char *data;
        size_t len;
        mds_input *in;
        int rc = read_all(path_of("small"), 1, 1, &data, &len, &in);
        CHECK(rc == 0);
        CHECK(mds_input_format(in) == MDS_INPUT_PLAIN);
        CHECK(len == cases[i].len && memcmp(data, cases[i].data, len) == 0);
        CHECK(mds_input_compressed_size(in) == cases[i].len);
        mds_input_close(in);
        free(data);
    }
    /* .lzma (LZMA_Alone) has no magic we accept: plain bytes, not decoded. */
    size_t len;
    unsigned char *lz = read_file_or_null(path_of("p.lzma"), &len);
    unsigned char *data;
    size_t got;
    CHECK(read_all(path_of("p.lzma"), 1, 1 << 16, &data, &got, NULL) == 0);
    CHECK(lz && got == len && memcmp(data, lz, len) == 0);
    free(lz);
    free(data);
}

/* Tiny reads exercise every "output full" exit of the decoders. */
static void test_tiny_reads(void)
{
    CHECK(sh("cd %s && head -c 20000 p > s && gzip -c s > s.gz && xz -q -c s > s.xz && zstd -q -c s > s.zst"
             " && cat s.gz s.gz > s2.gz && cat s.xz s.xz > s2.xz && cat s.zst s.zst > s2.zst", tmpdir) == 0);
    static const char *names[] = { "s", "s.gz", "s.xz", "s.zst", "s2.gz", "s2.xz", "s2.zst" };
    static const size_t caps[] = { 1, 7 };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!built_name(names[i]))
            continue;
        for (size_t c = 0; c < 2; c++) {
            unsigned char *data;
            size_t len;
            int rc = read_all(path_of(names[i]), c ? 2 : 1, caps[c], &data, &len, NULL);
            CHECK(rc == 0);
            int times = names[i][1] == '2' ? 2 : 1;
            CHECK(same_as(data, len, plain, 20000, times));
            free(data);
        }
    }
}

/* Reads `name` through fd 0 fed by a pipe from a child, as "-". */
static void stdin_case(const char *name, int fmt)
{
    size_t len;
    unsigned char *file = read_file_or_null(path_of(name), &len);
    CHECK(file != NULL);
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        /* Dribble the first bytes so the magic arrives in pieces. */
        size_t off = 0;
        while (off < len) {
            size_t n = off < 8 ? 1 : len - off;
            ssize_t w = write(fds[1], file + off, n);
            if (w <= 0)
                _exit(1);
            off += (size_t)w;
        }
        _exit(0);
    }
    close(fds[1]);
    int saved = dup(0);
    dup2(fds[0], 0);
    close(fds[0]);
    unsigned char *data;
    size_t got;
    mds_input *in;
    int rc = read_all("-", 2, 1 << 16, &data, &got, &in);
    CHECK(rc == 0);
    CHECK(mds_input_format(in) == fmt);
    CHECK(mds_input_compressed_size(in) == 0);
    CHECK(mds_input_compressed_pos(in) == len);
    CHECK(same_as(data, got, plain, plain_len, 1));
    mds_input_close(in);
    dup2(saved, 0);
    close(saved);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    free(data);
    free(file);
}

static void test_stdin(void)
{
    stdin_case("p", MDS_INPUT_PLAIN);
    if (built("gzip"))
        stdin_case("p.gz", MDS_INPUT_GZIP);
    if (built("xz"))
        stdin_case("pm.xz", MDS_INPUT_XZ);
    if (built("zstd"))
        stdin_case("p.zst", MDS_INPUT_ZSTD);
}

/* Closing in the middle stops the decoder (and xz's threads) cleanly. */
static void test_close_early(void)
{
    static const char *names[] = { "p", "p.gz", "p.xz", "pm.xz", "p.zst" };
    char buf[1000];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!built_name(names[i]))
            continue;
        mds_input *in;
        CHECK(mds_input_open(path_of(names[i]), 2, &in) == 0);
        CHECK(mds_input_read(in, buf, sizeof buf) > 0);
        CHECK(mds_input_compressed_pos(in) > 0);
        CHECK(mds_input_compressed_pos(in) <= mds_input_compressed_size(in));
        CHECK(mds_input_read(in, buf, 0) == 0);  /* cap 0 reads nothing */
        mds_input_close(in);
    }
}

/* The feature list, and a format without its library: detected, refused at
 * open with a message naming the file and the library, never read as plain
 * (in a build with every library only the list is checked). */
static void test_not_built(void)
{
    const char *f = mds_input_features();
    static const char *const lists[] = { "gzip xz zstd", "gzip xz", "gzip zstd", "xz zstd", "gzip", "xz", "zstd", "" };
    int known = 0;
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++)
        known |= strcmp(f, lists[i]) == 0;
    CHECK(known);
    static const struct { const char *name, *format, *lib; int fmt; } cases[] = {
        { "p.gz", "gzip", "zlib (install zlib1g-dev and rebuild)", MDS_INPUT_GZIP },
        { "p.xz", "xz", "liblzma (install liblzma-dev and rebuild)", MDS_INPUT_XZ },
        { "p.zst", "zstd", "libzstd (install libzstd-dev and rebuild)", MDS_INPUT_ZSTD },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (built(cases[i].format))
            continue;
        char want[512];
        snprintf(want, sizeof want, "'%s': %s-compressed input, but this build has no %s",
                 path_of(cases[i].name), cases[i].format, cases[i].lib);
        mds_input *in = NULL;
        CHECK(mds_input_open(path_of(cases[i].name), 2, &in) == MDS_INPUT_ERR_UNSUPPORTED);
        CHECK(strcmp(mds_input_error(in), want) == 0);
        if (strcmp(mds_input_error(in), want) != 0)
            fprintf(stderr, "  got  '%s'\n  want '%s'\n", mds_input_error(in), want);
        CHECK(mds_input_format(in) == cases[i].fmt);
        mds_input_close(in);
        /* Standard input is named as such. */
        snprintf(want, sizeof want, "stdin: %s-compressed input, but this build has no %s",
                 cases[i].format, cases[i].lib);
        int fd = open(path_of(cases[i].name), O_RDONLY), saved = dup(0);
        CHECK(fd >= 0 && saved >= 0 && dup2(fd, 0) == 0);
        close(fd);
        in = NULL;
        CHECK(mds_input_open("-", 1, &in) == MDS_INPUT_ERR_UNSUPPORTED);
        CHECK(strcmp(mds_input_error(in), want) == 0);
        mds_input_close(in);
        dup2(saved, 0);
        close(saved);
    }
}

static void test_open_errors(void)
{
    mds_input *in = (mds_input *)&in;
    int rc = mds_input_open(path_of("does-not-exist"), 1, &in);
    CHECK(rc == MDS_INPUT_ERR_OPEN);
    CHECK(in != NULL);
    CHECK(strstr(mds_input_error(in), "cannot open '") == mds_input_error(in));
    CHECK(strstr(mds_input_error(in), "does-not-exist': No such file or directory") != NULL);
    mds_input_close(in);
    CHECK(mds_input_open(tmpdir, 1, &in) == MDS_INPUT_ERR_IO);  /* a directory: read() fails */
    CHECK(strstr(mds_input_error(in), "read error: ") != NULL);
    mds_input_close(in);
    CHECK(mds_input_open(NULL, 1, &in) == MDS_INPUT_ERR_ARG);
    mds_input_close(in);
    CHECK(mds_input_open("x", 1, NULL) == MDS_INPUT_ERR_ARG);
    mds_input_close(NULL);
    CHECK(mds_input_read(NULL, NULL, 0) == MDS_INPUT_ERR_ARG);
    CHECK(strcmp(mds_input_format_name(MDS_INPUT_PLAIN), "plain") == 0);
    CHECK(strcmp(mds_input_format_name(MDS_INPUT_GZIP), "gzip") == 0);
    CHECK(strcmp(mds_input_format_name(MDS_INPUT_XZ), "xz") == 0);
    CHECK(strcmp(mds_input_format_name(MDS_INPUT_ZSTD), "zstd") == 0);
    CHECK(strcmp(mds_input_format_name(99), "unknown") == 0);
    CHECK(strcmp(mds_input_strerror(MDS_INPUT_ERR_TRUNCATED), "truncated compressed stream") == 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    setup();
    RUN(test_plain);
    RUN_IF(built("gzip"), test_gzip, "zlib not built in");
    RUN_IF(built("xz"), test_xz, "liblzma not built in");
    RUN_IF(built("xz"), test_xz_single_block, "liblzma not built in");
    RUN_IF(built("xz"), test_xz_big_dictionary, "liblzma not built in");
    RUN(test_huge_alloc);
    RUN_IF(built("zstd"), test_zstd, "libzstd not built in");
    RUN_IF(built("xz") || built("gzip"), test_padding, "neither liblzma nor zlib built in");
    RUN_IF(built_any(), test_truncated, "no decompression library built in");
    RUN_IF(built_any(), test_corrupt, "no decompression library built in");
    RUN_IF(built_any(), test_trailing_garbage, "no decompression library built in");
    RUN(test_small);
    RUN(test_tiny_reads);
    RUN(test_stdin);
    RUN(test_close_early);
    RUN(test_not_built);
    RUN(test_open_errors);
    sh("rm -rf %s", tmpdir);
    free(plain);
    return harness_report();
}
