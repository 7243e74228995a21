/*
 * test_bpe.c - unit tests for preprocess/bpe.[ch].
 *
 * Checks the GPT-2 tables (vocab/gpt2-*.txt|json, run from the repo root)
 * against known ids and the spec's golden vectors split into pieces by hand,
 * and checks every fast path against a literal encoder.py loop written here
 * on byte strings, with its own merges parser and byte alphabet, on random
 * pieces.  Synthetic vocab/merges files written to a temp dir cover the
 * parsing rules, the non-trained-order fallback and the error messages.
 * Randomised tests print their seed; `-s SEED` replays one.
 *
 * It does not test pre-tokenization (pretok) or errors='replace' decoding.
 */
#include "bpe.h"
#include "harness.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define VOCAB "vocab/gpt2-vocab.json"
#define MERGES "vocab/gpt2-merges.txt"

static uint64_t seed;
static uint64_t rng_state;
static char tmpdir[] = "/tmp/test_bpe.XXXXXX";

static uint64_t rnd(void)
{
    /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static size_t rndn(size_t n) { return (size_t)(rnd() % n); }

/* The thread's CPU seconds: the long-piece bounds below guard against
 * quadratic work, and CPU time holds them on a loaded machine, where wall
 * time does not. */
static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static unsigned char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf)
        buf[n] = 0;
    *len = (size_t)n;
    return buf;
}

static void write_file(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    CHECK(fwrite(text, 1, len, f) == len);
    fclose(f);
}

/* ------------------------------------------------------------------------- */
/* the oracle: encoder.py on byte strings                                     */

/* encoder.py's bytes_to_unicode(), written as in the original */
static uint32_t b2u[256];
static int u2b[0x200];

static void oracle_alphabet(void)
{
    int in[256] = { 0 };
    for (int v = '!'; v <= '~'; v++) in[v] = 1;
    for (int v = 0xA1; v <= 0xAC; v++) in[v] = 1;
    for (int v = 0xAE; v <= 0xFF; v++) in[v] = 1;
    int n = 0;
    for (int v = 0; v < 256; v++)
        b2u[v] = in[v] ? (uint32_t)v : (uint32_t)(256 + n++);
    for (int i = 0; i < 0x200; i++) u2b[i] = -1;
    for (int v = 0; v < 256; v++) u2b[b2u[v]] = v;
}

struct oracle_slot {
    uint32_t off, len, rank; /* key bytes in arena: 2-byte len(a), a, b */
    int used;
};

struct oracle {
    unsigned char *arena;
    size_t arena_len, arena_cap;
    struct oracle_slot *slots;
    size_t mask;
};

static uint64_t fnv(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static struct oracle_slot *oracle_slot(struct oracle *o, const unsigned char *key, size_t n)
{
    size_t i = fnv(key, n) & o->mask;
    while (o->slots[i].used &&
           !(o->slots[i].len == n && memcmp(o->arena + o->slots[i].off, key, n) == 0))
        i = (i + 1) & o->mask;
    return &o->slots[i];
}

/* key for pair (a, b) in buf; returns its length */
static size_t oracle_key(unsigned char *buf, const unsigned char *a, size_t na, const unsigned char *b, size_t nb)
{
    buf[0] = (unsigned char)(na >> 8);
    buf[1] = (unsigned char)na;
    memcpy(buf + 2, a, na);
    memcpy(buf + 2 + na, b, nb);
    return 2 + na + nb;
}

/* UTF-8 alphabet text -> raw bytes; returns -1 if not alphabet */
static long oracle_unmap(const unsigned char *p, size_t n, unsigned char *out)
{
    long w = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        if (p[i] < 0x80) { cp = p[i]; i += 1; }
        else if ((p[i] & 0xE0) == 0xC0 && i + 1 < n) { cp = (uint32_t)(p[i] & 0x1F) << 6 | (p[i + 1] & 0x3F); i += 2; }
        else return -1;
        if (cp >= 0x200 || u2b[cp] < 0)
            return -1;
        out[w++] = (unsigned char)u2b[cp];
    }
    return w;
}

/* Parses merges as Python does for files whose lines are "a b" with one space:
 * split('\n')[1:-1]; the dict keeps the last rank of a pair. */
static int oracle_load(struct oracle *o, const char *path)
{
    size_t len;
    unsigned char *buf = read_all(path, &len);
    if (!buf)
        return -1;
    memset(o, 0, sizeof *o);
    size_t lines = 0;
    for (size_t i = 0; i < len; i++) lines += buf[i] == '\n';
    size_t size = 16;
    while (size < 2 * lines) size *= 2;
    o->slots = calloc(size, sizeof *o->slots);
    o->mask = size - 1;
    o->arena_cap = len * 2 + 16;
    o->arena = malloc(o->arena_cap);
    unsigned char *key = malloc(len + 4), *a = malloc(len + 1), *b = malloc(len + 1);
    size_t index = 0, start = 0;
    for (size_t i = 0; i < len; i++) {
        if (buf[i] != '\n')
            continue;
        if (index++ >= 1) {
            unsigned char *line = buf + start, *sp = memchr(line, ' ', i - start);
            if (sp) {
                long na = oracle_unmap(line, (size_t)(sp - line), a);
                long nb = oracle_unmap(sp + 1, (size_t)(buf + i - sp - 1), b);
                if (na > 0 && nb > 0) {
                    size_t kn = oracle_key(key, a, (size_t)na, b, (size_t)nb);
                    struct oracle_slot *s = oracle_slot(o, key, kn);
                    if (!s->used) {
                        memcpy(o->arena + o->arena_len, key, kn);
                        s->off = (uint32_t)o->arena_len;
                        s->len = (uint32_t)kn;
                        s->used = 1;
                        o->arena_len += kn;
                    }
                    s->rank = (uint32_t)(index - 2);
                }
            }
        }
        start = i + 1;
    }
    free(key); free(a); free(b); free(buf);
    return 0;
}

static void oracle_free(struct oracle *o)
{
    free(o->arena);
    free(o->slots);
}

static uint32_t oracle_rank(struct oracle *o, unsigned char *kbuf, const unsigned char *a, size_t na,
                            const unsigned char *b, size_t nb)
{
    size_t kn = oracle_key(kbuf, a, na, b, nb);
    struct oracle_slot *s = oracle_slot(o, kbuf, kn);
    return s->used ? s->rank : UINT32_MAX;
}

/* encoder.py bpe() + encoder lookup; returns the number of ids, ids of -1 for
 * symbols that are not tokens */
