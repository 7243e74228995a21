/*
 * jsontree.c - the strict JSON tree reader of jsontree.h.
 *
 * One recursive-descent pass.  Values being parsed sit on a stack (a growable
 * array of nodes); when a container closes, its children are copied from the
 * stack into an arena whose blocks never move, so every `kids` pointer stays
 * valid.  Decoded strings go to the same arena.  Recursion is bounded by
 * the options' depth (JT_MAX_DEPTH by default).
 *
 * It does not keep the input text, hash keys (jt_get is a linear scan from the
 * end: the files it serves have small objects, except vocabularies and
 * safetensors headers, which their readers walk in order), or accept
 * anything RFC 8259 does not unless the options say so.
 */
#include "jsontree.h"
#include "utf8.h"
#include "readfile.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JT_MAX_DEPTH 512
#define ARENA_BLOCK ((size_t)1 << 20)

struct block {
    struct block *next;
    size_t used, cap;
    max_align_t data[];
};

struct jt_doc {
    struct block *blocks;
    jt_node root;
};

struct parser {
    const unsigned char *buf, *p, *end;
    jt_doc *doc;
    jt_node *stack;
    size_t nstack, stackcap;
    jt_err *e;
    int depth, max_depth, python;
    uint32_t line;                  /* line of p, and where that line starts */
    const unsigned char *line_start;
};

/* The place is counted only here, on failure, so parsing never tracks columns. */
static int fail(struct parser *x, const unsigned char *at, const char *fmt, ...)
{
    uint32_t line = 1, col = 1;
    for (const unsigned char *q = x->buf; q < at && q < x->end; q++) {
        if (*q == '\n') {
            line++;
            col = 1;
        } else if ((*q & 0xC0) != 0x80) {
            col++;
        }
    }
    x->e->line = line;
    x->e->col = col;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->e->why, sizeof x->e->why, fmt, ap);
    va_end(ap);
    return JT_ERR_SYNTAX;
}

static int nomem(struct parser *x)
{
    x->e->line = x->e->col = 0;
    snprintf(x->e->why, sizeof x->e->why, "out of memory");
    return JT_ERR_NOMEM;
}

static void *arena_alloc(jt_doc *d, size_t n)
{
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    if (n == 0)
        n = sizeof(max_align_t);
    struct block *b = d->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > ARENA_BLOCK / 2 ? n : ARENA_BLOCK;
        b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->cap = cap;
        b->used = 0;
        if (cap == ARENA_BLOCK || !d->blocks) {
            b->next = d->blocks;
            d->blocks = b;
        } else {
            /* a big dedicated block goes behind the current one, which keeps filling */
            b->next = d->blocks->next;
            d->blocks->next = b;
        }
    }
    void *r = (char *)b->data + b->used;
    b->used += n;
    return r;
}

static void ws(struct parser *x)
{
    while (x->p < x->end && (*x->p == ' ' || *x->p == '\t' || *x->p == '\n' || *x->p == '\r')) {
        if (*x->p == '\n') {
            x->line++;
            x->line_start = x->p + 1;
        }
        x->p++;
    }
}

static int hex4(const unsigned char *p, const unsigned char *end, unsigned *v)
{
    if (end - p < 4)
        return 0;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = p[i], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return 0;
        r = r << 4 | d;
    }
    *v = r;
    return 1;
}

