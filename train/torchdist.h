/*
 * torchdist.h - Megatron-Core's torch_dist checkpoints (--ckpt-format
 * torch_dist, docs/architecture.md "torch_dist checkpoints") and mdstrain's
 * model: the mapping between one (TP, PP) rank's tensors and the
 * checkpoint's keys, and the model's read side.
 *
 * The mapping (td_items) lists, for the rank of a gpt_model, every chunk
 * that rank holds of every Megatron key, in Megatron's global coordinates:
 * the key, its global shape, the chunk's offsets and sizes, and where the
 * chunk's elements sit in the rank's flat parameters (param_sizes order).
 * Layer tensors are stacked on a leading axis of the global layer index
 * (one chunk per local layer, leading size 1); column-parallel tensors are
 * split on axis 1 (0 for the vocabulary), row-parallel ones on their last
 * axis; QKV rows are in Megatron's per-query-group order [q of the group's
 * heads, k, v] (mds keeps a rank's rows as [q | k | v]: td_item_gather and
 * td_item_scatter permute); SwiGLU's FC1 is two chunks, the rank's gate rows
 * at F tp_rank / TP and its up rows at F + F tp_rank / TP; the norms use the
 * Transformer Engine spec's names.  A chunk that another rank writes (a
 * tensor replicated over TP on tp_rank > 0, the tied output layer's copy on
 * the last stage) is marked replica: a writer skips it, a reader loads it
 * all the same.  The same list serves the save side.
 *
 * The reader (td_load) takes shapes and placements from .metadata only,
 * checks every chunk's torch.save archive (dtype, shape) against it, and
 * assembles each item of this rank from whatever stored chunks overlap it,
 * whatever TP/PP the checkpoint was written at; fp32, bf16 and fp16 storage
 * become the fp32 masters (as Megatron's reload_model_params does without a
 * stored fp32_param).  The padded vocabulary's rows may differ in number
 * (Megatron's allow_shape_mismatch): rows the checkpoint lacks start at 0.
 *
 * td_load_optimizer reads the AdamW state in the same way.
 *
 * What it deliberately does not do: print, exit, the optimizer's bucket
 * layouts (dp_reshardable), the RNG state (mds has none to restore), the embedding LayerNorm (no
 * Megatron-Core key: refused), virtual pipeline stages, writing.
 *
 * Errors: 0 or a negative enum td_err with one line in err naming the file
 * (and the key) and the cause.
 * Thread safety: no global state.
 */
#ifndef MDS_TORCHDIST_H
#define MDS_TORCHDIST_H

#include "model.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum td_err {
    TD_OK = 0,
    TD_ERR_IO = -1,          /* a file cannot be opened or read */
    TD_ERR_FORMAT = -2,      /* a malformed file: metadata.json, .metadata, an archive */
    TD_ERR_MISMATCH = -3,    /* the checkpoint's model is not this model (a key, a shape) */
    TD_ERR_UNSUPPORTED = -4, /* what mds does not express in torch_dist (the embedding LayerNorm) */
    TD_ERR_NOMEM = -5
};

const char *td_strerror(int code);

#define TD_MAX_KEY 96
#define TD_MAX_DIMS 3

/* One chunk of one key held by a rank. */
typedef struct td_item {
    char key[TD_MAX_KEY];
    int ndim;
    uint64_t shape[TD_MAX_DIMS];  /* the global shape */
    uint64_t off[TD_MAX_DIMS];    /* the chunk's offsets in it */
    uint64_t size[TD_MAX_DIMS];   /* and sizes */
    int param;                    /* enum gpt_param_id */
    size_t base;                  /* flat parameter element of the chunk's first local element */
    int qkv;                      /* rows (axis 1) in Megatron's per-group order; width C or 1 */
    int replica;                  /* written by another rank (TP rank 0 of the stage, the first stage) */
    int resizable;                /* the padded vocabulary: the global rows may differ on load */
} td_item;

/* Elements of an item's chunk. */
size_t td_item_numel(const td_item *it);

/*
 * td_items() - every chunk m's rank holds, in param_sizes order (a layer's
 * tensors by layer); *out is malloc'd (the caller frees it).
 * @return : 0, TD_ERR_UNSUPPORTED (the embedding LayerNorm), TD_ERR_NOMEM.
 */
