/*
 * torchsave.c - torch.save's archive: the stored zip PyTorchStreamWriter
 * writes (miniz with MZ_ZIP_FLAG_WRITE_ZIP64, 64-byte aligned records) and
 * the pickle of one tensor in its data.pkl.  torchsave.h has the layout and
 * the limits; the byte-level rules below are the ones the fixtures in
 * tests/data/torch_dist show (torch 2.15.0).
 */
#include "torchsave.h"
#include "le.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(code, ...) do { if (err && errlen) snprintf(err, errlen, __VA_ARGS__); return (code); } while (0)

#define LOCAL_SIZE 30      /* local file header */
#define CENTRAL_SIZE 46    /* central directory header */
#define DESC_SIZE 16       /* data descriptor with its signature */
#define Z64_END_SIZE 56    /* zip64 end of central directory record */
#define Z64_LOC_SIZE 20    /* zip64 end of central directory locator */
#define END_SIZE 22        /* end of central directory record */
#define ALIGN 64           /* torch's kFieldAlignment */
#define SERIAL_ID ".data/serialization_id"

const char *ts_strerror(int code)
{
    switch (code) {
    case TS_OK: return "success";
    case TS_ERR_FORMAT: return "malformed torch.save archive";
    case TS_ERR_NOMEM: return "out of memory";
    case TS_ERR_ARG: return "bad argument";
    default: return "unknown error";
    }
}

const char *ts_dtype_name(int dtype)
{
    return dtype == TS_F32 ? "torch.float32" : dtype == TS_BF16 ? "torch.bfloat16" : dtype == TS_F16 ? "torch.float16" : "?";
}

/* The storage class torch.save names for each dtype (torch/storage.py's
 * _dtype_to_storage_type_map). */
static const char *storage_class(int dtype)
{
    return dtype == TS_F32 ? "FloatStorage" : dtype == TS_BF16 ? "BFloat16Storage" : dtype == TS_F16 ? "HalfStorage" : NULL;
}

static size_t dtype_size(int dtype) { return dtype == TS_F32 ? 4 : 2; }

/* CRC-32 (ISO-HDLC, zip's), bytewise from a table built once per call site:
 * the table is 1 KiB of stack and the records are small beside a tensor. */
