/*
 * pretok.c - GPT-2 pre-tokenizer: the hand-written scanner and the PCRE2
 * reference; then the tokenizer.json scanners (GPT-2, Llama 3, Qwen2,
 * Tekken) and the general regex engine.  See pretok.h for the contracts.
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
#include "pretok_gpt2.h"
#include "hftab.h"
#include "unitab.h"
#include "utf8.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef MDS_HAVE_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

struct classes pretok_c15;
static struct classes c16, ctk;

static pthread_once_t once15 = PTHREAD_ONCE_INIT, once16 = PTHREAD_ONCE_INIT, oncetk = PTHREAD_ONCE_INIT;

static void fill(uint8_t *cls, const uint32_t (*r)[2], size_t n, uint8_t v)
{
    for (size_t i = 0; i < n; i++)
        for (uint32_t c = r[i][0]; c <= r[i][1] && c < 0x110000; c++)
            cls[c] = v;
}

/* Compresses a full class array into t. */
static void pack(struct classes *t, const uint8_t *cls)
{
    uint8_t *blocks = cls ? malloc((size_t)NPLANES_BLOCKS * 256) : NULL;
    if (!blocks) {
        /* Out of memory at start-up: nothing sensible to do in a library
         * without an error channel here; every class becomes OTHER through
         * a single shared zero block (the class tests would fail loudly). */
        static uint8_t zero[256];
        memset(t->stage1, 0, sizeof t->stage1);
        t->stage2 = zero;
        atomic_store_explicit(&t->ready, 1, memory_order_release);
        return;
    }
    size_t nblocks = 0;
    for (size_t b = 0; b < NPLANES_BLOCKS; b++) {
        const uint8_t *blk = cls + b * 256;
        size_t k;
        for (k = 0; k < nblocks; k++)
            if (memcmp(blocks + k * 256, blk, 256) == 0) break;
        if (k == nblocks) memcpy(blocks + nblocks++ * 256, blk, 256);
        t->stage1[b] = (uint16_t)k;
    }
    for (int c = 0; c < 128; c++) t->ascii[c] = cls[c];
    uint8_t *shrunk = realloc(blocks, nblocks * 256);
    t->stage2 = shrunk ? shrunk : blocks;
    atomic_store_explicit(&t->ready, 1, memory_order_release);
}

static void build15(void)
{
    uint8_t *cls = calloc(0x110000, 1);
    if (cls) {
        fill(cls, unitab_letter, unitab_letter_len, PRETOK_LETTER);
        fill(cls, unitab_number, unitab_number_len, PRETOK_NUMBER);
        fill(cls, unitab_space, unitab_space_len, PRETOK_SPACE);
    }
    pack(&pretok_c15, cls);   /* (NULL: out of memory; see pack()) */
    free(cls);
}

static void build16(void)
{
    uint8_t *cls = calloc(0x110000, 1);
    if (!cls) {
        pack(&c16, NULL);
        return;
    }
    for (size_t i = 0; i < hftab_gc_len; i++) {
        uint32_t g = hftab_gc[i][2];
        uint8_t v = g <= 4 ? PRETOK_LETTER : (g >= 8 && g <= 10) ? PRETOK_NUMBER : PRETOK_OTHER;
        for (uint32_t c = hftab_gc[i][0]; c <= hftab_gc[i][1]; c++)
            cls[c] = v;
    }
    fill(cls, unitab_space, unitab_space_len, PRETOK_SPACE); /* White_Space is the same in 16.0 */
    pack(&c16, cls);
    free(cls);
}

/* The classes of the Tekken pattern, as bits: the sets its alternatives
 * test, so that each test is one AND.  A general category fixes every bit
 * but TK_S (White_Space, which only Zs, Zl, Zp and Cc characters have). */
enum {
    TK_A = 1,    /* [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] */
    TK_B = 2,    /* [\p{Ll}\p{Lm}\p{Lo}\p{M}] */
    TK_P = 4,    /* [^\r\n\p{L}\p{N}] */
    TK_Q = 8,    /* [^\s\p{L}\p{N}] */
    TK_N = 16,   /* \p{N} */
    TK_S = 32    /* \s */
};

