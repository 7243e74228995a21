/*
 * bpe.c - exact GPT-2 byte-level BPE (encoder.py semantics) on raw bytes.
 *
 * Loading turns the vocab and merges files into read-only tables:
 *   - token bytes by id (one blob plus offsets), for decoding;
 *   - an open-addressing hash from token bytes to id, used for the
 *     whole-piece shortcut and bpe_token_id();
 *   - an open-addressing hash from a pair of ids to its rank, one 8-byte word
 *     per pair, plus the merged id by rank and a direct table of the ranks of
 *     all 65536 byte pairs (the first round of every piece);
 *   - a bitmap of the byte pairs that occur inside some token.
 * Symbols are vocab ids: a string that encoder.py could ever hold as a symbol
 * is a single byte or the result of a merge that can apply, and load refuses
 * files where such a string is not a token, so comparing ids is comparing the
 * strings encoder.py compares.
 *
 * Encoding one piece takes the first path that applies:
 *   1. one byte: its token;
 *   2. the piece is a token whose bytes encode to itself: that token;
 *   3. the per-thread cache;
 *   4. the piece is cut between adjacent bytes that are adjacent in no token
 *      (a bitmap of 65536 byte pairs): no merge crosses such a cut, so each
 *      part is encoded alone; a part of one byte or that is a self-encoding
 *      token is answered directly (in CJK and Indic text most parts are);
 *   5. merges of the other parts in trained order (see bpe.h): for up to
 *      SHORT_MAX bytes a scan of a small rank array for the leftmost lowest
 *      (tiktoken's loop, without compaction), above that a lazy binary heap
 *      keyed (rank, position) over a linked list;
 *   6. otherwise, or when scratch memory is short: encoder.py's own loop, in
 *      place in the output array.
 *
 * It does not pre-tokenize, validate text, handle special tokens or print.
 */
#include "bpe.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SHORT_MAX 64                 /* longest piece for the array scan */
#define CACHE_SLOTS_MAX (1u << 24)
#define CACHE_BIG_RATIO 8            /* one big cache slot per this many small ones */
#define SCRATCH_KEEP ((size_t)4 << 20) /* long-piece scratch kept between calls */
#define ID_BITS 21                   /* ids and ranks are packed into one word: */
#define RANK_BITS 22                 /* id, id, rank in 21 + 21 + 22 bits */
#define VOCAB_MAX ((1u << ID_BITS) - 1)   /* ids < VOCAB_MAX, so PAIR_EMPTY is no pair */
#define RANK_MAX ((1u << RANK_BITS) - 1)  /* ranks < RANK_MAX */
#define RANK_MASK ((uint64_t)RANK_MAX)
#define RANK_NONE UINT32_MAX
#define ID_NONE UINT32_MAX
#define SELF_FLAG 0x80000000u        /* in a vocab slot: the token encodes to itself */
#define PAIR_EMPTY UINT64_MAX

/* ------------------------------------------------------------------------- */
/* byte <-> unicode alphabet                                                  */

static int byte_printable(unsigned v)
{
    return (v >= 33 && v <= 126) || (v >= 161 && v <= 172) || (v >= 174 && v <= 255);
}

uint32_t bpe_byte_to_unicode(uint8_t byte)
{
    unsigned v = byte, k = 0;
    if (byte_printable(v))
        return v;
    /* the k-th non-printable byte maps to 256 + k */
    for (unsigned i = 0; i < v; i++)
        k += !byte_printable(i);
    return 256 + k;
}

int bpe_unicode_to_byte(uint32_t cp)
{
    if (cp < 256)
        return byte_printable(cp) ? (int)cp : -1;
    if (cp >= 256 + 68)
        return -1;
    unsigned k = cp - 256;
    for (unsigned i = 0; i < 256; i++)
        if (!byte_printable(i) && k-- == 0)
            return (int)i;
    return -1;
}

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
/* structures                                                                 */