static uint32_t crc32_of(const unsigned char *p, size_t n)
{
    uint32_t t[256];
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        t[i] = c;
    }
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = t[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* c10::hash_combine (c10/util/hash.h) on a 64-bit size_t. */
static uint64_t hash_combine(uint64_t seed, uint64_t v)
{
    return seed ^ (v + 0x9e3779b9u + (seed << 6) + (seed >> 2));
}

/* libstdc++'s std::hash<std::string>: _Hash_bytes (libsupc++/hash_bytes.cc,
 * the 64-bit MurmurHash variant) with seed 0xc70f6907. */
static uint64_t shift_mix(uint64_t v) { return v ^ (v >> 47); }

static uint64_t std_string_hash(const char *s, size_t len)
{
    const uint64_t mul = ((uint64_t)0xc6a4a793u << 32) + 0x5bd1e995u;
    uint64_t h = 0xc70f6907u ^ (len * mul);
    size_t aligned = len & ~(size_t)7;
    for (size_t i = 0; i < aligned; i += 8) {
        h ^= shift_mix(le_get64((const unsigned char *)s + i) * mul) * mul;
        h *= mul;
    }
    if (len & 7) {
        uint64_t d = 0;
        for (size_t i = len; i > aligned; i--) d = (d << 8) + (unsigned char)s[i - 1];
        h ^= d;
        h *= mul;
    }
    return shift_mix(shift_mix(h) * mul);
}

/*
 * The serialization id: the names go into an std::unordered_set (13 buckets
 * from the first insert until a 14th element, which one archive never has);
 * a name whose bucket is empty goes to the front of the set's list, one
 * whose bucket is taken goes before that bucket's first node.  The id is
 * the combined name hashes in that order, then the combined CRCs in writing
 * order, each printed as 20 zero-padded decimal digits.  torch's own names
 * (data.pkl, .format_version, .storage_alignment, byteorder, data/0,
 * version) fall in six different buckets, so for them the order is the
 * reverse of the writing order, which the fixtures confirm; the rule for a
 * shared bucket is libstdc++'s (_M_insert_bucket_begin) and no fixture
 * exercises it.
 */
static void serialization_id(char out[41], const ts_record *rec, size_t n, const uint32_t *crc)
{
    uint64_t hash[TS_MAX_RECORDS];
    size_t order[TS_MAX_RECORDS], m = 0;
    for (size_t i = 0; i < n; i++) {
        hash[i] = std_string_hash(rec[i].name, strlen(rec[i].name));
        size_t at = 0;
        while (at < m && hash[order[at]] % 13 != hash[i] % 13) at++;
        if (at == m) at = 0;
        memmove(order + at + 1, order + at, (m - at) * sizeof *order);
        order[at] = i;
        m++;
    }
    uint64_t names = 0, crcs = 0;
    for (size_t i = 0; i < n; i++) names = hash_combine(names, hash[order[i]]);
    for (size_t i = 0; i < n; i++) crcs = hash_combine(crcs, crc[i]);
    snprintf(out, 41, "%020llu%020llu", (unsigned long long)names, (unsigned long long)crcs);
}

/* ---- writing ---------------------------------------------------------- */

void ts_buf_release(ts_buf *b)
{
    if (!b) return;
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

static int buf_reserve(ts_buf *b, size_t more)
{
    if (b->cap - b->len >= more) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->len < more) {
        if (cap > SIZE_MAX / 2) return TS_ERR_NOMEM;
        cap *= 2;
    }
    unsigned char *p = realloc(b->data, cap);
    if (!p) return TS_ERR_NOMEM;
    b->data = p;
    b->cap = cap;
    return 0;
}

/* Appends that cannot fail: the caller reserved the room. */
static void put(ts_buf *b, const void *p, size_t n) { if (n) memcpy(b->data + b->len, p, n); b->len += n; }
static void put8(ts_buf *b, unsigned v) { b->data[b->len++] = (unsigned char)v; }
static void put16(ts_buf *b, uint32_t v) { put8(b, v & 0xFF); put8(b, (v >> 8) & 0xFF); }
static void put32(ts_buf *b, uint32_t v) { put16(b, v & 0xFFFF); put16(b, v >> 16); }
static void put64(ts_buf *b, uint64_t v) { put32(b, (uint32_t)v); put32(b, (uint32_t)(v >> 32)); }

/* A local header (flags 0x0808: sizes in the descriptor, UTF-8 names; no
 * version, method, time or date), then the extra field that pads the data
 * to a multiple of 64 bytes from the archive's start (detail::getPadding). */
static void put_local(ts_buf *b, size_t base, const char *full, size_t nlen)
{
    size_t start = b->len - base + LOCAL_SIZE + nlen + 4;
    size_t pad = (ALIGN - start % ALIGN) % ALIGN;
    put32(b, 0x04034b50);
    put16(b, 0); put16(b, 0x0808); put16(b, 0); put16(b, 0); put16(b, 0);
    put32(b, 0); put32(b, 0); put32(b, 0);
    put16(b, (uint32_t)nlen); put16(b, (uint32_t)(pad + 4));
    put(b, full, nlen);
    put(b, "FB", 2);
    put16(b, (uint32_t)pad);
    memset(b->data + b->len, 'Z', pad);
    b->len += pad;
}

int ts_archive_write(ts_buf *out, const char *prefix, const ts_record *rec, size_t n)
{
    if (n >= TS_MAX_RECORDS || strlen(prefix) + 2 > TS_MAX_NAME) return TS_ERR_ARG;
    ts_record all[TS_MAX_RECORDS];
    uint32_t crc[TS_MAX_RECORDS];
    size_t offset[TS_MAX_RECORDS];
    size_t need = Z64_END_SIZE + Z64_LOC_SIZE + END_SIZE;
    for (size_t i = 0; i < n; i++) {
        if (rec[i].size >= 0xFFFFFFFFu || strlen(rec[i].name) + strlen(prefix) + 2 > TS_MAX_NAME || !strcmp(rec[i].name, SERIAL_ID))
            return TS_ERR_ARG;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(rec[i].name, rec[j].name)) return TS_ERR_ARG;
        all[i] = rec[i];
        crc[i] = crc32_of(rec[i].data, rec[i].size);
        need += LOCAL_SIZE + CENTRAL_SIZE + 2 * TS_MAX_NAME + 4 + ALIGN + rec[i].size + DESC_SIZE;
    }
    char id[41];
    serialization_id(id, rec, n, crc);
    snprintf(all[n].name, sizeof all[n].name, "%s", SERIAL_ID);
    all[n].data = (const unsigned char *)id;
    all[n].size = 40;
    crc[n] = crc32_of(all[n].data, 40);
    n++;
    need += LOCAL_SIZE + CENTRAL_SIZE + 2 * TS_MAX_NAME + 4 + ALIGN + 40 + DESC_SIZE;
    if (buf_reserve(out, need)) return TS_ERR_NOMEM;

    size_t base = out->len;
    char full[TS_MAX_NAME];
    for (size_t i = 0; i < n; i++) {
        size_t nlen = (size_t)snprintf(full, sizeof full, "%s/%s", prefix, all[i].name);
        offset[i] = out->len - base;
        put_local(out, base, full, nlen);
        put(out, all[i].data, all[i].size);
        put32(out, 0x08074b50);
        put32(out, crc[i]); put32(out, (uint32_t)all[i].size); put32(out, (uint32_t)all[i].size);
    }
    size_t cd = out->len - base;
    for (size_t i = 0; i < n; i++) {
        size_t nlen = (size_t)snprintf(full, sizeof full, "%s/%s", prefix, all[i].name);
        put32(out, 0x02014b50);
        put16(out, 0); put16(out, 0); put16(out, 0x0808); put16(out, 0); put16(out, 0); put16(out, 0);
        put32(out, crc[i]); put32(out, (uint32_t)all[i].size); put32(out, (uint32_t)all[i].size);
        put16(out, (uint32_t)nlen); put16(out, 0); put16(out, 0); put16(out, 0); put16(out, 0);
        put32(out, 0); put32(out, (uint32_t)offset[i]);
        put(out, full, nlen);
    }
    size_t cd_size = out->len - base - cd, z64 = out->len - base;
    if (z64 >= 0xFFFFFFFFu) return TS_ERR_ARG;
    put32(out, 0x06064b50); put64(out, Z64_END_SIZE - 12);
    put16(out, 0x031e); put16(out, 0x002d);       /* made by Unix 3.0, needs 4.5 (zip64) */
    put32(out, 0); put32(out, 0); put64(out, n); put64(out, n); put64(out, cd_size); put64(out, cd);
    put32(out, 0x07064b50); put32(out, 0); put64(out, z64); put32(out, 1);
    put32(out, 0x06054b50); put16(out, 0); put16(out, 0); put16(out, (uint32_t)n); put16(out, (uint32_t)n);
    put32(out, (uint32_t)cd_size); put32(out, (uint32_t)cd); put16(out, 0);
    return 0;
}

