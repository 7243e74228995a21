/*
 * comm.c - the communicator of comm.h, above the transports: the choice of
 * transport (MPI, TCP or one process), the rank-ordered sums, the pieces
 * and the counters.  The transports (comm_mpi.c, comm_tcp.c) only move
 * bytes, so the sums are the same code, hence the same bits, over each.
 * A rank-ordered sum is an all-to-all of chunks, a sum of the received
 * chunks in rank order, and an all-gather of the sums.
 *
 * Host staging (comm_set_staging) wraps the same host path: buffers copied
 * into c->staged by the backend's copy functions, the host collective on
 * them, the results copied back.  comm_place() and comm_local() choose the
 * route and GPU of each rank (mdstrain's start-up).
 *
 * Not here: sockets (comm_tcp.c), anything that needs mpi.h (comm_mpi.c)
 * or CUDA (comm_nccl.c); this file is plain C whatever the build.
 */
#include "comm_internal.h"
#include "dtype.h"
#include "grow.h"

#include <errno.h>
#include <pthread.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Thread_local char last_error[512];   /* a worker's reaches its caller through comm_wait */
_Thread_local int comm_on_worker;
int comm_threads_ok = 1;

/*
 * The collective watchdog (comm_set_timeout): the calling thread, and each
 * comm_allreduce_start worker, marks when it entered a transport's
 * blocking call (a slot each); a thread checks the marks and calls the
 * program's expired() once a call has waited too long.
 */
#define WATCH_SLOTS 8
static _Atomic long long busy_since_ms[WATCH_SLOTS];   /* 0: not inside a collective */
static _Atomic int watch_slots = 1;                     /* slot 0: the caller's thread */
static double timeout_s;
static void (*timeout_expired)(double waited_s);
static _Thread_local int watch_depth, watch_slot;
void (*comm_watchdog_hook)(void);
int (*comm_peer_check)(char *msg, size_t cap);
void (*comm_tell_failure)(void);

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void watch_begin(void)
{
    if (timeout_s > 0 && watch_depth++ == 0) atomic_store(&busy_since_ms[watch_slot], now_ms());
}

static int watch_end(int rc)
{
    if (timeout_s > 0 && --watch_depth == 0) atomic_store(&busy_since_ms[watch_slot], 0);
    return rc;
}

#define WATCH(call) (watch_begin(), watch_end(call))

static void *watchdog(void *arg)
{
    (void)arg;
    for (;;) {
        struct timespec nap = {0, 100 * 1000000};
        nanosleep(&nap, NULL);
        long long since = 0;
        for (int i = 0; i < WATCH_SLOTS; i++) {
            long long b = atomic_load(&busy_since_ms[i]);
            if (b && (!since || b < since)) since = b;
        }
        if (since && (double)(now_ms() - since) / 1000.0 > timeout_s) {
            if (comm_watchdog_hook) comm_watchdog_hook();   /* NCCL: abort the communicators */
            if (comm_tell_failure) comm_tell_failure();     /* TCP: the others name this rank */
            timeout_expired((double)(now_ms() - since) / 1000.0);
            return NULL;   /* expired() does not return; nothing more to watch if it does */
        }
    }
}

double comm_timeout(void) { return timeout_s; }

static void (*fatal_fn)(const char *msg);
void comm_set_fatal(void (*fatal)(const char *msg)) { fatal_fn = fatal; }
void comm_fatal(const char *msg)
{
    if (fatal_fn) fatal_fn(msg);
    fflush(stdout);
    fprintf(stderr, "%s\n", msg);
    _exit(1);
}

int comm_set_timeout(double seconds, void (*expired)(double waited_s))
{
    if (!(seconds > 0) || !expired || timeout_s > 0) return 0;
    timeout_s = seconds;
    timeout_expired = expired;
    pthread_t th;
    if (pthread_create(&th, NULL, watchdog, NULL) != 0) {
        timeout_s = 0;
        return comm_fail("cannot start the collective watchdog thread");
    }
    pthread_detach(th);
    return 0;
}
static const struct comm_ops *active;   /* the world's transport */
#ifdef MDS_HAVE_MPI
static int mpi_idle;                     /* MPI initialised but unused: finalize it */
#endif

int comm_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return -1;
}

const char *comm_error(void) { return last_error[0] ? last_error : "no error"; }

size_t comm_dtype_size(enum comm_dtype dt)
{
    switch (dt) {
    case COMM_F32: return 4;
    case COMM_F64: return 8;
    case COMM_BF16: case COMM_F16: return 2;
    }
    return 0;
}

/* The dtype.h code of a 16-bit communicator dtype. */
static int half_type(enum comm_dtype dt) { return dt == COMM_BF16 ? MDS_BF16 : MDS_F16; }

void comm_set_stream(mds_comm *c, void *stream) { c->stream = stream; }
void comm_set_staging(mds_comm *c, const comm_copy_ops *ops) { c->stage = ops; }

void comm_get_stats(const mds_comm *c, comm_stats *s) { *s = c->st; }
void comm_reset_stats(mds_comm *c) { memset(&c->st, 0, sizeof c->st); }
int comm_rank(const mds_comm *c) { return c->rank; }
int comm_size(const mds_comm *c) { return c->size; }

