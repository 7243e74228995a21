/*
 * sp.c - SentencePiece models (.model files) encoded exactly as the
 * sentencepiece library's EncodeAsIds does: sentencepiece 0.2.3, the version
 * of the PyPI package the goldens were made with (its C++ sources:
 * normalizer.cc, bpe_model.cc, unigram_model.cc, model_interface.cc and
 * sentencepiece_processor.cc; earlier releases differ in unigram arithmetic
 * and in which pieces BPE may merge into).
 *
 *   reading    a small protobuf reader for ModelProto (sentencepiece_model.proto):
 *              the pieces (string, score, type), the trainer spec fields that
 *              encoding reads, the normalizer spec; every length is checked,
 *              unknown fields are skipped, groups and unknown piece types refused
 *              (libprotobuf-c would add a dependency and a generated file for
 *              the dozen fields used here);
 *   normalize  the precompiled character map (a darts-clone double array of
 *              rules, longest match wins), user-defined symbols verbatim,
 *              remove_extra_whitespaces, add_dummy_prefix, escape_whitespaces
 *              (' ' -> U+2581), treat_whitespace_as_suffix;
 *   BPE        characters (user-defined symbols frozen) merged by a heap of
 *              adjacent pairs whose concatenation is a normal, user-defined or
 *              unused piece: highest score first, leftmost among equal scores;
 *              UNUSED pieces resegmented the way they were proposed last;
 *   unigram    the optimized Viterbi of unigram_model.cc in float arithmetic,
 *              with its score reset past +-100000, so ties and near-ties
 *              resolve alike; the pieces in a double array;
 *   speed      the text is cut where no piece can span into words whose
 *              ids are cached per state, one cache line a word (unigram:
 *              with the bound on the running score under which the cached
 *              path is the float one), and written out from there; normalize
 *              copies plain ASCII eight bytes at a time and caches per
 *              character what its general step does;
 *   ids        byte fallback (<0xNN> pieces for each byte of an unknown piece),
 *              or runs of unknown pieces merged into one <unk>.
 *
 * Not done: WORD and CHAR models (refused), sampling, n-best, the
 * denormalizer (decoding for display only uses the pieces), encoding
 * extra options.  It never prints; errors name the file and the cause.
 */
#include "tokenizer_internal.h"
#include "hugealloc.h"
#include "readfile.h"
#include "utf8.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* darts-clone's double array units (the precompiled charsmap) */
#define DA_LEAF(u) (((u) >> 8) & 1)
#define DA_VALUE(u) ((u) & ((1u << 31) - 1))
#define DA_LABEL(u) ((u) & ((1u << 31) | 0xFF))
#define DA_OFFSET(u) (((u) >> 10) << (((u) & (1u << 9)) >> 6))

enum { PT_NORMAL = 1, PT_UNKNOWN = 2, PT_CONTROL = 3, PT_USER = 4, PT_UNUSED = 5, PT_BYTE = 6 };
enum { MODEL_UNIGRAM = 1, MODEL_BPE = 2, MODEL_WORD = 3, MODEL_CHAR = 4 };

struct piece {
    uint32_t off, len;   /* into the model blob */
    float score;
    uint8_t type;
};

/* open-addressing map from bytes to piece id */
struct strmap {
    uint32_t *slot;      /* id + 1, 0 empty */
    size_t mask;
};

/* byte trie: node -> (byte -> child) through one hash table */
struct trie {
    uint64_t *key;       /* node << 8 | byte, UINT64_MAX empty */
    uint32_t *child;
    size_t mask;
    int32_t *id;         /* (nodes) piece id ending here, -1 */
    size_t nodes;
};

struct sp_model {
    char *file;
    char desc[256];
    unsigned char *blob;     /* piece strings, then the charsmap */
    struct piece *p;
    size_t n;
    int model_type;
    int byte_fallback, ws_suffix;
    int add_dummy_prefix, remove_extra_ws, escape_ws;
    char *unk_piece, *bos_piece, *eos_piece, *pad_piece, *unk_surface;
    /* charsmap */
    const uint32_t *da;      /* double array units (little-endian in the file; copied) */
    uint32_t *da_buf;
    size_t da_size;
    const char *norm_pool;
    size_t norm_pool_len;
    /* tables */
    struct strmap pieces;    /* NORMAL, USER_DEFINED, UNUSED */
    struct strmap reserved;  /* CONTROL, UNKNOWN, BYTE */
    struct trie user;        /* user-defined symbols (the prefix matcher) */
    struct pairs {           /* BPE: (id a, id b) -> the piece a + b when it is mergeable */
        uint64_t *key;       /* a << 32 | b, UINT64_MAX empty */
        uint32_t *val;
        size_t mask;
    } pairs;
    int32_t byte1[256];      /* BPE: the id of each one-byte string, -1 */
    struct lat {             /* unigram: pieces_ as a trie for the lattice, a double array: the child
                                of node x on byte c is y = a[x].base + c when a[y].check == x */
        struct dnode { uint32_t base, check; } *a;   /* (size) base | LAT_PIECE: a piece ends here */
        struct dpiece { int32_t id; float score; } *p;   /* (size) that piece */
        size_t size;
        double maxabs;       /* the largest |score| of a piece or of the unknown piece */
    } all;
    float *lscore;           /* unigram: (n) each piece's score in the lattice, the unknown piece's
                                min_score - 10 (the candidate's, as unigram_span gives it) */
    int id16;                /* the word cache holds ids as u16 (fewer than 65535 pieces) */
    int has_user, has_unused;
    int64_t unk_id;          /* the model's: the UNKNOWN piece, or -1 */
    int64_t proc_unk, bos, eos, pad;   /* the processor's unk_id(), bos_id(), ... */
    uint32_t byte_id[256];
    float min_score;
    /* the word split (sp_encode) */
    int words;               /* 1: encode word by word through the cache */
    uint8_t pre_ws[256];     /* 1: some piece holds this byte, then (a prefix of) the whitespace mark */
    uint8_t post_ws[256];    /* 1: some piece holds (a suffix of) the whitespace mark, then this byte */
    uint64_t pair[256][4];   /* bit (a, b): some piece holds the bytes a, b one after the other */
    uint8_t plain[256];      /* normalize's fast path: PLAIN_* flags of a byte no user-defined symbol
                                starts with; 0: the general step */
    uint32_t plain_next[128];   /* PLAIN_IF_ASCII_NEXT: the charsmap node after the byte */
    uint64_t run_sub, run_add;  /* normalize's runs eight bytes at a time (word_tables): lo and
                                   0x7F - hi in each byte, [lo, hi] bytes that stand for themselves */
    uint64_t run_ex[2];         /* but these two, in each byte (0x80: none) */
    int ws_cuts;             /* 1: no piece holds a byte before the whitespace mark: each mark starts a word */
    /* decode */
    unsigned char **dec;
    uint32_t *declen;
};

#define NC_BITS 12              /* normalize's character cache: 2^NC_BITS slots */
#define NC_GENERAL 0xFF         /* a character for the general step */
#define NO_NODE UINT32_MAX      /* (charsmap_extends) */

/* A word cache entry, one cache line: the word and its pieces' ids, so
 * that a word seen before costs one line (of its bucket's two).  The rest of a piece comes from
 * the model: its length (an unknown piece is one character of the word) and
 * its lattice score (sp_model.lscore). */
#define WE_DATA 52
struct wentry {
    uint32_t h;              /* the word's hash */
    uint8_t klen, n;         /* word bytes (0: empty), pieces */
    uint8_t unk;             /* 1: some piece is unknown (emitted through st->res) */
    uint8_t pad_;
    float plim;              /* unigram: the path is the float one while |P| < plim */
    unsigned char data[WE_DATA];   /* the word, then from (klen + 3) & ~3 the ids: u16 when
                                      sp_model.id16, else u32; the largest value for -1 */
};

struct sp_state {
    unsigned char *norm;
    size_t ncap;
    struct nchar {           /* (2^NC_BITS) a character: its bytes (0: empty), its normalization
                                when no longer rule matches, the charsmap node after it (NO_NODE) */
        uint32_t key, next;
        uint8_t rl;
        unsigned char r[7];
    } *nchar;
    /* BPE */
    struct sym { int prev, next; uint32_t off, len; int32_t id; uint8_t freeze; } *sym;   /* id: of the string, -1 none */
    size_t symcap;
    struct agenda { float score; int left, right; uint32_t size; int32_t id; } *heap;
    size_t heapcap;
    struct rev { uint32_t stamp, loff, llen, roff, rlen; } *rev;   /* (n) last proposal per unused piece */
    uint32_t stamp;
    /* unigram */
    struct best { int id; float score; int start; } *best;
    size_t bestcap;
    /* results: (off, len, id) */
    struct res { uint32_t off, len; int32_t id; } *res;
    size_t rescap;
    /* the word cache (see wc_find) */
    int norm_valid;          /* the normalized text is valid UTF-8 */
    struct wentry *wc;       /* (WC_BUCKETS * WC_WAYS) */
    struct wpiece { int32_t id; uint16_t off, len; float score; } *wtmp;   /* a word's path, offsets in the word */
    struct cut { uint32_t end, h; } *cuts;   /* a word's end and hash (word_end) */
    struct cut *marks;       /* (nmarks) the words normalize ended at its marks (ws_cuts) */
    size_t markcap, nmarks;
    int long_word;           /* some word between marks is too long for a cache entry */
    size_t cutcap;
    size_t wtmpcap;
    struct dbest { double best, second; float score; int id, start; } *dbest;
    size_t dbestcap;
};

/* ------------------------------------------------------------------------ */
/* hashing                                                                    */

static uint64_t hash_bytes(const unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        h = (h ^ v) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    h ^= h >> 32;
    h *= 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29);
}

static int map_init(struct strmap *m, size_t n)
{
    size_t c = 16;
    while (c < 2 * n + 16) c *= 2;
    m->slot = calloc(c, sizeof *m->slot);
    m->mask = c - 1;
    return m->slot ? 0 : -1;
}

static int64_t map_get(const sp_model *M, const struct strmap *m, const unsigned char *s, size_t n)
{
    size_t i = (size_t)hash_bytes(s, n) & m->mask;
    for (;;) {
        uint32_t v = m->slot[i];
        if (!v) return -1;
        const struct piece *p = &M->p[v - 1];
        if (p->len == n && memcmp(M->blob + p->off, s, n) == 0) return v - 1;
        i = (i + 1) & m->mask;
    }
}

/* returns 0, or 1 when the string is already there */
static int map_put(const sp_model *M, struct strmap *m, uint32_t id)
{
    const struct piece *p = &M->p[id];
    size_t i = (size_t)hash_bytes(M->blob + p->off, p->len) & m->mask;
    for (;;) {
        uint32_t v = m->slot[i];
        if (!v) {
            m->slot[i] = id + 1;
            return 0;
        }
        const struct piece *q = &M->p[v - 1];
        if (q->len == p->len && memcmp(M->blob + q->off, M->blob + p->off, p->len) == 0) return 1;
        i = (i + 1) & m->mask;
    }
}

static inline size_t trie_slot(const struct trie *t, uint64_t k)
{
    uint64_t h = k * 0x9E3779B97F4A7C15ull;
    return (size_t)(h ^ (h >> 31)) & t->mask;
}

static inline uint32_t trie_next(const struct trie *t, uint32_t node, unsigned char c)
{
    uint64_t k = (uint64_t)node << 8 | c;
    size_t i = trie_slot(t, k);
    for (;;) {
        if (t->key[i] == k) return t->child[i];
        if (t->key[i] == UINT64_MAX) return UINT32_MAX;
        i = (i + 1) & t->mask;
    }
}

static void trie_free(struct trie *t)
{
    free(t->key);
    free(t->child);
    free(t->id);
    memset(t, 0, sizeof *t);
}

