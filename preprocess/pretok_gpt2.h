/*
 * pretok_gpt2.h - the GPT-2 scanner's inline parts, for pretok.c (which
 * builds the other scanners from the same pieces) and for the tokenize loop
 * (tokenize.c), which runs it without a call per piece.
 * Internal to preprocess/; the contracts are pretok.h's.
 */
#ifndef MDS_PRETOK_GPT2_H
#define MDS_PRETOK_GPT2_H

#include "pretok.h"
#include "utf8.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

/* Two-stage class tables: stage1[cp >> 8] selects a 256-entry block of
 * stage2.  Identical blocks are shared, so a whole table is ~100 KB.  Two
 * sets: Unicode 15.0 (unitab.c, the `regex` module of Megatron's legacy
 * tokenizer) and Unicode 16.0 (hftab.c, the Oniguruma of HuggingFace
 * tokenizers); the scanners are written once against a `struct classes`
 * and instantiated for each. */
#define NPLANES_BLOCKS (0x110000 >> 8)
struct classes {
    uint16_t stage1[NPLANES_BLOCKS];
    uint8_t *stage2;
    uint8_t ascii[128];
    atomic_int ready;   /* 1 once the rest is built (stored with release: see classes_ready) */
};
/* GPT-2's classes (Unicode 15.0), built by pretok_init(). */
extern struct classes pretok_c15;

/* Whether t is built: an acquire load, so that a thread that sees 1 also
 * sees the tables (a check of stage2 alone, without it, was a data race
 * with the thread building them); else the caller runs the pthread_once
 * that builds it. */
static inline int classes_ready(struct classes *t) { return atomic_load_explicit(&t->ready, memory_order_acquire); }

static inline int class_of(const struct classes *t, uint32_t cp)
{
    if (cp < 128) return t->ascii[cp];
    if (cp >= 0x110000) return PRETOK_OTHER;
    return t->stage2[(size_t)t->stage1[cp >> 8] * 256 + (cp & 0xFF)];
}

static inline int class_at(const struct classes *t, const unsigned char *s, size_t n, size_t i, size_t *len)
{
    unsigned c = s[i];
    if (c < 0x80) { *len = 1; return t->ascii[c]; }
    uint32_t cp;
    *len = utf8_next(s, n, i, &cp, 0x110000);   /* bad input: class OTHER */
    return class_of(t, cp);
}

/* The end of the whitespace run starting at i (a whitespace character),
 * and the start of its last character in *last. */
static inline size_t space_run(const struct classes *t, const unsigned char *s, size_t n, size_t i, size_t len,
                               size_t *last)
{
    *last = i;
    i += len;
    while (i < n && class_at(t, s, n, i, &len) == PRETOK_SPACE) {
        *last = i;
        i += len;
    }
    return i;
}

/* The end of the run of ASCII letters [A-Za-z] from i, eight bytes at a
 * time while eight are left (every class table here has exactly these 52
 * ASCII letters); the caller goes on byte by byte from there. */
static inline size_t ascii_letters(const unsigned char *s, size_t n, size_t i)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint64_t H = 0x8080808080808080ull, L = 0x7F7F7F7F7F7F7F7Full;
    while (n - i >= 8) {
        uint64_t x;
        memcpy(&x, s + i, 8);
        /* per byte: folded to lower case (ASCII bits only, no carries),
           then >= 'a' and <= 'z' and ASCII, each in the byte's top bit */
        uint64_t a = (x & L) | 0x2020202020202020ull;
        uint64_t letter = (a + 0x1F1F1F1F1F1F1F1Full) & ~(a + 0x0505050505050505ull) & ~x & H;
        uint64_t stop = ~letter & H;
        if (stop) return i + (size_t)__builtin_ctzll(stop) / 8;
        i += 8;
    }
#else
    (void)s;
    (void)n;
#endif
    return i;
}

/* The end of the run of letters (class LETTER in t) from i: ASCII ones
 * eight bytes at a time first (most words end inside the first eight, a
 * branch the predictor gets right, where a byte loop's end is data), then
 * byte by byte from the first byte that is not one. */
static inline size_t letters(const struct classes *t, const unsigned char *s, size_t n, size_t i)
{
    size_t len;
    i = ascii_letters(s, n, i);
    while (i < n) {
        unsigned b = s[i];
        if (b < 0x80) {
            if (t->ascii[b] != PRETOK_LETTER) break;
            i++;
        } else {
            if (class_at(t, s, n, i, &len) != PRETOK_LETTER) break;
            i += len;
        }
    }
    return i;
}

/* The GPT-2 pattern (pretok.h), with the classes of t. */
static inline __attribute__((always_inline)) size_t gpt2_next(const struct classes *t, const unsigned char *s, size_t n, size_t pos)
{
    size_t i = pos, len;
    unsigned c = s[i];

    if (c == '\'' && i + 1 < n) {
        unsigned d = s[i + 1];
        if (d == 's' || d == 't' || d == 'm' || d == 'd') return i + 2;
        if (i + 2 < n) {
            unsigned e = s[i + 2];
            if ((d == 'r' && e == 'e') || (d == 'v' && e == 'e') || (d == 'l' && e == 'l'))
                return i + 3;
        }
    }

    int k = class_at(t, s, n, i, &len);
    if (c == ' ' && i + 1 < n) {
        size_t len2;
        int k2 = class_at(t, s, n, i + 1, &len2);
        if (k2 != PRETOK_SPACE) {
            k = k2;
            i += 1;
            len = len2;
        }
    }
    if (k != PRETOK_SPACE) {
        i += len;
        if (k == PRETOK_LETTER) return letters(t, s, n, i);
        while (i < n && class_at(t, s, n, i, &len) == k) i += len;
        return i;
    }

    /* Whitespace run [pos, end); last = start of its last character. */
    size_t last;
    i = space_run(t, s, n, i, len, &last);
    if (i == n) return n;
    return last > pos ? last : i;
}

#endif
