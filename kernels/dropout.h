/*
 * dropout.h - mds's dropout masks: counter-based, so a mask is a function of
 * what it applies to, never of the order in which numbers were drawn.
 *
 * Element `index` of a row keeps its value (scaled by 1 / (1 - p), as torch's
 * dropout does) unless
 *     (mds_mix64(row_key ^ site ^ mds_mix64(index + 0x9e3779b97f4a7c15)) >> 32)
 *         < threshold,  threshold = min(floor(p 2^32), 2^32 - 1),
 * with mds_mix64 the splitmix64 finaliser.  The model keys a row by the
 * seed and the row's position in the training stream (the consumed-sample
 * index: unique per iteration and sample, the same whatever the data-parallel
 * layout), a site by its kind and global layer, and an element by global
 * coordinates (token, channel; or head, query, key), so that tensor-parallel
 * ranks holding a replicated tensor draw the same mask (as Megatron's RNG
 * tracker makes them) and every parallel layout draws the one-process masks.
 * Megatron's masks come from torch's CUDA generator and are NOT reproduced
 * (docs/cli.md says so); resuming a run reproduces ours bitwise.
 *
 * Header-only: the CPU kernels and a device backend use the same function.
 */
#ifndef MDS_DROPOUT_H
#define MDS_DROPOUT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#define MDS_HD __host__ __device__
#else
#define MDS_HD
#endif

/* Dropout of one op: p = 0 means none (and the op runs as without it). */
typedef struct mds_dropout {
    float p;                   /* drop probability, in [0, 1) */
    uint64_t site;             /* the site's key (kind, global layer) */
    const uint64_t *row_keys;  /* (B) each row's key, in the backend's memory */
    int head0;                 /* attention: the global index of the rank's first head */
    int t0;                    /* hidden dropout: the global token of row t = 0 (a sequence-parallel
                                  slice starts at tp_rank T / TP); 0 otherwise */
} mds_dropout;

static inline MDS_HD uint64_t mds_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline MDS_HD uint32_t mds_dropout_threshold(float p)
{
    double t = (double)p * 4294967296.0;
    return t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
}

/* Nonzero when element index of the row keyed row_key survives. */
static inline MDS_HD int mds_dropout_keep(uint64_t row_key, uint64_t site, uint64_t index, uint32_t threshold)
{
    return (uint32_t)(mds_mix64(row_key ^ site ^ mds_mix64(index + 0x9e3779b97f4a7c15ull)) >> 32) >= threshold;
}

/* The key of a site: kind (0 embedding, 1 attention output, 2 MLP output,
 * 3 attention probabilities) and global layer. */
static inline MDS_HD uint64_t mds_dropout_site(int kind, int layer)
{
    return mds_mix64(((uint64_t)(unsigned)kind << 32 | (uint64_t)(unsigned)layer) + 0x632be59bd9b4e019ull);
}

/* The key of a row: the seed and the row's position in the training stream. */
static inline MDS_HD uint64_t mds_dropout_row(uint64_t seed, uint64_t position)
{
    return mds_mix64(mds_mix64(seed + 0xd1b54a32d192ed03ull) ^ (position * 0x9e3779b97f4a7c15ull));
}

#ifdef __cplusplus
}
#endif

#endif /* MDS_DROPOUT_H */
