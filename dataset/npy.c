/*
 * npy.c - the two file formats of Megatron's index cache: numpy .npy arrays
 * (format 1.0 written byte-identically to numpy.save, any version read
 * through mmap) and the MD5 digest that names the cache files.
 *
 * What it deliberately does not do: pickled object arrays, Fortran order,
 * big-endian data, or dtypes other than the little-endian integers the
 * cache uses.  It never prints; errors go to the caller's errbuf.
 */
#include "dataset_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the .npy cache code assumes a little-endian host"
#endif

/* ---- MD5 (RFC 1321) ---- */

typedef struct {
    uint32_t h[4];
    uint64_t len;
    uint8_t buf[64];
} md5_ctx;

static const uint32_t md5_k[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391,
};
static const uint8_t md5_r[64] = {
    7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
    5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20,
    4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
    6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
};

static void md5_block(md5_ctx *c, const uint8_t *p)
{
    uint32_t m[16];
    for (int i = 0; i < 16; i++)
        m[i] = ds_load_le32(p + 4 * i);
    uint32_t a = c->h[0], b = c->h[1], cc = c->h[2], d = c->h[3];
    for (int i = 0; i < 64; i++) {
        uint32_t f;
        int g;
        if (i < 16)      { f = (b & cc) | (~b & d); g = i; }
        else if (i < 32) { f = (d & b) | (~d & cc); g = (5 * i + 1) & 15; }
        else if (i < 48) { f = b ^ cc ^ d;          g = (3 * i + 5) & 15; }
        else             { f = cc ^ (b | ~d);       g = (7 * i) & 15; }
        uint32_t t = d;
        d = cc;
        cc = b;
        uint32_t x = a + f + md5_k[i] + m[g];
        b = b + (x << md5_r[i] | x >> (32 - md5_r[i]));
        a = t;
    }
    c->h[0] += a;
    c->h[1] += b;
    c->h[2] += cc;
    c->h[3] += d;
}

void ds_md5_hex(char out[33], const void *data, size_t n)
{
    md5_ctx c = { {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476}, 0, {0} };
    const uint8_t *p = data;
    c.len = (uint64_t)n;
    for (; n >= 64; n -= 64, p += 64)
        md5_block(&c, p);
    uint8_t tail[128] = {0};
    if (n)
        memcpy(tail, p, n);
    tail[n] = 0x80;
    size_t tl = n < 56 ? 64 : 128;
    ds_store_le64(tail + tl - 8, c.len * 8);
    md5_block(&c, tail);
    if (tl == 128)
        md5_block(&c, tail + 64);
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        uint8_t byte = (uint8_t)(c.h[i / 4] >> (8 * (i % 4)));
        out[2 * i] = hex[byte >> 4];
        out[2 * i + 1] = hex[byte & 15];
    }
    out[32] = 0;
}

/* ---- .npy ---- */

/*
 * numpy's _write_array_header + _wrap_header for format 1.0: the dict repr
 * with sorted keys, 21 - len(repr(shape[0])) "growth" spaces, then spaces and
 * a '\n' up to a multiple of 64 bytes counting the 10-byte prefix (a full 64
 * when it already is one, as numpy's arithmetic does).
 */
size_t ds_npy_header(char *out, size_t cap, const char *descr, const uint64_t *shape, int ndim)
{
    char dict[200];
    int n;
    if (ndim == 1)
        n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%llu,), }",
                     descr, (unsigned long long)shape[0]);
    else
        n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%llu, %llu), }",
                     descr, (unsigned long long)shape[0], (unsigned long long)shape[1]);
    char digits[24];
    int nd = snprintf(digits, sizeof digits, "%llu", (unsigned long long)shape[0]);
    int growth = 21 - nd > 0 ? 21 - nd : 0;
    size_t hlen = (size_t)n + (size_t)growth + 1;
    size_t padlen = 64 - ((10 + hlen) % 64);
    size_t total = 10 + hlen + padlen;
    if (total > cap || hlen + padlen > 65535)
        return 0;
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    out[8] = (char)((hlen + padlen) & 0xff);
    out[9] = (char)((hlen + padlen) >> 8);
    memcpy(out + 10, dict, (size_t)n);
    memset(out + 10 + n, ' ', (size_t)growth + padlen);
    out[total - 1] = '\n';
    return total;
}