int td_items(const gpt_model *m, td_item **out, size_t *n, char *err, size_t errlen);

/* The chunk (contiguous, row-major, Megatron's order) from the rank's flat
 * fp32 parameters, and back. */
void td_item_gather(const gpt_model *m, const td_item *it, const float *params, float *chunk);
void td_item_scatter(const gpt_model *m, const td_item *it, const float *chunk, float *params);

/*
 * td_is_checkpoint() - whether iter_dir is a distributed checkpoint, as
 * Megatron's check_is_distributed_checkpoint decides: 1 when it has
 * metadata.json; -1 when it has a .metadata but no metadata.json (a save
 * that did not finish: metadata.json is written last); 0 otherwise.
 */
int td_is_checkpoint(const char *iter_dir);

/* What the common state and the key list say besides the weights. */
typedef struct td_state {
    uint64_t iteration;            /* common_state's 'iteration' */
    int has_args;                  /* an 'args' Namespace was saved */
    uint64_t consumed_train_samples, consumed_valid_samples;   /* from args, else 0 */
    int args_tp, args_pp;          /* args' tensor/pipeline sizes, 1 when absent (as Megatron takes them) */
    int args_no_save_optim, args_no_save_rng;   /* args' --no-save-optim / --no-save-rng (0 when absent) */
    /* what Megatron's check_checkpoint_args compares, -1 (or "") when args lack it */
    int64_t args_num_layers, args_hidden_size, args_num_attention_heads;
    int64_t args_max_position_embeddings, args_make_vocab_size_divisible_by;
    char args_tokenizer_type[64];
    int has_optimizer;             /* optimizer.* keys or an 'optimizer' common entry */
    int has_scheduler;             /* 'opt_param_scheduler' in the common state */
    int has_rng;                   /* rng_state items */
    /* the optimizer's common part: its sharding type ("" for the plain
       optimizer's layout), the Adam step of its param_groups (has_step 0:
       none found), and the scheduler's state (Megatron's
       OptimizerParamScheduler.state_dict, in samples) */
    char optim_sharding[32];
    int has_step;
    uint64_t step;
    double sched_max_lr, sched_min_lr, sched_warmup_steps, sched_decay_steps, sched_num_steps;
    char sched_decay_style[16];
} td_state;

/*
 * td_load() - read iter_dir (DIR/iter_NNNNNNN) into m's weights (masters
 * and working copy, this rank's slice) and *st.  metadata.json must say
 * sharded_backend torch_dist version 1; every key of m's items must be in
 * .metadata with its global shape (the vocabulary's rows aside) and a
 * float dtype, its chunks in bounds, disjoint and covering it; a model key
 * of the checkpoint that m lacks (a bias, the untied output, ...) is
 * refused.  m's weights are unspecified on failure.
 * @return : 0, TD_ERR_IO, TD_ERR_FORMAT, TD_ERR_MISMATCH, TD_ERR_UNSUPPORTED, TD_ERR_NOMEM.
 */
int td_load(gpt_model *m, const char *iter_dir, td_state *st, char *err, size_t errlen);

/*
 * td_load_optimizer() - read the AdamW state of iter_dir into m (this
 * rank's range of it): Megatron's model-space layout, which the plain
 * optimizer and the distributed one's 'fully_reshardable' sharding write,
 * optimizer.state.exp_avg.KEY and optimizer.state.exp_avg_sq.KEY with each
 * model key's shape and chunks, read as td_load reads the model (any
 * TP/PP); the fp32 masters from optimizer.state.param.KEY (distributed) or
 * optimizer.state.fp32_param.KEY (plain, 16-bit weights) when there, else
 * they stay the weights td_load read; the step from the param_groups.  Call
 * after td_load, with its *st.  Another layout (dp_reshardable's buckets,
 * optimizer.distributed.*) is TD_ERR_UNSUPPORTED naming it.
 * @return : 0, TD_ERR_IO, TD_ERR_FORMAT, TD_ERR_MISMATCH, TD_ERR_UNSUPPORTED, TD_ERR_NOMEM.
 */
int td_load_optimizer(gpt_model *m, const char *iter_dir, const td_state *st, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* MDS_TORCHDIST_H */
