/*
 * pickle.c - the restricted pickle reader (pickle.h): a stack machine over
 * the opcodes pickle.h lists, building nodes instead of Python objects.
 * Nodes live in blocks freed together with the strings (recorded in
 * allocs) and the containers' item arrays (found through the nodes).
 * The writer (pk_write) and the builders of trees to write follow the
 * reader, below it.
 */
#include "pickle.h"

#include "grow.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pk_doc {
    pk_node **blocks;          /* node blocks of BLOCK nodes each */
    size_t nblocks, used;      /* nodes used in the last block */
    void **allocs;             /* strings */
    size_t nallocs, callocs;
    const pk_node *root;
    int failed;                /* a builder failed (pk_doc_failed) */
};

#define BLOCK 1024

/* The parser's state; err/errlen/name for messages, pos for offsets. */
typedef struct pk_parser {
    pk_doc *d;
    const unsigned char *buf;
    size_t size, pos, op_at;
    const char *name;
    char *err;
    size_t errlen;
    pk_node **stack;           /* the value stack; NULL entries are MARKs */
    size_t sp, scap;
    size_t marks;              /* MARKs on the stack */
    pk_node **memo;
    size_t nmemo, cmemo;
    int nomem;                 /* an allocation failed (else any failure is the input's) */
} pk_parser;

#define FAIL(code, ...) do { pk_fail(P, __VA_ARGS__); if ((code) == PK_ERR_NOMEM) P->nomem = 1; return (code); } while (0)