/* ---- reading ---------------------------------------------------------- */

/* The small records every torch.save archive has, and their contents. */
static const struct { const char *name, *value; } fixed_records[] = {
    { ".format_version", "1" }, { ".storage_alignment", "64" }, { "byteorder", "little" }, { "version", "3\n" },
};

static int check_names(const ts_archive *a, const char *name, char *err, size_t errlen)
{
    for (size_t i = 0; i < a->n; i++) {
        const ts_record *r = &a->rec[i];
        int known = !strcmp(r->name, "data.pkl") || !strcmp(r->name, "data/0") || !strcmp(r->name, SERIAL_ID);
        for (size_t k = 0; k < sizeof fixed_records / sizeof *fixed_records; k++) {
            if (strcmp(r->name, fixed_records[k].name)) continue;
            known = 1;
            size_t len = strlen(fixed_records[k].value);
            if (r->size != len || memcmp(r->data, fixed_records[k].value, len))
                FAIL(TS_ERR_FORMAT, "'%s': record '%s' is not '%.*s' (only what torch.save writes is read)", name, r->name,
                     (int)strcspn(fixed_records[k].value, "\n"), fixed_records[k].value);
        }
        if (!known) FAIL(TS_ERR_FORMAT, "'%s': unknown record '%s'", name, r->name);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(r->name, a->rec[j].name)) FAIL(TS_ERR_FORMAT, "'%s': record '%s' twice", name, r->name);
    }
    for (size_t k = 0; k < sizeof fixed_records / sizeof *fixed_records; k++)
        if (!ts_archive_find(a, fixed_records[k].name)) FAIL(TS_ERR_FORMAT, "'%s': no record '%s'", name, fixed_records[k].name);
    if (!ts_archive_find(a, "data.pkl")) FAIL(TS_ERR_FORMAT, "'%s': no record 'data.pkl'", name);
    if (a->n == 0 || strcmp(a->rec[a->n - 1].name, SERIAL_ID)) FAIL(TS_ERR_FORMAT, "'%s': the last record is not '" SERIAL_ID "'", name);
    return 0;
}

