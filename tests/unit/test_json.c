/*
 * test_json.c - unit tests for preprocess/json.[ch].
 *
 * Every line is copied into a heap block of exactly its length before it is
 * parsed, so AddressSanitizer catches any read past the end.  The cases
 * follow Python's json.loads (3.11) as Megatron calls it; the corpus tests
 * read the .jsonl files in tests/data/corpus/ (cwd = repo root).
 * Not covered here: throughput (bench/), out-of-memory paths.
 */
#include "harness.h"
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_doc doc;
static const char *const text_key[] = { "text" };

/* Parses s[0, len) from an exact-size heap copy. */
static int parse_n(const char *s, size_t len, const char *const *keys, size_t nkeys)
{
    char *copy = malloc(len ? len : 1);
    memcpy(copy, s, len);
    int rc = json_extract(&doc, copy, len, keys, nkeys);
    free(copy);
    return rc;
}

static int parse(const char *s)
{
    return parse_n(s, strlen(s), text_key, 1);
}

/* True if key k's string j is exactly want[0, n). */
static int str_eq(size_t k, size_t j, const char *want, size_t n)
{
    size_t len;
    const char *got = json_doc_string(&doc, k, j, &len);
    return got != NULL && len == n && memcmp(got, want, n) == 0;
}

/* The line parses and "text" is the string `want` (NUL-terminated). */
static int text_is(const char *line, const char *want)
{
    int rc = parse(line);
    int ok = rc == 0 && json_doc_kind(&doc, 0) == JSON_STRING && json_doc_count(&doc, 0) == 1 &&
             str_eq(0, 0, want, strlen(want));
    if (!ok)
        fprintf(stderr, "  line %s: rc %d (%s)\n", line, rc, doc.err);
    return ok;
}

/* The line fails with `code` and a message containing `msg` (if not NULL). */
static int fails_n(const char *line, size_t len, int code, const char *msg)
{
    int rc = parse_n(line, len, text_key, 1);
    int ok = rc == code && (msg == NULL || strstr(doc.err, msg) != NULL);
    if (!ok)
        fprintf(stderr, "  line %.*s: rc %d, want %d; message '%s'\n", (int)len, line, rc, code, doc.err);
    return ok;
}

static int fails(const char *line, int code, const char *msg)
{
    return fails_n(line, strlen(line), code, msg);
}

static void test_escapes(void)
{
    CHECK(text_is("{\"text\": \"\\\" \\\\ \\/ \\b \\f \\n \\r \\t\"}", "\" \\ / \b \f \n \r \t"));
    CHECK(text_is("{\"text\": \"\\u0041\\u00e9\\u00E9\\u20ac\\u20AC\\uFFFF\\uffFd\"}",
                  "A\xc3\xa9\xc3\xa9\xe2\x82\xac\xe2\x82\xac\xef\xbf\xbf\xef\xbf\xbd"));
    CHECK(text_is("{\"text\": \"\\u007f\\u0080\\u07ff\\u0800\"}", "\x7f\xc2\x80\xdf\xbf\xe0\xa0\x80"));
    CHECK(text_is("{\"text\": \"\\ud83d\\ude00\"}", "\xf0\x9f\x98\x80"));
    CHECK(text_is("{\"text\": \"\\uD83D\\uDE00x\\ud800\\udc00\\udbff\\udfff\"}",
                  "\xf0\x9f\x98\x80x\xf0\x90\x80\x80\xf4\x8f\xbf\xbf"));
    CHECK(text_is("{\"text\": \"\"}", ""));
    CHECK(text_is("{\"text\": \"\\\\u0041\"}", "\\u0041"));  /* an escaped backslash, then text */
    /* \u0000 is a NUL byte inside the string. */
    CHECK(parse("{\"text\": \"a\\u0000b\\u0000\"}") == 0);
    CHECK(str_eq(0, 0, "a\0b\0", 4));
    /* Raw DEL and raw U+2028 are fine. */
    CHECK(text_is("{\"text\": \"\x7f\xe2\x80\xa8\"}", "\x7f\xe2\x80\xa8"));
    /* Invalid escapes. */
    CHECK(fails("{\"text\": \"\\x41\"}", JSON_ERR_SYNTAX, "invalid escape at column 11"));
    CHECK(fails("{\"text\": \"\\a\"}", JSON_ERR_SYNTAX, "invalid escape"));
    CHECK(fails("{\"text\": \"\\U0041\"}", JSON_ERR_SYNTAX, "invalid escape"));
    CHECK(fails("{\"text\": \"\\'\"}", JSON_ERR_SYNTAX, "invalid escape"));
    CHECK(fails("{\"text\": \"\\u00g1\"}", JSON_ERR_SYNTAX, "invalid \\u escape"));
    CHECK(fails("{\"text\": \"\\u12\"}", JSON_ERR_SYNTAX, "invalid \\u escape"));
    CHECK(fails("{\"text\": \"\\u12", JSON_ERR_SYNTAX, "invalid \\u escape"));
    CHECK(fails("{\"text\": \"\\", JSON_ERR_SYNTAX, "unexpected end of line"));
    CHECK(fails("{\"text\": \"\\ud800\\uzzzz\"}", JSON_ERR_SYNTAX, "invalid \\u escape"));
}

