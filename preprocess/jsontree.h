/*
 * jsontree.h - the one JSON reader of mds: a small strict parser that builds
 * a read-only tree.  Its readers: the tokenizer files (tokenizer.json,
 * tokenizer_config.json), a safetensors header and a HuggingFace
 * config.json (train/), DeepSpeed's ds_config.json (programs/).
 *
 * Strict RFC 8259, as serde_json reads these files: no comments, no trailing
 * commas; strings must be valid UTF-8 and their \u escapes valid (a lone
 * surrogate is an error); the whole input is one value, surrounded by
 * whitespace only.  Nesting deeper than 512 levels is refused (no recursion
 * limit problems on hostile input).  jt_options relaxes or tightens this per
 * reader: Python's NaN / Infinity / -Infinity (json.load), a lower depth.
 *
 * What it deliberately does not do: streaming, numbers beyond what a double
 * and an int64 hold (both are kept; is_int says whether the literal was an
 * integer that fits int64), or interpreting duplicate keys (they are all
 * kept, in file order; callers decide, see jt_has_duplicate_key).  Writing
 * is one function, jt_quote (a string literal).
 *
 * Errors are codes with the place and cause in a jt_err (jt_parse_opts) or
 * a one-line message in the caller's buffer naming the file, line and column
 * (jt_parse, jt_parse_file); it never prints.  A parsed document is
 * immutable and may be read by any number of threads; nodes and strings live
 * until jt_free.
 */
#ifndef MDS_JSONTREE_H
#define MDS_JSONTREE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum jt_type { JT_NULL = 0, JT_FALSE, JT_TRUE, JT_NUMBER, JT_STRING, JT_ARRAY, JT_OBJECT };

enum jt_error {
    JT_OK = 0,
    JT_ERR_IO = -1,     /* the file cannot be opened or read */
    JT_ERR_NOMEM = -2,  /* out of memory */
    JT_ERR_SYNTAX = -3  /* not valid JSON (the message says where and why) */
};

typedef struct jt_node jt_node;
struct jt_node {
    int type;             /* enum jt_type */
    uint32_t line, col;   /* where the value starts (1-based) */
    const char *key;      /* member name (NUL-terminated) when inside an object, else NULL */
    size_t keylen;
    const char *str;      /* JT_STRING: the decoded UTF-8 bytes, NUL-terminated (may hold NULs) */
    size_t len;           /* JT_STRING: bytes; JT_ARRAY, JT_OBJECT: number of children */
    const jt_node *kids;  /* JT_ARRAY, JT_OBJECT: the children, contiguous, in file order */
    double num;           /* JT_NUMBER */
    int64_t i;            /* JT_NUMBER when is_int */
    int is_int;           /* JT_NUMBER: an integer literal (no fraction or exponent) that fits int64 */
};

typedef struct jt_doc jt_doc;

/* What a parse accepts beyond RFC 8259, and its limit; all zero: strict,
 * 512 levels. */
typedef struct jt_options {
    int max_depth;   /* arrays and objects nested deeper are refused; 0: 512 */
    int python;      /* NaN, Infinity and -Infinity are numbers (Python's json) */
} jt_options;

/* Where and why a parse failed (line and column 1-based, the column in
 * characters; 0 for JT_ERR_NOMEM). */
typedef struct jt_err {
    uint32_t line, col;
    char why[160];
} jt_err;

/* Parses n bytes of text under *opt (NULL: the defaults).  *out receives
 * the document (NULL on failure).
 * @return 0, JT_ERR_NOMEM or JT_ERR_SYNTAX, with *e filled on failure. */
int jt_parse_opts(jt_doc **out, const char *text, size_t n, const jt_options *opt, jt_err *e);

/* Parses the file at path.  *out receives the document (NULL on failure).
 * @return 0, JT_ERR_IO, JT_ERR_NOMEM or JT_ERR_SYNTAX, with a message
 *   "'PATH': line L, column C: CAUSE" (or "cannot open 'PATH': ...") in err. */
int jt_parse_file(jt_doc **out, const char *path, char *err, size_t errlen);

/* Parses n bytes of text with the defaults; name is used in messages in
 * place of a path. */
int jt_parse(jt_doc **out, const char *name, const char *text, size_t n, char *err, size_t errlen);

/* Frees a document; accepts NULL. */
void jt_free(jt_doc *d);

/* The top-level value. */
const jt_node *jt_root(const jt_doc *d);

/* The LAST member named key of an object (serde's "last one wins" for maps),
 * or NULL when obj is not an object or has no such member. */
const jt_node *jt_get(const jt_node *obj, const char *key);

/* 1 if the object has two members with the same name (*dup receives the
 * second), else 0.  O(n log n); allocates only a temporary index. */
int jt_has_duplicate_key(const jt_node *obj, const jt_node **dup);

/* n's string when n is a string holding no NUL byte (so C string functions
 * see all of it), else NULL. */
const char *jt_str(const jt_node *n);

/* Writes s as a JSON string literal (quotes; '"', '\\' and control
 * characters escaped, the rest as is) into out, NUL-terminated.
 * @return : its length, or -1 when it does not fit in cap bytes. */
long jt_quote(char *out, size_t cap, const char *s);

/* A human name for a node's type ("a string", "an object", ...), for messages. */
const char *jt_type_name(int type);

#ifdef __cplusplus
}
#endif

#endif /* MDS_JSONTREE_H */