/* Names torch writes are ASCII; checking keeps messages one printable line. */
static int printable(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] > 0x7E) return 0;
    return 1;
}

/* One central directory entry at cd and the record it points to, which must
 * start at *pos (records back to back); *pos moves past its descriptor. */
static int parse_entry(const unsigned char *buf, size_t size, size_t cd_end, size_t *cdp, size_t *pos, ts_archive *a,
                       uint32_t *crc_out, const char *name, char *err, size_t errlen)
{
    size_t cd = *cdp;
    if (cd_end - cd < CENTRAL_SIZE || le_get32(buf + cd) != 0x02014b50)
        FAIL(TS_ERR_FORMAT, "'%s': bad central directory entry at offset %zu", name, cd);
    const unsigned char *e = buf + cd;
    uint32_t flags = le_get16(e + 8), method = le_get16(e + 10), crc = le_get32(e + 16);
    uint64_t csize = le_get32(e + 20), usize = le_get32(e + 24);
    size_t nlen = le_get16(e + 28), xlen = le_get16(e + 30), clen = le_get16(e + 32);
    uint64_t lho = le_get32(e + 42);
    if (method != 0) FAIL(TS_ERR_FORMAT, "'%s': compressed record (method %u) at offset %zu", name, method, cd);
    if (csize == 0xFFFFFFFFu || usize == 0xFFFFFFFFu || lho == 0xFFFFFFFFu || xlen)
        FAIL(TS_ERR_FORMAT, "'%s': zip64 record (4 GiB or more) at offset %zu", name, cd);
    if (csize != usize || (flags & ~0x0808u) || !(flags & 8))
        FAIL(TS_ERR_FORMAT, "'%s': central directory entry at offset %zu is not torch's (flags %#x)", name, cd, flags);
    if (cd_end - cd - CENTRAL_SIZE < nlen + clen) FAIL(TS_ERR_FORMAT, "'%s': central directory entry at offset %zu is truncated", name, cd);
    const char *full = (const char *)e + CENTRAL_SIZE;
    size_t plen = strlen(a->prefix);
    if (!printable(full, nlen)) FAIL(TS_ERR_FORMAT, "'%s': a record name at offset %zu is not printable ASCII", name, cd + CENTRAL_SIZE);
    if (nlen <= plen + 1 || nlen - plen - 1 >= TS_MAX_NAME || memcmp(full, a->prefix, plen) || full[plen] != '/')
        FAIL(TS_ERR_FORMAT, "'%s': record name '%.*s' is not under '%s/'", name, (int)(nlen < 200 ? nlen : 200), full, a->prefix);
    if (a->n == TS_MAX_RECORDS) FAIL(TS_ERR_FORMAT, "'%s': more than %d records", name, TS_MAX_RECORDS);
    ts_record *r = &a->rec[a->n];
    memcpy(r->name, full + plen + 1, nlen - plen - 1);
    r->name[nlen - plen - 1] = 0;
    if (lho != *pos) FAIL(TS_ERR_FORMAT, "'%s': record '%s' at offset %llu, expected %zu", name, r->name, (unsigned long long)lho, *pos);
    if (lho > size || size - lho < LOCAL_SIZE || le_get32(buf + lho) != 0x04034b50)
        FAIL(TS_ERR_FORMAT, "'%s': record '%s': bad local header", name, r->name);
    const unsigned char *l = buf + lho;
    size_t lnlen = le_get16(l + 26), lxlen = le_get16(l + 28);
    if (le_get16(l + 8) != 0 || le_get16(l + 6) != flags || lnlen != nlen || size - lho - LOCAL_SIZE < nlen + lxlen ||
        memcmp(l + LOCAL_SIZE, full, nlen))
        FAIL(TS_ERR_FORMAT, "'%s': record '%s': local header does not match the central directory", name, r->name);
    size_t data = lho + LOCAL_SIZE + nlen + lxlen;
    if (size - data < usize || size - data - usize < DESC_SIZE || data + usize + DESC_SIZE > cd_end)
        FAIL(TS_ERR_FORMAT, "'%s': record '%s': %llu bytes past the end of the records", name, r->name, (unsigned long long)usize);
    const unsigned char *d = buf + data + usize;
    if (le_get32(d) != 0x08074b50 || le_get32(d + 4) != crc || le_get32(d + 8) != csize || le_get32(d + 12) != usize)
        FAIL(TS_ERR_FORMAT, "'%s': record '%s': data descriptor does not match the central directory", name, r->name);
    r->data = buf + data;
    r->size = (size_t)usize;
    if (crc32_of(r->data, r->size) != crc) FAIL(TS_ERR_FORMAT, "'%s': record '%s': CRC-32 mismatch", name, r->name);
    *crc_out = crc;
    a->n++;
    *cdp = cd + CENTRAL_SIZE + nlen + clen;
    *pos = data + (size_t)usize + DESC_SIZE;
    return 0;
}