struct vocab_slot {
    uint64_t k8;  /* key8() of the token; the rest is compared against the blob */
    uint32_t val; /* id | SELF_FLAG when the token encodes to itself */
    uint32_t len; /* 0: empty slot */
};

/* load-time pair table slot */
struct pair_slot {
    uint64_t key;    /* left << ID_BITS | right, PAIR_EMPTY when empty */
    uint32_t rank;
    uint32_t merged; /* id of the concatenation, ID_NONE if it is no token */
};

struct bpe {
    size_t n;               /* tokens; ids are 0..n-1 */
    size_t max_len;         /* longest token in bytes */
    unsigned flags;         /* BPE_FLAG_* */
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

/*
 * A cache class is an array of fixed-size slots, each laid out as
 *   tag (u32, high half of the piece hash), len (u8, 0: empty), nids (u8), 2 pad,
 *   key[key_max] (the piece), ids[ids_max] (u32, native order),
 * and accessed with memcpy only.  Small slots (64 bytes) take pieces of up to
 * 24 bytes and 8 ids; big ones (256 bytes) pieces of up to 120 bytes and 32
 * ids (runs of '=' or indentation, CJK words).  Direct mapped: a new piece
 * replaces whatever was in its slot.
 */
struct cache_class {
    unsigned char *slots;
    size_t mask, slot_size, key_max, ids_max;
};

static const size_t cache_shape[2][2] = { { 24, 8 }, { 120, 32 } }; /* key_max, ids_max */

struct scratch {
    void *mem;
    size_t bytes;
};

struct bpe_cache {
    struct cache_class cls[2]; /* small, big; slots NULL when caching is off */
    uint64_t owner;            /* serial of the bpe the slots belong to */
    struct scratch scratch;
};

static atomic_uint_fast64_t bpe_serial_next = 1;

/* ------------------------------------------------------------------------- */
/* lookups                                                                    */

static inline uint32_t vocab_find(const bpe *b, const unsigned char *p, size_t n, uint64_t h, uint64_t k8)
{
    size_t i = (size_t)(h >> b->vt_shift);
    for (;;) {
        const struct vocab_slot *s = &b->vt[i];
        if (s->len == n && s->k8 == k8 &&
            (n <= 8 || memcmp(p + 8, b->blob + b->tok_off[s->val & ~SELF_FLAG] + 8, n - 8) == 0))
            return s->val;
        if (s->len == 0)
            return ID_NONE;
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

/* ------------------------------------------------------------------------- */
/* the merge loops                                                            */

/*
 * encoder.py's loop, literally: find the lowest-ranked adjacent pair, then
 * rebuild the word left to right merging every non-overlapping occurrence.
 * Exact for any merges file; O(n^2).  Works in place in sym (capacity n).
 */
static size_t merge_literal(const bpe *b, const unsigned char *p, size_t n, uint32_t *sym)
{
    for (size_t i = 0; i < n; i++)
        sym[i] = b->byte_id[p[i]];
    size_t m = n;
    while (m > 1) {
        uint32_t best = RANK_NONE, first = 0, second = 0;
        for (size_t i = 0; i + 1 < m; i++) {
            uint32_t r = pair_rank(b, sym[i], sym[i + 1]);
            if (r < best) {
                best = r;
                first = sym[i];
                second = sym[i + 1];
            }
        }
        if (best == RANK_NONE)
            break;
        uint32_t merged = b->merged_id[best];
        size_t w = 0;
        for (size_t i = 0; i < m;) {
            if (i + 1 < m && sym[i] == first && sym[i + 1] == second) {
                sym[w++] = merged;
                i += 2;
            } else {
                sym[w++] = sym[i++];
            }
        }
        m = w;
    }
    return m;
}

/*
 * Leftmost lowest rank, one merge at a time, for short pieces (n <= SHORT_MAX).
 * Symbols stay at the position of their first byte, linked by nx/pv;
 * rk[i] is the rank of the pair starting at position i, RANK_NONE for dead
 * positions and the last symbol, so a plain scan of rk finds the leftmost
 * lowest pair without compacting anything.  Equal to merge_literal only in
 * trained order (see bpe.h).
 */
static size_t merge_short(const bpe *b, const unsigned char *p, size_t n, uint32_t *sym)
{
    uint32_t rk[SHORT_MAX];
    uint8_t nx[SHORT_MAX], pv[SHORT_MAX];
    for (size_t i = 0; i < n; i++) {
        sym[i] = b->byte_id[p[i]];
        nx[i] = (uint8_t)(i + 1);
        pv[i] = (uint8_t)(i - 1);
    }
    for (size_t i = 0; i + 1 < n; i++)
        rk[i] = b->byte_rank[p[i] << 8 | p[i + 1]];
    rk[n - 1] = RANK_NONE;
    for (;;) {
        /* (rank, position) as one integer: a branch-free min picks the leftmost lowest */
        uint64_t lo = UINT64_MAX;
        for (size_t t = 0; t + 1 < n; t++) {
            uint64_t v = (uint64_t)rk[t] << 8 | t;
            lo = v < lo ? v : lo;
        }
        uint32_t best = (uint32_t)(lo >> 8);
        if (best == RANK_NONE)
            break;
        size_t i = lo & 0xFF, j = nx[i], k = nx[j];
        sym[i] = b->merged_id[best];
        rk[j] = RANK_NONE;
        nx[i] = (uint8_t)k;
        if (k < n) {
            pv[k] = (uint8_t)i;
            rk[i] = pair_rank(b, sym[i], sym[k]);
        } else {
            rk[i] = RANK_NONE;
        }
        if (i > 0)
            rk[pv[i]] = pair_rank(b, sym[pv[i]], sym[i]);
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i = nx[i])
        sym[m++] = sym[i]; /* m <= i: in place */
    return m;
}

static void heap_down(uint64_t *h, size_t n, size_t i)
{
    uint64_t v = h[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && h[c + 1] < h[c])
            c++;
        if (h[c] >= v)
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
}

static void heap_push(uint64_t *h, size_t *n, uint64_t v)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (h[parent] <= v)
            break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = v;
}

/* bytes of scratch merge_heap needs for n bytes, or 0 if n is too large */
static size_t heap_scratch_bytes(size_t n)
{
    if (n >= UINT32_MAX || n > SIZE_MAX / 40)
        return 0;
    return n * (2 * sizeof(uint64_t) + 4 * sizeof(uint32_t));
}

/*
 * Leftmost lowest rank, one merge at a time, for long pieces: O(n log n).
 * Symbols form a linked list over the original byte positions (a merge keeps
 * the left node), and the heap holds (rank << 32 | position) of pairs, so the
 * minimum is the lowest rank and, among equal ranks, the leftmost.  Entries
 * go stale when a neighbour merges; rk[] tells (a rank names one pair).  A
 * merge pops one entry and pushes at most two, so the heap never exceeds 2n.
 */
static size_t merge_heap(const bpe *b, void *mem, const unsigned char *p, size_t n, uint32_t *out)
{
    uint64_t *heap = mem;                     /* (2n) */
    uint32_t *id = (uint32_t *)(heap + 2 * n); /* (n) symbol at a node */
    uint32_t *nx = id + n;                    /* (n) next node, ID_NONE at the end */
    uint32_t *pv = nx + n;                    /* (n) previous node, ID_NONE at the start */
    uint32_t *rk = pv + n;                    /* (n) rank of (node, next), RANK_NONE if none */
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        id[i] = b->byte_id[p[i]];
        nx[i] = (uint32_t)(i + 1);
        pv[i] = (uint32_t)(i - 1);
    }
    nx[n - 1] = ID_NONE;
    pv[0] = ID_NONE;
    rk[n - 1] = RANK_NONE;
    for (size_t i = 0; i + 1 < n; i++) {
        rk[i] = pair_rank(b, id[i], id[i + 1]);
        if (rk[i] != RANK_NONE)
            heap[hn++] = (uint64_t)rk[i] << 32 | i;
    }
    for (size_t i = hn / 2; i-- > 0;)
        heap_down(heap, hn, i);
    while (hn > 0) {
        uint64_t top = heap[0];
        heap[0] = heap[--hn];
        heap_down(heap, hn, 0);
        uint32_t r = (uint32_t)(top >> 32), i = (uint32_t)top;
        if (rk[i] != r)
            continue;
        uint32_t j = nx[i], k = nx[j];
        id[i] = b->merged_id[r];
        nx[i] = k;
        if (k != ID_NONE)
            pv[k] = i;
        rk[j] = RANK_NONE;
        rk[i] = k != ID_NONE ? pair_rank(b, id[i], id[k]) : RANK_NONE;
        if (rk[i] != RANK_NONE)
            heap_push(heap, &hn, (uint64_t)rk[i] << 32 | i);
        uint32_t q = pv[i];
        if (q != ID_NONE) {
            rk[q] = pair_rank(b, id[q], id[i]);
            if (rk[q] != RANK_NONE)
                heap_push(heap, &hn, (uint64_t)rk[q] << 32 | q);
        }
    }
    size_t m = 0;
    for (uint32_t i = 0; i != ID_NONE; i = nx[i])
        out[m++] = id[i];
    return m;
}

static void *scratch_get(struct scratch *s, size_t bytes)
{
    if (s->bytes >= bytes)
        return s->mem;
    size_t want = 4096;
    while (want < bytes && want <= SIZE_MAX / 2)
        want *= 2;
    if (want < bytes)
        want = bytes;
    free(s->mem);
    s->mem = malloc(want);
    s->bytes = s->mem ? want : 0;
    return s->mem;
}

static void scratch_trim(struct scratch *s)
{
    if (s->bytes > SCRATCH_KEEP) {
        free(s->mem);
        s->mem = NULL;
        s->bytes = 0;
    }
}

/* one part of a piece (n >= 2) by the merge loops */
static size_t merge_part(const bpe *b, struct scratch *s, const unsigned char *p, size_t n, uint32_t *out)
{
    if (!(b->flags & BPE_FLAG_TRAINED_ORDER))
        return merge_literal(b, p, n, out);
    if (n <= SHORT_MAX)
        return merge_short(b, p, n, out);
    size_t bytes = heap_scratch_bytes(n);
    void *mem = bytes ? scratch_get(s, bytes) : NULL;
    if (!mem)
        return merge_literal(b, p, n, out);
    size_t m = merge_heap(b, mem, p, n, out);
    scratch_trim(s);
    return m;
}

/*
 * BPE with no whole-piece shortcut and no cache.  The piece is first cut
 * between every two adjacent bytes that occur next to each other in no token:
 * a merge across such a cut would make a token containing them, so no merge
 * ever crosses it, and encoder.py's result is the concatenation of the
 * results of the parts (its steps restricted to one part are that part's own
 * steps, since a rank names one pair).  A part of one byte or that is a token
 * encoding to itself needs no merging.
 */
static size_t merge_any(const bpe *b, struct scratch *s, const unsigned char *p, size_t n, uint32_t *out)
{
    if (n <= 1) {
        if (n == 1)
            out[0] = b->byte_id[p[0]];
        return n;
    }
    size_t m = 0, start = 0;
    for (size_t i = 1; i <= n; i++) {
        if (i < n) {
            unsigned k = (unsigned)p[i - 1] << 8 | p[i];
            if (b->pair_in_token[k >> 6] >> (k & 63) & 1)
                continue;
        }
        size_t len = i - start;
        const unsigned char *q = p + start;
        start = i;
        if (len == 1) {
            out[m++] = b->byte_id[q[0]];
            continue;
        }
        if (len < n && len <= b->max_len) {
            uint64_t k8 = key8(q, len);
            uint32_t v = vocab_find(b, q, len, hash_piece(q, len, k8), k8);
            if (v != ID_NONE && (v & SELF_FLAG)) {
                out[m++] = v & ~SELF_FLAG;
                continue;
            }
        }
        m += merge_part(b, s, q, len, out + m);
    }
    return m;
}

/* ------------------------------------------------------------------------- */
/* encode / decode                                                            */

size_t bpe_encode_piece(const bpe *b, bpe_cache *c, const unsigned char *piece, size_t n, uint32_t *out)
{
    if (n <= 1) {
        if (n == 1)
            out[0] = b->byte_id[piece[0]];
        return n;
    }
    uint64_t h = 0;
    int hashed = 0;
    if (n <= b->max_len) {
        uint64_t k8 = key8(piece, n);
        h = hash_piece(piece, n, k8);
        hashed = 1;
        uint32_t v = vocab_find(b, piece, n, h, k8);
        if (v != ID_NONE && (v & SELF_FLAG)) {
            out[0] = v & ~SELF_FLAG;
            return 1;
        }
    }
    if (!c) {
        struct scratch s = { NULL, 0 };
        size_t m = merge_any(b, &s, piece, n, out);
        free(s.mem);
        return m;
    }
    unsigned char *slot = NULL;
    const struct cache_class *cls = &c->cls[n > cache_shape[0][0]];
    if (cls->slots && n <= cls->key_max) {
        if (c->owner != b->serial) {
            for (int k = 0; k < 2; k++)
                memset(c->cls[k].slots, 0, (c->cls[k].mask + 1) * c->cls[k].slot_size);
            c->owner = b->serial;
        }
        if (!hashed)
            h = hash_piece(piece, n, key8(piece, n));
        slot = cls->slots + (h & cls->mask) * cls->slot_size;
        uint32_t tag;
        memcpy(&tag, slot, 4);
        if (slot[4] == n && tag == (uint32_t)(h >> 32) && memcmp(slot + 8, piece, n) == 0) {
            memcpy(out, slot + 8 + cls->key_max, slot[5] * sizeof *out);
            return slot[5];
        }
    }
    size_t m = merge_any(b, &c->scratch, piece, n, out);
    if (slot && m <= cls->ids_max) {
        uint32_t tag = (uint32_t)(h >> 32);
        memcpy(slot, &tag, 4);
        slot[4] = (unsigned char)n;
        slot[5] = (unsigned char)m;
        memcpy(slot + 8, piece, n);
        memcpy(slot + 8 + cls->key_max, out, m * sizeof *out);
    }
    return m;
}

size_t bpe_encode_piece_with(const bpe *b, int method, const unsigned char *piece, size_t n, uint32_t *out)
{
    if (!b || !piece || !out || n == 0)
        return 0;
    if (n == 1) {
        out[0] = b->byte_id[piece[0]];
        return 1;
    }
    struct scratch s = { NULL, 0 };
    size_t m = 0;
    switch (method) {
    case BPE_METHOD_LITERAL:
        m = merge_literal(b, piece, n, out);
        break;
    case BPE_METHOD_MERGE:
        if (!(b->flags & BPE_FLAG_TRAINED_ORDER))
            break;
        if (n <= SHORT_MAX) {
            m = merge_short(b, piece, n, out);
        } else {
            size_t bytes = heap_scratch_bytes(n);
            void *mem = bytes ? scratch_get(&s, bytes) : NULL;
            m = mem ? merge_heap(b, mem, piece, n, out) : 0;
        }
        break;
    case BPE_METHOD_SPLIT:
        m = merge_any(b, &s, piece, n, out);
        break;
    default:
        break;
    }
    free(s.mem);
    return m;
}

size_t bpe_decode_bound(const bpe *b, size_t nids)
{
    if (b->max_len && nids > SIZE_MAX / b->max_len)
        return SIZE_MAX;
    return nids * b->max_len;
}

int bpe_decode(const bpe *b, const uint32_t *ids, size_t n, unsigned char *out, size_t cap, size_t *outlen)
{
    if (!b || !outlen || (n && !ids) || (cap && !out))
        return BPE_ERR_ARG;
    *outlen = 0;
    size_t need = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= b->n)
            return BPE_ERR_BAD_ID;
        need += b->tok_off[ids[i] + 1] - b->tok_off[ids[i]];
    }
    if (need > cap) {
        *outlen = need;
        return BPE_ERR_BUFFER;
    }
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t off = b->tok_off[ids[i]], len = b->tok_off[ids[i] + 1] - off;
        memcpy(out + w, b->blob + off, len);
        w += len;
    }
    *outlen = w;
    return BPE_OK;
}

