/*
 * comm_nccl.c - comm.h's NCCL transport (built when the Makefile finds CUDA
 * and NCCL: MDS_HAVE_NCCL), for the CUDA backend's device buffers.
 *
 * Run at world size 1 on an H200 (2026-11-27: tests/gpu/test_train_gpu.sh's
 * NCCL world of one, every collective through NCCL, bitwise the plain GPU
 * run); not yet between GPUs (the lent machines have one), so the split
 * groups, send/receive and the watcher's abort paths have not run.  On a
 * machine without a GPU comm_nccl_init() stops at its first check, which
 * tests/mpi/test_comm.c runs.  mdstrain selects it for --device cuda with
 * one GPU per rank (comm_place).
 *
 * Design.  An NCCL communicator sits beside a host one (the TCP or MPI
 * world, or the host group of the same ranks after comm_split): device
 * buffers go to NCCL and host buffers (the trainer's scalars: loss sums,
 * the squared norm, found-inf) go through the host group, synchronously,
 * with comm.c's rank-ordered sums.  cudaPointerGetAttributes tells them
 * apart.
 *
 * Streams: each communicator's NCCL work runs on a stream of its own.  An
 * event recorded on the compute stream (comm_set_stream; NULL: the legacy
 * default stream, the CUDA backend's) makes it wait for the kernels that
 * produced its input; an event recorded after it makes the compute stream
 * wait for its result.  So the trainer's order holds without a host sync,
 * and the call returns at once.
 *
 * Bootstrap: the world's rank 0 makes one ncclUniqueId and broadcasts it
 * over the host group (the TCP rendezvous' mesh or MPI), then
 * ncclCommInitRank; every group is split from its parent with
 * ncclCommSplit (NCCL 2.18 and later, header and library, agreed by every
 * rank; else each group makes its own id the same way), groups of one rank
 * too.  Before any NCCL call every
 * rank agrees, by a host all-reduce, that every rank has a GPU of its own
 * (the current device, bound by the caller: comm_place chose it; two ranks
 * with the same UUID are refused), so one rank's failure never leaves the
 * others waiting in ncclCommInitRank.
 *
 * Errors: NCCL reports failures of enqueued work asynchronously.  A watcher
 * thread polls every live communicator that has work outstanding (its
 * done-event not reached): ncclCommGetAsyncError, and the time since the
 * work was enqueued against comm_set_timeout's seconds (Megatron's
 * --distributed-timeout-minutes; 10 minutes, Megatron's default, when not
 * set); either aborts every NCCL communicator
 * (ncclCommAbort, so the main thread's wait returns) and ends the process
 * with one line naming the rank and the collective (comm_fatal).  Over the
 * TCP host transport the watcher also asks comm_peer_check (the side
 * channel of comm_tcp.c), so a rank that died or failed ends the others
 * within the watcher's 50 ms, not at the timeout; a slow but living peer
 * still gets the whole timeout.  The host
 * collective watchdog (comm.c) aborts them too before it ends the process
 * (comm_watchdog_hook), so no kernel spins on a dead peer.
 *
 * Determinism: NCCL's sums are not rank-ordered (comm.h); the counters use
 * comm.c's formulas (a ring all-reduce's 2 (p-1) ceil(n/p) elements), so
 * bench/comm_plan.py's figures hold for this transport too.
 *
 * Overlap (comm_allreduce_start, --overlap-grad-reduce): the all-reduce is
 * enqueued at once, but the compute stream waits for its done-event only
 * at comm_wait, so the backward's kernels run beside NCCL's.
 *
 * Not done: user buffer registration.
 */
