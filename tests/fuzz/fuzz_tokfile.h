/*
 * fuzz_tokfile.h - what fuzz_hfjson.c and fuzz_spmodel.c share: a private
 * temporary directory (in /dev/shm when it exists) for the file the loader
 * reads, and the checks run on a tokenizer that loaded.
 *
 * Invariants (a violation aborts): tok_open returns 0 or a TOK_ERR_* code
 * with a one-line message; a loaded tokenizer has a vocabulary, encodes a
 * fixed set of strings (and the input itself when it is valid UTF-8) without
 * error, and every id it writes decodes to some token.
 */
#ifndef MDS_FUZZ_TOKFILE_H
#define MDS_FUZZ_TOKFILE_H

#include "tokenizer.h"
#include "utf8_valid.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fz_dir[256];
static const char *fz_name;

static void fz_remove(void)
{
    static const char *const names[] = { "tokenizer.json", "tokenizer_config.json", "m.model" };
    char p[320];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", fz_dir, names[i]);
        unlink(p);
    }
    rmdir(fz_dir);
}

static void fz_setup(const char *name)
{
    if (fz_dir[0]) return;
    fz_name = name;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
    snprintf(fz_dir, sizeof fz_dir, "%s/mds_%s.XXXXXX", base && *base ? base : "/tmp", name);
    if (!mkdtemp(fz_dir)) {
        perror("mkdtemp");
        abort();
    }
    atexit(fz_remove);
}

/* Writes n bytes to DIR/name, or removes it when p is NULL; returns the path. */
static const char *fz_write(const char *name, const uint8_t *p, size_t n)
{
    static char path[320];
    snprintf(path, sizeof path, "%s/%s", fz_dir, name);
    if (!p) {
        unlink(path);
        return path;
    }
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0) {
        perror("cannot write the input file");
        abort();
    }
    return path;
}

static void fz_fail(const char *why)
{
    fprintf(stderr, "%s: %s\n", fz_name, why);
    abort();
}

/* Opens the tokenizer and checks it; returns nothing (aborts on a violation). */
static void fz_check(int type, const char *model, const uint8_t *data, size_t size)
{
    tok *t = NULL;
    tok_options o = { type, model, NULL, NULL, 0, 0, 0 };
    char err[1024] = "";
    int rc = tok_open(&t, &o, err, sizeof err);
    if (rc) {
        if (t || rc > 0 || rc < TOK_ERR_BUILD || !err[0] || strchr(err, '\n')) fz_fail("bad failure report");
        return;
    }
    if (!t || tok_vocab_size(t) == 0) fz_fail("a loaded tokenizer without a vocabulary");
    tok_state *st;
    if (tok_state_new(t, &st) != 0) fz_fail("no state");
    static const char *const texts[] = { "", " ", "hello world", "Hello,  world!\n\n  indented", "<s>x</s>", "a\xcc\x81\xc3\xa9 12345",
                                         "\xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80", "<|endoftext|>", "\t\r\n  \xe2\x96\x81" };
    tok_ids ids = { NULL, 0, 0 };
    for (size_t i = 0; i <= sizeof texts / sizeof texts[0]; i++) {
        const unsigned char *s = i < sizeof texts / sizeof texts[0] ? (const unsigned char *)texts[i] : data;
        size_t n = i < sizeof texts / sizeof texts[0] ? strlen(texts[i]) : size;
        if (i == sizeof texts / sizeof texts[0] && (!utf8_valid(data, size) || size > 4096)) break;
        ids.n = 0;
        rc = tok_encode(t, st, s, n, &ids);
        if (rc && rc != TOK_ERR_ENCODE) fz_fail("encode failed");
        for (size_t k = 0; k < ids.n; k++) {
            size_t l;
            if (!tok_token_bytes(t, ids.ids[k], &l)) fz_fail("an id that decodes to no token");
        }
    }
    free(ids.ids);
    tok_state_free(st);
    tok_free(t);
}

#endif
