/*
 * json.h - a strict parser for one JSON line that extracts the strings of a
 * few top-level keys, with the semantics Megatron gets from Python's
 * json.loads(line) followed by obj[key].
 *
 * It validates the whole line (every value, also the ones not extracted) and
 * decodes only what was asked for: for each requested key, whether it is
 * missing, a string, an array of strings, or anything else.  It does not
 * build a tree, convert numbers, split lines, or print anything.
 *
 * What is accepted (Python's json module with RFC 8259 strictness):
 *  - exactly one value, with only JSON whitespace (space, \t, \n, \r) around
 *    it.  The caller splits lines (and skips blank ones); an empty line is an
 *    error.  The top-level value must be an object.
 *  - NaN, Infinity and -Infinity are accepted as values, as Python does.
 *  - numbers follow the RFC grammar (no leading zeros, no "1.", ".5", "+1").
 *    An integer with more than JSON_MAX_INT_DIGITS digits is an error, as it
 *    is for Python >= 3.11 (int max_str_digits, ValueError).
 *  - strings: raw bytes must be valid UTF-8 (no overlong forms, no encoded
 *    surrogates, nothing above U+10FFFF, no truncated sequences); raw control
 *    characters U+0000..U+001F are rejected; escapes are \" \\ \/ \b \f \n
 *    \r \t and \uXXXX (either case).  A \uD8xx\uDCxx pair becomes one code
 *    point.  \u0000 decodes to a NUL byte: strings are (pointer, length).
 *  - a lone surrogate escape is accepted by Python, but Megatron then fails
 *    to encode the text.  So it is an error (JSON_ERR_SURROGATE) only in a
 *    string we extract (in the final value of a requested key); elsewhere it
 *    is accepted, as Megatron does.
 *  - keys are compared after unescaping ("te\u0078t" is "text"); when a key
 *    occurs more than once the last occurrence wins.  Only keys of the
 *    top-level object count; nested objects with the same keys are ignored.
 *  - nesting is limited to JSON_MAX_DEPTH levels, kept with an explicit
 *    stack (no recursion).  Python raises RecursionError near depth 1000
 *    (the exact depth depends on the Python version and the caller's stack).
 *  - a UTF-8 byte order mark is an error, as it is for json.loads.
 *
 * Errors: json_extract() returns a negative json_error_code, and d->err holds
 * a short lowercase message with the 1-based byte column, e.g.
 *   "invalid JSON: expected ':' after object key at column 17"
 *   "invalid JSON: unexpected end of line at column 42"
 *   "invalid UTF-8 at column 7"
 *   "lone surrogate \ud800 at column 12"
 *
 * Memory: a json_doc owns growable buffers that are reused from line to line,
 * so parsing allocates nothing once they have grown to the longest line.
 * Thread safety: one json_doc per thread; the functions keep no global state.
 */
#ifndef MDS_JSON_H
#define MDS_JSON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define JSON_MAX_DEPTH 1000       /* nested objects/arrays, the top-level object included */
#define JSON_MAX_INT_DIGITS 4300  /* Python's default sys.get_int_max_str_digits() */

/* What a requested key holds in the top-level object. */
enum json_kind {
    JSON_MISSING = 0,   /* the key is not there (Megatron: KeyError) */
    JSON_STRING,        /* a string: 1 span */
    JSON_STRING_ARRAY,  /* an array whose elements are all strings ([] included): one span each */
    JSON_OTHER          /* a number, true/false/null, an object, or an array holding a non-string */
};

enum json_error_code {
    JSON_OK = 0,
    JSON_ERR_SYNTAX = -1,      /* not valid JSON (incl. end of line inside a value) */
    JSON_ERR_UTF8 = -2,        /* invalid UTF-8 bytes */
    JSON_ERR_SURROGATE = -3,   /* lone surrogate escape in an extracted string */
    JSON_ERR_DEPTH = -4,       /* nesting deeper than JSON_MAX_DEPTH */
    JSON_ERR_NOT_OBJECT = -5,  /* valid start of a value, but the top level is not an object */
    JSON_ERR_NUMBER = -6,      /* integer longer than JSON_MAX_INT_DIGITS digits */
    JSON_ERR_NOMEM = -7,       /* out of memory */
    JSON_ERR_ARG = -8          /* NULL argument */
};

typedef struct json_span {
    size_t off, len;  /* the string is buf[off, off + len) */
} json_span;

typedef struct json_value {
    int kind;               /* enum json_kind */
    size_t first, count;    /* spans[first, first + count) */
    size_t lone_col;        /* internal: column of a lone surrogate in this value, 0 if none */
    uint32_t lone_cp;       /* internal: that surrogate */
} json_value;

typedef struct json_doc {
    char *buf;                       /* (buf_cap) decoded UTF-8 of extracted strings */
    size_t buf_len, buf_cap;
    json_span *spans;                /* (spans_cap) one per extracted string */
    size_t nspans, spans_cap;
    json_value *values;              /* (values_cap) one per requested key */
    size_t nvalues, values_cap;
    char err[160];                   /* message of the last error, "" after success */
} json_doc;

/*! json_doc_init() :
 *  Makes an empty document; allocates nothing. */
void json_doc_init(json_doc *d);

/*! json_doc_release() :
 *  Frees the document's buffers and leaves it empty (ready for reuse).
 *  Accepts NULL. */
void json_doc_release(json_doc *d);

/*! json_extract() :
 *  Parses line[0, len) (one line; a trailing CR or LF is JSON whitespace and
 *  harmless) and extracts keys[0, nkeys), which are NUL-terminated UTF-8
 *  names.  Splitting lines the way Megatron does (Python universal newlines:
 *  LF, CRLF and a lone CR all end a line) is the caller's job.  The results replace those of the
 *  previous call.
 *  @return : 0, or JSON_ERR_SYNTAX, _UTF8, _SURROGATE, _DEPTH, _NOT_OBJECT,
 *            _NUMBER, _NOMEM, _ARG, with d->err set.  After an error the
 *            values are undefined.
 *  The line need not be NUL-terminated and is not modified. */
int json_extract(json_doc *d, const char *line, size_t len, const char *const *keys, size_t nkeys);

/*! json_doc_kind() :
 *  @return : the enum json_kind of key k (JSON_MISSING if k >= nkeys). */
int json_doc_kind(const json_doc *d, size_t k);

/*! json_doc_count() :
 *  @return : the number of strings of key k: 1 for JSON_STRING, the array
 *            length for JSON_STRING_ARRAY, 0 otherwise. */
size_t json_doc_count(const json_doc *d, size_t k);

/*! json_doc_string() :
 *  @return : string j of key k (0 <= j < json_doc_count()), with its length
 *            in *len; NULL (and *len = 0) when out of range.  The bytes are
 *            valid UTF-8, may contain NUL, and are not NUL-terminated.  They
 *            belong to d and stay valid until the next json_extract() or
 *            json_doc_release(). */
const char *json_doc_string(const json_doc *d, size_t k, size_t j, size_t *len);

/*! json_strerror() :
 *  @return : a static description of a json_error_code. */
const char *json_strerror(int code);

#ifdef __cplusplus
}
#endif

#endif /* MDS_JSON_H */
