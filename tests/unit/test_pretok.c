/*
 * test_pretok.c - the hand-written GPT-2 pre-tokenizer against the spec's
 * split vectors and against the PCRE2 reference on corpora and random
 * Unicode strings.  Randomised: prints its seed, takes -s SEED.  In a build
 * without PCRE2 the comparisons are reported skipped, and test_pcre2_new
 * checks that asking for the reference says why it is missing.
 */
#include "harness.h"
#include "pretok.h"
#include "unitab.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>

static pretok_pcre2 *pc;

/* Splits s with the scanner into "|"-joined pieces. */
static void split(const char *s, size_t n, char *out)
{
    size_t pos = 0, w = 0;
    while (pos < n) {
        size_t e = pretok_next((const unsigned char *)s, n, pos);
        if (w) out[w++] = '|';
        memcpy(out + w, s + pos, e - pos);
        w += e - pos;
        pos = e;
    }
    out[w] = 0;
}

static int same_split(const unsigned char *s, size_t n)
{
    size_t a = 0, b = 0;
    while (a < n && b < n) {
        a = pretok_next(s, n, a);
        b = pretok_pcre2_next(pc, s, n, b);
        if (a != b) return 0;
    }
    return a == b;
}

static void expect(const char *in, const char *want)
{
    char got[512];
    split(in, strlen(in), got);
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "split(\"%s\") = \"%s\", want \"%s\"\n", in, got, want);
        CHECK(0);
    }
    if (pc)   /* and PCRE2 agrees, where it is built in */
        CHECK(same_split((const unsigned char *)in, strlen(in)));
}

static void test_spec_vectors(void)
{
    expect("a  b", "a| | b");
    expect("hello   ", "hello|   ");
    expect("\n\n\n", "\n\n\n");
    expect("a\r\nb", "a|\r|\n|b");
    expect("    return  x", "   | return| | x");
    expect("  'tis", " | '|tis");
    expect("a  's", "a| | '|s");
    expect("IT'S", "IT|'|S");
    expect("he'd've", "he|'d|'ve");
    expect("x'sy", "x|'s|y");
    expect("x  \n y", "x|  \n| y");
    expect("  hi", " | hi");
    expect("\n\nand", "\n|\n|and");
    expect("Hello world!", "Hello| world|!");
    expect("1234567 3.14159", "1234567| 3|.|14159");
    expect("I'm don't WE'LL they've", "I|'m| don|'t| WE|'|LL| they|'ve");
    expect("''s", "''|s");
    expect(" ", " ");
    expect("", "");
    expect("x\xc2\xa0\xc2\xa0y", "x|\xc2\xa0|\xc2\xa0|y");       /* NBSP is \s */
    expect("x\x1c\x1cy", "x|\x1c\x1c|y");                       /* U+001C is not \s */
    expect(" \xe1\xa0\x8e" "a", " \xe1\xa0\x8e|a");               /* U+180E is not \s */
    expect("e\xcc\x81t\xc3\xa9", "e|\xcc\x81|t\xc3\xa9");         /* combining mark is other */
}

static void test_classes(void)
{
    CHECK(strcmp(unitab_version, "15.0.0") == 0);
    CHECK(pretok_class('a') == PRETOK_LETTER);
    CHECK(pretok_class('7') == PRETOK_NUMBER);
    CHECK(pretok_class(' ') == PRETOK_SPACE);
    CHECK(pretok_class(0x1C) == PRETOK_OTHER);
    CHECK(pretok_class(0x85) == PRETOK_SPACE);
    CHECK(pretok_class(0x180E) == PRETOK_OTHER);
    CHECK(pretok_class(0x3000) == PRETOK_SPACE);
    CHECK(pretok_class(0x4E00) == PRETOK_LETTER);
    CHECK(pretok_class(0x0661) == PRETOK_NUMBER);   /* ARABIC-INDIC DIGIT ONE */
    CHECK(pretok_class(0x2160) == PRETOK_NUMBER);   /* ROMAN NUMERAL ONE, Nl */
    CHECK(pretok_class(0x0301) == PRETOK_OTHER);
    CHECK(pretok_class(0x31350) == PRETOK_LETTER);  /* CJK Ext. H, new in 15.0 */
    CHECK(pretok_class(0x1C89) == PRETOK_OTHER);    /* assigned in 16.0 */
    CHECK(pretok_class(0x10FFFF) == PRETOK_OTHER);
    CHECK(pretok_class(0x110000) == PRETOK_OTHER);
}

static uint64_t rng_state;
static uint32_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng_state >> 33);
}

