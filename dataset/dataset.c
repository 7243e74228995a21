/*
 * dataset.c - the MMIDIDX reader and writer behind dataset.h.
 *
 * The reader maps both files and validates the index completely before any
 * array access, so that no file content can make it read out of bounds.  The
 * writer produces byte-identical output to Megatron-LM's
 * IndexedDatasetBuilder in bounded memory: tokens, lengths and document
 * indices each go through a 1 MB buffer, the last two spilling to scratch
 * files that finalize streams into the .idx.
 *
 * What it deliberately does not do: buffer through stdio (plain write(2) on
 * private buffers, so the hot path has no locking), keep any index array in
 * memory, print, exit, or use assert() on file contents.  It assumes nothing
 * about host endianness or alignment: every on-disk integer goes through the
 * ds_load_le / ds_store_le helpers.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset_internal.h"

typedef unsigned long long ull;   /* for printf: uint64_t is not always unsigned long long */
typedef long long sll;

/* ------------------------------------------------------------------------ */
/* Small helpers                                                            */
/* ------------------------------------------------------------------------ */

void ds_set_error(char *errbuf, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(errbuf, DS_ERRMSG_SIZE, fmt, ap);
    va_end(ap);
#if defined(DS_DEBUG)
    if (n >= 0 && (size_t)n < DS_ERRMSG_SIZE)
        snprintf(errbuf + n, DS_ERRMSG_SIZE - (size_t)n, " [%s:%d]", file, line);
#else
    (void)file;
    (void)line;
    (void)n;
#endif
}

static int mul_overflows(uint64_t a, uint64_t b, uint64_t *res)
{
    if (a != 0 && b > UINT64_MAX / a)
        return 1;
    *res = a * b;
    return 0;
}

static int add_overflows(uint64_t a, uint64_t b, uint64_t *res)
{
    if (b > UINT64_MAX - a)
        return 1;
    *res = a + b;
    return 0;
}

/* Two's complement reinterpretation without relying on implementation-defined
   unsigned-to-signed conversion. */
static int64_t as_int64(uint64_t u)
{
    int64_t v;
    memcpy(&v, &u, sizeof v);
    return v;
}

static char *concat(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    if (s) {
        memcpy(s, a, la);
        memcpy(s + la, b, lb + 1);
    }
    return s;
}

/* write(2) until done: it may write less than asked (signals, pipes, huge
   counts), and a single call is limited to about 2 GB on Linux. */
