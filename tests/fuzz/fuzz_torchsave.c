/*
 * fuzz_torchsave.c - fuzz target for the torch.save archive reader
 * (train/torchsave.h): any bytes are refused with TS_ERR_FORMAT and a
 * one-line message, or accepted with every record inside the input.
 * Invariants that abort() when broken:
 *   - the verdict is TS_OK or TS_ERR_FORMAT, and the same twice;
 *   - an accepted archive's records lie inside the input, and writing them
 *     again gives an archive that parses to the same names and bytes;
 *   - an accepted tensor's data lies inside the input, holds numel elements,
 *     and the tensor written again parses to the same dtype, shape and data.
 * Seeds: items of the tests/data/torch_dist fixtures (corpus/torchsave/).
 */
#include "torchsave.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die(const char *what)
{
    fprintf(stderr, "fuzz_torchsave: %s\n", what);
    abort();
}

static void check_message(int rc, const char *err)
{
    if (rc != TS_OK && rc != TS_ERR_FORMAT) die("unknown error code");
    if (rc != TS_OK && (!err[0] || strchr(err, '\n'))) die("an error without a one-line message");
}

static void check_inside(const unsigned char *p, size_t n, const uint8_t *data, size_t size)
{
    if (n && (p < data || p + n > data + size)) die("a view outside the input");
}

static void check_archive(const uint8_t *data, size_t size, const ts_archive *a)
{
    ts_buf b = { 0 };
    ts_archive r;
    char err[512];
    for (size_t i = 0; i < a->n; i++) check_inside(a->rec[i].data, a->rec[i].size, data, size);
    if (ts_archive_write(&b, a->prefix, a->rec, a->n - 1)) die("an accepted archive cannot be written again");
    if (ts_archive_parse(b.data, b.len, "again", &r, err, sizeof err)) die(err);
    if (r.n != a->n) die("the rewritten archive has other records");
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(r.rec[i].name, a->rec[i].name) || r.rec[i].size != a->rec[i].size ||
            memcmp(r.rec[i].data, a->rec[i].data, r.rec[i].size))
            die("a rewritten record differs");
    ts_buf_release(&b);
}

static void check_tensor(const uint8_t *data, size_t size, const ts_tensor *t)
{
    check_inside(t->data, t->nbytes, data, size);
    if (t->nbytes != t->numel * (t->dtype == TS_F32 ? 4 : 2)) die("data size is not numel elements");
    ts_buf b = { 0 };
    ts_tensor r;
    char err[512];
    if (ts_tensor_write(&b, t)) die("an accepted tensor cannot be written again");
    if (ts_tensor_parse(b.data, b.len, "again", &r, err, sizeof err)) die(err);
    if (r.dtype != t->dtype || r.ndim != t->ndim || memcmp(r.shape, t->shape, sizeof r.shape) || r.nbytes != t->nbytes ||
        memcmp(r.data, t->data, r.nbytes))
        die("the rewritten tensor differs");
    ts_buf_release(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512] = "";
    ts_archive a;
    int rc = ts_archive_parse(data, size, "fuzz", &a, err, sizeof err);
    check_message(rc, err);
    ts_archive a2;
    if ((ts_archive_parse(data, size, "fuzz", &a2, err, sizeof err) == TS_OK) != (rc == TS_OK)) die("two parses disagree");
    if (rc == TS_OK) check_archive(data, size, &a);
    ts_tensor t;
    err[0] = 0;
    int trc = ts_tensor_parse(data, size, "fuzz", &t, err, sizeof err);
    check_message(trc, err);
    if (trc == TS_OK && rc != TS_OK) die("a tensor in an archive that is refused");
    if (trc == TS_OK) check_tensor(data, size, &t);
    return 0;
}
