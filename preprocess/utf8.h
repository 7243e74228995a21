/*
 * utf8.h - the UTF-8 decoders and encoder the preprocess library shares
 * (static inline: they sit on the tokenizers' hot paths).
 *
 *   utf8_decode()  strict: one sequence at p, no overlongs, surrogates or
 *                  values past U+10FFFF; its length and *cp, or 0 if invalid
 *                  or cut off by end (vocabularies, tokenizer.json strings);
 *   utf8_next()    lenient, for text already validated: the character at
 *                  s[i] without range checks; a lead byte without room for
 *                  its sequence (bad input only) is one byte decoded as bad;
 *   utf8_put()     encodes cp (below 0x110000; a lone surrogate as WTF-8)
 *                  at o and returns its length, 1 to 4;
 *   utf8_count()   the characters in s[0, n) as Python counts a decoded str
 *                  of valid UTF-8: the bytes that are not continuation bytes.
 */
#ifndef MDS_UTF8_H
#define MDS_UTF8_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline size_t utf8_decode(const unsigned char *p, const unsigned char *end, uint32_t *cp)
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

static inline size_t utf8_next(const unsigned char *s, size_t n, size_t i, uint32_t *cp, uint32_t bad)
{
    unsigned c = s[i];
    if (c < 0x80) { *cp = c; return 1; }
    if (c >= 0xF0 && i + 3 < n) {
        *cp = ((c & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) | (s[i + 3] & 0x3Fu);
        return 4;
    }
    if (c >= 0xE0 && c < 0xF0 && i + 2 < n) {
        *cp = ((c & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu);
        return 3;
    }
    if (c >= 0xC0 && c < 0xE0 && i + 1 < n) {
        *cp = ((c & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu);
        return 2;
    }
    *cp = bad;
    return 1;
}

static inline size_t utf8_put(unsigned char *o, uint32_t cp)
{
    if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) { o[0] = (unsigned char)(0xC0 | cp >> 6); o[1] = (unsigned char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12); o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18); o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F)); o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Eight bytes at a time (mdsprep counts every input line for Megatron's
 * progress line, and the byte loop was 9 % of a worker's instructions): bit 7
 * of a byte of t is set for a continuation byte, 10xxxxxx (bit 7 set, bit 6
 * clear: v << 1 moves each byte's bit 6 under its bit 7), and the multiply
 * adds the eight 0/1 bytes into the top byte. */
static inline size_t utf8_count(const unsigned char *s, size_t n)
{
    const uint64_t high = 0x8080808080808080u, ones = 0x0101010101010101u;
    size_t cont = 0, i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, s + i, 8);
        uint64_t t = v & ~(v << 1) & high;
        cont += (size_t)(((t >> 7) * ones) >> 56);
    }
    for (; i < n; i++) cont += (s[i] & 0xC0) == 0x80;
    return n - cont;
}

#endif /* MDS_UTF8_H */
