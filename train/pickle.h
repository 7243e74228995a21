/*
 * pickle.h - a restricted reader of Python pickles (protocols 2 to 4), as
 * torch.distributed.checkpoint writes a torch_dist checkpoint's .metadata
 * and torch.save writes its objects' data.pkl (docs/architecture.md,
 * "Planned: torch_dist checkpoints").  It builds a small tree: None, bools,
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
 * Errors: 0 or a negative enum pk_err; one line naming the file, the offset
 * and the cause is written into err.
 * Thread safety: a pk_doc is read-only once parsed and may be shared.
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
    PK_ERR_NOMEM = -2
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
    const pk_node *cls;       /* PK_OBJECT: the PK_GLOBAL called */
    const pk_node *args;      /* PK_OBJECT: the PK_TUPLE of arguments */
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

#ifdef __cplusplus
}
#endif

#endif /* MDS_PICKLE_H */