size_t bpe_vocab_size(const bpe *b) { return b->n; }
size_t bpe_max_token_len(const bpe *b) { return b->max_len; }
unsigned bpe_flags(const bpe *b) { return b->flags; }

int32_t bpe_token_id(const bpe *b, const char *bytes, size_t len)
{
    const unsigned char *p = (const unsigned char *)bytes;
    if (len == 0 || len > b->max_len)
        return -1;
    uint64_t k8 = key8(p, len);
    uint32_t v = vocab_find(b, p, len, hash_piece(p, len, k8), k8);
    return v == ID_NONE ? -1 : (int32_t)(v & ~SELF_FLAG);
}

const unsigned char *bpe_token_bytes(const bpe *b, uint32_t id, size_t *len)
{
    if (id >= b->n) {
        *len = 0;
        return NULL;
    }
    *len = b->tok_off[id + 1] - b->tok_off[id];
    return b->blob + b->tok_off[id];
}

int bpe_cache_new(bpe_cache **out, size_t max_entries)
{
    if (!out)
        return BPE_ERR_ARG;
    *out = NULL;
    if (max_entries > CACHE_SLOTS_MAX)
        return BPE_ERR_ARG;
    bpe_cache *c = calloc(1, sizeof *c);
    if (!c)
        return BPE_ERR_NOMEM;
    if (max_entries) {
        size_t slots = 1;
        while (slots < max_entries)
            slots *= 2;
        for (int k = 0; k < 2; k++) {
            struct cache_class *cls = &c->cls[k];
            size_t count = k == 0 ? slots : slots / CACHE_BIG_RATIO < 16 ? 16 : slots / CACHE_BIG_RATIO;
            cls->key_max = cache_shape[k][0];
            cls->ids_max = cache_shape[k][1];
            cls->slot_size = 8 + cls->key_max + 4 * cls->ids_max;
            cls->mask = count - 1;
            cls->slots = calloc(count, cls->slot_size);
            if (!cls->slots) {
                bpe_cache_free(c);
                return BPE_ERR_NOMEM;
            }
        }
    }
    *out = c;
    return BPE_OK;
}

