/*
 * json.c - the strict JSON line parser declared in json.h.
 *
 * One pass over the line with a state machine (value, key, after-value) and
 * an explicit container stack, so deep nesting cannot overflow the C stack.
 * Every string is decoded into d->buf: strings we keep get a span, all others
 * (keys, strings of other members) are rolled back right away.  That costs a
 * copy of strings we do not need, but it keeps one decoder for everything.
 *
 * The decoded text of one line is never longer than the line (each escape is
 * at least as long as what it decodes to), so d->buf is grown once per line
 * to len + slack and the string decoder does no capacity checks; the slack
 * lets the SIMD loop store 16 bytes at a time past the current position.
 *
 * Not done on purpose: building a tree, converting numbers, recursion.
 */
#include "json.h"
#include "utf8.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define BUF_SLACK 64  /* >= 16 for the SIMD stores */

typedef unsigned char uchar;

enum { CONT_ARRAY = 0, CONT_OBJECT = 1 };

static int json_fail(json_doc *d, int code, const uchar *line, const uchar *at, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Formats "<message> at column N" into d->err; the column is 1-based. */
static int json_fail(json_doc *d, int code, const uchar *line, const uchar *at, const char *fmt, ...)
{
    char msg[120];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t col = (size_t)(at - line) + 1;
    switch (code) {
    case JSON_ERR_SYNTAX:
    case JSON_ERR_DEPTH:
    case JSON_ERR_NUMBER:
        snprintf(d->err, sizeof d->err, "invalid JSON: %s at column %zu", msg, col);
        break;
    default:
        snprintf(d->err, sizeof d->err, "%s at column %zu", msg, col);
        break;
    }
    return code;
}

/* Length of the valid UTF-8 sequence at p (1..4), or 0 if it is invalid or
 * cut off by `end`.  Rejects overlong forms, surrogates and > U+10FFFF. */
static inline size_t utf8_seq_len(const uchar *p, const uchar *end)
{
    uchar c = p[0];
    if (c < 0x80)
        return 1;
    if (c < 0xC2)
        return 0;
    if (c < 0xE0) {
        if (end - p < 2 || (p[1] & 0xC0) != 0x80)
            return 0;
        return 2;
    }
    if (c < 0xF0) {
        if (end - p < 3)
            return 0;
        uchar lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        if (p[1] < lo || p[1] > hi || (p[2] & 0xC0) != 0x80)
            return 0;
        return 3;
    }
    if (c < 0xF5) {
        if (end - p < 4)
            return 0;
        uchar lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        if (p[1] < lo || p[1] > hi || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80)
            return 0;
        return 4;
    }
    return 0;
}

/* Hex digit values; 0xFF for anything else. */
static const uchar hexval[256] = {
#define H16(x) x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x
    H16(0xFF), H16(0xFF), H16(0xFF),
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
    0xFF, 10, 11, 12, 13, 14, 15, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
    H16(0xFF),
    0xFF, 10, 11, 12, 13, 14, 15, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
    H16(0xFF), H16(0xFF), H16(0xFF), H16(0xFF), H16(0xFF), H16(0xFF), H16(0xFF), H16(0xFF), H16(0xFF),
#undef H16
};

/* Value of the 4 hex digits at p, or -1. */
static inline long hex4(const uchar *p)
{
    unsigned a = hexval[p[0]], b = hexval[p[1]], c = hexval[p[2]], e = hexval[p[3]];
    if ((a | b | c | e) & 0xF0)
        return -1;
    return (long)((a << 12) | (b << 8) | (c << 4) | e);
}

/* What a short escape decodes to; 0 for an invalid escape ('u' is separate). */
static const uchar short_escape[256] = {
    ['"'] = '"', ['\\'] = '\\', ['/'] = '/', ['b'] = '\b',
    ['f'] = '\f', ['n'] = '\n', ['r'] = '\r', ['t'] = '\t',
};

typedef struct string_scan {
    const uchar *line;   /* for error columns */
    size_t lone_col;     /* first lone surrogate of the string (1-based column), 0 if none */
    uint32_t lone_cp;
} string_scan;

/* Decodes the string whose opening quote is just before *pp into d->buf at
 * d->buf_len, and leaves *pp after the closing quote and *out_len its
 * decoded length.  d->buf_len is not changed.  Plain bytes are copied 16 at
 * a time; a run of multi-byte UTF-8 is validated and copied in a local loop
 * so non-Latin text does not bounce in and out of the SIMD loop. */
static int scan_string(json_doc *d, string_scan *s, const uchar **pp, const uchar *end, size_t *out_len)
{
    const uchar *p = *pp;
    uchar *const o0 = (uchar *)d->buf + d->buf_len;
    uchar *o = o0;
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"');
    const __m128i bslash = _mm_set1_epi8('\\');
    const __m128i space = _mm_set1_epi8(' ');
#endif
    for (;;) {
#if defined(__SSE2__)
        /* Signed compare: bytes < 0x20 and >= 0x80 are both "less than ' '". */
        while (end - p >= 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
            _mm_storeu_si128((__m128i *)(void *)o, v);
            __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)),
                                     _mm_cmplt_epi8(v, space));
            unsigned mask = (unsigned)_mm_movemask_epi8(m);
            if (mask) {
                unsigned k = (unsigned)__builtin_ctz(mask);
                p += k;
                o += k;
                goto special;
            }
            p += 16;
            o += 16;
        }
