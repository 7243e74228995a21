/*
 * tdsave.h - writing a Megatron-Core torch_dist checkpoint directory
 * (docs/architecture.md, "torch_dist checkpoints") from lists of
 * items, the way megatron.core.dist_checkpointing.save with torch's
 * FileSystemWriter (one writer thread, --dist-ckpt-workers 1) writes it:
 *
 *     ITER_DIR/__R_0.distcp   each rank R: its object items, then its tensor
 *                             chunks, each a torch.save archive (torchsave.h)
 *     ITER_DIR/.metadata      rank 0, after every rank wrote: the pickle of
 *                             torch.distributed.checkpoint's Metadata with
 *                             Megatron's all_local_plans
 *     ITER_DIR/metadata.json  rank 0, last: {"sharded_backend": "torch_dist",
 *                             "sharded_backend_version": 1}
 *
 * Every file is written under a .tmp name and renamed; the tracker file
 * (ckpt_write_latest) is the caller's, after tds_write_metadata.  Each rank
 * calls tds_write_rank with the items it owns (replicated ones only on their
 * main replica), which returns a blob describing them; the caller gathers
 * the blobs of all ranks to rank 0 (comm.h) in rank order and rank 0 calls
 * tds_write_metadata.  The bytes are the same as Megatron's for the same
 * items, save_id and checkpoint_id (tests/unit/test_tdsave.c rebuilds
 * every directory of tests/data/torch_dist byte for byte), which includes
 * the object identities the pickle shows (pickle.h): a Megatron ShardedTensor
 * with a prepended (layer) axis becomes a torch ShardedTensor, whose chunks
 * share one torch.Size and have no strides; any other tensor is a
 * CheckpointableShardedTensor, with its chunk's contiguous strides.
 *
 * The item order is the caller's and any order loads; Megatron's (needed
 * for its bytes) is its flattened model.sharded_state_dict(): keys in the
 * order they first appear, a layer-stacked key's chunks for every local
 * layer at its first appearance; in a layer the input norm, linear_proj,
 * linear_qkv, the pre-MLP norm, linear_fc1, linear_fc2, each linear's
 * weight, bias and _extra_state/shard_L_NL (the other layers' _extra_state
 * objects after all of those, layer by layer); embeddings first, then the
 * final norm and output_layer; common_state/shard_0_1 last, on rank 0 only
 * (the fixtures' all_local_plans show it).
 *
 * What it deliberately does not do: more than one writer thread per rank,
 * Megatron's spreading of replicated items over DP ranks
 * (--ckpt-fully-parallel-save: the caller chooses the owner), async saving,
 * tensors that are not contiguous, reading (the load side).
 *
 * Errors: 0 or a negative enum tds_err; one line naming the file (or item)
 * and the cause is written into err.
 * Thread safety: no global state.
 */
#ifndef MDS_TDSAVE_H
#define MDS_TDSAVE_H

#include "pickle.h"
#include "torchsave.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum tds_err {
    TDS_OK = 0,
    TDS_ERR_IO = -1,      /* create, write, fsync or rename failed */
    TDS_ERR_FORMAT = -2,  /* a rank's blob is malformed */
    TDS_ERR_NOMEM = -3,
    TDS_ERR_ARG = -4      /* a bad item (shape, chunk outside it, no data, long key) */
};

const char *tds_strerror(int code);

enum tds_kind { TDS_TENSOR = 0, TDS_OBJECT = 1 };

/* One item a rank writes: a tensor chunk or an object (ShardedObject). */
typedef struct tds_item {
    const char *key;                 /* the torch_dist key: "decoder.layers.mlp.linear_fc1.weight", "..._extra_state/shard_0_2" */
    int kind;                        /* enum tds_kind */
    /* TDS_OBJECT: the torch.save archive of the object (tds_object_archive) */
    const unsigned char *obj;
    size_t nobj;
    /* TDS_TENSOR */
    int dtype;                       /* enum ts_dtype */
    int ndim;
    uint64_t shape[TS_MAX_DIMS];     /* (ndim) the global shape */
    uint64_t offset[TS_MAX_DIMS];    /* (ndim) the chunk's offsets in it */
    uint64_t size[TS_MAX_DIMS];      /* (ndim) the chunk's shape */
    int stacked;                     /* a chunk of a layer-stacked tensor (Megatron's prepend_axis_num) */
    const void *data;                /* the chunk's elements, contiguous, little-endian */
} tds_item;

