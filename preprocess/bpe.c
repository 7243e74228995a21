/*
 * bpe.c - exact GPT-2 byte-level BPE (encoder.py semantics) on raw bytes:
 * encoding and decoding over the read-only tables that bpe_load.c builds
 * (their layout is in bpe_internal.h).
 *
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
 * It does not read files or parse the vocab and merges (bpe_load.c), and it
 * does not pre-tokenize, validate text, handle special tokens or print.
 */
#include "bpe.h"
#include "bpe_internal.h"

#include <stdlib.h>
#include <string.h>

#define SHORT_MAX 64                 /* longest piece for the array scan */
#define CACHE_SLOTS_MAX (1u << 24)
#define CACHE_BIG_RATIO 8            /* one big cache slot per this many small ones */
#define SCRATCH_KEEP ((size_t)4 << 20) /* long-piece scratch kept between calls */

/* ------------------------------------------------------------------------- */
/* the per-thread cache and scratch                                           */

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

/*
 * Leftmost lowest rank, one merge at a time, in place and without scratch:
 * O(n^2).  The fallback of HuggingFace semantics (BPE_BUILD_HF) when scratch
 * memory for merge_heap cannot be had; merge_literal is not an option there,
 * since it equals this only in trained order.
 */
static size_t merge_inplace(const bpe *b, const unsigned char *p, size_t n, uint32_t *sym)
{
    for (size_t i = 0; i < n; i++)
        sym[i] = b->byte_id[p[i]];
    size_t m = n;
    while (m > 1) {
        uint32_t best = RANK_NONE;
        size_t at = 0;
        for (size_t i = 0; i + 1 < m; i++) {
            uint32_t r = pair_rank(b, sym[i], sym[i + 1]);
            if (r < best) {
                best = r;
                at = i;
            }
        }
        if (best == RANK_NONE)
            break;
        sym[at] = b->merged_id[best];
        memmove(sym + at + 1, sym + at + 2, (m - at - 2) * sizeof *sym);
        m--;
    }
    return m;
}

/* one part of a piece (n >= 2) by the merge loops */
static size_t merge_part(const bpe *b, struct scratch *s, const unsigned char *p, size_t n, uint32_t *out)
{
    if (!(b->flags & BPE_FLAG_TRAINED_ORDER) && !b->hf)
        return merge_literal(b, p, n, out);
    if (n <= SHORT_MAX)
        return merge_short(b, p, n, out);
    size_t bytes = heap_scratch_bytes(n);
    void *mem = bytes ? scratch_get(s, bytes) : NULL;
    if (!mem)
        return b->hf ? merge_inplace(b, p, n, out) : merge_literal(b, p, n, out);
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
                out[m++] = v & ID_MASK;
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
    return bpe_encode_piece_inline(b, c, piece, n, out);
}

/* Paths 3 to 6 (the file's comment) of a piece of n >= 2 bytes that is no
 * self-encoding token. */
size_t bpe_encode_piece_rest(const bpe *b, bpe_cache *c, const unsigned char *piece, size_t n, uint32_t *out,
                             uint64_t h, int hashed)
{
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
        if (slot[4] == n && tag == (uint32_t)(h >> 32) && bytes_eq(slot + 8, piece, n)) {
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
        if (!(b->flags & BPE_FLAG_TRAINED_ORDER) && !b->hf)
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
        if (ids[i] >= b->n || b->tok_off[ids[i] + 1] == b->tok_off[ids[i]])
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
    return v == ID_NONE ? -1 : (int32_t)(v & ID_MASK);
}

const unsigned char *bpe_token_bytes(const bpe *b, uint32_t id, size_t *len)
{
    if (id >= b->n || b->tok_off[id + 1] == b->tok_off[id]) {
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
