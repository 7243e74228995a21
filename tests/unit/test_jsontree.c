/*
 * test_jsontree.c - the strict JSON tree reader: values, escapes, positions,
 * errors with their line numbers, the depth limit, duplicate keys.
 */
#include "harness.h"
#include "jsontree.h"

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

int main(void)
{
    RUN(test_values);
    RUN(test_errors);
    RUN(test_duplicates);
    return harness_report();
}