/* A string at x->p (on the quote): decoded into the arena. */
static int parse_string(struct parser *x, const char **out, size_t *outlen)
{
    const unsigned char *start = x->p++;
    /* the decoded form is never longer than the source */
    const unsigned char *q = x->p;
    int escapes = 0;
    while (q < x->end && *q != '"') {
        if (*q == '\\') {
            escapes = 1;
            q++;
        }
        q++;
    }
    if (q >= x->end)
        return fail(x, start, "unterminated string");
    size_t cap = (size_t)(q - x->p) + 1;
    unsigned char *o = arena_alloc(x->doc, cap), *w = o;
    if (!o)
        return nomem(x);
    uint32_t cp8;   /* utf8_decode's code point: only the length is used here */
    if (!escapes) {
        /* fast path: validate and copy */
        while (x->p < q) {
            if (*x->p < 0x20)
                return fail(x, x->p, "control character in a string");
            size_t l = utf8_decode(x->p, x->end, &cp8);
            if (!l)
                return fail(x, x->p, "invalid UTF-8 in a string");
            memcpy(w, x->p, l);
            w += l;
            x->p += l;
        }
    } else {
        while (*x->p != '"') {
            const unsigned char *at = x->p;
            unsigned c = *at;
            if (c == '\\') {
                unsigned e = at[1];
                x->p += 2;
                unsigned cp;
                switch (e) {
                case '"': *w++ = '"'; continue;
                case '\\': *w++ = '\\'; continue;
                case '/': *w++ = '/'; continue;
                case 'b': *w++ = '\b'; continue;
                case 'f': *w++ = '\f'; continue;
                case 'n': *w++ = '\n'; continue;
                case 'r': *w++ = '\r'; continue;
                case 't': *w++ = '\t'; continue;
                case 'u':
                    if (!hex4(x->p, x->end, &cp))
                        return fail(x, at, "bad \\u escape");
                    x->p += 4;
                    if (cp >= 0xDC00 && cp <= 0xDFFF)
                        return fail(x, at, "lone trailing surrogate \\u%04X", cp);
                    if (cp >= 0xD800 && cp <= 0xDBFF) {
                        unsigned lo;
                        if (x->end - x->p < 6 || x->p[0] != '\\' || x->p[1] != 'u' ||
                            !hex4(x->p + 2, x->end, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                            return fail(x, at, "lone leading surrogate \\u%04X", cp);
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        x->p += 6;
                    }
                    w += utf8_put(w, cp);
                    continue;
                default:
                    return fail(x, at, "invalid escape '\\%c'", e >= 0x20 && e < 0x7F ? (int)e : '?');
                }
            }
            if (c < 0x20)
                return fail(x, at, "control character in a string");
            size_t l = utf8_decode(at, x->end, &cp8);
            if (!l)
                return fail(x, at, "invalid UTF-8 in a string");
            memcpy(w, at, l);
            w += l;
            x->p += l;
        }
    }
    x->p++; /* closing quote */
    *w = 0;
    *out = (const char *)o;
    *outlen = (size_t)(w - o);
    return JT_OK;
}

static int parse_number(struct parser *x, jt_node *n)
{
    const unsigned char *s = x->p, *q = x->p;
    if (q < x->end && *q == '-')
        q++;
    if (q >= x->end || *q < '0' || *q > '9')
        return fail(x, s, "invalid value");
    if (*q == '0') {
        q++;
    } else {
        while (q < x->end && *q >= '0' && *q <= '9')
            q++;
    }
    int integer = 1;
    if (q < x->end && *q == '.') {
        integer = 0;
        q++;
        if (q >= x->end || *q < '0' || *q > '9')
            return fail(x, s, "invalid number");
        while (q < x->end && *q >= '0' && *q <= '9')
            q++;
    }
    if (q < x->end && (*q == 'e' || *q == 'E')) {
        integer = 0;
        q++;
        if (q < x->end && (*q == '+' || *q == '-'))
            q++;
        if (q >= x->end || *q < '0' || *q > '9')
            return fail(x, s, "invalid number");
        while (q < x->end && *q >= '0' && *q <= '9')
            q++;
    }
    /* strtod needs a terminated copy; a long literal (0.000...1) gets its own */
    char tmp[64], *lit = tmp;
    size_t len = (size_t)(q - s);
    if (len >= sizeof tmp && !(lit = malloc(len + 1)))
        return nomem(x);
    memcpy(lit, s, len);
    lit[len] = 0;
    n->type = JT_NUMBER;
    n->num = strtod(lit, NULL);
    if (integer) {
        errno = 0;
        long long v = strtoll(lit, NULL, 10);
        n->is_int = errno == 0;
        n->i = v;
    }
    if (lit != tmp)
        free(lit);
    x->p = q;
    return JT_OK;
}

static int literal(struct parser *x, const char *word, int type, jt_node *n)
{
    size_t l = strlen(word);
    if ((size_t)(x->end - x->p) < l || memcmp(x->p, word, l) != 0)
        return fail(x, x->p, "invalid value");
    x->p += l;
    n->type = type;
    return JT_OK;
}

/* Python's json reads NaN, Infinity and -Infinity (and writes them). */
static int nonfinite(struct parser *x, jt_node *n)
{
    static const struct { const char *word; double v; } w[] = {
        { "NaN", NAN }, { "Infinity", INFINITY }, { "-Infinity", -INFINITY } };
    for (size_t k = 0; k < sizeof w / sizeof w[0]; k++) {
        size_t l = strlen(w[k].word);
        if ((size_t)(x->end - x->p) >= l && memcmp(x->p, w[k].word, l) == 0) {
            x->p += l;
            n->type = JT_NUMBER;
            n->num = w[k].v;
            return JT_OK;
        }
    }
    return fail(x, x->p, "invalid value");
}

static int push(struct parser *x, const jt_node *n)
{
    if (x->nstack == x->stackcap) {
        size_t c = x->stackcap ? x->stackcap * 2 : 256;
        jt_node *s = realloc(x->stack, c * sizeof *s);
        if (!s)
            return nomem(x);
        x->stack = s;
        x->stackcap = c;
    }
    x->stack[x->nstack++] = *n;
    return JT_OK;
}

static int parse_value(struct parser *x, jt_node *n);

/* Moves the children stack[base..] into the arena as n's kids. */
static int close_container(struct parser *x, jt_node *n, size_t base)
{
    size_t k = x->nstack - base;
    n->len = k;
    if (k) {
        jt_node *kids = arena_alloc(x->doc, k * sizeof *kids);
        if (!kids)
            return nomem(x);
        memcpy(kids, x->stack + base, k * sizeof *kids);
        n->kids = kids;
    }
    x->nstack = base;
    return JT_OK;
}

static int parse_container(struct parser *x, jt_node *n, int object)
{
    const unsigned char *open = x->p++;
    if (++x->depth > x->max_depth)
        return fail(x, open, "nested deeper than %d levels", x->max_depth);
    n->type = object ? JT_OBJECT : JT_ARRAY;
    size_t base = x->nstack;
    ws(x);
    if (x->p < x->end && *x->p == (object ? '}' : ']')) {
        x->p++;
    } else {
        for (;;) {
            jt_node kid;
            memset(&kid, 0, sizeof kid);
            const char *key = NULL;
            size_t keylen = 0;
            if (object) {
                if (x->p >= x->end || *x->p != '"')
                    return fail(x, x->p, x->p >= x->end ? "unexpected end of input" : "expected a string key");
                int rc = parse_string(x, &key, &keylen);
                if (rc)
                    return rc;
                ws(x);
                if (x->p >= x->end || *x->p != ':')
                    return fail(x, x->p, "expected ':'");
                x->p++;
                ws(x);
            }
            int rc = parse_value(x, &kid);
            if (rc)
                return rc;
            kid.key = key;
            kid.keylen = keylen;
            rc = push(x, &kid);
            if (rc)
                return rc;
            ws(x);
            if (x->p < x->end && *x->p == ',') {
                x->p++;
                ws(x);
                continue;
            }
            if (x->p < x->end && *x->p == (object ? '}' : ']')) {
                x->p++;
                break;
            }
            return fail(x, x->p, x->p >= x->end ? "unexpected end of input" :
                        object ? "expected ',' or '}'" : "expected ',' or ']'");
        }
    }
    x->depth--;
    return close_container(x, n, base);
}

static int parse_value(struct parser *x, jt_node *n)
{
    if (x->p >= x->end)
        return fail(x, x->p, "unexpected end of input");
    n->line = x->line;
    n->col = (uint32_t)(x->p - x->line_start) + 1;
    switch (*x->p) {
    case '{': return parse_container(x, n, 1);
    case '[': return parse_container(x, n, 0);
    case '"': n->type = JT_STRING; return parse_string(x, &n->str, &n->len);
    case 't': return literal(x, "true", JT_TRUE, n);
    case 'f': return literal(x, "false", JT_FALSE, n);
    case 'n': return literal(x, "null", JT_NULL, n);
    case 'N': case 'I': return x->python ? nonfinite(x, n) : fail(x, x->p, "invalid value");
    case '-':
        if (x->python && x->end - x->p > 1 && x->p[1] == 'I')
            return nonfinite(x, n);
        return parse_number(x, n);
    default: return parse_number(x, n);
    }
}

int jt_parse_opts(jt_doc **out, const char *text, size_t n, const jt_options *opt, jt_err *e)
{
    *out = NULL;
    jt_doc *d = calloc(1, sizeof *d);
    struct parser x = { (const unsigned char *)text, (const unsigned char *)text,
                        (const unsigned char *)text + n, d, NULL, 0, 0, e, 0,
                        opt && opt->max_depth > 0 ? opt->max_depth : JT_MAX_DEPTH, opt && opt->python, 1,
                        (const unsigned char *)text };
    if (!d)
        return nomem(&x);
    ws(&x);
    int rc = parse_value(&x, &d->root);
    if (rc == JT_OK) {
        ws(&x);
        if (x.p != x.end)
            rc = fail(&x, x.p, "trailing characters after the JSON value");
    }
    free(x.stack);
    if (rc != JT_OK) {
        jt_free(d);
        return rc;
    }
    *out = d;
    return JT_OK;
}

int jt_parse(jt_doc **out, const char *name, const char *text, size_t n, char *err, size_t errlen)
{
    jt_err e;
    int rc = jt_parse_opts(out, text, n, NULL, &e);
    if (err && errlen) {
        if (rc == JT_ERR_NOMEM)
            snprintf(err, errlen, "out of memory reading '%s'", name);
        else if (rc)
            snprintf(err, errlen, "'%s': line %u, column %u: %s", name, (unsigned)e.line, (unsigned)e.col, e.why);
        else
            err[0] = 0;
    }
    return rc;
}

int jt_parse_file(jt_doc **out, const char *path, char *err, size_t errlen)
{
    *out = NULL;
    unsigned char *buf;
    size_t len;
    switch (read_whole_file(path, &buf, &len)) {
    case READFILE_OPEN:
        if (err && errlen) snprintf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
        return JT_ERR_IO;
    case READFILE_NOMEM:
        if (err && errlen) snprintf(err, errlen, "out of memory reading '%s'", path);
        return JT_ERR_NOMEM;
    case READFILE_READ:
        if (err && errlen) snprintf(err, errlen, "cannot read '%s'", path);
        return JT_ERR_IO;
    }
    int rc = jt_parse(out, path, (const char *)buf, len, err, errlen);
    free(buf);
    return rc;
}

void jt_free(jt_doc *d)
{
    if (!d)
        return;
    struct block *b = d->blocks;
    while (b) {
        struct block *n = b->next;
        free(b);
        b = n;
    }
    free(d);
}

const jt_node *jt_root(const jt_doc *d)
{
    return &d->root;
}

const jt_node *jt_get(const jt_node *obj, const char *key)
{
    if (!obj || obj->type != JT_OBJECT)
        return NULL;
    size_t kl = strlen(key);
    for (size_t i = obj->len; i-- > 0;) {
        const jt_node *k = &obj->kids[i];
        if (k->keylen == kl && memcmp(k->key, key, kl) == 0)
            return k;
    }
    return NULL;
}

static int cmp_key(const void *a, const void *b)
{
    const jt_node *x = *(const jt_node *const *)a, *y = *(const jt_node *const *)b;
    size_t l = x->keylen < y->keylen ? x->keylen : y->keylen;
    int c = memcmp(x->key, y->key, l);
    if (c)
        return c;
    if (x->keylen != y->keylen)
        return x->keylen < y->keylen ? -1 : 1;
    return x < y ? -1 : x > y; /* file order among equals */
}

int jt_has_duplicate_key(const jt_node *obj, const jt_node **dup)
{
    if (!obj || obj->type != JT_OBJECT || obj->len < 2)
        return 0;
    const jt_node **idx = malloc(obj->len * sizeof *idx);
    if (!idx)
        return 0;
    for (size_t i = 0; i < obj->len; i++)
        idx[i] = &obj->kids[i];
    qsort(idx, obj->len, sizeof *idx, cmp_key);
    int found = 0;
    for (size_t i = 1; i < obj->len && !found; i++) {
        if (idx[i]->keylen == idx[i - 1]->keylen && memcmp(idx[i]->key, idx[i - 1]->key, idx[i]->keylen) == 0) {
            found = 1;
            if (dup)
                *dup = idx[i];
        }
    }
    free(idx);
    return found;
}

const char *jt_str(const jt_node *n)
{
    return n && n->type == JT_STRING && strlen(n->str) == n->len ? n->str : NULL;
}

long jt_quote(char *out, size_t cap, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;
#define PUTC(ch) do { if (n + 1 >= cap) return -1; out[n++] = (ch); } while (0)
    PUTC('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            PUTC('\\');
            PUTC((char)c);
        } else if (c < 0x20) {
            PUTC('\\'); PUTC('u'); PUTC('0'); PUTC('0'); PUTC(hex[c >> 4]); PUTC(hex[c & 15]);
        } else {
            PUTC((char)c);
        }
    }
    PUTC('"');
#undef PUTC
    out[n] = 0;
    return (long)n;
}

const char *jt_type_name(int type)
{
    switch (type) {
    case JT_NULL: return "null";
    case JT_FALSE: case JT_TRUE: return "a boolean";
    case JT_NUMBER: return "a number";
    case JT_STRING: return "a string";
    case JT_ARRAY: return "an array";
    case JT_OBJECT: return "an object";
    default: return "a value";
    }
}