int ts_archive_parse(const unsigned char *buf, size_t size, const char *name, ts_archive *a, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    if (size < Z64_END_SIZE + Z64_LOC_SIZE + END_SIZE) FAIL(TS_ERR_FORMAT, "'%s': %zu bytes is too short for a torch.save archive", name, size);
    const unsigned char *end = buf + size - END_SIZE, *loc = end - Z64_LOC_SIZE, *z64 = loc - Z64_END_SIZE;
    if (le_get32(end) != 0x06054b50) FAIL(TS_ERR_FORMAT, "'%s': no zip end record at the end (truncated, or a zip comment)", name);
    if (le_get32(loc) != 0x07064b50 || le_get64(loc + 8) != (uint64_t)(z64 - buf) || le_get32(z64) != 0x06064b50 ||
        le_get64(z64 + 4) != Z64_END_SIZE - 12)
        FAIL(TS_ERR_FORMAT, "'%s': no zip64 end record before the end record (not written by torch.save)", name);
    uint64_t count = le_get64(z64 + 24), cd_size = le_get64(z64 + 40), cd = le_get64(z64 + 48);
    if (le_get32(loc + 4) || le_get32(loc + 16) != 1 || le_get32(z64 + 16) || le_get32(z64 + 20) || le_get64(z64 + 32) != count ||
        le_get16(end + 4) || le_get16(end + 6) || le_get16(end + 20) || le_get16(end + 8) != count || le_get16(end + 10) != count ||
        le_get32(end + 12) != cd_size || le_get32(end + 16) != cd)
        FAIL(TS_ERR_FORMAT, "'%s': the zip end records disagree (multi-disk or not written by torch.save)", name);
    if (cd > (uint64_t)(z64 - buf) || cd_size != (uint64_t)(z64 - buf) - cd)
        FAIL(TS_ERR_FORMAT, "'%s': central directory (offset %llu, %llu bytes) does not end at the zip64 end record", name,
             (unsigned long long)cd, (unsigned long long)cd_size);
    if (count == 0 || count > TS_MAX_RECORDS) FAIL(TS_ERR_FORMAT, "'%s': %llu records (torch.save writes 6 or 7)", name, (unsigned long long)count);
    /* The prefix is the first entry's name up to its first slash. */
    if (cd_size < CENTRAL_SIZE) FAIL(TS_ERR_FORMAT, "'%s': central directory is truncated", name);
    size_t n0 = le_get16(buf + cd + 28);
    const char *first = (const char *)buf + cd + CENTRAL_SIZE;
    const char *slash = n0 <= cd_size - CENTRAL_SIZE ? memchr(first, '/', n0) : NULL;
    if (!slash || slash == first || (size_t)(slash - first) >= TS_MAX_NAME || !printable(first, (size_t)(slash - first)))
        FAIL(TS_ERR_FORMAT, "'%s': first record has no archive prefix", name);
    memcpy(a->prefix, first, (size_t)(slash - first));
    a->prefix[slash - first] = 0;

    uint32_t crc[TS_MAX_RECORDS];
    size_t cdp = (size_t)cd, pos = 0;
    for (uint64_t i = 0; i < count; i++)
        if (parse_entry(buf, size, (size_t)cd + (size_t)cd_size, &cdp, &pos, a, &crc[i], name, err, errlen)) return TS_ERR_FORMAT;
    if (cdp != cd + cd_size) FAIL(TS_ERR_FORMAT, "'%s': %llu bytes after the central directory's entries", name, (unsigned long long)(cd + cd_size - cdp));
    if (pos != cd) FAIL(TS_ERR_FORMAT, "'%s': %zu bytes between the last record and the central directory", name, (size_t)cd - pos);
    if (check_names(a, name, err, errlen)) return TS_ERR_FORMAT;
    char id[41];
    serialization_id(id, a->rec, a->n - 1, crc);
    const ts_record *sid = &a->rec[a->n - 1];
    if (sid->size != 40 || memcmp(sid->data, id, 40))
        FAIL(TS_ERR_FORMAT, "'%s': serialization id is not the one torch derives from the records (%s)", name, id);
    return 0;
}

