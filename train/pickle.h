/*
 * pickle.h - a restricted reader of Python pickles (protocols 2 to 4), as
 * torch.distributed.checkpoint writes a torch_dist checkpoint's .metadata
 * and torch.save writes its objects' data.pkl (docs/architecture.md,
 * "torch_dist checkpoints").  It builds a small tree: None, bools,
 * ints (64-bit), floats, strings, bytes, tuples, lists, dicts (keys of any
 * kind, in insertion order), references to allow-listed globals, and
 * objects made from them: a class or function applied to an argument tuple
 * (REDUCE, NEWOBJ) with an optional state (BUILD), which the reader keeps as
 * data and never runs.
 *
 * Opcodes read: PROTO FRAME STOP MARK, EMPTY_DICT/LIST/TUPLE, TUPLE TUPLE1-3,
 * SETITEM(S) APPEND(S), NONE NEWTRUE NEWFALSE, BININT BININT1 BININT2 LONG1
 * (up to 8 bytes), BINFLOAT, SHORT_BINUNICODE BINUNICODE BINUNICODE8,
 * SHORT_BINBYTES BINBYTES, MEMOIZE BINPUT LONG_BINPUT BINGET LONG_BINGET,
 * GLOBAL STACK_GLOBAL REDUCE NEWOBJ BUILD.  Anything else (persistent ids,
 * protocol 0/1 text opcodes, extensions, POP, sets, frozensets, protocol 5
 * buffers) is refused by name and offset, and so is a global outside the
 * allow-list (pk_global_allowed): torch.distributed.checkpoint's metadata,
 * planner and filesystem classes, torch.Size, torch's float dtypes,
 * torch.serialization._get_layout, torch.strided's _MEM_FORMAT_ENCODING,
 * collections.OrderedDict, argparse.Namespace, and the enums a Megatron
 * args Namespace holds (AttnBackend, CudaGraphModule,
 * InferenceCudaGraphScope of megatron.core.transformer.enums, signal.Signals).
 *
 * Every length is checked against the input before it is used, the stack,
 * the memo and the tree are bounded by the input's size, and nesting is
 * bounded by PK_MAX_DEPTH, so no input makes it crash or allocate much more
 * than a small multiple of its size.  A memo reference shares the node, so
 * the tree is a graph (a pickle can even hold a cycle through a list or a
 * dict): walkers bound their depth.
 *
 * The writer (pk_write) is the other direction, for the objects mds writes
 * into a torch_dist checkpoint: a tree built with pk_doc_new and pk_add_*
 * (or one that pk_parse read) is pickled as CPython's C pickler pickles the
 * Python objects the tree stands for, byte for byte.  Nodes are Python
 * objects by identity: a node reached twice is memoized once and fetched
 * (BINGET) after, as a Python object referenced twice is, so the caller
 * decides which values are one object (Python's interned names, a
 * torch.Size shared by two dataclasses) by sharing the node.  It writes
 * protocol 2 (torch.save's data.pkl: BINPUT, GLOBAL, BINUNICODE) and
 * protocol 4 (pickle.dump's default: FRAMEs of 64 KiB committed at the next
 * object's start, MEMOIZE, STACK_GLOBAL, SHORT_BINUNICODE), dicts and lists
 * in batches of 1000 (a dict of a multiple of 1000 items ends in an empty
 * MARK SETITEMS, as _pickle.c's batch_dict_exact does; one item is SETITEM
 * or APPEND).  What it does not write: bytes under protocol 2 (Python
 * pickles them through codecs), recursive tuples, persistent ids.
 *
 * Errors: 0 or a negative enum pk_err; one line naming the file, the offset
 * and the cause is written into err.
 * Thread safety: a pk_doc is read-only once parsed and may be shared; a
 * pk_doc being built belongs to one thread.
 */
#ifndef MDS_PICKLE_H
#define MDS_PICKLE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum pk_err {
    PK_OK = 0,
    PK_ERR_FORMAT = -1,  /* malformed, truncated, or outside what is read */
    PK_ERR_NOMEM = -2,
    PK_ERR_ARG = -3      /* pk_write: a tree it cannot write (see above) */
};

const char *pk_strerror(int code);

#define PK_MAX_DEPTH 256   /* open MARKs plus nested containers on the stack */

enum pk_kind {
    PK_NONE, PK_BOOL, PK_INT, PK_FLOAT, PK_STR, PK_BYTES,
    PK_TUPLE, PK_LIST, PK_DICT, PK_GLOBAL, PK_OBJECT
};