static void buildtk(void)
{
    uint8_t *cls = malloc(0x110000);
    if (!cls) {
        pack(&ctk, NULL);
        return;
    }
    memset(cls, TK_P | TK_Q, 0x110000);   /* unassigned (Cn) */
    for (size_t i = 0; i < hftab_gc_len; i++) {
        uint32_t g = hftab_gc[i][2];   /* index into hftab_gc_names: Lu Ll Lt Lm Lo Mn Mc Me Nd Nl No ... */
        uint8_t v = g == 0 || g == 2 ? TK_A : g == 1 ? TK_B : g <= 4 ? TK_A | TK_B :
                    g <= 7 ? TK_A | TK_B | TK_P | TK_Q : g <= 10 ? TK_N : TK_P | TK_Q;
        memset(cls + hftab_gc[i][0], v, hftab_gc[i][1] - hftab_gc[i][0] + 1);
    }
    fill(cls, unitab_space, unitab_space_len, TK_S | TK_P);
    cls['\r'] = cls['\n'] = TK_S;
    pack(&ctk, cls);
    free(cls);
}

void pretok_init(void)
{
    pthread_once(&once15, build15);
}

void pretok_init_hf(void)
{
    pthread_once(&once16, build16);
}

int pretok_class(uint32_t cp)
{
    pretok_init();
    return class_of(&pretok_c15, cp);
}

int pretok_class16(uint32_t cp)
{
    pretok_init_hf();
    return class_of(&c16, cp);
}

size_t pretok_next(const unsigned char *s, size_t n, size_t pos)
{
    if (!classes_ready(&pretok_c15)) pretok_init();
    return gpt2_next(&pretok_c15, s, n, pos);
}

size_t pretok_gpt2_hf_next(const unsigned char *s, size_t n, size_t pos)
{
    if (!classes_ready(&c16)) pretok_init_hf();
    return gpt2_next(&c16, s, n, pos);
}

/*
 * The Llama 3 / Qwen2 pattern (pretok.h), tried alternative by alternative as
 * Oniguruma's backtracking does:
 *   1. (?i:'s|'t|'re|'ve|'m|'ll|'d): case-insensitive, which in Unicode also
 *      lets U+017F LATIN SMALL LETTER LONG S stand for s (no other character
 *      folds to one of these letters);
 *   2. [^\r\n\p{L}\p{N}]?\p{L}+: letters, with one optional leading character
 *      that is not CR, LF, a letter or a number (a space, a tab, punctuation);
 *   3. \p{N}{1,maxdigits};
 *   4. ' '?[^\s\p{L}\p{N}]+[\r\n]*: "other" characters, one optional leading
 *      space, then any CR/LF run;
 *   5. \s*[\r\n]+: a whitespace run up to and including its last CR or LF;
 *   6. \s+(?!\S) and 7. \s+: as in GPT-2.
 */
static inline int is_crlf(unsigned c) { return c == '\r' || c == '\n'; }

/* \s*[\r\n]+|\s+(?!\S)|\s+ at the whitespace character pos, the tail that
 * Llama 3, Qwen2 and Tekken share: a whitespace run up to its last CR or LF,
 * else the run less its last character when more follows, else the run.
 * A character is whitespace when its class in t, masked, equals val. */
static inline __attribute__((always_inline)) size_t space_piece(const struct classes *t, unsigned mask, unsigned val,
                                                                const unsigned char *s, size_t n, size_t pos)
{
    size_t last = pos, crlf_end = 0;
    size_t e = pos, l;
    while (e < n && ((unsigned)class_at(t, s, n, e, &l) & mask) == val) {
        last = e;
        if (is_crlf(s[e])) crlf_end = e + 1;
        e += l;
    }
    if (crlf_end) return crlf_end;
    if (e == n) return n;
    return last > pos ? last : e;
}

