/*
 * test_tokenizer.c - the tokenizer interface (tokenizer.h) and its engines
 * against what the reference libraries wrote into tests/data/tokenizers/
 * (make_fixtures.py): Megatron's wrappers' ids for every test tokenizer,
 * tokenizers' Split splits for the scanners and the general regex engine,
 * tokenizers' NFC; and the loaders' refusals of malformed and unsupported
 * files.  Randomised parts print their seed and take -s SEED.
 */
#include "harness.h"
#include "hftab.h"
#include "jsontree.h"
#include "nfc.h"
#include "pretok.h"
#include "tokenizer.h"
#include "unitab.h"
#include "utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *root;
static unsigned seed_arg;
static char tmpdir[256];

static char *path(const char *rel)
{
    static char buf[4][1024];
    static int k;
    k = (k + 1) & 3;
    snprintf(buf[k], sizeof buf[k], "%s/tests/data/tokenizers/%s", root, rel);
    return buf[k];
}

/* Reads a JSON-lines fixture: calls fn on each parsed line. */
static int each_line(const char *file, void (*fn)(const jt_node *, void *), void *ctx)
{
    FILE *f = fopen(file, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", file);
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int n = 0;
    while ((len = getline(&line, &cap, f)) > 0) {
        jt_doc *d;
        char err[256];
        if (jt_parse(&d, file, line, (size_t)len, err, sizeof err) != 0) {
            fprintf(stderr, "%s\n", err);
            n = -1;
            break;
        }
        fn(jt_root(d), ctx);
        jt_free(d);
        n++;
    }
    free(line);
    fclose(f);
    return n;
}

/* ---- reference ids -------------------------------------------------------- */

struct refctx {
    tok *t;
    tok_state *st;
    tok_ids ids;
    int bad, lines;
    const char *name;
};

static void ref_line(const jt_node *r, void *vp)
{
    struct refctx *c = vp;
    const jt_node *vs = jt_get(r, "vocab_size");
    if (vs) {
        const jt_node *eod = jt_get(r, "eod");
        if ((size_t)vs->i != tok_vocab_size(c->t) || eod->i != tok_eod(c->t)) {
            fprintf(stderr, "%s: vocab_size %zu eod %lld, want %lld %lld\n", c->name, tok_vocab_size(c->t),
                    (long long)tok_eod(c->t), (long long)vs->i, (long long)eod->i);
            c->bad++;
        }
        return;
    }
    const jt_node *text = jt_get(r, "text"), *want = jt_get(r, "ids");
    c->ids.n = 0;
    int rc = tok_encode(c->t, c->st, (const unsigned char *)text->str, text->len, &c->ids);
    int same = rc == 0 && c->ids.n == want->len;
    for (size_t i = 0; same && i < want->len; i++) same = c->ids.ids[i] == (uint32_t)want->kids[i].i;
    if (!same && c->bad++ < 3) fprintf(stderr, "%s: line %d differs\n", c->name, c->lines + 1);
    c->lines++;
}

static void check_ref(const char *name, int type, const char *model, int use_pcre2)
{
    char file[64], err[1024];
    snprintf(file, sizeof file, "ref-%s.jsonl", name);
    tok_options o = { type, path(model), NULL, NULL, 0, use_pcre2, 0 };
    struct refctx c = { NULL, NULL, { NULL, 0, 0 }, 0, 0, name };
    int rc = tok_open(&c.t, &o, err, sizeof err);
    CHECK(rc == 0);
    if (rc) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    CHECK(tok_state_new(c.t, &c.st) == 0);
    CHECK(each_line(path(file), ref_line, &c) > 500);
    CHECK(c.bad == 0);
    free(c.ids.ids);
    tok_state_free(c.st);
    tok_free(c.t);
}

static void test_hf_llama3(void) { check_ref("hf-llama3", TOK_HUGGINGFACE, "hf-llama3", 0); }
static void test_hf_qwen(void) { check_ref("hf-qwen", TOK_HUGGINGFACE, "hf-qwen/tokenizer.json", 0); }
static void test_hf_neox(void) { check_ref("hf-neox", TOK_HUGGINGFACE, "hf-neox", 0); }
static void test_hf_tekken(void) { check_ref("hf-tekken", TOK_HUGGINGFACE, "hf-tekken", 0); }
static void test_hf_pcre2(void)
{
    check_ref("hf-llama3", TOK_HUGGINGFACE, "hf-llama3", 1);
    check_ref("hf-qwen", TOK_HUGGINGFACE, "hf-qwen", 1);
    check_ref("hf-neox", TOK_HUGGINGFACE, "hf-neox", 1);
    check_ref("hf-tekken", TOK_HUGGINGFACE, "hf-tekken", 1);
}
static void test_sp_bpe(void)
{
    check_ref("sp-bpe-sp", TOK_SENTENCEPIECE, "sp-bpe.model", 0);
    check_ref("sp-bpe-gptsp", TOK_GPT_SENTENCEPIECE, "sp-bpe.model", 0);
    check_ref("sp-bpe-llama2", TOK_LLAMA2, "sp-bpe.model", 0);
}
static void test_sp_unigram(void)
{
    check_ref("sp-unigram-sp", TOK_SENTENCEPIECE, "sp-unigram.model", 0);
    check_ref("sp-unigram-gptsp", TOK_GPT_SENTENCEPIECE, "sp-unigram.model", 0);
    check_ref("sp-unigram-llama2", TOK_LLAMA2, "sp-unigram.model", 0);
}

/* ---- splits ---------------------------------------------------------------- */

struct splitctx {
    int pat;                 /* PRETOK_PAT_* for the scanner, or NONE */
    pretok_regex *re;
    pretok_match *m;
    int bad, lines;
};

static void split_line(const jt_node *r, void *vp)
{
    struct splitctx *c = vp;
    const jt_node *text = jt_get(r, "text"), *ends = jt_get(r, "ends");
    const unsigned char *s = (const unsigned char *)text->str;
    size_t n = text->len, k = 0, pos = 0;
    int same = 1;
    if (c->re) {
        /* find_iter, as tokenizers walks matches (these patterns have no empty ones) */
        size_t prev = 0;
        while (pos < n && same) {
            size_t ms, me;
            int rc = pretok_regex_search(c->re, c->m, s, n, pos, &ms, &me);
            if (rc <= 0) break;
            if (ms != prev) same = k < ends->len && (size_t)ends->kids[k++].i == ms;
            same = same && k < ends->len && (size_t)ends->kids[k++].i == me;
            prev = pos = me;
        }
        if (same && prev != n) same = k < ends->len && (size_t)ends->kids[k++].i == n;
    } else {
        while (pos < n && same) {
            size_t e = pretok_scanner(c->pat)(s, n, pos);
            same = k < ends->len && (size_t)ends->kids[k++].i == e;
            pos = e;
        }
    }
    same = same && k == ends->len;
    if (!same && c->bad++ < 3) fprintf(stderr, "split line %d differs\n", c->lines + 1);
    c->lines++;
}

static const char *const PATTERNS[4] = {
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
static const char *const SPLIT_FILES[4] = {"splits-gpt2.jsonl", "splits-llama3.jsonl", "splits-qwen2.jsonl", "splits-tekken.jsonl"};
static const int SCANNERS[4] = {PRETOK_PAT_GPT2, PRETOK_PAT_LLAMA3, PRETOK_PAT_QWEN2, PRETOK_PAT_TEKKEN};

static void test_scanners(void)
{
    for (int p = 0; p < 4; p++) {
        CHECK(pretok_known_pattern(PATTERNS[p], strlen(PATTERNS[p])) == SCANNERS[p]);
        /* one character less is another pattern, for the engine */
        CHECK(pretok_known_pattern(PATTERNS[p], strlen(PATTERNS[p]) - 1) == PRETOK_PAT_NONE);
        struct splitctx c = { SCANNERS[p], NULL, NULL, 0, 0 };
        CHECK(each_line(path(SPLIT_FILES[p]), split_line, &c) > 1000);
        CHECK(c.bad == 0);
    }
}

static void test_regex_engine(void)
{
    for (int p = 0; p < 4; p++) {
        char err[256];
        struct splitctx c = { PRETOK_PAT_NONE, NULL, NULL, 0, 0 };
        CHECK(pretok_regex_new(&c.re, PATTERNS[p], strlen(PATTERNS[p]), 0, err, sizeof err) == 0);
        CHECK(c.re && pretok_match_new(&c.m, c.re) == 0);
        if (!c.m) continue;
        CHECK(each_line(path(SPLIT_FILES[p]), split_line, &c) > 1000);
        CHECK(c.bad == 0);
        pretok_match_free(c.m);
        pretok_regex_free(c.re);
    }
}

/* Compares a scanner's pieces of s with the engine's matches; prints the first difference. */
static int same_as_engine(int p, pretok_regex *re, pretok_match *m, const unsigned char *s, size_t n)
{
    for (size_t pos = 0; pos < n;) {
        size_t e = pretok_scanner(SCANNERS[p])(s, n, pos), ms, me;
        int rc = pretok_regex_search(re, m, s, n, pos, &ms, &me);
        if (rc != 1 || ms != pos || me != e) {
            fprintf(stderr, "pattern %d, string '", p);
            for (size_t i = 0; i < n; i++) fprintf(stderr, s[i] < 0x20 || s[i] >= 0x7F ? "\\x%02X" : "%c", s[i]);
            fprintf(stderr, "' at %zu: scanner %zu, engine %zu\n", pos, e, rc == 1 ? me : 0);
            return 0;
        }
        pos = e;
    }
    return 1;
}

/* Characters of every Unicode 16.0 general category (hftab.c), and those the
 * patterns name: CR, LF, space, apostrophe, the contractions' letters, '/'. */
static const char *const CATEGORY_CHARS[] = {
    "A", "\xc3\x89", "\xe1\xb2\x89", "\xea\x9f\x8b",   /* Lu (U+1C89, U+A7CB: new in 16.0) */
    "a", "s", "t", "\xc3\xa9", "\xc5\xbf", "\xe1\xb2\x8a", /* Ll (U+017F long s; U+1C8A: 16.0) */
    "\xc7\x85",                                        /* Lt */
    "\xca\xb0",                                        /* Lm */
    "\xe4\xb8\xad", "\xc2\xaa",                        /* Lo */
    "\xcc\x81", "\xe0\xa4\x83", "\xe2\x83\x9d",        /* Mn, Mc, Me */
    "1", "\xd9\xa1", "\xe2\x85\xa0", "\xc2\xb2",       /* Nd, Nd, Nl, No */
    "_", "-", "(", ")", "\xc2\xab", "\xc2\xbb",        /* Pc Pd Ps Pe Pi Pf */
    ".", "'", "\"", "/",                               /* Po */
    "+", "$", "^", "\xf0\x9f\x98\x80",                 /* Sm Sc Sk So */
    " ", "\xc2\xa0", "\xe3\x80\x80",                   /* Zs */
    "\xe2\x80\xa8", "\xe2\x80\xa9",                    /* Zl, Zp */
    "\t", "\n", "\r", "\x0b", "\xc2\x85", "\x01",     /* Cc (all but U+0001 are White_Space) */
    "\xe2\x80\x8d", "\xe1\xa0\x8e",                    /* Cf (U+180E: not White_Space) */
    "\xee\x80\x80", "\xcd\xb8",                        /* Co, Cn */
};
#define NCAT (sizeof CATEGORY_CHARS / sizeof CATEGORY_CHARS[0])

static size_t put_chars(unsigned char *s, size_t n, const char *a)
{
    memcpy(s + n, a, strlen(a));
    return n + strlen(a);
}

/* The scanners against the engine: every string of one to three of the
 * characters above (every boundary between two categories, in every
 * category's company), then random longer strings with the contractions,
 * then strings of long ASCII letter runs. */
static void test_random_scanners(void)
{
    srand(seed_arg);
    static const char *const extra[] = {"  ", "\r\n", "S", "re", "RE", "ll", "LL", "ve", "m", "d", "Z", "12", ",", "!"};
    const size_t na = NCAT + sizeof extra / sizeof extra[0];
    pretok_regex *re[4];
    pretok_match *m[4];
    char err[256];
    for (int p = 0; p < 4; p++) {
        CHECK(pretok_regex_new(&re[p], PATTERNS[p], strlen(PATTERNS[p]), 0, err, sizeof err) == 0);
        CHECK(pretok_match_new(&m[p], re[p]) == 0);
    }
    unsigned char s[256];
    int bad = 0;
    for (size_t a = 0; a < NCAT; a++)
        for (size_t b = 0; b <= NCAT; b++)
            for (size_t c = 0; c <= (b < NCAT ? NCAT : 0); c++) {
                size_t n = put_chars(s, 0, CATEGORY_CHARS[a]);
                if (b < NCAT) n = put_chars(s, n, CATEGORY_CHARS[b]);
                if (c < NCAT) n = put_chars(s, n, CATEGORY_CHARS[c]);
                for (int p = 0; p < 4 && bad < 3; p++) bad += !same_as_engine(p, re[p], m[p], s, n);
            }
    for (int iter = 0; iter < 20000 && bad < 3; iter++) {
        size_t n = 0;
        int k = rand() % 24 + 1;
        for (int i = 0; i < k; i++) {
            size_t j = (size_t)rand() % na;
            n = put_chars(s, n, j < NCAT ? CATEGORY_CHARS[j] : extra[j - NCAT]);
        }
        for (int p = 0; p < 4; p++) bad += !same_as_engine(p, re[p], m[p], s, n);
    }
    /* runs of ASCII letters long enough for the scanners' eight-byte step,
       broken by the characters above */
    static const char *const runs[] = {"Internationalization", "abcdefgh", "xyZ", "Q", "@", "[", "`", "{"};
    for (int iter = 0; iter < 20000 && bad < 3; iter++) {
        size_t n = 0;
        int k = rand() % 16 + 1;
        for (int i = 0; i < k && n < sizeof s - 24; i++) {
            size_t j = (size_t)rand() % (4 * NCAT);
            n = put_chars(s, n, j < NCAT ? CATEGORY_CHARS[j] : runs[rand() % (sizeof runs / sizeof runs[0])]);
        }
        for (int p = 0; p < 4; p++) bad += !same_as_engine(p, re[p], m[p], s, n);
    }
    CHECK(bad == 0);
    for (int p = 0; p < 4; p++) {
        pretok_match_free(m[p]);
        pretok_regex_free(re[p]);
    }
}

/* Code points in the Tekken scanner's three contexts that tell its seven
 * classes apart (Lu/Lt, Ll, Lm/Lo, M, N, whitespace, the rest; checked
 * against tokenizers 0.22.2 when chosen): " c a", "..c A", "c A a".  Every
 * code point of the BMP, and beyond it both ends of every range of the
 * category and White_Space tables and their neighbours (every code point
 * would take seconds: the engine's classes are thousands of ranges). */
static int tekken_contexts(pretok_regex *re, pretok_match *m, uint32_t cp)
{
    static const char *const ctx[3][2] = { {" ", "a"}, {"..", "A"}, {"", "Aa"} };
    unsigned char s[16];
    if (cp >= 0x110000 || (cp >= 0xD800 && cp <= 0xDFFF)) return 1;
    for (int k = 0; k < 3; k++) {
        size_t n = put_chars(s, 0, ctx[k][0]);
        n += utf8_put(s + n, cp);
        n = put_chars(s, n, ctx[k][1]);
        if (!same_as_engine(3, re, m, s, n)) return 0;
    }
    return 1;
}

/* utf8_count against the byte-by-byte definition: random bytes (every
 * lead, continuation and ASCII pattern at every offset of the eight-byte
 * words) and random characters, lengths 0 to 40 at every start offset. */
static void test_utf8_count(void)
{
    srand(seed_arg + 3);
    unsigned char buf[64];
    for (int round = 0; round < 20000; round++) {
        size_t n = (size_t)(rand() % 41), off = (size_t)(rand() % 8), len = 0;
        if (round % 2) {
            for (size_t i = 0; i < n; i++) buf[off + i] = (unsigned char)rand();
            len = n;
        } else {
            while (len + 4 <= n) len += utf8_put(buf + off + len, (uint32_t)rand() % 0x110000);
        }
        size_t want = 0;
        for (size_t i = 0; i < len; i++) want += (buf[off + i] & 0xC0) != 0x80;
        if (utf8_count(buf + off, len) != want) {
            CHECK(utf8_count(buf + off, len) == want);
            return;
        }
    }
}

static void test_tekken_code_points(void)
{
    pretok_regex *re;
    pretok_match *m;
    char err[256];
    CHECK(pretok_regex_new(&re, PATTERNS[3], strlen(PATTERNS[3]), 0, err, sizeof err) == 0);
    CHECK(pretok_match_new(&m, re) == 0);
    int bad = 0;
    for (uint32_t cp = 0; cp < 0x10000 && bad < 3; cp++) bad += !tekken_contexts(re, m, cp);
    for (size_t i = 0; i < hftab_gc_len + unitab_space_len && bad < 3; i++) {
        uint32_t lo = i < hftab_gc_len ? hftab_gc[i][0] : unitab_space[i - hftab_gc_len][0];
        uint32_t hi = i < hftab_gc_len ? hftab_gc[i][1] : unitab_space[i - hftab_gc_len][1];
        if (hi < 0x10000) continue;
        bad += !tekken_contexts(re, m, lo - 1) + !tekken_contexts(re, m, lo) + !tekken_contexts(re, m, hi) +
               !tekken_contexts(re, m, hi + 1);
    }
    CHECK(bad == 0);
    pretok_match_free(m);
    pretok_regex_free(re);
}

static void test_regex_refusals(void)
{
    static const struct { const char *pat, *msg; } bad[] = {
        { "\\w+", "the escape \\w" },
        { "\\bfoo", "the escape \\b" },
        { "\\p{Han}", "the class \\p{Han}" },
        { "[[:alpha:]]", "nested character class" },
        { "[a&&b]", "intersection" },
        { "(?u)x", "inline option (?u" },
        { "[abc", "unterminated character class" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pretok_regex *re = NULL;
        char err[256] = "";
        int rc = pretok_regex_new(&re, bad[i].pat, strlen(bad[i].pat), 0, err, sizeof err);
        CHECK(rc == PRETOK_ERR_UNSUPPORTED && !re);
        if (!strstr(err, bad[i].msg)) {
            fprintf(stderr, "'%s': '%s'\n", bad[i].pat, err);
            CHECK(0);
        }
    }
    /* Oniguruma's own escapes mean what they mean there */
    pretok_regex *re;
    pretok_match *m;
    char err[256];
    CHECK(pretok_regex_new(&re, "\\h+\\u00e9", 9, 0, err, sizeof err) == 0 && pretok_match_new(&m, re) == 0);
    size_t ms, me;
    const unsigned char *s = (const unsigned char *)"zz09aF\xc3\xa9";
    CHECK(pretok_regex_search(re, m, s, strlen((const char *)s), 0, &ms, &me) == 1 && ms == 2 && me == 8);
    pretok_match_free(m);
    pretok_regex_free(re);
    /* a literal String pattern */
    CHECK(pretok_regex_new(&re, "a.b", 3, 1, err, sizeof err) == 0 && pretok_match_new(&m, re) == 0);
    s = (const unsigned char *)"axb a.b";
    CHECK(pretok_regex_search(re, m, s, 7, 0, &ms, &me) == 1 && ms == 4 && me == 7);
    pretok_match_free(m);
    pretok_regex_free(re);
}

/* ---- NFC --------------------------------------------------------------------- */

struct nfcctx { unsigned char *out; nfc_scratch sc; int bad, lines; };

static void nfc_line(const jt_node *r, void *vp)
{
    struct nfcctx *c = vp;
    const jt_node *text = jt_get(r, "text"), *want = jt_get(r, "nfc");
    const unsigned char *s = (const unsigned char *)text->str;
    size_t m = nfc_normalize(s, text->len, c->out, &c->sc);
    int ok = m == want->len && memcmp(c->out, want->str, m) == 0;
    /* the quick check never says "unchanged" for a text NFC changes */
    if (nfc_quick_check(s, text->len) == text->len) ok = ok && want->len == text->len && memcmp(s, want->str, m) == 0;
    if (!ok && c->bad++ < 3) fprintf(stderr, "nfc line %d differs\n", c->lines + 1);
    c->lines++;
}

static void test_nfc(void)
{
    struct nfcctx c = { malloc(nfc_bound(4096)), { NULL, 0 }, 0, 0 };
    CHECK(nfc_init() == 0);
    CHECK(each_line(path("nfc.jsonl"), nfc_line, &c) > 3000);
    CHECK(c.bad == 0);
    nfc_scratch_release(&c.sc);
    free(c.out);
}

/* ---- refusals: malformed and unsupported files -------------------------------- */

/* A minimal byte-level BPE tokenizer.json: the 256 byte tokens, two merges
 * ("h e", "he l") and whatever `extra` puts in or replaces.  Written to
 * tmpdir/NAME/tokenizer.json. */
static char *write_hf(const char *name, const char *model_extra, const char *top, const char *config)
{
    static char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    CHECK(system(cmd) == 0);
    char file[600];
    snprintf(file, sizeof file, "%s/tokenizer.json", dir);
    FILE *f = fopen(file, "w");
    fprintf(f, "{\"version\": \"1.0\", %s \"model\": {\"type\": \"BPE\", %s \"vocab\": {", top ? top : "", model_extra ? model_extra : "");
    for (int b = 0; b < 256; b++) {
        /* bytes_to_unicode */
        unsigned cp = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255) ? (unsigned)b : 0;
        if (!cp) {
            unsigned k = 0;
            for (int i = 0; i < b; i++)
                k += !((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174 && i <= 255));
            cp = 256 + k;
        }
        if (cp == '"' || cp == '\\') fprintf(f, "\"\\%c\": %d, ", (char)cp, b);
        else fprintf(f, "\"\\u%04x\": %d, ", cp, b);
    }
    fprintf(f, "\"he\": 256, \"hel\": 257}, \"merges\": [\"h e\", \"he l\"]}}");
    fclose(f);
    if (config) {
        snprintf(file, sizeof file, "%s/tokenizer_config.json", dir);
        f = fopen(file, "w");
        fputs(config, f);
        fclose(f);
    }
    return dir;
}

static int open_hf(const char *dir, char *err, size_t errlen)
{
    tok *t = NULL;
    tok_options o = { TOK_HUGGINGFACE, dir, NULL, NULL, 0, 0, 0 };
    int rc = tok_open(&t, &o, err, errlen);
    tok_free(t);
    return rc;
}

#define BL "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true},"

static void test_hf_minimal(void)
{
    char err[512];
    /* eos "<eos>" is no token: transformers adds it (id 258) as a special added token */
    const char *dir = write_hf("ok", NULL, BL, "{\"tokenizer_class\": \"PreTrainedTokenizerFast\", \"eos_token\": \"<eos>\"}");
    tok *t = NULL;
    tok_options o = { TOK_HUGGINGFACE, dir, NULL, NULL, 0, 0, 0 };
    CHECK(tok_open(&t, &o, err, sizeof err) == 0);
    if (!t) { fprintf(stderr, "%s\n", err); return; }
    CHECK(tok_vocab_size(t) == 259 && tok_eod(t) == 258);
    tok_state *st;
    CHECK(tok_state_new(t, &st) == 0);
    tok_ids ids = { NULL, 0, 0 };
    CHECK(tok_encode(t, st, (const unsigned char *)"help hel<eos>", 13, &ids) == 0);
    /* GPT-2 pieces "help", " hel", then the added token; the byte token of b is id b here */
    CHECK(ids.n == 5 && ids.ids[0] == 257 && ids.ids[1] == 'p' && ids.ids[2] == ' ' && ids.ids[3] == 257 && ids.ids[4] == 258);
    free(ids.ids);
    tok_state_free(st);
    tok_free(t);
}

static void test_hf_refusals(void)
{
    static const struct { const char *model, *top, *cfg; int code; const char *msg; } cases[] = {
        { NULL, "", NULL, TOK_ERR_UNSUPPORTED, "a pre-tokenizer without ByteLevel" },
        { NULL, "\"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"_\"},", NULL, TOK_ERR_UNSUPPORTED, "the pre-tokenizer 'Metaspace'" },
        { NULL, BL "\"normalizer\": {\"type\": \"NFKC\"},", NULL, TOK_ERR_UNSUPPORTED, "the normalizer 'NFKC'" },
        { NULL, BL "\"post_processor\": {\"type\": \"Whatever\"},", NULL, TOK_ERR_UNSUPPORTED, "the post-processor 'Whatever'" },
        { "\"dropout\": 0.1,", BL, NULL, TOK_ERR_UNSUPPORTED, "BPE dropout" },
        { "\"continuing_subword_prefix\": \"##\",", BL, NULL, TOK_ERR_UNSUPPORTED, "continuing_subword_prefix" },
        { NULL, BL "\"added_tokens\": [{\"id\": 258, \"content\": \"<x>\", \"single_word\": true, \"special\": true}],", NULL, TOK_ERR_UNSUPPORTED, "single_word" },
        { NULL, "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\w+\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true}]},", NULL, TOK_ERR_UNSUPPORTED, "the escape \\w" },
        { NULL, BL, "{\"tokenizer_class\": \"BertTokenizerFast\"}", TOK_ERR_UNSUPPORTED, "tokenizer_class 'BertTokenizerFast'" },
        { NULL, BL, "{\"split_special_tokens\": true}", TOK_ERR_UNSUPPORTED, "split_special_tokens" },
        { NULL, BL, "{\"eos_token\": 5}", TOK_ERR_FORMAT, "a special token must be a string or an object" },
        { NULL, BL, "{\"eos_token\": ", TOK_ERR_FORMAT, "tokenizer_config.json': line 1" },
        { NULL, BL "\"version\": \"2.0\",", NULL, TOK_ERR_FORMAT, "unknown tokenizer version '2.0'" },
        { NULL, BL "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"special_tokens\": {}},", NULL, TOK_ERR_FORMAT, "which 'special_tokens' lacks" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[16], err[512] = "";
        snprintf(name, sizeof name, "r%zu", i);
        const char *dir = write_hf(name, cases[i].model, cases[i].top, cases[i].cfg);
        int rc = open_hf(dir, err, sizeof err);
        if (rc != cases[i].code || !strstr(err, cases[i].msg) || !strstr(err, dir) || strchr(err, '\n')) {
            fprintf(stderr, "case %zu: rc %d, '%s'\n", i, rc, err);
            CHECK(0);
        }
    }
    /* malformed vocabularies and merges */
    static const struct { const char *json, *msg; } bad[] = {
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"a\": 1}, \"merges\": []}}", "has the token \"a\" twice" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}}", "must be an integer" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}", "id 0 is given to two tokens" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}", "not in the vocabulary" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a  b\"]}}", "not two tokens" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [[\"a\"]]}}", "must be a pair of strings" },
        { "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "the model type 'WordPiece'" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": false}}", "no token for byte" },
        { "[1, 2]", "must hold a JSON object" },
        { "{\"model\": 1", "line 1, column 12" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char dir[512], file[600], err[512] = "";
        snprintf(dir, sizeof dir, "%s/m%zu", tmpdir, i);
        snprintf(file, sizeof file, "mkdir -p '%s'", dir);
        CHECK(system(file) == 0);
        snprintf(file, sizeof file, "%s/tokenizer.json", dir);
        FILE *f = fopen(file, "w");
        fputs(bad[i].json, f);
        fclose(f);
        int rc = open_hf(file, err, sizeof err);
        if ((rc != TOK_ERR_FORMAT && rc != TOK_ERR_UNSUPPORTED) || !strstr(err, bad[i].msg) || !strstr(err, file)) {
            fprintf(stderr, "bad %zu: rc %d, '%s'\n", i, rc, err);
            CHECK(0);
        }
    }
    char err[512];
    CHECK(open_hf("/nonexistent/dir/tokenizer.json", err, sizeof err) == TOK_ERR_IO && strstr(err, "cannot open"));
}

/* ---- SentencePiece models written byte by byte ------------------------------- */

struct pbw { unsigned char *p; size_t n, cap; };

static void put(struct pbw *b, const void *s, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void varint(struct pbw *b, uint64_t v)
{
    unsigned char c;
    do {
        c = (unsigned char)(v & 0x7F);
        v >>= 7;
        if (v) c |= 0x80;
        put(b, &c, 1);
    } while (v);
}

static void field_bytes(struct pbw *b, unsigned f, const void *s, size_t n)
{
    varint(b, (uint64_t)f << 3 | 2);
    varint(b, n);
    put(b, s, n);
}

static void piece(struct pbw *b, const char *s, float score, int type)
{
    struct pbw m = { NULL, 0, 0 };
    field_bytes(&m, 1, s, strlen(s));
    varint(&m, 2 << 3 | 5);
    put(&m, &score, 4);
    if (type != 1) {
        varint(&m, 3 << 3);
        varint(&m, (uint64_t)type);
    }
    field_bytes(b, 1, m.p, m.n);
    free(m.p);
}

/* A tiny BPE model: <unk> <s> </s>, then pieces; trainer spec model_type BPE
 * unless `model_type` says otherwise; `extra` appended raw. */
static char *write_sp(const char *name, int model_type, int dup, int byte_bad, float nan_score, const void *extra, size_t extralen)
{
    static char files[16][600];
    static int nf;
    char *file = files[nf++ & 15];
    snprintf(file, sizeof files[0], "%s/%s.model", tmpdir, name);
    struct pbw b = { NULL, 0, 0 };
    piece(&b, "<unk>", 0, 2);
    piece(&b, "<s>", 0, 3);
    piece(&b, "</s>", 0, 3);
    piece(&b, "\xe2\x96\x81", -1, 1);
    piece(&b, "a", -2, 1);
    piece(&b, "b", -3, 1);
    piece(&b, "\xe2\x96\x81" "a", nan_score, 1);
    piece(&b, "ab", -4, 1);
    if (dup) piece(&b, "ab", -5, 1);
    if (byte_bad) piece(&b, "<0xZZ>", 0, 6);
    struct pbw ts = { NULL, 0, 0 };
    varint(&ts, 3 << 3);
    varint(&ts, (uint64_t)model_type);
    if (byte_bad) {
        varint(&ts, 35 << 3);
        varint(&ts, 1);
    }
    field_bytes(&b, 2, ts.p, ts.n);
    free(ts.p);
    if (extra) put(&b, extra, extralen);
    FILE *f = fopen(file, "wb");
    fwrite(b.p, 1, b.n, f);
    fclose(f);
    free(b.p);
    return file;
}

static int open_sp(const char *file, int type, char *err, size_t errlen, tok **out)
{
    tok *t = NULL;
    tok_options o = { type, file, NULL, NULL, 0, 0, 0 };
    int rc = tok_open(&t, &o, err, errlen);
    if (out) *out = t;
    else tok_free(t);
    return rc;
}

static void test_sp_small(void)
{
    char err[512];
    tok *t;
    CHECK(open_sp(write_sp("ok", 2, 0, 0, -1.5f, NULL, 0), TOK_LLAMA2, err, sizeof err, &t) == 0);
    if (!t) { fprintf(stderr, "%s\n", err); return; }
    CHECK(tok_vocab_size(t) == 8 && tok_eod(t) == 2);
    tok_state *st;
    CHECK(tok_state_new(t, &st) == 0);
    tok_ids ids = { NULL, 0, 0 };
    /* "ab a" -> BOS, ▁a b... : ▁ a b merge by score: ▁a (-1.5) beats ab (-4) */
    CHECK(tok_encode(t, st, (const unsigned char *)"ab a", 4, &ids) == 0);
    CHECK(ids.n == 4 && ids.ids[0] == 1 && ids.ids[1] == 6 && ids.ids[2] == 5 && ids.ids[3] == 6);
    ids.n = 0;
    CHECK(tok_encode(t, st, (const unsigned char *)"zz", 2, &ids) == 0);   /* unknown run merged */
    CHECK(ids.n == 3 && ids.ids[1] == 3 && ids.ids[2] == 0);
    free(ids.ids);
    tok_state_free(st);
    tok_free(t);
    /* Megatron's SentencePieceTokenizer adds <CLS> <SEP> <EOD> <MASK> and <PAD> */
    CHECK(open_sp(write_sp("ok", 2, 0, 0, -1.5f, NULL, 0), TOK_SENTENCEPIECE, err, sizeof err, &t) == 0);
    CHECK(t && tok_vocab_size(t) == 13 && tok_eod(t) == 10);
    tok_free(t);
}

/* Random texts, some long enough for the unigram score resets, through the
 * word split and cache and through the whole-text path (the one checked
 * against sentencepiece): the ids must be equal. */
static void words_vs_whole(const char *file, int type, unsigned seed)
{
    static const char *const frag[] = { "a", "b", "ab", "ba", " ", " ", " ", "  ", "\n", "\t", "\xe2\x96\x81", "\xc3\xa9",
                                        "e\xcc\x81", "\xe4\xb8\xad", "\xe6\x96\x87", "<sep>", "[MASK]", "<s>", "x", "\xff",
                                        "the", "The", "ing", ",", ".", "1", "23", "\xef\xbc\xa1", "\xf0\x9f\x98\x80", "q",
                                        "hello", " world", "\xe2\x80\x94", "'s", "\xd0\xbf\xd1\x80" };
    const size_t nf = sizeof frag / sizeof frag[0];
    char err[1024];
    tok *tw = NULL, *tx = NULL;
    tok_options o = { type, file, NULL, NULL, 0, 0, 0 }, ow = { type, file, NULL, NULL, 0, 0, 1 };
    CHECK(tok_open(&tw, &o, err, sizeof err) == 0);
    CHECK(tok_open(&tx, &ow, err, sizeof err) == 0);
    if (!tw || !tx) {
        fprintf(stderr, "%s\n", err);
        tok_free(tw);
        tok_free(tx);
        return;
    }
    tok_state *sw, *sx;
    CHECK(tok_state_new(tw, &sw) == 0 && tok_state_new(tx, &sx) == 0);
    srand(seed);
    size_t cap = 1 << 20, n;
    unsigned char *text = malloc(cap + 64);
    tok_ids a = { NULL, 0, 0 }, b = { NULL, 0, 0 };
    int bad = 0;
    for (int iter = 0; iter < 400 && bad < 3; iter++) {
        /* mostly short texts; every 40th one long (up to 600 kB), with many distinct words */
        size_t k = iter % 40 == 39 ? (size_t)(rand() % 150000) + 20000 : (size_t)(rand() % 60);
        n = 0;
        for (size_t i = 0; i < k && n < cap; i++) {
            const char *f = frag[rand() % nf];
            if (rand() % 8 == 0) {
                n += (size_t)snprintf((char *)text + n, 64, " w%x", (unsigned)rand() % 50000);
                continue;
            }
            size_t l = strlen(f);
            memcpy(text + n, f, l);
            n += l;
        }
        a.n = b.n = 0;
        int ra = tok_encode(tw, sw, text, n, &a), rb = tok_encode(tx, sx, text, n, &b);
        int same = ra == 0 && rb == 0 && a.n == b.n && (a.n == 0 || memcmp(a.ids, b.ids, a.n * sizeof *a.ids) == 0);
        if (!same && bad++ < 3)
            fprintf(stderr, "%s: text %d (%zu bytes): %zu ids by word, %zu whole\n", file, iter, n, a.n, b.n);
    }
    CHECK(bad == 0);
    free(text);
    free(a.ids);
    free(b.ids);
    tok_state_free(sw);
    tok_state_free(sx);
    tok_free(tw);
    tok_free(tx);
}

static void test_sp_words(void)
{
    words_vs_whole(path("sp-bpe.model"), TOK_LLAMA2, seed_arg);
    words_vs_whole(path("sp-unigram.model"), TOK_LLAMA2, seed_arg + 1);
    /* a unigram model of ties and near-ties (segmentations one float ulp
       apart), where only the exact arithmetic at the document's score picks */
    struct pbw b = { NULL, 0, 0 };
    piece(&b, "<unk>", 0, 2);
    piece(&b, "<s>", 0, 3);
    piece(&b, "</s>", 0, 3);
    piece(&b, "\xe2\x96\x81", -1.0f, 1);
    piece(&b, "a", -2.0f, 1);
    piece(&b, "b", -3.0f, 1);
    piece(&b, "\xe2\x96\x81" "a", -3.0f, 1);
    piece(&b, "ab", -5.0f, 1);
    piece(&b, "\xe2\x96\x81" "ab", -6.0000005f, 1);
    piece(&b, "ba", -4.9999995f, 1);
    piece(&b, "\xe2\x96\x81" "b", -4.0078125f, 1);
    piece(&b, "x", -2.5f, 1);
    piece(&b, "<sep>", 0, 4);
    struct pbw ts = { NULL, 0, 0 };
    varint(&ts, 3 << 3);
    varint(&ts, 1);   /* UNIGRAM */
    field_bytes(&b, 2, ts.p, ts.n);
    free(ts.p);
    char file[600];
    snprintf(file, sizeof file, "%s/ties.model", tmpdir);
    FILE *f = fopen(file, "wb");
    CHECK(f && fwrite(b.p, 1, b.n, f) == b.n && fclose(f) == 0);
    free(b.p);
    words_vs_whole(file, TOK_LLAMA2, seed_arg + 2);
}

static void test_sp_refusals(void)
{
    char err[512];
    static const unsigned char truncated[] = { 0x0A, 0x10, 0x0A };
    static const unsigned char group[] = { 0x0B };
    struct { const char *file; int code; const char *msg; } cases[] = {
        { write_sp("dup", 2, 1, 0, -1, NULL, 0), TOK_ERR_FORMAT, "is already defined" },
        { write_sp("byte", 2, 0, 1, -1, NULL, 0), TOK_ERR_FORMAT, "is invalid" },
        { write_sp("word", 3, 0, 0, -1, NULL, 0), TOK_ERR_UNSUPPORTED, "WORD" },
        { write_sp("trunc", 2, 0, 0, -1, truncated, sizeof truncated), TOK_ERR_FORMAT, "truncated piece" },
        { write_sp("group", 2, 0, 0, -1, group, sizeof group), TOK_ERR_FORMAT, "malformed field" },
        { write_sp("nan", 1, 0, 0, 0.0f / 0.0f, NULL, 0), TOK_ERR_FORMAT, "NaN" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        err[0] = 0;
        int rc = open_sp(cases[i].file, TOK_GPT_SENTENCEPIECE, err, sizeof err, NULL);
        if (rc != cases[i].code || !strstr(err, cases[i].msg) || !strstr(err, cases[i].file)) {
            fprintf(stderr, "case %zu: rc %d, '%s'\n", i, rc, err);
            CHECK(0);
        }
    }
    char file[600];
    snprintf(file, sizeof file, "%s/empty.model", tmpdir);
    FILE *f = fopen(file, "wb");
    fclose(f);
    CHECK(open_sp(file, TOK_LLAMA2, err, sizeof err, NULL) == TOK_ERR_FORMAT && strstr(err, "no pieces"));
    CHECK(open_sp("/nonexistent.model", TOK_LLAMA2, err, sizeof err, NULL) == TOK_ERR_IO);
    /* a model whose bos piece is not a control piece: Llama2Tokenizer refuses */
    struct pbw b = { NULL, 0, 0 };
    piece(&b, "<unk>", 0, 2);
    piece(&b, "a", -1, 1);
    snprintf(file, sizeof file, "%s/nobos.model", tmpdir);
    f = fopen(file, "wb");
    fwrite(b.p, 1, b.n, f);
    fclose(f);
    free(b.p);
    CHECK(open_sp(file, TOK_LLAMA2, err, sizeof err, NULL) == TOK_ERR_UNSUPPORTED && strstr(err, "bos"));
    tok *t;
    CHECK(open_sp(file, TOK_GPT_SENTENCEPIECE, err, sizeof err, &t) == 0 && t && tok_eod(t) == -1);
    tok_free(t);
}

int main(int argc, char **argv)
{
    seed_arg = 1;
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "-s") == 0) seed_arg = (unsigned)strtoul(argv[i + 1], NULL, 10);
    printf("seed %u\n", seed_arg);
    root = getenv("MDS_ROOT");
    if (!root) root = ".";
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mds-test-tok.%d", (int)getpid());
    char cmd[300];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", tmpdir);
    if (system(cmd) != 0) return 1;
    int pcre = pretok_have_pcre2();
    RUN(test_nfc);
    RUN(test_utf8_count);
    RUN(test_scanners);
    RUN_IF(pcre, test_regex_engine, "PCRE2 not built in");
    RUN_IF(pcre, test_random_scanners, "PCRE2 not built in");
    RUN_IF(pcre, test_tekken_code_points, "PCRE2 not built in");
    RUN_IF(pcre, test_regex_refusals, "PCRE2 not built in");
    RUN(test_hf_llama3);
    RUN(test_hf_qwen);
    RUN(test_hf_neox);
    RUN(test_hf_tekken);
    RUN_IF(pcre, test_hf_pcre2, "PCRE2 not built in");
    RUN(test_hf_minimal);
    RUN(test_hf_refusals);
    RUN(test_sp_bpe);
    RUN(test_sp_unigram);
    RUN(test_sp_small);
    RUN(test_sp_words);
    RUN(test_sp_refusals);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) return 1;
    return harness_report();
}