/* A trie of the pieces for which want(type) holds. */
static int trie_build(const sp_model *M, struct trie *t, int (*want)(int type))
{
    size_t total = 1;
    for (size_t i = 0; i < M->n; i++) if (want(M->p[i].type)) total += M->p[i].len;
    size_t c = 16;
    while (c < 2 * total) c *= 2;
    t->key = malloc(c * sizeof *t->key);
    t->child = malloc(c * sizeof *t->child);
    t->id = malloc(total * sizeof *t->id);
    if (!t->key || !t->child || !t->id) return -1;
    t->mask = c - 1;
    memset(t->key, 0xFF, c * sizeof *t->key);
    t->nodes = 1;
    t->id[0] = -1;
    for (size_t i = 0; i < M->n; i++) {
        if (!want(M->p[i].type)) continue;
        const unsigned char *s = M->blob + M->p[i].off;
        uint32_t node = 0;
        for (size_t j = 0; j < M->p[i].len; j++) {
            uint32_t nx = trie_next(t, node, s[j]);
            if (nx == UINT32_MAX) {
                uint64_t k = (uint64_t)node << 8 | s[j];
                size_t slot = trie_slot(t, k);
                while (t->key[slot] != UINT64_MAX) slot = (slot + 1) & t->mask;
                t->key[slot] = k;
                t->child[slot] = (uint32_t)t->nodes;
                t->id[t->nodes] = -1;
                nx = (uint32_t)t->nodes++;
            }
            node = nx;
        }
        if (t->id[node] < 0) t->id[node] = (int32_t)i;
    }
    return 0;
}

static int want_user(int type) { return type == PT_USER; }
static int want_pieces(int type) { return type == PT_NORMAL || type == PT_USER || type == PT_UNUSED; }

/* ------------------------------------------------------------------------ */
/* protobuf                                                                   */

struct pb { const unsigned char *p, *end; };

static int pb_varint(struct pb *b, uint64_t *v)
{
    uint64_t r = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (b->p >= b->end) return -1;
        unsigned c = *b->p++;
        r |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80)) {
            *v = r;
            return 0;
        }
    }
    return -1;
}

/* Reads a field key; *wt gets the wire type.  -1 on malformed input. */
static int pb_key(struct pb *b, uint32_t *field, int *wt)
{
    uint64_t k;
    if (pb_varint(b, &k) || (k >> 3) == 0 || (k >> 3) > 0x1FFFFFFF) return -1;
    *field = (uint32_t)(k >> 3);
    *wt = (int)(k & 7);
    return 0;
}

static int pb_len(struct pb *b, struct pb *sub)
{
    uint64_t l;
    if (pb_varint(b, &l) || l > (uint64_t)(b->end - b->p)) return -1;
    sub->p = b->p;
    sub->end = b->p + l;
    b->p += l;
    return 0;
}

static int pb_skip(struct pb *b, int wt)
{
    uint64_t v;
    struct pb sub;
    switch (wt) {
    case 0: return pb_varint(b, &v);
    case 1: if (b->end - b->p < 8) return -1; b->p += 8; return 0;
    case 2: return pb_len(b, &sub);
    case 5: if (b->end - b->p < 4) return -1; b->p += 4; return 0;
    default: return -1;   /* groups (3, 4) and reserved types */
    }
}

struct rd {
    const char *file;
    char *err;
    size_t errlen;
};