static size_t put_utf8(unsigned char *p, uint32_t c)
{
    if (c < 0x80) { p[0] = (unsigned char)c; return 1; }
    if (c < 0x800) { p[0] = (unsigned char)(0xC0 | c >> 6); p[1] = (unsigned char)(0x80 | (c & 0x3F)); return 2; }
    if (c < 0x10000) {
        p[0] = (unsigned char)(0xE0 | c >> 12); p[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
        p[2] = (unsigned char)(0x80 | (c & 0x3F)); return 3;
    }
    p[0] = (unsigned char)(0xF0 | c >> 18); p[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
    p[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3F)); p[3] = (unsigned char)(0x80 | (c & 0x3F)); return 4;
}

static uint32_t random_cp(void)
{
    static const uint32_t special[] = {
        ' ', ' ', ' ', '\'', '\'', 's', 't', 'r', 'e', 'v', 'l', 'm', 'd', 'S', 'L', '\n', '\t', '\r',
        0x0B, 0x0C, 0x1C, 0x1F, 0x85, 0xA0, 0x1680, 0x180E, 0x2000, 0x200A, 0x200B, 0x2028,
        0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF, 0x0301, 0x0661, 0x2160, 0x00B2, 0x4E00, 0x1F600,
        0x31350, 0x1C89, 0x088F, 0x10FFFF, 0xE000, '0', '9', '.', ',', '!', 'a', 'Z', 0xE9, 0x3B1,
    };
    uint32_t k = rnd() % 8;
    if (k < 4) return special[rnd() % (sizeof special / sizeof special[0])];
    if (k < 6) return 0x20 + rnd() % 0x5F;
    for (;;) {   /* any scalar value, weighted towards the BMP */
        uint32_t c = (k == 6) ? rnd() % 0x10000 : rnd() % 0x110000;
        if (c >= 0xD800 && c <= 0xDFFF) continue;
        return c;
    }
}

static void test_random_vs_pcre2(unsigned seed)
{
    rng_state = seed;
    unsigned char buf[64 * 4];
    int bad = 0;
    for (int iter = 0; iter < 300000 && bad < 5; iter++) {
        size_t len = rnd() % 48, n = 0;
        for (size_t i = 0; i < len; i++) n += put_utf8(buf + n, random_cp());
        if (!same_split(buf, n)) {
            bad++;
            fprintf(stderr, "mismatch on random string (seed %u, iteration %d):", seed, iter);
            for (size_t i = 0; i < n; i++) fprintf(stderr, " %02x", buf[i]);
            fprintf(stderr, "\n");
        }
    }
    CHECK(bad == 0);
}

/* Long runs of ASCII letters (the scanner takes them eight bytes at a time)
 * broken by the bytes next to the letters' ranges and by non-ASCII letters,
 * at every offset and length against PCRE2. */
static void test_letter_runs(void)
{
    static const uint32_t edge[] = { '@', '[', '`', '{', 0x7F, 0x40, 'A', 'Z', 'a', 'z', 0xE9, 0xC9, 0x3B1,
                                     0x4E00, '0', ' ', '\'', '\n', 0xA0, 0x2000, 0x0301, 0xFF, 0x100 };
    rng_state = 777;
    unsigned char buf[96 * 4];
    int bad = 0;
    for (int iter = 0; iter < 200000 && bad < 5; iter++) {
        size_t len = rnd() % 96, n = 0;
        for (size_t i = 0; i < len; i++) {
            uint32_t k = rnd() % 16, c;
            if (k < 13) c = (rnd() % 2 ? 'a' : 'A') + rnd() % 26;
            else c = edge[rnd() % (sizeof edge / sizeof edge[0])];
            n += put_utf8(buf + n, c);
        }
        if (!same_split(buf, n)) {
            bad++;
            fprintf(stderr, "mismatch on letter run (iteration %d):", iter);
            for (size_t i = 0; i < n; i++) fprintf(stderr, " %02x", buf[i]);
            fprintf(stderr, "\n");
        }
    }
    CHECK(bad == 0);
}

static unsigned seed_arg;
static void test_random(void) { test_random_vs_pcre2(seed_arg); }

/* Every raw line of every corpus in tests/data/corpus: the raw JSON text is
 * valid UTF-8, which is all the contract needs. */
static void test_corpora(void)
{
    DIR *d = opendir("tests/data/corpus");
    CHECK(d != NULL);
    if (!d) return;
    struct dirent *e;
    int files = 0;
    size_t lines = 0;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 6, ".jsonl") != 0) continue;
        char path[512];
        snprintf(path, sizeof path, "tests/data/corpus/%s", e->d_name);
        FILE *f = fopen(path, "rb");
        CHECK(f != NULL);
        if (!f) continue;
        files++;
        char *line = NULL;
        size_t cap = 0;
        ssize_t n;
        while ((n = getline(&line, &cap, f)) > 0) {
            lines++;
            if (!same_split((unsigned char *)line, (size_t)n)) {
                fprintf(stderr, "mismatch in %s line %zu\n", path, lines);
                CHECK(0);
            }
        }
        free(line);
        fclose(f);
    }
    closedir(d);
    CHECK(files >= 3);
}

