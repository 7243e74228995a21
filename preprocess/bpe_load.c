/*
 * bpe_load.c - bpe_load() and bpe_free(): turns an encoder.json-style vocab
 * and a vocab.bpe-style merges file into the read-only tables that bpe.c
 * encodes with (their layout is in bpe_internal.h):
 *   - token bytes by id (one blob plus offsets), for decoding;
 *   - an open-addressing hash from token bytes to id, used for the
 *     whole-piece shortcut and bpe_token_id();
 *   - an open-addressing hash from a pair of ids to its rank, one 8-byte word
 *     per pair, plus the merged id by rank and a direct table of the ranks of
 *     all 65536 byte pairs (the first round of every piece);
 *   - a bitmap of the byte pairs that occur inside some token.
 * Also here: encoder.py's byte <-> unicode alphabet, in which both files are
 * written.
 *
 * It parses only what these two files need (a flat JSON object of string
 * keys and integer values; whitespace-separated pairs), not general JSON, and
 * it does not encode beyond asking bpe.c which tokens encode to themselves.
 * Errors are codes plus a one-line message in the caller's buffer; it never
 * prints.
 */
#include "bpe.h"
#include "bpe_internal.h"
#include "utf8.h"
#include "readfile.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* load-time pair table slot */
struct pair_slot {
    uint64_t key;    /* left << ID_BITS | right, PAIR_EMPTY when empty */
    uint32_t rank;
    uint32_t merged; /* id of the concatenation, ID_NONE if it is no token */
};

static atomic_uint_fast64_t bpe_serial_next = 1;

/* ------------------------------------------------------------------------- */
/* byte <-> unicode alphabet                                                  */

static int byte_printable(unsigned v)
{
    return (v >= 33 && v <= 126) || (v >= 161 && v <= 172) || (v >= 174 && v <= 255);
}

/* The k-th non-printable byte maps to 256 + k: the 68 of them are 0-32,
 * 127-160 and 173 (the complement of byte_printable), in that order. */
uint32_t bpe_byte_to_unicode(uint8_t byte)
{
    unsigned v = byte;
    if (byte_printable(v))
        return v;
    return 256 + (v <= 32 ? v : v <= 160 ? 33 + (v - 127) : 67);
}

int bpe_unicode_to_byte(uint32_t cp)
{
    if (cp < 256)
        return byte_printable(cp) ? (int)cp : -1;
    if (cp >= 256 + 68)
        return -1;
    unsigned k = cp - 256;
    return (int)(k < 33 ? k : k < 67 ? 127 + (k - 33) : 173);
}

/* ------------------------------------------------------------------------- */
/* loading                                                                    */

struct load_ctx {
    char *errbuf;
    size_t errlen;
};

static int set_error(struct load_ctx *x, int code, const char *fmt, ...)
{
    if (x->errbuf && x->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(x->errbuf, x->errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

#define RETURN_ERROR_IF(cond, code, ...) do { \
        if (cond) \
            return set_error(x, (code), __VA_ARGS__); \
    } while (0)
#define ERROR_GOTO_IF(cond, code, ...) do { \
        if (cond) { \
            rc = set_error(x, (code), __VA_ARGS__); \
            goto cleanup; \
        } \
    } while (0)
#define FORWARD_IF_ERROR(expr) do { \
        int e_ = (expr); \
        if (e_ < 0) \
            return e_; \
    } while (0)

