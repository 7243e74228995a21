/*
 * hfjson.c - the strict JSON scanner of hfjson.h.  Values are validated as
 * they are stepped over by a recursive descent bounded at 64 levels; numbers
 * follow RFC 8259's grammar and are converted with strtod on a bounded copy.
 * It keeps nothing, allocates nothing and never reads past the given span.
 */
#include "hfjson.h"

#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A string starting at p (the opening quote); *q after the closing quote. */
static int scan_string(const char *p, const char *end, const char **q)
{
    if (p >= end || *p != '"') return -1;
    p++;
    while (p < end) {
        unsigned char c = (unsigned char)*p;
        if (c == '"') { *q = p + 1; return 0; }
        if (c < 0x20) return -1;
        if (c == '\\') {
            if (++p >= end) return -1;
            switch (*p) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't': p++; break;
            case 'u':
                if (end - p < 5) return -1;
                for (int i = 1; i <= 4; i++) if (hexval(p[i]) < 0) return -1;
                p += 5;
                break;
            default: return -1;
            }
            continue;
        }
        p++;
    }
    return -1;
}

static int scan_number(const char *p, const char *end, const char **q, double *num)
{
    const char *s = p;
    if (p < end && *p == '-') p++;
    if (p >= end) return -1;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') while (p < end && *p >= '0' && *p <= '9') p++;
    else return -1;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || *p < '0' || *p > '9') return -1;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return -1;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    char buf[64];
    size_t n = (size_t)(p - s);
    if (n >= sizeof buf) {
        /* a long literal: its value is not needed exactly (shapes and offsets are short) */
        *num = *s == '-' ? -1e308 : 1e308;
    } else {
        memcpy(buf, s, n);
        buf[n] = 0;
        *num = strtod(buf, NULL);
    }
    *q = p;
    return 0;
}

static int scan_value(const char *p, const char *end, int depth, hj_value *v, const char **q);

/* An object or array at p; the members are checked recursively. */
static int scan_container(const char *p, const char *end, int depth, const char **q)
{
    if (depth >= MAX_DEPTH) return -1;
    char close = *p == '{' ? '}' : ']';
    int obj = close == '}';
    p = skip_ws(p + 1, end);
    if (p < end && *p == close) { *q = p + 1; return 0; }
    for (;;) {
        hj_value v;
        if (obj) {
            if (scan_string(p, end, &p) != 0) return -1;
            p = skip_ws(p, end);
            if (p >= end || *p != ':') return -1;
            p = skip_ws(p + 1, end);
        }
        if (scan_value(p, end, depth + 1, &v, &p) != 0) return -1;
        p = skip_ws(p, end);
        if (p >= end) return -1;
        if (*p == close) { *q = p + 1; return 0; }
        if (*p != ',') return -1;
        p = skip_ws(p + 1, end);
    }
}

static int scan_value(const char *p, const char *end, int depth, hj_value *v, const char **q)
{
    memset(v, 0, sizeof *v);
    if (p >= end) return -1;
    v->start = p;
    switch (*p) {
    case '"':
        if (scan_string(p, end, q) != 0) return -1;
        v->type = HJ_STRING;
        v->start = p + 1;
        v->len = (size_t)(*q - p) - 2;
        return 0;
    case '{': case '[':
        v->type = *p == '{' ? HJ_OBJECT : HJ_ARRAY;
        if (scan_container(p, end, depth, q) != 0) return -1;
        v->len = (size_t)(*q - p);
        return 0;
    case 't': case 'f': case 'n': {
        const char *word = *p == 't' ? "true" : *p == 'f' ? "false" : "null";
        size_t n = strlen(word);
        if ((size_t)(end - p) < n || memcmp(p, word, n) != 0) return -1;
        v->type = *p == 'n' ? HJ_NULL : HJ_BOOL;
        v->boolean = *p == 't';
        v->len = n;
        *q = p + n;
        return 0;
    }
    default:
        if (scan_number(p, end, q, &v->num) != 0) return -1;
        v->type = HJ_NUMBER;
        v->len = (size_t)(*q - p);
        return 0;
    }
}

static int begin(hj_iter *it, const char *s, size_t n, char open)
{
    const char *end = s + n, *p = skip_ws(s, end);
    it->end = end;
    it->first = 1;
    it->close = open == '{' ? '}' : ']';
    if (p >= end || *p != open) { it->p = end; return -1; }
    it->p = p + 1;
    return 0;
}