const ts_record *ts_archive_find(const ts_archive *a, const char *name)
{
    for (size_t i = 0; i < a->n; i++)
        if (!strcmp(a->rec[i].name, name)) return &a->rec[i];
    return NULL;
}

/* ---- the tensor's data.pkl -------------------------------------------- */

/*
 * torch.save(tensor) pickles (protocol 2, Python's pickler)
 *     _rebuild_tensor_v2(persistent_id(('storage', torch.<Class>Storage, '0',
 *         'cpu', numel)), 0, shape, stride, False, OrderedDict())
 * memoizing each global, string and non-empty tuple with BINPUT 0, 1, ...
 * The writer emits exactly that; the reader walks it for the fields and
 * then compares the whole pickle with the writer's, so anything else (a
 * view, another class, an extra opcode) is refused.
 */
static void pk_int(ts_buf *b, uint64_t v)
{
    if (v <= 0xFF) { put8(b, 'K'); put8(b, (unsigned)v); return; }
    if (v <= 0xFFFF) { put8(b, 'M'); put16(b, (uint32_t)v); return; }
    if (v <= 0x7FFFFFFF) { put8(b, 'J'); put32(b, (uint32_t)v); return; }
    unsigned n = 0;                      /* LONG1: two's complement, minimal */
    for (uint64_t x = v; x; x >>= 8) n++;
    if (v >> (8 * n - 1)) n++;
    put8(b, 0x8A); put8(b, n);
    for (unsigned i = 0; i < n; i++) put8(b, i < 8 ? (unsigned)(v >> (8 * i)) & 0xFF : 0);
}

static void pk_memo(ts_buf *b, unsigned *memo) { put8(b, 'q'); put8(b, (*memo)++); }

static void pk_str(ts_buf *b, const char *s, unsigned *memo)
{
    put8(b, 'X'); put32(b, (uint32_t)strlen(s)); put(b, s, strlen(s));
    pk_memo(b, memo);
}

static void pk_global(ts_buf *b, const char *module, const char *name, unsigned *memo)
{
    put8(b, 'c'); put(b, module, strlen(module)); put8(b, '\n'); put(b, name, strlen(name)); put8(b, '\n');
    pk_memo(b, memo);
}

static void pk_tuple(ts_buf *b, const uint64_t *v, int n, unsigned *memo)
{
    if (n == 0) { put8(b, ')'); return; }      /* the empty tuple is not memoized */
    if (n > 3) put8(b, '(');
    for (int i = 0; i < n; i++) pk_int(b, v[i]);
    put8(b, n > 3 ? 't' : 0x84 + n);
    pk_memo(b, memo);
}

static void contiguous_strides(uint64_t *stride, const ts_tensor *t)
{
    uint64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        stride[i] = s;
        s *= t->shape[i];
    }
}

/* The pickle for t into b (room reserved by the caller: pickle_bound). */
static void put_tensor_pickle(ts_buf *b, const ts_tensor *t)
{
    unsigned memo = 0;
    uint64_t stride[TS_MAX_DIMS];
    contiguous_strides(stride, t);
    put8(b, 0x80); put8(b, 2);
    pk_global(b, "torch._utils", "_rebuild_tensor_v2", &memo);
    put8(b, '('); put8(b, '(');
    pk_str(b, "storage", &memo);
    pk_global(b, "torch", storage_class(t->dtype), &memo);
    pk_str(b, "0", &memo);
    pk_str(b, "cpu", &memo);
    pk_int(b, t->numel);
    put8(b, 't'); pk_memo(b, &memo);
    put8(b, 'Q');
    pk_int(b, 0);
    pk_tuple(b, t->shape, t->ndim, &memo);
    pk_tuple(b, stride, t->ndim, &memo);
    put8(b, 0x89);
    pk_global(b, "collections", "OrderedDict", &memo);
    put8(b, ')'); put8(b, 'R'); pk_memo(b, &memo);
    put8(b, 't'); pk_memo(b, &memo);
    put8(b, 'R'); pk_memo(b, &memo);
    put8(b, '.');
}

static size_t pickle_bound(int ndim) { return 256 + 2 * (size_t)ndim * 11; }