static void test_escapes_at_every_offset(void)
{
    /* A special byte at each offset of strings up to 40 bytes long, so the
     * 16-byte loop, its tail and the scalar loop all meet each case. */
    static const struct { const char *raw, *dec; } specials[] = {
        { "\\n", "\n" }, { "\\u00e9", "\xc3\xa9" }, { "\xc3\xa9", "\xc3\xa9" },
        { "\xe4\xb8\xad", "\xe4\xb8\xad" }, { "\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80" },
        { "\\ud83d\\ude00", "\xf0\x9f\x98\x80" }, { "\\\"", "\"" },
    };
    char line[256], want[128];
    for (size_t s = 0; s < sizeof specials / sizeof specials[0]; s++) {
        for (int pre = 0; pre < 40; pre++) {
            for (int post = 0; post < 20; post += 3) {
                int n = snprintf(line, sizeof line, "{\"text\":\"%.*s%s%.*s\"}", pre,
                                 "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", specials[s].raw, post,
                                 "0123456789012345678901234");
                snprintf(want, sizeof want, "%.*s%s%.*s", pre, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
                         specials[s].dec, post, "0123456789012345678901234");
                int rc = parse_n(line, (size_t)n, text_key, 1);
                CHECK(rc == 0 && str_eq(0, 0, want, strlen(want)));
                /* The same line cut short anywhere is an error, never a read past the end. */
                for (int cut = 0; cut < n; cut++)
                    CHECK(parse_n(line, (size_t)cut, text_key, 1) < 0);
            }
        }
    }
}

static void test_surrogates(void)
{
    CHECK(fails("{\"text\": \"\\ud800\"}", JSON_ERR_SURROGATE, "lone surrogate \\ud800 at column 11"));
    CHECK(fails("{\"text\": \"ab\\uD800\"}", JSON_ERR_SURROGATE, "lone surrogate \\ud800 at column 13"));
    CHECK(fails("{\"text\": \"\\ud800\\u0041\"}", JSON_ERR_SURROGATE, "lone surrogate \\ud800"));
    CHECK(fails("{\"text\": \"\\ud800\\ud800\\udc00\"}", JSON_ERR_SURROGATE, "lone surrogate \\ud800"));
    CHECK(fails("{\"text\": \"\\ud800x\\udc00\"}", JSON_ERR_SURROGATE, "lone surrogate \\ud800"));
    CHECK(fails("{\"text\": \"\\ud800\\n\"}", JSON_ERR_SURROGATE, NULL));
    CHECK(fails("{\"text\": \"\\udc00\"}", JSON_ERR_SURROGATE, "lone surrogate \\udc00"));
    CHECK(fails("{\"text\": \"\\udfff\\ud800\"}", JSON_ERR_SURROGATE, "lone surrogate \\udfff"));
    CHECK(fails("{\"text\": [\"ok\", \"\\udbff\"]}", JSON_ERR_SURROGATE, "lone surrogate \\udbff"));
    CHECK(fails("{\"text\": \"ok\", \"text\": \"\\udfff\"}", JSON_ERR_SURROGATE, NULL));
    /* Python accepts lone surrogates; Megatron only fails on text it encodes.
     * So they are fine in keys, in other members, in a value that a later
     * duplicate replaces, and in a value that is not text anyway. */
    CHECK(text_is("{\"id\": \"\\ud800\", \"\\udc00\": 1, \"text\": \"a\"}", "a"));
    CHECK(text_is("{\"text\": \"\\ud800\", \"text\": \"b\"}", "b"));
    CHECK(text_is("{\"x\": {\"text\": \"\\ud800\"}, \"text\": \"c\"}", "c"));
    CHECK(parse("{\"text\": [\"\\ud800\", 1]}") == 0 && json_doc_kind(&doc, 0) == JSON_OTHER);
    CHECK(parse("{\"id\": \"\\ud800\"}") == 0 && json_doc_kind(&doc, 0) == JSON_MISSING);
}