size_t pretok_cl100k_next(const unsigned char *s, size_t n, size_t pos, unsigned maxdigits)
{
    const struct classes *t = &c16;
    if (!classes_ready(&c16)) pretok_init_hf();
    size_t i = pos, len;
    unsigned c = s[i];

    if (c == '\'' && i + 1 < n) {
        unsigned d = s[i + 1] | 0x20;   /* ASCII lower case (also maps some non-letters) */
        if (s[i + 1] < 0x80 && (d == 's' || d == 't' || d == 'm' || d == 'd')) return i + 2;
        if (s[i + 1] == 0xC5 && i + 2 < n && s[i + 2] == 0xBF) return i + 3;   /* U+017F */
        if (i + 2 < n && s[i + 1] < 0x80 && s[i + 2] < 0x80) {
            unsigned e = s[i + 2] | 0x20;
            if ((d == 'r' && e == 'e') || (d == 'v' && e == 'e') || (d == 'l' && e == 'l'))
                return i + 3;
        }
    }

    int k = class_at(t, s, n, i, &len);
    if (k == PRETOK_LETTER)
        return letters(t, s, n, i + len);
    if (k != PRETOK_NUMBER && !is_crlf(c) && i + len < n) {
        size_t len2;
        if (class_at(t, s, n, i + len, &len2) == PRETOK_LETTER)
            return letters(t, s, n, i + len + len2);
    }
    if (k == PRETOK_NUMBER) {
        i += len;
        for (unsigned d = 1; d < maxdigits && i < n && class_at(t, s, n, i, &len) == PRETOK_NUMBER; d++)
            i += len;
        return i;
    }
    size_t o = i;
    if (c == ' ' && i + 1 < n) {
        size_t len2;
        if (class_at(t, s, n, i + 1, &len2) == PRETOK_OTHER) {
            o = i + 1;
            k = PRETOK_OTHER;
            len = len2;
        }
    }
    if (k == PRETOK_OTHER) {
        o += len;
        while (o < n && class_at(t, s, n, o, &len) == PRETOK_OTHER) o += len;
        while (o < n && is_crlf(s[o])) o++;
        return o;
    }

    return space_piece(t, 0xFF, PRETOK_SPACE, s, n, pos);
}

/*
 * The Tekken (Mistral-Nemo) pattern (pretok.h), alternative by alternative.
 * With A = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], B = [\p{Ll}\p{Lm}\p{Lo}\p{M}]
 * and P = [^\r\n\p{L}\p{N}]:
 *   1. P?A*B+ and 2. P?A+B*: words, the optional P taken first.  Note that
 *      marks (\p{M}) are in A, B and P alike, and that P holds spaces;
 *   3. \p{N}: one number;
 *   4. ' '?[^\s\p{L}\p{N}]+[\r\n/]*: "other" characters (marks among them),
 *      then any run of CR, LF and '/';
 *   5-7. the whitespace tail of Llama 3 (space_piece).
 */
static inline size_t tk_run(const unsigned char *s, size_t n, size_t i, unsigned set)
{
    size_t len;
    while (i < n && ((unsigned)class_at(&ctk, s, n, i, &len) & set)) i += len;
    return i;
}

/* A*B+ at i: the end of the match, or 0 when there is none; *aend: the end
 * of the A run at i.  A* is greedy and gives characters back one at a time
 * until B+ matches: right after the run only a B that is not A (a lower-case
 * letter) can start B+ (then B+ takes its whole run); otherwise B+ is the
 * last character of the run that is also B (Lm, Lo, M), if any. */
static inline size_t tk_case(const unsigned char *s, size_t n, size_t i, size_t *aend)
{
    size_t len = 0, lastb = 0;
    unsigned k = 0;
    while (i < n) {
        k = (unsigned)class_at(&ctk, s, n, i, &len);
        if (!(k & TK_A)) break;
        i += len;
        if (k & TK_B) lastb = i;
    }
    *aend = i;
    if (i < n && (k & TK_B)) return tk_run(s, n, i + len, TK_B);
    return lastb;
}