#endif
        while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\')
            *o++ = *p++;
        if (p == end)
            return json_fail(d, JSON_ERR_SYNTAX, s->line, p, "unexpected end of line");
#if defined(__SSE2__)
    special:
#endif
        {
            uchar c = *p;
            if (c == '"') {
                *pp = p + 1;
                *out_len = (size_t)(o - o0);
                return 0;
            }
            if (c == '\\') {
                if (end - p < 2)
                    return json_fail(d, JSON_ERR_SYNTAX, s->line, end, "unexpected end of line");
                uchar e = p[1];
                if (e != 'u') {
                    uchar r = short_escape[e];
                    if (r == 0)
                        return json_fail(d, JSON_ERR_SYNTAX, s->line, p, "invalid escape");
                    *o++ = r;
                    p += 2;
                    continue;
                }
                long cp = end - p >= 6 ? hex4(p + 2) : -1;
                if (cp < 0)
                    return json_fail(d, JSON_ERR_SYNTAX, s->line, p, "invalid \\u escape");
                if (cp >= 0xD800 && cp <= 0xDBFF && end - p >= 12 && p[6] == '\\' && p[7] == 'u') {
                    long lo = hex4(p + 8);
                    if (lo >= 0xDC00 && lo <= 0xDFFF) {
                        o += utf8_put(o, 0x10000 + (((uint32_t)cp - 0xD800) << 10) + ((uint32_t)lo - 0xDC00));
                        p += 12;
                        continue;
                    }
                }
                if (cp >= 0xD800 && cp <= 0xDFFF && s->lone_col == 0) {
                    s->lone_col = (size_t)(p - s->line) + 1;
                    s->lone_cp = (uint32_t)cp;
                }
                o += utf8_put(o, (uint32_t)cp);
                p += 6;
                continue;
            }
            if (c < 0x20)
                return json_fail(d, JSON_ERR_SYNTAX, s->line, p, "invalid control character in string");
            do {
                size_t n = utf8_seq_len(p, end);
                if (n == 0)
                    return json_fail(d, JSON_ERR_UTF8, s->line, p, "invalid UTF-8");
                o[0] = p[0];
                o[1] = p[1];  /* the slack makes 4-byte copies safe */
                if (n > 2) {
                    o[2] = p[2];
                    if (n > 3)
                        o[3] = p[3];
                }
                p += n;
                o += n;
            } while (p < end && *p >= 0x80);
        }
    }
}

/* Makes room for the decoded strings of a line of `len` bytes and for
 * `nkeys` values. */