static int bad(struct rd *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(struct rd *r, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return tok_fail(r->err, r->errlen, TOK_ERR_FORMAT, "invalid SentencePiece model '%s': %s", r->file, why);
}

static char *dupn(const unsigned char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

static int set_str(char **dst, const struct pb *v)
{
    char *p = dupn(v->p, (size_t)(v->end - v->p));
    if (!p) return -1;
    free(*dst);
    *dst = p;
    return 0;
}

static int read_trainer(struct rd *r, sp_model *M, struct pb b)
{
    while (b.p < b.end) {
        uint32_t f;
        int wt;
        uint64_t v;
        struct pb s;
        if (pb_key(&b, &f, &wt)) return bad(r, "truncated trainer spec");
        if ((f == 3 || f == 24 || f == 35) && wt == 0) {
            if (pb_varint(&b, &v)) return bad(r, "truncated trainer spec");
            if (f == 3) M->model_type = (int)v;
            else if (f == 24) M->ws_suffix = v != 0;
            else M->byte_fallback = v != 0;
        } else if (f >= 44 && f <= 48 && wt == 2) {
            if (pb_len(&b, &s)) return bad(r, "truncated trainer spec");
            char **dst = f == 44 ? &M->unk_surface : f == 45 ? &M->unk_piece : f == 46 ? &M->bos_piece :
                         f == 47 ? &M->eos_piece : &M->pad_piece;
            if (set_str(dst, &s)) return tok_fail(r->err, r->errlen, TOK_ERR_NOMEM, "out of memory");
        } else if (pb_skip(&b, wt)) {
            return bad(r, "malformed field %u of the trainer spec", f);
        }
    }
    return 0;
}

static int read_normalizer(struct rd *r, sp_model *M, struct pb b, struct pb *charsmap)
{
    while (b.p < b.end) {
        uint32_t f;
        int wt;
        uint64_t v;
        if (pb_key(&b, &f, &wt)) return bad(r, "truncated normalizer spec");
        if (f == 2 && wt == 2) {
            if (pb_len(&b, charsmap)) return bad(r, "truncated normalizer spec");
        } else if (f >= 3 && f <= 5 && wt == 0) {
            if (pb_varint(&b, &v)) return bad(r, "truncated normalizer spec");
            if (f == 3) M->add_dummy_prefix = v != 0;
            else if (f == 4) M->remove_extra_ws = v != 0;
            else M->escape_ws = v != 0;
        } else if (pb_skip(&b, wt)) {
            return bad(r, "malformed field %u of the normalizer spec", f);
        }
    }
    return 0;
}

static int read_piece(struct rd *r, sp_model *M, struct pb b, size_t index, size_t *boff)
{
    struct piece *p = &M->p[index];
    p->type = PT_NORMAL;
    p->score = 0;
    int have = 0;
    while (b.p < b.end) {
        uint32_t f;
        int wt;
        uint64_t v;
        struct pb s;
        if (pb_key(&b, &f, &wt)) return bad(r, "truncated piece %zu", index);
        if (f == 1 && wt == 2) {
            if (pb_len(&b, &s)) return bad(r, "truncated piece %zu", index);
            size_t l = (size_t)(s.end - s.p);
            memcpy(M->blob + *boff, s.p, l);
            p->off = (uint32_t)*boff;
            p->len = (uint32_t)l;
            *boff += l;
            have = 1;
        } else if (f == 2 && wt == 5) {
            if (b.end - b.p < 4) return bad(r, "truncated piece %zu", index);
            uint32_t u = (uint32_t)b.p[0] | (uint32_t)b.p[1] << 8 | (uint32_t)b.p[2] << 16 | (uint32_t)b.p[3] << 24;
            memcpy(&p->score, &u, 4);
            b.p += 4;
        } else if (f == 3 && wt == 0) {
            if (pb_varint(&b, &v)) return bad(r, "truncated piece %zu", index);
            if (v < 1 || v > 6) return bad(r, "piece %zu has an unknown type %llu", index, (unsigned long long)v);
            p->type = (uint8_t)v;
        } else if (pb_skip(&b, wt)) {
            return bad(r, "malformed field %u in piece %zu", f, index);
        }
    }
    if (!have || p->len == 0) return bad(r, "piece %zu is empty", index);
    return 0;
}

static int piece_to_byte(const unsigned char *s, size_t n)
{
    /* "<0xNN>", upper-case hex, as ByteToPiece writes it */
    static const char hex[] = "0123456789ABCDEF";
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    const char *a = memchr(hex, s[3], 16), *b = memchr(hex, s[4], 16);
    if (!a || !b || !s[3] || !s[4]) return -1;
    return (int)((a - hex) * 16 + (b - hex));
}

static int load(struct rd *r, sp_model *M, const unsigned char *buf, size_t len)
{
    struct pb b = { buf, buf + len }, charsmap = { NULL, NULL };
    /* pass 1: count pieces and their bytes */
    size_t np = 0, bytes = 0;
    while (b.p < b.end) {
        uint32_t f;
        int wt;
        struct pb s;
        if (pb_key(&b, &f, &wt)) return bad(r, "not a ModelProto (bad field key at byte %zu)", (size_t)(b.p - buf));
        if (f == 1 && wt == 2) {
            if (pb_len(&b, &s)) return bad(r, "truncated piece %zu", np);
            np++;
            bytes += (size_t)(s.end - s.p);
        } else if (pb_skip(&b, wt)) {
            return bad(r, "malformed field %u at byte %zu", f, (size_t)(b.p - buf));
        }
    }
    if (np == 0) return bad(r, "no pieces");
    if (np >= INT32_MAX) return bad(r, "too many pieces");
    M->n = np;
    M->p = calloc(np, sizeof *M->p);
    M->blob = malloc(bytes + 1);
    if (!M->p || !M->blob) return tok_fail(r->err, r->errlen, TOK_ERR_NOMEM, "out of memory loading '%s'", r->file);
    /* pass 2 */
    M->model_type = MODEL_UNIGRAM;
    M->add_dummy_prefix = M->remove_extra_ws = M->escape_ws = 1;
    size_t k = 0, boff = 0;
    b.p = buf;
    int rc;
    while (b.p < b.end) {
        uint32_t f;
        int wt;
        struct pb s;
        pb_key(&b, &f, &wt);
        if (wt == 2 && (f == 1 || f == 2 || f == 3)) {
            pb_len(&b, &s);
            if (f == 1) rc = read_piece(r, M, s, k++, &boff);
            else if (f == 2) rc = read_trainer(r, M, s);
            else rc = read_normalizer(r, M, s, &charsmap);
            if (rc) return rc;
        } else {
            pb_skip(&b, wt);
        }
    }
    if (M->model_type == MODEL_WORD || M->model_type == MODEL_CHAR)
        return tok_fail(r->err, r->errlen, TOK_ERR_UNSUPPORTED, "'%s': the SentencePiece model type %s is not supported by mds (BPE and unigram are)",
                        r->file, M->model_type == MODEL_WORD ? "WORD" : "CHAR");
    if (M->model_type != MODEL_BPE && M->model_type != MODEL_UNIGRAM)
        return bad(r, "unknown model type %d", M->model_type);
    /* the charsmap: <u32 trie bytes><double array><NUL-terminated strings>,
       checked as Normalizer::Init and DecodePrecompiledCharsMap check it */
    if (charsmap.p && charsmap.end > charsmap.p) {
        size_t cl = (size_t)(charsmap.end - charsmap.p);
        if (cl <= 4) return bad(r, "the precompiled charsmap is broken");
        uint32_t ts = (uint32_t)charsmap.p[0] | (uint32_t)charsmap.p[1] << 8 | (uint32_t)charsmap.p[2] << 16 |
                      (uint32_t)charsmap.p[3] << 24;
        if (ts >= cl - 4) return bad(r, "the precompiled charsmap's trie size %u exceeds the blob", ts);
        if (ts < 1024 || (ts & 0x3FF) != 0) return bad(r, "the precompiled charsmap's trie size %u is not a multiple of 1024", ts);
        M->da_size = ts / 4;
        M->da_buf = malloc(ts);
        if (!M->da_buf) return tok_fail(r->err, r->errlen, TOK_ERR_NOMEM, "out of memory loading '%s'", r->file);
        for (size_t i = 0; i < M->da_size; i++) {
            const unsigned char *q = charsmap.p + 4 + 4 * i;
            M->da_buf[i] = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
        }
        M->da = M->da_buf;
        M->norm_pool_len = cl - 4 - ts;
        if (charsmap.p[cl - 1] != 0) return bad(r, "the precompiled charsmap's strings are not NUL-terminated");
        char *pool = malloc(M->norm_pool_len);
        if (!pool) return tok_fail(r->err, r->errlen, TOK_ERR_NOMEM, "out of memory loading '%s'", r->file);
        memcpy(pool, charsmap.p + 4 + ts, M->norm_pool_len);
        M->norm_pool = pool;
        /* darts-clone's DoubleArray::validate(max value = the strings' size) */
        const uint32_t *a = M->da;
        if (DA_LABEL(a[0]) != 0 || DA_LEAF(a[0]) || DA_OFFSET(a[0]) == 0 || ((0 ^ DA_OFFSET(a[0])) | 0xFF) >= M->da_size)
            return bad(r, "the precompiled charsmap is invalid");
        for (size_t i = 1; i < M->da_size; i++) {
            if (DA_LABEL(a[i]) <= 0xFF) {
                if (((i ^ DA_OFFSET(a[i])) | 0xFF) >= M->da_size) return bad(r, "the precompiled charsmap is invalid");
                if (DA_LEAF(a[i]) && DA_LABEL(a[i ^ DA_OFFSET(a[i])]) <= 0xFF) return bad(r, "the precompiled charsmap is invalid");
            } else if (DA_VALUE(a[i]) >= M->norm_pool_len) {
                return bad(r, "the precompiled charsmap is invalid");
            }
        }
    }
    /* sentencepiece_processor.cc's workaround: a raw "\0" piece is UNUSED with byte fallback */
    if (M->byte_fallback)
        for (size_t i = 0; i < M->n; i++)
            if (M->p[i].len == 1 && M->blob[M->p[i].off] == 0) M->p[i].type = PT_UNUSED;
    return 0;
}

#define LAT_PIECE 0x80000000u

/* The child of *node on byte c, which becomes *node: -1 when there is none,
 * else 1 when a piece ends there (in t->p[*node]).  The walk reads only the
 * 8-byte units, the pieces only where they end. */
static inline int lat_next(const struct lat *t, uint32_t *node, unsigned char c)
{
    uint32_t y = (t->a[*node].base & ~LAT_PIECE) + c;   /* (in range: size is past every base + 255) */
    if (t->a[y].check != *node) return -1;
    *node = y;
    return (int)(t->a[y].base >> 31);
}

static inline size_t htrie_slot(size_t mask, uint32_t k)
{
    uint64_t h = (uint64_t)k * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & mask;
}

#define DA_FREE UINT32_MAX

/* The double array while it is built: nf[i] leads to the first free slot
 * from i on (i itself when free; path halving on the way). */
struct dabuild {
    struct lat *t;
    uint32_t *nf;
    size_t cap;
};

static size_t da_free_from(struct dabuild *d, size_t i)
{
    while (d->nf[i] != i) {
        d->nf[i] = d->nf[d->nf[i]];
        i = d->nf[i];
    }
    return i;
}

static int da_grow(struct dabuild *d, size_t need)
{
    if (need < d->cap) return 0;
    size_t c = d->cap ? d->cap : 1024;
    while (c <= need) c *= 2;
    struct dnode *q = realloc(d->t->a, c * sizeof *q);
    if (q) d->t->a = q;
    struct dpiece *pc = realloc(d->t->p, c * sizeof *pc);
    if (pc) d->t->p = pc;
    uint32_t *f = realloc(d->nf, c * sizeof *f);
    if (f) d->nf = f;
    if (!q || !pc || !f) return -1;
    for (size_t i = d->cap; i < c; i++) {
        q[i] = (struct dnode){ 0, DA_FREE };
        pc[i] = (struct dpiece){ -1, 0.0f };
        f[i] = (uint32_t)i;
    }
    d->cap = c;
    return 0;
}

/* Places the children of node x (labels lab[0, n)) at the first base that
 * puts lab[0] on a free slot and every other label too.  Returns the base,
 * or -1 out of memory. */
static int64_t da_place(struct dabuild *d, uint32_t x, const unsigned char *lab, size_t n)
{
    for (size_t p = da_free_from(d, lab[0]);; p = da_free_from(d, p + 1)) {
        size_t b = p - lab[0], k = 1;
        if (da_grow(d, b + 257)) return -1;
        while (k < n && d->t->a[b + lab[k]].check == DA_FREE) k++;
        if (k < n) continue;
        for (k = 0; k < n; k++) {
            d->t->a[b + lab[k]].check = x;
            d->nf[b + lab[k]] = (uint32_t)(b + lab[k] + 1);
        }
        d->t->a[x].base |= (uint32_t)b;   /* (keeping LAT_PIECE) */
        if (b + 256 > d->t->size) d->t->size = b + 256;
        return (int64_t)b;
    }
}

/* The unigram lattice's trie: NORMAL and USER_DEFINED pieces with the score
 * the Viterbi gives them (UNUSED pieces are nodes without an id).  Built as
 * a hash trie, whose edges are then grouped by node and laid out breadth
 * first as a double array (one probe per byte on the hot path). */
static int lat_build(struct rd *r, sp_model *M)
{
    struct hedge { uint32_t key, child; } *e = NULL;   /* key node << 8 | byte */
    int32_t *nid = NULL;
    float *nscore = NULL;
    uint32_t *first = NULL, *kid = NULL, *pos = NULL, *queue = NULL;
    unsigned char *lab = NULL;
    struct dabuild d = { &M->all, NULL, 0 };
    int rc = 0;
    size_t total = 1;
    for (size_t i = 0; i < M->n; i++) if (want_pieces(M->p[i].type)) total += M->p[i].len;
    if (total >= (1u << 24) - 1) return bad(r, "the pieces are too long together (%zu bytes)", total);
    size_t c = 16, nodes = 1;
    while (c < 2 * total) c *= 2;
    e = malloc(c * sizeof *e);
    nid = malloc(total * sizeof *nid);
    nscore = calloc(total, sizeof *nscore);
    M->lscore = calloc(M->n, sizeof *M->lscore);
    if (!e || !nid || !nscore || !M->lscore) goto nomem;
    if (M->unk_id >= 0) M->lscore[M->unk_id] = M->min_score - 10.0f;
    memset(e, 0xFF, c * sizeof *e);
    nid[0] = -1;
    M->all.maxabs = fabs(M->min_score - 10.0f);   /* unigram_span's unk_score */
    for (size_t i = 0; i < M->n; i++) {
        if (!want_pieces(M->p[i].type)) continue;
        const unsigned char *s = M->blob + M->p[i].off;
        uint32_t node = 0;
        for (size_t j = 0; j < M->p[i].len; j++) {
            uint32_t k = node << 8 | s[j];
            size_t slot = htrie_slot(c - 1, k);
            while (e[slot].key != UINT32_MAX && e[slot].key != k) slot = (slot + 1) & (c - 1);
            if (e[slot].key == UINT32_MAX) {
                e[slot] = (struct hedge){ k, (uint32_t)nodes };
                nid[nodes++] = -1;
            }
            node = e[slot].child;
        }
        if (nid[node] < 0 && M->p[i].type != PT_UNUSED) {
            nid[node] = (int32_t)i;
            /* float throughout; a user-defined piece scores 0.1 * (bytes - 1) */
            nscore[node] = M->p[i].type == PT_USER ? (float)(0.1 * (double)((int)M->p[i].len - 1)) : M->p[i].score;
            if (fabs(nscore[node]) > M->all.maxabs) M->all.maxabs = fabs(nscore[node]);
            M->lscore[i] = nscore[node];
        }
    }
    /* the edges grouped by node (a counting sort) */
    first = calloc(nodes + 1, sizeof *first);
    kid = malloc(nodes * sizeof *kid);
    lab = malloc(nodes);
    pos = malloc(nodes * sizeof *pos);
    queue = malloc(nodes * sizeof *queue);
    if (!first || !kid || !lab || !pos || !queue) goto nomem;
    for (size_t i = 0; i < c; i++)
        if (e[i].key != UINT32_MAX) first[(e[i].key >> 8) + 1]++;
    for (size_t i = 0; i < nodes; i++) first[i + 1] += first[i];
    memcpy(pos, first, nodes * sizeof *pos);   /* (as fill cursors) */
    for (size_t i = 0; i < c; i++)
        if (e[i].key != UINT32_MAX) {
            uint32_t at = pos[e[i].key >> 8]++;
            kid[at] = e[i].child;
            lab[at] = (unsigned char)e[i].key;
        }
    /* breadth first from the root, at slot 0 */
    size_t head = 0, tail = 1;
    if (da_grow(&d, 257)) goto nomem;
    d.t->a[0].check = DA_FREE - 1;   /* the root */
    d.nf[0] = 1;
    d.t->size = 256;
    pos[0] = 0;
    queue[0] = 0;
    while (head < tail) {
        uint32_t u = queue[head++], x = pos[u], f = first[u], nk = first[u + 1] - f;
        if (!nk) continue;
        int64_t b = da_place(&d, x, lab + f, nk);
        if (b < 0) goto nomem;
        for (uint32_t k = 0; k < nk; k++) {
            uint32_t y = (uint32_t)b + lab[f + k], v = kid[f + k];
            d.t->p[y] = (struct dpiece){ nid[v], nscore[v] };
            if (nid[v] >= 0) d.t->a[y].base = LAT_PIECE;
            pos[v] = y;
            queue[tail++] = v;
        }
    }
    goto done;
nomem:
    rc = tok_fail(r->err, r->errlen, TOK_ERR_NOMEM, "out of memory loading '%s'", r->file);
done:
    free(d.nf);
    free(e);
    free(nid);
    free(nscore);
    free(first);
    free(kid);
    free(lab);
    free(pos);
    free(queue);
    return rc;
}

/* InitializePieces and the processor's ids. */
static inline size_t pair_slot(const struct pairs *t, uint64_t k)
{
    k *= 0x9E3779B97F4A7C15ull;
    return (size_t)(k ^ (k >> 29)) & t->mask;
}

/* The mergeable piece a + b, or -1. */
static inline int64_t pair_get(const struct pairs *t, uint32_t a, uint32_t b)
{
    uint64_t k = (uint64_t)a << 32 | b;
    for (size_t i = pair_slot(t, k);; i = (i + 1) & t->mask) {
        if (t->key[i] == k) return t->val[i];
        if (t->key[i] == UINT64_MAX) return -1;
    }
}

/* BPE: every way of writing a mergeable piece as two strings that are
 * pieces, so that merging looks up ids instead of hashing strings. */
static int pairs_build(struct rd *r, sp_model *M)
{
    struct pairs *t = &M->pairs;
    for (int c = 0; c < 256; c++) {
        unsigned char b = (unsigned char)c;
        M->byte1[c] = (int32_t)map_get(M, &M->pieces, &b, 1);
    }
    size_t n = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass) {
            size_t c = 16;
            while (c < 2 * n + 16) c *= 2;
            t->key = malloc(c * sizeof *t->key);
            t->val = malloc(c * sizeof *t->val);
            if (!t->key || !t->val) return tok_fail(r->err, r->errlen, TOK_ERR_NOMEM, "out of memory loading '%s'", r->file);
            memset(t->key, 0xFF, c * sizeof *t->key);
            t->mask = c - 1;
        }
        for (size_t i = 0; i < M->n; i++) {
            const struct piece *p = &M->p[i];
            if ((int64_t)i == M->unk_id || !want_pieces(p->type)) continue;
            const unsigned char *str = M->blob + p->off;
            for (uint32_t k = 1; k < p->len; k++) {
                int64_t a = map_get(M, &M->pieces, str, k), b = a < 0 ? -1 : map_get(M, &M->pieces, str + k, p->len - k);
                if (b < 0) continue;
                if (!pass) {
                    n++;
                    continue;
                }
                uint64_t key = (uint64_t)a << 32 | (uint64_t)b;
                size_t j = pair_slot(t, key);
                while (t->key[j] != UINT64_MAX && t->key[j] != key) j = (j + 1) & t->mask;
                t->key[j] = key;   /* (a string splits one way into a and b: one piece per key) */
                t->val[j] = (uint32_t)i;
            }
        }
    }
    return 0;
}