/*
 * tds_write_rank() - write iter_dir/__<rank>_0.distcp with the n items (in
 * the order of the rank's state dict: the file holds the objects first, then
 * the tensors, each in that order) and fill *blob with what rank 0 needs
 * (keys, shapes, chunks, offsets and lengths in the file; no data).  An item
 * of shape () is refused (Megatron has none).  iter_dir is created.
 * @return : 0, TDS_ERR_IO, TDS_ERR_NOMEM, TDS_ERR_ARG.  The caller releases
 * *blob (ts_buf_release), also on failure.
 */
int tds_write_rank(const char *iter_dir, int rank, const tds_item *items, size_t n, ts_buf *blob,
                  char *err, size_t errlen);

/*
 * tds_write_metadata() - rank 0: from the blobs of ranks 0..nranks-1 (in
 * rank order), write iter_dir/.metadata (checkpoint_id is the path Megatron
 * was given, "SAVE/iter_0000010"; save_id a uuid4 string, tds_new_save_id),
 * then iter_dir/metadata.json.
 * @return : 0, TDS_ERR_IO, TDS_ERR_FORMAT, TDS_ERR_NOMEM, TDS_ERR_ARG (no ranks).
 */
int tds_write_metadata(const char *iter_dir, const char *checkpoint_id, const char *save_id,
                      const ts_buf *blobs, int nranks, char *err, size_t errlen);

/*
 * tds_metadata_pickle() - the bytes tds_write_metadata writes to .metadata,
 * into a malloc'd *out of *len bytes (the caller frees it).
 * @return : 0, TDS_ERR_FORMAT, TDS_ERR_NOMEM, TDS_ERR_ARG.
 */
int tds_metadata_pickle(const char *checkpoint_id, const char *save_id, const ts_buf *blobs, int nranks,
                       unsigned char **out, size_t *len, char *err, size_t errlen);

/* A random uuid4 as Python's str(uuid.uuid4()) (36 characters and a NUL), from /dev/urandom; 0 or TDS_ERR_IO. */
int tds_new_save_id(char out[37]);

/* ---- the objects Megatron writes ------------------------------------------ */

/*
 * tds_object_archive() - append to out the torch.save archive of the list
 * [obj] (a ShardedObject's bytes: Megatron saves the list of a key's
 * objects), obj a node of d (pickled with protocol 2, as torch.save does).
 * obj NULL gives [None], the local spec's _extra_state.
 * @return : 0, TDS_ERR_NOMEM, TDS_ERR_ARG.
 */
int tds_object_archive(ts_buf *out, pk_doc *d, const pk_node *obj);

/*
 * The common state, common_state/shard_0_1: the dict Megatron's
 * generate_state_dict leaves after the sharded items are taken out, in its
 * order: args (an argparse.Namespace, tds_namespace; NULL: none),
 * checkpoint_version 3.0, iteration, opt_param_scheduler (tds_scheduler;
 * NULL: none), num_floating_point_operations_so_far (flops: an int or float
 * node; NULL: none), content_metadata (singleton_local_shards False,
 * chained_optim_avoid_prefix True).  The node is built in d.
 */
pk_node *tds_common_state(pk_doc *d, const pk_node *args, int64_t iteration, const pk_node *scheduler,
                         const pk_node *flops);

/* An argparse.Namespace whose attributes are the entries the caller pushes
 * (pk_push key, value) into *attrs, in order. */
pk_node *tds_namespace(pk_doc *d, pk_node **attrs);

/* Megatron's OptimizerParamScheduler.state_dict() (optimizer_param_scheduler.py:302-316). */
typedef struct tds_sched {
    double max_lr, min_lr, start_wd, end_wd;
    int64_t lr_warmup_steps, num_steps, lr_decay_steps, wd_incr_steps;
    const char *lr_decay_style;      /* "cosine", "linear", "constant", ... */
    const char *wd_incr_style;       /* "constant", "linear", "cosine" */
} tds_sched;

pk_node *tds_scheduler(pk_doc *d, const tds_sched *s);

#ifdef __cplusplus
}
#endif

#endif /* MDS_TDSAVE_H */
