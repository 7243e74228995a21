/*
 * tensorboard.c - TensorBoard event files (tensorboard.h): TFRecord framing
 * with masked CRC-32C, and the few fields of the Event / Summary protobufs a
 * scalar needs, encoded and decoded by hand (docs/formats.md).
 *
 * Not here: any other summary kind, a background writer thread, printing.
 */
#include "tensorboard.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_TAG 4096

struct tb_writer {
    int fd;
    char path[PATH_MAX];
    unsigned char *buf;   /* queued records */
    size_t len, cap;
    size_t pending, queue_size;
    off_t good;           /* file size after the last whole flush */
    int open_errno;       /* errno of the failed open, for tb_writer_open's retry */
    char err[PATH_MAX + 128];
};

const char *tb_strerror(int code)
{
    switch (code) {
    case TB_OK: return "no error";
    case TB_ERR_NOMEM: return "out of memory";
    case TB_ERR_IO: return "input/output error";
    case TB_ERR_ARG: return "invalid argument";
    case TB_ERR_TRUNCATED: return "truncated record";
    case TB_ERR_CRC: return "checksum mismatch";
    case TB_ERR_FORMAT: return "not an event protobuf";
    }
    return "unknown error";
}

/* ---- CRC-32C ------------------------------------------------------------- */

/* Reflected Castagnoli polynomial, one table, a byte at a time: event files
 * are small and written a few records per second. */