static int check_tensor_arg(ts_tensor *t)
{
    if (!storage_class(t->dtype) || t->ndim < 0 || t->ndim > TS_MAX_DIMS) return TS_ERR_ARG;
    uint64_t numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] > 0x7FFFFFFFFFFFFFFFull || (t->shape[i] && numel > UINT64_MAX / t->shape[i])) return TS_ERR_ARG;
        numel *= t->shape[i];
    }
    if (numel >= 0xFFFFFFFFu / dtype_size(t->dtype)) return TS_ERR_ARG;
    t->numel = numel;
    t->nbytes = (size_t)numel * dtype_size(t->dtype);
    return 0;
}

/* The archive torch.save writes: data.pkl, the fixed records with the
 * tensor's storage (data/0, when nbytes or data) before "version". */
static int write_saved(ts_buf *out, const unsigned char *pkl, size_t npkl, const unsigned char *data, size_t nbytes, int has_data)
{
    ts_record rec[6] = { { "data.pkl", pkl, npkl } };
    size_t n = 1;
    for (size_t k = 0; k < 3; k++, n++) {
        snprintf(rec[n].name, TS_MAX_NAME, "%s", fixed_records[k].name);
        rec[n].data = (const unsigned char *)fixed_records[k].value;
        rec[n].size = strlen(fixed_records[k].value);
    }
    if (has_data) rec[n++] = (ts_record){ "data/0", data, nbytes };
    rec[n++] = (ts_record){ "version", (const unsigned char *)fixed_records[3].value, 2 };
    return ts_archive_write(out, "archive", rec, n);
}

int ts_tensor_write(ts_buf *out, const ts_tensor *tensor)
{
    ts_tensor t = *tensor;
    if (check_tensor_arg(&t)) return TS_ERR_ARG;
    ts_buf pkl = { 0 };
    if (buf_reserve(&pkl, pickle_bound(t.ndim))) return TS_ERR_NOMEM;
    put_tensor_pickle(&pkl, &t);
    int rc = write_saved(out, pkl.data, pkl.len, t.data, t.nbytes, 1);
    ts_buf_release(&pkl);
    return rc;
}

int ts_object_write(ts_buf *out, const unsigned char *pkl, size_t n)
{
    return write_saved(out, pkl, n, NULL, 0, 0);
}

/* A cursor over data.pkl for the fields; the exact bytes are checked after. */
typedef struct pk_cur {
    const unsigned char *p, *end;
} pk_cur;

static int cur_int(pk_cur *c, uint64_t *v)
{
    if (c->p >= c->end) return -1;
    unsigned op = *c->p++;
    size_t n = op == 'K' ? 1 : op == 'M' ? 2 : op == 'J' ? 4 : 0;
    if (op == 0x8A) {
        if (c->p >= c->end) return -1;
        n = *c->p++;
        if (n == 0 || n > 9 || (n == 9 && c->p + 9 <= c->end && c->p[8])) return -1;
    }
    if (!n || (size_t)(c->end - c->p) < n) return -1;
    *v = 0;
    for (size_t i = 0; i < n && i < 8; i++) *v |= (uint64_t)c->p[i] << (8 * i);
    if ((op == 'J' || (op == 0x8A && n <= 8)) && (c->p[n - 1] & 0x80)) return -1;   /* negative */
    c->p += n;
    return 0;
}

static int cur_skip_memo(pk_cur *c)
{
    if (c->end - c->p < 2 || *c->p != 'q') return -1;
    c->p += 2;
    return 0;
}

/* A tuple of ints as pk_tuple writes it; *n its length. */
static int cur_tuple(pk_cur *c, uint64_t *v, int *n)
{
    *n = 0;
    if (c->p < c->end && *c->p == ')') { c->p++; return 0; }
    int marked = c->p < c->end && *c->p == '(';
    c->p += marked;
    while (c->p < c->end && *c->p != 't' && !(*c->p >= 0x85 && *c->p <= 0x87)) {
        if (*n == TS_MAX_DIMS || cur_int(c, &v[*n])) return -1;
        (*n)++;
    }
    if (c->p >= c->end) return -1;
    unsigned op = *c->p++;
    if (marked ? op != 't' : op != 0x84u + (unsigned)*n) return -1;
    return cur_skip_memo(c);
}

/* Literals hold NULs (BINUNICODE lengths), hence the length from sizeof. */
#define cur_expect(c, lit) cur_bytes(c, lit, sizeof lit - 1)

static int cur_bytes(pk_cur *c, const char *s, size_t n)
{
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, s, n)) return -1;
    c->p += n;
    return 0;
}