static size_t oracle_encode(struct oracle *o, const bpe *b, const unsigned char *p, size_t n, int64_t *out)
{
    if (n == 0)
        return 0;
    size_t *off = malloc(n * sizeof *off), *len = malloc(n * sizeof *len);
    unsigned char *kbuf = malloc(n + 4);
    size_t m = n;
    for (size_t i = 0; i < n; i++) { off[i] = i; len[i] = 1; }
    while (m > 1) {
        uint32_t best = UINT32_MAX;
        size_t bi = 0;
        for (size_t i = 0; i + 1 < m; i++) {
            uint32_t r = oracle_rank(o, kbuf, p + off[i], len[i], p + off[i + 1], len[i + 1]);
            if (r < best) { best = r; bi = i; }
        }
        if (best == UINT32_MAX)
            break;
        const unsigned char *fa = p + off[bi], *fb = p + off[bi + 1];
        size_t la = len[bi], lb = len[bi + 1], w = 0;
        for (size_t i = 0; i < m;) {
            if (i + 1 < m && len[i] == la && len[i + 1] == lb && memcmp(p + off[i], fa, la) == 0 &&
                memcmp(p + off[i + 1], fb, lb) == 0) {
                off[w] = off[i];
                len[w++] = la + lb;
                i += 2;
            } else {
                off[w] = off[i];
                len[w++] = len[i++];
            }
        }
        m = w;
    }
    for (size_t i = 0; i < m; i++)
        out[i] = bpe_token_id(b, (const char *)p + off[i], len[i]);
    free(off); free(len); free(kbuf);
    return m;
}

/* ------------------------------------------------------------------------- */
/* shared state                                                               */

static bpe *gpt2;
static struct oracle gpt2_oracle;

static int ids_equal(const uint32_t *a, size_t na, const uint32_t *b, size_t nb)
{
    return na == nb && memcmp(a, b, na * sizeof *a) == 0;
}

static int expect_piece(bpe_cache *c, const char *piece, size_t n, const uint32_t *want, size_t nwant)
{
    uint32_t out[256];
    size_t m = bpe_encode_piece(gpt2, c, (const unsigned char *)piece, n, out);
    if (ids_equal(out, m, want, nwant))
        return 1;
    fprintf(stderr, "piece '%.*s': got", (int)n, piece);
    for (size_t i = 0; i < m; i++) fprintf(stderr, " %u", out[i]);
    fprintf(stderr, ", want");
    for (size_t i = 0; i < nwant; i++) fprintf(stderr, " %u", want[i]);
    fprintf(stderr, "\n");
    return 0;
}

#define PIECE(c, s, ...) do { \
        static const uint32_t want_[] = { __VA_ARGS__ }; \
        CHECK(expect_piece((c), (s), sizeof(s) - 1, want_, sizeof want_ / sizeof want_[0])); \
    } while (0)

/* ------------------------------------------------------------------------- */
/* tests                                                                      */

static void test_alphabet(void)
{
    for (int v = 0; v < 256; v++) {
        CHECK(bpe_byte_to_unicode((uint8_t)v) == b2u[v]);
        CHECK(bpe_unicode_to_byte(b2u[v]) == v);
    }
    CHECK(bpe_byte_to_unicode(' ') == 0x120);
    CHECK(bpe_byte_to_unicode('\n') == 0x10A);
    CHECK(bpe_byte_to_unicode(0xA0) == 0x142);
    CHECK(bpe_byte_to_unicode(0xAD) == 0x143);
    CHECK(bpe_unicode_to_byte(0x144) == -1);
    CHECK(bpe_unicode_to_byte(' ') == -1);
    CHECK(bpe_unicode_to_byte(0xAD) == -1);
    CHECK(bpe_unicode_to_byte(0x1F600) == -1);
}

static void test_load_gpt2(void)
{
    CHECK(bpe_vocab_size(gpt2) == 50257);
    CHECK(bpe_max_token_len(gpt2) == 128);
    CHECK(bpe_flags(gpt2) & BPE_FLAG_TRAINED_ORDER);
    CHECK(bpe_token_id(gpt2, "<|endoftext|>", 13) == 50256);
    CHECK(bpe_token_id(gpt2, " ", 1) == 220);
    CHECK(bpe_token_id(gpt2, "\n", 1) == 198);
    CHECK(bpe_token_id(gpt2, "!", 1) == 0);
    CHECK(bpe_token_id(gpt2, "\xff", 1) == 187);
    CHECK(bpe_token_id(gpt2, "\0", 1) == 188);
    CHECK(bpe_token_id(gpt2, "\xad", 1) == 255);
    CHECK(bpe_token_id(gpt2, " the", 4) == 262);
    CHECK(bpe_token_id(gpt2, "", 0) == -1);
    CHECK(bpe_token_id(gpt2, "zzzzqqqqxxxx", 12) == -1);
    size_t len;
    const unsigned char *t = bpe_token_bytes(gpt2, 50256, &len);
    CHECK(t && len == 13 && memcmp(t, "<|endoftext|>", 13) == 0);
    CHECK(bpe_token_bytes(gpt2, 50257, &len) == NULL && len == 0);

    /* token id == 256 + rank for every merge (GPT-2 property) */
    size_t flen;
    unsigned char *buf = read_all(MERGES, &flen), *tok = malloc(512);
    CHECK(buf != NULL);
    size_t index = 0, start = 0, bad = 0, merges = 0;
    for (size_t i = 0; buf && i < flen; i++) {
        if (buf[i] != '\n')
            continue;
        if (index++ >= 1) {
            unsigned char *line = buf + start, *sp = memchr(line, ' ', i - start);
            long na = sp ? oracle_unmap(line, (size_t)(sp - line), tok) : -1;
            long nb = na > 0 ? oracle_unmap(sp + 1, (size_t)(buf + i - sp - 1), tok + na) : -1;
            merges++;
            if (nb <= 0 || bpe_token_id(gpt2, (const char *)tok, (size_t)(na + nb)) != (int32_t)(256 + index - 2))
                bad++;
        }
        start = i + 1;
    }
    CHECK(merges == 50000);
    CHECK(bad == 0);
    free(buf);
    free(tok);
}

