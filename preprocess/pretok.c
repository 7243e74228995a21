/*
 * pretok.c - GPT-2 pre-tokenizer: the hand-written scanner and the PCRE2
 * reference.  See pretok.h for the contract.
 *
 * The scanner walks the alternatives of the pattern in order at each piece
 * start, which is what a backtracking regex does:
 *   1. a contraction: an ASCII apostrophe followed by s t m d (2 bytes) or
 *      re ve ll (3 bytes), lowercase only;
 *   2. an optional ASCII space, then a run of letters, or of numbers, or of
 *      "other" characters (not space, letter or number) - the class of the
 *      first character after the optional space picks the run;
 *   3. otherwise we are on whitespace: the run of whitespace W.  If W reaches
 *      the end of the text, the piece is W (the lookahead (?!\S) succeeds at
 *      the end).  Otherwise \s+(?!\S) backtracks one character, leaving the
 *      last whitespace character to start the next piece; when W is a single
 *      character that fails and \s+ takes it alone.
 * It does not validate UTF-8: its input comes from the JSON decoder, which
 * did.  Class lookups go through a two-stage table built once from unitab.c.
 *
 * The PCRE2 reference is compiled only when the Makefile found PCRE2
 * (MDS_HAVE_PCRE2); without it pretok_pcre2_new() fails with a message that
 * says so, and the scanner is unaffected.
 */
#include "pretok.h"
#include "unitab.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef MDS_HAVE_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

/* Two-stage class table: stage1[cp >> 8] selects a 256-entry block of
 * stage2.  Identical blocks are shared, so the whole table is ~100 KB. */
#define NPLANES_BLOCKS (0x110000 >> 8)
static uint16_t stage1[NPLANES_BLOCKS];
static uint8_t *stage2;
static uint8_t ascii_class[128];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void fill(uint8_t *cls, const uint32_t (*r)[2], size_t n, uint8_t v)
{
    for (size_t i = 0; i < n; i++)
        for (uint32_t c = r[i][0]; c <= r[i][1] && c < 0x110000; c++)
            cls[c] = v;
}

static void build_tables(void)
{
    uint8_t *cls = calloc(0x110000, 1);
    uint8_t *blocks = malloc((size_t)NPLANES_BLOCKS * 256);
    if (!cls || !blocks) {
        /* Out of memory at start-up: nothing sensible to do in a library
         * without an error channel here; every class becomes OTHER through
         * a single shared zero block (the class tests would fail loudly). */
        free(cls);
        free(blocks);
        static uint8_t zero[256];
        stage2 = zero;
        return;
    }
    fill(cls, unitab_letter, unitab_letter_len, PRETOK_LETTER);
    fill(cls, unitab_number, unitab_number_len, PRETOK_NUMBER);
    fill(cls, unitab_space, unitab_space_len, PRETOK_SPACE);
    size_t nblocks = 0;
    for (size_t b = 0; b < NPLANES_BLOCKS; b++) {
        const uint8_t *blk = cls + b * 256;
        size_t k;
        for (k = 0; k < nblocks; k++)
            if (memcmp(blocks + k * 256, blk, 256) == 0) break;
        if (k == nblocks) memcpy(blocks + nblocks++ * 256, blk, 256);
        stage1[b] = (uint16_t)k;
    }
    for (int c = 0; c < 128; c++) ascii_class[c] = cls[c];
    free(cls);
    uint8_t *shrunk = realloc(blocks, nblocks * 256);
    stage2 = shrunk ? shrunk : blocks;
}

void pretok_init(void)
{
    pthread_once(&tables_once, build_tables);
}

static inline int class_of(uint32_t cp)
{
    if (cp < 128) return ascii_class[cp];
    if (cp >= 0x110000) return PRETOK_OTHER;
    return stage2[(size_t)stage1[cp >> 8] * 256 + (cp & 0xFF)];
}

int pretok_class(uint32_t cp)
{
    pretok_init();
    return class_of(cp);
}

/* Decodes the (valid) UTF-8 character at s[i] into *cp; returns its length.
 * A truncated sequence at the end of the buffer is treated as one OTHER
 * byte, so the scanner stays in bounds even on bad input. */
static inline size_t decode(const unsigned char *s, size_t n, size_t i, uint32_t *cp)
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
    *cp = 0x110000;      /* not a character: class OTHER */
    return 1;
}

static inline int class_at(const unsigned char *s, size_t n, size_t i, size_t *len)
{
    unsigned c = s[i];
    if (c < 0x80) { *len = 1; return ascii_class[c]; }
    uint32_t cp;
    *len = decode(s, n, i, &cp);
    return class_of(cp);
}

size_t pretok_next(const unsigned char *s, size_t n, size_t pos)
{
    if (!stage2) pretok_init();
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

    int k = class_at(s, n, i, &len);
    if (c == ' ' && i + 1 < n) {
        size_t len2;
        int k2 = class_at(s, n, i + 1, &len2);
        if (k2 != PRETOK_SPACE) {
            k = k2;
            i += 1;
            len = len2;
        }
    }
    if (k != PRETOK_SPACE) {
        i += len;
        if (k == PRETOK_LETTER) {
            /* ASCII letters are the common case: a tight loop first. */
            while (i < n) {
                unsigned b = s[i];
                if (b < 0x80) {
                    if (ascii_class[b] != PRETOK_LETTER) break;
                    i++;
                } else {
                    if (class_at(s, n, i, &len) != PRETOK_LETTER) break;
                    i += len;
                }
            }
            return i;
        }
        while (i < n && class_at(s, n, i, &len) == k) i += len;
        return i;
    }

    /* Whitespace run [pos, end); last = start of its last character. */
    size_t last = i;
    i += len;
    while (i < n && class_at(s, n, i, &len) == PRETOK_SPACE) {
        last = i;
        i += len;
    }
    if (i == n) return n;
    return last > pos ? last : i;
}

