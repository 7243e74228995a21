/*
 * dataset_internal.h - private to dataset/: the MMIDIDX format constants,
 * the reader and writer structs, the error-reporting macros, and what the
 * library's files share: .npy files and atomic writes (npy.c), the numpy
 * and Python emulation (pyemu.c), and the training-data pipeline's structs
 * and index cache (gptdata.c, gptcache.c).
 *
 * Not a public header: nothing outside dataset/ (and the dataset unit tests)
 * may include it, and nothing here is a stable interface.  It holds no code
 * that touches files.
 */
#ifndef MDS_DATASET_INTERNAL_H
#define MDS_DATASET_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "dataset.h"

/* ---- On-disk format (docs/formats.md) ---- */

/* The 9-byte magic "MMIDIDX\0\0" at offset 0 of every .idx. */
#define DS_MAGIC          "MMIDIDX\0\0"
#define DS_MAGIC_LEN      9
/* The legacy lazy/cached format (Megatron's IndexedDataset before MMIDIDX)
   starts with this 8-byte magic. */
#define DS_LEGACY_MAGIC     "TNTIDX\0\0"
#define DS_LEGACY_MAGIC_LEN 8

#define DS_FORMAT_VERSION 1

/* Header field offsets; the header is always exactly 34 bytes, unpadded. */
#define DS_OFF_VERSION    9   /* u64 */
#define DS_OFF_DTYPE      17  /* u8  */
#define DS_OFF_SEQ_COUNT  18  /* u64: N */
#define DS_OFF_DOC_COUNT  26  /* u64: D + 1, the length of document_indices */
#define DS_HEADER_SIZE    34

/* Bytes per array element after the header: int32 lengths, int64 pointers,
   int64 document indices.  None of the arrays is aligned. */
#define DS_LENGTH_SIZE    4
#define DS_POINTER_SIZE   8
#define DS_DOCIDX_SIZE    8

/* ---- Tuning ---- */

/* Each writer buffer (tokens, lengths, document indices) is this big; the
   writer's total memory is about three of them. */
#define DS_WRITER_BUF_SIZE ((size_t)1 << 20)
/* Room for the last-error message of a handle. */
#define DS_ERRMSG_SIZE 1024

/* ---- Private structs ---- */

/*
 * A file written through a private buffer with write(2).  For the scratch
 * files the descriptor is opened lazily, on the first spill, so small
 * datasets never create them.
 */
typedef struct ds_sink {
    int fd;              /* -1 while not open */
    const char *path;    /* owned by the writer's path table */
    uint8_t *buf;        /* (cap) */
    size_t len, cap;     /* bytes buffered, buffer size */
    uint64_t flushed;    /* bytes already written to fd */
    int writeback;       /* the .bin: start writing flushed bytes to disk early */
    uint64_t synced;     /* bytes whose writeback was started */
} ds_sink;

/* Indices into ds_writer.tmp_paths. */
enum { DS_TMP_BIN, DS_TMP_IDX, DS_TMP_LEN, DS_TMP_DOC, DS_TMP_COUNT };

struct ds_writer {
    char *prefix;                           /* as given, for messages */
    char *bin_path, *idx_path;              /* final names */
    char *tmp_store;                        /* one allocation for the four temporary names */
    const char *tmp_paths[DS_TMP_COUNT];    /* pointers into tmp_store */
    int dtype;
    size_t itemsize;
    uint32_t max_token;                     /* largest id the dtype holds (2^k - 1) */
    ds_sink bin;                            /* token bytes */
    ds_sink lens;                           /* int32 LE sequence lengths (spills to DS_TMP_LEN) */
    ds_sink docs;                           /* int64 LE document indices incl. the leading 0 */
    ds_sink idx;                            /* the .idx, written by finalize through bin's buffer */
    uint8_t *bufs;                          /* one allocation behind bin, lens and docs */
    uint64_t n_seq, n_doc, n_tok;           /* N, D, Σ lengths */
    uint64_t bin_bytes;                     /* Σ lengths × itemsize, kept <= INT64_MAX */
    uint64_t ptr_acc;                       /* running pointer while finalize writes them */
    int failed;                             /* sticky error code, 0 while healthy */
    int prepared;      /* ds_writer_prepare done: the temporaries are complete */
    int finalized;
    char err[DS_ERRMSG_SIZE];
};

struct ds_reader {
    int valid;                  /* 1 once every open-time check passed */
    char *idx_path, *bin_path;
    const uint8_t *idx;         /* mapping of the .idx, NULL when not mapped */
    size_t idx_size;
    const uint8_t *bin;         /* mapping of the .bin, NULL when empty or not mapped */
    size_t bin_size;
    int dtype;
    size_t itemsize;
    uint64_t n_seq;             /* N */
    uint64_t n_docidx;          /* document_count field: D + 1 */
    uint64_t n_tok;             /* Σ lengths */
    const uint8_t *lengths;     /* int32 LE (N), unaligned, inside idx */
    const uint8_t *pointers;    /* int64 LE (N), unaligned, inside idx */
    const uint8_t *docidx;      /* int64 LE (D + 1), unaligned, inside idx */
    char err[DS_ERRMSG_SIZE];
};

