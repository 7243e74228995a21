/*
 * comm_nccl.c - comm.h's NCCL transport (built when the Makefile finds CUDA
 * and NCCL: MDS_HAVE_NCCL), for the CUDA backend's device buffers.
 *
 * COMPILED, NEVER RUN: the project's machines have no GPU, so no line of
 * this file has executed against a device (on a machine without a GPU,
 * comm_nccl_init() stops at its first check, which tests/mpi/test_comm.c
 * runs).  mdstrain does not select it: --device cuda with more than one
 * rank is still refused (docs/architecture.md, "NCCL").
 *
 * Design.  An NCCL communicator sits beside a host one (the TCP or MPI
 * world, or the host group of the same ranks after comm_split): device
 * buffers go to NCCL, enqueued on the communicator's stream
 * (comm_set_stream, else a stream of its own) and returning at once; host
 * buffers (the trainer's scalars: loss sums, the squared norm, found-inf)
 * go through the host group, synchronously, with comm.c's rank-ordered
 * sums.  cudaPointerGetAttributes tells them apart.
 *
 * Bootstrap: rank 0 of each group makes one ncclUniqueId and broadcasts it
 * over the host group (the TCP rendezvous' mesh or MPI), then
 * ncclCommInitRank.  Before any NCCL call every rank agrees, by a host
 * all-reduce, that every rank bound its GPU, so one rank's failure never
 * leaves the others waiting in ncclCommInitRank.
 *
 * GPU binding: the local rank from SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK
 * or LOCAL_RANK, else the rank's place among the ranks of its host; the
 * ranks of a host (by host name, gathered over the host world) must not
 * outnumber its GPUs, except a launcher that shows each task one GPU
 * (CUDA_VISIBLE_DEVICES per task): device 0.  Two ranks of a host on the
 * same GPU (same UUID) are refused.
 *
 * Errors: NCCL reports failures of enqueued work asynchronously;
 * ncclCommGetAsyncError is read before every enqueue and while a barrier
 * waits for the stream, and a failed communicator is aborted
 * (ncclCommAbort).  The collective watchdog (comm_set_timeout, Megatron's
 * --distributed-timeout-minutes) aborts every NCCL communicator before it
 * ends the process (comm_watchdog_hook), so no kernel spins on a dead peer.
 *
 * Determinism: NCCL's sums are not rank-ordered (comm.h); the counters use
 * comm.c's formulas (a ring all-reduce's 2 (p-1) ceil(n/p) elements), so
 * bench/comm_plan.py's figures hold for this transport too.
 *
 * Not done: ncclCommSplit (one init per group instead), user buffer
 * registration, overlap of the gradient reduction with the backward pass.
 */
#include "comm_internal.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct nccl_impl {
    ncclComm_t nc;            /* NULL in a group of one rank */
    mds_comm *host;           /* the same ranks over the host transport (owned) */
    cudaStream_t own;         /* used when comm_set_stream gave none */
    struct nccl_impl *next;   /* every live communicator, for the watchdog's abort */
};

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nccl_impl *live;

static struct nccl_impl *impl_of(const mds_comm *c) { return (struct nccl_impl *)c->impl; }
static cudaStream_t stream_of(const mds_comm *c) { return c->stream ? (cudaStream_t)c->stream : impl_of(c)->own; }

static int nccl_fail(const char *what, ncclResult_t r)
{
    return comm_fail("%s: %s (NCCL %s)", what, ncclGetErrorString(r), ncclGetLastError(NULL));
}

/* The watchdog's hook: abort every NCCL communicator (from its thread). */
static void abort_all(void)
{
    pthread_mutex_lock(&live_lock);
    for (struct nccl_impl *i = live; i; i = i->next)
        if (i->nc) ncclCommAbort(i->nc);
    live = NULL;
    pthread_mutex_unlock(&live_lock);
}

/* A failure NCCL found in work already enqueued: abort the communicator. */
static int async_check(mds_comm *c, const char *what)
{
    struct nccl_impl *i = impl_of(c);
    ncclResult_t st = ncclSuccess;
    if (!i->nc) return 0;
    ncclResult_t r = ncclCommGetAsyncError(i->nc, &st);
    if (r != ncclSuccess) return nccl_fail(what, r);
    if (st != ncclSuccess && st != ncclInProgress) {
        int rc = nccl_fail(what, st);
        ncclCommAbort(i->nc);
        pthread_mutex_lock(&live_lock);
        for (struct nccl_impl **p = &live; *p; p = &(*p)->next)
            if (*p == i) { *p = i->next; break; }
        pthread_mutex_unlock(&live_lock);
        i->nc = NULL;
        return rc;
    }
    return 0;
}