static int json_reserve(json_doc *d, size_t len, size_t nkeys)
{
    if (d->buf_cap < len + BUF_SLACK) {
        size_t cap = d->buf_cap ? d->buf_cap : 4096;
        while (cap < len + BUF_SLACK)
            cap *= 2;
        char *p = realloc(d->buf, cap);
        if (p == NULL)
            return JSON_ERR_NOMEM;
        d->buf = p;
        d->buf_cap = cap;
    }
    if (d->values_cap < nkeys) {
        json_value *v = realloc(d->values, nkeys * sizeof *v);
        if (v == NULL)
            return JSON_ERR_NOMEM;
        d->values = v;
        d->values_cap = nkeys;
    }
    return 0;
}

static int push_span(json_doc *d, size_t off, size_t len)
{
    if (d->nspans == d->spans_cap) {
        size_t cap = d->spans_cap ? 2 * d->spans_cap : 16;
        json_span *s = realloc(d->spans, cap * sizeof *s);
        if (s == NULL)
            return JSON_ERR_NOMEM;
        d->spans = s;
        d->spans_cap = cap;
    }
    d->spans[d->nspans].off = off;
    d->spans[d->nspans].len = len;
    d->nspans++;
    return 0;
}

#define IS_WS(c) ((c) == ' ' || (c) == '\t' || (c) == '\n' || (c) == '\r')
#define SKIP_WS() do { while (p < end && IS_WS(*p)) p++; } while (0)

/* The error for an unexpected byte at p (or the end of the line): invalid
 * UTF-8 gets its own message, because Python fails on it while reading. */
static int unexpected(json_doc *d, const uchar *line, const uchar *p, const uchar *end, const char *what)
{
    if (p == end)
        return json_fail(d, JSON_ERR_SYNTAX, line, p, "unexpected end of line");
    if (*p >= 0x80 && utf8_seq_len(p, end) == 0)
        return json_fail(d, JSON_ERR_UTF8, line, p, "invalid UTF-8");
    if (p == line && end - p >= 3 && p[0] == 0xEF && p[1] == 0xBB && p[2] == 0xBF)
        return json_fail(d, JSON_ERR_SYNTAX, line, p, "unexpected UTF-8 byte order mark");
    return json_fail(d, JSON_ERR_SYNTAX, line, p, "%s", what);
}

/* Matches the literal `lit` (n bytes) at p. */
static inline int literal_at(const uchar *p, const uchar *end, const char *lit, size_t n)
{
    return (size_t)(end - p) >= n && memcmp(p, lit, n) == 0;
}