void *comm_scratch(mds_comm *c, size_t bytes)
{
    if (bytes > c->scratch_cap) {
        free(c->scratch);
        c->scratch = malloc(bytes);
        c->scratch_cap = c->scratch ? bytes : 0;
    }
    return c->scratch;
}

static void count(mds_comm *c, int kind, size_t bytes)
{
    c->st.calls[kind]++;
    c->st.bytes_sent[kind] += bytes;
}

mds_comm *comm_new(int rank, int size, const struct comm_ops *ops, void *impl)
{
    mds_comm *c = calloc(1, sizeof *c);
    if (c) {
        c->rank = rank;
        c->size = size;
        c->ops = ops;
        c->impl = impl;
    }
    return c;
}

static void async_stop(mds_comm *c);
static void staged_free(mds_comm *c);

void comm_free(mds_comm *c)
{
    if (!c) return;
    async_stop(c);
    if (c->ops && c->ops->release) c->ops->release(c);
    free(c->scratch);
    staged_free(c);
    free(c);
}

/* ---- the launcher's environment ---------------------------------------- */

/* A decimal integer in [lo, hi] from variable name; -1 when unset, -2 when malformed. */
static long env_long(const char *name, long lo, long hi)
{
    const char *v = getenv(name);
    if (!v || !*v) return -1;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || x < lo || x > hi) return -2;
    return x;
}

/*
 * The rank and world size a launcher announces without MPI: torchrun's and
 * Megatron's RANK/WORLD_SIZE when WORLD_SIZE is set, else Slurm's
 * SLURM_PROCID/SLURM_NTASKS.  *size 1 when neither says more.
 */
static int env_world(int *rank, int *size)
{
    const char *rn = "RANK", *sn = "WORLD_SIZE";
    if (env_long(sn, 0, 0) == -1) rn = "SLURM_PROCID", sn = "SLURM_NTASKS";
    *rank = 0;
    *size = 1;
    long s = env_long(sn, 1, 1L << 20);
    if (s == -2) return comm_fail("%s='%s' is not a task count", sn, getenv(sn));
    if (s <= 1) return 0;
    long r = env_long(rn, 0, s - 1);
    if (r == -1) return comm_fail("%s=%ld but %s is unset (start the tasks with srun, torchrun or mpirun)", sn, s, rn);
    if (r == -2) return comm_fail("%s='%s' is not a rank below %s=%ld", rn, getenv(rn), sn, s);
    *rank = (int)r;
    *size = (int)s;
    return 0;
}

/*
 * The first host of a Slurm node list into out: "node[01-04,07]" gives
 * "node01", "a1,b2" gives "a1", "r[1-2]-n[3,5]" gives "r1-n3".  Brackets do
 * not nest in Slurm's syntax; anything else is copied as written.
 */
static int first_host(char *out, size_t cap, const char *list)
{
    size_t n = 0;
    for (const char *p = list; *p && *p != ','; p++) {
        if (*p == '[') {
            for (p++; *p && *p != ',' && *p != '-' && *p != ']'; p++)
                if (n + 1 < cap) out[n++] = *p;
            while (*p && *p != ']') p++;
            if (!*p) break;
            continue;
        }
        if (n + 1 < cap) out[n++] = *p;
    }
    out[n] = 0;
    return n > 0 && n + 1 < cap ? 0 : -1;
}

/* MASTER_ADDR and MASTER_PORT, or Slurm's first node and 10000 + the job id's last 4 digits. */
static int master_endpoint(char *host, size_t cap, int *port)
{
    const char *a = getenv("MASTER_ADDR");
    if (a && *a) {
        snprintf(host, cap, "%s", a);
    } else {
        const char *list = getenv("SLURM_JOB_NODELIST");
        if (!list || !*list) list = getenv("SLURM_NODELIST");
        if (!list || !*list)
            return comm_fail("MASTER_ADDR is unset and so are SLURM_JOB_NODELIST and SLURM_NODELIST "
                             "(export MASTER_ADDR=<host of rank 0>)");
        if (first_host(host, cap, list))
            return comm_fail("cannot take the first host of SLURM_JOB_NODELIST='%s' (export MASTER_ADDR)", list);
    }
    long p = env_long("MASTER_PORT", 1, 65535);
    if (p == -2) return comm_fail("MASTER_PORT='%s' is not a port number", getenv("MASTER_PORT"));
    if (p == -1) {
        long job = env_long("SLURM_JOB_ID", 0, 0x7fffffffL);
        if (job < 0) return comm_fail("MASTER_PORT is unset and so is SLURM_JOB_ID (export MASTER_PORT)");
        p = 10000 + job % 10000;
    }
    *port = (int)p;
    return 0;
}

/* ---- choice of transport ----------------------------------------------- */

static const char *none_name(void)
{
#ifdef MDS_HAVE_MPI
    static char name[320];
    if (!name[0]) snprintf(name, sizeof name, "none (one process, built with %s)", comm_mpi_library());
    return name;
#else
    return "none (one process, built without MPI)";
#endif
}

static int one_process(mds_comm **world);