static void test_utf8(void)
{
    static const char *bad[] = {
        "\x80", "\xbf", "\xc0\x80", "\xc1\xbf", "\xc2", "\xc2\x41", "\xe0\x80\x80", "\xe0\x9f\xbf",
        "\xed\xa0\x80", "\xed\xbf\xbf", "\xe2\x82", "\xe2\x28\xa1", "\xf0\x80\x80\x80", "\xf0\x8f\xbf\xbf",
        "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xf8\x88\x80\x80\x80", "\xfe", "\xff", "\xf0\x9f\x98",
        "\xf0\x9f\x98\x41", "\xef\xbb",
    };
    static const char *good[] = {
        "\xc2\x80", "\xdf\xbf", "\xe0\xa0\x80", "\xed\x9f\xbf", "\xee\x80\x80", "\xef\xbf\xbf",
        "\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf", "\xf3\xbf\xbf\xbf", "\xef\xbb\xbf",
    };
    char line[64];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(line, sizeof line, "{\"text\": \"a%sb\"}", bad[i]);
        CHECK(fails(line, JSON_ERR_UTF8, "invalid UTF-8 at column 12"));
        snprintf(line, sizeof line, "{\"id\": \"%s\", \"text\": \"\"}", bad[i]);  /* not extracted */
        CHECK(fails(line, JSON_ERR_UTF8, "invalid UTF-8 at column 9"));
        snprintf(line, sizeof line, "{\"%s\": 1, \"text\": \"\"}", bad[i]);  /* in a key */
        CHECK(fails(line, JSON_ERR_UTF8, NULL));
        snprintf(line, sizeof line, "{\"text\": \"\"} %s", bad[i]);  /* outside strings */
        CHECK(fails(line, JSON_ERR_UTF8, "invalid UTF-8 at column 14"));
        snprintf(line, sizeof line, "{\"text\": \"%s", bad[i]);  /* cut off by the end */
        CHECK(fails(line, JSON_ERR_UTF8, "invalid UTF-8 at column 11"));
    }
    char want[16];
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        snprintf(line, sizeof line, "{\"text\": \"a%sb\"}", good[i]);
        snprintf(want, sizeof want, "a%sb", good[i]);
        CHECK(text_is(line, want));
    }
    /* Valid non-ASCII outside a string is a syntax error. */
    CHECK(fails("{\"text\": \"\"} \xc3\xa9", JSON_ERR_SYNTAX, "unexpected data after JSON value at column 14"));
    CHECK(fails("{\"text\": \xc3\xa9}", JSON_ERR_SYNTAX, "expected value at column 10"));
}

static void test_control_chars(void)
{
    char line[32];
    for (int c = 0; c < 0x20; c++) {
        int n = snprintf(line, sizeof line, "{\"text\": \"ab%ccd\"}", c == 0 ? 'X' : c);
        if (c == 0)
            line[12] = '\0';
        CHECK(fails_n(line, (size_t)n, JSON_ERR_SYNTAX, "invalid control character in string at column 13"));
        n = snprintf(line, sizeof line, "{\"k%c\": 1, \"text\": \"\"}", c == 0 ? 'X' : c);
        if (c == 0)
            line[3] = '\0';
        CHECK(fails_n(line, (size_t)n, JSON_ERR_SYNTAX, "invalid control character in string"));
    }
    /* Long enough for the 16-byte loop to find it. */
    CHECK(fails("{\"text\": \"0123456789abcdefghijklmnopqrstu\tv\"}", JSON_ERR_SYNTAX,
                "invalid control character in string at column 42"));
}

