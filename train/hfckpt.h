/*
 * hfckpt.h - HuggingFace model folders, both ways: export an mdstrain
 * checkpoint (every TP/PP rank file of one iteration, merged in one
 * process) to config.json + model.safetensors (+ the GPT-2 tokenizer
 * files), as GPT2LMHeadModel for the GPT architecture or LlamaForCausalLM
 * for the Llama one; and import such a folder as the initial weights of a
 * model of any TP/PP layout, each rank taking its slice.  docs/formats.md
 * ("HuggingFace folders") has the tensor-name table and every choice:
 *
 *  - GPT-2's Conv1D stores (in, out): every GPT-2 matrix is transposed;
 *    c_attn is the [Q | K | V] rows of mds's QKV weight transposed.
 *  - Llama's q_proj / k_proj / v_proj are the Q, K and V row blocks of the
 *    QKV weight (mds keeps them whole-model [Q | K | V], not Megatron's
 *    per-group interleave); gate_proj / up_proj the [gate | up] halves of
 *    FC1.  Both use rotate_half RoPE by default, so q/k are copied as they
 *    are; with interleaved RoPE their rows are permuted within each head
 *    (Meta's converter's permutation), so the folder is always rotate_half's.
 *    Llama 3.1 RoPE scaling is config.json's rope_scaling "llama3".
 *  - vocab_size in the exported config.json is the PADDED vocabulary (the
 *    embedding as trained, so logits match row for row); an import accepts
 *    any vocab_size from the tokenizer's size up to this run's padded size,
 *    and zeroes the padding rows it lacks.
 *  - GPT-2 is always tied: an untied GPT is refused, as are architectures
 *    neither model expresses (GELU with RoPE, partial RoPE, no position
 *    embedding, GPT-2 without linear biases, ...).
 *
 * Memory: the export holds the whole model once in fp32 plus one rank's
 * model at a time; an import holds the file and the whole model in fp32.
 *
 * What it deliberately does not do: print, exit, sharded safetensors
 * (model-00001-of-N), the optimizer state (an import starts AdamW afresh),
 * dtypes other than F32/F16/BF16 on import (export writes F32).
 *
 * Errors: functions return 0 or a negative enum hf_err with one line in err
 * naming the file, the tensor or the config field and the cause.
 * Thread safety: no global state.
 */
#ifndef MDS_HFCKPT_H
#define MDS_HFCKPT_H

#include "model.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum hf_err {
    HF_OK = 0,
    HF_ERR_IO = -1,          /* a file cannot be read or written */
    HF_ERR_FORMAT = -2,      /* a malformed file: safetensors, config.json, a checkpoint */
    HF_ERR_MISMATCH = -3,    /* the folder's model is not this run's (a config field, a shape, a missing tensor) */
    HF_ERR_UNSUPPORTED = -4, /* an architecture neither GPT2LMHeadModel nor LlamaForCausalLM expresses */
    HF_ERR_NOMEM = -5
};

/* A short name for an error code; never NULL. */
const char *hf_strerror(int code);

enum hf_arch { HF_ARCH_GPT2 = 1, HF_ARCH_LLAMA = 2 };

/*
 * hf_arch_of() - which HuggingFace class expresses cfg: GPT-2 (learned
 * positions, LayerNorm, GELU, biases, multi-head, tied) or Llama (RoPE over
 * every channel; RMSNorm; SwiGLU; biases on all linears or none).
 * @return : HF_ARCH_GPT2, HF_ARCH_LLAMA, or HF_ERR_UNSUPPORTED naming the field.
 */
int hf_arch_of(const gpt_config *cfg, char *err, size_t errlen);

/* The tokenizer of the run: GPT-2's files are copied when given. */
typedef struct hf_tokenizer {
    const char *vocab_json;   /* GPT-2 vocab.json, or NULL (NullTokenizer: no tokenizer files) */
    const char *merges_txt;
    int64_t eod;              /* bos/eos id in config.json */
} hf_tokenizer;

/*
 * hf_export() - read every rank file of iteration `iteration` under
 * ckpt_dir (cfg: the model flags with tp_size/pp_size of the checkpoint;
 * ranks and backend ignored; each file is checked as ckpt_load_rank does)
 * and write out_dir (created when missing): model.safetensors (F32),
 * then the tokenizer files, then config.json, each under a temporary name
 * renamed when complete (a folder with config.json is whole).
 * @return : 0, HF_ERR_UNSUPPORTED, HF_ERR_IO, HF_ERR_FORMAT (a checkpoint
 *           error; *ckpt_code holds its enum ckpt_err), HF_ERR_NOMEM.
 */
int hf_export(const char *ckpt_dir, uint64_t iteration, const gpt_config *cfg, const hf_tokenizer *tok,
              const char *out_dir, int *ckpt_code, char *err, size_t errlen);

/*
 * hf_import() - set m's weights (this rank's slice, masters and working
 * copy) from dir/config.json and dir/model.safetensors.  config.json must
 * describe m's architecture (the first differing field is named) and
 * vocab_size must lie in [tokenizer_vocab, m->Vp]; every expected tensor
 * must be present with its shape, and no other tensor (GPT-2's attn.bias
 * masks and a tied lm_head.weight aside).  Optimizer state is not touched.
 * A folder with only sharded safetensors or only pytorch_model.bin is
 * HF_ERR_UNSUPPORTED, saying how to re-save it.
 * @return : 0, HF_ERR_IO, HF_ERR_FORMAT, HF_ERR_MISMATCH, HF_ERR_UNSUPPORTED, HF_ERR_NOMEM.
 */
int hf_import(gpt_model *m, const char *dir, int tokenizer_vocab, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* MDS_HFCKPT_H */