/* pretok_pcre2_new works exactly when pretok_have_pcre2() says PCRE2 is
 * built in; otherwise it fails and says so. */
static void test_pcre2_new(void)
{
    char err[256] = "";
    pretok_pcre2 *p = (pretok_pcre2 *)&p;
    int rc = pretok_pcre2_new(&p, err, sizeof err);
    if (pretok_have_pcre2()) {
        CHECK(rc == 0 && p != NULL);
    } else {
        CHECK(rc == -1 && p == NULL);
        CHECK(strcmp(err, "pcre2: this build has no PCRE2 (install libpcre2-dev and rebuild)") == 0);
    }
    pretok_pcre2_free(p);
    pretok_pcre2_free(NULL);
}

/* The class tables are built on first use: several threads whose first
 * calls come together must all get the same pieces (under SAN=thread this
 * is the check that the ready test is not a data race with the build, as
 * the plain stage2 check had been).  Runs before any other test. */
#define FIRST_THREADS 4
#define FIRST_SCANNERS 4   /* pretok_next, pretok_gpt2_hf_next, pretok_cl100k_next, pretok_tekken_next */
#define FIRST_ENDS 64
static const char first_text[] = "Ünïcödé wörds 12345 and\u00a0spaces, ΑΒΓ δεζ   \n\n 你好世界 'll 'S x";
struct first_run { size_t ends[FIRST_SCANNERS][FIRST_ENDS], n[FIRST_SCANNERS]; };

static void first_split(int which, struct first_run *r)
{
    const unsigned char *s = (const unsigned char *)first_text;
    size_t n = sizeof first_text - 1, pos = 0, k = 0;
    while (pos < n && k < FIRST_ENDS) {
        size_t e = which == 0 ? pretok_next(s, n, pos) : which == 1 ? pretok_gpt2_hf_next(s, n, pos) :
                   which == 2 ? pretok_cl100k_next(s, n, pos, 3) : pretok_tekken_next(s, n, pos);
        if (e <= pos) break;
        r->ends[which][k++] = e;
        pos = e;
    }
    r->n[which] = k;
}

static void *first_thread(void *arg)
{
    struct first_run *r = arg;
    for (int w = 0; w < FIRST_SCANNERS; w++) first_split(w, r);
    return NULL;
}

static void test_first_use_threads(void)
{
    static struct first_run runs[FIRST_THREADS], serial;
    pthread_t th[FIRST_THREADS];
    int started = 0;
    for (int i = 0; i < FIRST_THREADS; i++) started += pthread_create(&th[i], NULL, first_thread, &runs[i]) == 0;
    CHECK(started == FIRST_THREADS);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    for (int w = 0; w < FIRST_SCANNERS; w++) first_split(w, &serial);
    for (int w = 0; w < FIRST_SCANNERS; w++) {
        CHECK(serial.n[w] > 5 && serial.ends[w][serial.n[w] - 1] == sizeof first_text - 1);
        for (int i = 0; i < started; i++)
            CHECK(runs[i].n[w] == serial.n[w] && memcmp(runs[i].ends[w], serial.ends[w], serial.n[w] * sizeof(size_t)) == 0);
    }
}

int main(int argc, char **argv)
{
    seed_arg = 12345;
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "-s") == 0) seed_arg = (unsigned)strtoul(argv[i + 1], NULL, 0);
    printf("seed = %u\n", seed_arg);
    char err[256];
    if (pretok_have_pcre2() && pretok_pcre2_new(&pc, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    RUN(test_first_use_threads);   /* (first: the tables are not built yet) */
    RUN(test_classes);
    RUN(test_spec_vectors);
    RUN(test_pcre2_new);
    RUN_IF(pc != NULL, test_random, "PCRE2 not built in");
    RUN_IF(pc != NULL, test_letter_runs, "PCRE2 not built in");
    RUN_IF(pc != NULL, test_corpora, "PCRE2 not built in");
    pretok_pcre2_free(pc);
    return harness_report();
}