/* Its table is built on first use: only Tekken runs pay for it (~1 ms). */
size_t pretok_tekken_next(const unsigned char *s, size_t n, size_t pos)
{
    if (!classes_ready(&ctk)) pthread_once(&oncetk, buildtk);
    size_t len, e, a1 = 0, a0 = 0;
    unsigned k = (unsigned)class_at(&ctk, s, n, pos, &len);
    int pre = (k & TK_P) && pos + len < n;

    /* 1 with the optional P, then without it (only a first A or B can start it) */
    if (pre && (e = tk_case(s, n, pos + len, &a1))) return e;
    if ((k & (TK_A | TK_B)) && (e = tk_case(s, n, pos, &a0))) return e;
    /* 2 the same way: where 1 failed after a run of A, that run held no B
       and no B follows it, so A+B* is the run itself, if not empty */
    if (pre && a1 > pos + len) return a1;
    if (k & TK_A) return a0;
    if (k & TK_N) return pos + len;
    size_t o = 0, l2;   /* 4: past the optional space and the first "other" character */
    if (s[pos] == ' ' && pos + 1 < n && ((unsigned)class_at(&ctk, s, n, pos + 1, &l2) & TK_Q)) o = pos + 1 + l2;
    else if (k & TK_Q) o = pos + len;
    if (o) {
        o = tk_run(s, n, o, TK_Q);
        while (o < n && (is_crlf(s[o]) || s[o] == '/')) o++;
        return o;
    }
    return space_piece(&ctk, TK_S, TK_S, s, n, pos);   /* all that is left: whitespace */
}

static size_t llama3_next(const unsigned char *s, size_t n, size_t pos) { return pretok_cl100k_next(s, n, pos, 3); }
static size_t qwen2_next(const unsigned char *s, size_t n, size_t pos) { return pretok_cl100k_next(s, n, pos, 1); }