static void test_keys(void)
{
    CHECK(text_is("{\"text\": \"first\", \"text\": \"second\"}", "second"));
    CHECK(text_is("{\"text\": 1, \"text\": \"str\"}", "str"));
    CHECK(parse("{\"text\": \"str\", \"text\": 1}") == 0 && json_doc_kind(&doc, 0) == JSON_OTHER);
    CHECK(parse("{\"text\": \"str\", \"text\": [\"a\", \"b\"]}") == 0 && json_doc_kind(&doc, 0) == JSON_STRING_ARRAY &&
          json_doc_count(&doc, 0) == 2 && str_eq(0, 1, "b", 1));
    CHECK(parse("{\"text\": [\"a\", \"b\"], \"text\": \"c\"}") == 0 && json_doc_kind(&doc, 0) == JSON_STRING &&
          json_doc_count(&doc, 0) == 1 && str_eq(0, 0, "c", 1));
    CHECK(text_is("{\"te\\u0078t\": \"escaped key\"}", "escaped key"));
    CHECK(text_is("{\"\\u0074\\u0065\\u0078\\u0074\": \"all escaped\"}", "all escaped"));
    CHECK(text_is("{\"text\": \"plain\", \"te\\u0078t\": \"escaped wins, it is last\"}", "escaped wins, it is last"));
    /* Near misses do not match. */
    CHECK(parse("{\"text\\u0000\": \"a\", \"tex\": \"b\", \"Text\": \"c\", \"texts\": \"d\", \" text\": \"e\"}") == 0 &&
          json_doc_kind(&doc, 0) == JSON_MISSING);
    /* Nested objects with their own "text" are ignored. */
    CHECK(text_is("{\"meta\": {\"text\": \"no\"}, \"text\": \"yes\"}", "yes"));
    CHECK(text_is("{\"text\": \"yes\", \"meta\": {\"text\": \"no\", \"x\": [{\"text\": \"no\"}]}}", "yes"));
    CHECK(parse("{\"meta\": {\"text\": \"no\"}, \"a\": [{\"text\": \"no\"}], \"b\": [\"text\"]}") == 0 &&
          json_doc_kind(&doc, 0) == JSON_MISSING && json_doc_count(&doc, 0) == 0);
    /* Several keys, in any order; an empty key; nkeys == 0 validates only. */
    static const char *const keys3[] = { "text", "title", "" };
    const char *line = "{\"title\": \"T\", \"\": \"E\", \"id\": 3, \"text\": \"X\"}";
    CHECK(parse_n(line, strlen(line), keys3, 3) == 0);
    CHECK(json_doc_kind(&doc, 0) == JSON_STRING && str_eq(0, 0, "X", 1));
    CHECK(json_doc_kind(&doc, 1) == JSON_STRING && str_eq(1, 0, "T", 1));
    CHECK(json_doc_kind(&doc, 2) == JSON_STRING && str_eq(2, 0, "E", 1));
    CHECK(json_doc_kind(&doc, 3) == JSON_MISSING);
    CHECK(parse_n("{\"text\": \"X\"}", 13, keys3, 0) == 0 && json_doc_kind(&doc, 0) == JSON_MISSING);
    CHECK(parse_n("{\"text\": \"X\"", 12, keys3, 0) == JSON_ERR_SYNTAX);
    /* The same key asked for twice gets the first slot only. */
    static const char *const twice[] = { "text", "text" };
    CHECK(parse_n("{\"text\": \"X\"}", 13, twice, 2) == 0 && json_doc_kind(&doc, 0) == JSON_STRING &&
          json_doc_kind(&doc, 1) == JSON_MISSING);
}

static void test_arrays(void)
{
    CHECK(parse("{\"text\": []}") == 0 && json_doc_kind(&doc, 0) == JSON_STRING_ARRAY && json_doc_count(&doc, 0) == 0);
    CHECK(parse("{\"text\": [ ] }") == 0 && json_doc_kind(&doc, 0) == JSON_STRING_ARRAY);
    CHECK(parse("{\"text\": [\"a\", \"\", \"b\\n\"], \"id\": [\"x\"]}") == 0 &&
          json_doc_kind(&doc, 0) == JSON_STRING_ARRAY && json_doc_count(&doc, 0) == 3 && str_eq(0, 0, "a", 1) &&
          str_eq(0, 1, "", 0) && str_eq(0, 2, "b\n", 2));
    size_t len;
    CHECK(json_doc_string(&doc, 0, 3, &len) == NULL && len == 0);
    CHECK(json_doc_string(&doc, 5, 0, &len) == NULL && len == 0);
    static const char *other[] = {
        "{\"text\": [\"a\", 1]}", "{\"text\": [1, \"a\"]}", "{\"text\": [\"a\", [\"b\"]]}", "{\"text\": [[]]}",
        "{\"text\": [null]}", "{\"text\": [\"a\", {}]}", "{\"text\": {\"text\": \"a\"}}", "{\"text\": {}}",
        "{\"text\": 1}", "{\"text\": -0.5}", "{\"text\": true}", "{\"text\": false}", "{\"text\": null}",
        "{\"text\": NaN}", "{\"text\": [\"a\", NaN, \"b\"]}",
    };
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
        int rc = parse(other[i]);
        CHECK(rc == 0 && json_doc_kind(&doc, 0) == JSON_OTHER && json_doc_count(&doc, 0) == 0);
        if (rc != 0 || json_doc_kind(&doc, 0) != JSON_OTHER)
            fprintf(stderr, "  line %s: rc %d kind %d\n", other[i], rc, json_doc_kind(&doc, 0));
    }
    /* Everything after a non-string element is still validated. */
    CHECK(fails("{\"text\": [\"a\", 1, \"b\", ]}", JSON_ERR_SYNTAX, "expected value at column 24"));
    CHECK(fails("{\"text\": [\"a\", 1, \"\\q\"]}", JSON_ERR_SYNTAX, "invalid escape"));
    /* Many strings: the span table grows. */
    char *big = malloc(200000);
    size_t n = (size_t)sprintf(big, "{\"text\": [");
    for (int i = 0; i < 10000; i++)
        n += (size_t)sprintf(big + n, "%s\"s%d\"", i ? "," : "", i);
    n += (size_t)sprintf(big + n, "]}");
    CHECK(parse_n(big, n, text_key, 1) == 0 && json_doc_count(&doc, 0) == 10000 && str_eq(0, 9999, "s9999", 5));
    free(big);
}