static int write_all(int fd, const void *p, size_t n, const char *path, char *errbuf)
{
    const uint8_t *b = p;
    while (n > 0) {
        size_t chunk = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        ssize_t k = write(fd, b, chunk);
        if (k < 0 && errno == EINTR)
            continue;
        RETURN_ERROR_IF(k < 0, DS_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
        RETURN_ERROR_IF(k == 0, DS_ERR_IO, "cannot write '%s': write returned 0", path);
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

/* pread(2) exactly n bytes; a short file is an error, since we wrote it. */
static int pread_all(int fd, void *p, size_t n, uint64_t off, const char *path, char *errbuf)
{
    uint8_t *b = p;
    while (n > 0) {
        ssize_t k = pread(fd, b, n, (off_t)off);
        if (k < 0 && errno == EINTR)
            continue;
        RETURN_ERROR_IF(k < 0, DS_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
        RETURN_ERROR_IF(k == 0, DS_ERR_IO, "cannot read '%s': unexpected end of file at byte %llu",
                        path, (ull)off);
        b += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Version, errors, dtypes                                                  */
/* ------------------------------------------------------------------------ */

#define DS_STR_(x) #x
#define DS_STR(x) DS_STR_(x)

unsigned ds_version(void) { return DS_VERSION_NUMBER; }

const char *ds_version_string(void)
{
    return DS_STR(DS_VERSION_MAJOR) "." DS_STR(DS_VERSION_MINOR) "." DS_STR(DS_VERSION_PATCH);
}

const char *ds_strerror(int code)
{
    switch (code) {
    case DS_OK:              return "success";
    case DS_ERR_IO:          return "i/o error";
    case DS_ERR_BAD_MAGIC:   return "bad magic (not an MMIDIDX index)";
    case DS_ERR_BAD_VERSION: return "unsupported index version";
    case DS_ERR_BAD_DTYPE:   return "unknown dtype code";
    case DS_ERR_SIZE:        return "file size does not match the index counts";
    case DS_ERR_CORRUPT:     return "corrupt index";
    case DS_ERR_NOMEM:       return "out of memory";
    case DS_ERR_ARG:         return "invalid argument";
    case DS_ERR_RANGE:       return "value out of range";
    case DS_ERR_UNSUPPORTED: return "unsupported dataset";
    case DS_ERR_STATE:       return "writer already finalized or failed";
    case DS_ERR_EMPTY:       return "a split holds no tokens";
    case DS_ERR_OVERSAMPLE:  return "a blend oversamples a dataset";
    default:                 return "unknown error";
    }
}

size_t ds_dtype_size(int dtype)
{
    switch (dtype) {
    case DS_DTYPE_UINT8:   return 1;
    case DS_DTYPE_INT8:    return 1;
    case DS_DTYPE_INT16:   return 2;
    case DS_DTYPE_INT32:   return 4;
    case DS_DTYPE_INT64:   return 8;
    case DS_DTYPE_FLOAT64: return 8;
    case DS_DTYPE_FLOAT32: return 4;
    case DS_DTYPE_UINT16:  return 2;
    default:               return 0;
    }
}

const char *ds_dtype_name(int dtype)
{
    switch (dtype) {
    case DS_DTYPE_UINT8:   return "uint8";
    case DS_DTYPE_INT8:    return "int8";
    case DS_DTYPE_INT16:   return "int16";
    case DS_DTYPE_INT32:   return "int32";
    case DS_DTYPE_INT64:   return "int64";
    case DS_DTYPE_FLOAT64: return "float64";
    case DS_DTYPE_FLOAT32: return "float32";
    case DS_DTYPE_UINT16:  return "uint16";
    default:               return "unknown";
    }
}

int ds_dtype_for_vocab(size_t vocab_size)
{
    return vocab_size < 65500 ? DS_DTYPE_UINT16 : DS_DTYPE_INT32;
}

/* ------------------------------------------------------------------------ */
/* UTF-8 with errors='replace'                                              */
/* ------------------------------------------------------------------------ */

size_t ds_utf8_replace_bound(size_t n)
{
    return n > SIZE_MAX / 3 ? SIZE_MAX : 3 * n;
}

/*
 * One pass, deciding per lead byte how many continuation bytes it needs and
 * the range its first continuation must fall in (that range is what rules
 * out overlong forms, surrogates and code points above U+10FFFF, Unicode
 * table 3-7).  Whatever stops a sequence early (a byte out of range, or the
 * end of the input) ends one maximal subpart: it is replaced by a single
 * U+FFFD and decoding resumes at the byte that stopped it, as CPython's
 * decoder does.  Once a character does not fit in out, nothing more is
 * written, so out is always a prefix of the result.
 */
size_t ds_utf8_replace(char *out, size_t cap, const unsigned char *in, size_t n)
{
    static const unsigned char fffd[3] = { 0xEF, 0xBF, 0xBD };
    size_t o = 0;
    int room = 1;
    for (size_t i = 0; i < n;) {
        unsigned c = in[i];
        size_t need = 0;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0) lo = 0xA0;          /* overlong */
            else if (c == 0xED) hi = 0x9F;     /* surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0) lo = 0x90;          /* overlong */
            else if (c == 0xF4) hi = 0x8F;     /* above U+10FFFF */
        }
        size_t k = 1;   /* bytes of this character or subpart */
        if (c >= 0x80) {
            while (k <= need && i + k < n && in[i + k] >= lo && in[i + k] <= hi) {
                lo = 0x80;
                hi = 0xBF;
                k++;
            }
        }
        int valid = c < 0x80 || (need > 0 && k == need + 1);
        const unsigned char *src = valid ? in + i : fffd;
        size_t len = valid ? k : sizeof fffd;
        if (room && len <= cap - o)
            memcpy(out + o, src, len);
        else
            room = 0;
        o += len;
        i += k;
    }
    return o;
}

/* Largest token id the writer accepts per dtype.  Each is 2^k - 1, which lets
   add_document test a whole document with one OR-reduction. */
static uint32_t dtype_max_token(int dtype)
{
    switch (dtype) {
    case DS_DTYPE_UINT8:  return UINT8_MAX;
    case DS_DTYPE_INT8:   return INT8_MAX;
    case DS_DTYPE_INT16:  return INT16_MAX;
    case DS_DTYPE_UINT16: return UINT16_MAX;
    case DS_DTYPE_INT32:  return INT32_MAX;
    default:              return UINT32_MAX;   /* int64 */
    }
}

/* ------------------------------------------------------------------------ */
/* Reader                                                                   */
/* ------------------------------------------------------------------------ */

/* mmap cannot map 0 bytes, so an empty file yields NULL and size 0. */
static int map_file(const char *path, const uint8_t **map, size_t *size, char *errbuf)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    RETURN_ERROR_IF(fd < 0, DS_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        RETURN_ERROR(DS_ERR_IO, "cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        RETURN_ERROR(DS_ERR_IO, "cannot map '%s': not a regular file", path);
    }
    if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        RETURN_ERROR(DS_ERR_SIZE, "cannot map '%s': %llu bytes do not fit the address space",
                     path, (ull)st.st_size);
    }
    *size = (size_t)st.st_size;
    *map = NULL;
    if (*size > 0) {
        void *p = mmap(NULL, *size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            RETURN_ERROR(DS_ERR_IO, "cannot map '%s': %s", path, strerror(e));
        }
        *map = p;
    }
    close(fd);   /* the mapping keeps the file alive */
    return 0;
}

static int check_header(ds_reader *r)
{
    char *errbuf = r->err;
    const uint8_t *h = r->idx;
    size_t size = r->idx_size;
    const char *path = r->idx_path;

    RETURN_ERROR_IF(size >= DS_LEGACY_MAGIC_LEN && memcmp(h, DS_LEGACY_MAGIC, DS_LEGACY_MAGIC_LEN) == 0,
                    DS_ERR_UNSUPPORTED,
                    "'%s': legacy lazy/cached format (magic TNTIDX) not supported, only MMIDIDX", path);
    size_t m = size < DS_MAGIC_LEN ? size : DS_MAGIC_LEN;
    if (m > 0 && memcmp(h, DS_MAGIC, m) != 0) {   /* an empty file has no mapping */
        char hex[3 * DS_MAGIC_LEN + 1] = "";
        for (size_t i = 0; i < m; i++)
            snprintf(hex + 3 * i, sizeof hex - 3 * i, "%02x ", h[i]);
        RETURN_ERROR(DS_ERR_BAD_MAGIC,
                     "'%s': bad magic %s(expected 4d 4d 49 44 49 44 58 00 00, \"MMIDIDX\\0\\0\")",
                     path, hex);
    }
    RETURN_ERROR_IF(size < DS_HEADER_SIZE, DS_ERR_SIZE,
                    "'%s': file has %zu bytes, shorter than the %d-byte header", path, size, DS_HEADER_SIZE);

    uint64_t version = ds_load_le64(h + DS_OFF_VERSION);
    RETURN_ERROR_IF(version != DS_FORMAT_VERSION, DS_ERR_BAD_VERSION,
                    "'%s': version %llu, only version %d is supported", path, (ull)version, DS_FORMAT_VERSION);

    int code = h[DS_OFF_DTYPE];
    RETURN_ERROR_IF(code == DS_DTYPE_FLOAT32, DS_ERR_UNSUPPORTED,
                    "'%s': dtype code 7 is ambiguous (float32 in current Megatron, float64 in "
                    "NVIDIA Megatron before mid-2023 and bigscience) and is never a token dtype: not supported",
                    path);
    RETURN_ERROR_IF(ds_dtype_size(code) == 0, DS_ERR_BAD_DTYPE,
                    "'%s': unknown dtype code %d (known: 1-8)", path, code);
    r->dtype = code;
    r->itemsize = ds_dtype_size(code);

    uint64_t n = ds_load_le64(h + DS_OFF_SEQ_COUNT);
    uint64_t dc = ds_load_le64(h + DS_OFF_DOC_COUNT);
    uint64_t seq_bytes, doc_bytes, expect;
    RETURN_ERROR_IF(mul_overflows(n, DS_LENGTH_SIZE + DS_POINTER_SIZE, &seq_bytes), DS_ERR_SIZE,
                    "'%s': sequence_count %llu is too large: its arrays overflow a 64-bit size", path, (ull)n);
    RETURN_ERROR_IF(mul_overflows(dc, DS_DOCIDX_SIZE, &doc_bytes), DS_ERR_SIZE,
                    "'%s': document_count %llu is too large: its array overflows a 64-bit size", path, (ull)dc);
    RETURN_ERROR_IF(add_overflows(DS_HEADER_SIZE, seq_bytes, &expect) || add_overflows(expect, doc_bytes, &expect),
                    DS_ERR_SIZE, "'%s': sequence_count %llu and document_count %llu overflow a 64-bit size",
                    path, (ull)n, (ull)dc);
    if (expect != (uint64_t)size) {
        /* Multimodal files carry N more bytes (sequence_modes) and no header
           flag; say so rather than calling them corrupt. */
        RETURN_ERROR_IF(n > 0 && expect + n == (uint64_t)size, DS_ERR_UNSUPPORTED,
                        "'%s': file has %llu bytes after the arrays, as a multimodal dataset "
                        "(sequence_modes) would: not supported", path, (ull)n);
        RETURN_ERROR(DS_ERR_SIZE, "'%s': sequence_count %llu and document_count %llu imply %llu bytes "
                     "but the file has %zu", path, (ull)n, (ull)dc, (ull)expect, size);
    }
    RETURN_ERROR_IF(dc == 0, DS_ERR_CORRUPT,
                    "'%s': document_count is 0, must be at least 1 (document_indices starts with 0)", path);

    r->n_seq = n;
    r->n_docidx = dc;
    r->lengths = h + DS_HEADER_SIZE;
    r->pointers = r->lengths + (size_t)n * DS_LENGTH_SIZE;
    r->docidx = r->pointers + (size_t)n * DS_POINTER_SIZE;
    return 0;
}

static int check_document_indices(ds_reader *r)
{
    char *errbuf = r->err;
    const char *path = r->idx_path;
    int64_t prev = as_int64(ds_load_le64(r->docidx));
    RETURN_ERROR_IF(prev != 0, DS_ERR_CORRUPT, "'%s': document_indices[0] is %lld, must be 0",
                    path, (sll)prev);
    for (uint64_t k = 1; k < r->n_docidx; k++) {
        int64_t v = as_int64(ds_load_le64(r->docidx + k * DS_DOCIDX_SIZE));
        RETURN_ERROR_IF(v < prev, DS_ERR_CORRUPT,
                        "'%s': document_indices[%llu] is %lld, less than document_indices[%llu] = %lld "
                        "(must be non-decreasing)", path, (ull)k, (sll)v, (ull)(k - 1), (sll)prev);
        prev = v;
    }
    RETURN_ERROR_IF((uint64_t)prev != r->n_seq, DS_ERR_CORRUPT,
                    "'%s': document_indices[%llu] (the last) is %lld but sequence_count is %llu",
                    path, (ull)(r->n_docidx - 1), (sll)prev, (ull)r->n_seq);
    return 0;
}

static int check_lengths(ds_reader *r)
{
    char *errbuf = r->err;
    uint64_t sum = 0;
    for (uint64_t i = 0; i < r->n_seq; i++) {
        uint32_t l = ds_load_le32(r->lengths + i * DS_LENGTH_SIZE);
        RETURN_ERROR_IF(l > INT32_MAX, DS_ERR_CORRUPT, "'%s': sequence_lengths[%llu] is %lld, must be non-negative",
                        r->idx_path, (ull)i, (sll)l - ((sll)1 << 32));
        sum += l;   /* wrapping needs N > 2^33, an .idx of 100 GB: checked anyway */
        RETURN_ERROR_IF(sum < l, DS_ERR_SIZE, "'%s': sequence_lengths overflow a 64-bit sum", r->idx_path);
    }
    r->n_tok = sum;
    return 0;
}

static int check_bin(ds_reader *r)
{
    char *errbuf = r->err;
    uint64_t expect;
    RETURN_ERROR_IF(mul_overflows(r->n_tok, r->itemsize, &expect), DS_ERR_SIZE,
                    "'%s': sequence_lengths sum to %llu tokens, too many for a 64-bit size",
                    r->idx_path, (ull)r->n_tok);
    RETURN_ERROR_IF(expect != (uint64_t)r->bin_size, DS_ERR_SIZE,
                    "'%s': sequence_lengths sum to %llu tokens of %zu bytes (%llu bytes) but the file has %zu",
                    r->bin_path, (ull)r->n_tok, r->itemsize, (ull)expect, r->bin_size);
    return 0;
}

static int reader_init(ds_reader *r, const char *prefix)
{
    char *errbuf = r->err;
    RETURN_ERROR_IF(!prefix, DS_ERR_ARG, "ds_reader_open: prefix is NULL");
    r->idx_path = concat(prefix, ".idx");
    r->bin_path = concat(prefix, ".bin");
    RETURN_ERROR_IF(!r->idx_path || !r->bin_path, DS_ERR_NOMEM, "out of memory");
    FORWARD_IF_ERROR(map_file(r->idx_path, &r->idx, &r->idx_size, errbuf));
    FORWARD_IF_ERROR(check_header(r));
    FORWARD_IF_ERROR(check_document_indices(r));
    FORWARD_IF_ERROR(check_lengths(r));
    FORWARD_IF_ERROR(map_file(r->bin_path, &r->bin, &r->bin_size, errbuf));
    FORWARD_IF_ERROR(check_bin(r));
    r->valid = 1;
    return 0;
}

int ds_reader_open(const char *prefix, ds_reader **out)
{
    if (!out)
        return DS_ERR_ARG;
    *out = calloc(1, sizeof **out);
    if (!*out)
        return DS_ERR_NOMEM;
    return reader_init(*out, prefix);
}

void ds_reader_close(ds_reader *r)
{
    if (!r)
        return;
    if (r->idx)
        munmap((void *)(uintptr_t)r->idx, r->idx_size);
    if (r->bin)
        munmap((void *)(uintptr_t)r->bin, r->bin_size);
    free(r->idx_path);
    free(r->bin_path);
    free(r);
}

const char *ds_reader_error(const ds_reader *r)
{
    return r ? r->err : "out of memory";
}

int ds_reader_dtype(const ds_reader *r) { return r && r->valid ? r->dtype : 0; }
uint64_t ds_reader_num_sequences(const ds_reader *r) { return r && r->valid ? r->n_seq : 0; }
uint64_t ds_reader_num_documents(const ds_reader *r) { return r && r->valid ? r->n_docidx - 1 : 0; }
uint64_t ds_reader_num_tokens(const ds_reader *r) { return r && r->valid ? r->n_tok : 0; }

uint32_t ds_reader_seq_length(const ds_reader *r, uint64_t i)
{
    if (!r || !r->valid || i >= r->n_seq)
        return 0;
    return ds_load_le32(r->lengths + i * DS_LENGTH_SIZE);
}

uint64_t ds_reader_seq_pointer(const ds_reader *r, uint64_t i)
{
    if (!r || !r->valid || i >= r->n_seq)
        return 0;
    return ds_load_le64(r->pointers + i * DS_POINTER_SIZE);
}

uint64_t ds_reader_doc_index(const ds_reader *r, uint64_t k)
{
    if (!r || !r->valid || k >= r->n_docidx)
        return 0;
    return ds_load_le64(r->docidx + k * DS_DOCIDX_SIZE);
}

int ds_reader_sequence(const ds_reader *r, uint64_t i, const void **data, uint64_t *len)
{
    /* A 0-length sequence in an empty .bin still gets a dereferenceable
       address, so callers may pass it to memcpy. */
    static const uint8_t empty[8];
    if (!r || !r->valid || !data || !len)
        return DS_ERR_ARG;
    if (i >= r->n_seq)
        return DS_ERR_RANGE;
    uint64_t ptr = ds_load_le64(r->pointers + i * DS_POINTER_SIZE);
    uint64_t l = ds_load_le32(r->lengths + i * DS_LENGTH_SIZE);
    uint64_t bytes = l * r->itemsize;   /* < 2^31 * 8: no overflow */
    if (ptr > r->bin_size || bytes > r->bin_size - ptr)
        return DS_ERR_CORRUPT;
    *data = r->bin ? r->bin + ptr : empty;
    *len = l;
    return 0;
}

/* Signed values are rebuilt arithmetically and float64 is range-checked
   before the cast, so no id, NaN included, reaches implementation-defined
   or undefined conversions. */
void ds_decode_tokens(int64_t *dst, const void *src, size_t n, int dtype)
{
    const uint8_t *p = src;
    switch (dtype) {
    case DS_DTYPE_UINT8:
        for (size_t i = 0; i < n; i++)
            dst[i] = p[i];
        break;
    case DS_DTYPE_INT8:
        for (size_t i = 0; i < n; i++)
            dst[i] = (int64_t)p[i] - (p[i] & 0x80 ? 0x100 : 0);
        break;
    case DS_DTYPE_UINT16:
        for (size_t i = 0; i < n; i++)
            dst[i] = (int64_t)(p[2 * i] | p[2 * i + 1] << 8);
        break;
    case DS_DTYPE_INT16:
        for (size_t i = 0; i < n; i++) {
            int64_t v = p[2 * i] | p[2 * i + 1] << 8;
            dst[i] = v - (v & 0x8000 ? 0x10000 : 0);
        }
        break;
    case DS_DTYPE_INT32:
        for (size_t i = 0; i < n; i++) {
            int64_t v = ds_load_le32(p + 4 * i);
            dst[i] = v - (v & 0x80000000 ? ((int64_t)1 << 32) : 0);
        }
        break;
    case DS_DTYPE_INT64:
        for (size_t i = 0; i < n; i++)
            dst[i] = as_int64(ds_load_le64(p + 8 * i));
        break;
    case DS_DTYPE_FLOAT64:
        for (size_t i = 0; i < n; i++) {
            uint64_t u = ds_load_le64(p + 8 * i);
            double d;
            memcpy(&d, &u, sizeof d);
            dst[i] = d >= -9223372036854775808.0 && d < 9223372036854775808.0 ? (int64_t)d : INT64_MIN;
        }
        break;
    default:
        for (size_t i = 0; i < n; i++)
            dst[i] = INT64_MIN;
        break;
    }
}

int64_t ds_reader_token(const ds_reader *r, uint64_t i, uint64_t k)
{
    const void *data;
    uint64_t len;
    if (ds_reader_sequence(r, i, &data, &len) != 0 || k >= len)
        return INT64_MIN;
    int64_t v;
    ds_decode_tokens(&v, (const uint8_t *)data + k * r->itemsize, 1, r->dtype);
    return v;
}

int ds_reader_verify(ds_reader *r)
{
    if (!r || !r->valid)
        return DS_ERR_ARG;
    char *errbuf = r->err;
    uint64_t expect = 0;
    for (uint64_t i = 0; i < r->n_seq; i++) {
        uint64_t ptr = ds_load_le64(r->pointers + i * DS_POINTER_SIZE);
        RETURN_ERROR_IF(ptr != expect, DS_ERR_CORRUPT,
                        "'%s': sequence_pointers[%llu] is %lld but the lengths before it imply %llu",
                        r->idx_path, (ull)i, (sll)as_int64(ptr), (ull)expect);
        expect += (uint64_t)ds_load_le32(r->lengths + i * DS_LENGTH_SIZE) * r->itemsize;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Writer: buffered sinks                                                   */
/* ------------------------------------------------------------------------ */

/* Scratch sinks open their file on the first spill; O_RDWR because finalize
   reads them back. */
static int sink_open(ds_sink *s, char *errbuf)
{
    if (s->fd >= 0)
        return 0;
    s->fd = open(s->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    RETURN_ERROR_IF(s->fd < 0, DS_ERR_IO, "cannot create '%s': %s", s->path, strerror(errno));
    return 0;
}

/* The .bin is fsync'ed before it is renamed into place; started every
   DS_WRITEBACK_STEP bytes, the writeback of what is already written runs
   during the run instead of all in that final fsync (15-20 ms of a 0.6 s
   mdsprep run on the dev corpus, docs/benchmarks.md).  SYNC_FILE_RANGE_WRITE
   only starts it and does not wait; a file system that refuses it leaves
   the whole job to the fsync, as before. */
#define DS_WRITEBACK_STEP ((uint64_t)8 << 20)

static void sink_start_writeback(ds_sink *s)
{
#ifdef SYNC_FILE_RANGE_WRITE
    if (!s->writeback || s->flushed - s->synced < DS_WRITEBACK_STEP)
        return;
    (void)sync_file_range(s->fd, (off_t)s->synced, (off_t)(s->flushed - s->synced), SYNC_FILE_RANGE_WRITE);
    s->synced = s->flushed;
#else
    (void)s;
#endif
}

static int sink_flush(ds_sink *s, char *errbuf)
{
    if (s->len == 0)
        return 0;
    FORWARD_IF_ERROR(sink_open(s, errbuf));
    FORWARD_IF_ERROR(write_all(s->fd, s->buf, s->len, s->path, errbuf));
    s->flushed += s->len;
    s->len = 0;
    sink_start_writeback(s);
    return 0;
}

/* Makes room for n contiguous bytes; n never exceeds cap. */
static inline int sink_reserve(ds_sink *s, size_t n, char *errbuf)
{
    if (s->cap - s->len < n)
        return sink_flush(s, errbuf);
    return 0;
}

static int sink_write(ds_sink *s, const void *p, size_t n, char *errbuf)
{
    const uint8_t *b = p;
    if (n >= s->cap) {   /* big blocks (merged .bin files) bypass the buffer */
        FORWARD_IF_ERROR(sink_flush(s, errbuf));
        FORWARD_IF_ERROR(sink_open(s, errbuf));
        FORWARD_IF_ERROR(write_all(s->fd, b, n, s->path, errbuf));
        s->flushed += n;
        sink_start_writeback(s);
        return 0;
    }
    while (n > 0) {
        if (s->len == s->cap)
            FORWARD_IF_ERROR(sink_flush(s, errbuf));
        size_t k = s->cap - s->len < n ? s->cap - s->len : n;
        memcpy(s->buf + s->len, b, k);
        s->len += k;
        b += k;
        n -= k;
    }
    return 0;
}

static void sink_close(ds_sink *s)
{
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
}

/* The conversions are plain loops so the compiler can vectorize them; ids
   were range-checked before, so truncation here is exact. */
static void convert_tokens(uint8_t *dst, const uint32_t *src, size_t n, size_t itemsize)
{
    switch (itemsize) {
    case 1:
        for (size_t i = 0; i < n; i++)
            dst[i] = (uint8_t)src[i];
        break;
    case 2:
        for (size_t i = 0; i < n; i++) {
            dst[2 * i] = (uint8_t)src[i];
            dst[2 * i + 1] = (uint8_t)(src[i] >> 8);
        }
        break;
    case 4:
        for (size_t i = 0; i < n; i++)
            ds_store_le32(dst + 4 * i, src[i]);
        break;
    default:
        for (size_t i = 0; i < n; i++)
            ds_store_le64(dst + 8 * i, src[i]);
        break;
    }
}

static int sink_put_tokens(ds_writer *w, const uint32_t *t, size_t n)
{
    char *errbuf = w->err;
    ds_sink *s = &w->bin;
    size_t isz = w->itemsize;
    while (n > 0) {
        FORWARD_IF_ERROR(sink_reserve(s, isz, errbuf));
        size_t k = (s->cap - s->len) / isz;
        if (k > n)
            k = n;
        convert_tokens(s->buf + s->len, t, k, isz);
        s->len += k * isz;
        t += k;
        n -= k;
    }
    return 0;
}

static int sink_put_le64(ds_sink *s, uint64_t v, char *errbuf)
{
    FORWARD_IF_ERROR(sink_reserve(s, 8, errbuf));
    ds_store_le64(s->buf + s->len, v);
    s->len += 8;
    return 0;
}

/*
 * Feeds the whole content of a sink, in chunks, to fn.  A sink that never
 * spilled is still entirely in its buffer; one that did is flushed and read
 * back through its own buffer, so no extra memory is needed.  Chunks are
 * multiples of the element size because cap is.
 */
typedef int (*chunk_fn)(ds_writer *w, const uint8_t *p, size_t n);

static int sink_stream(ds_writer *w, ds_sink *s, chunk_fn fn)
{
    char *errbuf = w->err;
    if (s->fd < 0)
        return fn(w, s->buf, s->len);
    FORWARD_IF_ERROR(sink_flush(s, errbuf));
    for (uint64_t off = 0; off < s->flushed;) {
        size_t k = s->flushed - off < s->cap ? (size_t)(s->flushed - off) : s->cap;
        FORWARD_IF_ERROR(pread_all(s->fd, s->buf, k, off, s->path, errbuf));
        FORWARD_IF_ERROR(fn(w, s->buf, k));
        off += k;
    }
    return 0;
}

static int idx_put_raw(ds_writer *w, const uint8_t *p, size_t n)
{
    return sink_write(&w->idx, p, n, w->err);
}

/* Pointers are the exclusive prefix sum of lengths × itemsize, accumulated in
   64 bits (Megatron's merge summed them in the lengths' int32 and wrapped
   at 2^31 with numpy >= 2; docs/formats.md, ".idx"). */
static int idx_put_pointers(ds_writer *w, const uint8_t *p, size_t n)
{
    char *errbuf = w->err;
    for (size_t i = 0; i + DS_LENGTH_SIZE <= n; i += DS_LENGTH_SIZE) {
        FORWARD_IF_ERROR(sink_put_le64(&w->idx, w->ptr_acc, errbuf));
        w->ptr_acc += (uint64_t)ds_load_le32(p + i) * w->itemsize;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Writer                                                                   */
/* ------------------------------------------------------------------------ */

static int writer_init(ds_writer *w, const char *prefix, int dtype)
{
    char *errbuf = w->err;
    RETURN_ERROR_IF(!prefix, DS_ERR_ARG, "ds_writer_open: prefix is NULL");
    w->prefix = concat(prefix, "");
    w->bin_path = concat(prefix, ".bin");
    w->idx_path = concat(prefix, ".idx");
    RETURN_ERROR_IF(!w->prefix || !w->bin_path || !w->idx_path, DS_ERR_NOMEM, "out of memory");

    RETURN_ERROR_IF(ds_dtype_size(dtype) == 0, DS_ERR_BAD_DTYPE,
                    "cannot write '%s': unknown dtype code %d", prefix, dtype);
    RETURN_ERROR_IF(dtype == DS_DTYPE_FLOAT32 || dtype == DS_DTYPE_FLOAT64, DS_ERR_UNSUPPORTED,
                    "cannot write '%s': dtype %s is not a token dtype", prefix, ds_dtype_name(dtype));
    w->dtype = dtype;
    w->itemsize = ds_dtype_size(dtype);
    w->max_token = dtype_max_token(dtype);

    /* All four names are built now, in one block, so that a signal handler
       can unlink them without allocating. */
    static const char *const suffix[DS_TMP_COUNT] = { ".bin", ".idx", ".len", ".doc" };
    long pid = (long)getpid();
    size_t total = 0, one[DS_TMP_COUNT];
    for (int i = 0; i < DS_TMP_COUNT; i++) {
        int k = snprintf(NULL, 0, "%s%s.tmp.%ld", prefix, suffix[i], pid);
        RETURN_ERROR_IF(k < 0, DS_ERR_ARG, "cannot write '%s': bad prefix", prefix);
        one[i] = (size_t)k + 1;
        total += one[i];
    }
    w->tmp_store = malloc(total);
    RETURN_ERROR_IF(!w->tmp_store, DS_ERR_NOMEM, "out of memory");
    char *q = w->tmp_store;
    for (int i = 0; i < DS_TMP_COUNT; i++) {
        snprintf(q, one[i], "%s%s.tmp.%ld", prefix, suffix[i], pid);
        w->tmp_paths[i] = q;
        q += one[i];
    }

    w->bufs = malloc(3 * DS_WRITER_BUF_SIZE);
    RETURN_ERROR_IF(!w->bufs, DS_ERR_NOMEM, "out of memory");
    ds_sink *sinks[3] = { &w->bin, &w->lens, &w->docs };
    const int which[3] = { DS_TMP_BIN, DS_TMP_LEN, DS_TMP_DOC };
    for (int i = 0; i < 3; i++) {
        sinks[i]->buf = w->bufs + (size_t)i * DS_WRITER_BUF_SIZE;
        sinks[i]->cap = DS_WRITER_BUF_SIZE;
        sinks[i]->path = w->tmp_paths[which[i]];
    }
    w->idx.path = w->tmp_paths[DS_TMP_IDX];

    w->bin.writeback = 1;
    w->bin.fd = open(w->bin.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    RETURN_ERROR_IF(w->bin.fd < 0, DS_ERR_IO, "cannot create '%s': %s", w->bin.path, strerror(errno));
    return sink_put_le64(&w->docs, 0, errbuf);   /* document_indices[0] */
}

int ds_writer_open(const char *prefix, int dtype, ds_writer **out)
{
    if (!out)
        return DS_ERR_ARG;
    ds_writer *w = calloc(1, sizeof *w);
    *out = w;
    if (!w)
        return DS_ERR_NOMEM;
    w->bin.fd = w->lens.fd = w->docs.fd = w->idx.fd = -1;
    int rc = writer_init(w, prefix, dtype);
    if (rc < 0)
        w->failed = rc;
    return rc;
}

const char *const *ds_writer_temp_paths(const ds_writer *w, size_t *n)
{
    if (!w || !w->tmp_store) {
        if (n)
            *n = 0;
        return NULL;
    }
    if (n)
        *n = DS_TMP_COUNT;
    return w->tmp_paths;
}

static int writer_usable(ds_writer *w)
{
    char *errbuf = w->err;
    RETURN_ERROR_IF(w->finalized || w->prepared, DS_ERR_STATE, "'%s': writer already finalized", w->prefix ? w->prefix : "?");
    /* keep the message of the original failure */
    if (w->failed)
        return DS_ERR_STATE;
    return 0;
}

static int writer_add_document(ds_writer *w, const uint32_t *tokens, size_t ntokens,
                               const uint32_t *seq_lengths, size_t nseq)
{
    char *errbuf = w->err;
    FORWARD_IF_ERROR(sink_put_tokens(w, tokens, ntokens));
    for (size_t i = 0; i < nseq; i++) {
        FORWARD_IF_ERROR(sink_reserve(&w->lens, DS_LENGTH_SIZE, errbuf));
        ds_store_le32(w->lens.buf + w->lens.len, seq_lengths[i]);
        w->lens.len += DS_LENGTH_SIZE;
    }
    FORWARD_IF_ERROR(sink_put_le64(&w->docs, w->n_seq + nseq, errbuf));
    w->n_seq += nseq;
    w->n_doc += 1;
    w->n_tok += ntokens;
    w->bin_bytes += (uint64_t)ntokens * w->itemsize;
    return 0;
}

int ds_writer_add_document(ds_writer *w, const uint32_t *tokens, size_t ntokens,
                           const uint32_t *seq_lengths, size_t nseq)
{
    if (!w)
        return DS_ERR_ARG;
    char *errbuf = w->err;
    FORWARD_IF_ERROR(writer_usable(w));
    RETURN_ERROR_IF((ntokens > 0 && !tokens) || (nseq > 0 && !seq_lengths), DS_ERR_ARG,
                    "'%s': document %llu: NULL tokens or seq_lengths with a non-zero count",
                    w->prefix, (ull)w->n_doc);

    /* Everything is checked before anything is written, so that a refused
       document leaves the writer as it was. */
    uint64_t sum = 0;
    for (size_t i = 0; i < nseq; i++) {
        RETURN_ERROR_IF(seq_lengths[i] > INT32_MAX, DS_ERR_RANGE,
                        "'%s': document %llu: sequence length %lu does not fit int32",
                        w->prefix, (ull)w->n_doc, (unsigned long)seq_lengths[i]);
        sum += seq_lengths[i];
    }
    RETURN_ERROR_IF(sum != (uint64_t)ntokens, DS_ERR_ARG,
                    "'%s': document %llu: sequence lengths sum to %llu but ntokens is %llu",
                    w->prefix, (ull)w->n_doc, (ull)sum, (ull)ntokens);
    if (w->max_token != UINT32_MAX) {
        uint32_t acc = 0;
        for (size_t i = 0; i < ntokens; i++)
            acc |= tokens[i];
        if (acc > w->max_token) {
            size_t i = 0;
            while (tokens[i] <= w->max_token)
                i++;
            RETURN_ERROR(DS_ERR_RANGE, "'%s': document %llu: token id %lu at position %llu does not fit dtype %s (max %lu)",
                         w->prefix, (ull)w->n_doc, (unsigned long)tokens[i], (ull)i,
                         ds_dtype_name(w->dtype), (unsigned long)w->max_token);
        }
    }
    uint64_t bytes, total;
    RETURN_ERROR_IF(mul_overflows(ntokens, w->itemsize, &bytes) || add_overflows(w->bin_bytes, bytes, &total)
                    || total > INT64_MAX, DS_ERR_RANGE,
                    "'%s': document %llu: the .bin would exceed 2^63 bytes", w->prefix, (ull)w->n_doc);

    int rc = writer_add_document(w, tokens, ntokens, seq_lengths, nseq);
    if (rc < 0)
        w->failed = rc;
    return rc;
}

static int writer_add_dataset(ds_writer *w, const ds_reader *r)
{
    char *errbuf = w->err;
    /* On-disk lengths are already int32 LE, so they are appended verbatim. */
    FORWARD_IF_ERROR(sink_write(&w->lens, r->lengths, (size_t)r->n_seq * DS_LENGTH_SIZE, errbuf));
    for (uint64_t k = 1; k < r->n_docidx; k++)
        FORWARD_IF_ERROR(sink_put_le64(&w->docs, w->n_seq + ds_load_le64(r->docidx + k * DS_DOCIDX_SIZE),
                                       errbuf));
    if (r->bin_size > 0)
        FORWARD_IF_ERROR(sink_write(&w->bin, r->bin, r->bin_size, errbuf));
    w->n_seq += r->n_seq;
    w->n_doc += r->n_docidx - 1;
    w->n_tok += r->n_tok;
    w->bin_bytes += r->bin_size;
    return 0;
}

int ds_writer_add_dataset(ds_writer *w, const ds_reader *r)
{
    if (!w)
        return DS_ERR_ARG;
    char *errbuf = w->err;
    FORWARD_IF_ERROR(writer_usable(w));
    RETURN_ERROR_IF(!r || !r->valid, DS_ERR_ARG, "'%s': add_dataset: the reader is NULL or not open", w->prefix);
    RETURN_ERROR_IF(r->dtype != w->dtype, DS_ERR_ARG,
                    "'%s': add_dataset: '%s' has dtype %s but the writer has dtype %s",
                    w->prefix, r->idx_path, ds_dtype_name(r->dtype), ds_dtype_name(w->dtype));
    uint64_t total;
    RETURN_ERROR_IF(add_overflows(w->bin_bytes, r->bin_size, &total) || total > INT64_MAX, DS_ERR_RANGE,
                    "'%s': add_dataset: the .bin would exceed 2^63 bytes", w->prefix);
    int rc = writer_add_dataset(w, r);
    if (rc < 0)
        w->failed = rc;
    return rc;
}

static int fsync_close(ds_sink *s, char *errbuf)
{
    int rc = fsync(s->fd);
    int e = errno;
    int rc2 = close(s->fd);
    s->fd = -1;
    RETURN_ERROR_IF(rc != 0, DS_ERR_IO, "cannot sync '%s': %s", s->path, strerror(e));
    RETURN_ERROR_IF(rc2 != 0, DS_ERR_IO, "cannot close '%s': %s", s->path, strerror(errno));
    return 0;
}

static int writer_prepare(ds_writer *w)
{
    char *errbuf = w->err;
    FORWARD_IF_ERROR(sink_flush(&w->bin, errbuf));
    FORWARD_IF_ERROR(fsync_close(&w->bin, errbuf));

    /* The .idx reuses the token buffer, which is free from now on. */
    ds_sink *idx = &w->idx;
    idx->buf = w->bin.buf;
    idx->cap = w->bin.cap;
    idx->len = 0;
    idx->fd = open(idx->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    RETURN_ERROR_IF(idx->fd < 0, DS_ERR_IO, "cannot create '%s': %s", idx->path, strerror(errno));

    uint8_t h[DS_HEADER_SIZE];
    memcpy(h, DS_MAGIC, DS_MAGIC_LEN);
    ds_store_le64(h + DS_OFF_VERSION, DS_FORMAT_VERSION);
    h[DS_OFF_DTYPE] = (uint8_t)w->dtype;
    ds_store_le64(h + DS_OFF_SEQ_COUNT, w->n_seq);
    ds_store_le64(h + DS_OFF_DOC_COUNT, w->n_doc + 1);
    FORWARD_IF_ERROR(sink_write(idx, h, sizeof h, errbuf));
    FORWARD_IF_ERROR(sink_stream(w, &w->lens, idx_put_raw));
    w->ptr_acc = 0;
    FORWARD_IF_ERROR(sink_stream(w, &w->lens, idx_put_pointers));
    FORWARD_IF_ERROR(sink_stream(w, &w->docs, idx_put_raw));
    FORWARD_IF_ERROR(sink_flush(idx, errbuf));
    FORWARD_IF_ERROR(fsync_close(idx, errbuf));
    w->prepared = 1;
    return 0;
}

static int writer_commit(ds_writer *w)
{
    char *errbuf = w->err;
    /* The .idx goes in last: a crash in between leaves a new .bin with no
       .idx (unusable, detectably), never a new .bin beside an old .idx. */
    RETURN_ERROR_IF(unlink(w->idx_path) != 0 && errno != ENOENT, DS_ERR_IO,
                    "cannot remove '%s': %s", w->idx_path, strerror(errno));
    RETURN_ERROR_IF(rename(w->tmp_paths[DS_TMP_BIN], w->bin_path) != 0, DS_ERR_IO,
                    "cannot rename '%s' to '%s': %s", w->tmp_paths[DS_TMP_BIN], w->bin_path, strerror(errno));
    RETURN_ERROR_IF(rename(w->tmp_paths[DS_TMP_IDX], w->idx_path) != 0, DS_ERR_IO,
                    "cannot rename '%s' to '%s': %s", w->tmp_paths[DS_TMP_IDX], w->idx_path, strerror(errno));
    w->finalized = 1;

    ds_sink *scratch[2] = { &w->lens, &w->docs };
    for (int i = 0; i < 2; i++) {
        if (scratch[i]->fd >= 0) {
            sink_close(scratch[i]);
            unlink(scratch[i]->path);
        }
    }
    return 0;
}

int ds_writer_prepare(ds_writer *w)
{
    if (!w)
        return DS_ERR_ARG;
    FORWARD_IF_ERROR(writer_usable(w));
    int rc = writer_prepare(w);
    if (rc < 0)
        w->failed = rc;
    return rc;
}

int ds_writer_commit(ds_writer *w)
{
    if (!w)
        return DS_ERR_ARG;
    char *errbuf = w->err;
    RETURN_ERROR_IF(!w->prepared || w->finalized || w->failed, DS_ERR_STATE,
                    "'%s': commit needs a prepared writer", w->prefix ? w->prefix : "?");
    int rc = writer_commit(w);
    if (rc < 0)
        w->failed = rc;
    return rc;
}

int ds_writer_finalize(ds_writer *w)
{
    int rc = ds_writer_prepare(w);
    return rc < 0 ? rc : ds_writer_commit(w);
}

void ds_writer_free(ds_writer *w)
{
    if (!w)
        return;
    sink_close(&w->bin);
    sink_close(&w->lens);
    sink_close(&w->docs);
    sink_close(&w->idx);
    if (!w->finalized && w->tmp_store) {
        for (int i = 0; i < DS_TMP_COUNT; i++)
            unlink(w->tmp_paths[i]);
    }
    free(w->bufs);
    free(w->tmp_store);
    free(w->prefix);
    free(w->bin_path);
    free(w->idx_path);
    free(w);
}

const char *ds_writer_error(const ds_writer *w)
{
    return w ? w->err : "out of memory";
}

uint64_t ds_writer_num_sequences(const ds_writer *w) { return w ? w->n_seq : 0; }
uint64_t ds_writer_num_documents(const ds_writer *w) { return w ? w->n_doc : 0; }
uint64_t ds_writer_num_tokens(const ds_writer *w) { return w ? w->n_tok : 0; }