static int init_pieces(struct rd *r, sp_model *M)
{
    int rc;
    /* ModelInterface::InitializePieces: BPE keeps every piece in one map
       (use_reserved_id_map false); unigram puts CONTROL, UNKNOWN and BYTE
       pieces apart */
    int split = M->model_type == MODEL_UNIGRAM;
    size_t nres = 0;
    for (size_t i = 0; i < M->n; i++) nres += split && !want_pieces(M->p[i].type);
    if (map_init(&M->pieces, M->n) || map_init(&M->reserved, nres))
        return tok_fail(r->err, r->errlen, TOK_ERR_NOMEM, "out of memory loading '%s'", r->file);
    int found[256] = {0};
    M->unk_id = -1;
    for (size_t i = 0; i < M->n; i++) {
        const struct piece *p = &M->p[i];
        const unsigned char *str = M->blob + p->off;
        if (p->len >= 8000) return bad(r, "piece %zu is too long (%u bytes)", i, p->len);
        if (p->len == 1 && str[0] == 0 && p->type == PT_UNUSED) continue;
        if (memchr(str, 0, p->len)) return bad(r, "piece %zu holds a NUL byte", i);
        if (map_put(M, split && !want_pieces(p->type) ? &M->reserved : &M->pieces, (uint32_t)i))
            return bad(r, "piece %zu (\"%.*s\") is already defined", i, (int)(p->len > 40 ? 40 : p->len), str);
        if (p->type == PT_USER) M->has_user = 1;
        if (p->type == PT_UNUSED) M->has_unused = 1;
        if (p->type == PT_UNKNOWN) {
            if (M->unk_id >= 0) return bad(r, "two unknown pieces (%lld and %zu)", (long long)M->unk_id, i);
            M->unk_id = (int64_t)i;
        }
        if (p->type == PT_BYTE) {
            if (!M->byte_fallback) return bad(r, "byte piece %zu found although byte_fallback is false", i);
            int v = piece_to_byte(str, p->len);
            if (v < 0) return bad(r, "byte piece %zu (\"%.*s\") is invalid", i, (int)(p->len > 20 ? 20 : p->len), str);
            found[v] = 1;
        }
    }
    if (M->unk_id < 0 && !M->byte_fallback) return bad(r, "no unknown piece");
    if (M->byte_fallback)
        for (int v = 0; v < 256; v++)
            if (!found[v]) return bad(r, "byte_fallback is set but there is no piece for byte 0x%02X", v);
    /* scores: unigram refuses NaN and infinity; BPE compares them, and a NaN
       has no order (mds refuses it there too) */
    M->min_score = FLT_MAX;
    for (size_t i = 0; i < M->n; i++) {
        float sc = M->p[i].score;
        if (sc != sc || (split && (sc > FLT_MAX || sc < -FLT_MAX)))
            return bad(r, "piece %zu has a score that is NaN%s", i, split ? " or infinite" : "");
        if (M->p[i].type == PT_NORMAL && sc < M->min_score) M->min_score = sc;
    }
    if (M->has_user && trie_build(M, &M->user, want_user))
        return tok_fail(r->err, r->errlen, TOK_ERR_NOMEM, "out of memory loading '%s'", r->file);
    if (split && (rc = lat_build(r, M))) return rc;
    if (!split && (rc = pairs_build(r, M))) return rc;
    return 0;
}

/* The model's PieceToId: reserved pieces (unigram), then the others, else
 * the model's unk id. */
static int64_t piece_to_id(const sp_model *M, const unsigned char *s, size_t n)
{
    int64_t id = map_get(M, &M->reserved, s, n);
    if (id >= 0) return id;
    id = map_get(M, &M->pieces, s, n);
    return id >= 0 ? id : M->unk_id;
}

/* SentencePieceProcessor::Load's cached ids: the piece's id if it has the type. */
static int64_t special_id(const sp_model *M, const char *piece, int type)
{
    int64_t id = piece_to_id(M, (const unsigned char *)piece, strlen(piece));
    return id >= 0 && M->p[id].type == type ? id : -1;
}

static void byte_ids(sp_model *M)
{
    for (int v = 0; v < 256; v++) {
        char b[8];
        snprintf(b, sizeof b, "<0x%02X>", v);
        int64_t id = piece_to_id(M, (const unsigned char *)b, 6);
        M->byte_id[v] = (uint32_t)id;
    }
}

static void word_tables(sp_model *M, int whole_text);

static int build_decode(sp_model *M)
{
    M->dec = calloc(M->n, sizeof *M->dec);
    M->declen = calloc(M->n, sizeof *M->declen);
    if (!M->dec || !M->declen) return -1;
    for (size_t i = 0; i < M->n; i++) {
        const struct piece *p = &M->p[i];
        const unsigned char *s = M->blob + p->off;
        unsigned char *d = malloc(p->len + 4 + (M->unk_surface ? strlen(M->unk_surface) : 8));
        if (!d) return -1;
        size_t w = 0;
        if (p->type == PT_CONTROL) {
            /* nothing */
        } else if (p->type == PT_UNKNOWN) {
            const char *u = M->unk_surface ? M->unk_surface : " \xE2\x81\x87 ";
            memcpy(d, u, strlen(u));
            w = strlen(u);
        } else if (p->type == PT_BYTE) {
            d[w++] = (unsigned char)piece_to_byte(s, p->len);
        } else {
            for (size_t j = 0; j < p->len;) {
                if (j + 3 <= p->len && s[j] == 0xE2 && s[j + 1] == 0x96 && s[j + 2] == 0x81) {
                    d[w++] = ' ';
                    j += 3;
                } else {
                    d[w++] = s[j++];
                }
            }
        }
        M->dec[i] = d;
        M->declen[i] = (uint32_t)w;
    }
    return 0;
}

int sp_open(sp_model **out, const char *path, int whole_text, char *err, size_t errlen)
{
    *out = NULL;
    if (err && errlen) err[0] = 0;
    struct rd r = { path, err, errlen };
    unsigned char *buf;
    size_t len;
    switch (read_whole_file(path, &buf, &len)) {
    case READFILE_OPEN: return tok_fail(err, errlen, TOK_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    case READFILE_NOMEM: return tok_fail(err, errlen, TOK_ERR_NOMEM, "out of memory reading '%s'", path);
    case READFILE_READ: return tok_fail(err, errlen, TOK_ERR_IO, "cannot read '%s'", path);
    }
    sp_model *M = calloc(1, sizeof *M);
    int rc = M ? 0 : tok_fail(err, errlen, TOK_ERR_NOMEM, "out of memory");
    if (!rc) {
        M->file = dupn((const unsigned char *)path, strlen(path));
        rc = M->file ? load(&r, M, buf, len) : tok_fail(err, errlen, TOK_ERR_NOMEM, "out of memory");
    }
    free(buf);
    if (!rc) rc = init_pieces(&r, M);
    if (!rc && build_decode(M)) rc = tok_fail(err, errlen, TOK_ERR_NOMEM, "out of memory loading '%s'", path);
    if (!rc) word_tables(M, whole_text);
    if (rc) {
        sp_free(M);
        return rc;
    }
    /* an empty name in the trainer spec means the default (RETURN_PIECE) */
#define NAME(p, d) ((p) && *(p) ? (p) : (d))
    M->proc_unk = special_id(M, NAME(M->unk_piece, "<unk>"), PT_UNKNOWN);
    if (M->byte_fallback) byte_ids(M);
    M->bos = special_id(M, NAME(M->bos_piece, "<s>"), PT_CONTROL);
    M->eos = special_id(M, NAME(M->eos_piece, "</s>"), PT_CONTROL);
    M->pad = special_id(M, NAME(M->pad_piece, "<pad>"), PT_CONTROL);
#undef NAME
    snprintf(M->desc, sizeof M->desc, "SentencePiece %s '%s': %zu pieces%s%s", M->model_type == MODEL_BPE ? "BPE" : "unigram",
             path, M->n, M->byte_fallback ? ", byte fallback" : "", M->da ? ", precompiled normalizer" : "");
    *out = M;
    return 0;
}

void sp_free(sp_model *M)
{
    if (!M) return;
    if (M->dec)
        for (size_t i = 0; i < M->n; i++) free(M->dec[i]);
    free(M->dec);
    free(M->declen);
    free(M->p);
    free(M->blob);
    free(M->da_buf);
    free((char *)M->norm_pool);
    free(M->pieces.slot);
    free(M->reserved.slot);
    trie_free(&M->user);
    free(M->all.a);
    free(M->all.p);
    free(M->lscore);
    free(M->pairs.key);
    free(M->pairs.val);
    free(M->unk_piece);
    free(M->bos_piece);
    free(M->eos_piece);
    free(M->pad_piece);
    free(M->unk_surface);
    free(M->file);
    free(M);
}

size_t sp_piece_size(const sp_model *M) { return M->n; }
int64_t sp_bos_id(const sp_model *M) { return M->bos; }
int64_t sp_eos_id(const sp_model *M) { return M->eos; }
int64_t sp_pad_id(const sp_model *M) { return M->pad; }
const char *sp_describe(const sp_model *M) { return M->desc; }
int sp_decode_strips_first_space(const sp_model *M) { return M->add_dummy_prefix && !M->ws_suffix; }

const char *sp_id_to_piece(const sp_model *M, int64_t id, size_t *len)
{
    if (id < 0 || (size_t)id >= M->n) return NULL;
    *len = M->p[id].len;
    return (const char *)M->blob + M->p[id].off;
}

const unsigned char *sp_token_bytes(const sp_model *M, uint32_t id, size_t *len)
{
    if (id >= M->n) return NULL;
    *len = M->declen[id];
    return M->dec[id];
}

/* ------------------------------------------------------------------------ */
/* normalization                                                              */

int sp_state_new(const sp_model *M, sp_state **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out) return TOK_ERR_NOMEM;
    (*out)->nchar = calloc((size_t)1 << NC_BITS, sizeof *(*out)->nchar);
    if (!(*out)->nchar) {
        free(*out);
        *out = NULL;
        return TOK_ERR_NOMEM;
    }
    if (M->has_unused) {
        (*out)->rev = calloc(M->n, sizeof *(*out)->rev);
        if (!(*out)->rev) {
            free((*out)->nchar);
            free(*out);
            *out = NULL;
            return TOK_ERR_NOMEM;
        }
    }
    return 0;
}

void sp_state_free(sp_state *s)
{
    if (!s) return;
    free(s->norm);
    free(s->nchar);
    free(s->sym);
    free(s->heap);
    free(s->rev);
    free(s->best);
    free(s->res);
    free(s->wc);
    free(s->cuts);
    free(s->marks);
    free(s->wtmp);
    free(s->dbest);
    free(s);
}

#define GROW(ptr, cap, need) do { \
        if ((need) > (cap)) { \
            size_t c_ = (cap) ? (cap) : 256; \
            while (c_ < (need)) c_ *= 2; \
            void *q_ = realloc((ptr), c_ * sizeof *(ptr)); \
            if (!q_) return TOK_ERR_NOMEM; \
            (ptr) = q_; \
            (cap) = c_; \
        } \
    } while (0)

static inline size_t one_char_len(unsigned char c)
{
    return "\1\1\1\1\1\1\1\1\1\1\1\1\2\2\3\4"[c >> 4];
}

/* Length of the valid UTF-8 character at s (sentencepiece's DecodeUTF8:
 * shortest form, no surrogates, at most U+10FFFF, as utf8_decode checks), 0
 * if invalid. */
