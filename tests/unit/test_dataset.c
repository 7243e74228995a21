/*
 * test_dataset.c - unit tests of dataset/ (the MMIDIDX reader and writer).
 *
 * Covers byte identity with Megatron (the spec's worked example and two
 * golden datasets from Megatron's own preprocess_data.py, copied into
 * tests/data/golden/), merging, >4 GiB offsets on a sparse file, scratch-file
 * spilling, a catalogue of corrupt indices generated here from a valid
 * one, ds_decode_tokens (every dtype, NaN and out-of-range float64),
 * ds_py_float_repr (Python's repr(float)) and ds_utf8_replace (Python's
 * errors='replace').  Run from the repository
 * root.  Everything it writes goes under a mkdtemp directory in /tmp,
 * removed at the end.
 *
 * It does not fuzz (tests/fuzz/ does) and does not test preprocess/.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset.h"
#include "harness.h"
#include "readfile.h"

static char g_dir[256];

/* ---- helpers ---- */

static void pjoin(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", g_dir, name);
}


static int spit(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int ok = (n == 0 || fwrite(p, 1, n, f) == n);
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static int files_equal(const char *a, const char *b)
{
    size_t na, nb;
    uint8_t *pa = read_file_or_null(a, &na), *pb = read_file_or_null(b, &nb);
    int eq = pa && pb && na == nb && memcmp(pa, pb, na) == 0;
    free(pa);
    free(pb);
    return eq;
}

/* Copies PREFIX.bin/.idx from one prefix to another. */
static int copy_dataset(const char *from, const char *to)
{
    const char *ext[2] = { ".bin", ".idx" };
    for (int i = 0; i < 2; i++) {
        char a[512], b[512];
        snprintf(a, sizeof a, "%s%s", from, ext[i]);
        snprintf(b, sizeof b, "%s%s", to, ext[i]);
        size_t n;
        uint8_t *p = read_file_or_null(a, &n);
        if (!p)
            return -1;
        int rc = spit(b, p, n);
        free(p);
        if (rc)
            return -1;
    }
    return 0;
}

static void put_le(uint8_t *p, uint64_t v, int width)
{
    for (int i = 0; i < width; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static int has(const char *msg, const char *needle)
{
    int ok = strstr(msg, needle) != NULL;
    if (!ok)
        fprintf(stderr, "  message \"%s\" lacks \"%s\"\n", msg, needle);
    return ok;
}

/* Writes docs given as flat token arrays, one sequence per document. */
static int write_simple(const char *prefix, int dtype, const uint32_t *const *docs, const size_t *lens, size_t ndocs)
{
    ds_writer *w;
    int rc = ds_writer_open(prefix, dtype, &w);
    for (size_t d = 0; rc == 0 && d < ndocs; d++) {
        uint32_t l = (uint32_t)lens[d];
        rc = ds_writer_add_document(w, docs[d], lens[d], &l, lens[d] ? 1 : 0);
    }
    if (rc == 0)
        rc = ds_writer_finalize(w);
    ds_writer_free(w);
    return rc;
}

/* ---- tests ---- */

static void test_version_and_errors(void)
{
    CHECK(ds_version() == DS_VERSION_NUMBER);
    CHECK(strcmp(ds_version_string(), "0.1.0") == 0);
    CHECK(strcmp(ds_strerror(0), "success") == 0);
    CHECK(strcmp(ds_strerror(DS_ERR_BAD_MAGIC), "bad magic (not an MMIDIDX index)") == 0);
    CHECK(strcmp(ds_strerror(12345), "unknown error") == 0);
    CHECK(strcmp(ds_strerror(DS_ERR_STATE), "unknown error") != 0);
}

static void test_dtypes(void)
{
    CHECK(ds_dtype_size(DS_DTYPE_UINT8) == 1);
    CHECK(ds_dtype_size(DS_DTYPE_INT8) == 1);
    CHECK(ds_dtype_size(DS_DTYPE_INT16) == 2);
    CHECK(ds_dtype_size(DS_DTYPE_INT32) == 4);
    CHECK(ds_dtype_size(DS_DTYPE_INT64) == 8);
    CHECK(ds_dtype_size(DS_DTYPE_FLOAT64) == 8);
    CHECK(ds_dtype_size(DS_DTYPE_FLOAT32) == 4);
    CHECK(ds_dtype_size(DS_DTYPE_UINT16) == 2);
    CHECK(ds_dtype_size(0) == 0 && ds_dtype_size(9) == 0 && ds_dtype_size(-1) == 0);
    CHECK(strcmp(ds_dtype_name(DS_DTYPE_UINT16), "uint16") == 0);
    CHECK(strcmp(ds_dtype_name(DS_DTYPE_INT32), "int32") == 0);
    CHECK(strcmp(ds_dtype_name(42), "unknown") == 0);
    CHECK(ds_dtype_for_vocab(50257) == DS_DTYPE_UINT16);
    CHECK(ds_dtype_for_vocab(65499) == DS_DTYPE_UINT16);
    CHECK(ds_dtype_for_vocab(65500) == DS_DTYPE_INT32);
    CHECK(ds_dtype_for_vocab(65536) == DS_DTYPE_INT32);
    CHECK(ds_dtype_for_vocab(0) == DS_DTYPE_UINT16);
}

/* Spec §1.2, verified against Megatron: 82 + 12 bytes. */
static void test_worked_example(void)
{
    static const uint8_t want_idx[82] = {
        0x4d, 0x4d, 0x49, 0x44, 0x49, 0x44, 0x58, 0x00, 0x00,
        1, 0, 0, 0, 0, 0, 0, 0,
        8,
        2, 0, 0, 0, 0, 0, 0, 0,
        3, 0, 0, 0, 0, 0, 0, 0,
        4, 0, 0, 0, 2, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,
    };
    static const uint8_t want_bin[12] = { 0x88, 0x3c, 0xe3, 0x03, 0x00, 0x00, 0x50, 0xc4, 0xdc, 0x00, 0x50, 0xc4 };
    static const uint32_t a[] = { 15496, 995, 0, 50256 }, b[] = { 220, 50256 };
    const uint32_t *docs[] = { a, b };
    const size_t lens[] = { 4, 2 };
    char prefix[512], p[600];
    pjoin(prefix, sizeof prefix, "example");
    CHECK(write_simple(prefix, DS_DTYPE_UINT16, docs, lens, 2) == 0);

    size_t n;
    snprintf(p, sizeof p, "%s.idx", prefix);
    uint8_t *idx = read_file_or_null(p, &n);
    CHECK(idx && n == sizeof want_idx && memcmp(idx, want_idx, n) == 0);
    free(idx);
    snprintf(p, sizeof p, "%s.bin", prefix);
    uint8_t *bin = read_file_or_null(p, &n);
    CHECK(bin && n == sizeof want_bin && memcmp(bin, want_bin, n) == 0);
    free(bin);

    ds_reader *r;
    CHECK(ds_reader_open(prefix, &r) == 0);
    CHECK(ds_reader_dtype(r) == DS_DTYPE_UINT16);
    CHECK(ds_reader_num_sequences(r) == 2);
    CHECK(ds_reader_num_documents(r) == 2);
    CHECK(ds_reader_num_tokens(r) == 6);
    CHECK(ds_reader_seq_length(r, 0) == 4 && ds_reader_seq_length(r, 1) == 2);
    CHECK(ds_reader_seq_pointer(r, 0) == 0 && ds_reader_seq_pointer(r, 1) == 8);
    CHECK(ds_reader_doc_index(r, 0) == 0 && ds_reader_doc_index(r, 1) == 1 && ds_reader_doc_index(r, 2) == 2);
    CHECK(ds_reader_token(r, 0, 0) == 15496 && ds_reader_token(r, 0, 3) == 50256);
    CHECK(ds_reader_token(r, 1, 0) == 220);
    CHECK(ds_reader_verify(r) == 0);
    const void *data;
    uint64_t len;
    CHECK(ds_reader_sequence(r, 1, &data, &len) == 0 && len == 2 && memcmp(data, want_bin + 8, 4) == 0);
    /* Out of range: safe values, never a read outside the index. */
    CHECK(ds_reader_sequence(r, 2, &data, &len) == DS_ERR_RANGE);
    CHECK(ds_reader_sequence(r, 0, NULL, &len) == DS_ERR_ARG);
    CHECK(ds_reader_seq_length(r, 2) == 0 && ds_reader_seq_pointer(r, 99) == 0 && ds_reader_doc_index(r, 3) == 0);
    CHECK(ds_reader_token(r, 0, 4) == INT64_MIN && ds_reader_token(r, 5, 0) == INT64_MIN);
    CHECK(strcmp(ds_reader_error(r), "") == 0);
    ds_reader_close(r);
}

/* Reads a golden dataset and writes it again document by document: the
   result must be byte-identical to Megatron's. */
static void roundtrip_golden(const char *name, uint64_t want_n, uint64_t want_d, uint64_t want_tokens)
{
    char src[512], dst[512], a[600], b[600];
    snprintf(src, sizeof src, "tests/data/golden/%s", name);
    pjoin(dst, sizeof dst, name);
    ds_reader *r;
    int rc = ds_reader_open(src, &r);
    CHECK(rc == 0);
    if (rc != 0) {
        fprintf(stderr, "  %s\n", ds_reader_error(r));
        ds_reader_close(r);
        return;
    }
    CHECK(ds_reader_dtype(r) == DS_DTYPE_UINT16);
    CHECK(ds_reader_num_sequences(r) == want_n);
    CHECK(ds_reader_num_documents(r) == want_d);
    CHECK(ds_reader_num_tokens(r) == want_tokens);
    CHECK(ds_reader_verify(r) == 0);

    /* Both goldens contain an empty document: a repeated document index. */
    int empty_docs = 0;
    for (uint64_t k = 0; k < want_d; k++)
        empty_docs += ds_reader_doc_index(r, k) == ds_reader_doc_index(r, k + 1);
    CHECK(empty_docs >= 1);

    ds_writer *w;
    CHECK(ds_writer_open(dst, ds_reader_dtype(r), &w) == 0);
    uint32_t *toks = NULL, *lens = NULL;
    for (uint64_t k = 0; k < want_d; k++) {
        uint64_t s0 = ds_reader_doc_index(r, k), s1 = ds_reader_doc_index(r, k + 1);
        size_t nt = 0, ns = 0;
        for (uint64_t s = s0; s < s1; s++)
            nt += ds_reader_seq_length(r, s);
        toks = realloc(toks, (nt + 1) * sizeof *toks);
        lens = realloc(lens, (s1 - s0 + 1) * sizeof *lens);
        nt = 0;
        for (uint64_t s = s0; s < s1; s++) {
            uint32_t l = ds_reader_seq_length(r, s);
            for (uint32_t t = 0; t < l; t++)
                toks[nt++] = (uint32_t)ds_reader_token(r, s, t);
            lens[ns++] = l;
        }
        CHECK(ds_writer_add_document(w, toks, nt, lens, ns) == 0);
    }
    free(toks);
    free(lens);
    CHECK(ds_writer_num_sequences(w) == want_n);
    CHECK(ds_writer_num_documents(w) == want_d);
    CHECK(ds_writer_num_tokens(w) == want_tokens);
    CHECK(ds_writer_finalize(w) == 0);
    ds_writer_free(w);
    ds_reader_close(r);

    snprintf(a, sizeof a, "%s.idx", src);
    snprintf(b, sizeof b, "%s.idx", dst);
    CHECK(files_equal(a, b));
    snprintf(a, sizeof a, "%s.bin", src);
    snprintf(b, sizeof b, "%s.bin", dst);
    CHECK(files_equal(a, b));
}

static void test_golden_edge_list(void)
{
    roundtrip_golden("edge-list_text_document", 11, 8, 44);
}

static void test_golden_edge(void)
{
    roundtrip_golden("edge_text_document", 65, 66, 1481395);
}

/* Dataset used by the merge and corruption tests: uint16, documents
   [1 2 3], (empty), [4 5 | 6]; N = 3, D = 3, document_indices [0 1 1 3],
   pointers [0 6 10].  Its .idx is 102 bytes, its .bin 12. */
static int write_small(const char *prefix)
{
    ds_writer *w;
    static const uint32_t d0[] = { 1, 2, 3 }, d2[] = { 4, 5, 6 };
    static const uint32_t l0[] = { 3 }, l2[] = { 2, 1 };
    int rc = ds_writer_open(prefix, DS_DTYPE_UINT16, &w);
    if (rc == 0) rc = ds_writer_add_document(w, d0, 3, l0, 1);
    if (rc == 0) rc = ds_writer_add_document(w, NULL, 0, NULL, 0);
    if (rc == 0) rc = ds_writer_add_document(w, d2, 3, l2, 2);
    if (rc == 0) rc = ds_writer_finalize(w);
    ds_writer_free(w);
    return rc;
}

static void test_merge(void)
{
    char small[512], merged[512], direct[512], a[600], b[600];
    pjoin(small, sizeof small, "small");
    pjoin(merged, sizeof merged, "merged");
    pjoin(direct, sizeof direct, "direct");
    CHECK(write_small(small) == 0);

    ds_reader *r;
    CHECK(ds_reader_open(small, &r) == 0);
    static const uint32_t x[] = { 9, 9 }, lx[] = { 2 };

    ds_writer *w;
    CHECK(ds_writer_open(merged, DS_DTYPE_UINT16, &w) == 0);
    CHECK(ds_writer_add_document(w, x, 2, lx, 1) == 0);
    CHECK(ds_writer_add_dataset(w, r) == 0);
    CHECK(ds_writer_add_dataset(w, r) == 0);
    CHECK(ds_writer_num_sequences(w) == 7);
    CHECK(ds_writer_num_documents(w) == 7);
    CHECK(ds_writer_num_tokens(w) == 14);
    CHECK(ds_writer_finalize(w) == 0);
    ds_writer_free(w);

    /* The same documents written one by one must give the same bytes. */
    static const uint32_t d0[] = { 1, 2, 3 }, d2[] = { 4, 5, 6 }, l0[] = { 3 }, l2[] = { 2, 1 };
    CHECK(ds_writer_open(direct, DS_DTYPE_UINT16, &w) == 0);
    CHECK(ds_writer_add_document(w, x, 2, lx, 1) == 0);
    for (int i = 0; i < 2; i++) {
        CHECK(ds_writer_add_document(w, d0, 3, l0, 1) == 0);
        CHECK(ds_writer_add_document(w, NULL, 0, NULL, 0) == 0);
        CHECK(ds_writer_add_document(w, d2, 3, l2, 2) == 0);
    }
    CHECK(ds_writer_finalize(w) == 0);
    ds_writer_free(w);
    snprintf(a, sizeof a, "%s.idx", merged);
    snprintf(b, sizeof b, "%s.idx", direct);
    CHECK(files_equal(a, b));
    snprintf(a, sizeof a, "%s.bin", merged);
    snprintf(b, sizeof b, "%s.bin", direct);
    CHECK(files_equal(a, b));

    ds_reader *m;
    CHECK(ds_reader_open(merged, &m) == 0);
    static const uint64_t want_doc[] = { 0, 1, 2, 2, 4, 5, 5, 7 };
    static const uint64_t want_ptr[] = { 0, 4, 10, 14, 16, 22, 26 };
    for (int k = 0; k < 8; k++)
        CHECK(ds_reader_doc_index(m, (uint64_t)k) == want_doc[k]);
    for (int i = 0; i < 7; i++)
        CHECK(ds_reader_seq_pointer(m, (uint64_t)i) == want_ptr[i]);
    CHECK(ds_reader_token(m, 6, 0) == 6 && ds_reader_token(m, 4, 0) == 1);
    CHECK(ds_reader_verify(m) == 0);
    ds_reader_close(m);

    /* dtype mismatch */
    CHECK(ds_writer_open(merged, DS_DTYPE_INT32, &w) == 0);
    CHECK(ds_writer_add_dataset(w, r) == DS_ERR_ARG);
    CHECK(has(ds_writer_error(w), "dtype uint16 but the writer has dtype int32"));
    CHECK(ds_writer_add_dataset(w, NULL) == DS_ERR_ARG);
    ds_writer_free(w);
    ds_reader_close(r);
}

/* A hand-written .idx over a sparse 6 GiB .bin: pointers beyond 2^31 and
   2^32 must survive as 64-bit values. */
static void test_sparse_large(void)
{
    const uint64_t L0 = (uint64_t)1 << 30, L1 = 0x7fffffff, L2 = 1000;
    const uint64_t P1 = L0 * 2, P2 = P1 + L1 * 2, total = P2 + L2 * 2;
    char prefix[512], p[600];
    pjoin(prefix, sizeof prefix, "sparse");

    uint8_t idx[34 + 12 * 3 + 8 * 3];
    memcpy(idx, "MMIDIDX\0\0", 9);
    put_le(idx + 9, 1, 8);
    idx[17] = DS_DTYPE_UINT16;
    put_le(idx + 18, 3, 8);
    put_le(idx + 26, 3, 8);
    put_le(idx + 34, L0, 4);
    put_le(idx + 38, L1, 4);
    put_le(idx + 42, L2, 4);
    put_le(idx + 46, 0, 8);
    put_le(idx + 54, P1, 8);
    put_le(idx + 62, P2, 8);
    put_le(idx + 70, 0, 8);
    put_le(idx + 78, 1, 8);
    put_le(idx + 86, 3, 8);
    snprintf(p, sizeof p, "%s.idx", prefix);
    CHECK(spit(p, idx, sizeof idx) == 0);

    snprintf(p, sizeof p, "%s.bin", prefix);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    int ok = ftruncate(fd, (off_t)total) == 0;
    CHECK(ok);
    /* Marker tokens at the ends of the big sequences. */
    static const uint8_t m1[2] = { 0x34, 0x12 }, m2[2] = { 0xcd, 0xab }, m3[2] = { 0xff, 0xff };
    CHECK(pwrite(fd, m1, 2, (off_t)(P1 + (L1 - 1) * 2)) == 2);
    CHECK(pwrite(fd, m2, 2, (off_t)P2) == 2);
    CHECK(pwrite(fd, m3, 2, (off_t)(total - 2)) == 2);
    close(fd);
    if (!ok)
        return;

    ds_reader *r;
    int rc = ds_reader_open(prefix, &r);
    CHECK(rc == 0);
    if (rc != 0)
        fprintf(stderr, "  %s\n", ds_reader_error(r));
    CHECK(ds_reader_num_tokens(r) == L0 + L1 + L2);
    CHECK(ds_reader_seq_pointer(r, 1) == P1 && P1 > 0x7fffffffULL);
    CHECK(ds_reader_seq_pointer(r, 2) == P2 && P2 > 0xffffffffULL);
    CHECK(ds_reader_seq_length(r, 1) == L1);
    CHECK(ds_reader_verify(r) == 0);
    CHECK(ds_reader_token(r, 1, L1 - 1) == 0x1234);
    CHECK(ds_reader_token(r, 2, 0) == 0xabcd);
    CHECK(ds_reader_token(r, 2, L2 - 1) == 0xffff);
    CHECK(ds_reader_token(r, 1, 0) == 0);
    ds_reader_close(r);

    /* What Megatron's int32 accumulator bug produced: pointers wrapped. */
    snprintf(p, sizeof p, "%s.idx", prefix);
    put_le(idx + 54, (uint64_t)(int64_t)INT32_MIN, 8);
    CHECK(spit(p, idx, sizeof idx) == 0);
    CHECK(ds_reader_open(prefix, &r) == 0);
    CHECK(ds_reader_verify(r) == DS_ERR_CORRUPT);
    CHECK(has(ds_reader_error(r), "sequence_pointers[1] is -2147483648 but the lengths before it imply 2147483648"));
    const void *data;
    uint64_t len;
    CHECK(ds_reader_sequence(r, 1, &data, &len) == DS_ERR_CORRUPT);
    ds_reader_close(r);
    put_le(idx + 54, P1, 8);
    put_le(idx + 62, P2 & 0xffffffffULL, 8);
    CHECK(spit(p, idx, sizeof idx) == 0);
    CHECK(ds_reader_open(prefix, &r) == 0);
    CHECK(ds_reader_verify(r) == DS_ERR_CORRUPT);
    CHECK(has(ds_reader_error(r), "sequence_pointers[2]"));
    ds_reader_close(r);

    snprintf(p, sizeof p, "%s.bin", prefix);
    unlink(p);
}

/* ---- the corrupt-index catalogue ---- */

enum { F_IDX, F_BIN };

struct corruption {
    const char *name;
    int file;            /* F_IDX or F_BIN */
    long size;           /* new size of that file (truncate or zero-extend), -1 to keep */
    size_t off;          /* patch offset */
    int width;           /* bytes patched, 0 for none */
    uint64_t val;        /* little-endian value patched */
    int rc;              /* expected from ds_reader_open */
    int verify_rc;       /* expected from ds_reader_verify when open succeeds */
    const char *needle;  /* substring of the message */
};

/* Offsets in the small dataset: lengths at 34, pointers at 46, document
   indices at 70, size 102. */
static const struct corruption corruptions[] = {
    { "truncated bin", F_BIN, 11, 0, 0, 0, DS_ERR_SIZE, 0,
      ".bin': sequence_lengths sum to 6 tokens of 2 bytes (12 bytes) but the file has 11" },
    { "bin too long", F_BIN, 13, 0, 0, 0, DS_ERR_SIZE, 0, "but the file has 13" },
    { "truncated idx", F_IDX, 101, 0, 0, 0, DS_ERR_SIZE, 0,
      ".idx': sequence_count 3 and document_count 4 imply 102 bytes but the file has 101" },
    { "idx shorter than header", F_IDX, 20, 0, 0, 0, DS_ERR_SIZE, 0, "shorter than the 34-byte header" },
    { "idx of 4 bytes", F_IDX, 4, 0, 0, 0, DS_ERR_SIZE, 0, "file has 4 bytes" },
    { "empty idx", F_IDX, 0, 0, 0, 0, DS_ERR_SIZE, 0, "file has 0 bytes" },
    { "wrong magic", F_IDX, -1, 3, 1, 'X', DS_ERR_BAD_MAGIC, 0, "bad magic 4d 4d 49 58 49" },
    { "wrong magic, short file", F_IDX, 5, 0, 1, 'Q', DS_ERR_BAD_MAGIC, 0, "bad magic 51 4d 49 44 49 (expected" },
    { "legacy TNTIDX", F_IDX, -1, 0, 8, 0x0000584449544e54ULL /* "TNTIDX\0\0" */, DS_ERR_UNSUPPORTED, 0,
      "legacy lazy/cached format" },
    { "version 2", F_IDX, -1, 9, 8, 2, DS_ERR_BAD_VERSION, 0, "version 2, only version 1" },
    { "version 0", F_IDX, -1, 9, 8, 0, DS_ERR_BAD_VERSION, 0, "version 0" },
    { "dtype 9", F_IDX, -1, 17, 1, 9, DS_ERR_BAD_DTYPE, 0, "unknown dtype code 9" },
    { "dtype 0", F_IDX, -1, 17, 1, 0, DS_ERR_BAD_DTYPE, 0, "unknown dtype code 0" },
    { "dtype 255", F_IDX, -1, 17, 1, 255, DS_ERR_BAD_DTYPE, 0, "unknown dtype code 255" },
    { "dtype 7 ambiguous", F_IDX, -1, 17, 1, 7, DS_ERR_UNSUPPORTED, 0, "float32 in current Megatron, float64" },
    { "dtype uint8 vs bin size", F_IDX, -1, 17, 1, 1, DS_ERR_SIZE, 0, "sum to 6 tokens of 1 bytes (6 bytes)" },
    { "sequence_count overflows", F_IDX, -1, 18, 8, 1ULL << 62, DS_ERR_SIZE, 0,
      "sequence_count 4611686018427387904 is too large" },
    { "document_count overflows", F_IDX, -1, 26, 8, 1ULL << 62, DS_ERR_SIZE, 0,
      "document_count 4611686018427387904 is too large" },
    { "sequence_count off by one", F_IDX, -1, 18, 8, 4, DS_ERR_SIZE, 0,
      "sequence_count 4 and document_count 4 imply 114 bytes but the file has 102" },
    { "document_count off by one", F_IDX, -1, 26, 8, 3, DS_ERR_SIZE, 0, "imply 94 bytes" },
    { "document_count 0", F_IDX, 70, 26, 8, 0, DS_ERR_CORRUPT, 0, "document_count is 0" },
    { "document index not starting at 0", F_IDX, -1, 70, 8, 1, DS_ERR_CORRUPT, 0,
      "document_indices[0] is 1, must be 0" },
    { "document index decreasing", F_IDX, -1, 86, 8, 0, DS_ERR_CORRUPT, 0,
      "document_indices[2] is 0, less than document_indices[1] = 1" },
    { "document index last != N", F_IDX, -1, 94, 8, 2, DS_ERR_CORRUPT, 0,
      "document_indices[3] (the last) is 2 but sequence_count is 3" },
    { "document index last > N", F_IDX, -1, 94, 8, 4, DS_ERR_CORRUPT, 0, "(the last) is 4" },
    { "document index negative", F_IDX, -1, 94, 8, (uint64_t)-1, DS_ERR_CORRUPT, 0,
      "document_indices[3] is -1, less than" },
    { "negative length", F_IDX, -1, 38, 4, 0xffffffffULL, DS_ERR_CORRUPT, 0, "sequence_lengths[1] is -1" },
    { "length too long for bin", F_IDX, -1, 34, 4, 4, DS_ERR_SIZE, 0, "sum to 7 tokens" },
    { "multimodal modes", F_IDX, 105, 0, 0, 0, DS_ERR_UNSUPPORTED, 0, "multimodal" },
    { "pointer drift", F_IDX, -1, 62, 8, 8, 0, DS_ERR_CORRUPT,
      "sequence_pointers[2] is 8 but the lengths before it imply 10" },
    { "pointer beyond bin", F_IDX, -1, 62, 8, 1000, 0, DS_ERR_CORRUPT, "sequence_pointers[2] is 1000" },
    { "pointer negative", F_IDX, -1, 54, 8, (uint64_t)-2, 0, DS_ERR_CORRUPT, "sequence_pointers[1] is -2" },
    { "first pointer not 0", F_IDX, -1, 46, 8, 2, 0, DS_ERR_CORRUPT, "sequence_pointers[0] is 2 but" },
};

static void test_corrupt_catalogue(void)
{
    char small[512], bad[512];
    pjoin(small, sizeof small, "small");
    pjoin(bad, sizeof bad, "bad");
    CHECK(write_small(small) == 0);
    for (size_t c = 0; c < sizeof corruptions / sizeof corruptions[0]; c++) {
        const struct corruption *k = &corruptions[c];
        char path[600];
        CHECK(copy_dataset(small, bad) == 0);
        snprintf(path, sizeof path, "%s%s", bad, k->file == F_IDX ? ".idx" : ".bin");
        size_t n;
        uint8_t *p = read_file_or_null(path, &n);
        if (!p) {
            CHECK(p != NULL);
            continue;
        }
        size_t nn = k->size >= 0 ? (size_t)k->size : n;
        uint8_t *q = calloc(1, nn + 8);
        memcpy(q, p, nn < n ? nn : n);
        if (k->width)
            put_le(q + k->off, k->val, k->width);
        CHECK(spit(path, q, nn) == 0);
        free(p);
        free(q);

        ds_reader *r = NULL;
        int rc = ds_reader_open(bad, &r);
        int ok = rc == k->rc;
        const char *needle_file = k->file == F_IDX && rc != DS_ERR_SIZE ? ".idx'" : "'";
        if (ok && rc == 0) {
            rc = ds_reader_verify(r);
            ok = rc == k->verify_rc;
            if (k->verify_rc == DS_ERR_CORRUPT) {
                /* Every accessor stays in bounds whatever the pointers say. */
                for (uint64_t i = 0; i < ds_reader_num_sequences(r); i++) {
                    const void *data;
                    uint64_t len;
                    int src = ds_reader_sequence(r, i, &data, &len);
                    ok &= src == 0 || src == DS_ERR_CORRUPT;
                    (void)ds_reader_token(r, i, 0);
                }
            }
        }
        ok = ok && r != NULL && has(ds_reader_error(r), k->needle) && has(ds_reader_error(r), needle_file);
        if (!ok)
            fprintf(stderr, "  corruption \"%s\": rc %d, message \"%s\"\n", k->name, rc,
                    r ? ds_reader_error(r) : "(null)");
        CHECK(ok);
        /* A failed handle answers safely. */
        if (k->rc != 0) {
            CHECK(ds_reader_num_sequences(r) == 0 && ds_reader_seq_pointer(r, 0) == 0);
            CHECK(ds_reader_verify(r) == DS_ERR_ARG);
        }
        ds_reader_close(r);
    }

    /* Each count fits alone but the sum overflows. */
    {
        char path[600];
        CHECK(copy_dataset(small, bad) == 0);
        snprintf(path, sizeof path, "%s.idx", bad);
        size_t n;
        uint8_t *p = read_file_or_null(path, &n);
        CHECK(p && n == 102);
        if (p) {
            put_le(p + 18, 1ULL << 60, 8);
            put_le(p + 26, 1ULL << 59, 8);
            CHECK(spit(path, p, n) == 0);
            free(p);
        }
        ds_reader *r;
        CHECK(ds_reader_open(bad, &r) == DS_ERR_SIZE);
        CHECK(has(ds_reader_error(r), "sequence_count 1152921504606846976 and document_count "
                  "576460752303423488 overflow a 64-bit size"));
        ds_reader_close(r);
    }

    /* A pointer out of bounds is refused by the accessors, not followed. */
    {
        char path[600];
        CHECK(copy_dataset(small, bad) == 0);
        snprintf(path, sizeof path, "%s.idx", bad);
        size_t n;
        uint8_t *p = read_file_or_null(path, &n);
        CHECK(p && n == 102);
        if (p) {
            put_le(p + 62, 11, 8);  /* sequence 2 (1 token) would end at byte 13 of 12 */
            CHECK(spit(path, p, n) == 0);
            free(p);
        }
        ds_reader *r;
        CHECK(ds_reader_open(bad, &r) == 0);
        const void *data;
        uint64_t len;
        CHECK(ds_reader_sequence(r, 2, &data, &len) == DS_ERR_CORRUPT);
        CHECK(ds_reader_token(r, 2, 0) == INT64_MIN);
        CHECK(ds_reader_sequence(r, 1, &data, &len) == 0 && len == 2);
        ds_reader_close(r);
    }

    /* Missing files, and a directory where the .idx should be. */
    {
        char path[600];
        ds_reader *r;
        snprintf(path, sizeof path, "%s.bin", bad);
        unlink(path);
        CHECK(ds_reader_open(bad, &r) == DS_ERR_IO);
        CHECK(has(ds_reader_error(r), "cannot open '") && has(ds_reader_error(r), ".bin'"));
        ds_reader_close(r);
        snprintf(path, sizeof path, "%s.idx", bad);
        unlink(path);
        CHECK(ds_reader_open(bad, &r) == DS_ERR_IO);
        CHECK(has(ds_reader_error(r), ".idx': No such file"));
        ds_reader_close(r);
        CHECK(mkdir(path, 0755) == 0);
        CHECK(ds_reader_open(bad, &r) == DS_ERR_IO);
        CHECK(has(ds_reader_error(r), "not a regular file"));
        ds_reader_close(r);
        rmdir(path);
        CHECK(ds_reader_open(NULL, &r) == DS_ERR_ARG);
        ds_reader_close(r);
        CHECK(ds_reader_open(bad, NULL) == DS_ERR_ARG);
        ds_reader_close(NULL);
        CHECK(strcmp(ds_reader_error(NULL), "out of memory") == 0);
    }
}

static void test_writer_errors(void)
{
    char prefix[512], p[600];
    pjoin(prefix, sizeof prefix, "werr");
    ds_writer *w;

    CHECK(ds_writer_open(prefix, 0, &w) == DS_ERR_BAD_DTYPE);
    CHECK(has(ds_writer_error(w), "unknown dtype code 0"));
    CHECK(ds_writer_add_document(w, NULL, 0, NULL, 0) == DS_ERR_STATE);
    ds_writer_free(w);
    CHECK(ds_writer_open(prefix, DS_DTYPE_FLOAT32, &w) == DS_ERR_UNSUPPORTED);
    ds_writer_free(w);
    CHECK(ds_writer_open(prefix, DS_DTYPE_FLOAT64, &w) == DS_ERR_UNSUPPORTED);
    CHECK(has(ds_writer_error(w), "float64 is not a token dtype"));
    ds_writer_free(w);
    CHECK(ds_writer_open(NULL, DS_DTYPE_UINT16, &w) == DS_ERR_ARG);
    ds_writer_free(w);
    CHECK(ds_writer_open(prefix, DS_DTYPE_UINT16, NULL) == DS_ERR_ARG);
    snprintf(p, sizeof p, "%s/no/such/dir/x", g_dir);
    CHECK(ds_writer_open(p, DS_DTYPE_UINT16, &w) == DS_ERR_IO);
    CHECK(has(ds_writer_error(w), "cannot create '") && has(ds_writer_error(w), "No such file"));
    ds_writer_free(w);
    ds_writer_free(NULL);
    CHECK(strcmp(ds_writer_error(NULL), "out of memory") == 0);
    CHECK(ds_writer_add_document(NULL, NULL, 0, NULL, 0) == DS_ERR_ARG);
    CHECK(ds_writer_finalize(NULL) == DS_ERR_ARG);
    CHECK(ds_writer_num_documents(NULL) == 0);

    CHECK(ds_writer_open(prefix, DS_DTYPE_UINT16, &w) == 0);
    size_t nt = 99;
    const char *const *tp = ds_writer_temp_paths(w, &nt);
    CHECK(tp != NULL && nt == 4);
    char want[600];
    snprintf(want, sizeof want, "%s.bin.tmp.%ld", prefix, (long)getpid());
    CHECK(tp && strcmp(tp[0], want) == 0);
    snprintf(want, sizeof want, "%s.idx.tmp.%ld", prefix, (long)getpid());
    CHECK(tp && strcmp(tp[1], want) == 0);
    CHECK(tp && file_exists(tp[0]));

    static const uint32_t t[] = { 1, 2, 65535, 65536, 7 };
    uint32_t l1[] = { 3 }, l2[] = { 2, 2 }, lbig[] = { 0x80000000u };
    CHECK(ds_writer_add_document(w, t, 3, l1, 1) == 0);
    CHECK(ds_writer_add_document(w, t, 3, l2, 2) == DS_ERR_ARG);
    CHECK(has(ds_writer_error(w), "document 1: sequence lengths sum to 4 but ntokens is 3"));
    CHECK(ds_writer_add_document(w, t, 3, NULL, 0) == DS_ERR_ARG);
    CHECK(ds_writer_add_document(w, NULL, 3, l1, 1) == DS_ERR_ARG);
    CHECK(ds_writer_add_document(w, NULL, 0, l1, 1) == DS_ERR_ARG);
    CHECK(ds_writer_add_document(w, t, 5, (uint32_t[]){ 5 }, 1) == DS_ERR_RANGE);
    CHECK(has(ds_writer_error(w), "token id 65536 at position 3 does not fit dtype uint16 (max 65535)"));
    CHECK(ds_writer_add_document(w, t, 0, lbig, 1) == DS_ERR_RANGE);
    CHECK(has(ds_writer_error(w), "sequence length 2147483648 does not fit int32"));
    /* Refused documents wrote nothing; the writer goes on. */
    CHECK(ds_writer_num_documents(w) == 1 && ds_writer_num_sequences(w) == 1 && ds_writer_num_tokens(w) == 3);
    CHECK(ds_writer_add_document(w, t + 1, 2, (uint32_t[]){ 0, 2 }, 2) == 0);  /* a 0-length sequence */
    snprintf(p, sizeof p, "%s.idx", prefix);
    CHECK(!file_exists(p));
    CHECK(ds_writer_finalize(w) == 0);
    CHECK(file_exists(p));
    CHECK(!file_exists(tp[0]) && !file_exists(tp[1]) && !file_exists(tp[2]) && !file_exists(tp[3]));
    CHECK(ds_writer_finalize(w) == DS_ERR_STATE);
    CHECK(ds_writer_add_document(w, t, 3, l1, 1) == DS_ERR_STATE);
    CHECK(has(ds_writer_error(w), "already finalized"));
    CHECK(ds_writer_num_documents(w) == 2 && ds_writer_num_sequences(w) == 3);
    ds_writer_free(w);

    ds_reader *r;
    CHECK(ds_reader_open(prefix, &r) == 0);
    CHECK(ds_reader_num_sequences(r) == 3 && ds_reader_seq_length(r, 1) == 0);
    CHECK(ds_reader_token(r, 2, 1) == 65535);
    CHECK(ds_reader_verify(r) == 0);
    ds_reader_close(r);

    /* Rewriting replaces the dataset; an abandoned writer leaves nothing. */
    static const uint32_t one[] = { 42 }, lone[] = { 1 };
    CHECK(ds_writer_open(prefix, DS_DTYPE_INT32, &w) == 0);
    CHECK(ds_writer_add_document(w, one, 1, lone, 1) == 0);
    CHECK(ds_writer_finalize(w) == 0);
    ds_writer_free(w);
    CHECK(ds_reader_open(prefix, &r) == 0);
    CHECK(ds_reader_dtype(r) == DS_DTYPE_INT32 && ds_reader_num_sequences(r) == 1 && ds_reader_token(r, 0, 0) == 42);
    ds_reader_close(r);

    char gone[512];
    pjoin(gone, sizeof gone, "abandoned");
    CHECK(ds_writer_open(gone, DS_DTYPE_UINT16, &w) == 0);
    CHECK(ds_writer_add_document(w, one, 1, lone, 1) == 0);
    tp = ds_writer_temp_paths(w, &nt);
    CHECK(file_exists(tp[0]));
    char keep[4][600];
    for (int i = 0; i < 4; i++)
        snprintf(keep[i], sizeof keep[i], "%s", tp[i]);
    ds_writer_free(w);
    for (int i = 0; i < 4; i++)
        CHECK(!file_exists(keep[i]));
    snprintf(p, sizeof p, "%s.bin", gone);
    CHECK(!file_exists(p));
    CHECK(ds_writer_temp_paths(NULL, &nt) == NULL && nt == 0);
}

static void test_empty_datasets(void)
{
    char prefix[512], p[600];
    pjoin(prefix, sizeof prefix, "empty");
    ds_writer *w;
    ds_reader *r;
    size_t n;

    /* No documents at all: a 42-byte .idx and a 0-byte .bin. */
    CHECK(ds_writer_open(prefix, DS_DTYPE_UINT16, &w) == 0);
    CHECK(ds_writer_finalize(w) == 0);
    ds_writer_free(w);
    snprintf(p, sizeof p, "%s.idx", prefix);
    uint8_t *idx = read_file_or_null(p, &n);
    CHECK(idx && n == 42 && idx[26] == 1);
    free(idx);
    snprintf(p, sizeof p, "%s.bin", prefix);
    free(read_file_or_null(p, &n));
    CHECK(n == 0 && file_exists(p));
    CHECK(ds_reader_open(prefix, &r) == 0);
    CHECK(ds_reader_num_sequences(r) == 0 && ds_reader_num_documents(r) == 0 && ds_reader_num_tokens(r) == 0);
    CHECK(ds_reader_verify(r) == 0);
    const void *data;
    uint64_t len;
    CHECK(ds_reader_sequence(r, 0, &data, &len) == DS_ERR_RANGE);
    ds_reader_close(r);

    /* Only empty documents, then one empty sequence: still a 0-byte .bin. */
    CHECK(ds_writer_open(prefix, DS_DTYPE_UINT16, &w) == 0);
    for (int i = 0; i < 3; i++)
        CHECK(ds_writer_add_document(w, NULL, 0, NULL, 0) == 0);
    CHECK(ds_writer_add_document(w, NULL, 0, (uint32_t[]){ 0 }, 1) == 0);
    CHECK(ds_writer_finalize(w) == 0);
    ds_writer_free(w);
    CHECK(ds_reader_open(prefix, &r) == 0);
    CHECK(ds_reader_num_sequences(r) == 1 && ds_reader_num_documents(r) == 4);
    CHECK(ds_reader_doc_index(r, 3) == 0 && ds_reader_doc_index(r, 4) == 1);
    CHECK(ds_reader_sequence(r, 0, &data, &len) == 0 && len == 0 && data != NULL);
    CHECK(ds_reader_verify(r) == 0);
    ds_reader_close(r);
}

static void test_all_dtypes(void)
{
    static const struct { int dtype; uint32_t max; int64_t max_read; } cases[] = {
        { DS_DTYPE_UINT8, 255, 255 },
        { DS_DTYPE_INT8, 127, 127 },
        { DS_DTYPE_INT16, 32767, 32767 },
        { DS_DTYPE_UINT16, 65535, 65535 },
        { DS_DTYPE_INT32, 0x7fffffff, 0x7fffffff },
        { DS_DTYPE_INT64, 0xffffffff, 0xffffffff },
    };
    char prefix[512];
    pjoin(prefix, sizeof prefix, "dtypes");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ds_writer *w;
        uint32_t t[4] = { 0, 1, cases[c].max - 1, cases[c].max };
        uint32_t over[1] = { cases[c].max + 1 }, l4[] = { 4 }, l1[] = { 1 };
        CHECK(ds_writer_open(prefix, cases[c].dtype, &w) == 0);
        CHECK(ds_writer_add_document(w, t, 4, l4, 1) == 0);
        if (cases[c].max != 0xffffffff)
            CHECK(ds_writer_add_document(w, over, 1, l1, 1) == DS_ERR_RANGE);
        CHECK(ds_writer_finalize(w) == 0);
        ds_writer_free(w);
        ds_reader *r;
        CHECK(ds_reader_open(prefix, &r) == 0);
        CHECK(ds_reader_dtype(r) == cases[c].dtype);
        CHECK(ds_reader_num_tokens(r) == 4);
        CHECK(ds_reader_token(r, 0, 0) == 0 && ds_reader_token(r, 0, 1) == 1);
        CHECK(ds_reader_token(r, 0, 2) == cases[c].max_read - 1);
        CHECK(ds_reader_token(r, 0, 3) == cases[c].max_read);
        ds_reader_close(r);
    }

    /* Negative values on disk read back signed; float64 is truncated. */
    char p[600];
    uint8_t idx[34 + 12 + 16];
    memcpy(idx, "MMIDIDX\0\0", 9);
    put_le(idx + 9, 1, 8);
    put_le(idx + 18, 1, 8);
    put_le(idx + 26, 2, 8);
    put_le(idx + 34, 2, 4);
    put_le(idx + 38, 0, 8);
    put_le(idx + 46, 0, 8);
    put_le(idx + 54, 1, 8);
    static const struct { int dtype; uint64_t a, b; int64_t ra, rb; } neg[] = {
        { DS_DTYPE_INT8, 0xff, 0x80, -1, -128 },
        { DS_DTYPE_INT16, 0xffff, 0x8000, -1, -32768 },
        { DS_DTYPE_INT32, 0xfffffffe, 0x80000000, -2, INT32_MIN },
        { DS_DTYPE_INT64, (uint64_t)-3, 1ULL << 63, -3, INT64_MIN },
        { DS_DTYPE_FLOAT64, 0xc004000000000000ULL /* -2.5 */, 0x7ff8000000000000ULL /* NaN */, -2, INT64_MIN },
    };
    for (size_t c = 0; c < sizeof neg / sizeof neg[0]; c++) {
        size_t isz = ds_dtype_size(neg[c].dtype);
        uint8_t bin[16];
        idx[17] = (uint8_t)neg[c].dtype;
        put_le(bin, neg[c].a, (int)isz);
        put_le(bin + isz, neg[c].b, (int)isz);
        snprintf(p, sizeof p, "%s.idx", prefix);
        CHECK(spit(p, idx, sizeof idx) == 0);
        snprintf(p, sizeof p, "%s.bin", prefix);
        CHECK(spit(p, bin, 2 * isz) == 0);
        ds_reader *r;
        CHECK(ds_reader_open(prefix, &r) == 0);
        CHECK(ds_reader_token(r, 0, 0) == neg[c].ra);
        CHECK(ds_reader_token(r, 0, 1) == neg[c].rb);
        ds_reader_close(r);
    }
}

/*
 * ds_decode_tokens: every dtype from little-endian bytes read at an odd
 * address, signed dtypes sign-extended, float64 truncated toward zero, and
 * INT64_MIN for NaN, the infinities, values outside int64 and the codes the
 * library does not read (whose src is never touched: NULL here).
 */
static void test_decode_tokens(void)
{
    uint8_t buf[1 + 16 * 8];
    uint8_t *src = buf + 1;
    int64_t out[16];

    static const uint8_t b8[] = {0x00, 0x7f, 0x80, 0xff};
    memcpy(src, b8, sizeof b8);
    ds_decode_tokens(out, src, 4, DS_DTYPE_UINT8);
    CHECK(out[0] == 0 && out[1] == 127 && out[2] == 128 && out[3] == 255);
    ds_decode_tokens(out, src, 4, DS_DTYPE_INT8);
    CHECK(out[0] == 0 && out[1] == 127 && out[2] == -128 && out[3] == -1);

    static const uint8_t b16[] = {0x34, 0x12, 0xff, 0x7f, 0x00, 0x80, 0xff, 0xff};
    memcpy(src, b16, sizeof b16);
    ds_decode_tokens(out, src, 4, DS_DTYPE_UINT16);
    CHECK(out[0] == 0x1234 && out[1] == 32767 && out[2] == 32768 && out[3] == 65535);
    ds_decode_tokens(out, src, 4, DS_DTYPE_INT16);
    CHECK(out[0] == 0x1234 && out[1] == 32767 && out[2] == -32768 && out[3] == -1);

    static const uint8_t b32[] = {0x78, 0x56, 0x34, 0x12, 0xff, 0xff, 0xff, 0x7f,
                                  0x00, 0x00, 0x00, 0x80, 0xfe, 0xff, 0xff, 0xff};
    memcpy(src, b32, sizeof b32);
    ds_decode_tokens(out, src, 4, DS_DTYPE_INT32);
    CHECK(out[0] == 0x12345678 && out[1] == INT32_MAX && out[2] == INT32_MIN && out[3] == -2);

    static const uint64_t v64[] = {0x0123456789abcdefULL, 0x7fffffffffffffffULL, 1ULL << 63, (uint64_t)-3};
    for (int i = 0; i < 4; i++)
        put_le(src + 8 * i, v64[i], 8);
    ds_decode_tokens(out, src, 4, DS_DTYPE_INT64);
    CHECK(out[0] == 0x0123456789abcdefLL && out[1] == INT64_MAX && out[2] == INT64_MIN && out[3] == -3);

    static const struct { double x; int64_t want; } f64[] = {
        { 50256.0, 50256 },
        { 2.9, 2 },
        { -2.9, -2 },
        { 0.5, 0 },
        { -0.5, 0 },
        { -0.0, 0 },
        { 9223372036854774784.0, 9223372036854774784LL },   /* the largest double below 2^63 */
        { -9223372036854775808.0, INT64_MIN },              /* -2^63 fits */
        { 9223372036854775808.0, INT64_MIN },               /* 2^63 does not */
        { -9223372036854777856.0, INT64_MIN },              /* the next double below -2^63 */
        { 1e300, INT64_MIN },
        { -1e19, INT64_MIN },
        { NAN, INT64_MIN },
        { -NAN, INT64_MIN },
        { INFINITY, INT64_MIN },
        { -INFINITY, INT64_MIN },
    };
    size_t nf = sizeof f64 / sizeof f64[0];
    for (size_t i = 0; i < nf; i++) {
        uint64_t u;
        memcpy(&u, &f64[i].x, sizeof u);
        put_le(src + 8 * i, u, 8);
    }
    ds_decode_tokens(out, src, nf, DS_DTYPE_FLOAT64);
    for (size_t i = 0; i < nf; i++) {
        if (out[i] != f64[i].want)
            fprintf(stderr, "decode_tokens: float64 %.17g gave %lld, want %lld\n", f64[i].x,
                    (long long)out[i], (long long)f64[i].want);
        CHECK(out[i] == f64[i].want);
    }

    static const int unread[] = {0, DS_DTYPE_FLOAT32, 9, -1};
    for (size_t c = 0; c < sizeof unread / sizeof unread[0]; c++) {
        out[0] = out[1] = out[2] = 0;
        ds_decode_tokens(out, NULL, 3, unread[c]);
        CHECK(out[0] == INT64_MIN && out[1] == INT64_MIN && out[2] == INT64_MIN);
    }
    out[0] = 7;
    ds_decode_tokens(out, NULL, 0, DS_DTYPE_INT32);
    CHECK(out[0] == 7);
}

/*
 * ds_py_float_repr: Python's repr(float).  The expected strings were printed
 * by CPython 3 (python3 -c 'print(repr(x))' for each x): both ends of the
 * fixed-notation range (1e-05 / 0.0001, 1e+16 / 1e15), integral values,
 * shortest round-trip digits, subnormals, -0.0 and the non-finite values.
 */
static void test_py_float_repr(void)
{
    static const struct { double x; const char *want; } cases[] = {
        { 0.0, "0.0" },
        { -0.0, "-0.0" },
        { 1.0, "1.0" },
        { 123.0, "123.0" },
        { -123.0, "-123.0" },
        { 0.1, "0.1" },
        { 0.969, "0.969" },
        { 0.9500000000000001, "0.9500000000000001" },
        { 1e16, "1e+16" },
        { 1e15, "1000000000000000.0" },
        { 9999999999999998.0, "9999999999999998.0" },
        { 1e-05, "1e-05" },
        { 0.0001, "0.0001" },
        { 0.00012345, "0.00012345" },
        { 0.00015000000000000001, "0.00015000000000000001" },
        { -1.5e-10, "-1.5e-10" },
        { 1e22, "1e+22" },
        { 1.7976931348623157e308, "1.7976931348623157e+308" },
        { 5e-324, "5e-324" },
        { -2.2250738585072014e-308, "-2.2250738585072014e-308" },
        { -2.5, "-2.5" },
        { 1.0 / 3.0, "0.3333333333333333" },
        { 2.0 / 3.0, "0.6666666666666666" },
        { 123456789012345.6, "123456789012345.6" },
        { 1234567890123456.8, "1234567890123456.8" },
        { 12345678901234567.0, "1.2345678901234568e+16" },
        { 100.0, "100.0" },
        { 1e100, "1e+100" },
        { 0.30000000000000004, "0.30000000000000004" },
        { 3.14159, "3.14159" },
        { 0.001, "0.001" },
        { 12.5, "12.5" },
        { 123456.789, "123456.789" },
        { 4.35, "4.35" },
        { 9007199254740992.0, "9007199254740992.0" },
        { 9223372036854775808.0, "9.223372036854776e+18" },
        { -1e-300, "-1e-300" },
        { -0.00012345678901234567, "-0.00012345678901234567" },
        { NAN, "nan" },
        { INFINITY, "inf" },
        { -INFINITY, "-inf" },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char out[DS_PY_FLOAT_REPR_MAX];
        size_t n = ds_py_float_repr(out, sizeof out, cases[c].x);
        if (n != strlen(cases[c].want) || strcmp(out, cases[c].want) != 0)
            fprintf(stderr, "py_float_repr: %.17g gave '%s' (%zu), want '%s'\n", cases[c].x, out, n,
                    cases[c].want);
        CHECK(n == strlen(cases[c].want) && strcmp(out, cases[c].want) == 0);
    }
    /* too small a buffer: cut and terminated, the full length returned */
    char small[4];
    CHECK(ds_py_float_repr(small, sizeof small, 123.25) == 6 && strcmp(small, "123") == 0);
    CHECK(ds_py_float_repr(small, 1, -1.0) == 4 && small[0] == 0);
    CHECK(ds_py_float_repr(NULL, 0, 1e16) == 5);
}

/* Enough sequences and documents to overflow the 1 MB buffers several times,
   so the lengths and document indices go through the scratch files. */
static void test_spill(void)
{
    char prefix[512];
    pjoin(prefix, sizeof prefix, "spill");
    const uint32_t ndocs = 600000;
    ds_writer *w;
    CHECK(ds_writer_open(prefix, DS_DTYPE_UINT16, &w) == 0);
    size_t nt;
    const char *const *tp = ds_writer_temp_paths(w, &nt);
    uint32_t toks[16], lens[4];
    uint64_t want_tokens = 0, want_seqs = 0;
    int spilled = 0;
    for (uint32_t d = 0; d < ndocs; d++) {
        uint32_t ns = d % 3, nt_doc = 0;
        for (uint32_t s = 0; s < ns; s++) {
            lens[s] = (d + s) % 5;
            for (uint32_t k = 0; k < lens[s]; k++, nt_doc++)
                toks[nt_doc] = (d * 7 + nt_doc) & 0xffff;
        }
        if (ds_writer_add_document(w, toks, nt_doc, lens, ns) != 0) {
            CHECK(0);
            break;
        }
        want_tokens += nt_doc;
        want_seqs += ns;
        if (d == ndocs - 1)
            spilled = file_exists(tp[2]) && file_exists(tp[3]);
    }
    CHECK(spilled);
    CHECK(ds_writer_num_tokens(w) == want_tokens && ds_writer_num_sequences(w) == want_seqs);
    CHECK(ds_writer_finalize(w) == 0);
    CHECK(!file_exists(tp[2]) && !file_exists(tp[3]));
    ds_writer_free(w);

    ds_reader *r;
    CHECK(ds_reader_open(prefix, &r) == 0);
    CHECK(ds_reader_num_documents(r) == ndocs);
    CHECK(ds_reader_num_sequences(r) == want_seqs);
    CHECK(ds_reader_verify(r) == 0);
    /* Spot-check documents on both sides of the buffer boundaries. */
    int bad = 0;
    for (uint32_t d = 0; d < ndocs; d += 997) {
        uint64_t s0 = ds_reader_doc_index(r, d), s1 = ds_reader_doc_index(r, d + 1);
        bad += s1 - s0 != d % 3;
        uint32_t nt_doc = 0;
        for (uint64_t s = s0; s < s1; s++) {
            bad += ds_reader_seq_length(r, s) != (d + (s - s0)) % 5;
            for (uint32_t k = 0; k < ds_reader_seq_length(r, s); k++, nt_doc++)
                bad += ds_reader_token(r, s, k) != ((d * 7 + nt_doc) & 0xffff);
        }
    }
    CHECK(bad == 0);
    CHECK(ds_reader_doc_index(r, ndocs) == want_seqs);

    /* Merging a dataset this big into an empty writer streams its index
       through the scratch files and must reproduce it exactly. */
    char copy[512], a[600], b[600];
    pjoin(copy, sizeof copy, "spill-copy");
    CHECK(ds_writer_open(copy, DS_DTYPE_UINT16, &w) == 0);
    CHECK(ds_writer_add_dataset(w, r) == 0);
    CHECK(ds_writer_finalize(w) == 0);
    ds_writer_free(w);
    ds_reader_close(r);
    snprintf(a, sizeof a, "%s.idx", prefix);
    snprintf(b, sizeof b, "%s.idx", copy);
    CHECK(files_equal(a, b));
    snprintf(a, sizeof a, "%s.bin", prefix);
    snprintf(b, sizeof b, "%s.bin", copy);
    CHECK(files_equal(a, b));
}

/*
 * ds_utf8_replace: Python's bytes.decode('utf-8', errors='replace').  The
 * vectors were checked against CPython 3; the second half is a property
 * check on pseudo-random bytes (fixed seed): the result is valid UTF-8, so
 * decoding it again changes nothing, and it never exceeds the bound.
 */
static int utf8_case(const char *in, size_t n, const char *want, size_t wn)
{
    char out[64];
    size_t got = ds_utf8_replace(out, sizeof out, (const unsigned char *)in, n);
    if (got != wn || memcmp(out, want, wn) != 0) {
        fprintf(stderr, "utf8_replace: input of %zu bytes gave %zu bytes, want %zu\n", n, got, wn);
        return 0;
    }
    return 1;
}
#define UTF8_CASE(in, want) CHECK(utf8_case(in, sizeof in - 1, want, sizeof want - 1))
#define FFFD "\xef\xbf\xbd"

static void test_utf8_replace(void)
{
    UTF8_CASE("", "");
    UTF8_CASE("plain ascii\n", "plain ascii\n");
    UTF8_CASE("a\0b", "a\0b");                                  /* NUL is valid */
    UTF8_CASE("\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80", "\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80");
    UTF8_CASE("\xe2\x80", FFFD);                                 /* decode([447]) = "\ufffd" */
    UTF8_CASE("\xe2\x80\x85", "\xe2\x80\x85");                     /* decode([447, 227]) = "\u2005" */
    UTF8_CASE("\xe2\x80" "a", FFFD "a");                         /* one subpart, then resume */
    UTF8_CASE("\xe2\x28\xa1", FFFD "(" FFFD);
    UTF8_CASE("\xed\xa0\x80", FFFD FFFD FFFD);                   /* surrogate: 3 */
    UTF8_CASE("\xed\x9f\xbf", "\xed\x9f\xbf");                     /* U+D7FF is fine */
    UTF8_CASE("\xe0\x80\x80", FFFD FFFD FFFD);                   /* overlong */
    UTF8_CASE("\xe0\xa0", FFFD);
    UTF8_CASE("\xc0\xaf", FFFD FFFD);                            /* C0, C1 never valid */
    UTF8_CASE("\xc2", FFFD);
    UTF8_CASE("\xf0\x80\x80", FFFD FFFD FFFD);
    UTF8_CASE("\xf0\x9f\x98", FFFD);                            /* cut emoji: one */
    UTF8_CASE("\xf0\x9f\x98" "a", FFFD "a");
    UTF8_CASE("\xf4\x8f\xbf\xbf", "\xf4\x8f\xbf\xbf");                /* U+10FFFF */
    UTF8_CASE("\xf4\x90\x80\x80", FFFD FFFD FFFD FFFD);          /* above U+10FFFF */
    UTF8_CASE("\xf5\xff\x80", FFFD FFFD FFFD);
    UTF8_CASE("\x80\xbf", FFFD FFFD);                            /* lone continuations */

    /* Too small a buffer: a prefix of whole characters, the full size returned. */
    char out[8];
    memset(out, '#', sizeof out);
    CHECK(ds_utf8_replace(out, 4, (const unsigned char *)"a\xe2\x80", 3) == 4);
    CHECK(memcmp(out, "a" FFFD, 4) == 0);
    memset(out, '#', sizeof out);
    CHECK(ds_utf8_replace(out, 3, (const unsigned char *)"a\xe2\x80" "b", 4) == 5);
    CHECK(out[0] == 'a' && out[1] == '#');                       /* U+FFFD did not fit: nothing more */
    CHECK(ds_utf8_replace(NULL, 0, (const unsigned char *)"\xff", 1) == 3);
    CHECK(ds_utf8_replace(NULL, 0, NULL, 0) == 0);
    CHECK(ds_utf8_replace_bound(0) == 0);
    CHECK(ds_utf8_replace_bound(5) == 15);
    CHECK(ds_utf8_replace_bound(SIZE_MAX / 2) == SIZE_MAX);

    uint32_t seed = 20240613u;
    unsigned char in[16];
    char a[64], b[64];
    int bad = 0;
    for (int t = 0; t < 100000; t++) {
        size_t n = (size_t)(t % 17);
        for (size_t i = 0; i < n; i++) {
            seed = seed * 1664525u + 1013904223u;
            in[i] = (unsigned char)(seed >> 24);
        }
        size_t na = ds_utf8_replace(a, sizeof a, in, n);
        size_t nb = ds_utf8_replace(b, sizeof b, (const unsigned char *)a, na);
        if (na > ds_utf8_replace_bound(n) || nb != na || memcmp(a, b, na) != 0)
            bad++;
    }
    CHECK(bad == 0);
}

/* Appends every document of r through ds_writer_add_document, empty ones
   included, with its sequences' lengths: what a preprocessor would write. */
static int rewrite_documents(ds_writer *w, const ds_reader *r)
{
    uint32_t *toks = NULL, *lens = NULL;
    int rc = 0;
    for (uint64_t k = 0; rc == 0 && k < ds_reader_num_documents(r); k++) {
        uint64_t s0 = ds_reader_doc_index(r, k), s1 = ds_reader_doc_index(r, k + 1);
        size_t nt = 0, ns = 0;
        for (uint64_t s = s0; s < s1; s++)
            nt += ds_reader_seq_length(r, s);
        uint32_t *t2 = realloc(toks, (nt + 1) * sizeof *toks), *l2 = realloc(lens, (s1 - s0 + 1) * sizeof *lens);
        toks = t2 ? t2 : toks;
        lens = l2 ? l2 : lens;
        if (!t2 || !l2) {
            rc = DS_ERR_NOMEM;
            break;
        }
        nt = 0;
        for (uint64_t s = s0; s < s1; s++) {
            uint32_t l = ds_reader_seq_length(r, s);
            for (uint32_t t = 0; t < l; t++)
                toks[nt++] = (uint32_t)ds_reader_token(r, s, t);
            lens[ns++] = l;
        }
        rc = ds_writer_add_document(w, toks, nt, lens, ns);
    }
    free(toks);
    free(lens);
    return rc;
}

/* mdsinspect merge of tiny + edge (ds_writer_add_dataset, Megatron's
   add_index) must equal reading both and writing them again document by
   document: same .bin, same .idx (document indices shifted, pointers
   recomputed, edge's empty document kept). */
static void test_merge_goldens_equals_rewrite(void)
{
    static const char *const names[2] = { "tiny_text_document", "edge_text_document" };
    ds_reader *r[2] = { NULL, NULL }, *m = NULL;
    ds_writer *wa = NULL, *wb = NULL;
    char merged[512], rewritten[512], a[600], b[600];
    pjoin(merged, sizeof merged, "golden_merged");
    pjoin(rewritten, sizeof rewritten, "golden_rewritten");
    for (int i = 0; i < 2; i++) {
        char src[256];
        snprintf(src, sizeof src, "tests/data/golden/%s", names[i]);
        int rc = ds_reader_open(src, &r[i]);
        CHECK(rc == 0);
        if (rc != 0) {
            fprintf(stderr, "  %s\n", ds_reader_error(r[i]));
            goto cleanup;
        }
    }
    CHECK(ds_reader_num_documents(r[0]) == 210 && ds_reader_num_documents(r[1]) == 66);

    CHECK(ds_writer_open(merged, DS_DTYPE_UINT16, &wa) == 0);
    CHECK(ds_writer_open(rewritten, DS_DTYPE_UINT16, &wb) == 0);
    for (int i = 0; i < 2; i++) {
        CHECK(ds_writer_add_dataset(wa, r[i]) == 0);
        CHECK(rewrite_documents(wb, r[i]) == 0);
    }
    CHECK(ds_writer_num_documents(wa) == 276 && ds_writer_num_documents(wb) == 276);
    CHECK(ds_writer_num_sequences(wa) == 275 && ds_writer_num_sequences(wb) == 275);
    CHECK(ds_writer_num_tokens(wa) == 1652652 && ds_writer_num_tokens(wb) == 1652652);
    CHECK(ds_writer_finalize(wa) == 0);
    CHECK(ds_writer_finalize(wb) == 0);
    ds_writer_free(wa);
    ds_writer_free(wb);

    snprintf(a, sizeof a, "%s.bin", merged);
    snprintf(b, sizeof b, "%s.bin", rewritten);
    CHECK(files_equal(a, b));
    snprintf(a, sizeof a, "%s.idx", merged);
    snprintf(b, sizeof b, "%s.idx", rewritten);
    CHECK(files_equal(a, b));

    CHECK(ds_reader_open(merged, &m) == 0);
    CHECK(ds_reader_verify(m) == 0);
    CHECK(ds_reader_doc_index(m, 210) == 210 && ds_reader_doc_index(m, 276) == 275);
    ds_reader_close(m);
cleanup:
    ds_reader_close(r[0]);
    ds_reader_close(r[1]);
}

/* ds_writer_prepare / ds_writer_commit: nothing final appears before commit,
 * no document is accepted after prepare, commit needs prepare. */
static void test_prepare_commit(void)
{
    char prefix[512], bin[600], idx[600];
    pjoin(prefix, sizeof prefix, "twostep");
    snprintf(bin, sizeof bin, "%s.bin", prefix);
    snprintf(idx, sizeof idx, "%s.idx", prefix);
    ds_writer *w = NULL;
    CHECK(ds_writer_open(prefix, DS_DTYPE_UINT16, &w) == 0);
    uint32_t t[2] = {7, 8}, l[1] = {2};
    CHECK(ds_writer_commit(w) == DS_ERR_STATE);
    CHECK(ds_writer_add_document(w, t, 2, l, 1) == 0);
    CHECK(ds_writer_prepare(w) == 0);
    CHECK(!file_exists(bin) && !file_exists(idx));
    CHECK(ds_writer_add_document(w, t, 2, l, 1) == DS_ERR_STATE);
    CHECK(ds_writer_commit(w) == 0);
    CHECK(file_exists(bin) && file_exists(idx));
    ds_writer_free(w);
    ds_reader *r = NULL;
    CHECK(ds_reader_open(prefix, &r) == 0 && ds_reader_num_tokens(r) == 2);
    ds_reader_close(r);
}

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (unlink(p) != 0)
            rmdir(p);
    }
    closedir(d);
    rmdir(dir);
}

int main(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/mds_test_dataset.XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("test_dataset: cannot create a temporary directory");
        return 1;
    }
    RUN(test_version_and_errors);
    RUN(test_dtypes);
    RUN(test_worked_example);
    RUN(test_golden_edge_list);
    RUN(test_golden_edge);
    RUN(test_merge);
    RUN(test_sparse_large);
    RUN(test_corrupt_catalogue);
    RUN(test_writer_errors);
    RUN(test_empty_datasets);
    RUN(test_all_dtypes);
    RUN(test_decode_tokens);
    RUN(test_py_float_repr);
    RUN(test_spill);
    RUN(test_utf8_replace);
    RUN(test_merge_goldens_equals_rewrite);
    RUN(test_prepare_commit);
    remove_dir(g_dir);
    return harness_report();
}