int comm_init(int *argc, char ***argv, mds_comm **world)
{
    *world = NULL;
    int rank, size;
    if (env_world(&rank, &size)) return -1;
#ifdef MDS_HAVE_MPI
    /* MPI when a launcher set MPI up (mpirun, srun --mpi=pmix); a world of
     * one MPI process while the environment announces several tasks is srun
     * without PMI: the tasks meet over TCP.  One process needs no MPI (and
     * its runtime's start-up and allocations). */
    if (comm_mpi_launched()) {
        if (comm_mpi_init(argc, argv, world)) return -1;
        if ((*world)->size > 1 || size == 1) {
            active = (*world)->ops;
            return 0;
        }
        comm_free(*world);
        *world = NULL;
        mpi_idle = 1;
    }
#else
    (void)argc;
    (void)argv;
#endif
    if (size == 1) return one_process(world);
    char host[256];
    int port = 0;
    if (master_endpoint(host, sizeof host, &port)) return -1;
    double timeout = 300;
    const char *t = getenv("MDS_RENDEZVOUS_TIMEOUT");
    if (t && *t) {
        char *end;
        timeout = strtod(t, &end);
        if (*end || !(timeout > 0 && timeout < 1e7))
            return comm_fail("MDS_RENDEZVOUS_TIMEOUT='%s' is not a number of seconds", t);
    }
    if (comm_tcp_init(rank, size, host, port, timeout, world)) return -1;
    active = (*world)->ops;
    return 0;
}

void comm_finalize(void)
{
    if (active && active->finalize) active->finalize();
    active = NULL;
#ifdef MDS_HAVE_MPI
    if (mpi_idle) comm_mpi_finalize();
    mpi_idle = 0;
#endif
}

void comm_abort(int code)
{
    fflush(stdout);
    fflush(stderr);
    if (active && active->abort) active->abort(code);
    exit(code);
}

const char *comm_backend(void) { return active ? active->name() : none_name(); }
const char *comm_transport(const mds_comm *c) { return c->ops && c->ops->name ? c->ops->name() : comm_backend(); }

/* ---- the collectives ----------------------------------------------------- */

/* Pieces of at most this many bytes per block keep every count an int. */
#define PIECE ((size_t)1 << 30)

int comm_split(mds_comm *c, int color, int key, mds_comm **out)
{
    *out = comm_new(0, 1, c->ops, NULL);
    if (!*out) return comm_fail("out of memory");
    if (c->ops && WATCH(c->ops->split(c, color, key, *out))) {
        free(*out);
        *out = NULL;
        return -1;
    }
    (*out)->stream = c->stream;
    if (!(*out)->dev) (*out)->stage = c->stage;
    return 0;
}

/* Sum p blocks of `chunk` elements (block k at src + k*chunk) in block
 * order into dst; 16-bit elements are summed in float and rounded once. */
static void ordered_sum(void *dst, const void *src, size_t chunk, int p, enum comm_dtype dt)
{
    if (dt == COMM_BF16 || dt == COMM_F16) {
        int h = half_type(dt);
        for (size_t i = 0; i < chunk; i++) {
            float acc = mds_load(h, src, i);
            for (int k = 1; k < p; k++)
                acc += mds_load(h, src, (size_t)k * chunk + i);
            mds_store(h, dst, i, acc);
        }
    } else if (dt == COMM_F32) {
        float *d = dst;
        const float *s = src;
        memcpy(d, s, chunk * sizeof *d);
        for (int k = 1; k < p; k++)
            for (size_t i = 0; i < chunk; i++) d[i] += s[(size_t)k * chunk + i];
    } else {
        double *d = dst;
        const double *s = src;
        memcpy(d, s, chunk * sizeof *d);
        for (int k = 1; k < p; k++)
            for (size_t i = 0; i < chunk; i++) d[i] += s[(size_t)k * chunk + i];
    }
}

/* Rank-ordered sum of n elements in place, n*p*elsize below PIECE. */
static int ordered_allreduce(mds_comm *c, unsigned char *buf, size_t n, enum comm_dtype dt)
{
    int p = c->size;
    size_t es = comm_dtype_size(dt), chunk = (n + (size_t)p - 1) / (size_t)p;
    unsigned char *sbuf = comm_scratch(c, 3 * (size_t)p * chunk * es);
    if (!sbuf) return comm_fail("out of memory for a %zu-element all-reduce", n);
    unsigned char *rbuf = sbuf + (size_t)p * chunk * es, *share = rbuf + (size_t)p * chunk * es;
    memcpy(sbuf, buf, n * es);
    memset(sbuf + n * es, 0, ((size_t)p * chunk - n) * es);
    if (WATCH(c->ops->alltoall(c, sbuf, rbuf, chunk * es))) return -1;
    ordered_sum(share, rbuf, chunk, p, dt);
    if (WATCH(c->ops->allgather(c, share, sbuf, chunk * es))) return -1;
    memcpy(buf, sbuf, n * es);
    count(c, COMM_K_ALLREDUCE, 2 * (size_t)(p - 1) * chunk * es);
    return 0;
}

/* The maximum of 16-bit elements: every rank's values (an all-gather), then
 * the maximum in rank order (exact in any order); n p 2 below PIECE. */