static uint32_t crc_table[256];

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t tb_crc32c(uint32_t crc, const void *p, size_t n)
{
    if (!crc_table[1]) crc_init();   /* idempotent: a race writes the same values */
    const unsigned char *s = p;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ s[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

uint32_t tb_masked_crc32c(const void *p, size_t n)
{
    uint32_t c = tb_crc32c(0, p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---- protobuf pieces ----------------------------------------------------- */

static size_t put_varint(unsigned char *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (unsigned char)v;
    return n;
}

static void put_le(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(v >> 8 * i);
}

static uint64_t get_le(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/*
 * The Event of one scalar (summary != NULL) or of the file version, in
 * proto3's field order, into out (at least 64 + 2 * strlen bytes):
 *   Event   1 wall_time double, 2 step int64 (omitted when 0),
 *           3 file_version string, 5 summary Summary
 *   Summary 1 value Value          Value 1 tag string, 2 simple_value float
 */
static size_t encode_event(unsigned char *out, double wall_time, int64_t step, const char *file_version,
                           const char *tag, float value)
{
    size_t n = 0;
    uint64_t bits;
    memcpy(&bits, &wall_time, 8);
    if (bits) {   /* proto3 omits a zero double */
        out[n++] = 0x09;
        put_le(out + n, bits, 8);
        n += 8;
    }
    if (step) {
        out[n++] = 0x10;
        n += put_varint(out + n, (uint64_t)step);
    }
    if (file_version) {
        size_t len = strlen(file_version);
        out[n++] = 0x1a;
        n += put_varint(out + n, len);
        memcpy(out + n, file_version, len);
        n += len;
    }
    if (tag) {
        size_t tl = strlen(tag);
        unsigned char lv[16];
        size_t vlen = 1 + put_varint(lv, tl) + tl + 5;        /* Value */
        size_t slen = 1 + put_varint(lv, vlen) + vlen;        /* Summary */
        out[n++] = 0x2a;
        n += put_varint(out + n, slen);
        out[n++] = 0x0a;
        n += put_varint(out + n, vlen);
        out[n++] = 0x0a;
        n += put_varint(out + n, tl);
        memcpy(out + n, tag, tl);
        n += tl;
        uint32_t fb;
        memcpy(&fb, &value, 4);
        out[n++] = 0x15;
        put_le(out + n, fb, 4);
        n += 4;
    }
    return n;
}

/* ---- writing ------------------------------------------------------------- */

static int wfail(tb_writer *w, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int wfail(tb_writer *w, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
    return code;
}

double tb_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Appends the record of one event to the queue. */
static int queue_event(tb_writer *w, double wall_time, int64_t step, const char *file_version, const char *tag,
                       float value)
{
    size_t need = 64 + 2 * (file_version ? strlen(file_version) : 0) + 2 * (tag ? strlen(tag) : 0) + 16;
    if (w->len + need > w->cap) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap < w->len + need) cap *= 2;
        unsigned char *b = realloc(w->buf, cap);
        if (!b) return wfail(w, TB_ERR_NOMEM, "out of memory");
        w->buf = b;
        w->cap = cap;
    }
    unsigned char *r = w->buf + w->len;
    size_t n = encode_event(r + 12, wall_time, step, file_version, tag, value);
    put_le(r, n, 8);
    put_le(r + 8, tb_masked_crc32c(r, 8), 4);
    put_le(r + 12 + n, tb_masked_crc32c(r + 12, n), 4);
    w->len += 16 + n;
    w->pending++;
    return 0;
}

int tb_writer_flush(tb_writer *w)
{
    if (!w) return TB_ERR_ARG;
    if (w->fd < 0) return wfail(w, TB_ERR_IO, "event file '%s' is not open", w->path);
    size_t off = 0;
    while (off < w->len) {
        ssize_t k = write(w->fd, w->buf + off, w->len - off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int e = k < 0 ? errno : ENOSPC;
            /* cut a partly written record off: the file stays whole records */
            if (ftruncate(w->fd, w->good) != 0) { /* nothing more to do */ }
            return wfail(w, TB_ERR_IO, "cannot write '%s': %s", w->path, strerror(e));
        }
        off += (size_t)k;
    }
    w->good += (off_t)w->len;
    w->len = 0;
    w->pending = 0;
    return 0;
}

int tb_writer_add_scalar(tb_writer *w, const char *tag, double value, int64_t step, double wall_time)
{
    if (!w) return TB_ERR_ARG;
    if (!tag || strlen(tag) > MAX_TAG) return wfail(w, TB_ERR_ARG, "bad scalar tag");
    int rc = queue_event(w, wall_time < 0 ? tb_now() : wall_time, step, NULL, tag, (float)value);
    if (rc) return rc;
    return w->pending >= w->queue_size ? tb_writer_flush(w) : 0;
}

/* mkdir -p */
static int make_dirs(tb_writer *w, const char *dir)
{
    char p[PATH_MAX];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof p) return wfail(w, TB_ERR_ARG, "bad TensorBoard directory '%s'", dir);
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != 0) continue;
        char c = p[i];
        p[i] = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST)
            return wfail(w, TB_ERR_IO, "cannot create directory '%s': %s", p, strerror(errno));
        p[i] = c;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return wfail(w, TB_ERR_IO, "'%s' is not a directory", dir);
    return 0;
}

static int writer_new(size_t queue_size, tb_writer **out)
{
    tb_writer *w = calloc(1, sizeof *w);
    *out = w;
    if (!w) return TB_ERR_NOMEM;
    w->fd = -1;
    w->queue_size = queue_size ? queue_size : 1;
    return 0;
}

/* Opens path (which must not exist), then the file_version event, flushed. */
static int writer_start(tb_writer *w, const char *path, double wall_time)
{
    if (strlen(path) >= sizeof w->path) return wfail(w, TB_ERR_ARG, "event file path too long");
    snprintf(w->path, sizeof w->path, "%s", path);
    do {
        w->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    } while (w->fd < 0 && errno == EINTR);
    if (w->fd < 0) {
        w->open_errno = errno;
        return wfail(w, TB_ERR_IO, "cannot create '%s': %s", path, strerror(w->open_errno));
    }
    int rc = queue_event(w, wall_time, 0, TB_FILE_VERSION, NULL, 0);
    return rc ? rc : tb_writer_flush(w);
}

int tb_writer_open_path(const char *path, size_t queue_size, double wall_time, tb_writer **out)
{
    if (!out) return TB_ERR_ARG;
    int rc = writer_new(queue_size, out);
    if (rc) return rc;
    if (!path) return wfail(*out, TB_ERR_ARG, "no event file path");
    return writer_start(*out, path, wall_time);
}

int tb_writer_open(const char *dir, size_t queue_size, tb_writer **out)
{
    if (!out) return TB_ERR_ARG;
    int rc = writer_new(queue_size, out);
    if (rc) return rc;
    tb_writer *w = *out;
    if (!dir) return wfail(w, TB_ERR_ARG, "no TensorBoard directory");
    rc = make_dirs(w, dir);
    if (rc) return rc;
    char host[256];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    double now = tb_now();
    for (int n = 0; n < 1000; n++) {
        char path[PATH_MAX];
        int k = snprintf(path, sizeof path, "%s/events.out.tfevents.%010lld.%s.%ld.%d", dir, (long long)now, host,
                         (long)getpid(), n);
        if (k < 0 || (size_t)k >= sizeof path) return wfail(w, TB_ERR_ARG, "TensorBoard directory path too long");
        w->open_errno = 0;
        rc = writer_start(w, path, now);
        if (rc == 0 || w->open_errno != EEXIST) return rc;
    }
    return rc;
}

const char *tb_writer_path(const tb_writer *w) { return w ? w->path : ""; }
const char *tb_writer_error(const tb_writer *w) { return w ? w->err : "out of memory"; }

int tb_writer_close(tb_writer *w)
{
    if (!w) return 0;
    int rc = 0;
    if (w->fd >= 0) {
        if (w->len) rc = tb_writer_flush(w);
        if (close(w->fd) != 0 && rc == 0) rc = TB_ERR_IO;
    }
    free(w->buf);
    free(w);
    return rc;
}

/* ---- reading ------------------------------------------------------------- */

struct rd {
    const unsigned char *p, *end;
};

/* A varint of at most 10 bytes; -1 when malformed or cut. */
static int get_varint(struct rd *r, uint64_t *v)
{
    uint64_t x = 0;
    for (int i = 0; i < 10; i++) {
        if (r->p >= r->end) return -1;
        unsigned char b = *r->p++;
        if (i == 9 && b > 1) return -1;   /* more than 64 bits */
        x |= (uint64_t)(b & 0x7f) << 7 * i;
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* One field's key and, for length-delimited fields, the view of its bytes;
 * fixed fields are returned in *v.  -1 when malformed. */
static int get_field(struct rd *r, uint32_t *num, int *wt, uint64_t *v, struct rd *sub)
{
    uint64_t key;
    if (get_varint(r, &key) || key >> 3 == 0 || key >> 3 > 0x1fffffff) return -1;
    *num = (uint32_t)(key >> 3);
    *wt = (int)(key & 7);
    switch (*wt) {
    case 0: return get_varint(r, v);
    case 1:
        if (r->end - r->p < 8) return -1;
        *v = get_le(r->p, 8);
        r->p += 8;
        return 0;
    case 5:
        if (r->end - r->p < 4) return -1;
        *v = get_le(r->p, 4);
        r->p += 4;
        return 0;
    case 2:
        if (get_varint(r, v) || *v > (uint64_t)(r->end - r->p)) return -1;
        sub->p = r->p;
        sub->end = r->p + *v;
        r->p += *v;
        return 0;
    default:
        return -1;   /* groups (3, 4) and reserved types */
    }
}

static int parse_value(struct rd r, tb_value *val)
{
    memset(val, 0, sizeof *val);
    while (r.p < r.end) {
        uint32_t num;
        int wt;
        uint64_t v;
        struct rd sub;
        if (get_field(&r, &num, &wt, &v, &sub)) return -1;
        if (num == 1 && wt == 2) {
            val->tag = (const char *)sub.p;
            val->tag_len = (size_t)(sub.end - sub.p);
        } else if (num == 2 && wt == 5) {
            uint32_t b = (uint32_t)v;
            memcpy(&val->simple_value, &b, 4);
            val->has_simple_value = 1;
        } else if (num == 1 || num == 2) {
            return -1;   /* a known field with the wrong wire type */
        }
    }
    return 0;
}

struct scratch {
    tb_value *v;
    size_t cap;
};

static int parse_summary(struct rd r, tb_event *ev, struct scratch *s)
{
    while (r.p < r.end) {
        uint32_t num;
        int wt;
        uint64_t v;
        struct rd sub;
        if (get_field(&r, &num, &wt, &v, &sub)) return TB_ERR_FORMAT;
        if (num != 1) continue;
        if (wt != 2) return TB_ERR_FORMAT;
        if (ev->nvalues == s->cap) {
            size_t cap = s->cap ? 2 * s->cap : 8;
            tb_value *nv = realloc(s->v, cap * sizeof *nv);
            if (!nv) return TB_ERR_NOMEM;
            s->v = nv;
            s->cap = cap;
        }
        if (parse_value(sub, &s->v[ev->nvalues])) return TB_ERR_FORMAT;
        ev->nvalues++;
    }
    ev->values = s->v;
    return 0;
}

static int parse_event(struct rd r, tb_event *ev, struct scratch *s)
{
    while (r.p < r.end) {
        uint32_t num;
        int wt;
        uint64_t v;
        struct rd sub;
        if (get_field(&r, &num, &wt, &v, &sub)) return TB_ERR_FORMAT;
        if (num == 1) {
            if (wt != 1) return TB_ERR_FORMAT;
            memcpy(&ev->wall_time, &v, 8);
        } else if (num == 2) {
            if (wt != 0) return TB_ERR_FORMAT;
            ev->step = (int64_t)v;
        } else if (num == 3) {
            if (wt != 2) return TB_ERR_FORMAT;
            ev->file_version = (const char *)sub.p;
            ev->file_version_len = (size_t)(sub.end - sub.p);
        } else if (num == 5) {
            if (wt != 2) return TB_ERR_FORMAT;
            ev->has_summary = 1;
            ev->nvalues = 0;   /* proto3: the last occurrence of a message field merges; ours replaces */
            int rc = parse_summary(sub, ev, s);
            if (rc) return rc;
        }
    }
    return 0;
}

static int rfail(char *err, size_t errlen, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int rfail(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

int tb_read_events(const void *buf, size_t len, tb_event_fn fn, void *ctx, char *err, size_t errlen)
{
    if (err && errlen) err[0] = 0;
    if ((!buf && len) || !fn) return rfail(err, errlen, TB_ERR_ARG, "bad argument");
    const unsigned char *b = buf;
    struct scratch s = {NULL, 0};
    int rc = 0;
    size_t off = 0;
    while (off < len) {
        if (len - off < 12) {
            rc = rfail(err, errlen, TB_ERR_TRUNCATED, "record at offset %zu: %zu bytes, less than its 12-byte header",
                       off, len - off);
            break;
        }
        uint64_t n = get_le(b + off, 8);
        if ((uint32_t)get_le(b + off + 8, 4) != tb_masked_crc32c(b + off, 8)) {
            rc = rfail(err, errlen, TB_ERR_CRC, "record at offset %zu: length checksum mismatch", off);
            break;
        }
        if (n > len - off - 12 || len - off - 12 - n < 4) {
            rc = rfail(err, errlen, TB_ERR_TRUNCATED, "record at offset %zu: %llu bytes of data announced, %zu there",
                       off, (unsigned long long)n, len - off - 12);
            break;
        }
        const unsigned char *data = b + off + 12;
        if ((uint32_t)get_le(data + n, 4) != tb_masked_crc32c(data, (size_t)n)) {
            rc = rfail(err, errlen, TB_ERR_CRC, "record at offset %zu: data checksum mismatch", off);
            break;
        }
        tb_event ev;
        memset(&ev, 0, sizeof ev);
        ev.offset = off;
        rc = parse_event((struct rd){data, data + n}, &ev, &s);
        if (rc) {
            rfail(err, errlen, rc, "record at offset %zu: %s", off,
                  rc == TB_ERR_NOMEM ? "out of memory" : "not a valid Event protobuf");
            break;
        }
        if (!ev.has_summary) ev.values = NULL;
        rc = fn(ctx, &ev);
        if (rc) break;
        off += 16 + (size_t)n;
    }
    free(s.v);
    return rc;
}

int tb_read_file(const char *path, tb_event_fn fn, void *ctx, char *err, size_t errlen)
{
    if (!path) return rfail(err, errlen, TB_ERR_ARG, "no path");
    FILE *f = fopen(path, "rb");
    if (!f) return rfail(err, errlen, TB_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = 0;
    for (;;) {
        if (len == cap) {
            size_t nc = cap ? 2 * cap : 65536;
            unsigned char *nb = realloc(buf, nc);
            if (!nb) { rc = rfail(err, errlen, TB_ERR_NOMEM, "out of memory"); break; }
            buf = nb;
            cap = nc;
        }
        size_t k = fread(buf + len, 1, cap - len, f);
        len += k;
        if (k == 0) {
            if (ferror(f)) rc = rfail(err, errlen, TB_ERR_IO, "cannot read '%s'", path);
            break;
        }
    }
    fclose(f);
    if (rc == 0) rc = tb_read_events(buf, len, fn, ctx, err, errlen);
    free(buf);
    return rc;
}
