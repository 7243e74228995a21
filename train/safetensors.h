/*
 * safetensors.h - the safetensors file format (HuggingFace's model.safetensors):
 *     uint64 N (little-endian) | N bytes of JSON header | data
 * The header maps each tensor name to {"dtype", "shape", "data_offsets":
 * [begin, end]} (offsets relative to the start of the data), plus an
 * optional "__metadata__" object of strings.  docs/formats.md has the rules.
 *
 * Reading validates the whole header before any tensor byte is touched:
 * N within the file and at most 100 MB, the JSON well formed (jsontree.h,
 * strict, nested at most 64 deep), names without NUL and under 256 bytes,
 * every dtype F32, F16 or BF16 (others are refused by name), shapes of at
 * most 8 non-negative dimensions, end - begin equal to the element count
 * times the dtype size, and the tensors, sorted by offset, tiling the data
 * exactly (no gap, no overlap, the last ending at the end of the file: the
 * rule of the reference Rust implementation); names unique.
 *
 * Writing: fp32 tensors only, in the given order, the header padded with
 * spaces to a multiple of 8 bytes (as the reference writer does), under
 * PATH.tmp, fsynced, then renamed over PATH.
 *
 * What it deliberately does not do: dtypes other than F32/F16/BF16 (int
 * tensors, F64, FP8), big-endian hosts, tensors over 2^63 bytes.
 *
 * Errors: functions return 0 or a negative enum st_err and write one line
 * naming the file (and the tensor) into err.
 * Thread safety: an st_file is read-only after st_open and may be shared.
 */
#ifndef MDS_SAFETENSORS_H
#define MDS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum st_err {
    ST_OK = 0,
    ST_ERR_IO = -1,      /* open, read, write, rename failed */
    ST_ERR_FORMAT = -2,  /* a malformed or truncated file */
    ST_ERR_NOMEM = -3,
    ST_ERR_ARG = -4      /* a bad argument (a name too long, a shape too large) */
};

/* A short name for an error code; never NULL. */
const char *st_strerror(int code);

enum st_dtype { ST_F32 = 0, ST_F16 = 1, ST_BF16 = 2 };

#define ST_MAX_DIMS 8
#define ST_MAX_NAME 256

typedef struct st_tensor {
    char name[ST_MAX_NAME];
    int dtype;                     /* enum st_dtype */
    int ndim;
    uint64_t shape[ST_MAX_DIMS];
    uint64_t numel;
    uint64_t begin, end;           /* byte offsets within the data */
} st_tensor;

typedef struct st_file st_file;

/*
 * st_open() - read and validate path (the whole file is read into memory).
 * st_parse() - the same over bytes already in memory, which must stay valid
 * until st_close (the fuzz target's entry); name is used in messages.
 * @return : 0 and *out, or ST_ERR_IO / ST_ERR_FORMAT / ST_ERR_NOMEM.
 */
int st_open(const char *path, st_file **out, char *err, size_t errlen);
int st_parse(const unsigned char *data, size_t size, const char *name, st_file **out, char *err, size_t errlen);

/* Free; accepts NULL. */
void st_close(st_file *f);

size_t st_count(const st_file *f);
const st_tensor *st_at(const st_file *f, size_t i);        /* in header order */
const st_tensor *st_find(const st_file *f, const char *name); /* NULL when absent */

/* The value of "__metadata__"'s key, or NULL (owned by f). */
const char *st_metadata(const st_file *f, const char *key);

/* Copy tensor t, converted to fp32, into dst (t->numel floats). */
void st_read_f32(const st_file *f, const st_tensor *t, float *dst);

/* One tensor to write: fp32 data of the product of shape elements. */
typedef struct st_entry {
    const char *name;
    const float *data;
    int ndim;
    uint64_t shape[ST_MAX_DIMS];
} st_entry;

/*
 * st_write() - write n tensors (names unique, shorter than ST_MAX_NAME) and
 * __metadata__ {"format": "pt"} to path, atomically.
 * @return : 0, ST_ERR_IO, ST_ERR_NOMEM, ST_ERR_ARG.
 */
int st_write(const char *path, const st_entry *e, size_t n, char *err, size_t errlen);

const char *st_dtype_name(int dtype);

#ifdef __cplusplus
}
#endif

#endif /* MDS_SAFETENSORS_H */