/* ---- Error reporting (zstd lib/common/error_private.h style) ----
 *
 * The macros write the message into `errbuf`, a char[DS_ERRMSG_SIZE] that
 * must be in scope (usually `char *errbuf = r->err;`).  With -DDS_DEBUG the
 * message ends with the source file and line; the library never prints.
 */
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
void ds_set_error(char *errbuf, const char *file, int line, const char *fmt, ...);

#define DS_SET_ERROR(...) ds_set_error(errbuf, __FILE__, __LINE__, __VA_ARGS__)

#define RETURN_ERROR(code, ...) do { \
        DS_SET_ERROR(__VA_ARGS__); \
        return (code); \
    } while (0)

#define RETURN_ERROR_IF(cond, code, ...) do { \
        if (cond) { \
            DS_SET_ERROR(__VA_ARGS__); \
            return (code); \
        } \
    } while (0)

/* Propagates a negative code; the callee has already set the message. */
#define FORWARD_IF_ERROR(expr) do { \
        int ds_fwd_rc_ = (expr); \
        if (ds_fwd_rc_ < 0) return ds_fwd_rc_; \
    } while (0)

/* ---- Unaligned little-endian loads and stores ---- */

static inline uint32_t ds_load_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t ds_load_le64(const uint8_t *p)
{
    return (uint64_t)ds_load_le32(p) | (uint64_t)ds_load_le32(p + 4) << 32;
}

static inline void ds_store_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline void ds_store_le64(uint8_t *p, uint64_t v)
{
    ds_store_le32(p, (uint32_t)v);
    ds_store_le32(p + 4, (uint32_t)(v >> 32));
}

/* ---- .npy files and atomic writes (npy.c) ---- */

/* A mapped .npy array: shape[0] (× shape[1] when ndim == 2) elements of
   descr ("<i2", "<i4", "<u4", "<i8"), at data, inside map. */
typedef struct ds_npy {
    void *map;
    size_t map_size;
    const void *data;
    uint64_t shape[2];
    int ndim;
    char descr[8];
} ds_npy;

/* numpy.save's exact format-1.0 header; returns its size (a multiple of
   64), or 0 if it does not fit in cap. */
size_t ds_npy_header(char *out, size_t cap, const char *descr, const uint64_t *shape, int ndim);
int ds_npy_write(const char *path, const char *descr, const uint64_t *shape, int ndim,
                 const void *data, char *errbuf);
int ds_npy_load(ds_npy *a, const char *path, char *errbuf);
void ds_npy_release(ds_npy *a);
int ds_write_file_atomic(const char *path, const void *head, size_t nhead, const void *data,
                         size_t ndata, char *errbuf);

/* ---- Blending (gptdata.c), exposed for the unit test ---- */

/* Megatron's build_blending_indices: `size` samples over K datasets of
   weights w (K); count (K) is scratch and ends as the per-dataset counts. */
void ds_build_blending_indices(int16_t *di, int64_t *dsi, uint64_t size, const double *w,
                               size_t K, int64_t *count);
/* build_exhaustive_blending_indices: Σ lens samples, every dataset spent. */
void ds_build_exhaustive_blending_indices(int16_t *di, int64_t *dsi, const uint64_t *lens, size_t K,
                                          int64_t *count);

/* ---- numpy and Python emulation (pyemu.c) ---- */

/* numpy.random.default_rng(seed)'s bit generator, for MockGPTDataset and its
   test: PCG64 (XSL-RR 128/64), 128-bit state and increment as {high, low}
   words, seeded through SeedSequence(seed) (seed < 2^64).  next32 buffers
   the high half of a 64-bit draw as numpy does.  default_rng(0).integers(1,
   4096, 10, dtype=int32) = [3484, 2609, 2094, 1105, 1261, 168, 309, 68, 718,
   3331]. */
typedef struct ds_pcg64 {
    uint64_t state[2], inc[2];
    int has32;
    uint32_t buf32;
} ds_pcg64;

void ds_pcg64_seed(ds_pcg64 *g, uint64_t seed);
uint64_t ds_pcg64_next64(ds_pcg64 *g);
uint32_t ds_pcg64_next32(ds_pcg64 *g);
/* Generator.integers(low, high, size=n, dtype=int32), high exclusive, low < high. */
void ds_pcg64_integers_i32(ds_pcg64 *g, int32_t *out, size_t n, int32_t low, int32_t high);

/* numpy.sum of float64: pairwise summation over blocks of 8192, in numpy's
   order (so the result is numpy's to the last bit). */
double ds_numpy_sum(const double *a, size_t n);
/* Python's round(x) of a double to an integral double, ties to even. */
double ds_round_half_even(double x);

/* A growing NUL-terminated string for the cache descriptions.  Start from
   {0}; on out of memory `oom` is set and every later append does nothing, so
   the owner checks once at the end and frees s. */