#include "comm_internal.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct nccl_impl {
    ncclComm_t nc;            /* NULL once aborted */
    mds_comm *host;           /* the same ranks over the host transport (owned) */
    cudaStream_t own;         /* NCCL's work on this communicator */
    cudaEvent_t ready, done;  /* compute stream -> own, own -> compute stream */
    int deferred;             /* comm_allreduce_start's work the compute stream has not yet waited for */
    cudaEvent_t *evs;         /* one per deferred collective since the last wait, for wait_some */
    size_t nev, evcap;
    int rank, size;
    /* for the watcher: when work was last enqueued (0: none outstanding),
       what it was, and a count that tells a newer enqueue from the one it saw done */
    _Atomic long long since_ms;
    _Atomic unsigned long seq;
    const char *_Atomic what;
    struct nccl_impl *next;   /* every live communicator, for the watcher and the abort */
};

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nccl_impl *live;
static int live_device;       /* the GPU, for the watcher thread's CUDA calls */

static struct nccl_impl *impl_of(const mds_comm *c) { return (struct nccl_impl *)c->impl; }
static cudaStream_t stream_of(const mds_comm *c) { return impl_of(c)->own; }

static int nccl_fail(const char *what, ncclResult_t r)
{
    return comm_fail("%s: %s (NCCL %s)", what, ncclGetErrorString(r), ncclGetLastError(NULL));
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The watchdog's hook: abort every NCCL communicator (from its thread). */
static void abort_all(void)
{
    pthread_mutex_lock(&live_lock);
    for (struct nccl_impl *i = live; i; i = i->next)
        if (i->nc) {
            ncclCommAbort(i->nc);
            i->nc = NULL;
        }
    live = NULL;
    pthread_mutex_unlock(&live_lock);
}

static const char *group_word(int size) { return size == 1 ? "rank" : "ranks"; }

/* NCCL work outstanding this long ends the rank when no timeout was set:
 * Megatron's --distributed-timeout-minutes default (torch's NCCL watchdog),
 * since a kernel waiting for a dead peer may never return otherwise. */
#define NCCL_DEFAULT_TIMEOUT_S 600.0

/*
 * The watcher: every 50 ms, each live communicator with work outstanding
 * (since_ms set and its done-event not reached) is asked for an
 * asynchronous error and held to comm_timeout()'s bound.  The event query
 * and ncclCommGetAsyncError are safe beside the main thread's calls; a
 * newer enqueue (seq moved) keeps since_ms.  On a failure: abort all, then
 * comm_fatal, which ends the process.
 */
static void *watcher(void *arg)
{
    (void)arg;
    cudaSetDevice(live_device);
    for (;;) {
        struct timespec nap = {0, 50 * 1000000};
        nanosleep(&nap, NULL);
        char msg[512] = "", why[320];
        double limit = comm_timeout() > 0 ? comm_timeout() : NCCL_DEFAULT_TIMEOUT_S;
        pthread_mutex_lock(&live_lock);
        for (struct nccl_impl *i = live; i && !msg[0]; i = i->next) {
            long long since = atomic_load(&i->since_ms);
            if (!since || !i->nc) continue;
            unsigned long seq = atomic_load(&i->seq);
            const char *what = atomic_load(&i->what);
            ncclResult_t st = ncclSuccess;
            if (ncclCommGetAsyncError(i->nc, &st) == ncclSuccess && st != ncclSuccess && st != ncclInProgress)
                snprintf(msg, sizeof msg, "rank %d: %s (group of %d %s) failed: %s (NCCL %s)", i->rank, what, i->size,
                         group_word(i->size), ncclGetErrorString(st), ncclGetLastError(i->nc));
            else if (cudaEventQuery(i->done) == cudaSuccess) {
                if (atomic_load(&i->seq) == seq) atomic_compare_exchange_strong(&i->since_ms, &since, 0);
            } else if ((double)(now_ms() - since) / 1000.0 > limit) {
                snprintf(msg, sizeof msg, "rank %d: %s (group of %d %s) did not complete within %g s "
                         "(--distributed-timeout-minutes); a rank stopped or is far slower", i->rank, what, i->size,
                         group_word(i->size), limit);
            } else if (comm_peer_check && comm_peer_check(why, sizeof why)) {
                /* a dead peer's kernels never finish: the host side channel says so at once */
                snprintf(msg, sizeof msg, "rank %d: %s (group of %d %s): %s", i->rank, what, i->size,
                         group_word(i->size), why);
            }
        }
        pthread_mutex_unlock(&live_lock);
        if (msg[0]) {
            abort_all();
            comm_fatal(msg);
        }
    }
    return NULL;
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
        pthread_mutex_lock(&live_lock);   /* out of the watcher's sight first */
        for (struct nccl_impl **p = &live; *p; p = &(*p)->next)
            if (*p == i) { *p = i->next; break; }
        pthread_mutex_unlock(&live_lock);
        ncclCommAbort(i->nc);
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

/* Before enqueuing `what` on c's stream: wait there for the compute stream. */
static int enqueue_begin(mds_comm *c, const char *what)
{
    struct nccl_impl *i = impl_of(c);
    if (async_check(c, what)) return -1;
    if (!i->nc) return comm_fail("%s: the NCCL communicator was aborted", what);
    CUDA_TRY(what, cudaEventRecord(i->ready, (cudaStream_t)c->stream));
    CUDA_TRY(what, cudaStreamWaitEvent(i->own, i->ready, 0));
    return 0;
}

/* After: the compute stream waits for c's stream (at once, or at
 * dev_wait when deferred); the watcher watches. */
static int enqueue_end(mds_comm *c, const char *what, int defer)
{
    struct nccl_impl *i = impl_of(c);
    CUDA_TRY(what, cudaEventRecord(i->done, i->own));
    if (defer) {   /* this collective's own event, for wait_some */
        if (i->nev == i->evcap) {
            size_t cap = i->evcap ? 2 * i->evcap : 16;
            cudaEvent_t *e = realloc(i->evs, cap * sizeof *e);
            if (!e) return comm_fail("%s: out of memory", what);
            memset(e + i->evcap, 0, (cap - i->evcap) * sizeof *e);
            i->evs = e;
            i->evcap = cap;
        }
        if (!i->evs[i->nev]) CUDA_TRY(what, cudaEventCreateWithFlags(&i->evs[i->nev], cudaEventDisableTiming));
        CUDA_TRY(what, cudaEventRecord(i->evs[i->nev], i->own));
        i->nev++;
    }
    i->deferred = defer;
    if (!defer) CUDA_TRY(what, cudaStreamWaitEvent((cudaStream_t)c->stream, i->done, 0));
    atomic_store(&i->what, what);
    atomic_fetch_add(&i->seq, 1);
    atomic_store(&i->since_ms, now_ms());
    return 0;
}

#define ENQUEUE_DEFER(c, what, expr, defer) do { \
        if (enqueue_begin((c), (what))) return -1; \
        NCCL_TRY((what), (expr)); \
        return enqueue_end((c), (what), (defer)); \
    } while (0)
#define ENQUEUE(c, what, expr) ENQUEUE_DEFER(c, what, expr, 0)

static int allreduce_on_stream(mds_comm *c, void *buf, size_t n, enum comm_dtype dt, enum comm_op op, int defer)
{
    ncclDataType_t t = ncclFloat32;
    if (dtype_of(dt, &t)) return -1;
    ENQUEUE_DEFER(c, "NCCL all-reduce", ncclAllReduce(buf, buf, n, t, op == COMM_MAX ? ncclMax : ncclSum,
                                                      impl_of(c)->nc, stream_of(c)), defer);
}

static int dev_allreduce(mds_comm *c, void *buf, size_t n, enum comm_dtype dt, enum comm_op op)
{
    return allreduce_on_stream(c, buf, n, dt, op, 0);
}

/* --overlap-grad-reduce: the backward's kernels go on while NCCL's stream
 * reduces the buckets; dev_wait makes the compute stream wait for them. */
static int dev_allreduce_start(mds_comm *c, void *buf, size_t n, enum comm_dtype dt, enum comm_op op)
{
    return allreduce_on_stream(c, buf, n, dt, op, 1);
}

static int dev_wait(mds_comm *c)
{
    struct nccl_impl *i = impl_of(c);
    i->nev = 0;
    if (!i->deferred) return 0;
    i->deferred = 0;
    CUDA_TRY("NCCL all-reduce", cudaStreamWaitEvent((cudaStream_t)c->stream, i->done, 0));
    return 0;
}

static int reduce_scatter_on_stream(mds_comm *c, float *out, const float *in, size_t chunk, int defer)
{
    ENQUEUE_DEFER(c, "NCCL reduce-scatter", ncclReduceScatter(in, out, chunk, ncclFloat32, ncclSum, impl_of(c)->nc,
                                                              stream_of(c)), defer);
}

static int dev_reduce_scatter(mds_comm *c, float *out, const float *in, size_t chunk)
{
    return reduce_scatter_on_stream(c, out, in, chunk, 0);
}

/* --overlap-grad-reduce with the distributed optimizer: a bucket's
 * reduce-scatter beside the backward, waited for at dev_wait. */
static int dev_reduce_scatter_start(mds_comm *c, float *out, const float *in, size_t chunk)
{
    return reduce_scatter_on_stream(c, out, in, chunk, 1);
}

static int allgather_on_stream(mds_comm *c, float *out, const float *in, size_t chunk, int defer)
{
    /* in == out + rank*chunk is NCCL's in-place all-gather */
    ENQUEUE_DEFER(c, "NCCL all-gather", ncclAllGather(in, out, chunk, ncclFloat32, impl_of(c)->nc, stream_of(c)),
                  defer);
}

static int dev_allgather(mds_comm *c, float *out, const float *in, size_t chunk)
{
    return allgather_on_stream(c, out, in, chunk, 0);
}

/* --overlap-param-gather: a bucket's all-gather beside the next forward,
 * waited for (dev_wait_some) before the bucket's first layer. */
static int dev_allgather_start(mds_comm *c, float *out, const float *in, size_t chunk)
{
    return allgather_on_stream(c, out, in, chunk, 1);
}

/* The compute stream waits for the first n deferred collectives since the
 * last dev_wait (their own events, recorded in order on c's stream). */
static int dev_wait_some(mds_comm *c, size_t n)
{
    struct nccl_impl *i = impl_of(c);
    if (!n) return 0;
    if (n > i->nev) return dev_wait(c);
    CUDA_TRY("NCCL all-gather", cudaStreamWaitEvent((cudaStream_t)c->stream, i->evs[n - 1], 0));
    return 0;
}

static int dev_broadcast(mds_comm *c, void *buf, size_t bytes, int root)
{
    ENQUEUE(c, "NCCL broadcast", ncclBroadcast(buf, buf, bytes, ncclUint8, root, impl_of(c)->nc, stream_of(c)));
}

/* Both halves in one NCCL group, so two neighbours exchanging at once
 * (1F1B's send_forward_recv_backward) cannot deadlock; NCCL pairs each
 * send with the peer's receive in the order they were grouped, which the
 * schedule keeps the same on both sides. */
static ncclResult_t group_sendrecv(const void *sbuf, size_t sbytes, int speer, void *rbuf, size_t rbytes, int rpeer,
                                   ncclComm_t nc, cudaStream_t s)
{
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) return r;
    if (speer >= 0) r = ncclSend(sbuf, sbytes, ncclUint8, speer, nc, s);
    if (r == ncclSuccess && rpeer >= 0) r = ncclRecv(rbuf, rbytes, ncclUint8, rpeer, nc, s);
    ncclResult_t e = ncclGroupEnd();
    return r != ncclSuccess ? r : e;
}

