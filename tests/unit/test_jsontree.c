/*
 * test_jsontree.c - the JSON reader: values, escapes, positions, errors with
 * their line numbers, the depth limit, duplicate keys, the options (Python's
 * NaN / Infinity, a lower depth), long number literals, jt_str, jt_quote.
 */
#include "harness.h"
#include "jsontree.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static jt_doc *parse(const char *s, int *rc, char *err)
{
    jt_doc *d = NULL;
    *rc = jt_parse(&d, "t.json", s, strlen(s), err, 256);
    return d;
}

static void test_values(void)
{
    int rc;
    char err[256];
    jt_doc *d = parse(" {\"a\": [1, -2, 3.5, 1e3, true, false, null, \"x\\u00e9\\ud83d\\ude00\\n\"], \"b\": {}} ", &rc, err);
    CHECK(rc == 0 && d);
    if (!d) return;
    const jt_node *r = jt_root(d);
    CHECK(r->type == JT_OBJECT && r->len == 2);
    const jt_node *a = jt_get(r, "a");
    CHECK(a && a->type == JT_ARRAY && a->len == 8);
    CHECK(a->kids[0].is_int && a->kids[0].i == 1);
    CHECK(a->kids[1].is_int && a->kids[1].i == -2);
    CHECK(!a->kids[2].is_int && a->kids[2].num == 3.5);
    CHECK(!a->kids[3].is_int && a->kids[3].num == 1000);
    CHECK(a->kids[4].type == JT_TRUE && a->kids[5].type == JT_FALSE && a->kids[6].type == JT_NULL);
    CHECK(a->kids[7].type == JT_STRING && a->kids[7].len == 8 && memcmp(a->kids[7].str, "x\xc3\xa9\xf0\x9f\x98\x80\n", 8) == 0);
    CHECK(jt_get(r, "b") && jt_get(r, "b")->type == JT_OBJECT && jt_get(r, "b")->len == 0);
    CHECK(jt_get(r, "c") == NULL && jt_get(a, "a") == NULL);
    jt_free(d);
}