static void pk_fail(pk_parser *P, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void pk_fail(pk_parser *P, const char *fmt, ...)
{
    if (!P->err || !P->errlen) return;
    int n = snprintf(P->err, P->errlen, "'%s': offset %zu: ", P->name, P->op_at);
    if (n < 0 || (size_t)n >= P->errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(P->err + n, P->errlen - (size_t)n, fmt, ap);
    va_end(ap);
}

const char *pk_strerror(int code)
{
    switch (code) {
    case PK_OK: return "success";
    case PK_ERR_FORMAT: return "malformed or unsupported pickle";
    case PK_ERR_NOMEM: return "out of memory";
    case PK_ERR_ARG: return "a tree the writer cannot pickle";
    default: return "unknown error";
    }
}

static const char *const allowed[] = {
    "torch.distributed.checkpoint.metadata.Metadata",
    "torch.distributed.checkpoint.metadata.TensorStorageMetadata",
    "torch.distributed.checkpoint.metadata.BytesStorageMetadata",
    "torch.distributed.checkpoint.metadata.ChunkStorageMetadata",
    "torch.distributed.checkpoint.metadata.TensorProperties",
    "torch.distributed.checkpoint.metadata.MetadataIndex",
    "torch.distributed.checkpoint.metadata.StorageMeta",
    "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING",
    "torch.distributed.checkpoint.planner.SavePlan",
    "torch.distributed.checkpoint.planner.WriteItem",
    "torch.distributed.checkpoint.planner.WriteItemType",
    "torch.distributed.checkpoint.planner.TensorWriteData",
    "torch.distributed.checkpoint.filesystem._StorageInfo",
    "torch.Size", "torch.float32", "torch.bfloat16", "torch.float16",
    "torch.serialization._get_layout",
    "collections.OrderedDict",
    "argparse.Namespace",
    /* enums a Megatron args Namespace holds (megatron/training/arguments.py at d98e8a64:
       --attention-backend, --cuda-graph-modules, --inference-cuda-graph-scope, --exit-signal);
       each is REDUCE(cls, (value,)), kept as data like everything else */
    "megatron.core.transformer.enums.AttnBackend",
    "megatron.core.transformer.enums.CudaGraphModule",
    "megatron.core.transformer.enums.InferenceCudaGraphScope",
    "signal.Signals",
};

static int qualname_allowed(const char *q)
{
    for (size_t i = 0; i < sizeof allowed / sizeof *allowed; i++)
        if (!strcmp(q, allowed[i])) return 1;
    return 0;
}

int pk_global_allowed(const char *module, const char *name)
{
    char q[256];
    int n = snprintf(q, sizeof q, "%s.%s", module, name);
    return n > 0 && (size_t)n < sizeof q && qualname_allowed(q);
}

void pk_free(pk_doc *d)
{
    if (!d) return;
    for (size_t i = 0; i < d->nblocks; i++) {
        size_t used = i + 1 == d->nblocks ? d->used : BLOCK;
        for (size_t j = 0; j < used; j++) free(d->blocks[i][j].items);
        free(d->blocks[i]);
    }
    for (size_t i = 0; i < d->nallocs; i++) free(d->allocs[i]);
    free(d->blocks);
    free(d->allocs);
    free(d);
}

const pk_node *pk_root(const pk_doc *d) { return d->root; }

static int track(pk_doc *d, void *p)
{
    if (mds_grow((void **)&d->allocs, &d->callocs, d->nallocs + 1, sizeof *d->allocs)) return -1;
    d->allocs[d->nallocs++] = p;
    return 0;
}

static pk_node *new_node(pk_doc *d, int kind)
{
    if (!d->nblocks || d->used == BLOCK) {
        pk_node **b = realloc(d->blocks, (d->nblocks + 1) * sizeof *b);
        if (!b) return NULL;
        d->blocks = b;
        if (!(b[d->nblocks] = calloc(BLOCK, sizeof **b))) return NULL;
        d->nblocks++;
        d->used = 0;
    }
    pk_node *n = &d->blocks[d->nblocks - 1][d->used++];
    n->kind = kind;
    return n;
}

/* The capacity of an item array of n items: the next power of two, so that
 * APPENDs one by one cost amortized O(1) without a capacity field. */
static size_t cap_of(size_t n)
{
    size_t c = 1;
    while (c < n) c *= 2;
    return n ? c : 0;
}

/* Append k items to a container's array. */
static int add_items(pk_node *c, pk_node *const *items, size_t k)
{
    if (!k) return 0;
    pk_node **a = c->items;
    if (c->n + k > cap_of(c->n)) {
        if (!(a = realloc(c->items, cap_of(c->n + k) * sizeof *a))) return -1;
        c->items = a;
    }
    memcpy(a + c->n, items, k * sizeof *a);
    c->n += k;
    return 0;
}

static int push(pk_parser *P, pk_node *n)
{
    if (P->sp >= P->size + 16) FAIL(PK_ERR_FORMAT, "stack deeper than the input is long");
    if (mds_grow((void **)&P->stack, &P->scap, P->sp + 1, sizeof *P->stack)) FAIL(PK_ERR_NOMEM, "out of memory");
    P->stack[P->sp++] = n;
    return 0;
}

static int push_new(pk_parser *P, int kind, pk_node **out)
{
    pk_node *n = new_node(P->d, kind);
    if (!n) FAIL(PK_ERR_NOMEM, "out of memory");
    *out = n;
    return push(P, n);
}

static int pop(pk_parser *P, pk_node **out)
{
    if (!P->sp || !P->stack[P->sp - 1]) FAIL(PK_ERR_FORMAT, "stack underflow (or a MARK where a value was expected)");
    *out = P->stack[--P->sp];
    return 0;
}

/* The items above the topmost MARK: *first their index; the MARK is popped
 * by the caller setting sp = first - 1. */
static int to_mark(pk_parser *P, size_t *first)
{
    if (!P->marks) FAIL(PK_ERR_FORMAT, "no MARK on the stack");
    size_t i = P->sp;
    while (P->stack[i - 1]) i--;
    *first = i;
    return 0;
}

static int need(pk_parser *P, size_t n)
{
    if (P->size - P->pos < n) FAIL(PK_ERR_FORMAT, "truncated (%zu bytes needed, %zu left)", n, P->size - P->pos);
    return 0;
}

static uint64_t le(const unsigned char *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static int push_int(pk_parser *P, int64_t v)
{
    pk_node *n;
    if (push_new(P, PK_INT, &n)) return -1;
    n->i = v;
    return 0;
}

/* A string or bytes of len bytes at pos, copied with a NUL. */
static int push_str(pk_parser *P, int kind, uint64_t len)
{
    if (len > P->size - P->pos) FAIL(PK_ERR_FORMAT, "a string of %llu bytes past the end of the input", (unsigned long long)len);
    char *s = malloc((size_t)len + 1);
    if (!s || track(P->d, s)) { free(s); FAIL(PK_ERR_NOMEM, "out of memory"); }
    memcpy(s, P->buf + P->pos, (size_t)len);
    s[len] = 0;
    P->pos += (size_t)len;
    pk_node *n;
    if (push_new(P, kind, &n)) return -1;
    n->s = s;
    n->len = (size_t)len;
    return 0;
}

/* mod, nm: STACK_GLOBAL's string nodes (NULL under GLOBAL), kept so that a
 * writer shares them as this pickle did. */
static int push_global(pk_parser *P, const char *module, size_t mlen, const char *name, size_t nlen,
                       const pk_node *mod, const pk_node *nm)
{
    char q[256];
    if (mlen + nlen + 2 > sizeof q || memchr(module, 0, mlen) || memchr(name, 0, nlen))
        FAIL(PK_ERR_FORMAT, "global name too long");
    snprintf(q, sizeof q, "%.*s.%.*s", (int)mlen, module, (int)nlen, name);
    for (const char *c = q; *c; c++)          /* keeps the message below one printable line */
        if (*c < 0x20 || *c > 0x7E) FAIL(PK_ERR_FORMAT, "a global whose name is not printable ASCII");
    if (!qualname_allowed(q)) FAIL(PK_ERR_FORMAT, "global '%s' is not allowed", q);
    char *s = malloc(strlen(q) + 1);
    if (!s || track(P->d, s)) { free(s); FAIL(PK_ERR_NOMEM, "out of memory"); }
    strcpy(s, q);
    pk_node *g;
    if (push_new(P, PK_GLOBAL, &g)) return -1;
    g->s = s;
    g->len = strlen(s);
    g->cls = mod;
    g->args = nm;
    return 0;
}

static int memo_put(pk_parser *P, uint64_t idx)
{
    if (!P->sp || !P->stack[P->sp - 1]) FAIL(PK_ERR_FORMAT, "memoizing an empty stack or a MARK");
    if (idx > P->size) FAIL(PK_ERR_FORMAT, "memo index %llu beyond the input's size", (unsigned long long)idx);
    if (idx >= P->nmemo) {
        if (mds_grow((void **)&P->memo, &P->cmemo, (size_t)idx + 1, sizeof *P->memo)) FAIL(PK_ERR_NOMEM, "out of memory");
        memset(P->memo + P->nmemo, 0, ((size_t)idx + 1 - P->nmemo) * sizeof *P->memo);
        P->nmemo = (size_t)idx + 1;
    }
    P->memo[idx] = P->stack[P->sp - 1];
    return 0;
}

static int memo_get(pk_parser *P, uint64_t idx)
{
    if (idx >= P->nmemo || !P->memo[idx]) FAIL(PK_ERR_FORMAT, "memo entry %llu was never stored", (unsigned long long)idx);
    return push(P, P->memo[idx]);
}

/* TUPLE/TUPLE1-3: the top k values (k == SIZE_MAX: down to the MARK). */
static int make_tuple(pk_parser *P, size_t k)
{
    size_t first;
    if (k == SIZE_MAX) {
        if (to_mark(P, &first)) return -1;
    } else {
        if (P->sp < k) FAIL(PK_ERR_FORMAT, "stack underflow");
        first = P->sp - k;
        for (size_t i = first; i < P->sp; i++)
            if (!P->stack[i]) FAIL(PK_ERR_FORMAT, "a MARK inside a tuple");
    }
    pk_node *t = new_node(P->d, PK_TUPLE);
    if (!t || add_items(t, P->stack + first, P->sp - first)) FAIL(PK_ERR_NOMEM, "out of memory");
    P->sp = first;
    if (k == SIZE_MAX) { P->sp--; P->marks--; }
    return push(P, t);
}

/* SETITEM(S), APPEND(S): the values above the MARK (or the top one or two)
 * into the container below them. */
static int fill(pk_parser *P, int dict, int marked)
{
    size_t first;
    if (marked) {
        if (to_mark(P, &first)) return -1;
    } else {
        size_t k = dict ? 2 : 1;
        if (P->sp < k + 1) FAIL(PK_ERR_FORMAT, "stack underflow");
        first = P->sp - k;
        for (size_t i = first; i < P->sp; i++)
            if (!P->stack[i]) FAIL(PK_ERR_FORMAT, "a MARK where a value was expected");
    }
    size_t below = marked ? first - 1 : first;
    if (below == 0 || !P->stack[below - 1]) FAIL(PK_ERR_FORMAT, "no container below the items");
    pk_node *c = P->stack[below - 1];
    if (c->kind != (dict ? PK_DICT : PK_LIST)) FAIL(PK_ERR_FORMAT, "%s into something that is not a %s", dict ? "SETITEMS" : "APPENDS", dict ? "dict" : "list");
    if (dict && (P->sp - first) % 2) FAIL(PK_ERR_FORMAT, "SETITEMS with an odd number of values");
    if (add_items(c, P->stack + first, P->sp - first)) FAIL(PK_ERR_NOMEM, "out of memory");
    P->sp = below;
    if (marked) P->marks--;
    return 0;
}

/* REDUCE and NEWOBJ: callable, args -> an object node. */
static int make_object(pk_parser *P, int newobj)
{
    pk_node *args, *cls, *o;
    if (pop(P, &args) || pop(P, &cls)) return -1;
    if (cls->kind != PK_GLOBAL) FAIL(PK_ERR_FORMAT, "%s of something that is not a global", newobj ? "NEWOBJ" : "REDUCE");
    if (args->kind != PK_TUPLE) FAIL(PK_ERR_FORMAT, "%s of '%s' with arguments that are not a tuple", newobj ? "NEWOBJ" : "REDUCE", cls->s);
    if (push_new(P, PK_OBJECT, &o)) return -1;
    o->cls = cls;
    o->args = args;
    o->newobj = newobj;
    return 0;
}

static int build(pk_parser *P)
{
    pk_node *state, *o;
    if (pop(P, &state)) return -1;
    if (!P->sp || !(o = P->stack[P->sp - 1])) FAIL(PK_ERR_FORMAT, "BUILD without an object");
    if (o->kind != PK_OBJECT) FAIL(PK_ERR_FORMAT, "BUILD of something that is not an object");
    if (o->state) FAIL(PK_ERR_FORMAT, "BUILD of '%s' twice", o->cls->s);
    o->state = state;
    return 0;
}

static int step(pk_parser *P, int *done);

int pk_parse(const unsigned char *buf, size_t size, const char *name, pk_doc **out, char *err, size_t errlen)
{
    *out = NULL;
    if (err && errlen) err[0] = 0;
    pk_parser st = { .buf = buf, .size = size, .name = name, .err = err, .errlen = errlen }, *P = &st;
    st.d = calloc(1, sizeof *st.d);
    if (!st.d) return PK_ERR_NOMEM;
    int rc = 0, done = 0;
    while (!rc && !done) rc = step(P, &done);
    if (!rc) {
        st.op_at = st.pos;
        if (st.sp != 1 || !st.stack[0]) { pk_fail(P, "STOP with %zu values on the stack", st.sp); rc = PK_ERR_FORMAT; }
        else if (st.pos != size) { pk_fail(P, "%zu bytes after STOP", size - st.pos); rc = PK_ERR_FORMAT; }
        else st.d->root = st.stack[0];
    }
    free(st.stack);
    free(st.memo);
    if (rc) {
        pk_free(st.d);
        return st.nomem ? PK_ERR_NOMEM : PK_ERR_FORMAT;
    }
    *out = st.d;
    return 0;
}

/* One opcode. */
static int step(pk_parser *P, int *done)
{
    P->op_at = P->pos;
    if (P->pos >= P->size) FAIL(PK_ERR_FORMAT, "truncated (no STOP)");
    unsigned op = P->buf[P->pos++];
    pk_node *n;
    const unsigned char *p = P->buf + P->pos;
    switch (op) {
    case 0x80:                                           /* PROTO */
        if (need(P, 1)) return -1;
        if (P->op_at != 0 || *p < 2 || *p > 4) FAIL(PK_ERR_FORMAT, "PROTO %u (protocols 2 to 4 are read, at the start)", *p);
        P->pos++;
        return 0;
    case 0x95:                                           /* FRAME: a length hint */
        if (need(P, 8)) return -1;
        if (le(p, 8) > P->size - P->pos - 8) FAIL(PK_ERR_FORMAT, "a frame of %llu bytes past the end of the input", (unsigned long long)le(p, 8));
        P->pos += 8;
        return 0;
    case '.': *done = 1; return 0;                       /* STOP */
    case '(':                                            /* MARK */
        if (P->marks >= PK_MAX_DEPTH) FAIL(PK_ERR_FORMAT, "more than %d nested MARKs", PK_MAX_DEPTH);
        if (mds_grow((void **)&P->stack, &P->scap, P->sp + 1, sizeof *P->stack)) FAIL(PK_ERR_NOMEM, "out of memory");
        P->stack[P->sp++] = NULL;
        P->marks++;
        return 0;
    case '}': return push_new(P, PK_DICT, &n);
    case ']': return push_new(P, PK_LIST, &n);
    case ')': return push_new(P, PK_TUPLE, &n);
    case 't': return make_tuple(P, SIZE_MAX);
    case 0x85: case 0x86: case 0x87: return make_tuple(P, op - 0x84);
    case 's': return fill(P, 1, 0);
    case 'u': return fill(P, 1, 1);
    case 'a': return fill(P, 0, 0);
    case 'e': return fill(P, 0, 1);
    case 'N': return push_new(P, PK_NONE, &n);
    case 0x88: case 0x89:                                /* NEWTRUE, NEWFALSE */
        if (push_new(P, PK_BOOL, &n)) return -1;
        n->i = op == 0x88;
        return 0;
    case 'J':
        if (need(P, 4)) return -1;
        P->pos += 4;
        return push_int(P, (int32_t)(uint32_t)le(p, 4));
    case 'K':
        if (need(P, 1)) return -1;
        P->pos += 1;
        return push_int(P, *p);
    case 'M':
        if (need(P, 2)) return -1;
        P->pos += 2;
        return push_int(P, (int64_t)le(p, 2));
    case 0x8A: {                                         /* LONG1: little-endian two's complement */
        if (need(P, 1)) return -1;
        size_t k = *p;
        P->pos++;
        if (k > 8) FAIL(PK_ERR_FORMAT, "an integer of %zu bytes (64 bits are read)", k);
        if (need(P, k)) return -1;
        uint64_t v = le(p + 1, k);
        if (k && k < 8 && (p[k] & 0x80)) v |= ~(uint64_t)0 << (8 * k);
        P->pos += k;
        return push_int(P, (int64_t)v);
    }
    case 'G': {                                          /* BINFLOAT: big-endian double */
        if (need(P, 8)) return -1;
        uint64_t v = 0;
        for (int i = 0; i < 8; i++) v = v << 8 | p[i];
        P->pos += 8;
        if (push_new(P, PK_FLOAT, &n)) return -1;
        memcpy(&n->f, &v, sizeof v);
        return 0;
    }
    case 0x8C: case 'C':                                 /* SHORT_BINUNICODE, SHORT_BINBYTES */
        if (need(P, 1)) return -1;
        P->pos++;
        return push_str(P, op == 'C' ? PK_BYTES : PK_STR, *p);
    case 'X': case 'B':                                  /* BINUNICODE, BINBYTES */
        if (need(P, 4)) return -1;
        P->pos += 4;
        return push_str(P, op == 'B' ? PK_BYTES : PK_STR, le(p, 4));
    case 0x8D:                                           /* BINUNICODE8 */
        if (need(P, 8)) return -1;
        P->pos += 8;
        return push_str(P, PK_STR, le(p, 8));
    case 0x94: return memo_put(P, P->nmemo);             /* MEMOIZE */
    case 'q': case 'h':                                  /* BINPUT, BINGET */
        if (need(P, 1)) return -1;
        P->pos++;
        return op == 'q' ? memo_put(P, *p) : memo_get(P, *p);
    case 'r': case 'j':                                  /* LONG_BINPUT, LONG_BINGET */
        if (need(P, 4)) return -1;
        P->pos += 4;
        return op == 'r' ? memo_put(P, le(p, 4)) : memo_get(P, le(p, 4));
    case 'c': {                                          /* GLOBAL "module\nname\n" */
        const unsigned char *e1 = memchr(p, '\n', P->size - P->pos), *e2;
        if (!e1 || !(e2 = memchr(e1 + 1, '\n', P->size - (size_t)(e1 + 1 - P->buf)))) FAIL(PK_ERR_FORMAT, "GLOBAL without two lines");
        P->pos = (size_t)(e2 + 1 - P->buf);
        return push_global(P, (const char *)p, (size_t)(e1 - p), (const char *)e1 + 1, (size_t)(e2 - e1 - 1), NULL, NULL);
    }
    case 0x93: {                                         /* STACK_GLOBAL */
        pk_node *nm, *mod;
        if (pop(P, &nm) || pop(P, &mod)) return -1;
        if (mod->kind != PK_STR || nm->kind != PK_STR) FAIL(PK_ERR_FORMAT, "STACK_GLOBAL of values that are not strings");
        return push_global(P, mod->s, mod->len, nm->s, nm->len, mod, nm);
    }
    case 'R': return make_object(P, 0);
    case 0x81: return make_object(P, 1);
    case 'b': return build(P);
    default:
        FAIL(PK_ERR_FORMAT, "opcode 0x%02x ('%c') is not read", op, op >= 0x20 && op < 0x7F ? (int)op : '?');
    }
}

/* ---- helpers ------------------------------------------------------------ */

const pk_node *pk_dict_get(const pk_node *d, const char *key)
{
    if (!d || d->kind != PK_DICT) return NULL;
    const pk_node *v = NULL;
    for (size_t i = 0; i + 1 < d->n; i += 2)            /* the last setting wins, as in Python */
        if (d->items[i]->kind == PK_STR && !strcmp(d->items[i]->s, key)) v = d->items[i + 1];
    return v;
}

int pk_is_global(const pk_node *n, const char *qualname)
{
    return n && n->kind == PK_GLOBAL && !strcmp(n->s, qualname);
}

int pk_is_object(const pk_node *n, const char *cls)
{
    return n && n->kind == PK_OBJECT && pk_is_global(n->cls, cls);
}

const pk_node *pk_object_dict(const pk_node *n)
{
    return n && n->kind == PK_OBJECT && n->state && n->state->kind == PK_DICT ? n->state : NULL;
}

int pk_int_tuple(const pk_node *n, int64_t *v, int max)
{
    if (pk_is_object(n, "torch.Size") && n->args->n == 1) n = n->args->items[0];
    if (!n || n->kind != PK_TUPLE || n->n > (size_t)max) return -1;
    for (size_t i = 0; i < n->n; i++) {
        if (n->items[i]->kind != PK_INT) return -1;
        v[i] = n->items[i]->i;
    }
    return (int)n->n;
}

/* ---- building trees ----------------------------------------------------- */

pk_doc *pk_doc_new(void) { return calloc(1, sizeof(pk_doc)); }

int pk_doc_failed(const pk_doc *d) { return !d || d->failed; }

pk_node *pk_add(pk_doc *d, int kind)
{
    if (!d || d->failed) return NULL;
    pk_node *n = new_node(d, kind);
    if (!n) d->failed = 1;
    return n;
}

pk_node *pk_add_bool(pk_doc *d, int v)
{
    pk_node *n = pk_add(d, PK_BOOL);
    if (n) n->i = v != 0;
    return n;
}

pk_node *pk_add_int(pk_doc *d, int64_t v)
{
    pk_node *n = pk_add(d, PK_INT);
    if (n) n->i = v;
    return n;
}

pk_node *pk_add_float(pk_doc *d, double v)
{
    pk_node *n = pk_add(d, PK_FLOAT);
    if (n) n->f = v;
    return n;
}

static pk_node *add_text(pk_doc *d, int kind, const char *s)
{
    if (!s && d) d->failed = 1;
    pk_node *n = s ? pk_add(d, kind) : NULL;
    if (!n) return NULL;
    char *c = malloc(strlen(s) + 1);
    if (!c || track(d, c)) { free(c); d->failed = 1; return NULL; }
    strcpy(c, s);
    n->s = c;
    n->len = strlen(c);
    return n;
}

pk_node *pk_add_str(pk_doc *d, const char *s) { return add_text(d, PK_STR, s); }
pk_node *pk_add_global(pk_doc *d, const char *qualname) { return add_text(d, PK_GLOBAL, qualname); }

pk_node *pk_add_global_in(pk_doc *d, const pk_node *module, const char *name)
{
    if (d && (!module || !name || module->kind != PK_STR)) d->failed = 1;
    if (pk_doc_failed(d)) return NULL;
    size_t n = module->len + 1 + strlen(name) + 1;
    char *q = malloc(n);
    if (!q) { d->failed = 1; return NULL; }
    snprintf(q, n, "%s.%s", module->s, name);
    pk_node *g = pk_add_global(d, q);
    free(q);
    if (g) g->cls = module;
    return g;
}

pk_node *pk_add_object(pk_doc *d, const pk_node *cls, const pk_node *args, const pk_node *state, int newobj)
{
    if (d && (!cls || !args)) d->failed = 1;
    pk_node *n = cls && args ? pk_add(d, PK_OBJECT) : NULL;
    if (!n) return NULL;
    n->cls = cls;
    n->args = args;
    n->state = state;
    n->newobj = newobj;
    return n;
}

int pk_push(pk_doc *d, pk_node *c, const pk_node *item)
{
    if (!d || d->failed || !c || !item) { if (d) d->failed = 1; return PK_ERR_NOMEM; }
    if (c->kind != PK_TUPLE && c->kind != PK_LIST && c->kind != PK_DICT) { d->failed = 1; return PK_ERR_ARG; }
    pk_node *it = (pk_node *)item;       /* items are read-only to the writer */
    if (add_items(c, &it, 1)) { d->failed = 1; return PK_ERR_NOMEM; }
    return 0;
}

/* ---- the writer ----------------------------------------------------------- */

/*
 * The writer mirrors _pickle.c's save(): atoms (None, bools, ints, floats)
 * are written in place; anything else is first looked up in the memo (by
 * node, i.e. by object identity) and fetched when there; otherwise written
 * and memoized, an empty tuple excepted.  Under protocol 4 the output is cut
 * into frames: at the start of each save, a frame of 64 KiB or more is
 * closed (its FRAME header inserted before it); a string of 64 KiB or more
 * closes the frame and is written outside any; the last frame (with STOP) is
 * closed at the end; frames under 4 bytes get no header.
 */
#define FRAME_TARGET 65536
#define BATCH 1000

typedef struct pk_writer {
    unsigned char *b;
    size_t len, cap;
    int proto;
    size_t frame;                  /* where the open frame's data starts */
    const pk_node **mkey;          /* the memo: open addressing on the node's address */
    uint32_t *mval;
    size_t mcap, nmemo;            /* slots, entries handed out (MEMOIZE's counter) */
    int err;
} pk_writer;

static int wgrow(pk_writer *W, size_t more)
{
    if (W->err) return -1;
    if (mds_grow((void **)&W->b, &W->cap, W->len + more, 1)) { W->err = PK_ERR_NOMEM; return -1; }
    return 0;
}

static void wbytes(pk_writer *W, const void *p, size_t n)
{
    if (wgrow(W, n)) return;
    memcpy(W->b + W->len, p, n);
    W->len += n;
}

static void wop(pk_writer *W, unsigned op) { unsigned char c = (unsigned char)op; wbytes(W, &c, 1); }

/* op followed by v in n little-endian bytes */
static void wop_le(pk_writer *W, unsigned op, uint64_t v, size_t n)
{
    unsigned char t[9];
    t[0] = (unsigned char)op;
    for (size_t i = 0; i < n; i++) t[1 + i] = (unsigned char)(v >> (8 * i));
    wbytes(W, t, 1 + n);
}

static void commit_frame(pk_writer *W, int force)
{
    size_t n = W->len - W->frame;
    if (W->proto < 4 || W->err || !n || (n < FRAME_TARGET && !force)) return;
    if (n >= 4 && !wgrow(W, 9)) {
        memmove(W->b + W->frame + 9, W->b + W->frame, n);
        W->b[W->frame] = 0x95;
        for (int i = 0; i < 8; i++) W->b[W->frame + 1 + i] = (unsigned char)((uint64_t)n >> (8 * i));
        W->len += 9;
    }
    W->frame = W->len;
}

static size_t mslot(const pk_writer *W, const pk_node *n)
{
    uintptr_t h = (uintptr_t)n;
    h ^= h >> 17;
    h *= (uintptr_t)0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 7) & (W->mcap - 1);
}

/* The memo index of n, or -1. */
static int64_t memo_find(const pk_writer *W, const pk_node *n)
{
    if (!W->mcap) return -1;
    for (size_t i = mslot(W, n);; i = (i + 1) & (W->mcap - 1)) {
        if (!W->mkey[i]) return -1;
        if (W->mkey[i] == n) return W->mval[i];
    }
}

/* Memoize the value just written (n, or NULL for one that is never fetched). */
static void memoize(pk_writer *W, const pk_node *n)
{
    if (W->err) return;
    if (n && 2 * (W->nmemo + 1) > W->mcap) {
        size_t oc = W->mcap, c = oc ? 2 * oc : 256;
        const pk_node **ok = W->mkey;
        uint32_t *ov = W->mval;
        W->mkey = calloc(c, sizeof *W->mkey);
        W->mval = malloc(c * sizeof *W->mval);
        if (!W->mkey || !W->mval) { free(W->mkey); free(W->mval); W->mkey = ok; W->mval = ov; W->err = PK_ERR_NOMEM; return; }
        W->mcap = c;
        for (size_t i = 0; i < oc; i++) {
            if (!ok[i]) continue;
            size_t j = mslot(W, ok[i]);
            while (W->mkey[j]) j = (j + 1) & (c - 1);
            W->mkey[j] = ok[i];
            W->mval[j] = ov[i];
        }
        free(ok);
        free(ov);
    }
    uint64_t idx = W->nmemo++;
    if (W->proto >= 4) wop(W, 0x94);                          /* MEMOIZE */
    else if (idx < 256) wop_le(W, 'q', idx, 1);               /* BINPUT */
    else wop_le(W, 'r', idx, 4);                              /* LONG_BINPUT */
    if (!n || W->err) return;
    size_t j = mslot(W, n);
    while (W->mkey[j]) j = (j + 1) & (W->mcap - 1);
    W->mkey[j] = n;
    W->mval[j] = (uint32_t)idx;
}

static void wint(pk_writer *W, int64_t v)
{
    if (v >= 0 && v <= 0xFF) { wop_le(W, 'K', (uint64_t)v, 1); return; }
    if (v >= 0 && v <= 0xFFFF) { wop_le(W, 'M', (uint64_t)v, 2); return; }
    if (v >= INT32_MIN && v <= INT32_MAX) { wop_le(W, 'J', (uint64_t)(uint32_t)(int32_t)v, 4); return; }
    size_t n = 8;                    /* LONG1: the shortest two's complement that keeps the sign */
    while (n > 1) {
        int64_t top = v >> (8 * (n - 1) - 1);
        if (top != 0 && top != -1) break;
        n--;
    }
    unsigned char t[10] = { 0x8A, (unsigned char)n };
    for (size_t i = 0; i < n; i++) t[2 + i] = (unsigned char)((uint64_t)v >> (8 * i));
    wbytes(W, t, 2 + n);
}

static void wfloat(pk_writer *W, double f)
{
    uint64_t v;
    memcpy(&v, &f, sizeof v);
    unsigned char t[9] = { 'G' };
    for (int i = 0; i < 8; i++) t[1 + i] = (unsigned char)(v >> (56 - 8 * i));
    wbytes(W, t, 9);
}

/* A str (or bytes) of n bytes, then memoized as node (NULL: a fresh one). */
static void wtext(pk_writer *W, int bytes, const char *s, size_t n, const pk_node *node)
{
    if (bytes && W->proto < 3) { W->err = PK_ERR_ARG; return; }
    if (n < 256 && W->proto >= 4 - bytes) wop_le(W, bytes ? 'C' : 0x8C, n, 1);     /* SHORT_BINBYTES/UNICODE */
    else if (n <= 0xFFFFFFFFu) {
        if (W->proto >= 4 && n >= FRAME_TARGET) commit_frame(W, 1);
        wop_le(W, bytes ? 'B' : 'X', n, 4);
    } else if (W->proto >= 4) {
        commit_frame(W, 1);
        wop_le(W, bytes ? 0x8E : 0x8D, n, 8);
    } else { W->err = PK_ERR_ARG; return; }
    wbytes(W, s, n);
    if (W->proto >= 4 && n >= FRAME_TARGET) W->frame = W->len;  /* the payload stays outside frames */
    memoize(W, node);
}

static void save(pk_writer *W, const pk_node *n, int depth);

/* Items of a list (k == 1) or dict (k == 2) in _pickle.c's batches. */
static void wbatches(pk_writer *W, const pk_node *c, int k, int depth)
{
    size_t total = c->n / (size_t)k;
    if (!total) return;
    if (total == 1) {
        for (int j = 0; j < k; j++) save(W, c->items[j], depth);
        wop(W, k == 2 ? 's' : 'a');
        return;
    }
    size_t done = 0, batch;
    do {
        wop(W, '(');
        for (batch = 0; done < total && batch < BATCH; batch++, done++)
            for (int j = 0; j < k; j++) save(W, c->items[done * (size_t)k + (size_t)j], depth);
        wop(W, k == 2 ? 'u' : 'e');
    } while (k == 2 ? batch == BATCH : done < total);
}

static void wglobal(pk_writer *W, const pk_node *n)
{
    const char *dot = strrchr(n->s, '.');
    if (!dot || dot == n->s || !dot[1]) { W->err = PK_ERR_ARG; return; }
    size_t ml = (size_t)(dot - n->s);
    if (W->proto >= 4) {            /* module and name: the nodes given (shared), else fresh strings */
        if (n->cls) save(W, n->cls, 1);
        else wtext(W, 0, n->s, ml, NULL);
        commit_frame(W, 0);
        if (n->args) save(W, n->args, 1);
        else wtext(W, 0, dot + 1, strlen(dot + 1), NULL);
        wop(W, 0x93);
    } else {
        wop(W, 'c');
        wbytes(W, n->s, ml);
        wop(W, '\n');
        wbytes(W, dot + 1, strlen(dot + 1));
        wop(W, '\n');
    }
    memoize(W, n);
}

static void save(pk_writer *W, const pk_node *n, int depth)
{
    if (W->err) return;
    if (depth > PK_MAX_DEPTH) { W->err = PK_ERR_ARG; return; }
    commit_frame(W, 0);
    switch (n->kind) {
    case PK_NONE: wop(W, 'N'); return;
    case PK_BOOL: wop(W, n->i ? 0x88 : 0x89); return;
    case PK_INT: wint(W, n->i); return;
    case PK_FLOAT: wfloat(W, n->f); return;
    default: break;
    }
    int64_t m = memo_find(W, n);
    if (m >= 0) {
        if (m < 256) wop_le(W, 'h', (uint64_t)m, 1);
        else wop_le(W, 'j', (uint64_t)m, 4);
        return;
    }
    switch (n->kind) {
    case PK_STR: case PK_BYTES: wtext(W, n->kind == PK_BYTES, n->s, n->len, n); return;
    case PK_TUPLE:
        if (!n->n) { wop(W, ')'); return; }
        if (n->n > 3) wop(W, '(');
        for (size_t i = 0; i < n->n; i++) save(W, n->items[i], depth + 1);
        if (memo_find(W, n) >= 0) { W->err = PK_ERR_ARG; return; }    /* a cycle through a tuple */
        wop(W, n->n > 3 ? 't' : 0x84 + (unsigned)n->n);
        memoize(W, n);
        return;
    case PK_LIST: case PK_DICT:
        wop(W, n->kind == PK_LIST ? ']' : '}');
        memoize(W, n);
        wbatches(W, n, n->kind == PK_LIST ? 1 : 2, depth + 1);
        return;
    case PK_GLOBAL: wglobal(W, n); return;
    case PK_OBJECT:
        save(W, n->cls, depth + 1);
        save(W, n->args, depth + 1);
        wop(W, n->newobj ? 0x81 : 'R');
        memoize(W, n);
        if (n->state) {
            save(W, n->state, depth + 1);
            wop(W, 'b');
        }
        return;
    default: W->err = PK_ERR_ARG; return;
    }
}

int pk_write(const pk_doc *d, const pk_node *root, int proto, unsigned char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    if (pk_doc_failed(d) || !root) return PK_ERR_NOMEM;
    if (proto != 2 && proto != 4) return PK_ERR_ARG;
    pk_writer W = { .proto = proto };
    wop_le(&W, 0x80, (uint64_t)proto, 1);
    W.frame = W.len;
    save(&W, root, 0);
    wop(&W, '.');
    commit_frame(&W, 1);
    free(W.mkey);
    free(W.mval);
    if (W.err) { free(W.b); return W.err; }
    *out = W.b;
    *len = W.len;
    return 0;
}