int json_extract(json_doc *d, const char *line_, size_t len, const char *const *keys, size_t nkeys)
{
    if (d == NULL)
        return JSON_ERR_ARG;
    d->err[0] = '\0';
    d->buf_len = 0;
    d->nspans = 0;
    d->nvalues = 0;
    if ((line_ == NULL && len > 0) || (keys == NULL && nkeys > 0)) {
        snprintf(d->err, sizeof d->err, "invalid argument");
        return JSON_ERR_ARG;
    }
    if (json_reserve(d, len, nkeys) < 0) {
        snprintf(d->err, sizeof d->err, "out of memory");
        return JSON_ERR_NOMEM;
    }
    for (size_t k = 0; k < nkeys; k++) {
        d->values[k].kind = JSON_MISSING;
        d->values[k].first = d->values[k].count = 0;
        d->values[k].lone_col = 0;
        d->values[k].lone_cp = 0;
    }
    d->nvalues = nkeys;

    const uchar *const line = (const uchar *)line_;
    const uchar *p = line, *const end = line + len;
    uchar stack[JSON_MAX_DEPTH];  /* CONT_* of each open container */
    size_t depth = 0;
    long cur = -1;  /* requested key of the current top-level member, or -1 */
    long arr = -1;  /* requested key whose array (at depth 2) is being collected, or -1 */
    string_scan s = { line, 0, 0 };
    int rc;

    SKIP_WS();
    if (p == end || *p != '{') {
        if (p < end && *p != '\0' && strchr("[\"-0123456789tfnNI", *p) != NULL)
            return json_fail(d, JSON_ERR_NOT_OBJECT, line, p, "top-level value is not an object");
        return unexpected(d, line, p, end, "expected '{'");
    }

value:  /* p is at the first byte of a value */
    if (p == end)
        return unexpected(d, line, p, end, "");
    {
        int keep = 0;
        json_value *v = NULL;
        if (depth == 1 && cur >= 0) {
            v = &d->values[cur];
            v->lone_col = 0;
            v->first = d->nspans;
            v->count = 0;
            if (*p == '"') {
                v->kind = JSON_STRING;
                keep = 1;
            } else if (*p == '[') {
                v->kind = JSON_STRING_ARRAY;
                arr = cur;
            } else {
                v->kind = JSON_OTHER;
            }
        } else if (depth == 2 && arr >= 0) {
            v = &d->values[arr];
            if (*p == '"') {
                keep = 1;
            } else {
                v->kind = JSON_OTHER;
                arr = -1;
            }
        }

        switch (*p) {
        case '"': {
            size_t n;
            p++;
            s.lone_col = 0;
            if ((rc = scan_string(d, &s, &p, end, &n)) < 0)
                return rc;
            if (keep) {
                if (push_span(d, d->buf_len, n) < 0) {
                    snprintf(d->err, sizeof d->err, "out of memory");
                    return JSON_ERR_NOMEM;
                }
                d->buf_len += n;
                v->count++;
                if (s.lone_col && v->lone_col == 0) {
                    v->lone_col = s.lone_col;
                    v->lone_cp = s.lone_cp;
                }
            }
            goto after_value;
        }
        case '{':
        case '[':
            if (depth == JSON_MAX_DEPTH)
                return json_fail(d, JSON_ERR_DEPTH, line, p, "nesting deeper than %d", JSON_MAX_DEPTH);
            stack[depth++] = *p == '{' ? CONT_OBJECT : CONT_ARRAY;
            p++;
            SKIP_WS();
            if (stack[depth - 1] == CONT_OBJECT) {
                if (p < end && *p == '}') {
                    p++;
                    depth--;
                    goto after_value;
                }
                goto key;
            }
            if (p < end && *p == ']') {
                p++;
                if (depth == 2)
                    arr = -1;
                depth--;
                goto after_value;
            }
            goto value;
        case 't': case 'f': case 'n': case 'N': case 'I': {
            /* true false null, and Python's NaN and Infinity */
            const char *lit = *p == 't' ? "true" : *p == 'f' ? "false" : *p == 'n' ? "null"
                            : *p == 'N' ? "NaN" : "Infinity";
            size_t ll = strlen(lit);
            if (!literal_at(p, end, lit, ll))
                return json_fail(d, JSON_ERR_SYNTAX, line, p, "invalid literal");
            p += ll;
            goto after_value;
        }
        case '-':
            if (p + 1 < end && p[1] == 'I') {
                if (!literal_at(p, end, "-Infinity", 9))
                    return json_fail(d, JSON_ERR_SYNTAX, line, p, "invalid literal");
                p += 9;
                goto after_value;
            }
            /* fall through */
        case '0': case '1': case '2': case '3': case '4':
        case '5': case '6': case '7': case '8': case '9': {
            const uchar *start = p;
            if (*p == '-')
                p++;
            const uchar *digits = p;
            if (p < end && *p == '0') {
                p++;
                if (p < end && *p >= '0' && *p <= '9')
                    return json_fail(d, JSON_ERR_SYNTAX, line, start, "leading zero in number");
            } else if (p < end && *p >= '1' && *p <= '9') {
                while (p < end && *p >= '0' && *p <= '9')
                    p++;
            } else {
                return unexpected(d, line, p, end, "expected digit after '-'");
            }
            size_t int_digits = (size_t)(p - digits);
            int is_int = 1;
            if (p < end && *p == '.') {
                p++;
                if (p == end || *p < '0' || *p > '9')
                    return unexpected(d, line, p, end, "expected digit after '.' in number");
                while (p < end && *p >= '0' && *p <= '9')
                    p++;
                is_int = 0;
            }
            if (p < end && (*p == 'e' || *p == 'E')) {
                p++;
                if (p < end && (*p == '+' || *p == '-'))
                    p++;
                if (p == end || *p < '0' || *p > '9')
                    return unexpected(d, line, p, end, "expected digit in exponent");
                while (p < end && *p >= '0' && *p <= '9')
                    p++;
                is_int = 0;
            }
            if (is_int && int_digits > JSON_MAX_INT_DIGITS)
                return json_fail(d, JSON_ERR_NUMBER, line, start,
                                 "integer longer than %d digits (python's int limit)", JSON_MAX_INT_DIGITS);
            goto after_value;
        }
        default:
            return unexpected(d, line, p, end, "expected value");
        }
    }

key:  /* inside an object, p at the opening quote of a key */
    if (p == end || *p != '"')
        return unexpected(d, line, p, end, "expected object key in double quotes");
    {
        size_t n;
        p++;
        if ((rc = scan_string(d, &s, &p, end, &n)) < 0)
            return rc;
        if (depth == 1) {
            cur = -1;
            for (size_t k = 0; k < nkeys; k++) {
                if (strlen(keys[k]) == n && memcmp(keys[k], d->buf + d->buf_len, n) == 0) {
                    cur = (long)k;
                    break;
                }
            }
        }
        SKIP_WS();
        if (p == end || *p != ':')
            return unexpected(d, line, p, end, "expected ':' after object key");
        p++;
        SKIP_WS();
        goto value;
    }

after_value:
    SKIP_WS();
    if (depth == 0)
        goto done;
    if (stack[depth - 1] == CONT_OBJECT) {
        if (p < end && *p == ',') {
            p++;
            SKIP_WS();
            goto key;
        }
        if (p < end && *p == '}') {
            p++;
            depth--;
            goto after_value;
        }
        return unexpected(d, line, p, end, "expected ',' or '}' after object member");
    }
    if (p < end && *p == ',') {
        p++;
        SKIP_WS();
        goto value;
    }
    if (p < end && *p == ']') {
        p++;
        if (depth == 2)
            arr = -1;
        depth--;
        goto after_value;
    }
    return unexpected(d, line, p, end, "expected ',' or ']' after array element");

done:
    if (p != end)
        return unexpected(d, line, p, end, "unexpected data after JSON value");
    for (size_t k = 0; k < nkeys; k++) {
        const json_value *v = &d->values[k];
        if ((v->kind == JSON_STRING || v->kind == JSON_STRING_ARRAY) && v->lone_col)
            return json_fail(d, JSON_ERR_SURROGATE, line, line + v->lone_col - 1, "lone surrogate \\u%04x",
                             (unsigned)v->lone_cp);
    }
    return 0;
}