static int is_device(const void *p)
{
    struct cudaPointerAttributes a;
    if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();   /* clear the sticky-free error of a plain host pointer */
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static int dtype_of(enum comm_dtype dt, ncclDataType_t *t)
{
    switch (dt) {
    case COMM_F32: *t = ncclFloat32; return 0;
    case COMM_F64: *t = ncclFloat64; return 0;
    case COMM_BF16: *t = ncclBfloat16; return 0;
    case COMM_F16: *t = ncclFloat16; return 0;
    }
    return comm_fail("unknown communication dtype %d", (int)dt);
}

/* ---- device collectives (comm.c calls them for device buffers) ------------ */

#define NCCL_TRY(what, expr) do { ncclResult_t r_ = (expr); if (r_ != ncclSuccess) return nccl_fail((what), r_); } while (0)
#define CUDA_TRY(what, expr) do { cudaError_t e_ = (expr); if (e_ != cudaSuccess) \
    return comm_fail("%s: %s", (what), cudaGetErrorString(e_)); } while (0)

static int dev_allreduce(mds_comm *c, void *buf, size_t n, enum comm_dtype dt, enum comm_op op)
{
    ncclDataType_t t = ncclFloat32;
    if (dtype_of(dt, &t) || async_check(c, "NCCL all-reduce")) return -1;
    NCCL_TRY("NCCL all-reduce", ncclAllReduce(buf, buf, n, t, op == COMM_MAX ? ncclMax : ncclSum, impl_of(c)->nc,
                                              stream_of(c)));
    return 0;
}

static int dev_reduce_scatter(mds_comm *c, float *out, const float *in, size_t chunk)
{
    if (c->size == 1) {
        if (out != in) CUDA_TRY("reduce-scatter copy", cudaMemcpyAsync(out, in, chunk * sizeof *out,
                                                                       cudaMemcpyDeviceToDevice, stream_of(c)));
        return 0;
    }
    if (async_check(c, "NCCL reduce-scatter")) return -1;
    NCCL_TRY("NCCL reduce-scatter", ncclReduceScatter(in, out, chunk, ncclFloat32, ncclSum, impl_of(c)->nc, stream_of(c)));
    return 0;
}

static int dev_allgather(mds_comm *c, float *out, const float *in, size_t chunk)
{
    if (c->size == 1) {
        if (out != in) CUDA_TRY("all-gather copy", cudaMemcpyAsync(out, in, chunk * sizeof *out,
                                                                   cudaMemcpyDeviceToDevice, stream_of(c)));
        return 0;
    }
    if (async_check(c, "NCCL all-gather")) return -1;
    /* in == out + rank*chunk is NCCL's in-place all-gather */
    NCCL_TRY("NCCL all-gather", ncclAllGather(in, out, chunk, ncclFloat32, impl_of(c)->nc, stream_of(c)));
    return 0;
}

static int dev_broadcast(mds_comm *c, void *buf, size_t bytes, int root)
{
    if (async_check(c, "NCCL broadcast")) return -1;
    NCCL_TRY("NCCL broadcast", ncclBroadcast(buf, buf, bytes, ncclUint8, root, impl_of(c)->nc, stream_of(c)));
    return 0;
}

/* Both halves in one NCCL group, so two neighbours exchanging at once
 * (1F1B's send_forward_recv_backward) cannot deadlock. */
static int dev_sendrecv(mds_comm *c, const void *sbuf, size_t sbytes, int speer, void *rbuf, size_t rbytes, int rpeer)
{
    if (c->size == 1) {
        if (speer != rpeer || sbytes != rbytes) return comm_fail("send/receive in a one-process group");
        if (rbuf != sbuf) CUDA_TRY("send/receive copy", cudaMemcpyAsync(rbuf, sbuf, sbytes, cudaMemcpyDeviceToDevice,
                                                                        stream_of(c)));
        return 0;
    }
    if (async_check(c, "NCCL send/receive")) return -1;
    struct nccl_impl *i = impl_of(c);
    NCCL_TRY("NCCL send/receive", ncclGroupStart());
    ncclResult_t r = ncclSuccess;
    if (speer >= 0) r = ncclSend(sbuf, sbytes, ncclUint8, speer, i->nc, stream_of(c));
    if (r == ncclSuccess && rpeer >= 0) r = ncclRecv(rbuf, rbytes, ncclUint8, rpeer, i->nc, stream_of(c));
    ncclResult_t e = ncclGroupEnd();
    if (r != ncclSuccess) return nccl_fail("NCCL send/receive", r);
    if (e != ncclSuccess) return nccl_fail("NCCL send/receive", e);
    return 0;
}

/* Wait for the stream, reading NCCL's asynchronous errors meanwhile (comm.c
 * watches this wait), then the host barrier. */