/* the spec's golden vectors (section 3.9), split into pieces by the GPT-2 regex */
static void golden_pieces(bpe_cache *c)
{
    PIECE(c, "Hello", 15496);
    PIECE(c, " world", 995);
    PIECE(c, "!", 0);
    PIECE(c, ",", 11);
    PIECE(c, " <|", 1279, 91);
    PIECE(c, "endoftext", 437, 1659, 5239);
    PIECE(c, "|>", 91, 29);
    PIECE(c, " ", 220);
    PIECE(c, " leading", 3756);
    PIECE(c, " spaces", 9029);
    PIECE(c, "\n", 198);
    PIECE(c, "and", 392);
    PIECE(c, "\t", 197);
    PIECE(c, "tabs", 8658, 82);
    PIECE(c, "  ", 220, 220);
    PIECE(c, "    ", 220, 220, 220, 220);
    PIECE(c, "I", 40);
    PIECE(c, "'m", 1101);
    PIECE(c, " don", 836);
    PIECE(c, "'t", 470);
    PIECE(c, " WE", 12887);
    PIECE(c, "'", 6);
    PIECE(c, "LL", 3069);
    PIECE(c, " they", 484);
    PIECE(c, "'ve", 1053);
    PIECE(c, "na\xc3\xafve", 2616, 38776);
    PIECE(c, " caf\xc3\xa9", 40304);
    PIECE(c, " \xe6\x9d\xb1\xe4\xba\xac", 10545, 251, 109, 12859, 105);
    PIECE(c, " \xf0\x9f\x98\x80", 30325, 222);
    PIECE(c, "1234567", 10163, 2231, 3134);
    PIECE(c, " 3", 513);
    PIECE(c, ".", 13);
    PIECE(c, "14159", 1415, 19707);
    PIECE(c, "x", 87);
    PIECE(c, "  \n", 220, 220, 198);
    PIECE(c, " y", 331);
    PIECE(c, "\xc2\xa0", 1849);
    PIECE(c, "\xe2\x80\x89", 447, 231);
    PIECE(c, "hi", 5303);
    PIECE(c, "\xe3\x80\x80", 5099, 222);
    PIECE(c, "\x1c", 216);
    PIECE(c, "\xc4\xa0", 128, 254);
    PIECE(c, "aaaaaaaaaaaaaaaa", 24794, 24794, 24794, 24794);
    PIECE(c, "\r\n", 201, 198);
    PIECE(c, "\n\n\n", 628, 198);
    PIECE(c, "t\xc3\xa9", 83, 2634);
    PIECE(c, "\xef\xbb\xbf", 171, 119, 123);
    PIECE(c, "BOM", 33, 2662);
    PIECE(c, "\xf0\x9f\x98\x80\xf0\x9f\x98\x80", 47249, 222, 47249, 222);
    PIECE(c, "\xf0\x9d\x94\xbe\xf0\x9d\x95\xa0\xf0\x9d\x95\xa0\xf0\x9d\x95\x95",
          47728, 242, 122, 47728, 243, 254, 47728, 243, 254, 47728, 243, 243);
    PIECE(c, "<|endoftext|>", 27, 91, 437, 1659, 5239, 91, 29);
    uint32_t none[1];
    CHECK(bpe_encode_piece(gpt2, c, (const unsigned char *)"", 0, none) == 0);
}

static void test_golden_pieces(void)
{
    bpe_cache *c;
    CHECK(bpe_cache_new(&c, 4096) == 0);
    golden_pieces(c);
    golden_pieces(c); /* second time from the cache */
    golden_pieces(NULL);
    bpe_cache_free(c);
}

/* every token encodes to itself, except <|endoftext|> which is text */
static void test_vocab_self(void)
{
    bpe_cache *c;
    CHECK(bpe_cache_new(&c, 1024) == 0);
    size_t bad = 0;
    uint32_t out[128];
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t id = 0; id < 50256; id++) {
            size_t len;
            const unsigned char *t = bpe_token_bytes(gpt2, id, &len);
            size_t m = bpe_encode_piece(gpt2, pass ? NULL : c, t, len, out);
            if (m != 1 || out[0] != id) {
                if (bad++ < 5)
                    fprintf(stderr, "token %u does not encode to itself\n", id);
            }
            /* and the slow literal path agrees (via the oracle on the same bytes) */
            if (pass == 0 && (id % 7) == 0) {
                int64_t o[128];
                size_t om = oracle_encode(&gpt2_oracle, gpt2, t, len, o);
                if (om != 1 || o[0] != id)
                    bad++;
            }
        }
    }
    CHECK(bad == 0);
    bpe_cache_free(c);
}

static void test_decode(void)
{
    uint32_t ids[] = { 447 };
    unsigned char out[64];
    size_t n = 99;
    CHECK(bpe_decode(gpt2, ids, 1, out, sizeof out, &n) == 0);
    CHECK(n == 2 && out[0] == 0xE2 && out[1] == 0x80);
    uint32_t ids2[] = { 15496, 995, 0, 50256 };
    CHECK(bpe_decode(gpt2, ids2, 4, out, sizeof out, &n) == 0);
    CHECK(n == 25 && memcmp(out, "Hello world!<|endoftext|>", 25) == 0);
    CHECK(bpe_decode(gpt2, ids2, 4, out, 10, &n) == BPE_ERR_BUFFER && n == 25);
    uint32_t bad[] = { 15496, 50257 };
    CHECK(bpe_decode(gpt2, bad, 2, out, sizeof out, &n) == BPE_ERR_BAD_ID && n == 0);
    CHECK(bpe_decode(gpt2, NULL, 0, NULL, 0, &n) == 0 && n == 0);
    CHECK(bpe_decode_bound(gpt2, 3) == 3 * 128);
    CHECK(bpe_decode_bound(gpt2, SIZE_MAX / 2) == SIZE_MAX);
    CHECK(strcmp(bpe_strerror(BPE_ERR_BAD_ID), "token id out of range") == 0);
    CHECK(strcmp(bpe_strerror(12345), "unknown error") == 0);
}

static void test_roundtrip_random(void)
{
    bpe_cache *c;
    CHECK(bpe_cache_new(&c, 256) == 0);
    unsigned char piece[301], back[301 * 128];
    uint32_t ids[301];
    size_t bad = 0;
    for (int iter = 0; iter < 20000; iter++) {
        size_t n = rndn(301);
        for (size_t i = 0; i < n; i++)
            piece[i] = (unsigned char)rnd();
        size_t m = bpe_encode_piece(gpt2, c, piece, n, ids), got;
        if (m > n || (n && !m) || bpe_decode(gpt2, ids, m, back, sizeof back, &got) != 0 || got != n ||
            memcmp(back, piece, n) != 0)
            bad++;
    }
    CHECK(bad == 0);
    bpe_cache_free(c);
}

