/*
 * fuzz_reader.c - libFuzzer target for the MMIDIDX reader (dataset.h): any
 * pair of .idx/.bin files, however malformed, must be refused cleanly or read
 * without touching memory outside the mappings.
 *
 * Input layout: a 4-byte little-endian length L, then L bytes of .idx, then
 * the rest as the .bin (L is clamped to what is there; fewer than 4 bytes
 * give an empty .idx and .bin).  Both go to files in a private temporary
 * directory (in /dev/shm when it exists: the reader maps real files).
 *
 * On a dataset that opens, every accessor runs, in and out of range, every
 * sequence is read to its last byte, then ds_reader_verify.  Invariants that
 * abort() when broken, so that the driver or libFuzzer reports them:
 *   - a sequence view covers exactly seq_length tokens inside the .bin;
 *   - after a successful verify every sequence is readable, and merging the
 *     dataset alone through ds_writer_add_dataset reproduces both files byte
 *     for byte (Megatron's merge of one dataset is the identity);
 *   - ds_utf8_replace of the raw input is valid UTF-8: a second pass changes
 *     nothing, and it fits ds_utf8_replace_bound.
 * Not covered here: the tokenizer (its own target) and I/O errors.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataset.h"

static char dir[256];
static volatile uint8_t sink;   /* keeps the reads of every token byte */
static char prefix[300], idx_path[310], bin_path[310], out_prefix[300];

static void remove_files(void)
{
    static const char *const names[] = { "d.idx", "d.bin", "o.idx", "o.bin" };
    char p[320];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
}

static void setup(void)
{
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/mds_fuzz_reader.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(dir)) {
        perror("fuzz_reader: mkdtemp");
        abort();
    }
    snprintf(prefix, sizeof prefix, "%s/d", dir);
    snprintf(out_prefix, sizeof out_prefix, "%s/o", dir);
    snprintf(idx_path, sizeof idx_path, "%s.idx", prefix);
    snprintf(bin_path, sizeof bin_path, "%s.bin", prefix);
    atexit(remove_files);
}

static void spit(const char *path, const uint8_t *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0) {
        perror("fuzz_reader: cannot write the input files");
        abort();
    }
}

static int same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int ca = getc(fa), cb = getc(fb);
        same = ca == cb;
        if (ca == EOF)
            break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

static void check_utf8(const uint8_t *data, size_t size)
{
    size_t cap = ds_utf8_replace_bound(size);
    char *a = malloc(cap ? cap : 1), *b = malloc(cap ? cap : 1);
    if (!a || !b)
        abort();
    size_t na = ds_utf8_replace(a, cap, data, size);
    if (na > cap)
        abort();
    size_t nb = ds_utf8_replace(b, cap, (const unsigned char *)a, na);
    if (nb != na || memcmp(a, b, na) != 0)
        abort();
    free(a);
    free(b);
}

static void exercise(ds_reader *r)
{
    uint64_t n = ds_reader_num_sequences(r), d = ds_reader_num_documents(r);
    size_t isz = ds_dtype_size(ds_reader_dtype(r));
    uint8_t acc = 0;
    uint64_t readable = 0;
    for (uint64_t i = 0; i < n; i++) {
        const void *data;
        uint64_t len;
        (void)ds_reader_seq_pointer(r, i);
        if (ds_reader_sequence(r, i, &data, &len) != 0)
            continue;
        if (len != ds_reader_seq_length(r, i) || !data)
            abort();
        const uint8_t *p = data;
        for (uint64_t k = 0; k < len * isz; k++)
            acc ^= p[k];
        if (len) {
            (void)ds_reader_token(r, i, 0);
            (void)ds_reader_token(r, i, len - 1);
        }
        if (ds_reader_token(r, i, len) != INT64_MIN)
            abort();
        readable++;
    }
    sink = acc;
    for (uint64_t k = 0; k <= d; k++)
        (void)ds_reader_doc_index(r, k);
    /* Out of range: defined answers, no reads. */
    const void *data;
    uint64_t len;
    if (ds_reader_sequence(r, n, &data, &len) != DS_ERR_RANGE)
        abort();
    if (ds_reader_seq_length(r, n) != 0 || ds_reader_seq_pointer(r, n) != 0 || ds_reader_doc_index(r, d + 1) != 0)
        abort();
    if (ds_reader_token(r, n, 0) != INT64_MIN)
        abort();

    if (ds_reader_verify(r) != 0) {
        if (!*ds_reader_error(r))
            abort();   /* a failure always says why */
        return;
    }
    if (readable != n)
        abort();

    /* A verified dataset merged alone is byte-identical to itself. */
    ds_writer *w = NULL;
    if (ds_writer_open(out_prefix, ds_reader_dtype(r), &w) == 0) {
        if (ds_writer_add_dataset(w, r) != 0 || ds_writer_finalize(w) != 0)
            abort();
        char a[320], b[320];
        snprintf(a, sizeof a, "%s.idx", out_prefix);
        snprintf(b, sizeof b, "%s.bin", out_prefix);
        if (!same_file(a, idx_path) || !same_file(b, bin_path))
            abort();
    }
    ds_writer_free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0])
        setup();
    size_t head = size < 4 ? size : 4;
    size_t rest = size - head;
    size_t l = size >= 4 ? (size_t)((uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16
                                    | (uint32_t)data[3] << 24) : 0;
    if (l > rest)
        l = rest;
    spit(idx_path, data + head, l);
    spit(bin_path, data + head + l, rest - l);

    ds_reader *r = NULL;
    int rc = ds_reader_open(prefix, &r);
    if (rc == 0)
        exercise(r);
    else if (r && !*ds_reader_error(r))
        abort();   /* a refused file always says why */
    ds_reader_close(r);

    check_utf8(data, size);
    return 0;
}