static int dev_barrier(mds_comm *c)
{
    cudaStream_t s = stream_of(c);
    for (;;) {
        cudaError_t e = cudaStreamQuery(s);
        if (e == cudaSuccess) break;
        if (e != cudaErrorNotReady) return comm_fail("waiting for the NCCL stream: %s", cudaGetErrorString(e));
        if (async_check(c, "NCCL barrier")) return -1;
        struct timespec nap = {0, 200 * 1000};
        nanosleep(&nap, NULL);
    }
    if (async_check(c, "NCCL barrier")) return -1;
    return comm_barrier(impl_of(c)->host);
}

static const struct comm_dev_ops nccl_dev = {
    is_device, dev_allreduce, dev_reduce_scatter, dev_allgather, dev_broadcast, dev_sendrecv, dev_barrier,
};

/* ---- host buffers: the host group's primitives ---------------------------- */

static int h_alltoall(mds_comm *c, const void *s, void *r, size_t bytes)
{
    mds_comm *h = impl_of(c)->host;
    return h->ops->alltoall(h, s, r, bytes);
}
static int h_allgather(mds_comm *c, const void *s, void *r, size_t bytes)
{
    mds_comm *h = impl_of(c)->host;
    return h->ops->allgather(h, s, r, bytes);
}
static int h_max(mds_comm *c, void *buf, size_t n, enum comm_dtype dt)
{
    mds_comm *h = impl_of(c)->host;
    return h->ops->max(h, buf, n, dt);
}
static int h_broadcast(mds_comm *c, void *buf, size_t bytes, int root)
{
    mds_comm *h = impl_of(c)->host;
    return h->ops->broadcast(h, buf, bytes, root);
}
static int h_barrier(mds_comm *c) { return dev_barrier(c); }
static int h_sendrecv(mds_comm *c, const void *sbuf, size_t sbytes, int speer, void *rbuf, size_t rbytes, int rpeer)
{
    mds_comm *h = impl_of(c)->host;
    return h->ops->sendrecv(h, sbuf, sbytes, speer, rbuf, rbytes, rpeer);
}