static void test_numbers(void)
{
    static const char *good[] = {
        "0", "-0", "1", "-1", "10", "1234567890", "0.5", "-0.0", "1.5", "-0.0e+10", "1e5", "1E5", "1e-5",
        "1E+05", "0e0", "1.25e-300", "1e400", "-1e400", "123456789012345678901234567890", "NaN", "Infinity",
        "-Infinity",
    };
    static const char *bad[] = {
        "01", "-01", "00", "1.", "1.e5", ".5", "-", "-.5", "1e", "1e+", "1E-", "+1", "--1", "-a", "0x1", "1.5.5",
        "1e5e5", "1ee5", "-NaN", "nan", "inf", "-inf", "+Infinity", "Infinit", "Infinityx", "NaNa", "-Infinit",
        "1 2", "1e5.5", "\xd9\xa1" /* Arabic-Indic one */,
    };
    char line[64];
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        snprintf(line, sizeof line, "{\"n\": %s, \"text\": \"t\"}", good[i]);
        CHECK(text_is(line, "t"));
        snprintf(line, sizeof line, "{\"n\": [%s], \"text\": \"t\"}", good[i]);
        CHECK(text_is(line, "t"));
        snprintf(line, sizeof line, "{\"text\": \"t\", \"n\": %s}", good[i]);
        CHECK(text_is(line, "t"));
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(line, sizeof line, "{\"n\": %s, \"text\": \"t\"}", bad[i]);
        CHECK(fails(line, JSON_ERR_SYNTAX, NULL));
        snprintf(line, sizeof line, "{\"text\": \"t\", \"n\": %s}", bad[i]);
        CHECK(fails(line, JSON_ERR_SYNTAX, NULL));
    }
    CHECK(fails("{\"n\": 01}", JSON_ERR_SYNTAX, "leading zero in number at column 7"));
    CHECK(fails("{\"n\": 1.}", JSON_ERR_SYNTAX, "expected digit after '.' in number at column 9"));
    CHECK(fails("{\"n\": 1e}", JSON_ERR_SYNTAX, "expected digit in exponent at column 9"));
    CHECK(fails("{\"n\": -}", JSON_ERR_SYNTAX, "expected digit after '-' at column 8"));
    CHECK(fails("{\"n\": +1}", JSON_ERR_SYNTAX, "expected value at column 7"));
    CHECK(fails("{\"n\": -", JSON_ERR_SYNTAX, "unexpected end of line at column 8"));
    CHECK(fails("{\"n\": 1", JSON_ERR_SYNTAX, "unexpected end of line at column 8"));
    /* Python's int() refuses more than 4300 digits; floats have no limit. */
    char *big = malloc(5000 + 64);
    static const char *const tails[] = { "", ".", ".5", "e1" };
    for (int digits = 4299; digits <= 4302; digits++) {
        for (size_t t = 0; t < 4; t++) {
            int n = sprintf(big, "{\"n\": -");
            memset(big + n, '7', (size_t)digits);
            n += digits;
            n += sprintf(big + n, "%s, \"text\": \"t\"}", tails[t]);
            int rc = parse_n(big, (size_t)n, text_key, 1);
            if (t == 0)  /* an integer */
                CHECK(digits <= JSON_MAX_INT_DIGITS ? rc == 0 : rc == JSON_ERR_NUMBER);
            else if (t == 1)
                CHECK(rc == JSON_ERR_SYNTAX);
            else  /* a float, fine at any length */
                CHECK(rc == 0);
        }
    }
    memcpy(big, "{\"n\": -", 7);
    memset(big + 7, '9', 4301);
    big[7 + 4301] = '}';
    CHECK(parse_n(big, 7 + 4301 + 1, text_key, 1) == JSON_ERR_NUMBER);
    CHECK(strcmp(doc.err, "invalid JSON: integer longer than 4300 digits (python's int limit) at column 7") == 0);
    free(big);
    /* Literals. */
    CHECK(text_is("{\"a\": true, \"b\": false, \"c\": null, \"text\": \"t\"}", "t"));
    CHECK(fails("{\"a\": tru}", JSON_ERR_SYNTAX, "invalid literal at column 7"));
    CHECK(fails("{\"a\": True}", JSON_ERR_SYNTAX, "expected value at column 7"));
    CHECK(fails("{\"a\": nul", JSON_ERR_SYNTAX, "invalid literal"));
    CHECK(fails("{\"a\": falsey}", JSON_ERR_SYNTAX, "expected ',' or '}' after object member at column 12"));
}

