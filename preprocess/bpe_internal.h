/*
 * bpe_internal.h - private to bpe.c and bpe_load.c: the layout of a loaded
 * `bpe` handle, the packing constants of its tables, and the hash functions
 * that both the loader (which fills the tables) and the encoder (which probes
 * them) must compute identically.
 *
 * Not a public header: nothing outside these two files may include it, and
 * nothing here is a stable interface.  The hash helpers and pair_rank() are
 * static inline on purpose: they sit on the encoder's hot path and must stay
 * inlined into bpe.c.  The per-thread cache (struct bpe_cache) is not here:
 * only the encoder uses it.
 */
#ifndef MDS_BPE_INTERNAL_H
#define MDS_BPE_INTERNAL_H

#include "bpe.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define ID_BITS 21                   /* ids and ranks are packed into one word: */
#define RANK_BITS 22                 /* id, id, rank in 21 + 21 + 22 bits */
#define VOCAB_MAX ((1u << ID_BITS) - 1)   /* ids < VOCAB_MAX, so PAIR_EMPTY is no pair */
#define RANK_MAX ((1u << RANK_BITS) - 1)  /* ranks < RANK_MAX */
#define RANK_MASK ((uint64_t)RANK_MAX)
#define RANK_NONE UINT32_MAX
#define ID_NONE UINT32_MAX
#define SELF_FLAG 0x80000000u        /* in a vocab slot: the token encodes to itself */
#define WHOLE_FLAG 0x40000000u       /* ... a piece equal to the token is that token: SELF_FLAG,
                                        or any token under BPE_BUILD_IGNORE_MERGES */
#define ID_MASK (~(SELF_FLAG | WHOLE_FLAG))
#define PAIR_EMPTY UINT64_MAX

/* ------------------------------------------------------------------------- */
/* hashing                                                                    */

static inline uint64_t mix64(uint64_t a, uint64_t b)
{
#ifdef __SIZEOF_INT128__
    __uint128_t r = (__uint128_t)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
#else
    uint64_t ha = a >> 32, la = (uint32_t)a, hb = b >> 32, lb = (uint32_t)b;
    uint64_t rh = ha * hb, rm0 = ha * lb, rm1 = hb * la, rl = la * lb;
    uint64_t t = rl + (rm0 << 32), c = t < rl;
    uint64_t lo = t + (rm1 << 32);
    c += lo < t;
    uint64_t hi = rh + (rm0 >> 32) + (rm1 >> 32) + c;
    return lo ^ hi;
#endif
}

static inline uint64_t load64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline uint64_t load32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    return v;
}

/*
 * The first min(n, 8) bytes as a little-endian integer, zero padded, read
 * without touching memory past p[n-1].  Overlapping loads OR identical bytes
 * into the same positions, so the value is exact.  For n <= 8 it is the whole
 * key, so a slot compares equal with two integer compares.
 */
static inline uint64_t key8(const unsigned char *p, size_t n)
{
    if (n >= 8)
        return load64(p);
    if (n >= 4)
        return load32(p) | load32(p + n - 4) << (8 * (n - 4));
    return (uint64_t)p[0] | (uint64_t)p[n >> 1] << (8 * (n >> 1)) | (uint64_t)p[n - 1] << (8 * (n - 1));
}

/* a[0..n) == b[0..n) (n >= 1), eight bytes at a time, the last eight
 * overlapping the ones before: no call for the short keys compared here. */
static inline int bytes_eq(const unsigned char *a, const unsigned char *b, size_t n)
{
    if (n < 8)
        return key8(a, n) == key8(b, n);
    for (size_t i = 0; i + 8 < n; i += 8)
        if (load64(a + i) != load64(b + i))
            return 0;
    return load64(a + n - 8) == load64(b + n - 8);
}

#define H0 0xa0761d6478bd642full
#define H1 0xe7037ed1a0b428dbull
#define H2 0x8ebc6af09c88c6e3ull

static inline uint64_t hash_piece(const unsigned char *p, size_t n, uint64_t k8)
{
    uint64_t h = mix64(k8 ^ H0, (uint64_t)n ^ H1);
    if (n > 8) {
        size_t i = 8;
        for (; i + 8 < n; i += 8)
            h = mix64(h ^ load64(p + i), H2);
        h = mix64(h ^ load64(p + n - 8), H1);
    }
    return h;
}

/* key = left << ID_BITS | right */
static inline uint64_t hash_pair(uint64_t key)
{
    return mix64(key ^ H0, H2);
}

/* ------------------------------------------------------------------------- */
/* the loaded tables                                                          */

/*
 * 8 bytes, so the 2 x vocabulary slots of GPT-2 take 1 MB and half as many
 * cache lines as a slot holding the key would: the whole-token lookup is a
 * load from this table, and the hot part of it must stay in cache.  The key
 * is compared against the token's bytes in blob (by id, so the hot tokens,
 * which BPE vocabularies number first, sit together there).
 */