static int dev_sendrecv(mds_comm *c, const void *sbuf, size_t sbytes, int speer, void *rbuf, size_t rbytes, int rpeer)
{
    if (c->size == 1 && (speer != rpeer || sbytes != rbytes)) return comm_fail("send/receive in a one-process group");
    ENQUEUE(c, "NCCL send/receive", group_sendrecv(sbuf, sbytes, speer, rbuf, rbytes, rpeer, impl_of(c)->nc,
                                                   stream_of(c)));
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
    dev_allreduce_start, dev_wait, dev_reduce_scatter_start, dev_allgather_start, dev_wait_some,
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
    if (i->ready) cudaEventDestroy(i->ready);
    if (i->done) cudaEventDestroy(i->done);
    for (size_t k = 0; k < i->evcap; k++)
        if (i->evs[k]) cudaEventDestroy(i->evs[k]);
    free(i->evs);
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
 * g: split from parent's (ncclCommSplit with the same color and key, which
 * orders ranks as comm_split does) when parent is given, else one
 * ncclUniqueId made by h's rank 0 and broadcast over h.  Collective over
 * h (and over parent's ranks when splitting).  On failure g is released
 * (its impl NULL).
 */
static int attach_nccl(mds_comm *h, mds_comm *g, struct nccl_impl *i, struct nccl_impl *parent, int color, int key);

static int attach(mds_comm *h, mds_comm *g, struct nccl_impl *parent, int color, int key)
{
    struct nccl_impl *i = calloc(1, sizeof *i);
    if (!i) {
        comm_free(h);
        return comm_fail("out of memory");
    }
    i->host = h;
    g->impl = i;
    int rc = attach_nccl(h, g, i, parent, color, key);
    if (rc) nccl_release(g);   /* comm_split frees g without releasing it */
    return rc;
}

/* ncclCommSplit came with NCCL 2.18; an older header or library (the
 * ranks agree, so none waits in a split the others skip) makes each group
 * its own ncclUniqueId. */
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
#define HAVE_COMM_SPLIT 1
static int split_from(struct nccl_impl *parent, int color, int key, mds_comm *h, struct nccl_impl *i)
{
    if (!parent->nc) return comm_fail("ncclCommSplit: the parent NCCL communicator was aborted");
    NCCL_TRY("ncclCommSplit", ncclCommSplit(parent->nc, color, key, &i->nc, NULL));
    int nr = -1, nn = -1;
    NCCL_TRY("ncclCommUserRank", ncclCommUserRank(i->nc, &nr));
    NCCL_TRY("ncclCommCount", ncclCommCount(i->nc, &nn));
    if (nr != h->rank || nn != h->size)
        return comm_fail("ncclCommSplit made rank %d of %d where the host group has rank %d of %d", nr, nn, h->rank,
                         h->size);
    return 0;
}
#else
#define HAVE_COMM_SPLIT 0
#endif

/* i's communicator from one ncclUniqueId made by h's rank 0 and broadcast over h. */
static int init_by_id(mds_comm *h, struct nccl_impl *i)
{
    /* rank 0's id, or its failure: every rank leaves the broadcast */
    struct { ncclUniqueId id; int ok; } boot;
    memset(&boot, 0, sizeof boot);
    ncclResult_t r = ncclSuccess;
    if (h->rank == 0) boot.ok = (r = ncclGetUniqueId(&boot.id)) == ncclSuccess;
    if (comm_broadcast(h, &boot, sizeof boot, 0)) return -1;
    if (!boot.ok) return h->rank == 0 ? nccl_fail("ncclGetUniqueId", r) : comm_fail("rank 0 could not make an NCCL id");
    NCCL_TRY("ncclCommInitRank", ncclCommInitRank(&i->nc, h->size, boot.id, h->rank));
    return 0;
}

/* 1 when every rank of host group h can split (the library too is 2.18 or later). */
static int split_agreed(mds_comm *h)
{
    int v = 0;
    double cannot = !HAVE_COMM_SPLIT || ncclGetVersion(&v) != ncclSuccess || v < NCCL_VERSION(2, 18, 0);
    if (comm_allreduce(h, &cannot, 1, COMM_F64, COMM_MAX)) return -1;
    return cannot == 0.0;
}

static int attach_nccl(mds_comm *h, mds_comm *g, struct nccl_impl *i, struct nccl_impl *parent, int color, int key)
{
    g->rank = h->rank;
    g->size = h->size;
    g->ops = &nccl_ops;
    g->dev = &nccl_dev;
    i->rank = h->rank;
    i->size = h->size;
    CUDA_TRY("cannot create the NCCL stream", cudaStreamCreateWithFlags(&i->own, cudaStreamNonBlocking));
    CUDA_TRY("cannot create the NCCL events", cudaEventCreateWithFlags(&i->ready, cudaEventDisableTiming));
    CUDA_TRY("cannot create the NCCL events", cudaEventCreateWithFlags(&i->done, cudaEventDisableTiming));
#if HAVE_COMM_SPLIT
    if (parent ? split_from(parent, color, key, h, i) : init_by_id(h, i)) return -1;
#else
    (void)parent, (void)color, (void)key;
    if (init_by_id(h, i)) return -1;
#endif
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
    struct nccl_impl *pi = impl_of(c);
    int can = split_agreed(pi->host);
    if (can < 0) return -1;
    mds_comm *h;
    if (comm_split(pi->host, color, key, &h)) return -1;
    return attach(h, g, can ? pi : NULL, color, key);
}

/* ---- start-up --------------------------------------------------------------- */

/* The UUID of the current GPU into uuid, or a reason into why. */
static void current_gpu(int *dev, unsigned char uuid[16], char *why, size_t whylen)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    struct cudaDeviceProp prop;
    if (e != cudaSuccess || n == 0)
        snprintf(why, whylen, "no CUDA device (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    else if ((e = cudaGetDevice(dev)) != cudaSuccess || (e = cudaGetDeviceProperties(&prop, *dev)) != cudaSuccess)
        snprintf(why, whylen, "cannot use the current GPU: %s", cudaGetErrorString(e));
    else
        memcpy(uuid, prop.uuid.bytes, 16);
}

int comm_nccl_init(mds_comm *host, mds_comm **world)
{
    *world = NULL;
    int p = host->size, r = host->rank, dev = -1;
    char why[256] = "";
    unsigned char (*uuid)[16] = calloc((size_t)p, 16);
    if (!uuid) return comm_fail("out of memory");
    current_gpu(&dev, uuid[r], why, sizeof why);
    if (p > 1 && host->ops->allgather(host, NULL, uuid, 16)) {
        free(uuid);
        return -1;
    }
    /* UUIDs are unique across hosts: two equal ones are one GPU */
    for (int k = 0; !why[0] && k < p; k++)
        if (k != r && !memcmp(uuid[k], uuid[r], 16) && dev >= 0)
            snprintf(why, sizeof why, "ranks %d and %d would share GPU %d (NCCL needs a GPU per rank: "
                     "--device-comm host-staged shares one)", k < r ? k : r, k < r ? r : k, dev);
    free(uuid);
    /* every rank has its GPU, or all stop here together */
    double bad = why[0] ? 1.0 : 0.0;
    if (comm_allreduce(host, &bad, 1, COMM_F64, COMM_MAX)) return -1;
    if (why[0]) return comm_fail("rank %d: %s", r, why);
    if (bad > 0) {
        comm_fail("rank %d: another rank could not take its GPU", r);
        return -2;
    }
    mds_comm *h;
    if (comm_split(host, 0, r, &h)) return -1;   /* the NCCL world's own host group */
    mds_comm *w = comm_new(0, 1, &nccl_ops, NULL);
    if (!w) {
        comm_free(h);
        return comm_fail("out of memory");
    }
    live_device = dev;
    if (attach(h, w, NULL, 0, 0)) {
        comm_free(w);
        return -1;
    }
    static int watching;
    pthread_t th;
    if (!watching && pthread_create(&th, NULL, watcher, NULL) != 0) {
        comm_free(w);
        return comm_fail("cannot start the NCCL watcher thread");
    }
    if (!watching) pthread_detach(th);
    watching = 1;
    comm_watchdog_hook = abort_all;
    *world = w;
    return 0;
}