static const char *nccl_name(void)
{
    static char name[64];
    int v = 0;
    if (!name[0]) {
        ncclGetVersion(&v);
        snprintf(name, sizeof name, "NCCL %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    }
    return name;
}

static void nccl_release(mds_comm *c)
{
    struct nccl_impl *i = impl_of(c);
    if (!i) return;
    pthread_mutex_lock(&live_lock);
    for (struct nccl_impl **p = &live; *p; p = &(*p)->next)
        if (*p == i) { *p = i->next; break; }
    pthread_mutex_unlock(&live_lock);
    if (i->nc) ncclCommDestroy(i->nc);
    if (i->own) cudaStreamDestroy(i->own);
    comm_free(i->host);
    free(i);
    c->impl = NULL;
}

static int nccl_split(mds_comm *c, int color, int key, mds_comm *g);

static const struct comm_ops nccl_ops = {
    nccl_split, nccl_release, h_alltoall, h_allgather, h_max, h_broadcast, h_barrier, h_sendrecv,
    NULL, NULL, nccl_name,
};

/*
 * The NCCL communicator of host group h (taken over: freed with it) into
 * g: one ncclUniqueId made by h's rank 0 and broadcast over h.  Collective
 * over h.  On failure g is released (its impl NULL).
 */
static int attach_nccl(mds_comm *h, mds_comm *g, struct nccl_impl *i);

static int attach(mds_comm *h, mds_comm *g)
{
    struct nccl_impl *i = calloc(1, sizeof *i);
    if (!i) {
        comm_free(h);
        return comm_fail("out of memory");
    }
    i->host = h;
    g->impl = i;
    int rc = attach_nccl(h, g, i);
    if (rc) nccl_release(g);   /* comm_split frees g without releasing it */
    return rc;
}

static int attach_nccl(mds_comm *h, mds_comm *g, struct nccl_impl *i)
{
    g->rank = h->rank;
    g->size = h->size;
    g->ops = &nccl_ops;
    g->dev = &nccl_dev;
    cudaError_t e = cudaStreamCreateWithFlags(&i->own, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        i->own = NULL;
        return comm_fail("cannot create the NCCL stream: %s", cudaGetErrorString(e));
    }
    if (h->size > 1) {
        ncclUniqueId id;
        memset(&id, 0, sizeof id);
        if (h->rank == 0) NCCL_TRY("ncclGetUniqueId", ncclGetUniqueId(&id));
        if (comm_broadcast(h, &id, sizeof id, 0)) return -1;
        NCCL_TRY("ncclCommInitRank", ncclCommInitRank(&i->nc, h->size, id, h->rank));
    }
    pthread_mutex_lock(&live_lock);
    i->next = live;
    live = i;
    pthread_mutex_unlock(&live_lock);
    return 0;
}

/* comm.c's comm_split made g with this table; fill it: the host group of
 * the same split, then its NCCL communicator.  (g is freed by comm_split's
 * caller on failure through comm_free, which calls nccl_release.) */
static int nccl_split(mds_comm *c, int color, int key, mds_comm *g)
{
    mds_comm *h;
    if (comm_split(impl_of(c)->host, color, key, &h)) return -1;
    return attach(h, g);
}

/* ---- start-up: the GPU of this rank ---------------------------------------- */

/* The local rank a launcher announces, or -1. */
static int env_local_rank(void)
{
    static const char *const names[] = {"SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        const char *v = getenv(names[k]);
        if (v && *v) {
            char *end;
            long x = strtol(v, &end, 10);
            if (!*end && x >= 0 && x < 1 << 20) return (int)x;
        }
    }
    return -1;
}

#define HOSTN 64

/*
 * Bind this rank's GPU: the ranks of each host (host names gathered over
 * the host world) against its GPU count, then the UUIDs of the chosen GPUs.
 * Every rank reaches the end (the gathers are collective); a failure is
 * reported after them.
 */
static int bind_gpu(mds_comm *host, char *why, size_t whylen)
{
    int p = host->size, r = host->rank, ndev = 0;
    why[0] = 0;
    char (*names)[HOSTN] = calloc((size_t)p, HOSTN);
    unsigned char (*uuid)[16] = calloc((size_t)p, 16);
    if (!names || !uuid) {
        free(names);
        free(uuid);
        return comm_fail("out of memory");
    }
    gethostname(names[r], HOSTN - 1);
    int rc = 0;
    if (p > 1 && host->ops->allgather(host, NULL, names, HOSTN)) rc = -1;
    int nlocal = 0, place = 0;
    for (int k = 0; rc == 0 && k < p; k++)
        if (!strncmp(names[k], names[r], HOSTN)) {
            if (k < r) place++;
            nlocal++;
        }
    int local = env_local_rank();
    if (local < 0) local = place;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    int dev = -1;
    if (rc == 0) {
        if (e != cudaSuccess || ndev == 0)
            snprintf(why, whylen, "no CUDA device (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        else if (ndev >= nlocal && local < ndev)
            dev = local;
        else if (ndev == 1 && getenv("CUDA_VISIBLE_DEVICES"))
            dev = 0;   /* the launcher shows each task its own GPU; the UUIDs below check it */
        else
            snprintf(why, whylen, "%d ranks on host '%s' (local rank %d) but %d GPU%s", nlocal, names[r], local, ndev,
                     ndev == 1 ? "" : "s");
        if (dev >= 0) {
            struct cudaDeviceProp prop;
            if ((e = cudaSetDevice(dev)) != cudaSuccess || (e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess)
                snprintf(why, whylen, "cannot use GPU %d: %s", dev, cudaGetErrorString(e));
            else
                memcpy(uuid[r], prop.uuid.bytes, 16);
        }
    }
    if (rc == 0 && p > 1 && host->ops->allgather(host, NULL, uuid, 16)) rc = -1;
    for (int k = 0; rc == 0 && !why[0] && k < p; k++)
        if (k != r && !strncmp(names[k], names[r], HOSTN) && !memcmp(uuid[k], uuid[r], 16))
            snprintf(why, whylen, "ranks %d and %d of host '%s' would share GPU %d", k < r ? k : r, k < r ? r : k,
                     names[r], dev);
    free(names);
    free(uuid);
    return rc;
}

int comm_nccl_init(mds_comm *host, mds_comm **world)
{
    *world = NULL;
    char why[256];
    if (bind_gpu(host, why, sizeof why)) return -1;
    /* every rank bound its GPU, or all stop here together */
    double bad = why[0] ? 1.0 : 0.0;
    if (comm_allreduce(host, &bad, 1, COMM_F64, COMM_MAX)) return -1;
    if (why[0]) return comm_fail("rank %d: %s", host->rank, why);
    if (bad > 0) return comm_fail("rank %d: another rank could not bind its GPU", host->rank);
    mds_comm *h;
    if (comm_split(host, 0, host->rank, &h)) return -1;   /* the NCCL world's own host group */
    mds_comm *w = comm_new(0, 1, &nccl_ops, NULL);
    if (!w) {
        comm_free(h);
        return comm_fail("out of memory");
    }
    if (attach(h, w)) {
        comm_free(w);
        return -1;
    }
    comm_watchdog_hook = abort_all;
    *world = w;
    return 0;
}
