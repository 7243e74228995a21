/*
 * pickle.c - the restricted pickle reader (pickle.h): a stack machine over
 * the opcodes pickle.h lists, building nodes instead of Python objects.
 * Nodes live in blocks freed together with the strings (recorded in
 * allocs) and the containers' item arrays (found through the nodes).
 */
#include "pickle.h"

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

/* Grow *p (of *cap elements of size sz) to hold need; 0 or -1. */
static int grow(void **p, size_t *cap, size_t need, size_t sz)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * sz);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

static int track(pk_doc *d, void *p)
{
    if (grow((void **)&d->allocs, &d->callocs, d->nallocs + 1, sizeof *d->allocs)) return -1;
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
    if (grow((void **)&P->stack, &P->scap, P->sp + 1, sizeof *P->stack)) FAIL(PK_ERR_NOMEM, "out of memory");
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

static int push_global(pk_parser *P, const char *module, size_t mlen, const char *name, size_t nlen)
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
    return 0;
}

static int memo_put(pk_parser *P, uint64_t idx)
{
    if (!P->sp || !P->stack[P->sp - 1]) FAIL(PK_ERR_FORMAT, "memoizing an empty stack or a MARK");
    if (idx > P->size) FAIL(PK_ERR_FORMAT, "memo index %llu beyond the input's size", (unsigned long long)idx);
    if (idx >= P->nmemo) {
        if (grow((void **)&P->memo, &P->cmemo, (size_t)idx + 1, sizeof *P->memo)) FAIL(PK_ERR_NOMEM, "out of memory");
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
        if (grow((void **)&P->stack, &P->scap, P->sp + 1, sizeof *P->stack)) FAIL(PK_ERR_NOMEM, "out of memory");
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
        return push_global(P, (const char *)p, (size_t)(e1 - p), (const char *)e1 + 1, (size_t)(e2 - e1 - 1));
    }
    case 0x93: {                                         /* STACK_GLOBAL */
        pk_node *nm, *mod;
        if (pop(P, &nm) || pop(P, &mod)) return -1;
        if (mod->kind != PK_STR || nm->kind != PK_STR) FAIL(PK_ERR_FORMAT, "STACK_GLOBAL of values that are not strings");
        return push_global(P, mod->s, mod->len, nm->s, nm->len);
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