static int half_max(mds_comm *c, unsigned char *buf, size_t n, enum comm_dtype dt)
{
    int p = c->size, h = half_type(dt);
    unsigned char *all = comm_scratch(c, (size_t)p * n * 2);
    if (!all) return comm_fail("out of memory for a %zu-element all-reduce", n);
    if (WATCH(c->ops->allgather(c, buf, all, n * 2))) return -1;
    for (size_t i = 0; i < n; i++) {
        float m = mds_load(h, all, i);
        for (int k = 1; k < p; k++) {
            float v = mds_load(h, all, (size_t)k * n + i);
            if (v > m || v != v) m = v;   /* a NaN anywhere is the answer, as MPI_MAX gives */
        }
        mds_store(h, buf, i, m);
    }
    return 0;
}

/* ---- host staging: the host path on copies of the buffers -------------------- */

/* Free c's staging area with the allocator that made it. */
static void staged_free(mds_comm *c)
{
    if (c->staged_free) c->staged_free(c->staged);
    else free(c->staged);
    c->staged = NULL;
    c->staged_cap = 0;
}

/* c's host area of at least bytes (NULL when out of memory): page-locked
 * when the staging backend offers host_alloc. */
static unsigned char *staged_area(mds_comm *c, size_t bytes)
{
    if (bytes > c->staged_cap) {
        staged_free(c);
        void *p = NULL;
        if (c->stage->host_alloc && c->stage->host_free) {
            if (c->stage->host_alloc(&p, bytes) != 0) p = NULL;
            c->staged_free = c->stage->host_free;
        } else {
            p = malloc(bytes ? bytes : 1);
            c->staged_free = NULL;
        }
        c->staged = p;
        c->staged_cap = p ? bytes : 0;
    }
    return c->staged;
}

/* The backend's queued work done, then bytes of src (device or host) into
 * host; a failed copy surfaces at the second sync. */
static int stage_in(mds_comm *c, void *host, const void *src, size_t bytes)
{
    const comm_copy_ops *s = c->stage;
    if (s->sync() != 0) return comm_fail("before a host-staged collective: %s", s->error());
    s->copy(host, src, bytes);
    if (s->sync() != 0) return comm_fail("copying to the host for a collective: %s", s->error());
    c->st.bytes_staged += bytes;
    return 0;
}

static int stage_out(mds_comm *c, void *dst, const void *host, size_t bytes)
{
    const comm_copy_ops *s = c->stage;
    s->copy(dst, host, bytes);
    if (s->sync() != 0) return comm_fail("copying a collective's result back: %s", s->error());
    c->st.bytes_staged += bytes;
    return 0;
}

static int host_allreduce(mds_comm *c, void *buf, size_t n, enum comm_dtype dt, enum comm_op op);

/* A device transport's all-reduce (allreduce, or allreduce_start), counted
 * as a ring all-reduce's bytes, as the host path is. */
static int dev_allreduce(mds_comm *c, void *buf, size_t n, enum comm_dtype dt, enum comm_op op,
                         int (*run)(mds_comm *, void *, size_t, enum comm_dtype, enum comm_op))
{
    if (WATCH(run(c, buf, n, dt, op))) return -1;
    if (c->size > 1)
        count(c, COMM_K_ALLREDUCE, 2 * (size_t)(c->size - 1) * ((n + (size_t)c->size - 1) / (size_t)c->size) *
                                   comm_dtype_size(dt));
    return 0;
}

int comm_allreduce(mds_comm *c, void *buf, size_t n, enum comm_dtype dt, enum comm_op op)
{
    if (n == 0) return 0;
    size_t es = comm_dtype_size(dt);
    if (!es) return comm_fail("unknown communication dtype %d", (int)dt);
    /* a device transport runs even alone (NCCL's world of one is its test) */
    if (c->dev && c->dev->is_device(buf)) return dev_allreduce(c, buf, n, dt, op, c->dev->allreduce);
    if (c->size == 1) return 0;
    if (!c->stage) return host_allreduce(c, buf, n, dt, op);
    unsigned char *h = staged_area(c, n * es);
    if (!h) return comm_fail("out of memory staging a %zu-element all-reduce", n);
    if (stage_in(c, h, buf, n * es) || host_allreduce(c, h, n, dt, op)) return -1;
    return stage_out(c, buf, h, n * es);
}

static int host_allreduce(mds_comm *c, void *buf, size_t n, enum comm_dtype dt, enum comm_op op)
{
    size_t es = comm_dtype_size(dt);
    if (op == COMM_MAX && es == 2) {
        size_t seg = PIECE / 2 / (size_t)c->size;
        for (size_t off = 0; off < n; off += seg) {
            size_t k = n - off < seg ? n - off : seg;
            if (half_max(c, (unsigned char *)buf + off * 2, k, dt)) return -1;
            count(c, COMM_K_ALLREDUCE, (size_t)(c->size - 1) * k * 2);
        }
        return 0;
    }
    if (op == COMM_MAX) {   /* the maximum is exact in any order */
        for (size_t off = 0; off < n;) {
            size_t k = n - off < PIECE / es ? n - off : PIECE / es;
            if (WATCH(c->ops->max(c, (unsigned char *)buf + off * es, k, dt))) return -1;
            count(c, COMM_K_ALLREDUCE, 2 * (size_t)(c->size - 1) * ((k + c->size - 1) / c->size) * es);
            off += k;
        }
        return 0;
    }
    size_t seg = PIECE / es / 4;   /* p*chunk elements per segment stay below PIECE bytes */
    for (size_t off = 0; off < n; off += seg)
        if (ordered_allreduce(c, (unsigned char *)buf + off * es, n - off < seg ? n - off : seg, dt)) return -1;
    return 0;
}