static int read_file(struct load_ctx *x, const char *path, unsigned char **out, size_t *outlen)
{
    switch (read_whole_file(path, out, outlen)) {
    case READFILE_OPEN: return set_error(x, BPE_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    case READFILE_NOMEM: return set_error(x, BPE_ERR_NOMEM, "out of memory reading '%s'", path);
    case READFILE_READ: return set_error(x, BPE_ERR_IO, "cannot read '%s'", path);
    }
    return BPE_OK;
}

static void line_col(const unsigned char *buf, const unsigned char *pos, size_t *line, size_t *col)
{
    size_t l = 1;
    const unsigned char *ls = buf;
    for (const unsigned char *q = buf; q < pos; q++)
        if (*q == '\n') {
            l++;
            ls = q + 1;
        }
    *line = l;
    *col = (size_t)(pos - ls) + 1;
}

/* Renders raw token bytes as their alphabet text (UTF-8), truncated, for messages. */
static const char *show_token(char *dst, size_t cap, const unsigned char *p, size_t n)
{
    size_t w = 0;
    for (size_t i = 0; i < n && w + 5 < cap; i++) {
        uint32_t cp = bpe_byte_to_unicode(p[i]);
        if (cp < 0x80) {
            dst[w++] = (char)cp;
        } else {
            dst[w++] = (char)(0xC0 | cp >> 6);
            dst[w++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    dst[w] = 0;
    return dst;
}

/* one parsed "token": id entry of the vocab file */
struct vocab_entry {
    uint32_t off, len; /* into the parse blob */
    uint32_t id;
    uint32_t line;
};

struct vocab_parse {
    const char *path;
    const unsigned char *buf, *p, *end;
    unsigned char *blob;
    size_t blob_len, blob_cap;
    struct vocab_entry *ents;
    size_t n, cap;
    size_t line; /* line of p: raw newlines only occur between tokens */
};

#define VOCAB_FAIL(vp, at, ...) do { \
        size_t line_, col_; \
        char why_[160]; \
        line_col((vp)->buf, (at), &line_, &col_); \
        snprintf(why_, sizeof why_, __VA_ARGS__); \
        return set_error(x, BPE_ERR_VOCAB, "invalid vocab '%s': line %zu, column %zu: %s", \
                         (vp)->path, line_, col_, why_); \
    } while (0)

static void json_ws(struct vocab_parse *vp)
{
    while (vp->p < vp->end && (*vp->p == ' ' || *vp->p == '\t' || *vp->p == '\n' || *vp->p == '\r'))
        vp->line += *vp->p++ == '\n';
}

static int hex4(const unsigned char *p, const unsigned char *end, uint32_t *v)
{
    if (end - p < 4)
        return 0;
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = p[i];
        unsigned d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 :
                     c >= 'A' && c <= 'F' ? c - 'A' + 10 : 16;
        if (d == 16)
            return 0;
        r = r << 4 | d;
    }
    *v = r;
    return 1;
}

/* Parses a JSON string at vp->p (on the opening quote) and appends the raw
 * bytes its characters stand for in the alphabet to the blob. */
static int json_token(struct load_ctx *x, struct vocab_parse *vp)
{
    const unsigned char *start = vp->p;
    vp->p++;
    for (;;) {
        const unsigned char *at = vp->p;
        if (at >= vp->end)
            VOCAB_FAIL(vp, start, "unterminated string");
        uint32_t cp;
        unsigned c = *at;
        if (c == '"') {
            vp->p++;
            return BPE_OK;
        }
        if (c == '\\') {
            if (at + 1 >= vp->end)
                VOCAB_FAIL(vp, at, "unterminated string");
            unsigned e = at[1];
            vp->p += 2;
            switch (e) {
            case '"': cp = '"'; break;
            case '\\': cp = '\\'; break;
            case '/': cp = '/'; break;
            case 'b': cp = '\b'; break;
            case 'f': cp = '\f'; break;
            case 'n': cp = '\n'; break;
            case 'r': cp = '\r'; break;
            case 't': cp = '\t'; break;
            case 'u':
                if (!hex4(vp->p, vp->end, &cp))
                    VOCAB_FAIL(vp, at, "bad \\u escape");
                vp->p += 4;
                if (cp >= 0xD800 && cp <= 0xDBFF && vp->end - vp->p >= 6 && vp->p[0] == '\\' &&
                    vp->p[1] == 'u') {
                    uint32_t lo;
                    if (hex4(vp->p + 2, vp->end, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        vp->p += 6;
                    }
                }
                break;
            default:
                VOCAB_FAIL(vp, at, "bad escape '\\%c'", (int)e);
            }
        } else if (c < 0x20) {
            VOCAB_FAIL(vp, at, "control character in string");
        } else {
            size_t len = utf8_decode(at, vp->end, &cp);
            if (!len)
                VOCAB_FAIL(vp, at, "invalid UTF-8");
            vp->p += len;
        }
        int byte = bpe_unicode_to_byte(cp);
        if (byte < 0)
            VOCAB_FAIL(vp, at, "character U+%04X is outside the byte alphabet", (unsigned)cp);
        if (vp->blob_len == vp->blob_cap) {
            size_t nc = vp->blob_cap ? vp->blob_cap * 2 : 1 << 16;
            unsigned char *nb = nc < UINT32_MAX ? realloc(vp->blob, nc) : NULL;
            RETURN_ERROR_IF(!nb, BPE_ERR_NOMEM, "out of memory loading '%s'", vp->path);
            vp->blob = nb;
            vp->blob_cap = nc;
        }
        vp->blob[vp->blob_len++] = (unsigned char)byte;
    }
}

static int parse_vocab(struct load_ctx *x, struct vocab_parse *vp)
{
    json_ws(vp);
    if (vp->p >= vp->end || *vp->p != '{')
        VOCAB_FAIL(vp, vp->p, "expected '{'");
    vp->p++;
    json_ws(vp);
    if (vp->p < vp->end && *vp->p == '}') {
        vp->p++;
    } else {
        for (;;) {
            if (vp->p >= vp->end || *vp->p != '"')
                VOCAB_FAIL(vp, vp->p, "expected a string key");
            const unsigned char *key_at = vp->p;
            size_t key_line = vp->line, off = vp->blob_len;
            FORWARD_IF_ERROR(json_token(x, vp));
            size_t len = vp->blob_len - off;
            if (len == 0)
                VOCAB_FAIL(vp, key_at, "empty token");
            json_ws(vp);
            if (vp->p >= vp->end || *vp->p != ':')
                VOCAB_FAIL(vp, vp->p, "expected ':'");
            vp->p++;
            json_ws(vp);
            const unsigned char *num_at = vp->p;
            uint64_t id = 0;
            size_t digits = 0;
            while (vp->p < vp->end && *vp->p >= '0' && *vp->p <= '9') {
                id = id * 10 + (*vp->p - '0');
                if (id >= VOCAB_MAX)
                    VOCAB_FAIL(vp, num_at, "id too large");
                vp->p++;
                digits++;
            }
            if (digits == 0 || (digits > 1 && *num_at == '0') ||
                (vp->p < vp->end && (*vp->p == '.' || *vp->p == 'e' || *vp->p == 'E')))
                VOCAB_FAIL(vp, num_at, "id must be a non-negative integer");
            if (vp->n == vp->cap) {
                size_t nc = vp->cap ? vp->cap * 2 : 1 << 16;
                struct vocab_entry *ne = nc < VOCAB_MAX ? realloc(vp->ents, nc * sizeof *ne) : NULL;
                RETURN_ERROR_IF(!ne, BPE_ERR_NOMEM, "out of memory loading '%s'", vp->path);
                vp->ents = ne;
                vp->cap = nc;
            }
            vp->ents[vp->n++] = (struct vocab_entry){ (uint32_t)off, (uint32_t)len, (uint32_t)id, (uint32_t)key_line };
            json_ws(vp);
            if (vp->p < vp->end && *vp->p == ',') {
                vp->p++;
                json_ws(vp);
                continue;
            }
            if (vp->p < vp->end && *vp->p == '}') {
                vp->p++;
                break;
            }
            VOCAB_FAIL(vp, vp->p, "expected ',' or '}'");
        }
    }
    json_ws(vp);
    if (vp->p != vp->end)
        VOCAB_FAIL(vp, vp->p, "trailing data after the object");
    return BPE_OK;
}

static size_t table_size(size_t entries)
{
    size_t size = 16;
    while (size < 2 * entries)
        size *= 2;
    return size;
}

static unsigned table_shift(size_t size)
{
    unsigned bits = 0;
    while (((size_t)1 << bits) < size)
        bits++;
    return 64 - bits;
}

/* index of the slot holding the token p[0..n), or of the empty slot where it would go */
static size_t vocab_slot_index(const bpe *b, const unsigned char *p, size_t n)
{
    uint64_t k8 = key8(p, n);
    return vocab_index(b, p, n, hash_piece(p, n, k8), k8);
}

/* an empty table for entries tokens into b->vt; @return 0 or -1 (out of memory) */
static int vocab_table_new(bpe *b, size_t entries)
{
    size_t size = table_size(entries);
    b->vt = malloc(size * sizeof *b->vt);
    if (!b->vt)
        return -1;
    memset(b->vt, 0xFF, size * sizeof *b->vt); /* val ID_NONE: empty */
    b->vt_mask = size - 1;
    b->vt_shift = table_shift(size);
    return 0;
}

static uint32_t vocab_id(const bpe *b, const unsigned char *p, size_t n)
{
    if (n == 0 || n > b->max_len)
        return ID_NONE;
    const struct vocab_slot *s = &b->vt[vocab_slot_index(b, p, n)];
    return s->val != ID_NONE ? s->val & ID_MASK : ID_NONE;
}

/* Orders the parsed tokens by id into b's blob and builds the bytes -> id table. */
static int build_vocab(struct load_ctx *x, bpe *b, const struct vocab_parse *vp)
{
    int rc = BPE_OK;
    size_t n = vp->n;
    uint32_t *by_id = NULL;
    char show[128];
    ERROR_GOTO_IF(n == 0, BPE_ERR_VOCAB, "invalid vocab '%s': no tokens", vp->path);
    by_id = malloc(n * sizeof *by_id);
    b->tok_off = malloc((n + 1) * sizeof *b->tok_off);
    b->blob = malloc(vp->blob_len);
    ERROR_GOTO_IF(!by_id || !b->tok_off || !b->blob || vocab_table_new(b, n) != 0, BPE_ERR_NOMEM,
                  "out of memory loading '%s'", vp->path);
    memset(by_id, 0xFF, n * sizeof *by_id);
    for (size_t i = 0; i < n; i++) {
        const struct vocab_entry *e = &vp->ents[i];
        ERROR_GOTO_IF(e->id >= n, BPE_ERR_VOCAB,
                      "invalid vocab '%s': line %u: id %u out of range (ids must be 0..%zu)",
                      vp->path, e->line, e->id, n - 1);
        ERROR_GOTO_IF(by_id[e->id] != ID_NONE, BPE_ERR_VOCAB,
                      "invalid vocab '%s': line %u: duplicate id %u (also line %u)",
                      vp->path, e->line, e->id, vp->ents[by_id[e->id]].line);
        by_id[e->id] = (uint32_t)i;
    }
    b->n = n;
    uint32_t off = 0;
    for (size_t id = 0; id < n; id++) {
        const struct vocab_entry *e = &vp->ents[by_id[id]];
        b->tok_off[id] = off;
        memcpy(b->blob + off, vp->blob + e->off, e->len);
        off += e->len;
        if (e->len > b->max_len)
            b->max_len = e->len;
    }
    b->tok_off[n] = off;
    for (size_t id = 0; id < n; id++) {
        const unsigned char *p = b->blob + b->tok_off[id];
        size_t len = b->tok_off[id + 1] - b->tok_off[id];
        struct vocab_slot *s = &b->vt[vocab_slot_index(b, p, len)];
        ERROR_GOTO_IF(s->val != ID_NONE, BPE_ERR_VOCAB,
                      "invalid vocab '%s': line %u: duplicate token '%s' (also line %u)", vp->path,
                      vp->ents[by_id[id]].line, show_token(show, sizeof show, p, len),
                      vp->ents[by_id[s->val]].line);
        s->tag = (uint32_t)hash_piece(p, len, key8(p, len));
        s->val = (uint32_t)id;
        for (size_t i = 0; i + 1 < len; i++) {
            unsigned k = (unsigned)p[i] << 8 | p[i + 1];
            b->pair_in_token[k >> 6] |= (uint64_t)1 << (k & 63);
        }
    }
    for (unsigned v = 0; v < 256; v++) {
        unsigned char c = (unsigned char)v;
        b->byte_id[v] = vocab_id(b, &c, 1);
        ERROR_GOTO_IF(b->byte_id[v] == ID_NONE, BPE_ERR_VOCAB,
                      "invalid vocab '%s': no token for byte 0x%02X ('%s')", vp->path, v,
                      show_token(show, sizeof show, &c, 1));
    }
cleanup:
    free(by_id);
    return rc;
}

static int load_vocab(struct load_ctx *x, bpe *b, const char *path)
{
    struct vocab_parse vp;
    memset(&vp, 0, sizeof vp);
    unsigned char *buf;
    size_t len;
    FORWARD_IF_ERROR(read_file(x, path, &buf, &len));
    vp.path = path;
    vp.buf = vp.p = buf;
    vp.end = buf + len;
    vp.line = 1;
    int rc = parse_vocab(x, &vp);
    if (rc == BPE_OK)
        rc = build_vocab(x, b, &vp);
    free(buf);
    free(vp.blob);
    free(vp.ents);
    return rc;
}

/* Python's str.isspace(), which str.split() splits on */
static int py_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

struct merge {
    uint32_t left, right, merged; /* merged: ID_NONE if the concatenation is no token */
    uint32_t rank;
};

/*
 * Splits one merges line like Python's line.split() and, if it is a pair of
 * alphabet strings that are both tokens, returns 1 with the ids in *m.
 * Other lines can never match a pair of symbols.
 */
static int merge_line(const bpe *b, const unsigned char *p, const unsigned char *end, unsigned char *work,
                      struct merge *m)
{
    /* work: (2 * max_len) bytes; part 0 at work, part 1 at work + max_len */
    size_t cap = b->max_len, plen[2] = { 0, 0 }, fields = 0;
    int in_field = 0, ok = 1;
    while (p < end) {
        uint32_t cp = 0;
        size_t len = utf8_decode(p, end, &cp); /* the file was validated */
        p += len;
        if (py_space(cp)) {
            in_field = 0;
            continue;
        }
        if (!in_field) {
            in_field = 1;
            fields++;
        }
        if (fields > 2)
            return 0;
        int byte = bpe_unicode_to_byte(cp);
        if (byte < 0 || plen[fields - 1] >= cap) {
            ok = 0; /* not an alphabet string, or longer than any token */
            continue;
        }
        work[(fields - 1) * cap + plen[fields - 1]++] = (unsigned char)byte;
    }
    if (fields != 2 || !ok)
        return 0;
    m->left = vocab_id(b, work, plen[0]);
    m->right = vocab_id(b, work + cap, plen[1]);
    if (m->left == ID_NONE || m->right == ID_NONE)
        return 0;
    m->merged = ID_NONE;
    if (plen[0] + plen[1] <= cap) {
        memmove(work + plen[0], work + cap, plen[1]);
        m->merged = vocab_id(b, work, plen[0] + plen[1]);
    }
    return 1;
}

static struct pair_slot *pair_slot_for(struct pair_slot *t, size_t mask, unsigned shift, uint64_t key)
{
    size_t i = (size_t)(hash_pair(key) >> shift);
    while (t[i].key != key && t[i].key != PAIR_EMPTY)
        i = (i + 1) & mask;
    return &t[i];
}

/*
 * Reads the merges, keeps the pairs whose parts are tokens (last rank wins),
 * then finds the merges that can ever apply: starting from the single bytes,
 * a merge applies once both parts can be produced, and produces its result.
 * Only those go into b's pair table.  An applicable merge whose result is no
 * token is an error.  Finally checks trained order (bpe.h).
 */
static int load_merges(struct load_ctx *x, bpe *b, const char *path)
{
    int rc = BPE_OK;
    unsigned char *buf = NULL;
    size_t len = 0;
    struct pair_slot *tmp = NULL;
    struct merge *ms = NULL;
    uint32_t *ustart = NULL, *uses = NULL, *queue = NULL;
    unsigned char *prod = NULL, *fired = NULL, *work = NULL;
    int64_t *maxcreate = NULL;
    size_t nm = 0;
    char show[2][128];

    FORWARD_IF_ERROR(read_file(x, path, &buf, &len));
    const unsigned char *end = buf + len;
    size_t lines = 0;
    for (const unsigned char *p = buf; p < end;) {
        uint32_t cp;
        size_t l = utf8_decode(p, end, &cp);
        if (!l) {
            size_t line, col;
            line_col(buf, p, &line, &col);
            ERROR_GOTO_IF(1, BPE_ERR_MERGES, "invalid merges file '%s': line %zu, column %zu: invalid UTF-8",
                          path, line, col);
        }
        lines += cp == '\n' || cp == '\r';
        p += l;
    }
    ERROR_GOTO_IF(lines >= RANK_MAX, BPE_ERR_MERGES, "invalid merges file '%s': more than %u lines",
                  path, RANK_MAX - 1);
    size_t tsize = table_size(lines);
    unsigned tshift = table_shift(tsize);
    tmp = malloc(tsize * sizeof *tmp);
    work = malloc(2 * b->max_len);
    ERROR_GOTO_IF(!tmp || !work, BPE_ERR_NOMEM, "out of memory loading '%s'", path);
    for (size_t i = 0; i < tsize; i++)
        tmp[i].key = PAIR_EMPTY;

    /* split('\n')[1:-1] after universal-newline translation; rank = index - 1 */
    size_t index = 0;
    for (const unsigned char *p = buf; p < end; index++) {
        const unsigned char *q = p;
        while (q < end && *q != '\n' && *q != '\r')
            q++;
        if (q == end)
            break; /* the last element: dropped */
        const unsigned char *next = q + 1 + (*q == '\r' && q + 1 < end && q[1] == '\n');
        struct merge m;
        if (index >= 1 && merge_line(b, p, q, work, &m)) {
            uint64_t key = (uint64_t)m.left << ID_BITS | m.right;
            struct pair_slot *s = pair_slot_for(tmp, tsize - 1, tshift, key);
            if (s->key == PAIR_EMPTY)
                nm++;
            s->key = key;
            s->rank = (uint32_t)(index - 1);
            s->merged = m.merged;
        }
        p = next;
    }

    ms = malloc((nm ? nm : 1) * sizeof *ms);
    ustart = calloc(b->n + 1, sizeof *ustart);
    uses = malloc((2 * nm + 1) * sizeof *uses);
    queue = malloc(b->n * sizeof *queue);
    prod = calloc(b->n, 1);
    fired = calloc(nm + 1, 1);
    maxcreate = malloc(b->n * sizeof *maxcreate);
    ERROR_GOTO_IF(!ms || !ustart || !uses || !queue || !prod || !fired || !maxcreate, BPE_ERR_NOMEM,
                  "out of memory loading '%s'", path);
    nm = 0;
    for (size_t i = 0; i < tsize; i++) {
        if (tmp[i].key == PAIR_EMPTY)
            continue;
        ms[nm++] = (struct merge){ (uint32_t)(tmp[i].key >> ID_BITS), (uint32_t)(tmp[i].key & VOCAB_MAX),
                                   tmp[i].merged, tmp[i].rank };
    }
    /* uses of each token as a part, in CSR form */
    for (size_t i = 0; i < nm; i++) {
        ustart[ms[i].left + 1]++;
        if (ms[i].right != ms[i].left)
            ustart[ms[i].right + 1]++;
    }
    for (size_t id = 0; id < b->n; id++)
        ustart[id + 1] += ustart[id];
    {
        uint32_t *fill = queue; /* the queue is not in use yet: fill cursors */
        for (size_t id = 0; id < b->n; id++)
            fill[id] = ustart[id];
        for (size_t i = 0; i < nm; i++) {
            uses[fill[ms[i].left]++] = (uint32_t)i;
            if (ms[i].right != ms[i].left)
                uses[fill[ms[i].right]++] = (uint32_t)i;
        }
    }
    size_t qh = 0, qt = 0;
    for (unsigned v = 0; v < 256; v++) {
        prod[b->byte_id[v]] = 1;
        queue[qt++] = b->byte_id[v];
    }
    while (qh < qt) {
        uint32_t t = queue[qh++];
        for (uint32_t u = ustart[t]; u < ustart[t + 1]; u++) {
            struct merge *m = &ms[uses[u]];
            if (fired[uses[u]] || !prod[m->left] || !prod[m->right])
                continue;
            fired[uses[u]] = 1;
            ERROR_GOTO_IF(m->merged == ID_NONE, BPE_ERR_MERGES,
                          "invalid merges file '%s': line %zu: merge '%s %s' makes a token that is not in the vocab",
                          path, (size_t)m->rank + 2,
                          show_token(show[0], sizeof show[0], b->blob + b->tok_off[m->left],
                                     b->tok_off[m->left + 1] - b->tok_off[m->left]),
                          show_token(show[1], sizeof show[1], b->blob + b->tok_off[m->right],
                                     b->tok_off[m->right + 1] - b->tok_off[m->right]));
            if (!prod[m->merged]) {
                prod[m->merged] = 1;
                queue[qt++] = m->merged;
            }
        }
    }

    size_t nf = 0;
    for (size_t id = 0; id < b->n; id++)
        maxcreate[id] = -1;
    for (size_t i = 0; i < nm; i++) {
        if (!fired[i])
            continue;
        nf++;
        if ((int64_t)ms[i].rank > maxcreate[ms[i].merged])
            maxcreate[ms[i].merged] = ms[i].rank;
    }
    b->flags |= BPE_FLAG_TRAINED_ORDER;
    for (size_t i = 0; i < nm; i++) {
        if (fired[i] && (maxcreate[ms[i].left] >= (int64_t)ms[i].rank ||
                         maxcreate[ms[i].right] >= (int64_t)ms[i].rank))
            b->flags &= ~BPE_FLAG_TRAINED_ORDER;
    }

    size_t psize = table_size(nf);
    b->pt = malloc(psize * sizeof *b->pt);
    b->merged_id = calloc(lines ? lines : 1, sizeof *b->merged_id);
    ERROR_GOTO_IF(!b->pt || !b->merged_id, BPE_ERR_NOMEM, "out of memory loading '%s'", path);
    b->pt_mask = psize - 1;
    b->pt_shift = table_shift(psize);
    for (size_t i = 0; i < psize; i++)
        b->pt[i] = PAIR_EMPTY;
    for (size_t i = 0; i < nm; i++) {
        if (!fired[i])
            continue;
        uint64_t key = (uint64_t)ms[i].left << ID_BITS | ms[i].right;
        size_t j = (size_t)(hash_pair(key) >> b->pt_shift);
        while (b->pt[j] != PAIR_EMPTY)
            j = (j + 1) & b->pt_mask;
        b->pt[j] = key << RANK_BITS | ms[i].rank;
        b->merged_id[ms[i].rank] = ms[i].merged;
    }
    for (unsigned v = 0; v < 256 * 256; v++)
        b->byte_rank[v] = pair_rank(b, b->byte_id[v >> 8], b->byte_id[v & 255]);
cleanup:
    free(buf);
    free(tmp);
    free(work);
    free(ms);
    free(ustart);
    free(uses);
    free(queue);
    free(prod);
    free(fired);
    free(maxcreate);
    return rc;
}

/*
 * Marks the tokens whose own bytes BPE-encode to exactly themselves.
 * BPE_METHOD_SPLIT is what bpe_encode_piece runs behind the whole-piece
 * shortcut that this flag enables, so the flag never changes a result.
 */
static int mark_self_encoding(struct load_ctx *x, bpe *b, const char *path)
{
    uint32_t *tmp = malloc(b->max_len * sizeof *tmp);
    RETURN_ERROR_IF(!tmp, BPE_ERR_NOMEM, "out of memory loading '%s'", path);
    for (size_t id = 0; id < b->n; id++) {
        const unsigned char *p = b->blob + b->tok_off[id];
        size_t len = b->tok_off[id + 1] - b->tok_off[id];
        if (len == 0 || len > b->max_len)
            continue; /* a hole, or an unreachable token (bpe_build) */
        size_t m = bpe_encode_piece_with(b, BPE_METHOD_SPLIT, p, len, tmp);
        if (m == 1 && tmp[0] == id)
            b->vt[vocab_slot_index(b, p, len)].val |= SELF_FLAG | WHOLE_FLAG;
    }
    free(tmp);
    return BPE_OK;
}

/*
 * bpe_build(): the tables from token bytes by id and merges by rank, for
 * vocabularies read elsewhere (tokenizer.json).  Ids without bytes are holes;
 * unreachable tokens are kept for decoding only.  A merge whose parts are not
 * both reachable can never apply and is skipped (its rank stays used).
 */
int bpe_build(bpe **out, const bpe_spec *sp, char *errbuf, size_t errlen)
{
    struct load_ctx ctx = { errbuf, errlen }, *x = &ctx;
    if (errbuf && errlen)
        errbuf[0] = 0;
    RETURN_ERROR_IF(!out || !sp || !sp->bytes || !sp->len || (sp->nmerges && !sp->merges), BPE_ERR_ARG,
                    "bpe_build: missing argument");
    *out = NULL;
    RETURN_ERROR_IF(sp->n == 0 || sp->n >= VOCAB_MAX, BPE_ERR_VOCAB, "vocabulary of %zu ids (must be 1..%u)",
                    sp->n, VOCAB_MAX - 1);
    RETURN_ERROR_IF(sp->nmerges >= RANK_MAX, BPE_ERR_MERGES, "%zu merges (at most %u)", sp->nmerges, RANK_MAX - 1);
    int rc = BPE_OK;
    char show[128];
    bpe *b = calloc(1, sizeof *b);
    RETURN_ERROR_IF(!b, BPE_ERR_NOMEM, "out of memory building the BPE tables");
    b->hf = (sp->flags & BPE_BUILD_HF) != 0;
    size_t n = sp->n, total = 0, nreach = 0;
    for (size_t id = 0; id < n; id++) {
        total += sp->bytes[id] ? sp->len[id] : 0;
        nreach += sp->bytes[id] && sp->len[id] && (!sp->reachable || sp->reachable[id]);
    }
    ERROR_GOTO_IF(total >= UINT32_MAX, BPE_ERR_VOCAB, "vocabulary too large (%zu bytes of tokens)", total);
    b->n = n;
    b->tok_off = malloc((n + 1) * sizeof *b->tok_off);
    b->blob = malloc(total ? total : 1);
    ERROR_GOTO_IF(!b->tok_off || !b->blob || vocab_table_new(b, nreach) != 0, BPE_ERR_NOMEM,
                  "out of memory building the BPE tables");
    uint32_t off = 0;
    for (size_t id = 0; id < n; id++) {
        b->tok_off[id] = off;
        if (sp->bytes[id] && sp->len[id]) {
            memcpy(b->blob + off, sp->bytes[id], sp->len[id]);
            off += sp->len[id];
            if (sp->len[id] > b->max_len && (!sp->reachable || sp->reachable[id]))
                b->max_len = sp->len[id];
        }
    }
    b->tok_off[n] = off;
    for (size_t id = 0; id < n; id++) {
        size_t len = b->tok_off[id + 1] - b->tok_off[id];
        if (!len || (sp->reachable && !sp->reachable[id]))
            continue;
        const unsigned char *p = b->blob + b->tok_off[id];
        struct vocab_slot *s = &b->vt[vocab_slot_index(b, p, len)];
        ERROR_GOTO_IF(s->val != ID_NONE, BPE_ERR_VOCAB, "token '%s' has two ids, %u and %zu",
                      show_token(show, sizeof show, p, len), s->val & ID_MASK, id);
        s->tag = (uint32_t)hash_piece(p, len, key8(p, len));
        s->val = (uint32_t)id | ((sp->flags & BPE_BUILD_IGNORE_MERGES) ? WHOLE_FLAG : 0);
        for (size_t i = 0; i + 1 < len; i++) {
            unsigned k = (unsigned)p[i] << 8 | p[i + 1];
            b->pair_in_token[k >> 6] |= (uint64_t)1 << (k & 63);
        }
    }
    for (unsigned v = 0; v < 256; v++) {
        unsigned char c = (unsigned char)v;
        b->byte_id[v] = vocab_id(b, &c, 1);
        ERROR_GOTO_IF(b->byte_id[v] == ID_NONE, BPE_ERR_VOCAB, "no token for byte 0x%02X ('%s')", v,
                      show_token(show, sizeof show, &c, 1));
    }
    size_t psize = table_size(sp->nmerges);
    b->pt = malloc(psize * sizeof *b->pt);
    b->merged_id = calloc(sp->nmerges ? sp->nmerges : 1, sizeof *b->merged_id);
    ERROR_GOTO_IF(!b->pt || !b->merged_id, BPE_ERR_NOMEM, "out of memory building the BPE tables");
    b->pt_mask = psize - 1;
    b->pt_shift = table_shift(psize);
    for (size_t i = 0; i < psize; i++)
        b->pt[i] = PAIR_EMPTY;
    for (size_t r = 0; r < sp->nmerges; r++) {
        uint32_t l = sp->merges[r][0], rt = sp->merges[r][1], m = sp->merges[r][2];
        ERROR_GOTO_IF(l >= n || rt >= n || m >= n, BPE_ERR_MERGES, "merge %zu names an id outside the vocabulary", r);
        if (b->tok_off[l + 1] == b->tok_off[l] || b->tok_off[rt + 1] == b->tok_off[rt] ||
            (sp->reachable && (!sp->reachable[l] || !sp->reachable[rt])))
            continue;
        ERROR_GOTO_IF(b->tok_off[m + 1] == b->tok_off[m] || (sp->reachable && !sp->reachable[m]), BPE_ERR_MERGES,
                      "merge %zu makes id %u, which is not a token", r, m);
        uint64_t key = (uint64_t)l << ID_BITS | rt;
        size_t j = (size_t)(hash_pair(key) >> b->pt_shift);
        while (b->pt[j] != PAIR_EMPTY && b->pt[j] >> RANK_BITS != key)
            j = (j + 1) & b->pt_mask;
        b->pt[j] = key << RANK_BITS | r; /* a pair listed twice keeps its last rank */
        b->merged_id[r] = m;
    }
    for (unsigned v = 0; v < 256 * 256; v++)
        b->byte_rank[v] = pair_rank(b, b->byte_id[v >> 8], b->byte_id[v & 255]);
    /* BPE_FLAG_TRAINED_ORDER stays clear: nothing here checks it, and with
       BPE_BUILD_HF the merge loops are the definition anyway (bpe.h) */
    rc = mark_self_encoding(x, b, "the vocabulary");
cleanup:
    if (rc != BPE_OK) {
        bpe_free(b);
        return rc;
    }
    b->serial = atomic_fetch_add(&bpe_serial_next, 1);
    *out = b;
    return BPE_OK;
}

int bpe_load(bpe **out, const char *vocab_path, const char *merges_path, char *errbuf, size_t errlen)
{
    struct load_ctx ctx = { errbuf, errlen }, *x = &ctx;
    if (errbuf && errlen)
        errbuf[0] = 0;
    RETURN_ERROR_IF(!out || !vocab_path || !merges_path, BPE_ERR_ARG, "bpe_load: missing argument");
    *out = NULL;
    bpe *b = calloc(1, sizeof *b);
    RETURN_ERROR_IF(!b, BPE_ERR_NOMEM, "out of memory loading '%s'", vocab_path);
    int rc = load_vocab(x, b, vocab_path);
    if (rc == BPE_OK)
        rc = load_merges(x, b, merges_path);
    if (rc == BPE_OK)
        rc = mark_self_encoding(x, b, vocab_path);
    if (rc != BPE_OK) {
        bpe_free(b);
        return rc;
    }
    b->serial = atomic_fetch_add(&bpe_serial_next, 1);
    *out = b;
    return BPE_OK;
}

void bpe_free(bpe *b)
{
    if (!b)
        return;
    free(b->blob);
    free(b->tok_off);
    free(b->vt);
    free(b->pt);
    free(b->merged_id);
    free(b);
}