static size_t valid_char(const unsigned char *s, size_t n)
{
    uint32_t cp;
    return utf8_decode(s, s + n, &cp);
}

/* The longest user-defined symbol at s, or 0. */
static size_t user_match(const sp_model *M, const unsigned char *s, size_t n)
{
    uint32_t node = 0;
    size_t best = 0;
    for (size_t i = 0; i < n; i++) {
        node = trie_next(&M->user, node, s[i]);
        if (node == UINT32_MAX) break;
        if (M->user.id[node] >= 0) best = i + 1;
    }
    return best;
}

/* The longest charsmap rule at s: its length, and the replacement. */
static size_t charsmap_match(const sp_model *M, const unsigned char *s, size_t n, const char **repl)
{
    const uint32_t *a = M->da;
    size_t size = M->da_size, pos = 0, best = 0;
    uint32_t unit = a[0];
    pos ^= DA_OFFSET(unit);
    for (size_t i = 0; i < n; i++) {
        pos ^= s[i];
        if (pos >= size) break;
        unit = a[pos];
        if (DA_LABEL(unit) != s[i]) break;
        pos ^= DA_OFFSET(unit);
        if (pos >= size) break;
        if (DA_LEAF(unit)) {
            uint32_t v = DA_VALUE(a[pos]);
            if (v <= M->norm_pool_len) {
                best = i + 1;
                *repl = M->norm_pool + v;
            }
        }
    }
    return best;
}

/* 1 when the charsmap's walk goes on from node pos with the byte c. */
static inline int charsmap_goes_on(const sp_model *M, uint32_t pos, unsigned char c)
{
    return (pos ^ c) < M->da_size && DA_LABEL(M->da[pos ^ c]) == c;
}

/* The charsmap's node after the bytes s[0, n) when some rule starts with
 * them and goes on past them, else NO_NODE. */
static uint32_t charsmap_extends(const sp_model *M, const unsigned char *s, size_t n)
{
    const uint32_t *a = M->da;
    uint32_t pos = DA_OFFSET(a[0]);
    for (size_t i = 0; i < n; i++) {
        if (!charsmap_goes_on(M, pos, s[i])) return NO_NODE;
        pos ^= s[i];
        pos ^= DA_OFFSET(a[pos]);
    }
    for (unsigned d = 0; d < 0x100; d++)
        if (charsmap_goes_on(M, pos, (unsigned char)d)) return pos;
    return NO_NODE;
}

/* normalize's fast path for a byte (flags): PLAIN, it stands for itself, or
 * for a space with PLAIN_SPACE; with PLAIN_IF_ASCII_NEXT only when the
 * charsmap's rules starting with it (all going on with a non-ASCII byte) do
 * not go on with the next byte. */
enum { PLAIN = 1, PLAIN_IF_ASCII_NEXT = 2, PLAIN_SPACE = 4 };

/* For an ASCII byte c, which charsmap rules start with it: 0 none, 1 only
 * rules whose second byte is not ASCII (NFKC's compositions: a letter and a
 * combining mark), 2 others (a rule for c alone, or c and an ASCII byte). */
static int charsmap_first(const sp_model *M, unsigned char c)
{
    const uint32_t *a = M->da;
    size_t pos = DA_OFFSET(a[0]) ^ c;
    if (pos >= M->da_size || DA_LABEL(a[pos]) != c) return 0;
    uint32_t unit = a[pos];
    if (DA_LEAF(unit)) return 2;   /* a rule for c alone */
    pos ^= DA_OFFSET(unit);
    for (unsigned d = 0; d < 0x80; d++)
        if ((pos ^ d) < M->da_size && DA_LABEL(a[pos ^ d]) == d) return 2;
    return 1;
}

/* 1 when the charsmap's only rule starting with the byte c is c -> " ". */
static int charsmap_to_space(const sp_model *M, unsigned char c)
{
    const char *r = NULL;
    return charsmap_match(M, &c, 1, &r) == 1 && strcmp(r, " ") == 0 && charsmap_extends(M, &c, 1) == NO_NODE;
}

/*
 * The word split.  A position p of the normalized text where no piece can
 * span (no piece holds the bytes on both sides of it) cuts every merge
 * sequence (BPE) and every lattice path (unigram) in two, so the text can be
 * encoded word by word and each word's pieces cached.  In valid UTF-8, a
 * character boundary p is a cut when no piece holds the byte pair at p, or
 * when p is before a whitespace mark whose preceding byte no piece holds
 * right before (a prefix of) the mark, or after a mark whose following byte
 * no piece holds right after (a suffix of) it.  BPE with UNUSED pieces keeps
 * the whole text (their resegmentation depends on proposals anywhere in it).
 * Any subset of the cuts splits alike: where no piece holds a byte before
 * the mark (ws_cuts, models that split pieces at whitespace), normalize's
 * marks are the words' ends, and only words too long for a cache entry
 * are cut further (a word with characters from normalize's general step
 * stays whole: one entry, as for an ASCII word with its punctuation).
 */
static void word_tables(sp_model *M, int whole_text)
{
    static const unsigned char WS[3] = { 0xE2, 0x96, 0x81 };
    const unsigned char *ws = M->escape_ws ? WS : (const unsigned char *)" ";
    size_t wsl = M->escape_ws ? 3 : 1;
    for (size_t i = 0; i < M->n; i++) {
        const struct piece *p = &M->p[i];
        if (!want_pieces(p->type)) continue;
        const unsigned char *s = M->blob + p->off;
        for (size_t k = 1; k < p->len; k++) {
            M->pair[s[k - 1]][s[k] >> 6] |= 1ull << (s[k] & 63);
            size_t a = p->len - k < wsl ? p->len - k : wsl;
            if (memcmp(s + k, ws, a) == 0) M->pre_ws[s[k - 1]] = 1;
            size_t b = k < wsl ? k : wsl;
            if (memcmp(s + k - b, ws + wsl - b, b) == 0) M->post_ws[s[k]] = 1;
        }
    }
    for (int c = 0; c < 128; c++) {
        int r = M->da ? charsmap_first(M, (unsigned char)c) : 0;
        int u = M->has_user && trie_next(&M->user, 0, (unsigned char)c) != UINT32_MAX;
        int v = u || r == 2 ? 0 : r == 1 ? PLAIN | PLAIN_IF_ASCII_NEXT : PLAIN;
        if (v && c == ' ') v |= PLAIN_SPACE;
        if (!u && r == 2 && charsmap_to_space(M, (unsigned char)c)) v = PLAIN | PLAIN_SPACE;
        M->plain[c] = (uint8_t)v;
        if (v & PLAIN_IF_ASCII_NEXT) M->plain_next[c] = charsmap_extends(M, (const unsigned char *)&c, 1);
    }
    /* printable ASCII but two bytes (say, those user-defined symbols start
       with), else the plain bytes around 'e' */
    int lo = 0x21, hi = 0x7E, ex[2] = { 0x80, 0x80 }, nex = 0;
    for (int c = lo; c <= hi; c++)
        if ((M->plain[c] & (PLAIN | PLAIN_SPACE)) != PLAIN && nex++ < 2) ex[nex - 1] = c;
    if (nex > 2) {
        ex[0] = ex[1] = 0x80;
        lo = hi = 'e';
        if ((M->plain['e'] & (PLAIN | PLAIN_SPACE)) != PLAIN) lo = 0x80, hi = 0x7F;
        while (lo > 0 && lo <= 0x7F && (M->plain[lo - 1] & (PLAIN | PLAIN_SPACE)) == PLAIN) lo--;
        while (hi < 0x7F && hi >= lo && (M->plain[hi + 1] & (PLAIN | PLAIN_SPACE)) == PLAIN) hi++;
    }
    const uint64_t B = 0x0101010101010101ull;
    M->run_sub = (uint64_t)lo * B;
    M->run_add = (uint64_t)(0x7F - hi) * B;
    M->run_ex[0] = (uint64_t)ex[0] * B;
    M->run_ex[1] = (uint64_t)ex[1] * B;
    M->words = !whole_text && (M->model_type == MODEL_UNIGRAM || !M->has_unused);
    M->ws_cuts = M->words && !M->ws_suffix;
    M->id16 = M->n < UINT16_MAX;
    for (int c = 0; c < 256; c++)
        if (M->pre_ws[c]) M->ws_cuts = 0;
}

#define WC_BUCKETS (1u << 17)    /* of WC_WAYS entries: 16 MB a state (2^16: 8 MB, 20 % more
                                    words analysed on dev, 4 % slower) */
#define WC_WAYS 2

/* Word w's first min(n, 8) bytes as one integer: for n < 8 from
 * overlapping loads that, with n, still tell every byte. */
static inline uint64_t first8(const unsigned char *w, size_t n)
{
    uint64_t k;
    uint32_t lo, hi;
    if (n >= 8) {
        memcpy(&k, w, 8);
        return k;
    }
    if (n >= 4) {
        memcpy(&lo, w, 4);
        memcpy(&hi, w + n - 4, 4);
        return (uint64_t)hi << 32 | lo;
    }
    return n ? (uint64_t)w[0] | (uint64_t)w[n / 2] << 8 | (uint64_t)w[n - 1] << 16 : 0;
}

/* The cache's hash of word w (n <= WE_DATA), eight bytes at a time. */
static inline uint32_t word_hash(const unsigned char *w, size_t n)
{
    const uint64_t K = 0x9E3779B97F4A7C15ull;
    uint64_t h = (first8(w, n) ^ n) * K, v;
    for (size_t i = 8; i + 8 < n; i += 8) {
        memcpy(&v, w + i, 8);
        h = (h ^ (h >> 29) ^ v) * K;
    }
    if (n > 8) {
        memcpy(&v, w + n - 8, 8);
        h = (h ^ (h >> 29) ^ v) * K;
    }
    /* (the low bits of a product see only the low bits of its factors:
       the bucket comes from the high ones, mixed once more) */
    h = (h ^ (h >> 29)) * K;
    return (uint32_t)(h >> 32);
}

static inline struct wentry *wc_bucket(const sp_state *st, uint32_t h)
{
    return st->wc + (size_t)(h & (WC_BUCKETS - 1)) * WC_WAYS;
}

/* Records the word t[a, b): its end and hash in *c, and fetches its cache
 * bucket now, so that the lines are there by the time the words are
 * encoded (after the whole text is normalized, or cut). */
static inline void word_end(sp_state *st, struct cut *c, const unsigned char *t, size_t a, size_t b)
{
    uint32_t h = b - a <= WE_DATA ? word_hash(t + a, b - a) : 0;
    *c = (struct cut){ (uint32_t)b, h };
    const struct wentry *e = wc_bucket(st, h);
    for (int k = 0; k < WC_WAYS; k++) __builtin_prefetch(e + k);
}

/* NormalizePrefix: the replacement of the longest prefix and its length. */
static size_t normalize_prefix(const sp_model *M, const unsigned char *s, size_t n, const unsigned char **out, size_t *outlen)
{
    if (M->has_user) {
        size_t l = user_match(M, s, n);
        if (l) {
            *out = s;
            *outlen = l;
            return l;
        }
    }
    if (M->da) {
        const char *r = NULL;
        size_t l = charsmap_match(M, s, n, &r);
        if (l) {
            *out = (const unsigned char *)r;
            *outlen = strlen(r);
            return l;
        }
    }
    size_t l = valid_char(s, n);
    if (!l) {
        *out = (const unsigned char *)"\xEF\xBF\xBD";
        *outlen = 3;
        return 1;
    }
    *out = s;
    *outlen = l;
    return l;
}

/* A character of 2 to 4 bytes as one integer (never 0). */
static inline uint32_t char_key(const unsigned char *s, size_t n)
{
    return (uint32_t)s[0] | (uint32_t)s[1] << 8 | (n > 2 ? (uint32_t)s[2] << 16 : 0) | (n > 3 ? (uint32_t)s[3] << 24 : 0);
}

