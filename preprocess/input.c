/*
 * input.c - the decompressing byte source declared in input.h.
 *
 * One read buffer of MDS_INPUT_READ_SIZE bytes holds compressed input; the
 * decoders (zlib, liblzma, libzstd) write straight into the caller's buffer,
 * so decompressed bytes are never copied twice.  Plain input is read straight
 * into the caller's buffer as well, after the few bytes peeked at open.
 *
 * Each decoder is compiled only when the Makefile found its library
 * (MDS_HAVE_ZLIB, MDS_HAVE_LZMA, MDS_HAVE_ZSTD).  Without it the format is
 * still detected, so such an input fails at open with a message naming the
 * missing library instead of being read as plain bytes.
 *
 * Not done here on purpose: line splitting, UTF-8 checks, seeking, formats
 * other than gzip/xz/zstd (bzip2, lz4, .lzma, zlib streams are plain bytes).
 */
#include "input.h"
#include "hugealloc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef MDS_HAVE_LZMA
#include <lzma.h>
#endif
#ifdef MDS_HAVE_ZLIB
#include <zlib.h>
#endif
#ifdef MDS_HAVE_ZSTD
#include <zstd.h>
#include <zstd_errors.h>
#endif

#ifdef MDS_DEBUG
#define INPUT_DEBUGLOG(code) \
    fprintf(stderr, "%s:%d: input error %d: %s\n", __FILE__, __LINE__, (int)(code), in->err)
#else
#define INPUT_DEBUGLOG(code) do { } while (0)
#endif

/* Both macros expect the handle to be called `in`.  The error is sticky:
 * input_fail() also stores the code as the handle's state. */
#define RETURN_ERROR_IF(cond, code, ...) do { \
        if (cond) { \
            int input_code_ = input_fail(in, (code), __VA_ARGS__); \
            INPUT_DEBUGLOG(input_code_); \
            return input_code_; \
        } \
    } while (0)

#define FORWARD_IF_ERROR(expr) do { \
        int input_rc_ = (expr); \
        if (input_rc_ < 0) return input_rc_; \
    } while (0)

#define XZ_MAX_THREADS 16384  /* liblzma's LZMA_THREADS_MAX, which is not public */

enum { STATE_OPEN = 0, STATE_EOF = 1 };  /* negative: a sticky error code */

struct mds_input {
    size_t produced;          /* bytes the current read call has decoded so far */
    int fd;
    int close_fd;               /* 0 for stdin */
    int format;                 /* enum mds_input_format */
    int state;                  /* STATE_OPEN, STATE_EOF, or an error code */
    unsigned char *ibuf;        /* (MDS_INPUT_READ_SIZE) compressed bytes */
    size_t ipos, ilen;          /* unconsumed input is ibuf[ipos, ilen) */
    int ieof;                   /* read() returned 0 */
    uint64_t nread;             /* bytes read from fd */
    uint64_t size;              /* st_size of a regular file, else 0 */

#ifdef MDS_HAVE_ZLIB
    z_stream z;
    int z_ready;                /* inflateInit2 done */
    int z_boundary;             /* between gzip members (or before the first) */
    int z_zeros;                /* saw zero padding after a member */
    uint64_t z_members;         /* members decoded completely */
#endif
#ifdef MDS_HAVE_LZMA
    lzma_stream x;
    int x_ready;
#endif
#ifdef MDS_HAVE_ZSTD
    ZSTD_DCtx *zd;
    size_t zret;                /* last ZSTD_decompressStream hint; 0 = frame complete */
#endif

    char err[256];
};