void json_doc_init(json_doc *d)
{
    memset(d, 0, sizeof *d);
}

void json_doc_release(json_doc *d)
{
    if (d == NULL)
        return;
    free(d->buf);
    free(d->spans);
    free(d->values);
    json_doc_init(d);
}

int json_doc_kind(const json_doc *d, size_t k)
{
    return k < d->nvalues ? d->values[k].kind : JSON_MISSING;
}

size_t json_doc_count(const json_doc *d, size_t k)
{
    if (k >= d->nvalues)
        return 0;
    const json_value *v = &d->values[k];
    return (v->kind == JSON_STRING || v->kind == JSON_STRING_ARRAY) ? v->count : 0;
}

const char *json_doc_string(const json_doc *d, size_t k, size_t j, size_t *len)
{
    if (j >= json_doc_count(d, k)) {
        *len = 0;
        return NULL;
    }
    const json_span *sp = &d->spans[d->values[k].first + j];
    *len = sp->len;
    return d->buf + sp->off;
}

const char *json_strerror(int code)
{
    switch (code) {
    case JSON_OK:             return "no error";
    case JSON_ERR_SYNTAX:     return "invalid JSON";
    case JSON_ERR_UTF8:       return "invalid UTF-8";
    case JSON_ERR_SURROGATE:  return "lone surrogate in extracted string";
    case JSON_ERR_DEPTH:      return "JSON nested too deeply";
    case JSON_ERR_NOT_OBJECT: return "top-level value is not an object";
    case JSON_ERR_NUMBER:     return "integer too long";
    case JSON_ERR_NOMEM:      return "out of memory";
    case JSON_ERR_ARG:        return "invalid argument";
    default:                  return "unknown error";
    }
}