static inline size_t nchar_slot(uint32_t key) { return (key * 0x9E3779B1u) >> (32 - NC_BITS); }

/* Remembers what normalize's general step does with the character s[0, n):
 * when no user-defined symbol starts with its first byte, it is valid UTF-8
 * and its normalization alone (no longer charsmap rule matching) is valid
 * UTF-8 without spaces, that is copied, unless the charsmap's walk goes on
 * with the next byte (then the general step decides). */
static void nchar_put(const sp_model *M, sp_state *st, const unsigned char *s, size_t n, uint32_t key)
{
    struct nchar *e = &st->nchar[nchar_slot(key)];
    e->key = key;
    e->rl = NC_GENERAL;
    e->next = NO_NODE;
    if (valid_char(s, n) != n || (M->has_user && trie_next(&M->user, 0, s[0]) != UINT32_MAX)) return;
    const unsigned char *r = s;
    size_t rl = n;
    if (M->da) {
        const char *rep = NULL;
        size_t l = charsmap_match(M, s, n, &rep);
        if (l && l != n) return;
        if (l) {
            r = (const unsigned char *)rep;
            rl = strlen(rep);
        }
        e->next = charsmap_extends(M, s, n);
    }
    if (rl > sizeof e->r || memchr(r, ' ', rl)) return;
    for (size_t k = 0, cl; k < rl; k += cl)
        if (!(cl = valid_char(r + k, rl - k))) return;
    e->rl = (uint8_t)rl;
    memcpy(e->r, r, rl);
}

/* Copies to o the run at s[0, n) of bytes that stand for themselves before
 * an ASCII byte, s[0] being one whatever follows; returns its length.  The
 * room at o holds eight bytes more than the run (normalize makes room for
 * three bytes for each one left). */
static inline size_t plain_run(const sp_model *M, const unsigned char *s, size_t n, unsigned char *o)
{
    const unsigned char *s0 = s, *end = s + n - 1;   /* (end: the last byte) */
    const uint8_t *plain = M->plain;
    *o++ = *s++;
    while (end - s >= 8) {
        /* eight at a time (a word is one step, mostly): the bytes up to
           the first outside [lo, hi] or one of the two, less the last when
           a non-ASCII byte follows it */
        const uint64_t B = 0x0101010101010101ull, H = 0x8080808080808080ull;
        uint64_t x, y0, y1, bad;
        memcpy(&x, s, 8);
        memcpy(o, &x, 8);
        /* (each term's lowest flag is a byte that is out, and every byte
           out is flagged: the lowest is the first) */
        y0 = x ^ M->run_ex[0];
        y1 = x ^ M->run_ex[1];
        bad = (((x - M->run_sub) | x | (x + M->run_add)) & H) | ((y0 - B) & ~y0 & H) | ((y1 - B) & ~y1 & H);
        size_t r = bad ? (size_t)__builtin_ctzll(bad) / 8 : 8;
        r -= r && s[r] >= 0x80;
        s += r;
        o += r;
        if (r < 8) break;
    }
    while (s < end && (plain[*s] & (PLAIN | PLAIN_SPACE)) == PLAIN && s[1] < 0x80) *o++ = *s++;
    return (size_t)(s - s0);
}

/* Normalizer::Normalize into st->norm; returns its length. */
static int normalize(const sp_model *M, sp_state *st, const unsigned char *s, size_t n, size_t *outn)
{
    static const unsigned char WS[3] = { 0xE2, 0x96, 0x81 };
    size_t w = 0;
    *outn = 0;
    if (n == 0) return 0;
    if (M->remove_extra_ws) {
        while (n) {
            const unsigned char *r;
            size_t rl, l = normalize_prefix(M, s, n, &r, &rl);
            if (!(rl == 1 && r[0] == ' ')) break;
            s += l;
            n -= l;
        }
    }
    if (n == 0) return 0;
    GROW(st->norm, st->ncap, n * 3 + 16);
    const unsigned char *ws = M->escape_ws ? WS : (const unsigned char *)" ";
    size_t wsl = M->escape_ws ? 3 : 1;
    if (!M->ws_suffix && M->add_dummy_prefix) {
        memcpy(st->norm + w, ws, wsl);
        w += wsl;
    }
    int prev_space = M->remove_extra_ws;
    size_t nm = 0;
    if (M->ws_cuts) GROW(st->marks, st->markcap, n + 1);
    st->long_word = 0;
    st->norm_valid = 1;
    while (n) {
        unsigned char c = s[0];
        unsigned v = M->plain[c];
        /* (PLAIN_IF_ASCII_NEXT: no rule starting with c goes on with an ASCII byte) */
        if ((v & PLAIN) && (!(v & PLAIN_IF_ASCII_NEXT) || n == 1 || s[1] < 0x80 || !charsmap_goes_on(M, M->plain_next[c], s[1]))) {
            /* what the general step below does for a byte without rules, or
               with the one rule c -> " "; each mark starts a word (ws_cuts) */
            if (v & PLAIN_SPACE) {
                if (!prev_space) {
                    if (M->ws_cuts) {
                        size_t a = nm ? st->marks[nm - 1].end : 0;
                        st->long_word |= w - a > WE_DATA;
                        word_end(st, &st->marks[nm++], st->norm, a, w);
                    }
                    unsigned char *o = st->norm + w;
                    o[0] = ws[0];
                    if (wsl == 3) {
                        o[1] = ws[1];
                        o[2] = ws[2];
                    }
                    w += wsl;
                }
                prev_space = M->remove_extra_ws;
                s++;
                n--;
                if (n && M->plain[s[0]] == PLAIN) {
                    /* (the word after it, without going round) */
                    size_t r = plain_run(M, s, n, st->norm + w);
                    w += r;
                    s += r;
                    n -= r;
                    prev_space = 0;
                }
            } else {
                size_t r = plain_run(M, s, n, st->norm + w);
                w += r;
                s += r;
                n -= r;
                prev_space = 0;
            }
            continue;
        }
        size_t len = one_char_len(c);
        if (c >= 0xC0 && len <= n) {
            uint32_t key = char_key(s, len);
            const struct nchar *e = &st->nchar[nchar_slot(key)];
            if (e->key != key) nchar_put(M, st, s, len, key);
            if (e->rl != NC_GENERAL && (e->next == NO_NODE || n == len || !charsmap_goes_on(M, e->next, s[len]))) {
                GROW(st->norm, st->ncap, w + e->rl + (n - len) * 3 + 16);
                memcpy(st->norm + w, e->r, sizeof e->r);   /* (room: the 16 bytes above) */
                w += e->rl;
                if (e->rl) prev_space = 0;
                s += len;
                n -= len;
                continue;
            }
        }
        const unsigned char *r;
        size_t rl, l = normalize_prefix(M, s, n, &r, &rl);
        while (prev_space && rl && r[0] == ' ') {
            r++;
            rl--;
        }
        for (size_t k = 0; k < rl && st->norm_valid;) {
            size_t cl = valid_char(r + k, rl - k);
            if (!cl) st->norm_valid = 0;
            k += cl;
        }
        /* room for this replacement and three bytes for each input byte left */
        GROW(st->norm, st->ncap, w + rl * 3 + (n - l) * 3 + 16);
        if (rl) {
            for (size_t k = 0; k < rl; k++) {
                if (M->escape_ws && r[k] == ' ') {
                    memcpy(st->norm + w, WS, 3);
                    w += 3;
                } else {
                    st->norm[w++] = r[k];
                }
            }
            prev_space = r[rl - 1] == ' ';
        }
        s += l;
        n -= l;
        if (!M->remove_extra_ws) prev_space = 0;
    }
    if (M->remove_extra_ws)
        while (w >= wsl && memcmp(st->norm + w - wsl, ws, wsl) == 0) w -= wsl;
    if (M->ws_suffix && M->add_dummy_prefix) {
        GROW(st->norm, st->ncap, w + wsl);
        memcpy(st->norm + w, ws, wsl);
        w += wsl;
    }
    if (M->ws_cuts) {
        /* the words end at the marks left and at the end */
        while (nm && st->marks[nm - 1].end >= w) nm--;
        size_t a = nm ? st->marks[nm - 1].end : 0;
        st->long_word |= w - a > WE_DATA;
        word_end(st, &st->marks[nm++], st->norm, a, w);
        st->nmarks = nm;
    }
    *outn = w;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* BPE                                                                        */

/* agenda order: higher score first, then the smaller left index */
static inline int before(const struct agenda *a, const struct agenda *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static int heap_push(sp_state *st, size_t *hn, struct agenda e)
{
    GROW(st->heap, st->heapcap, *hn + 1);
    size_t i = (*hn)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(&e, &st->heap[p])) break;
        st->heap[i] = st->heap[p];
        i = p;
    }
    st->heap[i] = e;
    return 0;
}

static struct agenda heap_pop(sp_state *st, size_t *hn)
{
    struct agenda top = st->heap[0], x = st->heap[--*hn];
    size_t i = 0, n = *hn;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && before(&st->heap[c + 1], &st->heap[c])) c++;
        if (!before(&st->heap[c], &x)) break;
        st->heap[i] = st->heap[c];
        i = c;
    }
    if (n) st->heap[i] = x;
    return top;
}

static inline int mergeable(const sp_model *M, int64_t id)
{
    /* PieceToIdNoReserved found it, and IsReservedId is false */
    return id >= 0 && id != M->unk_id && want_pieces(M->p[id].type);
}

static int maybe_pair(const sp_model *M, sp_state *st, const unsigned char *t, size_t *hn, int left, int right)
{
    if (left < 0 || right < 0) return 0;
    const struct sym *L = &st->sym[left], *R = &st->sym[right];
    if (L->freeze || R->freeze) return 0;
    uint32_t size = L->len + R->len;
    /* the piece with the string L + R: by ids when both halves are pieces
       (pairs_build), else by the string */
    int64_t id = L->id >= 0 && R->id >= 0 ? pair_get(&M->pairs, (uint32_t)L->id, (uint32_t)R->id)
                                          : map_get(M, &M->pieces, t + L->off, size);
    if (!mergeable(M, id)) return 0;
    if (M->p[id].type == PT_UNUSED) {
        struct rev *v = &st->rev[id];
        *v = (struct rev){ st->stamp, L->off, L->len, R->off, R->len };
    }
    return heap_push(st, hn, (struct agenda){ M->p[id].score, left, right, size, (int32_t)id });
}

static int add_result(sp_state *st, size_t *nr, uint32_t off, uint32_t len, int32_t id)
{
    GROW(st->res, st->rescap, *nr + 1);
    st->res[(*nr)++] = (struct res){ off, len, id };
    return 0;
}

/* bpe_model.cc's resegment: an UNUSED piece is split the way it was last
 * proposed; anything that is no mergeable piece is the model's unk. */
static int resegment(const sp_model *M, sp_state *st, const unsigned char *t, uint32_t off, uint32_t len, size_t *nr, int depth,
                     int64_t id)
{
    if (id == -2) id = map_get(M, &M->pieces, t + off, len);
    if (id < 0) id = M->unk_id;
    if (depth > 100) return add_result(st, nr, off, len, (int32_t)id);
    if (id == M->unk_id || !want_pieces(M->p[id].type)) return add_result(st, nr, off, len, (int32_t)M->unk_id);
    if (M->p[id].type != PT_UNUSED) return add_result(st, nr, off, len, (int32_t)id);
    const struct rev *v = &st->rev[id];
    if (v->stamp != st->stamp) return add_result(st, nr, off, len, (int32_t)M->unk_id);
    /* rev_merge keys on the string: the halves are the lengths of the last proposal */
    uint32_t l1 = v->llen, l2 = v->rlen;
    int rc = resegment(M, st, t, off, l1, nr, depth + 1, -2);
    return rc ? rc : resegment(M, st, t, off + l1, l2, nr, depth + 1, -2);
}

