/*
 * fuzz_hfconfig.c - fuzz target for the config.json reader of hf_import
 * (train/hfckpt.h): any bytes as a folder's config.json, imported into a
 * tiny GPT-2 model and a tiny Llama model (the shapes of the fixtures
 * tests/data/hf/gpt2_tiny and llama_tiny).  The folder has no
 * model.safetensors, so a config.json that passes every check ends in
 * HF_ERR_IO on the missing file.  Invariants that abort() when broken:
 *   - the result is a known code (never 0: there are no tensors);
 *   - the message is one non-empty line;
 *   - the same input gives the same verdict and message twice.
 * The input is written into a private temporary directory (in /dev/shm when
 * it exists), removed at exit.  Not covered: the tensors (fuzz_safetensors).
 */
#include "hfckpt.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64], path[128];
static gpt_model models[2];
static int ready;

static void cleanup(void)
{
    remove(path);
    rmdir(dir);
    for (int i = 0; i < 2; i++) gpt_model_free(&models[i]);
}

static void setup(void)
{
    snprintf(dir, sizeof dir, "%s/mds-fuzz-hfconfig.XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (!mkdtemp(dir)) { perror("fuzz_hfconfig: mkdtemp"); abort(); }
    snprintf(path, sizeof path, "%s/config.json", dir);
    for (int i = 0; i < 2; i++) {
        gpt_config c;
        gpt_config_init(&c);
        c.num_layers = 2;
        c.hidden_size = 32;
        c.num_heads = 4;
        c.max_position_embeddings = 16;
        c.vocab_size = 96;
        c.make_vocab_size_divisible_by = 16;
        if (i == 1) {   /* llama_tiny */
            c.position_embedding = GPT_POS_ROPE;
            c.normalization = GPT_NORM_RMSNORM;
            c.swiglu = 1;
            c.ffn_hidden_size = 48;
            c.num_query_groups = 2;
            c.untie_embeddings = 1;
            c.add_bias_linear = 0;
        }
        char err[256];
        if (gpt_model_init(&models[i], &c, 1, 1, err, sizeof err) != 0) {
            fprintf(stderr, "fuzz_hfconfig: %s\n", err);
            abort();
        }
    }
    atexit(cleanup);
    ready = 1;
}

static int import(gpt_model *m, char *err, size_t errlen)
{
    err[0] = 0;
    return hf_import(m, dir, 96, err, errlen);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!ready) setup();
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) { perror("fuzz_hfconfig: write"); abort(); }
    for (int i = 0; i < 2; i++) {
        char e1[4600], e2[4600];
        int r1 = import(&models[i], e1, sizeof e1), r2 = import(&models[i], e2, sizeof e2);
        if (r1 != HF_ERR_IO && r1 != HF_ERR_FORMAT && r1 != HF_ERR_MISMATCH && r1 != HF_ERR_UNSUPPORTED &&
            r1 != HF_ERR_NOMEM) {
            fprintf(stderr, "fuzz_hfconfig: code %d\n", r1);
            abort();
        }
        if (!e1[0] || strchr(e1, '\n')) { fprintf(stderr, "fuzz_hfconfig: message '%s'\n", e1); abort(); }
        if (r1 != r2 || strcmp(e1, e2) != 0) { fprintf(stderr, "fuzz_hfconfig: two imports disagree\n"); abort(); }
    }
    return 0;
}