static void test_structure(void)
{
    /* Whitespace around and between tokens: only space, \t, \n, \r. */
    CHECK(text_is(" \t\r\n{ \t\"text\" \r\n: \"a\" ,\"b\" :[ 1 , 2 ] } \r\n", "a"));
    CHECK(text_is("{\"text\":\"a\"}\r", "a"));
    CHECK(fails("\v{\"text\": \"a\"}", JSON_ERR_SYNTAX, "expected '{' at column 1"));
    CHECK(fails("{\"text\": \"a\"}\f", JSON_ERR_SYNTAX, "unexpected data after JSON value at column 14"));
    CHECK(fails("{\"text\":\xc2\xa0\"a\"}", JSON_ERR_SYNTAX, "expected value at column 9"));
    CHECK(fails("\xef\xbb\xbf{\"text\": \"a\"}", JSON_ERR_SYNTAX, "unexpected UTF-8 byte order mark at column 1"));
    /* Empty and blank lines. */
    CHECK(fails("", JSON_ERR_SYNTAX, "invalid JSON: unexpected end of line at column 1"));
    CHECK(fails("  \r", JSON_ERR_SYNTAX, "invalid JSON: unexpected end of line at column 4"));
    /* Top level. */
    static const char *not_obj[] = { "[]", "[\"text\"]", "\"text\"", "1", "-1", "null", "true", "false", "NaN",
                                     "Infinity", "[" };
    for (size_t i = 0; i < sizeof not_obj / sizeof not_obj[0]; i++)
        CHECK(fails(not_obj[i], JSON_ERR_NOT_OBJECT, "top-level value is not an object at column 1"));
    CHECK(fails("x", JSON_ERR_SYNTAX, "expected '{' at column 1"));
    CHECK(fails_n("\0{}", 3, JSON_ERR_SYNTAX, "expected '{' at column 1"));
    CHECK(fails("}", JSON_ERR_SYNTAX, NULL));
    CHECK(parse("{}") == 0 && json_doc_kind(&doc, 0) == JSON_MISSING);
    /* Garbage, commas, colons, brackets. */
    CHECK(fails("{\"text\": \"a\"} x", JSON_ERR_SYNTAX, "unexpected data after JSON value at column 15"));
    CHECK(fails("{\"text\": \"a\"}}", JSON_ERR_SYNTAX, "unexpected data after JSON value at column 14"));
    CHECK(fails("{\"text\": \"a\"}{}", JSON_ERR_SYNTAX, "unexpected data after JSON value"));
    CHECK(fails("{\"text\": \"a\",}", JSON_ERR_SYNTAX, "expected object key in double quotes at column 14"));
    CHECK(fails("{,\"text\": \"a\"}", JSON_ERR_SYNTAX, "expected object key in double quotes at column 2"));
    CHECK(fails("{\"a\": [1,]}", JSON_ERR_SYNTAX, "expected value at column 10"));
    CHECK(fails("{\"a\": [,1]}", JSON_ERR_SYNTAX, "expected value at column 8"));
    CHECK(fails("{\"a\": 1 \"text\": \"b\"}", JSON_ERR_SYNTAX, "expected ',' or '}' after object member at column 9"));
    CHECK(fails("{\"a\": [1 2]}", JSON_ERR_SYNTAX, "expected ',' or ']' after array element at column 10"));
    CHECK(fails("{\"text\" \"a\"}", JSON_ERR_SYNTAX, "invalid JSON: expected ':' after object key at column 9"));
    CHECK(fails("{\"text\": \"a\" : 1}", JSON_ERR_SYNTAX, "expected ',' or '}'"));
    CHECK(fails("{\"text\":: \"a\"}", JSON_ERR_SYNTAX, "expected value at column 9"));
    CHECK(fails("{text: \"a\"}", JSON_ERR_SYNTAX, "expected object key in double quotes at column 2"));
    CHECK(fails("{'text': 'a'}", JSON_ERR_SYNTAX, NULL));
    CHECK(fails("{1: \"a\"}", JSON_ERR_SYNTAX, NULL));
    CHECK(fails("{\"a\": [}", JSON_ERR_SYNTAX, "expected value"));
    CHECK(fails("{\"a\": {]}", JSON_ERR_SYNTAX, NULL));
    CHECK(fails("{\"a\": [1}", JSON_ERR_SYNTAX, "expected ',' or ']'"));
    CHECK(fails("{\"a\": {\"b\": 1]}", JSON_ERR_SYNTAX, "expected ',' or '}'"));
    CHECK(fails("{\"text\": \"abc", JSON_ERR_SYNTAX, "invalid JSON: unexpected end of line at column 14"));
    CHECK(fails("{\"text\": \"abc\"", JSON_ERR_SYNTAX, "unexpected end of line at column 15"));
    CHECK(fails("{\"text\"", JSON_ERR_SYNTAX, "unexpected end of line at column 8"));
    CHECK(fails("{\"text\":", JSON_ERR_SYNTAX, "unexpected end of line at column 9"));
    CHECK(fails("{", JSON_ERR_SYNTAX, "unexpected end of line at column 2"));
    CHECK(fails("{\"a\": [", JSON_ERR_SYNTAX, "unexpected end of line"));
    CHECK(fails("{\"a\": [1,", JSON_ERR_SYNTAX, "unexpected end of line"));
    /* Arguments. */
    CHECK(json_extract(NULL, "{}", 2, text_key, 1) == JSON_ERR_ARG);
    CHECK(json_extract(&doc, NULL, 2, text_key, 1) == JSON_ERR_ARG);
    CHECK(json_extract(&doc, "{}", 2, NULL, 1) == JSON_ERR_ARG);
    CHECK(strcmp(json_strerror(JSON_ERR_UTF8), "invalid UTF-8") == 0);
}