int ts_tensor_parse(const unsigned char *buf, size_t size, const char *name, ts_tensor *t, char *err, size_t errlen)
{
    ts_archive a;
    memset(t, 0, sizeof *t);
    if (ts_archive_parse(buf, size, name, &a, err, errlen)) return TS_ERR_FORMAT;
    const ts_record *pkl = ts_archive_find(&a, "data.pkl"), *data = ts_archive_find(&a, "data/0");
    if (!data) FAIL(TS_ERR_FORMAT, "'%s': no record 'data/0' (not a tensor)", name);
    pk_cur c = { pkl->data, pkl->data + pkl->size };
    if (cur_expect(&c, "\x80\x02" "ctorch._utils\n_rebuild_tensor_v2\n") || cur_skip_memo(&c) ||
        cur_expect(&c, "((X\x07\0\0\0storage") || cur_skip_memo(&c) || cur_expect(&c, "ctorch\n"))
        FAIL(TS_ERR_FORMAT, "'%s': data.pkl is not torch.save's pickle of one tensor (_rebuild_tensor_v2 over a storage)", name);
    const unsigned char *cls = c.p, *nl = memchr(c.p, '\n', (size_t)(c.end - c.p));
    t->dtype = -1;
    for (int d = TS_F32; nl && d <= TS_F16; d++)
        if ((size_t)(nl - cls) == strlen(storage_class(d)) && !memcmp(cls, storage_class(d), (size_t)(nl - cls))) t->dtype = d;
    if (t->dtype < 0)
        FAIL(TS_ERR_FORMAT, "'%s': storage torch.%.*s is not supported (FloatStorage, BFloat16Storage or HalfStorage)", name,
             nl && nl - cls < 64 ? (int)(nl - cls) : 16, (const char *)cls);
    c.p = nl + 1;
    uint64_t numel, offset, stride[TS_MAX_DIMS], want[TS_MAX_DIMS];
    int nstride;
    if (cur_skip_memo(&c) || cur_expect(&c, "X\x01\0\0\0" "0") || cur_skip_memo(&c) || cur_expect(&c, "X\x03\0\0\0" "cpu") ||
        cur_skip_memo(&c) || cur_int(&c, &numel) || cur_expect(&c, "t") || cur_skip_memo(&c) || cur_expect(&c, "Q") ||
        cur_int(&c, &offset))
        FAIL(TS_ERR_FORMAT, "'%s': data.pkl's storage is not ('storage', class, '0', 'cpu', numel)", name);
    if (offset != 0) FAIL(TS_ERR_FORMAT, "'%s': storage offset %llu (a view; torch.save of a view is not read)", name, (unsigned long long)offset);
    if (cur_tuple(&c, t->shape, &t->ndim) || cur_tuple(&c, stride, &nstride))
        FAIL(TS_ERR_FORMAT, "'%s': data.pkl's shape or stride is not a tuple of at most %d ints", name, TS_MAX_DIMS);
    if (nstride != t->ndim) FAIL(TS_ERR_FORMAT, "'%s': %d strides for %d dimensions", name, nstride, t->ndim);
    if (check_tensor_arg(t)) FAIL(TS_ERR_FORMAT, "'%s': shape too large", name);
    contiguous_strides(want, t);
    for (int i = 0; i < t->ndim; i++)
        if (stride[i] != want[i] && t->shape[i] > 1)
            FAIL(TS_ERR_FORMAT, "'%s': stride %llu on axis %d, not contiguous (%llu)", name, (unsigned long long)stride[i], i,
                 (unsigned long long)want[i]);
    if (numel != t->numel) FAIL(TS_ERR_FORMAT, "'%s': storage of %llu elements for a tensor of %llu", name, (unsigned long long)numel,
                                (unsigned long long)t->numel);
    if (data->size != t->nbytes) FAIL(TS_ERR_FORMAT, "'%s': data/0 holds %zu bytes, the tensor %zu", name, data->size, t->nbytes);
    ts_buf b = { 0 };
    if (buf_reserve(&b, pickle_bound(t->ndim))) FAIL(TS_ERR_NOMEM, "'%s': out of memory", name);
    put_tensor_pickle(&b, t);
    int same = b.len == pkl->size && !memcmp(b.data, pkl->data, b.len);
    ts_buf_release(&b);
    if (!same) FAIL(TS_ERR_FORMAT, "'%s': data.pkl is not torch.save's pickle of one tensor (requires_grad, hooks or layout differ)", name);
    t->data = data->data;
    return 0;
}