/* BPE of t[0, n), appended to st->res (offsets from t) */
static int bpe_encode(const sp_model *M, sp_state *st, const unsigned char *t, size_t n, size_t *nr)
{
    size_t ns = 0;
    GROW(st->sym, st->symcap, n);
    for (size_t i = 0; i < n;) {
        size_t l = 0;
        int freeze = 0;
        if (M->has_user) {
            l = user_match(M, t + i, n - i);
            freeze = l > 0;
        }
        if (!l) {
            l = one_char_len(t[i]);
            if (l > n - i) l = n - i;
        }
        int32_t id = l == 1 ? M->byte1[t[i]] : (int32_t)map_get(M, &M->pieces, t + i, l);
        st->sym[ns] = (struct sym){ (int)ns - 1, 0, (uint32_t)i, (uint32_t)l, id, (uint8_t)freeze };
        i += l;
        st->sym[ns].next = i < n ? (int)ns + 1 : -1;
        ns++;
    }
    if (!ns) return 0;
    st->stamp++;
    size_t hn = 0;
    int rc = 0;
    for (size_t i = 1; i < ns && !rc; i++) rc = maybe_pair(M, st, t, &hn, (int)i - 1, (int)i);
    while (hn && !rc) {
        struct agenda top = heap_pop(st, &hn);
        struct sym *L = &st->sym[top.left], *R = &st->sym[top.right];
        if (L->len == 0 || R->len == 0 || L->len + R->len != top.size) continue;
        L->len += R->len;
        L->id = top.id;
        L->next = R->next;
        if (R->next >= 0) st->sym[R->next].prev = top.left;
        R->len = 0;
        rc = maybe_pair(M, st, t, &hn, L->prev, top.left);
        if (!rc) rc = maybe_pair(M, st, t, &hn, top.left, L->next);
    }
    for (int i = 0; i != -1 && !rc; i = st->sym[i].next)
        rc = resegment(M, st, t, st->sym[i].off, st->sym[i].len, nr, 0, st->sym[i].id);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* unigram                                                                    */

#define SCORE_RESET 100000.0f   /* unigram_model.cc's kScoreResetThreshold */

/*
 * The Viterbi of t[a, b) entering node a with the score P; the pieces are
 * appended to st->res, node b's score is left in *Pout.  Over a whole text
 * (a = 0, P = 0) this is EncodeOptimized; from a cut (see word_tables) it is
 * the same computation, as no edge crosses the cut.
 */
static int unigram_span(const sp_model *M, sp_state *st, const unsigned char *t, size_t a, size_t b, float P, size_t *nr,
                        float *Pout)
{
    size_t n = b - a;
    *Pout = P;
    if (n == 0) return 0;
    t += a;
    GROW(st->best, st->bestcap, n + 1);
    struct best *bb = st->best;
    for (size_t i = 0; i <= n; i++) bb[i] = (struct best){ -1, 0.0f, -1 };
    bb[0].score = P;
    const float unk_score = M->min_score - 10.0f;   /* min_score() - kUnkPenalty */
    const struct lat *tr = &M->all;
    size_t frontier = 0;
    for (size_t start = 0; start < n;) {
        float till = bb[start].score;
        if (till < -SCORE_RESET || till > SCORE_RESET) {
            /* sentencepiece keeps scores small by shifting every live node */
            const float off = till;
            for (size_t i = start; i <= frontier; i++)
                if (i == start || bb[i].start != -1) bb[i].score -= off;
            till = 0.0f;
        }
        int single = 0;
        size_t mblen = one_char_len(t[start]);
        if (mblen > n - start) mblen = n - start;
        uint32_t node = 0;
        for (size_t k = start; k < n; k++) {
            int r = lat_next(tr, &node, t[k]);
            if (r < 0) break;
            if (!r) continue;
            const struct dpiece *e = &tr->p[node];
            int32_t id = e->id;
            size_t len = k + 1 - start;
            if (k + 1 > frontier) frontier = k + 1;
            struct best *tg = &bb[k + 1];
            float cand = e->score + till;
            if (tg->start == -1 || cand > tg->score) {
                tg->score = cand;
                tg->start = (int)start;
                tg->id = id;
            }
            if (!single && len == mblen) single = 1;
        }
        if (!single) {
            if (start + mblen > frontier) frontier = start + mblen;
            struct best *tg = &bb[start + mblen];
            float cand = unk_score + till;
            if (tg->start == -1 || cand > tg->score) {
                tg->score = cand;
                tg->start = (int)start;
                tg->id = (int)M->unk_id;
            }
        }
        start += mblen;
    }
    *Pout = bb[n].score;
    /* backtrack into res, then reverse the new part */
    size_t first = *nr;
    for (size_t end = n; end > 0;) {
        struct best *nd = &bb[end];
        if (nd->start < 0) return TOK_ERR_ENCODE;   /* cannot happen: every character is reachable */
        if (add_result(st, nr, (uint32_t)(a + (size_t)nd->start), (uint32_t)(end - (size_t)nd->start), nd->id))
            return TOK_ERR_NOMEM;
        end = (size_t)nd->start;
    }
    for (size_t i = first, j = *nr; i + 1 < j; i++, j--) {
        struct res x = st->res[i];
        st->res[i] = st->res[j - 1];
        st->res[j - 1] = x;
    }
    return 0;
}

/*
 * The same lattice in exact arithmetic (double sums of float scores, from 0)
 * for the word cache: the best path into st->wtmp, and *plim, the largest
 * |P| with which unigram_span's float arithmetic is known to pick that path
 * and to need no score reset inside the word, or -1 when some node's two
 * best candidates are too close to tell.  Each float sum along a path of at
 * most m pieces is within m/2 ulp of the exact one; below 2^e an ulp is at
 * most 2^(e-24), so candidates further apart than (m + 1) * 2^(e-24) compare
 * alike while every sum stays below 2^e.  The closer a word's candidates,
 * the smaller that bound (most documents keep |P| far below 2^17).
 */
static int unigram_analyze(const sp_model *M, sp_state *st, const unsigned char *t, size_t n, size_t *np, float *plim)
{
    GROW(st->dbest, st->dbestcap, n + 1);
    struct dbest *d = st->dbest;
    for (size_t i = 0; i <= n; i++) {
        d[i].best = d[i].second = -HUGE_VAL;
        d[i].start = -1;
    }
    d[0].best = 0.0;
    const float unk_score = M->min_score - 10.0f;
    const struct lat *tr = &M->all;
    double maxtill = 0.0, gap = HUGE_VAL;
    size_t m = 0;
#define CAND(tg, c, sc, pid, st_) do { \
        double c_ = (c); \
        if (c_ > (tg)->best) { \
            (tg)->second = (tg)->best; \
            (tg)->best = c_; \
            (tg)->score = (sc); \
            (tg)->id = (pid); \
            (tg)->start = (st_); \
        } else if (c_ > (tg)->second) { \
            (tg)->second = c_; \
        } \
    } while (0)
    for (size_t start = 0; start < n;) {
        m++;
        /* every candidate for this node is in: the node's gap, its score's size */
        double till = d[start].best;
        if (till - d[start].second < gap) gap = till - d[start].second;
        if (fabs(till) > maxtill) maxtill = fabs(till);
        int single = 0;
        size_t mblen = one_char_len(t[start]);
        if (mblen > n - start) mblen = n - start;
        const size_t last = start + mblen - 1;   /* (a piece ending here is the character alone) */
        uint32_t node = 0;
        for (size_t k = start; k < n; k++) {
            int r = lat_next(tr, &node, t[k]);
            if (r < 0) break;
            if (!r) continue;
            const struct dpiece *e = &tr->p[node];
            CAND(&d[k + 1], (double)e->score + till, e->score, e->id, (int)start);
            single |= k == last;
        }
        if (!single) CAND(&d[start + mblen], (double)unk_score + till, unk_score, (int)M->unk_id, (int)start);
        start += mblen;
    }
#undef CAND
    if (d[n].best - d[n].second < gap) gap = d[n].best - d[n].second;
    /* every candidate is some node's score plus a piece's */
    double maxabs = maxtill + M->all.maxabs;
    /* the largest 2^e <= 2^17 for which the two best candidates of every
       node are further apart than the error (m + 1) * 2^(e - 24) */
    double span = 131072.0;
    while (span >= 1.0 && !(gap > (double)(m + 1) * span / 16777216.0 + maxabs * 1e-12)) span /= 2;
    if (span > (double)SCORE_RESET) span = (double)SCORE_RESET;
    double lim = span - maxabs - (double)(m + 1) / 256.0 - 1.0;
    *plim = lim > 0 ? (float)lim : -1.0f;
    /* the path: its length, then its pieces from the last one back */
    size_t k = 0;
    for (size_t end = n; end > 0; k++) {
        if (d[end].start < 0) return TOK_ERR_ENCODE;   /* cannot happen */
        end = (size_t)d[end].start;
    }
    GROW(st->wtmp, st->wtmpcap, k);
    *np = k;
    for (size_t end = n; end > 0;) {
        st->wtmp[--k] = (struct wpiece){ d[end].id, (uint16_t)d[end].start, (uint16_t)(end - (size_t)d[end].start), d[end].score };
        end = (size_t)d[end].start;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* the word cache                                                             */

/* Word w against a stored copy of the same length, 8 bytes at a time (the
 * last 8 overlapping the ones before). */
static inline int word_eq(const unsigned char *copy, const unsigned char *w, size_t n)
{
    uint64_t x, y;
    if (n < 8) return first8(copy, n) == first8(w, n);
    for (size_t i = 0; i + 8 < n; i += 8) {
        memcpy(&x, copy + i, 8);
        memcpy(&y, w + i, 8);
        if (x != y) return 0;
    }
    memcpy(&x, copy + n - 8, 8);
    memcpy(&y, w + n - 8, 8);
    return x == y;
}


/* Word w's entry, or NULL.  Each bucket keeps its entries most recent
 * first (a hit further back moves to the front), so a new word replaces the
 * one least recently used; one bucket is two adjacent cache lines. */
static inline const struct wentry *wc_find(const sp_state *st, const unsigned char *w, size_t n, uint32_t h)
{
    struct wentry *b = wc_bucket(st, h);
    if (b[0].h == h && b[0].klen == n && word_eq(b[0].data, w, n)) return &b[0];
    for (int k = 1; k < WC_WAYS; k++) {
        if (b[k].h == h && b[k].klen == n && word_eq(b[k].data, w, n)) {
            struct wentry e = b[k];
            memmove(b + 1, b, (size_t)k * sizeof *b);
            b[0] = e;
            return &b[0];
        }
    }
    return NULL;
}

static inline int is_unk(const sp_model *M, int32_t id) { return id < 0 || id == M->unk_id || id == M->proc_unk; }

/* The bytes of the word w[0, left) that a piece of its path covers: an
 * unknown piece is one character (both models make nothing else unknown
 * in a word; wc_store checks it). */
static inline size_t path_len(const sp_model *M, int32_t id, const unsigned char *w, size_t left)
{
    if (!is_unk(M, id)) return M->p[id].len;
    size_t l = one_char_len(w[0]);
    return l < left ? l : left;
}

static inline int32_t we_id(const sp_model *M, const unsigned char *ids, size_t k)
{
    if (M->id16) {
        uint16_t v;
        memcpy(&v, ids + 2 * k, 2);
        return v == UINT16_MAX ? -1 : (int32_t)v;
    }
    int32_t v;
    memcpy(&v, ids + 4 * k, 4);
    return v;
}

static inline const unsigned char *we_ids(const struct wentry *e) { return e->data + ((e->klen + 3u) & ~3u); }

/* Stores word w with its path v[0, np) (offsets in the word) in front of
 * its bucket, when the word and the ids fit in an entry and the path is
 * what path_len rebuilds; else the word is not cached. */
static void wc_store(const sp_model *M, sp_state *st, const unsigned char *w, size_t n, uint32_t h, const struct wpiece *v,
                     size_t np, float plim)
{
    size_t ko = (n + 3) & ~(size_t)3, idw = M->id16 ? 2 : 4, off = 0;
    if (ko + np * idw > WE_DATA) return;
    int unk = 0;
    for (size_t k = 0; k < np; k++) {
        if (v[k].off != off || v[k].len != path_len(M, v[k].id, w + off, n - off)) return;
        unk |= is_unk(M, v[k].id);
        off += v[k].len;
    }
    if (off != n) return;
    struct wentry *b = wc_bucket(st, h);
    memmove(b + 1, b, (WC_WAYS - 1) * sizeof *b);
    b[0] = (struct wentry){ h, (uint8_t)n, (uint8_t)np, (uint8_t)unk, 0, plim, {0} };
    memcpy(b[0].data, w, n);
    unsigned char *ids = b[0].data + ko;
    for (size_t k = 0; k < np; k++) {
        if (M->id16) {
            uint16_t x = v[k].id < 0 ? UINT16_MAX : (uint16_t)v[k].id;
            memcpy(ids + 2 * k, &x, 2);
        } else {
            memcpy(ids + 4 * k, &v[k].id, 4);
        }
    }
}

/* The word cache, in 2 MB pages where the kernel gives them on request:
 * lookups land anywhere in 16 MB, in 4 kB pages more pages than the TLB
 * holds, and each would wait for a page walk as well. */
static int wc_alloc(sp_state *st)
{
    if (st->wc) return 0;
    const size_t bytes = (size_t)WC_BUCKETS * WC_WAYS * sizeof *st->wc;
    void *p = mds_huge_alloc(bytes);
    if (!p) return TOK_ERR_NOMEM;
    memset(p, 0, bytes);
    st->wc = p;
    GROW(st->wtmp, st->wtmpcap, 256);
    return 0;
}

/* Where the ids go, and what runs on across words: the running score of
 * the unigram path and whether the last piece was unknown (runs of them
 * are one id). */
struct emit {
    uint32_t *o;             /* the next id (sp_encode made room: one id per byte) */
    float P;
    int prev_unk;
};

/* SentencePieceProcessor::EncodeOptimized's ids for the pieces st->res[0, nr):
 * control ids as they are, the bytes of an unknown piece with byte fallback,
 * else runs of unknowns merged into one. */
static int emit_res(const sp_model *M, const sp_state *st, size_t nr, struct emit *x)
{
    uint32_t *o = x->o;
    int prev_unk = x->prev_unk;
    for (size_t i = 0; i < nr; i++) {
        int32_t id = st->res[i].id;
        int unk = id == M->unk_id || id == M->proc_unk;   /* (the one UNKNOWN piece, or -1 without one) */
        if (!unk) {
            if (id < 0) return TOK_ERR_ENCODE;   /* no unk piece and no byte fallback: refused at load */
            *o++ = (uint32_t)id;
        } else if (M->byte_fallback) {
            for (size_t k = 0; k < st->res[i].len; k++) *o++ = M->byte_id[st->norm[st->res[i].off + k]];
        } else if (!prev_unk) {
            if (id < 0) return TOK_ERR_ENCODE;
            *o++ = (uint32_t)id;
        }
        prev_unk = unk;
    }
    x->o = o;
    x->prev_unk = prev_unk;
    return 0;
}

/* A path in st->wtmp (offsets in the word at t + a) as pieces in st->res;
 * for unigram, their scores added to x->P as the Viterbi adds them. */
static size_t path_res(sp_state *st, const struct wpiece *v, size_t np, size_t a, struct emit *x)
{
    float P = x->P;
    for (size_t k = 0; k < np; k++) {
        st->res[k] = (struct res){ (uint32_t)(a + v[k].off), v[k].len, v[k].id };
        P = v[k].score + P;
    }
    x->P = P;
    return np;
}

/* A cache entry's path back in st->wtmp (wc_store checked that path_len
 * rebuilds it). */
static size_t we_path(const sp_model *M, sp_state *st, const struct wentry *e, const unsigned char *w)
{
    const unsigned char *ids = we_ids(e);
    size_t off = 0;
    for (size_t k = 0; k < e->n; k++) {
        int32_t id = we_id(M, ids, k);
        size_t len = path_len(M, id, w + off, e->klen - off);
        float sc = M->lscore ? (id < 0 ? M->min_score - 10.0f : M->lscore[id]) : 0.0f;
        st->wtmp[k] = (struct wpiece){ id, (uint16_t)off, (uint16_t)len, sc };
        off += len;
    }
    return e->n;
}

/* Word t[a, b) with hash h: from its cache entry when it has one (the ids
 * straight out when none is unknown), else analysed and stored. */
static int encode_word(const sp_model *M, sp_state *st, const unsigned char *t, size_t a, size_t b, uint32_t h, struct emit *x)
{
    size_t n = b - a, np;
    const unsigned char *w = t + a;
    int uni = M->model_type == MODEL_UNIGRAM;
    float plim = 0.0f;
    const struct wentry *e = n <= WE_DATA ? wc_find(st, w, n, h) : NULL;
    /* the reset at the word's first node, the only live one there (none
       when the entry replays: its plim is below SCORE_RESET) */
    if (uni && !(e && fabsf(x->P) < e->plim) && (x->P < -SCORE_RESET || x->P > SCORE_RESET)) x->P = 0.0f;
    if (e && (!uni || fabsf(x->P) < e->plim)) {
        if (!e->unk) {
            const unsigned char *ids = we_ids(e);
            uint32_t *o = x->o;
            float P = x->P;
            for (size_t k = 0; k < e->n; k++) {
                int32_t id = we_id(M, ids, k);
                o[k] = (uint32_t)id;
                if (uni) P = M->lscore[id] + P;
            }
            x->o = o + e->n;
            x->P = P;
            x->prev_unk = 0;
            return 0;
        }
        np = we_path(M, st, e, w);
        return emit_res(M, st, path_res(st, st->wtmp, np, a, x), x);
    }
    if (!uni) {
        size_t nr = 0;
        int rc = bpe_encode(M, st, w, n, &nr);
        if (rc) return rc;
        if (!e && n <= WE_DATA) {
            GROW(st->wtmp, st->wtmpcap, nr);
            for (size_t i = 0; i < nr; i++)
                st->wtmp[i] = (struct wpiece){ st->res[i].id, (uint16_t)st->res[i].off, (uint16_t)st->res[i].len, 0.0f };
            wc_store(M, st, w, n, h, st->wtmp, nr, 0.0f);
        }
        for (size_t i = 0; i < nr; i++) st->res[i].off += (uint32_t)a;
        return emit_res(M, st, nr, x);
    }
    if (!e && n <= WE_DATA) {
        int rc = unigram_analyze(M, st, w, n, &np, &plim);
        if (rc) return rc;
        wc_store(M, st, w, n, h, st->wtmp, np, plim);
        if (fabsf(x->P) < plim) return emit_res(M, st, path_res(st, st->wtmp, np, a, x), x);
    }
    size_t nr = 0;
    int rc = unigram_span(M, st, t, a, b, x->P, &nr, &x->P);
    return rc ? rc : emit_res(M, st, nr, x);
}

static inline int at_ws(const unsigned char *p, const unsigned char *ws, size_t wsl)
{
    return p[0] == ws[0] && (wsl == 1 || (p[1] == ws[1] && p[2] == ws[2]));
}

/* Appends the cuts of t[a, b) (see word_tables) and b to st->cuts (word_ends
 * made room). */
static void find_cuts(const sp_model *M, sp_state *st, const unsigned char *t, size_t a, size_t b, size_t n, size_t *nc)
{
    static const unsigned char WS[3] = { 0xE2, 0x96, 0x81 };
    const unsigned char *ws = M->escape_ws ? WS : (const unsigned char *)" ";
    size_t wsl = M->escape_ws ? 3 : 1;
    const unsigned char w0 = ws[0], wl = ws[wsl - 1];
    size_t from = a;
    for (size_t j = a + 1; j < b; j++) {
        unsigned char c = t[j], p = t[j - 1];
        if ((c & 0xC0) == 0x80) continue;   /* inside a character */
        if (M->pair[p][c >> 6] >> (c & 63) & 1) {
            int cut = (c == w0 && j + wsl <= n && at_ws(t + j, ws, wsl) && !M->pre_ws[p]) ||
                      (p == wl && j >= wsl && at_ws(t + j - wsl, ws, wsl) && !M->post_ws[c]);
            if (!cut) continue;
        }
        word_end(st, &st->cuts[(*nc)++], t, from, j);
        from = j;
    }
    word_end(st, &st->cuts[(*nc)++], t, from, b);
}

/* The words, each with its hash: with ws_cuts, those that normalize ended
 * at its marks, the ones too long for a cache entry cut further; else
 * every cut. */
static int word_ends(const sp_model *M, sp_state *st, const unsigned char *t, size_t n, const struct cut **cuts, size_t *nc)
{
    *nc = 0;
    if (M->ws_cuts && !st->long_word) {
        *cuts = st->marks;
        *nc = st->nmarks;
        return 0;
    }
    GROW(st->cuts, st->cutcap, n);   /* (each cut at its own position in (0, n]) */
    *cuts = st->cuts;
    if (!M->ws_cuts) {
        find_cuts(M, st, t, 0, n, n, nc);
        return 0;
    }
    size_t a = 0;
    for (size_t i = 0; i < st->nmarks; i++) {
        size_t b = st->marks[i].end;
        if (b <= a) continue;
        if (b - a > WE_DATA) find_cuts(M, st, t, a, b, n, nc);
        else st->cuts[(*nc)++] = st->marks[i];
        a = b;
    }
    return 0;
}

/* The whole normalized text, word by word (see word_tables); the words'
 * cache buckets were fetched as they were found. */
static int encode_words(const sp_model *M, sp_state *st, const unsigned char *t, size_t n, struct emit *x)
{
    const struct cut *c;
    size_t nc, a = 0;
    int rc = word_ends(M, st, t, n, &c, &nc);
    if (rc) return rc;
    GROW(st->res, st->rescap, n);   /* (a word's pieces: each holds a byte at least) */
    for (size_t i = 0; i < nc && !rc; a = c[i++].end)
        if (c[i].end > a) rc = encode_word(M, st, t, a, c[i].end, c[i].h, x);
    return rc;
}

/* ------------------------------------------------------------------------ */

int sp_encode(const sp_model *M, sp_state *st, const unsigned char *s, size_t n, tok_ids *out)
{
    size_t nn, nr = 0;
    if (n > (UINT32_MAX - 64) / 3) return TOK_ERR_ENCODE;   /* offsets are 32-bit */
    int rc = M->words ? wc_alloc(st) : 0;   /* (before normalize, which fetches from it) */
    if (!rc) rc = normalize(M, st, s, n, &nn);
    if (rc) return rc;
    if (nn == 0) return 0;
    /* room for the ids once: each piece holds a byte at least, and byte
       fallback gives an unknown piece one id per byte */
    if (tok_ids_reserve(out, nn)) return TOK_ERR_NOMEM;
    struct emit x = { out->ids + out->n, 0.0f, 0 };
    if (M->words && st->norm_valid) {
        rc = encode_words(M, st, st->norm, nn, &x);
    } else {
        if (M->model_type == MODEL_BPE) rc = bpe_encode(M, st, st->norm, nn, &nr);
        else rc = unigram_span(M, st, st->norm, 0, nn, 0.0f, &nr, &x.P);
        if (!rc) rc = emit_res(M, st, nr, &x);
    }
    if (!rc) out->n = (size_t)(x.o - out->ids);
    return rc;
}
