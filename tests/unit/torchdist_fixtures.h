/*
 * torchdist_fixtures.h - what test_torchsave.c and test_pickle.c share: the
 * fixtures of tests/data/torch_dist, reading a file whole, finding bytes.
 */
#ifndef MDS_TESTS_TORCHDIST_FIXTURES_H
#define MDS_TESTS_TORCHDIST_FIXTURES_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIR "tests/data/torch_dist/"

static const char *fixtures[] = { "gpt", "llama", "gpt_tp2", "llama_tp2", "llama_pp2", "llama_tp2_pp2", "llama_tp2_bf16mix" };

/* The whole file (malloc'd, *n bytes), or NULL. */
static inline unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = len >= 0 ? malloc(len > 0 ? (size_t)len : 1) : NULL;
    if (p && fread(p, 1, (size_t)len, f) != (size_t)len) { free(p); p = NULL; }
    fclose(f);
    *n = len >= 0 ? (size_t)len : 0;
    return p;
}

/* The first offset of s (slen bytes) in b, or n (the tests know it is there). */
static inline size_t find(const unsigned char *b, size_t n, const char *s, size_t slen)
{
    for (size_t i = 0; i + slen <= n; i++)
        if (!memcmp(b + i, s, slen)) return i;
    return n;
}

#endif
