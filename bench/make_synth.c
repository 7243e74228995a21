/*
 * make_synth.c - writes a synthetic MMIDIDX dataset for bench/indices.sh:
 * PREFIX.idx with NDOCS one-sequence documents of pseudo-random lengths
 * (uniform in [1, 3999], mean 2000, from SEED), and PREFIX.bin as a sparse
 * file of the matching size (uint16 tokens, all zero).  Index building reads
 * only the .idx, so a 20 GB .bin costs no disk.
 *
 * It writes the .idx by hand (docs/formats.md) rather than through
 * ds_writer, which would have to write every token.  Not a test fixture
 * generator: nothing checks the token content.
 *
 *   make_synth PREFIX NDOCS SEED   prints the token count on stdout
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void put(FILE *f, uint64_t v, int n)
{
    unsigned char b[8];
    for (int i = 0; i < n; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    fwrite(b, 1, (size_t)n, f);
}

static void fail(const char *what, const char *path)
{
    fprintf(stderr, "make_synth: cannot %s '%s'\n", what, path);
    exit(1);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: make_synth PREFIX NDOCS SEED\n");
        return 2;
    }
    uint64_t n = strtoull(argv[2], NULL, 10), seed = strtoull(argv[3], NULL, 10), s = seed;
    size_t plen = strlen(argv[1]) + 5;
    char *idx = malloc(plen), *bin = malloc(plen);
    uint32_t *len = malloc((n ? n : 1) * sizeof *len);
    if (!idx || !bin || !len || n == 0)
        fail("allocate for", argv[1]);
    snprintf(idx, plen, "%s.idx", argv[1]);
    snprintf(bin, plen, "%s.bin", argv[1]);
    uint64_t tokens = 0;
    for (uint64_t i = 0; i < n; i++) {
        len[i] = 1 + (uint32_t)(splitmix64(&s) % 3999);
        tokens += len[i];
    }
    FILE *f = fopen(idx, "wb");
    if (!f)
        fail("create", idx);
    fwrite("MMIDIDX\0\0", 1, 9, f);
    put(f, 1, 8);                 /* version */
    put(f, 8, 1);                 /* dtype code 8: uint16 */
    put(f, n, 8);                 /* sequence count */
    put(f, n + 1, 8);             /* document_indices length */
    for (uint64_t i = 0; i < n; i++)
        put(f, len[i], 4);
    for (uint64_t i = 0, ptr = 0; i < n; i++) {
        put(f, ptr, 8);
        ptr += 2ull * len[i];
    }
    for (uint64_t i = 0; i <= n; i++)
        put(f, i, 8);
    if (fclose(f) != 0)
        fail("write", idx);
    f = fopen(bin, "wb");
    if (!f || ftruncate(fileno(f), (off_t)(2 * tokens)) != 0 || fclose(f) != 0)
        fail("create", bin);
    printf("%llu\n", (unsigned long long)tokens);
    free(idx);
    free(bin);
    free(len);
    return 0;
}