void bpe_cache_free(bpe_cache *c)
{
    if (!c)
        return;
    free(c->cls[0].slots);
    free(c->cls[1].slots);
    free(c->scratch.mem);
    free(c);
}

const char *bpe_strerror(int code)
{
    switch (code) {
    case BPE_OK: return "success";
    case BPE_ERR_IO: return "cannot read file";
    case BPE_ERR_NOMEM: return "out of memory";
    case BPE_ERR_VOCAB: return "invalid vocab file";
    case BPE_ERR_MERGES: return "invalid merges file";
    case BPE_ERR_BAD_ID: return "token id out of range";
    case BPE_ERR_BUFFER: return "output buffer too small";
    case BPE_ERR_ARG: return "invalid argument";
    default: return "unknown error";
    }
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
    *out = NULL;
    *outlen = 0;
    FILE *f = fopen(path, "rb");
    RETURN_ERROR_IF(!f, BPE_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    size_t cap = 1 << 20, len = 0;
    unsigned char *buf = malloc(cap + 1);
    while (buf) {
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap)
            break;
        unsigned char *nb = cap <= SIZE_MAX / 4 ? realloc(buf, cap * 2 + 1) : NULL;
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    RETURN_ERROR_IF(!buf, BPE_ERR_NOMEM, "out of memory reading '%s'", path);
    if (err) {
        free(buf);
        return set_error(x, BPE_ERR_IO, "cannot read '%s'", path);
    }
    buf[len] = 0;
    *out = buf;
    *outlen = len;
    return BPE_OK;
}

/* Decodes one UTF-8 sequence at p (strict: no overlongs, surrogates or values
 * past U+10FFFF).  Returns its length, or 0 if invalid. */
static size_t utf8_decode(const unsigned char *p, const unsigned char *end, uint32_t *cp)
{
    unsigned c = p[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; v = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; v = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; v = c & 0x07; min = 0x10000; }
    else return 0;
    if ((size_t)(end - p) < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        v = v << 6 | (p[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return len;
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
    size_t i = (size_t)(hash_piece(p, n, k8) >> b->vt_shift);
    for (;;) {
        const struct vocab_slot *s = &b->vt[i];
        if (s->len == 0 || (s->len == n && s->k8 == k8 &&
            memcmp(p, b->blob + b->tok_off[s->val & ~SELF_FLAG], n) == 0))
            return i;
        i = (i + 1) & b->vt_mask;
    }
}

static uint32_t vocab_id(const bpe *b, const unsigned char *p, size_t n)
{
    if (n == 0 || n > b->max_len)
        return ID_NONE;
    const struct vocab_slot *s = &b->vt[vocab_slot_index(b, p, n)];
    return s->len ? s->val & ~SELF_FLAG : ID_NONE;
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
    b->vt = calloc(table_size(n), sizeof *b->vt);
    ERROR_GOTO_IF(!by_id || !b->tok_off || !b->blob || !b->vt, BPE_ERR_NOMEM,
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
    b->vt_mask = table_size(n) - 1;
    b->vt_shift = table_shift(b->vt_mask + 1);
    for (size_t id = 0; id < n; id++) {
        const unsigned char *p = b->blob + b->tok_off[id];
        size_t len = b->tok_off[id + 1] - b->tok_off[id];
        struct vocab_slot *s = &b->vt[vocab_slot_index(b, p, len)];
        ERROR_GOTO_IF(s->len != 0, BPE_ERR_VOCAB,
                      "invalid vocab '%s': line %u: duplicate token '%s' (also line %u)", vp->path,
                      vp->ents[by_id[id]].line, show_token(show, sizeof show, p, len),
                      vp->ents[by_id[s->val]].line);
        s->k8 = key8(p, len);
        s->val = (uint32_t)id;
        s->len = (uint32_t)len;
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
        uint32_t cp;
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

/* Marks the tokens whose own bytes BPE-encode to exactly themselves. */
static int mark_self_encoding(struct load_ctx *x, bpe *b, const char *path)
{
    struct scratch s = { NULL, 0 };
    uint32_t *tmp = malloc(b->max_len * sizeof *tmp);
    RETURN_ERROR_IF(!tmp, BPE_ERR_NOMEM, "out of memory loading '%s'", path);
    for (size_t id = 0; id < b->n; id++) {
        const unsigned char *p = b->blob + b->tok_off[id];
        size_t len = b->tok_off[id + 1] - b->tok_off[id];
        size_t m = merge_any(b, &s, p, len, tmp);
        if (m == 1 && tmp[0] == id)
            b->vt[vocab_slot_index(b, p, len)].val |= SELF_FLAG;
    }
    free(s.mem);
    free(tmp);
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