int hj_object_begin(hj_iter *it, const char *s, size_t n) { return begin(it, s, n, '{'); }
int hj_array_begin(hj_iter *it, const char *s, size_t n) { return begin(it, s, n, '['); }

/* Past the separator before the next item: 1 an item follows, 0 the walk
 * ended, -1 malformed. */
static int step(hj_iter *it)
{
    const char *p = skip_ws(it->p, it->end);
    if (p >= it->end) return -1;
    if (*p == it->close) { it->p = p + 1; it->close = 0; return 0; }
    if (!it->first) {
        if (*p != ',') return -1;
        p = skip_ws(p + 1, it->end);
    }
    it->first = 0;
    it->p = p;
    return 1;
}

int hj_object_next(hj_iter *it, char *key, size_t cap, hj_value *v)
{
    if (!it->close) return 0;
    int s = step(it);
    if (s <= 0) return s;
    const char *q;
    hj_value k;
    if (scan_value(it->p, it->end, 1, &k, &q) != 0 || k.type != HJ_STRING) return -1;
    if (hj_string(&k, key, cap) < 0) return -1;
    q = skip_ws(q, it->end);
    if (q >= it->end || *q != ':') return -1;
    q = skip_ws(q + 1, it->end);
    if (scan_value(q, it->end, 1, v, &q) != 0) return -1;
    it->p = q;
    return 1;
}

int hj_array_next(hj_iter *it, hj_value *v)
{
    if (!it->close) return 0;
    int s = step(it);
    if (s <= 0) return s;
    const char *q;
    if (scan_value(it->p, it->end, 1, v, &q) != 0) return -1;
    it->p = q;
    return 1;
}

int hj_at_end(const hj_iter *it)
{
    return !it->close && skip_ws(it->p, it->end) == it->end;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xc0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

static unsigned hex4(const char *p)
{
    return (unsigned)(hexval(p[0]) << 12 | hexval(p[1]) << 8 | hexval(p[2]) << 4 | hexval(p[3]));
}

long hj_string(const hj_value *v, char *out, size_t cap)
{
    if (v->type != HJ_STRING || cap == 0) return -1;
    const char *p = v->start, *end = v->start + v->len;
    size_t n = 0;
    while (p < end) {
        char tmp[4];
        size_t k = 1;
        if (*p != '\\') {
            tmp[0] = *p++;
        } else {
            p++;   /* scan_string guaranteed a valid escape */
            switch (*p) {
            case 'b': tmp[0] = '\b'; break;
            case 'f': tmp[0] = '\f'; break;
            case 'n': tmp[0] = '\n'; break;
            case 'r': tmp[0] = '\r'; break;
            case 't': tmp[0] = '\t'; break;
            case 'u': {
                unsigned cp = hex4(p + 1);
                p += 4;
                if (cp >= 0xdc00 && cp < 0xe000) return -1;
                if (cp >= 0xd800 && cp < 0xdc00) {
                    if (end - p < 7 || p[1] != '\\' || p[2] != 'u') return -1;
                    unsigned lo = hex4(p + 3);
                    if (lo < 0xdc00 || lo >= 0xe000) return -1;
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                    p += 6;
                }
                if (cp == 0) return -1;
                k = put_utf8(tmp, cp);
                break;
            }
            default: tmp[0] = *p; break;
            }
            p++;
        }
        if (tmp[0] == 0 || n + k >= cap) return -1;
        memcpy(out + n, tmp, k);
        n += k;
    }
    out[n] = 0;
    return (long)n;
}

long hj_quote(char *out, size_t cap, const char *s)
{
    size_t n = 0;
#define PUTC(ch) do { if (n + 1 >= cap) return -1; out[n++] = (ch); } while (0)
    PUTC('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { PUTC('\\'); PUTC((char)c); }
        else if (c < 0x20) {
            static const char hex[] = "0123456789abcdef";
            PUTC('\\'); PUTC('u'); PUTC('0'); PUTC('0'); PUTC(hex[c >> 4]); PUTC(hex[c & 15]);
        } else PUTC((char)c);
    }
    PUTC('"');
#undef PUTC
    out[n] = 0;
    return (long)n;
}