/* ---- PCRE2 reference ---------------------------------------------------- */

#ifdef MDS_HAVE_PCRE2
struct pretok_pcre2 {
    pcre2_code *code;
    pcre2_match_data *md;
    int jit;
};
#endif

static char *pattern;
static pthread_once_t pattern_once = PTHREAD_ONCE_INIT;

static size_t put_ranges(char *p, const uint32_t (*r)[2], size_t n)
{
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (p)
            w += (size_t)sprintf(p + w, r[i][0] == r[i][1] ? "\\x{%X}" : "\\x{%X}-\\x{%X}", r[i][0], r[i][1]);
        else
            w += 24;
    }
    return w;
}

static void build_pattern(void)
{
    size_t nl = put_ranges(NULL, unitab_letter, unitab_letter_len);
    size_t nn = put_ranges(NULL, unitab_number, unitab_number_len);
    size_t ns = put_ranges(NULL, unitab_space, unitab_space_len);
    size_t cap = 256 + 2 * nl + 2 * nn + 5 * ns;
    char *p = malloc(cap);
    if (!p) return;
    size_t w = 0;
    char *L = malloc(nl + 1), *N = malloc(nn + 1), *S = malloc(ns + 1);
    if (!L || !N || !S) { free(L); free(N); free(S); free(p); return; }
    L[put_ranges(L, unitab_letter, unitab_letter_len)] = 0;
    N[put_ranges(N, unitab_number, unitab_number_len)] = 0;
    S[put_ranges(S, unitab_space, unitab_space_len)] = 0;
    w += (size_t)sprintf(p + w, "'s|'t|'re|'ve|'m|'ll|'d");
    w += (size_t)sprintf(p + w, "| ?[%s]+", L);
    w += (size_t)sprintf(p + w, "| ?[%s]+", N);
    w += (size_t)sprintf(p + w, "| ?[^%s%s%s]+", S, L, N);
    w += (size_t)sprintf(p + w, "|[%s]+(?![^%s])", S, S);
    w += (size_t)sprintf(p + w, "|[%s]+", S);
    free(L); free(N); free(S);
    pattern = p;
}

const char *pretok_pcre2_pattern(void)
{
    pthread_once(&pattern_once, build_pattern);
    return pattern;
}

int pretok_have_pcre2(void)
{
#ifdef MDS_HAVE_PCRE2
    return 1;
#else
    return 0;
#endif
}

#ifdef MDS_HAVE_PCRE2
int pretok_pcre2_new(pretok_pcre2 **out, char *err, size_t errlen)
{
    *out = NULL;
    const char *pat = pretok_pcre2_pattern();
    if (!pat) { snprintf(err, errlen, "out of memory"); return -1; }
    pretok_pcre2 *p = calloc(1, sizeof *p);
    if (!p) { snprintf(err, errlen, "out of memory"); return -1; }
    int ec; PCRE2_SIZE eo;
    p->code = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_NO_UTF_CHECK,
                            &ec, &eo, NULL);
    if (!p->code) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        snprintf(err, errlen, "pcre2: %s at pattern offset %zu", (char *)msg, (size_t)eo);
        free(p);
        return -1;
    }
    p->jit = pcre2_jit_compile(p->code, PCRE2_JIT_COMPLETE) == 0;
    p->md = pcre2_match_data_create_from_pattern(p->code, NULL);
    if (!p->md) {
        pcre2_code_free(p->code);
        free(p);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    *out = p;
    return 0;
}

size_t pretok_pcre2_next(pretok_pcre2 *p, const unsigned char *s, size_t n, size_t pos)
{
    /* PCRE2_NO_UTF_CHECK: by default every call validates the subject from
     * pos to its end, O(n) per piece and O(n^2) per document.  The text was
     * validated once, by the JSON decoder. */
    int rc = p->jit ? pcre2_jit_match(p->code, s, n, pos, PCRE2_NO_UTF_CHECK, p->md, NULL)
                    : pcre2_match(p->code, s, n, pos, PCRE2_NO_UTF_CHECK, p->md, NULL);
    if (rc < 0) return pos + 1;     /* cannot happen: \s+ or "other" always matches */
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(p->md);
    if (ov[0] != pos) return pos + 1;   /* likewise: every character starts a piece */
    return ov[1] > pos ? ov[1] : pos + 1;
}

void pretok_pcre2_free(pretok_pcre2 *p)
{
    if (!p) return;
    pcre2_match_data_free(p->md);
    pcre2_code_free(p->code);
    free(p);
}

#else /* !MDS_HAVE_PCRE2: no handle can exist */

int pretok_pcre2_new(pretok_pcre2 **out, char *err, size_t errlen)
{
    *out = NULL;
    snprintf(err, errlen, "pcre2: this build has no PCRE2 (install libpcre2-dev and rebuild)");
    return -1;
}

size_t pretok_pcre2_next(pretok_pcre2 *p, const unsigned char *s, size_t n, size_t pos)
{
    (void)p;
    (void)s;
    (void)n;
    return pos + 1;
}

void pretok_pcre2_free(pretok_pcre2 *p)
{
    (void)p;
}
#endif
