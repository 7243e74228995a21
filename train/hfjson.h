/*
 * hfjson.h - a small strict JSON scanner for the two JSON texts of a
 * HuggingFace model folder that mdstrain reads: the safetensors header and
 * config.json.  It builds no tree: an iterator walks the members of one
 * object (or the elements of one array) and hands each value back as a typed
 * span of the input; nested objects and arrays are walked with a new
 * iterator over that span.  Every value is validated when it is stepped over
 * (RFC 8259 grammar, nesting up to 64 levels), so a span handed back is
 * always well formed.
 *
 * What it deliberately does not do: build a document, keep anything between
 * calls, decode \u escapes outside the Basic Multilingual Plane into
 * surrogate pairs (they are decoded to UTF-8, lone surrogates refused),
 * accept Python's NaN / Infinity.
 *
 * Errors: functions return 0 (end) / 1 (an item) or -1 for malformed text.
 * Thread safety: no global state.
 */
#ifndef MDS_HFJSON_H
#define MDS_HFJSON_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum hj_type { HJ_NULL, HJ_BOOL, HJ_NUMBER, HJ_STRING, HJ_OBJECT, HJ_ARRAY };

/* A value: its type and its span in the input (a string's span is the raw
 * text between the quotes, escapes undecoded; an object's or array's
 * includes the brackets).  num is set for numbers, boolean for booleans. */
typedef struct hj_value {
    int type;
    const char *start;
    size_t len;
    double num;
    int boolean;
} hj_value;

typedef struct hj_iter {
    const char *p, *end;
    int first;
    int close;    /* '}' or ']' */
} hj_iter;

/* Start walking the object (or array) that s[0, n) holds, leading and
 * trailing white space allowed; -1 when it does not start with '{' ('[').
 * A top-level text is whole only when the walk reaches its end and
 * hj_at_end() then holds. */
int hj_object_begin(hj_iter *it, const char *s, size_t n);
int hj_array_begin(hj_iter *it, const char *s, size_t n);

/* The next member: its key decoded into key (cap bytes, NUL-terminated; a
 * longer key is an error) and its value.  @return : 1, 0 after the last
 * member, -1 on malformed text. */
int hj_object_next(hj_iter *it, char *key, size_t cap, hj_value *v);

/* The next element.  @return : 1, 0 after the last, -1 on malformed text. */
int hj_array_next(hj_iter *it, hj_value *v);

/* After the walk ended (0): nothing but white space follows the closing bracket. */
int hj_at_end(const hj_iter *it);

/* Decode a string value into out (cap bytes, NUL-terminated).
 * @return : the decoded length, or -1 when it does not fit or holds a NUL. */
long hj_string(const hj_value *v, char *out, size_t cap);

/* Write s as a JSON string literal (quotes and escapes) into out.
 * @return : the length, or -1 when it does not fit in cap bytes. */
long hj_quote(char *out, size_t cap, const char *s);

#ifdef __cplusplus
}
#endif

#endif /* MDS_HFJSON_H */