static size_t put_utf8(unsigned char *p, uint32_t cp)
{
    if (cp < 0x80) { p[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) { p[0] = (unsigned char)(0xC0 | cp >> 6); p[1] = (unsigned char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        p[0] = (unsigned char)(0xE0 | cp >> 12);
        p[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        p[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    p[0] = (unsigned char)(0xF0 | cp >> 18);
    p[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    p[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    p[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* a random piece of one of several kinds, at most cap bytes */
static size_t random_piece(unsigned char *p, size_t cap, int kind)
{
    static const uint32_t ranges[][2] = {
        { 'a', 'z' }, { 'A', 'Z' }, { '0', '9' }, { 0x20, 0x7E }, { 0xA0, 0xFF }, { 0x100, 0x24F },
        { 0x300, 0x36F }, { 0x370, 0x3FF }, { 0x400, 0x4FF }, { 0x600, 0x6FF }, { 0x900, 0x97F },
        { 0x3040, 0x30FF }, { 0x4E00, 0x9FFF }, { 0xAC00, 0xD7A3 }, { 0x1F300, 0x1F64F }, { 0x2000, 0x206F },
    };
    static const char *words[] = { "the", "ing", "tion", "ed", "re", "er", "an", "qu", "ly", "ment", "ab", "xx" };
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = 0;
    switch (kind) {
    case 0: { /* random multilingual UTF-8 */
        size_t cps = 1 + rndn(12);
        if (rndn(2)) p[n++] = ' ';
        int r = (int)rndn(16);
        for (size_t i = 0; i < cps && n + 4 <= cap; i++) {
            if (rndn(4) == 0) r = (int)rndn(16);
            n += put_utf8(p + n, ranges[r][0] + (uint32_t)rndn(ranges[r][1] - ranges[r][0] + 1));
        }
        break;
    }
    case 1: { /* ASCII words made of common fragments and letters */
        if (rndn(2)) p[n++] = ' ';
        size_t parts = 1 + rndn(5);
        for (size_t i = 0; i < parts; i++) {
            const char *w = words[rndn(12)];
            size_t wl = strlen(w);
            if (rndn(3) == 0) { w = &"abcdefghijklmnopqrstuvwxyz"[rndn(26)]; wl = 1; }
            if (n + wl > cap) break;
            memcpy(p + n, w, wl);
            if (rndn(5) == 0) p[n] = (unsigned char)(p[n] - 32);
            n += wl;
        }
        break;
    }
    case 2: { /* repeated characters, long runs included */
        static const char rep[] = "a =-_.*#!/ \n\t0e";
        size_t len = 1 + (rndn(4) == 0 ? rndn(cap) : rndn(40));
        unsigned char ch = (unsigned char)rep[rndn(sizeof rep - 1)];
        if (len > cap) len = cap;
        memset(p, ch, len);
        n = len;
        break;
    }
    case 3: { /* 2..4 random vocab tokens glued together */
        size_t k = 2 + rndn(3);
        for (size_t i = 0; i < k; i++) {
            size_t len;
            const unsigned char *t = bpe_token_bytes(gpt2, (uint32_t)rndn(50257), &len);
            if (n + len > cap) break;
            memcpy(p + n, t, len);
            n += len;
        }
        break;
    }
    case 4: { /* base64-ish */
        size_t len = 1 + (rndn(4) == 0 ? rndn(cap) : rndn(60));
        if (len > cap) len = cap;
        for (size_t i = 0; i < len; i++) p[n++] = (unsigned char)b64[rndn(64)];
        break;
    }
    default: { /* random bytes */
        size_t len = 1 + rndn(cap < 90 ? cap : 90);
        for (size_t i = 0; i < len; i++) p[n++] = (unsigned char)rnd();
        break;
    }
    }
    return n;
}

static void test_cross_check(void)
{
    enum { CAP = 400, ITERS = 60000 };
    bpe_cache *c, *tiny;
    CHECK(bpe_cache_new(&c, 4096) == 0);
    CHECK(bpe_cache_new(&tiny, 1) == 0);
    unsigned char piece[CAP];
    uint32_t fast[CAP], slow2[CAP], nocache[CAP];
    int64_t ref[CAP];
    size_t mismatches = 0, long_pieces = 0;
    for (int iter = 0; iter < ITERS; iter++) {
        size_t n = random_piece(piece, CAP, (int)rndn(6));
        size_t m = bpe_encode_piece(gpt2, c, piece, n, fast);
        size_t m2 = bpe_encode_piece(gpt2, tiny, piece, n, slow2);
        size_t m3 = bpe_encode_piece(gpt2, NULL, piece, n, nocache);
        size_t om = oracle_encode(&gpt2_oracle, gpt2, piece, n, ref);
        long_pieces += n > 64;
        int ok = m == om && ids_equal(fast, m, slow2, m2) && ids_equal(fast, m, nocache, m3);
        for (size_t i = 0; ok && i < m; i++)
            ok = ref[i] == fast[i];
        if (!ok && mismatches++ < 5) {
            fprintf(stderr, "mismatch on piece of %zu bytes:", n);
            for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %02x", piece[i]);
            fprintf(stderr, "\n");
        }
    }
    printf("# cross-check: %d pieces (%zu over 64 bytes), %zu mismatches\n", ITERS, long_pieces, mismatches);
    CHECK(mismatches == 0);
    CHECK(long_pieces > 1000);
    bpe_cache_free(c);
    bpe_cache_free(tiny);
}

/*
 * Each method of bpe_encode_piece_with() run directly (no shortcut, no cache)
 * against the oracle: the cut-and-lookup path that bpe_encode_piece() uses
 * after its cache, the plain merge loops and encoder.py's loop.
 */
static void test_methods(void)
{
    enum { CAP = 200, ITERS = 210000 };
    static const int methods[] = { BPE_METHOD_SPLIT, BPE_METHOD_MERGE, BPE_METHOD_LITERAL };
    unsigned char piece[CAP];
    uint32_t got[CAP];
    int64_t ref[CAP];
    size_t mismatches[3] = { 0, 0, 0 }, kinds[7] = { 0 };
    double t0 = now();
    for (int iter = 0; iter < ITERS; iter++) {
        int kind = (int)rndn(7);
        size_t n;
        if (kind == 6) {
            /* a run of CJK, Indic or Cyrillic characters, the usual case for the cut */
            static const uint32_t base[] = { 0x4E00, 0x0900, 0x0B80, 0x0E00, 0x0400, 0x3040, 0xAC00 };
            static const uint32_t span[] = { 0x5200, 0x80, 0x80, 0x80, 0x100, 0xC0, 0x2BA4 };
            int r = (int)rndn(7);
            size_t cps = 1 + rndn(16);
            n = 0;
            if (rndn(3) == 0)
                piece[n++] = ' ';
            for (size_t i = 0; i < cps && n + 4 <= CAP; i++)
                n += put_utf8(piece + n, base[r] + (uint32_t)rndn(rndn(2) ? 16 : span[r]));
        } else {
            n = random_piece(piece, CAP, kind);
        }
        kinds[kind]++;
        size_t om = oracle_encode(&gpt2_oracle, gpt2, piece, n, ref);
        for (int k = 0; k < 3; k++) {
            size_t m = bpe_encode_piece_with(gpt2, methods[k], piece, n, got);
            int ok = m == om;
            for (size_t i = 0; ok && i < m; i++)
                ok = ref[i] == got[i];
            if (!ok && mismatches[k]++ < 3) {
                fprintf(stderr, "method %d: mismatch on piece of %zu bytes:", methods[k], n);
                for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %02x", piece[i]);
                fprintf(stderr, "\n");
            }
        }
    }
    printf("# methods: %d pieces (kinds %zu %zu %zu %zu %zu %zu %zu), mismatches split %zu merge %zu literal %zu,"
           " %.1f s\n", ITERS, kinds[0], kinds[1], kinds[2], kinds[3], kinds[4], kinds[5], kinds[6],
           mismatches[0], mismatches[1], mismatches[2], now() - t0);
    CHECK(mismatches[0] == 0 && mismatches[1] == 0 && mismatches[2] == 0);
    CHECK(bpe_encode_piece_with(gpt2, 99, piece, 3, got) == 0);
    CHECK(bpe_encode_piece_with(gpt2, BPE_METHOD_SPLIT, piece, 0, got) == 0);
    /* cuts: CJK characters that are tokens come back as themselves */
    static const char cjk[] = "\xe7\x9a\x84\xe4\xb8\x80\xe7\x9a\x84"; /* U+7684 U+4E00 U+7684 */
    size_t m = bpe_encode_piece_with(gpt2, BPE_METHOD_SPLIT, (const unsigned char *)cjk, 9, got);
    size_t om = oracle_encode(&gpt2_oracle, gpt2, (const unsigned char *)cjk, 9, ref);
    CHECK(m == om && m >= 3);
    for (size_t i = 0; i < m && m == om; i++)
        CHECK(ref[i] == got[i]);
}

static void long_piece(const char *what, const unsigned char *p, size_t n)
{
    bpe_cache *c;
    CHECK(bpe_cache_new(&c, 16) == 0);
    uint32_t *ids = malloc(n * sizeof *ids);
    unsigned char *back = malloc(n);
    double t0 = now();
    size_t m = bpe_encode_piece(gpt2, c, p, n, ids);
    double dt = now() - t0;
    printf("# %s: %zu bytes -> %zu tokens in %.3f s\n", what, n, m, dt);
    CHECK(dt < 1.0);
    size_t got;
    CHECK(bpe_decode(gpt2, ids, m, back, n, &got) == 0 && got == n && memcmp(back, p, n) == 0);
    /* same answer without a cache (per-call scratch), and by the methods directly */
    uint32_t *ids2 = malloc(n * sizeof *ids2);
    CHECK(bpe_encode_piece(gpt2, NULL, p, n, ids2) == m && memcmp(ids, ids2, m * sizeof *ids) == 0);
    t0 = now();
    CHECK(bpe_encode_piece_with(gpt2, BPE_METHOD_SPLIT, p, n, ids2) == m && memcmp(ids, ids2, m * sizeof *ids) == 0);
    CHECK(bpe_encode_piece_with(gpt2, BPE_METHOD_MERGE, p, n, ids2) == m && memcmp(ids, ids2, m * sizeof *ids) == 0);
    dt = now() - t0;
    CHECK(dt < 2.0);
    free(ids2);
    free(ids);
    free(back);
    bpe_cache_free(c);
}

static void test_long_pieces(void)
{
    size_t n = 1000000;
    unsigned char *p = malloc(n);
    memset(p, 'a', n);
    long_piece("'a' x 1e6", p, n);
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)b64[rndn(64)];
    long_piece("random base64 1 MB", p, n);
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i % 2 ? ' ' : '\n');
    long_piece("' \\n' x 5e5", p, n);
    free(p);
    /* 3 MB of CJK and Devanagari: many cuts and parts */
    n = 3000000;
    p = malloc(n);
    size_t w = 0;
    while (w + 4 <= n)
        w += put_utf8(p + w, rndn(2) ? 0x4E00 + (uint32_t)rndn(0x5200) : 0x0900 + (uint32_t)rndn(0x80));
    long_piece("CJK + Devanagari 3 MB", p, w);
    free(p);

    /* the heap path against the oracle on a few medium pieces */
    size_t mismatches = 0;
    enum { M = 3000 };
    unsigned char *q = malloc(M);
    uint32_t *ids = malloc(M * sizeof *ids);
    int64_t *ref = malloc(M * sizeof *ref);
    for (int k = 0; k < 6; k++) {
        for (size_t i = 0; i < M; i++)
            q[i] = k < 3 ? (unsigned char)b64[rndn(64)] : (unsigned char)"ab "[rndn(3)];
        size_t m = bpe_encode_piece(gpt2, NULL, q, M, ids);
        size_t om = oracle_encode(&gpt2_oracle, gpt2, q, M, ref);
        int ok = m == om;
        for (size_t i = 0; ok && i < m; i++)
            ok = ref[i] == ids[i];
        mismatches += !ok;
    }
    CHECK(mismatches == 0);
    free(q);
    free(ids);
    free(ref);
}

/* ------------------------------------------------------------------------- */
/* synthetic files                                                            */

static char *tpath(const char *name)
{
    static char buf[4][256];
    static int k;
    char *p = buf[k++ & 3];
    snprintf(p, 256, "%s/%s", tmpdir, name);
    return p;
}

/* alphabet text of raw bytes, as UTF-8 */
static size_t alpha(char *dst, const char *raw)
{
    size_t w = 0;
    for (const unsigned char *p = (const unsigned char *)raw; *p; p++)
        w += put_utf8((unsigned char *)dst + w, b2u[*p]);
    dst[w] = 0;
    return w;
}

/*
 * Writes a vocab with the 256 bytes (ids 0..255, written as \u escapes of
 * their alphabet code points) followed by extra tokens, and a merges file
 * with a header, the given lines and a final newline.
 */
static void write_synthetic(const char *vocab, const char *merges, const char *const *extra,
                            const char *const *lines)
{
    char *buf = malloc(1 << 16);
    size_t w = 0;
    w += (size_t)sprintf(buf + w, "{");
    for (int v = 0; v < 256; v++)
        w += (size_t)sprintf(buf + w, "%s\"\\u%04x\": %d", v ? ", " : "", b2u[v], v);
    int id = 256;
    for (; extra && *extra; extra++) {
        char a[256];
        alpha(a, *extra);
        w += (size_t)sprintf(buf + w, ",\n \"%s\": %d", a, id++);
    }
    w += (size_t)sprintf(buf + w, "}\n");
    write_file(vocab, buf, w);
    w = (size_t)sprintf(buf, "#version: 0.2\n");
    for (; lines && *lines; lines++) {
        char a[256], b[256];
        const char *sp = strchr(*lines, ' ');
        char left[128];
        memcpy(left, *lines, (size_t)(sp - *lines));
        left[sp - *lines] = 0;
        alpha(a, left);
        alpha(b, sp + 1);
        w += (size_t)sprintf(buf + w, "%s %s\n", a, b);
    }
    write_file(merges, buf, w);
    free(buf);
}

static size_t enc(const bpe *b, bpe_cache *c, const char *s, uint32_t *out)
{
    return bpe_encode_piece(b, c, (const unsigned char *)s, strlen(s), out);
}

static int tok(const bpe *b, const char *s) { return bpe_token_id(b, s, strlen(s)); }

/* all strings over a small alphabet up to a length, fast path vs oracle */
static size_t exhaustive(const bpe *b, struct oracle *o, const char *alphabet, size_t maxlen)
{
    size_t k = strlen(alphabet), bad = 0;
    unsigned char s[16];
    uint32_t out[16];
    int64_t ref[16];
    bpe_cache *c;
    bpe_cache_new(&c, 64);
    for (size_t len = 1; len <= maxlen; len++) {
        size_t total = 1;
        for (size_t i = 0; i < len; i++) total *= k;
        for (size_t x = 0; x < total; x++) {
            size_t y = x;
            for (size_t i = 0; i < len; i++, y /= k) s[i] = (unsigned char)alphabet[y % k];
            size_t m = bpe_encode_piece(b, c, s, len, out), om = oracle_encode(o, b, s, len, ref);
            int ok = m == om;
            for (size_t i = 0; ok && i < m; i++) ok = ref[i] == out[i];
            bad += !ok;
            for (int meth = BPE_METHOD_LITERAL; meth <= BPE_METHOD_SPLIT; meth++) {
                if (meth == BPE_METHOD_MERGE && !(bpe_flags(b) & BPE_FLAG_TRAINED_ORDER))
                    continue;
                m = bpe_encode_piece_with(b, meth, s, len, out);
                ok = m == om;
                for (size_t i = 0; ok && i < m; i++) ok = ref[i] == out[i];
                bad += !ok;
            }
        }
    }
    bpe_cache_free(c);
    return bad;
}

static void test_untrained_order(void)
{
    /* (abc, a) is ranked before the merge that makes abc: heap order would give
     * "abca bc" for "abcabc", encoder.py gives "abc abc" */
    static const char *const extra[] = { "bc", "abc", "abca", "aa", "aaaa", NULL };
    static const char *const lines[] = { "b c", "abc a", "a bc", "a a", "aa aa", NULL };
    const char *v = tpath("u.json"), *m = tpath("u.txt");
    write_synthetic(v, m, extra, lines);
    bpe *b = NULL;
    char err[256];
    CHECK(bpe_load(&b, v, m, err, sizeof err) == 0);
    if (!b)
        return;
    CHECK(!(bpe_flags(b) & BPE_FLAG_TRAINED_ORDER));
    uint32_t out[64];
    int bc = tok(b, "bc"), abc = tok(b, "abc"), abca = tok(b, "abca");
    CHECK(bc == 256 && abc == 257 && abca == 258);
    CHECK(enc(b, NULL, "abcabc", out) == 2 && out[0] == (uint32_t)abc && out[1] == (uint32_t)abc);
    CHECK(enc(b, NULL, "abca", out) == 1 && out[0] == (uint32_t)abca);
    CHECK(enc(b, NULL, "aaa", out) == 2 && out[0] == (uint32_t)tok(b, "aa") && out[1] == 'a');
    struct oracle o;
    CHECK(oracle_load(&o, m) == 0);
    CHECK(exhaustive(b, &o, "abc", 9) == 0);
    oracle_free(&o);
    bpe_free(b);
}

static void test_trained_synthetic(void)
{
    /* trained order, and a long piece on the heap path vs the oracle */
    static const char *const extra[] = { "aa", "ab", "aaaa", "aab", "ba", "abab", "aaaaaaaa", NULL };
    static const char *const lines[] = { "a a", "a b", "aa aa", "a ab", "b a", "ab ab", "aaaa aaaa", NULL };
    const char *v = tpath("t.json"), *m = tpath("t.txt");
    write_synthetic(v, m, extra, lines);
    bpe *b = NULL;
    char err[256];
    CHECK(bpe_load(&b, v, m, err, sizeof err) == 0);
    if (!b)
        return;
    CHECK(bpe_flags(b) & BPE_FLAG_TRAINED_ORDER);
    struct oracle o;
    CHECK(oracle_load(&o, m) == 0);
    CHECK(exhaustive(b, &o, "ab", 12) == 0);
    size_t bad = 0;
    unsigned char p[500];
    uint32_t out[500];
    int64_t ref[500];
    for (int k = 0; k < 300; k++) {
        size_t n = 65 + rndn(400);
        for (size_t i = 0; i < n; i++) p[i] = (unsigned char)"ab"[rndn(k % 3 ? 2 : 1)];
        size_t mm = bpe_encode_piece(b, NULL, p, n, out), om = oracle_encode(&o, b, p, n, ref);
        int ok = mm == om;
        for (size_t i = 0; ok && i < mm; i++) ok = ref[i] == out[i];
        bad += !ok;
    }
    CHECK(bad == 0);
    oracle_free(&o);
    bpe_free(b);
}

static void test_merges_parsing(void)
{
    const char *v = tpath("p.json"), *m = tpath("p.txt");
    static const char *const extra[] = { "ab", "bc", "cd", NULL };
    write_synthetic(v, m, extra, NULL);
    /* CRLF and lone CR are line breaks; blank and 3-field lines use up a rank;
     * a pair listed twice keeps its last rank; no final newline loses the last merge */
    const char *text = "#version: 0.2\r\nb c\r\n\r\nx y z\rc d\na b\nb c\nc d";
    write_file(m, text, strlen(text));
    bpe *b = NULL;
    char err[256];
    CHECK(bpe_load(&b, v, m, err, sizeof err) == 0);
    if (!b)
        return;
    uint32_t out[8];
    /* ranks: "b c" 0 then 5 (last wins), blank 1, "x y z" 2, "c d" 3, "a b" 4, "c d" (last) dropped */
    CHECK(enc(b, NULL, "abc", out) == 2 && out[0] == (uint32_t)tok(b, "ab") && out[1] == 'c');
    CHECK(enc(b, NULL, "bcd", out) == 2 && out[0] == 'b' && out[1] == (uint32_t)tok(b, "cd"));
    CHECK(enc(b, NULL, "bc", out) == 1 && out[0] == (uint32_t)tok(b, "bc"));
    bpe_free(b);

    /* any Unicode whitespace splits a line (Python str.split) */
    text = "#v\na\xe3\x80\x80" "b\n";
    write_file(m, text, strlen(text));
    CHECK(bpe_load(&b, v, m, err, sizeof err) == 0);
    if (b) {
        CHECK(enc(b, NULL, "ab", out) == 1 && out[0] == (uint32_t)tok(b, "ab"));
        bpe_free(b);
    }
    /* an empty merges file, or one with only a header line, has no merges */
    write_file(m, "", 0);
    CHECK(bpe_load(&b, v, m, err, sizeof err) == 0);
    if (b) {
        CHECK(enc(b, NULL, "ab", out) == 2);
        bpe_free(b);
    }
    /* merges that can never apply are ignored even if their result is no token:
     * "zz" is no token, "cd" is a token that no merge makes */
    text = "#v\nzz q\ncd a\na b\n";
    write_file(m, text, strlen(text));
    CHECK(bpe_load(&b, v, m, err, sizeof err) == 0);
    if (b) {
        CHECK(enc(b, NULL, "ab", out) == 1);
        bpe_free(b);
    }
}

static int load_fails(const char *vocab_text, const char *merges_text, int code, const char *msg_part)
{
    const char *v = tpath("e.json"), *m = tpath("e.txt");
    if (vocab_text)
        write_file(v, vocab_text, strlen(vocab_text));
    if (merges_text)
        write_file(m, merges_text, strlen(merges_text));
    bpe *b = (bpe *)&b;
    char err[256];
    int rc = bpe_load(&b, v, m, err, sizeof err);
    int ok = rc == code && b == NULL && strstr(err, msg_part) != NULL;
    if (!ok)
        fprintf(stderr, "load_fails: rc %d, message '%s', wanted %d with '%s'\n", rc, err, code, msg_part);
    bpe_free(b == (bpe *)&b ? NULL : b);
    return ok;
}

static void test_load_errors(void)
{
    bpe *b = (bpe *)&b;
    char err[256];
    CHECK(bpe_load(&b, "no/such/vocab.json", MERGES, err, sizeof err) == BPE_ERR_IO);
    CHECK(b == NULL && strstr(err, "cannot open 'no/such/vocab.json'") != NULL);
    CHECK(bpe_load(&b, VOCAB, "no/such/merges.txt", err, sizeof err) == BPE_ERR_IO);
    CHECK(strstr(err, "'no/such/merges.txt'") != NULL);
    CHECK(bpe_load(&b, VOCAB, MERGES, NULL, 0) == 0);
    bpe_free(b);
    CHECK(bpe_load(NULL, VOCAB, MERGES, err, sizeof err) == BPE_ERR_ARG);

    /* a valid base to break */
    static const char *const extra[] = { "ab", NULL };
    static const char *const lines[] = { "a b", NULL };
    write_synthetic(tpath("e.json"), tpath("e.txt"), extra, lines);
    size_t len;
    unsigned char *good = read_all(tpath("e.json"), &len);
    CHECK(load_fails(NULL, "#v\na b\nb c\n", BPE_ERR_MERGES, "line 3: merge 'b c' makes a token that is not in the vocab"));
    CHECK(load_fails(NULL, "#v\na b\n\xff\n", BPE_ERR_MERGES, "line 3, column 1: invalid UTF-8"));

    char *v = malloc(len + 64);
    CHECK(load_fails("{\"a\": 0,\n \"b\" 1}", NULL, BPE_ERR_VOCAB, "line 2, column 6: expected ':'"));
    CHECK(load_fails("[]", NULL, BPE_ERR_VOCAB, "line 1, column 1: expected '{'"));
    CHECK(load_fails("{\"a\": 0} x", NULL, BPE_ERR_VOCAB, "trailing data"));
    CHECK(load_fails("{\"a\": -1}", NULL, BPE_ERR_VOCAB, "non-negative integer"));
    CHECK(load_fails("{\"a\": 1.0}", NULL, BPE_ERR_VOCAB, "non-negative integer"));
    CHECK(load_fails("{\"a\": 0}", NULL, BPE_ERR_VOCAB, "no token for byte 0x00"));
    CHECK(load_fails("{\"a b\": 0}", NULL, BPE_ERR_VOCAB, "U+0020 is outside the byte alphabet"));
    CHECK(load_fails("{\"\\ud83d\\ude00\": 0}", NULL, BPE_ERR_VOCAB, "U+1F600 is outside"));
    CHECK(load_fails("{\"\\ud800\": 0}", NULL, BPE_ERR_VOCAB, "U+D800 is outside"));
    CHECK(load_fails("{\"\": 0}", NULL, BPE_ERR_VOCAB, "empty token"));
    CHECK(load_fails("{\"a\": 0, \"b\": 0}", NULL, BPE_ERR_VOCAB, "duplicate id 0"));
    CHECK(load_fails("{\"a\": 0, \"b\": 5}", NULL, BPE_ERR_VOCAB, "id 5 out of range"));
    CHECK(load_fails("{\"a\": 0, \"a\": 1}", NULL, BPE_ERR_VOCAB, "duplicate token 'a'"));
    CHECK(load_fails("{\"a\": 0", NULL, BPE_ERR_VOCAB, "expected ',' or '}'"));
    CHECK(load_fails("{\"a\x01\": 0}", NULL, BPE_ERR_VOCAB, "control character"));
    CHECK(load_fails("{\"\\q\": 0}", NULL, BPE_ERR_VOCAB, "bad escape"));
    CHECK(load_fails("{}", NULL, BPE_ERR_VOCAB, "no tokens"));
    /* the good vocab with its last token id bumped past the end */
    memcpy(v, good, len);
    v[len] = 0;
    char *last = strstr(v, ": 256}");
    CHECK(last != NULL);
    if (last) {
        memcpy(last, ": 999}", 6);
        CHECK(load_fails(v, NULL, BPE_ERR_VOCAB, "line 2: id 999 out of range (ids must be 0..256)"));
    }
    /* escapes that are in the alphabet load fine ("\/" and "\"" are bytes) */
    write_file(tpath("e.json"), (const char *)good, len);
    free(v);
    free(good);
}

static void test_cache(void)
{
    bpe_cache *c;
    CHECK(bpe_cache_new(&c, (size_t)1 << 25) == BPE_ERR_ARG && c == NULL);
    CHECK(bpe_cache_new(NULL, 16) == BPE_ERR_ARG);
    CHECK(bpe_cache_new(&c, 0) == 0);
    golden_pieces(c); /* caching off */
    bpe_cache_free(c);
    bpe_cache_free(NULL);
    bpe_free(NULL);

    /* both slot classes, collisions and pieces too long or too fragmented to
     * cache: a tiny cache must give the uncached answers */
    enum { NP = 3000, CAP = 200 };
    unsigned char *pieces = malloc(NP * CAP);
    size_t *lens = malloc(NP * sizeof *lens), *counts = malloc(NP * sizeof *counts);
    uint32_t *want = malloc(NP * CAP * sizeof *want), got[CAP];
    for (size_t i = 0; i < NP; i++) {
        int kind = (int)rndn(4);
        lens[i] = random_piece(pieces + i * CAP, kind == 0 ? 24 : kind == 1 ? 120 : CAP, (int)rndn(6));
        counts[i] = bpe_encode_piece(gpt2, NULL, pieces + i * CAP, lens[i], want + i * CAP);
    }
    size_t bad = 0;
    for (int size = 1; size <= 256; size *= 16) {
        CHECK(bpe_cache_new(&c, (size_t)size) == 0);
        for (size_t k = 0; k < 4 * NP; k++) {
            size_t i = k < NP ? k : rndn(NP / (size == 1 ? 1 : 20)); /* repeats hit */
            size_t m = bpe_encode_piece(gpt2, c, pieces + i * CAP, lens[i], got);
            bad += !ids_equal(got, m, want + i * CAP, counts[i]);
        }
        bpe_cache_free(c);
    }
    CHECK(bad == 0);
    free(pieces);
    free(lens);
    free(counts);
    free(want);

    /* a cache filled by one handle is not trusted by another */
    static const char *const extra[] = { "ab", "bc", NULL };
    static const char *const lines[] = { "a b", "b c", NULL };
    static const char *const lines2[] = { "b c", "a b", NULL };
    write_synthetic(tpath("c1.json"), tpath("c1.txt"), extra, lines);
    write_synthetic(tpath("c2.json"), tpath("c2.txt"), extra, lines2);
    bpe *b1, *b2;
    CHECK(bpe_load(&b1, tpath("c1.json"), tpath("c1.txt"), NULL, 0) == 0);
    CHECK(bpe_load(&b2, tpath("c2.json"), tpath("c2.txt"), NULL, 0) == 0);
    CHECK(bpe_cache_new(&c, 64) == 0);
    uint32_t out[4];
    CHECK(enc(b1, c, "abc", out) == 2 && out[0] == 256);
    CHECK(enc(b2, c, "abc", out) == 2 && out[0] == 'a' && out[1] == 257);
    CHECK(enc(b1, c, "abc", out) == 2 && out[0] == 256);
    bpe_cache_free(c);
    bpe_free(b1);
    bpe_free(b2);
}

/* rough speed: pieces made by splitting a text file before spaces */
static void bench_file(const char *path)
{
    size_t len;
    unsigned char *text = read_all(path, &len);
    if (!text) {
        fprintf(stderr, "cannot read '%s'\n", path);
        return;
    }
    size_t *starts = malloc((len + 1) * sizeof *starts), np = 0;
    for (size_t i = 0; i < len; i++)
        if (i == 0 || (text[i] == ' ' && text[i - 1] != ' ') || text[i] == '\n' || text[i - 1] == '\n')
            starts[np++] = i;
    starts[np] = len;
    uint32_t *ids = malloc(len * sizeof *ids);
    bpe_cache *c;
    bpe_cache_new(&c, 16384);
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now();
        size_t nt = 0;
        for (size_t i = 0; i < np; i++)
            nt += bpe_encode_piece(gpt2, c, text + starts[i], starts[i + 1] - starts[i], ids + nt);
        double dt = now() - t0;
        printf("# bench %s: %zu bytes, %zu pieces, %zu tokens, %.3f s, %.1f MB/s, %.1f ns/piece\n", path, len,
               np, nt, dt, (double)len / dt / 1e6, dt / (double)np * 1e9);
    }
    bpe_cache_free(c);
    free(ids);
    free(starts);
    free(text);
}

int main(int argc, char **argv)
{
    const char *bench = NULL;
    seed = (uint64_t)time(NULL) ^ (uint64_t)getpid() << 16;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-s") == 0 && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 0);
        else if (strcmp(argv[i], "-b") == 0 && i + 1 < argc)
            bench = argv[++i];
        else {
            fprintf(stderr, "usage: test_bpe [-s SEED] [-b TEXTFILE]\n");
            return 2;
        }
    }
    printf("# seed = %llu (replay with -s %llu)\n", (unsigned long long)seed, (unsigned long long)seed);
    rng_state = seed;
    oracle_alphabet();
    char err[512];
    if (bpe_load(&gpt2, VOCAB, MERGES, err, sizeof err) != 0) {
        fprintf(stderr, "test_bpe: %s\n", err);
        return 1;
    }
    if (oracle_load(&gpt2_oracle, MERGES) != 0) {
        fprintf(stderr, "test_bpe: cannot read '%s'\n", MERGES);
        return 1;
    }
    if (bench) {
        bench_file(bench);
    } else {
        if (!mkdtemp(tmpdir)) {
            perror("test_bpe: mkdtemp");
            return 1;
        }
        RUN(test_alphabet);
        RUN(test_load_gpt2);
        RUN(test_golden_pieces);
        RUN(test_vocab_self);
        RUN(test_decode);
        RUN(test_roundtrip_random);
        RUN(test_cross_check);
        RUN(test_methods);
        RUN(test_long_pieces);
        RUN(test_untrained_order);
        RUN(test_trained_synthetic);
        RUN(test_merges_parsing);
        RUN(test_load_errors);
        RUN(test_cache);
        const char *names[] = { "u.json", "u.txt", "t.json", "t.txt", "p.json", "p.txt", "e.json", "e.txt",
                                "c1.json", "c1.txt", "c2.json", "c2.txt" };
        for (size_t i = 0; i < sizeof names / sizeof *names; i++)
            unlink(tpath(names[i]));
        rmdir(tmpdir);
    }
    oracle_free(&gpt2_oracle);
    bpe_free(gpt2);
    return harness_report();
}