static int input_fail(mds_input *in, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int input_fail(mds_input *in, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(in->err, sizeof in->err, fmt, ap);
    va_end(ap);
    in->state = code;
    return code;
}

/* Appends to ibuf[ilen, READ_SIZE) with one read(); sets ieof on 0. */
static int input_fill(mds_input *in)
{
    for (;;) {
        ssize_t n = read(in->fd, in->ibuf + in->ilen, MDS_INPUT_READ_SIZE - in->ilen);
        if (n > 0) {
            in->ilen += (size_t)n;
            in->nread += (uint64_t)n;
            return 0;
        }
        if (n == 0) {
            in->ieof = 1;
            return 0;
        }
        if (errno == EINTR)
            continue;
        RETURN_ERROR_IF(1, MDS_INPUT_ERR_IO, "read error: %s", strerror(errno));
    }
}

#if defined(MDS_HAVE_ZLIB) || defined(MDS_HAVE_LZMA) || defined(MDS_HAVE_ZSTD)
/* Refills an empty input buffer from the start, so reads stay large (for
 * the decoders only: plain input is read straight into the caller's buffer). */
static int input_refill(mds_input *in)
{
    if (in->ipos < in->ilen || in->ieof)
        return 0;
    in->ipos = in->ilen = 0;
    return input_fill(in);
}
#endif

/* Whether p[0, n) is a prefix of one of the magics detect_format knows. */
static int may_be_magic(const unsigned char *p, size_t n)
{
    static const unsigned char gz[2] = { 0x1f, 0x8b };
    static const unsigned char xz[6] = { 0xfd, '7', 'z', 'X', 'Z', 0x00 };
    static const unsigned char zs[4] = { 0x28, 0xb5, 0x2f, 0xfd };
    static const unsigned char sk[3] = { 0x2a, 0x4d, 0x18 };
    if (n == 0) return 1;
    if (memcmp(p, gz, n < 2 ? n : 2) == 0) return 1;
    if (memcmp(p, xz, n < 6 ? n : 6) == 0) return 1;
    if (memcmp(p, zs, n < 4 ? n : 4) == 0) return 1;
    return (p[0] & 0xf0) == 0x50 && (n == 1 || memcmp(p + 1, sk, n - 1 < 3 ? n - 1 : 3) == 0);
}

static int detect_format(const unsigned char *p, size_t n)
{
    static const unsigned char xz[6] = { 0xfd, '7', 'z', 'X', 'Z', 0x00 };
    if (n >= 2 && p[0] == 0x1f && p[1] == 0x8b)
        return MDS_INPUT_GZIP;
    if (n >= 6 && memcmp(p, xz, 6) == 0)
        return MDS_INPUT_XZ;
    if (n >= 4 && p[0] == 0x28 && p[1] == 0xb5 && p[2] == 0x2f && p[3] == 0xfd)
        return MDS_INPUT_ZSTD;
    if (n >= 4 && (p[0] & 0xf0) == 0x50 && p[1] == 0x2a && p[2] == 0x4d && p[3] == 0x18)
        return MDS_INPUT_ZSTD;  /* skippable frame first; zstd -dc accepts it */
    return MDS_INPUT_PLAIN;
}

#if !defined(MDS_HAVE_ZLIB) || !defined(MDS_HAVE_LZMA) || !defined(MDS_HAVE_ZSTD)
/* A format this build has no decoder for: refused at open, naming the
 * library and its Debian package. */
static int not_built(mds_input *in, const char *path, const char *format, const char *lib, const char *pkg)
{
    int is_stdin = strcmp(path, "-") == 0;
    RETURN_ERROR_IF(1, MDS_INPUT_ERR_UNSUPPORTED, "%s%s%s: %s-compressed input, but this build has no %s"
                    " (install %s and rebuild)", is_stdin ? "" : "'", is_stdin ? "stdin" : path,
                    is_stdin ? "" : "'", format, lib, pkg);
}
#endif

#ifdef MDS_HAVE_LZMA
/* The single-threaded decoder's allocations: its dictionary (up to the
 * stream's dictionary size, 64 MiB at xz -9) in huge pages (hugealloc.h),
 * the small ones from malloc. */
static void *xz_alloc(void *opaque, size_t nmemb, size_t size)
{
    (void)opaque;
    if (size && nmemb > SIZE_MAX / size) return NULL;
    size_t n = nmemb * size;
    return n >= ((size_t)4 << 20) ? mds_huge_alloc(n) : malloc(n ? n : 1);
}

static void xz_free(void *opaque, void *p)
{
    (void)opaque;
    free(p);
}

static const lzma_allocator xz_allocator = { xz_alloc, xz_free, NULL };

/* Whether the regular file is one xz stream of exactly one block, from its
 * index (at the end: read with pread, so the sequential reads that follow
 * are not disturbed).  liblzma's threaded decoder would decode such a file
 * in one thread all the same, but into a buffer of the whole block that the
 * caller then copies out of: about 45 MiB more RSS and more CPU on
 * the 38 MB dev corpus (docs/benchmarks.md).  Anything unexpected (stream
 * padding, several streams, a damaged footer or index) says no, and the
 * threaded decoder, which reports such damage, is used as before. */
static int xz_one_block(const mds_input *in)
{
    const uint64_t hsz = LZMA_STREAM_HEADER_SIZE;
    uint8_t foot[LZMA_STREAM_HEADER_SIZE];
    lzma_stream_flags flags;
    if (in->size < 2 * hsz || pread(in->fd, foot, hsz, (off_t)(in->size - hsz)) != (ssize_t)hsz ||
        lzma_stream_footer_decode(&flags, foot) != LZMA_OK || flags.backward_size > in->size - 2 * hsz ||
        flags.backward_size > ((uint64_t)1 << 20))
        return 0;
    size_t n = (size_t)flags.backward_size, pos = 0;
    uint8_t *buf = malloc(n);
    lzma_index *idx = NULL;
    uint64_t memlimit = UINT64_MAX;
    int one = buf && pread(in->fd, buf, n, (off_t)(in->size - hsz - n)) == (ssize_t)n &&
              lzma_index_buffer_decode(&idx, &memlimit, NULL, buf, &pos, n) == LZMA_OK &&
              lzma_index_block_count(idx) == 1 && lzma_index_file_size(idx) == in->size;
    lzma_index_end(idx, NULL);
    free(buf);
    return one;
}
#endif

static int decoder_init(mds_input *in, const char *path, int threads)
{
    (void)path;     /* named only when a decoder is not built in */
    (void)threads;  /* only the xz decoder uses it */
    switch (in->format) {
#ifdef MDS_HAVE_ZLIB
    case MDS_INPUT_GZIP: {
        int rc = inflateInit2(&in->z, 15 + 16);  /* gzip wrapper only */
        RETURN_ERROR_IF(rc == Z_MEM_ERROR, MDS_INPUT_ERR_NOMEM, "out of memory");
        RETURN_ERROR_IF(rc != Z_OK, MDS_INPUT_ERR_UNSUPPORTED, "gzip: cannot initialise zlib (%d)", rc);
        in->z_ready = 1;
        in->z_boundary = 1;
        return 0;
    }
#else
    case MDS_INPUT_GZIP:
        return not_built(in, path, "gzip", "zlib", "zlib1g-dev");
#endif
#ifdef MDS_HAVE_LZMA
    case MDS_INPUT_XZ: {
        lzma_ret rc;
        if (threads > 1 && !(in->size > 0 && xz_one_block(in))) {
            lzma_mt mt;
            memset(&mt, 0, sizeof mt);
            mt.flags = LZMA_CONCATENATED;
            mt.threads = threads > XZ_MAX_THREADS ? XZ_MAX_THREADS : (uint32_t)threads;
            mt.timeout = 0;
            mt.memlimit_threading = lzma_physmem() / 4;
            if (mt.memlimit_threading == 0)
                mt.memlimit_threading = (uint64_t)1 << 30;
            mt.memlimit_stop = UINT64_MAX;
            rc = lzma_stream_decoder_mt(&in->x, &mt);
        } else {
            /* (the threaded decoder keeps malloc: its buffers are per block, and in
               huge pages a multi-block dev took 10-15 MB more at no gain) */
            in->x.allocator = &xz_allocator;
            rc = lzma_stream_decoder(&in->x, UINT64_MAX, LZMA_CONCATENATED);
        }
        RETURN_ERROR_IF(rc == LZMA_MEM_ERROR, MDS_INPUT_ERR_NOMEM, "out of memory");
        RETURN_ERROR_IF(rc != LZMA_OK, MDS_INPUT_ERR_UNSUPPORTED, "xz: cannot initialise liblzma (%d)", (int)rc);
        in->x_ready = 1;
        return 0;
    }
#else
    case MDS_INPUT_XZ:
        return not_built(in, path, "xz", "liblzma", "liblzma-dev");
#endif
#ifdef MDS_HAVE_ZSTD
    case MDS_INPUT_ZSTD:
        in->zd = ZSTD_createDCtx();
        RETURN_ERROR_IF(in->zd == NULL, MDS_INPUT_ERR_NOMEM, "out of memory");
        /* Accept frames written with --long=31 rather than refusing them. */
        ZSTD_DCtx_setParameter(in->zd, ZSTD_d_windowLogMax, sizeof(size_t) == 8 ? 31 : 30);
        in->zret = 1;
        return 0;
#else
    case MDS_INPUT_ZSTD:
        return not_built(in, path, "zstd", "libzstd", "libzstd-dev");
#endif
    default:
        return 0;
    }
}

int mds_input_open(const char *path, int threads, mds_input **out)
{
    if (out == NULL)
        return MDS_INPUT_ERR_ARG;
    mds_input *in = calloc(1, sizeof *in);
    *out = in;
    if (in == NULL)
        return MDS_INPUT_ERR_NOMEM;
    in->fd = -1;
    RETURN_ERROR_IF(path == NULL, MDS_INPUT_ERR_ARG, "no input path");
    in->ibuf = malloc(MDS_INPUT_READ_SIZE);
    RETURN_ERROR_IF(in->ibuf == NULL, MDS_INPUT_ERR_NOMEM, "out of memory");

    if (strcmp(path, "-") == 0) {
        in->fd = 0;
    } else {
        do {
            in->fd = open(path, O_RDONLY | O_CLOEXEC);
        } while (in->fd < 0 && errno == EINTR);
        RETURN_ERROR_IF(in->fd < 0, MDS_INPUT_ERR_OPEN, "cannot open '%s': %s", path, strerror(errno));
        in->close_fd = 1;
    }
    struct stat st;
    if (fstat(in->fd, &st) == 0 && S_ISREG(st.st_mode)) {
        in->size = (uint64_t)st.st_size;
#ifdef POSIX_FADV_SEQUENTIAL
        posix_fadvise(in->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
    }

    /* A pipe may deliver the magic in pieces: read until 6 bytes or EOF, but
     * stop as soon as the bytes seen cannot start any magic, so a slow pipe
     * of plain text is not held back (its first line may be all there is). */
    while (in->ilen < 6 && !in->ieof && may_be_magic(in->ibuf, in->ilen))
        FORWARD_IF_ERROR(input_fill(in));
    in->format = detect_format(in->ibuf, in->ilen);
    return decoder_init(in, path, threads);
}

static long long read_plain(mds_input *in, unsigned char *buf, size_t cap)
{
    if (in->ipos < in->ilen) {
        size_t n = in->ilen - in->ipos;
        if (n > cap)
            n = cap;
        memcpy(buf, in->ibuf + in->ipos, n);
        in->ipos += n;
        return (long long)n;
    }
    if (in->ieof) {
        in->state = STATE_EOF;
        return 0;
    }
    if (cap > ((size_t)1 << 30))
        cap = (size_t)1 << 30;
    for (;;) {
        ssize_t n = read(in->fd, buf, cap);
        if (n > 0) {
            in->nread += (uint64_t)n;
            return n;
        }
        if (n == 0) {
            in->ieof = 1;
            in->state = STATE_EOF;
            return 0;
        }
        if (errno == EINTR)
            continue;
        RETURN_ERROR_IF(1, MDS_INPUT_ERR_IO, "read error: %s", strerror(errno));
    }
}

#ifdef MDS_HAVE_ZLIB
/* Members follow each other; zero bytes after a member are padding that
 * `gzip -dc` accepts silently, anything else after the last member is
 * garbage and an error. */
static long long read_gzip(mds_input *in, unsigned char *buf, size_t cap)
{
    size_t produced = 0;
    while (produced < cap) {
        FORWARD_IF_ERROR(input_refill(in));
        if (in->z_boundary) {
            while (in->ipos < in->ilen && in->ibuf[in->ipos] == 0) {
                in->ipos++;
                in->z_zeros = 1;
            }
            if (in->ipos == in->ilen) {
                if (in->ieof) {
                    in->state = STATE_EOF;
                    break;
                }
                continue;
            }
            RETURN_ERROR_IF(in->z_zeros, MDS_INPUT_ERR_CORRUPT, "gzip: trailing garbage after compressed data");
            int rc = inflateReset(&in->z);
            RETURN_ERROR_IF(rc != Z_OK, MDS_INPUT_ERR_CORRUPT, "gzip: cannot reset zlib (%d)", rc);
            in->z_boundary = 0;
        }
        size_t room = cap - produced;
        if (room > UINT_MAX)
            room = UINT_MAX;
        in->z.next_in = in->ibuf + in->ipos;
        in->z.avail_in = (uInt)(in->ilen - in->ipos);
        in->z.next_out = buf + produced;
        in->z.avail_out = (uInt)room;
        int rc = inflate(&in->z, Z_NO_FLUSH);
        in->ipos = in->ilen - in->z.avail_in;
        produced += room - in->z.avail_out;
        in->produced = produced;
        if (rc == Z_STREAM_END) {
            in->z_boundary = 1;
            in->z_members++;
            continue;
        }
        if (rc == Z_OK)
            continue;
        if (rc == Z_BUF_ERROR && in->ipos == in->ilen) {  /* no progress: input exhausted */
            RETURN_ERROR_IF(in->ieof, MDS_INPUT_ERR_TRUNCATED, "truncated gzip stream");
            continue;
        }
        RETURN_ERROR_IF(rc == Z_MEM_ERROR, MDS_INPUT_ERR_NOMEM, "out of memory");
        /* A later member whose header does not start with 1f 8b. */
        RETURN_ERROR_IF(rc == Z_DATA_ERROR && in->z_members > 0 && in->z.total_in <= 2 && in->z.total_out == 0,
                        MDS_INPUT_ERR_CORRUPT, "gzip: trailing garbage after compressed data");
        RETURN_ERROR_IF(1, MDS_INPUT_ERR_CORRUPT, "gzip: invalid compressed data: %s",
                        in->z.msg ? in->z.msg : "unknown error");
    }
    return (long long)produced;
}
#endif

#ifdef MDS_HAVE_LZMA
static long long read_xz(mds_input *in, unsigned char *buf, size_t cap)
{
    size_t produced = 0;
    while (produced < cap) {
        FORWARD_IF_ERROR(input_refill(in));
        lzma_action action = (in->ieof && in->ipos == in->ilen) ? LZMA_FINISH : LZMA_RUN;
        in->x.next_in = in->ibuf + in->ipos;
        in->x.avail_in = in->ilen - in->ipos;
        in->x.next_out = buf + produced;
        in->x.avail_out = cap - produced;
        lzma_ret rc = lzma_code(&in->x, action);
        in->ipos = in->ilen - in->x.avail_in;
        produced = cap - in->x.avail_out;
        in->produced = produced;
        if (rc == LZMA_OK)
            continue;
        if (rc == LZMA_STREAM_END) {
            in->state = STATE_EOF;
            break;
        }
        RETURN_ERROR_IF(rc == LZMA_BUF_ERROR, MDS_INPUT_ERR_TRUNCATED, "truncated xz stream");
        RETURN_ERROR_IF(rc == LZMA_MEM_ERROR, MDS_INPUT_ERR_NOMEM, "out of memory");
        RETURN_ERROR_IF(rc == LZMA_MEMLIMIT_ERROR, MDS_INPUT_ERR_UNSUPPORTED, "xz: memory limit reached");
        RETURN_ERROR_IF(rc == LZMA_OPTIONS_ERROR, MDS_INPUT_ERR_UNSUPPORTED, "xz: unsupported compression options");
        RETURN_ERROR_IF(rc == LZMA_FORMAT_ERROR, MDS_INPUT_ERR_CORRUPT,
                        "corrupt xz data: file format not recognized or trailing garbage");
        RETURN_ERROR_IF(1, MDS_INPUT_ERR_CORRUPT, "corrupt xz data%s",
                        rc == LZMA_DATA_ERROR ? "" : " (unexpected liblzma error)");
    }
    return (long long)produced;
}
#endif

#ifdef MDS_HAVE_ZSTD
static long long read_zstd(mds_input *in, unsigned char *buf, size_t cap)
{
    ZSTD_outBuffer out = { buf, cap, 0 };
    while (out.pos < cap) {
        FORWARD_IF_ERROR(input_refill(in));
        /* After input_refill, no input left means the file has ended.  A
         * complete frame (hint 0) is a clean end; otherwise let the decoder
         * flush what it holds, and if it cannot, the frame was cut short. */
        int no_input = in->ipos == in->ilen;
        if (no_input && in->zret == 0) {
            in->state = STATE_EOF;
            break;
        }
        size_t before = out.pos;
        ZSTD_inBuffer inb = { in->ibuf, in->ilen, in->ipos };
        size_t r = ZSTD_decompressStream(in->zd, &out, &inb);
        in->ipos = inb.pos;
        in->produced = out.pos;
        if (ZSTD_isError(r)) {
            RETURN_ERROR_IF(in->zret == 0 && ZSTD_getErrorCode(r) == ZSTD_error_prefix_unknown,
                            MDS_INPUT_ERR_CORRUPT, "zstd: trailing garbage after compressed data");
            RETURN_ERROR_IF(ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation, MDS_INPUT_ERR_NOMEM, "out of memory");
            RETURN_ERROR_IF(ZSTD_getErrorCode(r) == ZSTD_error_frameParameter_windowTooLarge,
                            MDS_INPUT_ERR_UNSUPPORTED, "zstd: %s", ZSTD_getErrorName(r));
            RETURN_ERROR_IF(1, MDS_INPUT_ERR_CORRUPT, "corrupt zstd data: %s", ZSTD_getErrorName(r));
        }
        in->zret = r;
        RETURN_ERROR_IF(no_input && out.pos == before, MDS_INPUT_ERR_TRUNCATED, "truncated zstd stream");
    }
    return (long long)out.pos;
}
#endif

long long mds_input_read(mds_input *in, void *buf, size_t cap)
{
    if (in == NULL)
        return MDS_INPUT_ERR_ARG;
    if (in->state < 0)
        return in->state;
    if (in->state == STATE_EOF || cap == 0)
        return 0;
    RETURN_ERROR_IF(buf == NULL, MDS_INPUT_ERR_ARG, "no output buffer");
    long long r;
    in->produced = 0;
    switch (in->format) {
#ifdef MDS_HAVE_ZLIB
    case MDS_INPUT_GZIP: r = read_gzip(in, buf, cap); break;
#endif
#ifdef MDS_HAVE_LZMA
    case MDS_INPUT_XZ:   r = read_xz(in, buf, cap); break;
#endif
#ifdef MDS_HAVE_ZSTD
    case MDS_INPUT_ZSTD: r = read_zstd(in, buf, cap); break;
#endif
    default:             r = read_plain(in, buf, cap); break;
    }
    /* Bytes decoded before an error are handed out first, like `zcat`; the
     * error (kept in in->state) comes with the next call. */
    if (r < 0 && in->produced > 0)
        return (long long)in->produced;
    return r;
}

const char *mds_input_error(const mds_input *in)
{
    return in ? in->err : "out of memory";
}

const char *mds_input_strerror(int code)
{
    switch (code) {
    case MDS_INPUT_OK:              return "no error";
    case MDS_INPUT_ERR_NOMEM:       return "out of memory";
    case MDS_INPUT_ERR_OPEN:        return "cannot open input";
    case MDS_INPUT_ERR_IO:          return "read error";
    case MDS_INPUT_ERR_TRUNCATED:   return "truncated compressed stream";
    case MDS_INPUT_ERR_CORRUPT:     return "corrupt compressed data";
    case MDS_INPUT_ERR_UNSUPPORTED: return "unsupported compressed data";
    case MDS_INPUT_ERR_ARG:         return "invalid argument";
    default:                        return "unknown error";
    }
}

int mds_input_format(const mds_input *in)
{
    return in ? in->format : MDS_INPUT_PLAIN;
}

const char *mds_input_features(void)
{
    /* A leading space before each name, skipped on return. */
    static const char names[] = ""
#ifdef MDS_HAVE_ZLIB
        " gzip"
#endif
#ifdef MDS_HAVE_LZMA
        " xz"
#endif
#ifdef MDS_HAVE_ZSTD
        " zstd"
#endif
        ;
    return names[0] ? names + 1 : names;
}

const char *mds_input_format_name(int fmt)
{
    switch (fmt) {
    case MDS_INPUT_PLAIN: return "plain";
    case MDS_INPUT_GZIP:  return "gzip";
    case MDS_INPUT_XZ:    return "xz";
    case MDS_INPUT_ZSTD:  return "zstd";
    default:              return "unknown";
    }
}

uint64_t mds_input_compressed_pos(const mds_input *in)
{
    if (!in) return 0;
    uint64_t pos = in->nread - (in->ilen - in->ipos);
#ifdef MDS_HAVE_LZMA
    /* The threaded xz decoder swallows input far ahead of its output; ask it
     * how much it has really decoded, so progress and ETA follow the data. */
    if (in->x_ready) {
        uint64_t pin = 0, pout = 0;
        lzma_get_progress((lzma_stream *)&in->x, &pin, &pout);
        if (pin < pos) pos = pin;
    }
#endif
    return pos;
}

uint64_t mds_input_compressed_size(const mds_input *in)
{
    return in ? in->size : 0;
}

void mds_input_close(mds_input *in)
{
    if (in == NULL)
        return;
#ifdef MDS_HAVE_ZLIB
    if (in->z_ready)
        inflateEnd(&in->z);
#endif
#ifdef MDS_HAVE_LZMA
    if (in->x_ready)
        lzma_end(&in->x);
#endif
#ifdef MDS_HAVE_ZSTD
    ZSTD_freeDCtx(in->zd);
#endif
    if (in->close_fd && in->fd >= 0)
        close(in->fd);
    free(in->ibuf);
    free(in);
}
