/*
 * torchdist_fixtures.h - what test_torchsave.c and test_pickle.c share: the
 * fixtures of tests/data/torch_dist and finding bytes.
 */
#ifndef MDS_TESTS_TORCHDIST_FIXTURES_H
#define MDS_TESTS_TORCHDIST_FIXTURES_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "readfile.h"

#define DIR "tests/data/torch_dist/"

static const char *fixtures[] = { "gpt", "llama", "gpt_tp2", "llama_tp2", "llama_pp2", "llama_tp2_pp2", "llama_tp2_bf16mix" };

/* The first offset of s (slen bytes) in b, or n (the tests know it is there). */
static inline size_t find(const unsigned char *b, size_t n, const char *s, size_t slen)
{
    for (size_t i = 0; i + slen <= n; i++)
        if (!memcmp(b + i, s, slen)) return i;
    return n;
}

#endif