static int write_all(int fd, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    while (n) {
        ssize_t k = write(fd, p, n > ((size_t)1 << 30) ? (size_t)1 << 30 : n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Writes path.tmp.<pid> and renames it over path, so a reader never sees a
   half-written file under the final name. */
int ds_write_file_atomic(const char *path, const void *head, size_t nhead, const void *data,
                         size_t ndata, char *errbuf)
{
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 32);
    RETURN_ERROR_IF(!tmp, DS_ERR_NOMEM, "out of memory");
    snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        DS_SET_ERROR("cannot create '%s': %s", tmp, strerror(errno));
        free(tmp);
        return DS_ERR_IO;
    }
    int bad = write_all(fd, head, nhead) || write_all(fd, data, ndata);
    int e = errno;
    if (close(fd) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (!bad && rename(tmp, path) != 0) {
        bad = 1;
        e = errno;
    }
    if (bad) {
        DS_SET_ERROR("cannot write '%s': %s", path, strerror(e));
        unlink(tmp);
        free(tmp);
        return DS_ERR_IO;
    }
    free(tmp);
    return 0;
}

int ds_npy_write(const char *path, const char *descr, const uint64_t *shape, int ndim,
                 const void *data, char *errbuf)
{
    char head[256];
    size_t nh = ds_npy_header(head, sizeof head, descr, shape, ndim);
    RETURN_ERROR_IF(nh == 0, DS_ERR_ARG, "cannot write '%s': npy header too long", path);
    uint64_t count = shape[0] * (ndim == 2 ? shape[1] : 1);
    size_t bytes = (size_t)count * (size_t)(descr[2] - '0');
    return ds_write_file_atomic(path, head, nh, data, bytes, errbuf);
}

/* Finds 'key': in the header dict and returns what follows, or NULL. */
static const char *dict_value(const char *h, size_t n, const char *key)
{
    size_t kl = strlen(key);
    for (size_t i = 0; i + kl + 3 <= n; i++) {
        if ((h[i] == '\'' || h[i] == '"') && memcmp(h + i + 1, key, kl) == 0 && h[i + 1 + kl] == h[i]) {
            const char *p = h + i + kl + 2;
            while (p < h + n && (*p == ' ' || *p == ':'))
                p++;
            return p;
        }
    }
    return NULL;
}

/*
 * Maps a .npy read-only.  Accepts format 1.x, 2.x and 3.x headers written by
 * any numpy (key order and spacing free), little-endian integers only, C
 * order, one or two dimensions, and a file size exactly equal to header +
 * data: anything else is DS_ERR_CORRUPT, so a damaged cache is rebuilt.
 */
int ds_npy_load(ds_npy *a, const char *path, char *errbuf)
{
    memset(a, 0, sizeof *a);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    RETURN_ERROR_IF(fd < 0, DS_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 16) {
        close(fd);
        RETURN_ERROR(DS_ERR_CORRUPT, "'%s' is not a .npy file (too short)", path);
    }
    size_t size = (size_t)st.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    RETURN_ERROR_IF(map == MAP_FAILED, DS_ERR_IO, "cannot map '%s': %s", path, strerror(e));
    const uint8_t *m = map;
    size_t hoff, hlen;
    if (memcmp(m, "\x93NUMPY", 6) != 0)
        goto corrupt;
    if (m[6] == 1) {
        hoff = 10;
        hlen = (size_t)m[8] | (size_t)m[9] << 8;
    } else if (m[6] == 2 || m[6] == 3) {
        hoff = 12;
        hlen = ds_load_le32(m + 8);
    } else {
        goto corrupt;
    }
    if (hlen > size - hoff)
        goto corrupt;
    const char *h = (const char *)m + hoff;
    const char *v = dict_value(h, hlen, "descr");
    if (!v || (*v != '\'' && *v != '"'))
        goto corrupt;
    size_t dl = 0;
    while (v + 1 + dl < h + hlen && v[1 + dl] != *v && dl < sizeof a->descr - 1)
        dl++;
    memcpy(a->descr, v + 1, dl);
    a->descr[dl] = 0;
    if (strcmp(a->descr, "<i2") && strcmp(a->descr, "<i4") && strcmp(a->descr, "<u4") &&
        strcmp(a->descr, "<i8") && strcmp(a->descr, "|u1") && strcmp(a->descr, "|i1"))
        goto corrupt;
    v = dict_value(h, hlen, "fortran_order");
    if (!v || strncmp(v, "False", 5) != 0)
        goto corrupt;
    v = dict_value(h, hlen, "shape");
    if (!v || *v != '(')
        goto corrupt;
    v++;
    a->ndim = 0;
    while (a->ndim < 2) {
        while (*v == ' ')
            v++;
        if (*v == ')')
            break;
        char *end;
        errno = 0;
        unsigned long long x = strtoull(v, &end, 10);
        if (end == v || errno)
            goto corrupt;
        a->shape[a->ndim++] = x;
        v = end;
        while (*v == ' ')
            v++;
        if (*v == ',')
            v++;
    }
    while (*v == ' ')
        v++;
    if (a->ndim == 0 || *v != ')')
        goto corrupt;
    size_t item = a->descr[2] - '0';
    uint64_t count = a->shape[0];
    if (a->ndim == 2) {
        if (a->shape[1] != 0 && count > UINT64_MAX / a->shape[1])
            goto corrupt;
        count *= a->shape[1];
    }
    if (count > (UINT64_MAX - hoff - hlen) / item || hoff + hlen + count * item != size)
        goto corrupt;
    a->map = map;
    a->map_size = size;
    a->data = m + hoff + hlen;
    return 0;
corrupt:
    munmap(map, size);
    RETURN_ERROR(DS_ERR_CORRUPT, "'%s' is not a .npy array this cache can use", path);
}

void ds_npy_release(ds_npy *a)
{
    if (a && a->map)
        munmap(a->map, a->map_size);
    if (a)
        memset(a, 0, sizeof *a);
}