struct vocab_slot {
    uint32_t tag; /* low half of the token's hash_piece() (the slot index is from the high bits) */
    uint32_t val; /* id | SELF_FLAG | WHOLE_FLAG (see above); ID_NONE: an empty slot */
};

struct bpe {
    size_t n;               /* tokens; ids are 0..n-1 */
    size_t max_len;         /* longest token in bytes */
    unsigned flags;         /* BPE_FLAG_* */
    int hf;                 /* BPE_BUILD_HF: leftmost lowest rank is the definition (never
                               encoder.py's literal loop) */
    uint64_t serial;        /* tells caches which handle filled them */
    unsigned char *blob;    /* (sum of token lengths) token bytes by id */
    uint32_t *tok_off;      /* (n + 1) offsets into blob */
    struct vocab_slot *vt;  /* (vt_mask + 1) */
    size_t vt_mask;
    unsigned vt_shift;
    uint64_t *pt;           /* (pt_mask + 1) pairs: left << 43 | right << 22 | rank, or PAIR_EMPTY */
    size_t pt_mask;
    unsigned pt_shift;
    uint32_t *merged_id;    /* (number of ranks) id made by the merge of each rank */
    uint32_t byte_id[256];
    uint32_t byte_rank[256 * 256]; /* rank of the pair of single bytes (a, b) at [a << 8 | b] */
    uint64_t pair_in_token[256 * 256 / 64]; /* bit a << 8 | b: bytes a, b are adjacent in some token */
};

/* p[0..n), whose key8() is k8, are the bytes of token id */
static inline int token_is(const bpe *b, uint32_t id, const unsigned char *p, size_t n, uint64_t k8)
{
    uint32_t off = b->tok_off[id];
    return b->tok_off[id + 1] - off == n && key8(b->blob + off, n) == k8 &&
           (n <= 8 || bytes_eq(p + 8, b->blob + off + 8, n - 8));
}

/*
 * The slot of the token p[0..n) (k8 = key8(p, n), h = hash_piece(p, n, k8)),
 * or the empty slot where it would go (its val is ID_NONE).  A tag that
 * matches is confirmed against the token's bytes.
 */
static inline size_t vocab_index(const bpe *b, const unsigned char *p, size_t n, uint64_t h, uint64_t k8)
{
    size_t i = (size_t)(h >> b->vt_shift);
    uint32_t tag = (uint32_t)h;
    for (;;) {
        const struct vocab_slot *s = &b->vt[i];
        if (s->val == ID_NONE || (s->tag == tag && token_is(b, s->val & ID_MASK, p, n, k8)))
            return i;
        i = (i + 1) & b->vt_mask;
    }
}

/*
 * The rank of the pair (l, r), or RANK_NONE.  One 8-byte slot holds the whole
 * pair and its rank, so the common probe touches one word; the merged id is
 * looked up by rank only when a merge happens.
 */
static inline uint32_t pair_rank(const bpe *b, uint32_t l, uint32_t r)
{
    uint64_t key = (uint64_t)l << ID_BITS | r;
    size_t i = (size_t)(hash_pair(key) >> b->pt_shift);
    for (;;) {
        uint64_t v = b->pt[i];
        if (v >> RANK_BITS == key)
            return (uint32_t)(v & RANK_MASK);
        if (v == PAIR_EMPTY)
            return RANK_NONE;
        i = (i + 1) & b->pt_mask;
    }
}

static inline uint32_t vocab_find(const bpe *b, const unsigned char *p, size_t n, uint64_t h, uint64_t k8)
{
    return b->vt[vocab_index(b, p, n, h, k8)].val;
}

/* bpe_encode_piece past its first two paths (bpe.c): h is the piece's
 * hash_piece when hashed. */
size_t bpe_encode_piece_rest(const bpe *b, bpe_cache *c, const unsigned char *piece, size_t n, uint32_t *out,
                             uint64_t h, int hashed);

/* bpe_encode_piece, its first two paths inline (a byte; a piece that is a
 * token encoding to itself: most pieces of a text), for the loop of
 * tokenize.c, which would otherwise spend a call and its register saves on
 * each of them. */
static inline size_t bpe_encode_piece_inline(const bpe *b, bpe_cache *c, const unsigned char *piece, size_t n,
                                             uint32_t *out)
{
    if (n <= 1) {
        if (n == 1)
            out[0] = b->byte_id[piece[0]];
        return n;
    }
    if (n > b->max_len)
        return bpe_encode_piece_rest(b, c, piece, n, out, 0, 0);
    uint64_t k8 = key8(piece, n), h = hash_piece(piece, n, k8);
    uint32_t v = vocab_find(b, piece, n, h, k8);
    if (v != ID_NONE && (v & WHOLE_FLAG)) {
        out[0] = v & ID_MASK;
        return 1;
    }
    return bpe_encode_piece_rest(b, c, piece, n, out, h, 1);
}

#endif /* MDS_BPE_INTERNAL_H */