static int host_reduce_scatter(mds_comm *c, float *out, const float *in, size_t chunk);

int comm_reduce_scatter(mds_comm *c, float *out, const float *in, size_t chunk)
{
    int p = c->size;
    if (c->dev && c->dev->is_device(in)) {
        if (WATCH(c->dev->reduce_scatter(c, out, in, chunk))) return -1;
        if (p > 1) count(c, COMM_K_REDUCE_SCATTER, (size_t)(p - 1) * chunk * sizeof(float));
        return 0;
    }
    if (!c->stage) return host_reduce_scatter(c, out, in, chunk);
    float *h = (float *)staged_area(c, ((size_t)p + 1) * chunk * sizeof(float));
    if (!h) return comm_fail("out of memory staging a reduce-scatter");
    if (stage_in(c, h, in, (size_t)p * chunk * sizeof(float)) ||
        host_reduce_scatter(c, h + (size_t)p * chunk, h, chunk))
        return -1;
    return stage_out(c, out, h + (size_t)p * chunk, chunk * sizeof(float));
}

/* Floats per rank in one exchange of a reduce-scatter or all-gather: every
 * block's byte count stays an int (PIECE / 4 bytes); a larger chunk goes in
 * segments of it, each rank's part of each segment copied together first.
 * MDS_TEST_COMM_SEGMENT (floats) makes it small, so that the tests see the
 * segments on small buffers. */
static size_t segment_floats(void)
{
    static size_t seg;
    if (!seg) {
        const char *e = getenv("MDS_TEST_COMM_SEGMENT");
        long v = e ? atol(e) : 0;
        seg = v > 0 && (size_t)v < PIECE / 4 / sizeof(float) ? (size_t)v : PIECE / 4 / sizeof(float);
    }
    return seg;
}

static int host_reduce_scatter(mds_comm *c, float *out, const float *in, size_t chunk)
{
    int p = c->size;
    if (p == 1) {
        if (out != in) memmove(out, in, chunk * sizeof *out);
        return 0;
    }
    size_t seg = segment_floats(), per = chunk < seg ? chunk : seg;
    float *rbuf = comm_scratch(c, (chunk > seg ? 2 : 1) * (size_t)p * per * sizeof(float));
    if (!rbuf) return comm_fail("out of memory for a reduce-scatter");
    if (chunk <= seg) {
        if (WATCH(c->ops->alltoall(c, in, rbuf, chunk * sizeof(float)))) return -1;
        ordered_sum(out, rbuf, chunk, p, COMM_F32);
    } else {
        float *sbuf = rbuf + (size_t)p * per;
        for (size_t o = 0; o < chunk; o += per) {
            size_t len = chunk - o < per ? chunk - o : per;
            for (int r = 0; r < p; r++)
                memcpy(sbuf + (size_t)r * len, in + (size_t)r * chunk + o, len * sizeof(float));
            if (WATCH(c->ops->alltoall(c, sbuf, rbuf, len * sizeof(float)))) return -1;
            ordered_sum(out + o, rbuf, len, p, COMM_F32);
        }
    }
    count(c, COMM_K_REDUCE_SCATTER, (size_t)(p - 1) * chunk * sizeof(float));
    return 0;
}

static int host_allgather(mds_comm *c, float *out, const float *in, size_t chunk);

int comm_allgather(mds_comm *c, float *out, const float *in, size_t chunk)
{
    int p = c->size;
    if (c->dev && c->dev->is_device(out)) {
        if (WATCH(c->dev->allgather(c, out, in, chunk))) return -1;
        if (p > 1) count(c, COMM_K_ALLGATHER, (size_t)(p - 1) * chunk * sizeof(float));
        return 0;
    }
    if (!c->stage) return host_allgather(c, out, in, chunk);
    /* this rank's block first (in may be out + rank*chunk), then in place */
    float *h = (float *)staged_area(c, (size_t)p * chunk * sizeof(float));
    if (!h) return comm_fail("out of memory staging an all-gather");
    float *mine = h + (size_t)c->rank * chunk;
    if (stage_in(c, mine, in, chunk * sizeof(float)) || host_allgather(c, h, mine, chunk)) return -1;
    return stage_out(c, out, h, (size_t)p * chunk * sizeof(float));
}

static int host_allgather(mds_comm *c, float *out, const float *in, size_t chunk)
{
    int p = c->size;
    if (p == 1) {
        if (out != in) memmove(out, in, chunk * sizeof *out);
        return 0;
    }
    size_t seg = segment_floats();
    if (chunk <= seg) {
        const void *src = in == out + (size_t)c->rank * chunk ? NULL : (const void *)in;
        if (WATCH(c->ops->allgather(c, src, out, chunk * sizeof(float)))) return -1;
    } else {   /* segments: each rank's part of a segment gathered, then put in its block */
        float *rbuf = comm_scratch(c, (size_t)p * seg * sizeof(float));
        if (!rbuf) return comm_fail("out of memory for an all-gather");
        for (size_t o = 0; o < chunk; o += seg) {
            size_t len = chunk - o < seg ? chunk - o : seg;
            if (WATCH(c->ops->allgather(c, in + o, rbuf, len * sizeof(float)))) return -1;
            for (int r = 0; r < p; r++)   /* memmove: in place, this rank's block is its source */
                memmove(out + (size_t)r * chunk + o, rbuf + (size_t)r * len, len * sizeof(float));
        }
    }
    count(c, COMM_K_ALLGATHER, (size_t)(p - 1) * chunk * sizeof(float));
    return 0;
}

