/*
 * fuzz_spmodel.c - fuzz target for the SentencePiece model reader
 * (preprocess/sp.c): the input is a .model file (a ModelProto), opened as
 * Megatron's three SentencePiece tokenizer types.  Invariants in
 * fuzz_tokfile.h.
 */
#include "fuzz_tokfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_setup("fuzz_spmodel");
    const char *path = fz_write("m.model", data, size);
    fz_check(TOK_GPT_SENTENCEPIECE, path, data, 0);
    fz_check(TOK_SENTENCEPIECE, path, data, 0);
    fz_check(TOK_LLAMA2, path, data, 0);
    return 0;
}
