/*
 * fuzz_hfjson.c - fuzz target for the tokenizer.json loader (preprocess/hf.c
 * and jsontree.c): the input is a tokenizer.json, optionally followed by the
 * separator "\n@@config@@\n" and a tokenizer_config.json.  Invariants in
 * fuzz_tokfile.h.
 */
#include "fuzz_tokfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_setup("fuzz_hfjson");
    static const char sep[] = "\n@@config@@\n";
    const uint8_t *cfg = NULL;
    size_t n = size, cn = 0;
    for (size_t i = 0; i + sizeof sep - 1 <= size; i++)
        if (memcmp(data + i, sep, sizeof sep - 1) == 0) {
            n = i;
            cfg = data + i + sizeof sep - 1;
            cn = size - n - (sizeof sep - 1);
            break;
        }
    fz_write("tokenizer.json", data, n);
    fz_write("tokenizer_config.json", cfg, cn);
    fz_check(TOK_HUGGINGFACE, fz_dir, data, n);
    return 0;
}