static int host_broadcast(mds_comm *c, void *buf, size_t bytes, int root);

int comm_broadcast(mds_comm *c, void *buf, size_t bytes, int root)
{
    if (root < 0 || root >= c->size) return comm_fail("broadcast root %d out of range", root);
    if (c->dev && c->dev->is_device(buf)) {
        if (WATCH(c->dev->broadcast(c, buf, bytes, root))) return -1;
        if (c->size > 1) count(c, COMM_K_BROADCAST, c->rank == root ? bytes : 0);
        return 0;
    }
    if (c->size == 1) return 0;
    if (!c->stage) return host_broadcast(c, buf, bytes, root);
    unsigned char *h = staged_area(c, bytes);
    if (!h) return comm_fail("out of memory staging a %zu-byte broadcast", bytes);
    if (stage_in(c, h, buf, bytes) || host_broadcast(c, h, bytes, root)) return -1;
    return c->rank == root ? 0 : stage_out(c, buf, h, bytes);
}

static int host_broadcast(mds_comm *c, void *buf, size_t bytes, int root)
{
    for (size_t off = 0; off < bytes; off += PIECE) {
        size_t k = bytes - off < PIECE ? bytes - off : PIECE;
        if (WATCH(c->ops->broadcast(c, (unsigned char *)buf + off, k, root))) return -1;
    }
    count(c, COMM_K_BROADCAST, c->rank == root ? bytes : 0);
    return 0;
}

int comm_barrier(mds_comm *c)
{
    if (c->dev) return WATCH(c->dev->barrier(c));   /* the stream first, even alone */
    if (c->stage && c->stage->sync() != 0) return comm_fail("before a barrier: %s", c->stage->error());
    if (c->size == 1) return 0;
    return WATCH(c->ops->barrier(c));
}

static int host_sendrecv(mds_comm *c, const void *sbuf, size_t sbytes, int speer, void *rbuf, size_t rbytes,
                         int rpeer);

int comm_sendrecv(mds_comm *c, const void *sbuf, size_t sbytes, int speer, void *rbuf, size_t rbytes, int rpeer)
{
    if (speer >= c->size || rpeer >= c->size) return comm_fail("send/receive peer out of range");
    if (speer < 0 && rpeer < 0) return 0;
    if (c->dev && c->dev->is_device(speer >= 0 ? sbuf : rbuf)) {
        if (WATCH(c->dev->sendrecv(c, sbuf, sbytes, speer, rbuf, rbytes, rpeer))) return -1;
        if (speer >= 0 && c->size > 1) count(c, COMM_K_P2P, sbytes);
        return 0;
    }
    if (!c->stage) return host_sendrecv(c, sbuf, sbytes, speer, rbuf, rbytes, rpeer);
    size_t sn = speer >= 0 ? sbytes : 0, rn = rpeer >= 0 ? rbytes : 0;
    unsigned char *h = staged_area(c, sn + rn);
    if (!h) return comm_fail("out of memory staging a send/receive");
    if ((sn && stage_in(c, h, sbuf, sn)) ||
        host_sendrecv(c, speer >= 0 ? h : NULL, sn, speer, rpeer >= 0 ? h + sn : NULL, rn, rpeer))
        return -1;
    return rn ? stage_out(c, rbuf, h + sn, rn) : 0;
}

static int host_sendrecv(mds_comm *c, const void *sbuf, size_t sbytes, int speer, void *rbuf, size_t rbytes,
                         int rpeer)
{
    if (c->size == 1) {   /* to and from itself */
        if (speer != rpeer || sbytes != rbytes) return comm_fail("send/receive in a one-process group");
        if (rbuf != sbuf) memmove(rbuf, sbuf, sbytes);
        return 0;
    }
    if (WATCH(c->ops->sendrecv(c, sbuf, sbytes, speer, rbuf, rbytes, rpeer))) return -1;
    if (speer >= 0) count(c, COMM_K_P2P, sbytes);
    return 0;
}

/* ---- collectives begun now, finished later (comm_*_start) ---------------- */

enum async_kind { ASYNC_ALLREDUCE, ASYNC_REDUCE_SCATTER, ASYNC_ALLGATHER };

struct async_req {
    enum async_kind kind;
    void *buf;            /* the all-reduce's buffer; the reduce-scatter's and all-gather's out */
    const void *in;       /* the reduce-scatter's and all-gather's in */
    size_t n;             /* elements; their chunk */
    enum comm_dtype dt;
    enum comm_op op;
};

/* A communicator's worker: the queue [done, queued) of collectives, run in
 * order by one thread, so the byte streams of c keep comm.h's order. */
struct comm_async {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct async_req *q;
    size_t cap, done, queued;
    int quit, failed;
    char err[512];
};