typedef struct ds_sbuf {
    char *s;
    size_t n, cap;
    int oom;
} ds_sbuf;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void ds_sb_printf(ds_sbuf *b, const char *fmt, ...);
/* json.dumps(indent=4)'s line break: a newline and 4 * level spaces. */
void ds_sb_indent(ds_sbuf *b, int level);
/* A JSON string as json.dumps writes it (ensure_ascii). */
void ds_sb_json_string(ds_sbuf *b, const char *str);
/* A float as json.dumps writes it: repr(x), NaN and +-Infinity for the
   non-finite values. */
void ds_sb_py_float(ds_sbuf *b, double x);

/* ---- The training-data pipeline (gptdata.c) ---- */

/* MockGPTLowLevelDataset's hard-coded size, length bound and forced split. */
#define DS_MOCK_SEQUENCES 100000
#define DS_MOCK_MAX_LENGTH 4096
#define DS_MOCK_SPLIT "1,1,1"

/* The split names, in enum ds_split order: "train", "valid", "test". */
extern const char *const ds_split_names[3];

/* One index array: built in memory (own) or mapped from the cache (npy). */
typedef struct ds_arr {
    void *own;
    ds_npy npy;
    ds_array view;
} ds_arr;

/* One mid-level GPTDataset: prefix `prefix` cut to split `split`. */
typedef struct ds_gpt {
    int built;
    size_t prefix;
    int split;
    uint64_t seq_begin, seq_end;
    uint64_t tokens;                /* T */
    int64_t num_samples;
    uint64_t epochs;
    int separate;
    uint64_t sans;                  /* samples in the epochs before a separate final one */
    int from_cache;
    char *description;
    char md5[33];
    ds_arr doc, sample, shuffle;
} ds_gpt;

/* The BlendedDataset at the top of one split. */
typedef struct ds_blend {
    int built;
    size_t first, K;                /* its datasets: prefixes [first, first + K) */
    int64_t size;                   /* DS_NUM_SAMPLES_NONE for the exhaustive blend */
    uint64_t n;                     /* its length */
    const double *w;                /* (nd) weights, borrowed while building */
    int64_t *count;                 /* (nd) samples taken from each dataset, once computed */
    char *description;
    char md5[33];
    ds_arr dataset_index, dataset_sample_index;
} ds_blend;

/* The handle behind ds_pipeline_open(): gptdata.c builds and reads it,
   gptcache.c describes and caches its datasets. */
struct ds_pipeline {
    ds_gpt_config cfg;              /* scalars only: the strings are not kept */
    int32_t *mock_lengths;          /* (DS_MOCK_SEQUENCES) with cfg.mock, else NULL */
    char *split_str;
    char *vocab_file, *merge_file;
    char *tok_class, *tok_model;    /* ds_gpt_config.tokenizer_class/_model copies, or NULL */
    size_t nd;
    char **paths;                   /* (nd) */
    ds_reader **readers;            /* (nd) */
    double *weights;                /* (nd) as finally normalized, within each prefix's blend */
    int weighted;                   /* data_path is "w1 P1 ..." (shared lists only) */
    int per_split;                  /* split_data_path: each split has its own list */
    int *owner;                     /* (nd) the split of each prefix with per_split, else -1 */
    size_t first[3], count[3];      /* split s uses prefixes [first, first + count) */
    int blend_s[3], weighted_s[3];  /* split s's top level is a blend; a weighted one */
    int present[3];
    double bookends[4];
    ds_gpt *gpt;                    /* (3, nd) */
    ds_blend blends[3];
    uint64_t length[3];
    char err[DS_ERRMSG_SIZE];
};

/* type(self).__name__: the class identifier and the cache file infix. */
static inline const char *ds_gpt_class(const ds_pipeline *p)
{
    return p->mock_lengths ? "MockGPTDataset" : "GPTDataset";
}

/* Frees what the array owns or unmaps it, and zeroes it.  (gptdata.c) */
void ds_arr_release(ds_arr *a);

/* ---- The index cache (gptcache.c) ----
 *
 * Each function sets p->err on failure.  The describe functions fill the
 * dataset's description (owned by it) and md5: ds_gpt_describe needs
 * prefix, split and num_samples set; ds_blend_describe needs first, K, size
 * and w, and lens (K) only for the exhaustive blend (size None), whose
 * description lists the lengths instead of the weights.
 * The load functions need the description (and for a blend its length n);
 * they return 1 on a hit (the arrays mapped into the dataset), 0 on a miss
 * (a missing or different description, an array that does not map, or
 * shapes and dtypes that no Megatron writes: nothing kept), or DS_ERR_NOMEM.  The store functions write the arrays, then the
 * description (so a crash in between leaves a miss), creating the directory.
 */
int ds_gpt_describe(ds_pipeline *p, ds_gpt *g);
int ds_blend_describe(ds_pipeline *p, int split, ds_blend *bl, const uint64_t *lens);
int ds_gpt_cache_load(ds_pipeline *p, ds_gpt *g);
int ds_blend_cache_load(ds_pipeline *p, int split, ds_blend *bl);
int ds_gpt_cache_store(ds_pipeline *p, const ds_gpt *g);
int ds_blend_cache_store(ds_pipeline *p, int split, const ds_blend *bl);

#endif /* MDS_DATASET_INTERNAL_H */
