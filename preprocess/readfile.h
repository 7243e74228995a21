/*
 * readfile.h - a whole file into memory, for the readers that parse small
 * files at once (vocabularies, merges, tokenizer.json, SentencePiece models,
 * ds_config.json).  The buffer grows by doubling from
 * 1 MiB (a pipe or /proc file has no size to ask for) and ends with a NUL
 * byte past *len.
 */
#ifndef MDS_READFILE_H
#define MDS_READFILE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { READFILE_OK = 0, READFILE_OPEN = -1, READFILE_NOMEM = -2, READFILE_READ = -3 };

/* Reads path into a malloc'ed *out of *len bytes (+ NUL).  Returns
 * READFILE_OK, or READFILE_OPEN (errno from fopen), READFILE_NOMEM or
 * READFILE_READ with *out NULL. */
static inline int read_whole_file(const char *path, unsigned char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return READFILE_OPEN;
    size_t cap = 1 << 20, n = 0;
    unsigned char *buf = malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        unsigned char *nb = cap <= SIZE_MAX / 4 ? realloc(buf, cap * 2 + 1) : NULL;
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf) return READFILE_NOMEM;
    if (bad) {
        free(buf);
        return READFILE_READ;
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return READFILE_OK;
}

/* The same for callers that need no cause (the tests): the buffer, or NULL
 * with *len 0. */
static inline unsigned char *read_file_or_null(const char *path, size_t *len)
{
    unsigned char *p;
    return read_whole_file(path, &p, len) == READFILE_OK ? p : NULL;
}

#endif /* MDS_READFILE_H */