static void *async_main(void *arg)
{
    mds_comm *c = arg;
    struct comm_async *a = c->async;
    comm_on_worker = 1;
    int slot = atomic_fetch_add(&watch_slots, 1);
    watch_slot = slot < WATCH_SLOTS ? slot : WATCH_SLOTS - 1;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (a->done == a->queued && !a->quit) pthread_cond_wait(&a->cv, &a->mu);
        if (a->done == a->queued) break;
        struct async_req r = a->q[a->done];
        int skip = a->failed;   /* after a failure the streams are out of step: run nothing more */
        pthread_mutex_unlock(&a->mu);
        int rc = skip ? 0
                 : r.kind == ASYNC_ALLREDUCE ? comm_allreduce(c, r.buf, r.n, r.dt, r.op)
                 : r.kind == ASYNC_REDUCE_SCATTER ? comm_reduce_scatter(c, (float *)r.buf, (const float *)r.in, r.n)
                 : comm_allgather(c, (float *)r.buf, (const float *)r.in, r.n);
        pthread_mutex_lock(&a->mu);
        if (rc < 0) {
            a->failed = 1;
            snprintf(a->err, sizeof a->err, "%s", comm_error());
        }
        a->done++;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static int async_start(mds_comm *c)
{
    struct comm_async *a = calloc(1, sizeof *a);
    if (!a) return comm_fail("out of memory");
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    c->async = a;
    if (pthread_create(&a->th, NULL, async_main, c) != 0) {
        c->async = NULL;
        pthread_mutex_destroy(&a->mu);
        pthread_cond_destroy(&a->cv);
        free(a);
        return comm_fail("cannot start a communication thread");
    }
    return 0;
}

static void async_stop(mds_comm *c)
{
    struct comm_async *a = c->async;
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    a->quit = 1;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->th, NULL);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a->q);
    free(a);
    c->async = NULL;
}

int comm_async_ok(void) { return comm_threads_ok; }

/* Queue r on c's worker (started on first use). */
static int async_push(mds_comm *c, struct async_req r)
{
    if (!comm_threads_ok) return comm_fail("this transport (%s) cannot run collectives from a second thread", comm_transport(c));
    if (!c->async && async_start(c)) return -1;
    struct comm_async *a = c->async;
    pthread_mutex_lock(&a->mu);
    if (mds_grow((void **)&a->q, &a->cap, a->queued + 1, sizeof *a->q) != 0) {
        pthread_mutex_unlock(&a->mu);
        return comm_fail("out of memory");
    }
    a->q[a->queued++] = r;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return 0;
}

int comm_allreduce_start(mds_comm *c, void *buf, size_t n, enum comm_dtype dt, enum comm_op op)
{
    if (n == 0) return 0;
    if (!comm_dtype_size(dt)) return comm_fail("unknown communication dtype %d", (int)dt);
    /* a device transport enqueues on its own stream and returns; the
       compute stream waits for it only at comm_wait */
    if (c->dev && c->dev->is_device(buf))
        return dev_allreduce(c, buf, n, dt, op, c->dev->allreduce_start ? c->dev->allreduce_start : c->dev->allreduce);
    if (c->size == 1) return 0;
    return async_push(c, (struct async_req){ASYNC_ALLREDUCE, buf, NULL, n, dt, op});
}

/* comm_reduce_scatter_start and comm_allgather_start: a device transport's
 * own start (or its synchronous collective), else the worker's queue. */
static int chunked_start(mds_comm *c, enum async_kind kind, float *out, const float *in, size_t chunk)
{
    int rs = kind == ASYNC_REDUCE_SCATTER;
    if (chunk == 0) return 0;
    if (c->dev && c->dev->is_device(rs ? (const void *)in : (const void *)out)) {
        int (*start)(mds_comm *, float *, const float *, size_t) =
            rs ? c->dev->reduce_scatter_start : c->dev->allgather_start;
        if (!start) return rs ? comm_reduce_scatter(c, out, in, chunk) : comm_allgather(c, out, in, chunk);
        if (WATCH(start(c, out, in, chunk))) return -1;
        if (c->size > 1)
            count(c, rs ? COMM_K_REDUCE_SCATTER : COMM_K_ALLGATHER, (size_t)(c->size - 1) * chunk * sizeof(float));
        return 0;
    }
    /* one rank: a copy (staged where it must be) */
    if (c->size == 1) return rs ? comm_reduce_scatter(c, out, in, chunk) : comm_allgather(c, out, in, chunk);
    return async_push(c, (struct async_req){kind, out, in, chunk, COMM_F32, COMM_SUM});
}

int comm_reduce_scatter_start(mds_comm *c, float *out, const float *in, size_t chunk)
{
    return chunked_start(c, ASYNC_REDUCE_SCATTER, out, in, chunk);
}

int comm_allgather_start(mds_comm *c, float *out, const float *in, size_t chunk)
{
    return chunked_start(c, ASYNC_ALLGATHER, out, in, chunk);
}

int comm_wait_some(mds_comm *c, size_t n)
{
    if (c->dev && (c->dev->wait_some ? WATCH(c->dev->wait_some(c, n)) : c->dev->wait && WATCH(c->dev->wait(c))))
        return -1;
    struct comm_async *a = c->async;
    if (!a) return 0;
    pthread_mutex_lock(&a->mu);
    while (a->done < n && a->done != a->queued) pthread_cond_wait(&a->cv, &a->mu);
    int rc = a->failed ? comm_fail("%s", a->err) : 0;
    pthread_mutex_unlock(&a->mu);
    return rc;
}