typedef struct pk_node pk_node;
struct pk_node {
    int kind;                 /* enum pk_kind */
    int64_t i;                /* PK_BOOL (0/1), PK_INT */
    double f;                 /* PK_FLOAT */
    const char *s;            /* PK_STR, PK_BYTES (NUL-terminated copy), PK_GLOBAL: "module.name" */
    size_t len;               /* of s */
    pk_node **items;          /* PK_TUPLE, PK_LIST: n items; PK_DICT: n pairs as key, value, ... */
    size_t n;
    const pk_node *cls;       /* PK_OBJECT: the PK_GLOBAL called; PK_GLOBAL: the PK_STR of its
                                 module under STACK_GLOBAL (Python shares a module's name
                                 between its classes), else NULL */
    const pk_node *args;      /* PK_OBJECT: the PK_TUPLE of arguments; PK_GLOBAL: the PK_STR of
                                 its name under STACK_GLOBAL, else NULL */
    const pk_node *state;     /* PK_OBJECT: BUILD's state, or NULL */
    int newobj;               /* PK_OBJECT: made by NEWOBJ (cls.__new__), not REDUCE */
};

typedef struct pk_doc pk_doc;

/*
 * pk_parse() - read the pickle of size bytes at buf (name is used in
 * messages) into a tree owned by *out.
 * @return : 0 and *out, PK_ERR_FORMAT, PK_ERR_NOMEM.
 */
int pk_parse(const unsigned char *buf, size_t size, const char *name, pk_doc **out, char *err, size_t errlen);

/* Free the tree; accepts NULL. */
void pk_free(pk_doc *d);

/* The pickled object (valid until pk_free). */
const pk_node *pk_root(const pk_doc *d);

/* Whether module.name may appear in a pickle (the allow-list above). */
int pk_global_allowed(const char *module, const char *name);

/* Helpers that return NULL (or 0) when the node is not of the kind asked. */
const pk_node *pk_dict_get(const pk_node *dict, const char *key);    /* a string key */
int pk_is_object(const pk_node *n, const char *cls);                /* an object of "module.name" */
int pk_is_global(const pk_node *n, const char *qualname);
/* The state dict of an object (BUILD with a dict), or NULL. */
const pk_node *pk_object_dict(const pk_node *n);
/* A torch.Size or a tuple of ints into v (at most max); the count, or -1. */
int pk_int_tuple(const pk_node *n, int64_t *v, int max);

/* ---- building and writing ---------------------------------------------- */

/* An empty document to build a tree in; free with pk_free.  NULL when out of memory. */
pk_doc *pk_doc_new(void);

/*
 * The builders return a new node owned by d, or NULL when out of memory or
 * when an argument is NULL; either failure is also remembered in d, so that
 * a caller may build a whole tree and check once: pk_write(d, ...) then
 * returns PK_ERR_NOMEM.  Containers (PK_TUPLE, PK_LIST, PK_DICT) start empty
 * and grow with pk_push (a dict takes key, value, key, value, ...).
 */
pk_node *pk_add(pk_doc *d, int kind);                     /* PK_NONE, PK_TUPLE, PK_LIST, PK_DICT */
pk_node *pk_add_bool(pk_doc *d, int v);
pk_node *pk_add_int(pk_doc *d, int64_t v);
pk_node *pk_add_float(pk_doc *d, double v);
pk_node *pk_add_str(pk_doc *d, const char *s);            /* a copy of s */
pk_node *pk_add_global(pk_doc *d, const char *qualname);  /* "module.name", split at the last dot */
/* A global whose module string is the node module (shared with other globals of that module). */
pk_node *pk_add_global_in(pk_doc *d, const pk_node *module, const char *name);
/* cls(*args) with newobj (NEWOBJ, cls.__new__), else REDUCE; state (BUILD) may be NULL. */
pk_node *pk_add_object(pk_doc *d, const pk_node *cls, const pk_node *args, const pk_node *state, int newobj);
/* Append item to container (a tuple, list or dict); 0, or PK_ERR_NOMEM / PK_ERR_ARG. */
int pk_push(pk_doc *d, pk_node *container, const pk_node *item);
/* Whether a builder failed on d. */
int pk_doc_failed(const pk_doc *d);

/*
 * pk_write() - pickle root (a node of d) with protocol proto (2 or 4) into a
 * malloc'd buffer *out of *len bytes (the caller frees it).
 * @return : 0, PK_ERR_NOMEM (also when a builder failed on d), PK_ERR_ARG
 * (another protocol, bytes under protocol 2, a global without a dot, a
 * tree nested deeper than PK_MAX_DEPTH or a cycle through tuples).
 */
int pk_write(const pk_doc *d, const pk_node *root, int proto, unsigned char **out, size_t *len);

#ifdef __cplusplus
}
#endif

#endif /* MDS_PICKLE_H */