static void test_depth(void)
{
    /* The top-level object is level 1: JSON_MAX_DEPTH - 1 arrays inside it fit. */
    char *s = malloc(6 * JSON_MAX_DEPTH + 64);
    for (size_t inner = JSON_MAX_DEPTH - 2; inner <= JSON_MAX_DEPTH; inner++) {
        size_t len = (size_t)sprintf(s, "{\"a\":");
        memset(s + len, '[', inner);
        len += inner;
        memset(s + len, ']', inner);
        len += inner;
        s[len++] = '}';
        int rc = parse_n(s, len, text_key, 1);
        CHECK(1 + inner <= JSON_MAX_DEPTH ? rc == 0 : rc == JSON_ERR_DEPTH);
    }
    CHECK(strstr(doc.err, "invalid JSON: nesting deeper than 1000 at column 1005") != NULL);
    /* Objects count as well. */
    size_t len = 0;
    for (size_t i = 0; i < JSON_MAX_DEPTH; i++)
        len += (size_t)sprintf(s + len, "{\"a\":");
    CHECK(parse_n(s, len, text_key, 1) == JSON_ERR_SYNTAX);  /* ends early, within the limit */
    len += (size_t)sprintf(s + len, "{");
    CHECK(parse_n(s, len, text_key, 1) == JSON_ERR_DEPTH);
    free(s);
    /* Far deeper than the limit: an error, not a crash. */
    s = malloc(1000000);
    memset(s, '[', 1000000);
    s[0] = '{';
    CHECK(parse_n(s, 1000000, text_key, 1) < 0);
    free(s);
}

static void test_reuse(void)
{
    /* Results are replaced line by line; a long line then a short one. */
    size_t n = 1 << 20;
    char *big = malloc(n + 32);
    size_t len = (size_t)sprintf(big, "{\"text\": \"");
    memset(big + len, 'x', n);
    len += n;
    len += (size_t)sprintf(big + len, "\"}");
    CHECK(parse_n(big, len, text_key, 1) == 0 && json_doc_count(&doc, 0) == 1);
    size_t got;
    const char *p = json_doc_string(&doc, 0, 0, &got);
    CHECK(p && got == n && p[0] == 'x' && p[n - 1] == 'x');
    free(big);
    CHECK(text_is("{\"text\": \"short\"}", "short"));
    CHECK(fails("{\"text\": 1", JSON_ERR_SYNTAX, NULL));
    CHECK(text_is("{\"text\": \"again\"}", "again") && doc.err[0] == '\0');
    json_doc_release(&doc);
    json_doc_release(&doc);  /* twice is fine */
    json_doc_release(NULL);
    CHECK(text_is("{\"text\": \"after release\"}", "after release"));
}

/* Reads `path` and calls fn on every line (split at \n only; a \r before it
 * is JSON whitespace).  Returns the number of lines, -1 if unreadable. */
