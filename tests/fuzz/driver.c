/*
 * driver.c - standalone replay driver for the fuzz targets (lz4's
 * standaloneengine.c, zstd's regression_driver.c): a main() that feeds files
 * to LLVMFuzzerTestOneInput, so `make test` replays the corpus with gcc, with
 * or without sanitizers, and no libFuzzer.
 *
 *   fuzz_reader PATH...   each PATH is a file or a directory (walked
 *                         recursively in name order, dot files skipped)
 *
 * Each input is copied into a buffer of exactly its size, so the sanitizers
 * see any read past its end.  At the end it prints "ok <target> N inputs" and
 * exits 0; a crash or a failed invariant aborts (the sanitizer says where).
 * No inputs at all is an error (exit 1), so a missing corpus cannot pass.
 *
 * It does not mutate, measure coverage or minimise: that is libFuzzer's job
 * (tests/fuzz/README.md).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static const char *target = "fuzz";
static unsigned long long ninputs;

static void run_file(const char *path, size_t size)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open '%s': %s\n", target, path, strerror(errno));
        exit(1);
    }
    /* malloc(0) may return NULL; libFuzzer passes a valid pointer anyway. */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) {
        fprintf(stderr, "%s: out of memory reading '%s' (%zu bytes)\n", target, path, size);
        exit(1);
    }
    if (size && fread(buf, 1, size, f) != size) {
        fprintf(stderr, "%s: cannot read '%s'\n", target, path);
        exit(1);
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, size);
    free(buf);
    ninputs++;
}

static void run_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "%s: cannot stat '%s': %s\n", target, path, strerror(errno));
        exit(1);
    }
    if (S_ISREG(st.st_mode)) {
        run_file(path, (size_t)st.st_size);
        return;
    }
    if (!S_ISDIR(st.st_mode))
        return;
    struct dirent **names;
    int n = scandir(path, &names, NULL, alphasort);
    if (n < 0) {
        fprintf(stderr, "%s: cannot read directory '%s': %s\n", target, path, strerror(errno));
        exit(1);
    }
    for (int i = 0; i < n; i++) {
        if (names[i]->d_name[0] != '.') {
            size_t len = strlen(path) + strlen(names[i]->d_name) + 2;
            char *sub = malloc(len);
            if (!sub) {
                fprintf(stderr, "%s: out of memory\n", target);
                exit(1);
            }
            snprintf(sub, len, "%s/%s", path, names[i]->d_name);
            run_path(sub);
            free(sub);
        }
        free(names[i]);
    }
    free(names);
}

int main(int argc, char **argv)
{
    const char *slash = strrchr(argv[0], '/');
    target = slash ? slash + 1 : argv[0];
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE|DIR...\n", target);
        return 2;
    }
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++)
        run_path(argv[i]);
    if (ninputs == 0) {
        fprintf(stderr, "%s: no inputs found\n", target);
        return 1;
    }
    printf("ok %s %llu inputs\n", target, ninputs);
    return 0;
}