int comm_wait(mds_comm *c)
{
    if (c->dev && c->dev->wait && WATCH(c->dev->wait(c))) return -1;
    struct comm_async *a = c->async;
    if (!a) return 0;
    pthread_mutex_lock(&a->mu);
    while (a->done != a->queued) pthread_cond_wait(&a->cv, &a->mu);
    int rc = a->failed ? comm_fail("%s", a->err) : 0;
    a->done = a->queued = 0;
    a->failed = 0;
    pthread_mutex_unlock(&a->mu);
    return rc;
}

#ifdef MDS_HAVE_NCCL
int comm_have_nccl(void) { return 1; }
#else
int comm_have_nccl(void) { return 0; }

int comm_nccl_init(mds_comm *host, mds_comm **world)
{
    (void)host;
    *world = NULL;
    return comm_fail("built without NCCL (the Makefile builds train/comm_nccl.c when it finds CUDA and NCCL)");
}
#endif

/* ---- the route and GPU of each rank --------------------------------------- */

/* The local rank a launcher announces (*source its variable), or -1. */
static int env_local_rank(const char **source)
{
    static const char *const names[] = {"SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        long x = env_long(names[k], 0, 1L << 20);
        if (x >= 0) {
            *source = names[k];
            return (int)x;
        }
    }
    return -1;
}

#define HOSTN 64

int comm_local(mds_comm *c, int *local_rank, int *local_size, const char **source, char *host, size_t cap)
{
    int p = c->size, r = c->rank;
    char (*names)[HOSTN] = calloc((size_t)p, HOSTN);
    if (!names) return comm_fail("out of memory");
    gethostname(names[r], HOSTN - 1);
    if (p > 1 && c->ops->allgather(c, NULL, names, HOSTN)) {
        free(names);
        return -1;
    }
    int n = 0, place = 0;
    for (int k = 0; k < p; k++)
        if (!strncmp(names[k], names[r], HOSTN)) {
            if (k < r) place++;
            n++;
        }
    snprintf(host, cap, "%s", names[r]);
    free(names);
    *local_size = n;
    *local_rank = env_local_rank(source);
    if (*local_rank < 0) {
        *local_rank = place;
        *source = "host order";
    }
    return 0;
}

/*
 * Several ranks on a host with fewer GPUs share them only when asked
 * (host staging is slow: every collective crosses PCIe twice and the host
 * transport once); a launcher that shows each task one GPU
 * (CUDA_VISIBLE_DEVICES per task) is taken at its word, and
 * comm_nccl_init's UUID check catches it if it was not so.
 */
int comm_place(const comm_place_in *in, comm_place_out *out, char *why, size_t whylen)
{
    out->route = COMM_ROUTE_HOST;
    out->device = -1;
    out->shared = 0;
    why[0] = 0;
    if (!in->gpu) {
        if (in->want == COMM_WANT_NCCL) {
            snprintf(why, whylen, "--device-comm nccl needs --device cuda (NCCL moves GPU memory)");
            return -1;
        }
        if (in->want == COMM_WANT_STAGED) out->route = COMM_ROUTE_STAGED;
        return 0;
    }
    if (in->ngpus < 1) {
        snprintf(why, whylen, "no CUDA device on host '%s'", in->host);
        return -1;
    }
    int own = in->local_size <= in->ngpus || (in->per_task && in->ngpus == 1);
    out->device = in->local_rank < in->ngpus ? in->local_rank : in->ngpus == 1 ? 0 : in->local_rank % in->ngpus;
    if (in->want == COMM_WANT_STAGED) {
        out->route = COMM_ROUTE_STAGED;
        out->shared = !own;
        return 0;
    }
    if (in->want == COMM_WANT_AUTO && in->world_size == 1) return 0;
    if (!in->have_nccl) {
        snprintf(why, whylen, "%s needs NCCL, and this mdstrain was built without it (make with NCCL installed), "
                 "or use --device-comm host-staged", in->world_size > 1 ? "several ranks on GPUs" : "--device-comm nccl");
        return -1;
    }
    if (!own) {
        snprintf(why, whylen, "%d ranks on host '%s' (local rank %d) but %d GPU%s: NCCL needs a GPU per rank; "
                 "start at most %d rank%s per host, or share the GPUs with --device-comm host-staged",
                 in->local_size, in->host, in->local_rank, in->ngpus, in->ngpus == 1 ? "" : "s", in->ngpus,
                 in->ngpus == 1 ? "" : "s");
        return -1;
    }
    out->route = COMM_ROUTE_NCCL;
    return 0;
}

/* ---- one process ------------------------------------------------------- */

/* Groups of one rank: the collectives above return before any of these is
 * called, except split. */
static int none_split(mds_comm *c, int color, int key, mds_comm *g)
{
    (void)c; (void)color; (void)key;
    g->rank = 0;
    g->size = 1;
    return 0;
}

static const struct comm_ops none_ops = {none_split, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, none_name};

static int one_process(mds_comm **world)
{
    *world = comm_new(0, 1, &none_ops, NULL);
    if (!*world) return comm_fail("out of memory");
    active = &none_ops;
    return 0;
}