static long for_each_line(const char *path, void (*fn)(long lineno, const char *line, size_t len))
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "  cannot open '%s' (run from the repo root)\n", path);
        return -1;
    }
    char *buf = NULL;
    size_t cap = 0;
    ssize_t n;
    long lineno = 0;
    while ((n = getline(&buf, &cap, f)) > 0) {
        size_t len = (size_t)n;
        if (buf[len - 1] == '\n')
            len--;
        fn(++lineno, buf, len);
    }
    free(buf);
    fclose(f);
    return lineno;
}

static const char *const corpus_keys[] = { "text", "title" };

static void check_corpus_line(long lineno, const char *line, size_t len)
{
    int rc = parse_n(line, len, corpus_keys, 2);
    CHECK(rc == 0);
    CHECK(json_doc_kind(&doc, 0) == JSON_STRING || json_doc_kind(&doc, 0) == JSON_STRING_ARRAY);
    if (rc != 0)
        fprintf(stderr, "  line %ld: %s\n", lineno, doc.err);
}

static void check_list_line(long lineno, const char *line, size_t len)
{
    CHECK(parse_n(line, len, corpus_keys, 2) == 0);
    CHECK(json_doc_kind(&doc, 0) == (lineno == 7 ? JSON_STRING : JSON_STRING_ARRAY));
    static const size_t counts[] = { 0, 3, 0, 3, 2, 1, 1, 1, 3 };
    CHECK(json_doc_count(&doc, 0) == counts[lineno]);
    if (lineno == 8)
        CHECK(str_eq(0, 2, " \xf0\x9f\x98\x80", 5));
}

static void check_title_line(long lineno, const char *line, size_t len)
{
    (void)lineno;
    CHECK(parse_n(line, len, corpus_keys, 2) == 0);
    CHECK(json_doc_kind(&doc, 0) == JSON_STRING && json_doc_kind(&doc, 1) == JSON_STRING);
}

/* Key 0's first string equals the literal (embedded NULs included). */
#define TEXT_IS(lit) str_eq(0, 0, lit, sizeof(lit) - 1)

static void check_edge_line(long lineno, const char *line, size_t len)
{
    check_corpus_line(lineno, line, len);
    if (lineno == 1)
        CHECK(json_doc_count(&doc, 0) == 1 && str_eq(0, 0, "", 0));
    if (lineno == 11)
        CHECK(TEXT_IS("Line one\nLine two\n\tIndented \"quoted\" back\\slash and a/slash // done\r\nCRLF line"
                      "\rCR only\bbackspace\fformfeed"));
    if (lineno == 13)
        CHECK(TEXT_IS("Emoji via surrogate pairs: \xf0\x9f\x98\x80 \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd "
                      "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7\xe2\x80\x8d"
                      "\xf0\x9f\x91\xa6 \xf0\x9f\x87\xaf\xf0\x9f\x87\xb5 \xf0\x9f\x8f\xb3\xef\xb8\x8f\xe2\x80\x8d"
                      "\xf0\x9f\x8c\x88 \xe2\x9d\xa4\xef\xb8\x8f 1\xef\xb8\x8f\xe2\x83\xa3 end"));
    if (lineno == 15)
        CHECK(TEXT_IS("NUL in the middle:\0<- there. Two NULs \0\0 and trailing\0"));
    if (lineno == 20)
        CHECK(TEXT_IS("the key is spelled with an escape (te\\u0078t == text)"));
    if (lineno == 21)
        CHECK(TEXT_IS("second value wins"));
    if (lineno == 62)
        CHECK(TEXT_IS("extra keys before and after text"));
    if (lineno == 63)
        CHECK(TEXT_IS("text is the last key") && str_eq(1, 0, "A title", 7));
    if (lineno == 33) {
        size_t n;
        json_doc_string(&doc, 0, 0, &n);
        CHECK(n == 3120965);
    }
}

static void test_corpus(void)
{
    CHECK(for_each_line("tests/data/corpus/edge.jsonl", check_edge_line) == 66);
    CHECK(for_each_line("tests/data/corpus/tiny.jsonl", check_corpus_line) == 210);
    CHECK(for_each_line("tests/data/corpus/tiny-keys.jsonl", check_title_line) == 210);
    CHECK(for_each_line("tests/data/corpus/edge-list.jsonl", check_list_line) == 8);
    CHECK(for_each_line("tests/data/corpus/edge-unicode-version.jsonl", check_corpus_line) == 4);
}

int main(void)
{
    json_doc_init(&doc);
    RUN(test_escapes);
    RUN(test_escapes_at_every_offset);
    RUN(test_surrogates);
    RUN(test_utf8);
    RUN(test_control_chars);
    RUN(test_keys);
    RUN(test_arrays);
    RUN(test_numbers);
    RUN(test_structure);
    RUN(test_depth);
    RUN(test_reuse);
    RUN(test_corpus);
    json_doc_release(&doc);
    return harness_report();
}