static void test_errors(void)
{
    static const struct { const char *in, *msg; } bad[] = {
        { "{\"a\": 1,}", "line 1, column 9: expected a string key" },
        { "[1 2]", "expected ',' or ']'" },
        { "{\"a\" 1}", "expected ':'" },
        { "\"abc", "unterminated string" },
        { "\"\\ud800\"", "lone leading surrogate" },
        { "\"\\udc00\"", "lone trailing surrogate" },
        { "\"\\x\"", "invalid escape" },
        { "\"a\x01\"", "control character" },
        { "\"\xff\"", "invalid UTF-8" },
        { "01", "trailing characters" },
        { "1.", "invalid number" },
        { "nul", "invalid value" },
        { "[1]\n\n  x", "line 3, column 3: trailing characters" },
        { "", "unexpected end of input" },
        { "{\"a\":\n[\n", "line 3" },
        { "{\"a\":01}", "expected ',' or '}'" },
        { "{'a':1}", "expected a string key" },
        { "[1,]", "invalid value" },
        { "NaN", "line 1, column 1: invalid value" },
        { "[-Infinity]", "line 1, column 2: invalid value" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc;
        char err[256] = "";
        jt_doc *d = parse(bad[i].in, &rc, err);
        CHECK(rc == JT_ERR_SYNTAX && d == NULL);
        if (!strstr(err, bad[i].msg) || strncmp(err, "'t.json': line ", 15) != 0) {
            fprintf(stderr, "case %zu: got '%s', want '%s'\n", i, err, bad[i].msg);
            CHECK(0);
        }
    }
    /* nesting is bounded */
    char *deep = malloc(2 * 600 + 1);
    for (int i = 0; i < 600; i++) { deep[i] = '['; deep[600 + i] = ']'; }
    deep[1200] = 0;
    int rc;
    char err[256];
    jt_doc *d = parse(deep, &rc, err);
    CHECK(rc == JT_ERR_SYNTAX && !d && strstr(err, "nested deeper"));
    deep[400] = 0;
    memset(deep + 200, ']', 200);
    d = parse(deep, &rc, err);
    CHECK(rc == 0 && d);
    jt_free(d);
    free(deep);
    d = NULL;
    CHECK(jt_parse_file(&d, "/nonexistent/x.json", err, sizeof err) == JT_ERR_IO && strstr(err, "cannot open '/nonexistent/x.json'"));
}

static void test_duplicates(void)
{
    int rc;
    char err[256];
    jt_doc *d = parse("{\"a\": 1, \"b\": 2, \"a\": 3}", &rc, err);
    CHECK(rc == 0);
    const jt_node *dup = NULL;
    CHECK(jt_has_duplicate_key(jt_root(d), &dup) && dup && dup->i == 3);
    CHECK(jt_get(jt_root(d), "a")->i == 3);   /* the last one, as serde's maps keep it */
    jt_free(d);
    d = parse("{\"a\": 1, \"ab\": 2}", &rc, err);
    CHECK(!jt_has_duplicate_key(jt_root(d), NULL));
    jt_free(d);
}

static void test_options(void)
{
    jt_doc *d = NULL;
    jt_err e;
    jt_options py = { 0, 1 }, shallow = { 3, 0 };
    const char *text = "[NaN, Infinity, -Infinity, -1]";
    CHECK(jt_parse_opts(&d, text, strlen(text), &py, &e) == 0 && d);
    if (d) {
        const jt_node *a = jt_root(d);
        CHECK(a->len == 4 && a->kids[0].type == JT_NUMBER && isnan(a->kids[0].num));
        CHECK(a->kids[1].num == INFINITY && a->kids[2].num == -INFINITY && !a->kids[1].is_int);
        CHECK(a->kids[3].is_int && a->kids[3].i == -1);
    }
    jt_free(d);
    CHECK(jt_parse_opts(&d, text, strlen(text), NULL, &e) == JT_ERR_SYNTAX && !d);
    CHECK(e.line == 1 && e.col == 2 && strcmp(e.why, "invalid value") == 0);
    static const char *const bad_py[] = { "-Inf", "nan", "NaNx", "-NaN", "+Infinity" };
    for (size_t i = 0; i < sizeof bad_py / sizeof bad_py[0]; i++)
        CHECK(jt_parse_opts(&d, bad_py[i], strlen(bad_py[i]), &py, &e) == JT_ERR_SYNTAX && !d);
    CHECK(jt_parse_opts(&d, "[[[1]]]", 7, &shallow, &e) == 0);
    jt_free(d);
    const char *deep = "{\"a\":\n [[[1]]]}";
    CHECK(jt_parse_opts(&d, deep, strlen(deep), &shallow, &e) == JT_ERR_SYNTAX);
    CHECK(e.line == 2 && e.col == 4 && strcmp(e.why, "nested deeper than 3 levels") == 0);
}

/* Literals past the 64-byte fast path convert like short ones. */
static void test_long_numbers(void)
{
    char text[256] = "[0.";
    for (int i = 0; i < 99; i++) strcat(text, "0");
    strcat(text, "25, 1");
    for (int i = 0; i < 80; i++) strcat(text, "0");
    strcat(text, "]");
    int rc;
    char err[256];
    jt_doc *d = parse(text, &rc, err);
    CHECK(rc == 0 && d);
    if (!d) return;
    const jt_node *a = jt_root(d);
    CHECK(a->kids[0].num == 25e-101 && !a->kids[0].is_int);
    CHECK(a->kids[1].num == 1e80 && !a->kids[1].is_int);   /* an integer past int64 */
    jt_free(d);
}

static void test_str_quote(void)
{
    int rc;
    char err[256], q[32];
    jt_doc *d = parse("[\"ab\", \"a\\u0000b\", 1]", &rc, err);
    CHECK(rc == 0 && d);
    if (!d) return;
    const jt_node *a = jt_root(d);
    CHECK(jt_str(&a->kids[0]) && strcmp(jt_str(&a->kids[0]), "ab") == 0);
    CHECK(a->kids[1].len == 3 && jt_str(&a->kids[1]) == NULL);   /* a NUL inside */
    CHECK(jt_str(&a->kids[2]) == NULL && jt_str(NULL) == NULL);
    jt_free(d);
    CHECK(jt_quote(q, sizeof q, "a\"\\\n\xc3\xa9") == 15 && strcmp(q, "\"a\\\"\\\\\\u000a\xc3\xa9\"") == 0);
    CHECK(jt_quote(q, 4, "abc") == -1 && jt_quote(q, 6, "abc") == 5);
    /* what jt_quote writes reads back as the same string */
    d = parse(q, &rc, err);
    CHECK(rc == 0 && d && strcmp(jt_str(jt_root(d)), "abc") == 0);
    jt_free(d);
}

int main(void)
{
    RUN(test_values);
    RUN(test_errors);
    RUN(test_duplicates);
    RUN(test_options);
    RUN(test_long_numbers);
    RUN(test_str_quote);
    return harness_report();
}