pretok_next_fn pretok_scanner(int pat)
{
    switch (pat) {
    case PRETOK_PAT_GPT2: return pretok_gpt2_hf_next;
    case PRETOK_PAT_LLAMA3: return llama3_next;
    case PRETOK_PAT_QWEN2: return qwen2_next;
    case PRETOK_PAT_TEKKEN: return pretok_tekken_next;
    default: return NULL;
    }
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

/* ---- the general regex engine (tokenizer.json's Split patterns) ----------- */

/*
 * Oniguruma patterns are rewritten for PCRE2 so that character classes mean
 * what they mean to tokenizers 0.22.2 (Unicode 16.0, hftab.c) rather than
 * PCRE2's own tables (Unicode 14.0 in Debian 12): \p{..}, \P{..}, \s, \S,
 * \d, \D become explicit ranges, Oniguruma's \h (a hex digit) and \v, \e, \a
 * get their Oniguruma meaning, \uHHHH becomes \x{HHHH} and the inline option
 * m (Oniguruma's "dot matches newline") becomes s.  ^ and $ match at line
 * breaks in Oniguruma: PCRE2_MULTILINE.  Constructs whose meaning could
 * differ and that tokenizer files do not use are refused by name (\w, \b,
 * scripts and other properties, POSIX brackets, nested classes, ...).
 */
struct sbuf { char *p; size_t n, cap; int oom; };

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 1024;
        while (c < b->n + n + 1) c *= 2;
        char *q = realloc(b->p, c);
        if (!q) { b->oom = 1; return; }
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_str(struct sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

/* General categories by index (hftab_gc_names); Cn is the last. */
#define GC_CN (HFTAB_GC_COUNT - 1)
#define GC_CS 27

static int gc_mask(const char *name, size_t len, uint32_t *mask)
{
    if (len == 2 && (memcmp(name, "L&", 2) == 0 || memcmp(name, "LC", 2) == 0)) {
        *mask = 7;  /* Lu Ll Lt */
        return 0;
    }
    if (len == 3 && memcmp(name, "Any", 3) == 0) {
        *mask = (1u << HFTAB_GC_COUNT) - 1;
        return 0;
    }
    uint32_t m = 0;
    for (int i = 0; i < HFTAB_GC_COUNT; i++) {
        const char *g = hftab_gc_names[i];
        if ((len == 1 && g[0] == name[0]) || (len == 2 && g[0] == name[0] && g[1] == name[1]))
            m |= 1u << i;
    }
    if (!m || len > 2) return -1;
    *mask = m;
    return 0;
}

/* Ranges (sorted, disjoint, surrogates excluded) of the code points whose
 * category is in mask; negate: of those whose category is not. */
static size_t gc_ranges(uint32_t mask, int negate, uint32_t (*out)[2], size_t cap)
{
    size_t n = 0;
    uint32_t next = 0;   /* first code point not yet classified */
#define PUT(a, b) do { \
        uint32_t a_ = (a), b_ = (b); \
        if (n && out[n - 1][1] + 1 == a_) out[n - 1][1] = b_; \
        else if (n < cap) { out[n][0] = a_; out[n][1] = b_; n++; } \
    } while (0)
    for (size_t i = 0; i <= hftab_gc_len; i++) {
        uint32_t lo = i < hftab_gc_len ? hftab_gc[i][0] : 0x110000;
        if (next < lo && (((mask >> GC_CN) & 1) != (uint32_t)negate))
            PUT(next, lo - 1);
        if (i == hftab_gc_len) break;
        uint32_t g = hftab_gc[i][2];
        if (((mask >> g) & 1) != (uint32_t)negate && g != GC_CS)
            PUT(lo, hftab_gc[i][1]);
        next = hftab_gc[i][1] + 1;
    }
#undef PUT
    /* the surrogates are Cs in the table, never a Cn gap, and Cs is never emitted:
       PCRE2 refuses them in UTF mode and no UTF-8 text holds them */
    return n;
}

static void put_ranges_sb(struct sbuf *b, const uint32_t (*r)[2], size_t n)
{
    char tmp[40];
    for (size_t i = 0; i < n; i++) {
        if (r[i][0] == r[i][1]) snprintf(tmp, sizeof tmp, "\\x{%X}", r[i][0]);
        else snprintf(tmp, sizeof tmp, "\\x{%X}-\\x{%X}", r[i][0], r[i][1]);
        sb_str(b, tmp);
    }
}

/* Complement of sorted disjoint ranges within [0, 0x10FFFF] minus surrogates. */
static size_t complement(const uint32_t (*r)[2], size_t n, uint32_t (*out)[2], size_t cap)
{
    size_t m = 0;
    uint32_t next = 0;
    for (size_t i = 0; i <= n; i++) {
        uint32_t lo = i < n ? r[i][0] : 0x110000;
        for (uint32_t a = next; a < lo && m < cap;) {
            uint32_t b = lo - 1;
            if (a < 0xD800 && b >= 0xD800) b = 0xD7FF;
            if (a >= 0xD800 && a <= 0xDFFF) { a = 0xE000; continue; }
            out[m][0] = a;
            out[m][1] = b;
            m++;
            a = b + 1;
        }
        if (i < n) next = r[i][1] + 1;
    }
    return m;
}

/* Emits a class (ranges) for an escape: inside [...] just the ranges (a
 * negated one as its complement), outside as [..] or [^..]. */
static void emit_set(struct sbuf *b, const uint32_t (*r)[2], size_t n, int negate, int in_class, uint32_t (*tmp)[2],
                     size_t tmpcap)
{
    if (in_class) {
        if (negate) {
            size_t m = complement(r, n, tmp, tmpcap);
            put_ranges_sb(b, (const uint32_t (*)[2])tmp, m);
        } else {
            put_ranges_sb(b, r, n);
        }
        return;
    }
    sb_str(b, negate ? "[^" : "[");
    put_ranges_sb(b, r, n);
    sb_str(b, "]");
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

#define RW_MAX_RANGES 8192

/* Rewrites an Oniguruma pattern for PCRE2; literal: the text is matched
 * literally (tokenizers' SplitPattern::String).  @return 0 or
 * PRETOK_ERR_UNSUPPORTED / PRETOK_ERR_NOMEM with a message. */
static int rewrite(const char *pat, size_t len, int literal, struct sbuf *b, char *err, size_t errlen)
{
    uint32_t (*r)[2] = malloc(2 * RW_MAX_RANGES * sizeof *r), (*tmp)[2] = r ? r + RW_MAX_RANGES : NULL;
    if (!r) { snprintf(err, errlen, "out of memory"); return PRETOK_ERR_NOMEM; }
    int rc = 0, in_class = 0;
    char one[16];
#define UNSUP(...) do { snprintf(err, errlen, __VA_ARGS__); rc = PRETOK_ERR_UNSUPPORTED; goto done; } while (0)
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)pat[i];
        if (literal) {
            if (c < 0x80 && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) {
                snprintf(one, sizeof one, "\\x{%X}", c);
                sb_str(b, one);
            } else {
                sb_add(b, pat + i, 1);
            }
            i++;
            continue;
        }
        if (c == '\\') {
            if (i + 1 >= len) UNSUP("pattern ends with a backslash");
            unsigned char e = (unsigned char)pat[i + 1];
            i += 2;
            if (e == 'p' || e == 'P') {
                int neg = e == 'P';
                const char *name;
                size_t nl;
                if (i < len && pat[i] == '{') {
                    size_t j = i + 1;
                    while (j < len && pat[j] != '}') j++;
                    if (j >= len) UNSUP("unterminated \\%c{", e);
                    name = pat + i + 1;
                    nl = j - i - 1;
                    i = j + 1;
                    if (nl && name[0] == '^') { neg = !neg; name++; nl--; }
                } else {
                    if (i >= len) UNSUP("pattern ends after \\%c", e);
                    name = pat + i;
                    nl = 1;
                    i++;
                }
                uint32_t mask;
                if (gc_mask(name, nl, &mask) != 0)
                    UNSUP("the class \\%c{%.*s} (only general categories are supported)", e, (int)(nl > 40 ? 40 : nl), name);
                size_t n = gc_ranges(mask, 0, r, RW_MAX_RANGES);
                emit_set(b, (const uint32_t (*)[2])r, n, neg, in_class, tmp, RW_MAX_RANGES);
            } else if (e == 's' || e == 'S') {
                emit_set(b, unitab_space, unitab_space_len, e == 'S', in_class, tmp, RW_MAX_RANGES);
            } else if (e == 'd' || e == 'D') {
                size_t n = gc_ranges(1u << 8, 0, r, RW_MAX_RANGES);   /* Nd */
                emit_set(b, (const uint32_t (*)[2])r, n, e == 'D', in_class, tmp, RW_MAX_RANGES);
            } else if (e == 'h' || e == 'H') {
                static const uint32_t hex[3][2] = { {'0', '9'}, {'A', 'F'}, {'a', 'f'} };
                emit_set(b, hex, 3, e == 'H', in_class, tmp, RW_MAX_RANGES);
            } else if (e == 'u') {
                int v = 0;
                for (int k = 0; k < 4; k++) {
                    int h = i + (size_t)k < len ? hexval((unsigned char)pat[i + k]) : -1;
                    if (h < 0) UNSUP("bad \\u escape");
                    v = v * 16 + h;
                }
                i += 4;
                snprintf(one, sizeof one, "\\x{%X}", v);
                sb_str(b, one);
            } else if (e == 'v' || e == 'e' || e == 'a') {
                snprintf(one, sizeof one, "\\x{%X}", e == 'v' ? 0x0B : e == 'e' ? 0x1B : 0x07);
                sb_str(b, one);
            } else if (e == 'x') {
                sb_str(b, "\\x");
                if (i < len && pat[i] == '{') {
                    size_t j = i;
                    while (j < len && pat[j] != '}') j++;
                    if (j >= len) UNSUP("unterminated \\x{");
                    sb_add(b, pat + i, j + 1 - i);
                    i = j + 1;
                }
            } else if (strchr("nrtf0123456789AzZG", e) && e) {
                one[0] = '\\';
                one[1] = (char)e;
                sb_add(b, one, 2);
            } else if (e >= 0x80 || !((e >= '0' && e <= '9') || (e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z'))) {
                one[0] = '\\';
                one[1] = (char)e;
                sb_add(b, one, 2);   /* an escaped punctuation character (or the first byte of a UTF-8 one) */
            } else {
                UNSUP("the escape \\%c", e);
            }
            continue;
        }
        if (in_class) {
            if (c == '[') UNSUP("a nested character class or POSIX bracket");
            if (c == '&' && i + 1 < len && pat[i + 1] == '&') UNSUP("class intersection (&&)");
            if (c == ']') in_class = 0;
            sb_add(b, pat + i, 1);
            i++;
            continue;
        }
        if (c == '[') {
            in_class = 1;
            sb_add(b, "[", 1);
            i++;
            if (i < len && pat[i] == '^') { sb_add(b, "^", 1); i++; }
            if (i < len && pat[i] == ']') { sb_str(b, "\\]"); i++; }
            continue;
        }
        if (c == '(' && i + 1 < len && pat[i + 1] == '?') {
            size_t j = i + 2;
            if (j < len && (pat[j] == ':' || pat[j] == '=' || pat[j] == '!' || pat[j] == '>' || pat[j] == '#')) {
                sb_add(b, pat + i, 3);
                i += 3;
                continue;
            }
            if (j + 1 < len && pat[j] == '<' && (pat[j + 1] == '=' || pat[j + 1] == '!')) {
                sb_add(b, pat + i, 4);
                i += 4;
                continue;
            }
            if (j < len && pat[j] == '<') {   /* named group */
                sb_add(b, pat + i, 3);
                i += 3;
                continue;
            }
            /* inline options: (?imx-imx) or (?imx-imx:...) */
            sb_str(b, "(?");
            while (j < len && pat[j] != ')' && pat[j] != ':') {
                char o = pat[j];
                if (o == 'i' || o == 'x' || o == '-') sb_add(b, &o, 1);
                else if (o == 'm') sb_add(b, "s", 1);
                else UNSUP("the inline option (?%c", o);
                j++;
            }
            if (j >= len) UNSUP("unterminated group");
            i = j;
            continue;
        }
        sb_add(b, pat + i, 1);
        i++;
    }
    if (in_class) UNSUP("unterminated character class");
done:
#undef UNSUP
    free(r);
    if (!rc && b->oom) { snprintf(err, errlen, "out of memory"); rc = PRETOK_ERR_NOMEM; }
    return rc;
}

/* The patterns of the scanners, as tokenizer.json stores them (after JSON
 * unescaping), indexed by enum pretok_pattern. */
static const char *const known[] = {
    [PRETOK_PAT_NONE] = NULL,
    [PRETOK_PAT_GPT2] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
    [PRETOK_PAT_LLAMA3] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    [PRETOK_PAT_QWEN2] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    [PRETOK_PAT_TEKKEN] = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"
                          "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"
                          "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};

int pretok_known_pattern(const char *pat, size_t len)
{
    for (int k = PRETOK_PAT_NONE + 1; k < (int)(sizeof known / sizeof known[0]); k++)
        if (strlen(known[k]) == len && memcmp(known[k], pat, len) == 0) return k;
    return PRETOK_PAT_NONE;
}

const char *pretok_pattern_text(int pat)
{
    return pat > PRETOK_PAT_NONE && pat < (int)(sizeof known / sizeof known[0]) ? known[pat] : NULL;
}

#ifdef MDS_HAVE_PCRE2
struct pretok_regex {
    pcre2_code *code;
    char *rewritten;
    int jit;
};

struct pretok_match {
    pcre2_match_data *md;
    pcre2_match_context *mc;
    pcre2_jit_stack *js;
};

int pretok_regex_new(pretok_regex **out, const char *pat, size_t len, int literal, char *err, size_t errlen)
{
    *out = NULL;
    struct sbuf b = { NULL, 0, 0, 0 };
    int rc = rewrite(pat, len, literal, &b, err, errlen);
    if (rc) { free(b.p); return rc; }
    if (!b.p) sb_str(&b, "");
    if (b.oom) { free(b.p); snprintf(err, errlen, "out of memory"); return PRETOK_ERR_NOMEM; }
    pretok_regex *re = calloc(1, sizeof *re);
    if (!re) { free(b.p); snprintf(err, errlen, "out of memory"); return PRETOK_ERR_NOMEM; }
    int ec;
    PCRE2_SIZE eo;
    re->code = pcre2_compile((PCRE2_SPTR)b.p, b.n, PCRE2_UTF | PCRE2_MULTILINE, &ec, &eo, NULL);
    if (!re->code) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        snprintf(err, errlen, "PCRE2 cannot compile the pattern: %s", (char *)msg);
        free(b.p);
        free(re);
        return PRETOK_ERR_UNSUPPORTED;
    }
    re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;
    re->rewritten = b.p;
    *out = re;
    return 0;
}

void pretok_regex_free(pretok_regex *re)
{
    if (!re) return;
    pcre2_code_free(re->code);
    free(re->rewritten);
    free(re);
}

const char *pretok_regex_pcre2_pattern(const pretok_regex *re) { return re->rewritten; }

int pretok_match_new(pretok_match **out, const pretok_regex *re)
{
    *out = NULL;
    pretok_match *m = calloc(1, sizeof *m);
    if (!m) return PRETOK_ERR_NOMEM;
    m->md = pcre2_match_data_create_from_pattern(re->code, NULL);
    m->mc = pcre2_match_context_create(NULL);
    m->js = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    if (!m->md || !m->mc || !m->js) {
        pretok_match_free(m);
        return PRETOK_ERR_NOMEM;
    }
    pcre2_jit_stack_assign(m->mc, NULL, m->js);
    *out = m;
    return 0;
}

void pretok_match_free(pretok_match *m)
{
    if (!m) return;
    pcre2_match_data_free(m->md);
    pcre2_match_context_free(m->mc);
    pcre2_jit_stack_free(m->js);
    free(m);
}

int pretok_regex_search(const pretok_regex *re, pretok_match *m, const unsigned char *s, size_t n, size_t from,
                        size_t *ms, size_t *me)
{
    int rc = re->jit ? pcre2_jit_match(re->code, s, n, from, PCRE2_NO_UTF_CHECK, m->md, m->mc)
                     : pcre2_match(re->code, s, n, from, PCRE2_NO_UTF_CHECK, m->md, m->mc);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) return PRETOK_ERR_MATCH;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}

#else /* !MDS_HAVE_PCRE2 */

struct pretok_regex { int unused; };
struct pretok_match { int unused; };

int pretok_regex_new(pretok_regex **out, const char *pat, size_t len, int literal, char *err, size_t errlen)
{
    *out = NULL;
    struct sbuf b = { NULL, 0, 0, 0 };
    int rc = rewrite(pat, len, literal, &b, err, errlen);
    free(b.p);
    if (rc) return rc;
    snprintf(err, errlen, "this build has no PCRE2, which this pattern needs (install libpcre2-dev and rebuild)");
    return PRETOK_ERR_NOPCRE2;
}
void pretok_regex_free(pretok_regex *re) { (void)re; }
const char *pretok_regex_pcre2_pattern(const pretok_regex *re) { (void)re; return ""; }
int pretok_match_new(pretok_match **out, const pretok_regex *re) { (void)re; *out = NULL; return PRETOK_ERR_NOPCRE2; }
void pretok_match_free(pretok_match *m) { (void)m; }
int pretok_regex_search(const pretok_regex *re, pretok_match *m, const unsigned char *s, size_t n, size_t from,
                        size_t *ms, size_t *me)
{
    (void)re; (void)m; (void)s; (void)n; (void)from; (void)ms; (void)me;
    return PRETOK_ERR_NOPCRE2;
}
#endif
