/*
 * comm.c - the communicator of comm.h: MPI when built with MDS_HAVE_MPI
 * (the Makefile compiles this file with mpicc when MPI is found), otherwise
 * one process.  Rank-ordered sums are an all-to-all of chunks, a sum of the
 * received chunks in rank order, and an all-gather of the sums.
 */
#include "comm.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef MDS_HAVE_MPI
#include <mpi.h>
#endif

static char last_error[512];
static int local_rank_value;

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return -1;
}

const char *comm_error(void) { return last_error[0] ? last_error : "no error"; }
int comm_local_rank(void) { return local_rank_value; }

/* The launcher's local rank, or -1. */
static int env_local_rank(void)
{
    static const char *const names[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID",
                                        "PMI_LOCAL_RANK"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        if (v && *v) {
            char *end;
            long x = strtol(v, &end, 10);
            if (!*end && x >= 0 && x < (1L << 30)) return (int)x;
        }
    }
    return -1;
}

static int slurm_ntasks(void)
{
    const char *v = getenv("SLURM_NTASKS");
    if (!v || !*v) return 1;
    long x = strtol(v, NULL, 10);
    return x > 0 && x < (1L << 30) ? (int)x : 1;
}

struct mds_comm {
    int rank, size;
    comm_stats st;
    unsigned char *scratch;   /* grown on demand */
    size_t scratch_cap;
#ifdef MDS_HAVE_MPI
    MPI_Comm mc;
#endif
};

void comm_get_stats(const mds_comm *c, comm_stats *s) { *s = c->st; }
void comm_reset_stats(mds_comm *c) { memset(&c->st, 0, sizeof c->st); }
int comm_rank(const mds_comm *c) { return c->rank; }
int comm_size(const mds_comm *c) { return c->size; }

static __attribute__((unused)) void *scratch(mds_comm *c, size_t bytes)
{
    if (bytes > c->scratch_cap) {
        free(c->scratch);
        c->scratch = malloc(bytes);
        c->scratch_cap = c->scratch ? bytes : 0;
    }
    return c->scratch;
}

static __attribute__((unused)) void count(mds_comm *c, int kind, size_t bytes)
{
    c->st.calls[kind]++;
    c->st.bytes_sent[kind] += bytes;
}

static mds_comm *new_comm(int rank, int size)
{
    mds_comm *c = calloc(1, sizeof *c);
    if (c) {
        c->rank = rank;
        c->size = size;
    }
    return c;
}

void comm_free(mds_comm *c)
{
    if (!c) return;
#ifdef MDS_HAVE_MPI
    if (c->mc != MPI_COMM_WORLD && c->mc != MPI_COMM_NULL) MPI_Comm_free(&c->mc);
#endif
    free(c->scratch);
    free(c);
}

/* Sum p blocks of `chunk` elements (block k at src + k*chunk) in block
 * order into dst. */
static __attribute__((unused)) void ordered_sum(void *dst, const void *src, size_t chunk, int p, enum comm_dtype dt)
{
    if (dt == COMM_F32) {
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

#ifdef MDS_HAVE_MPI

static char backend_name[MPI_MAX_LIBRARY_VERSION_STRING + 16] = "MPI";

/* MPI calls return a code; turn a failure into our message. */
static int mpi_check(int rc, const char *what)
{
    if (rc == MPI_SUCCESS) return 0;
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "error %d", rc);
    return fail("%s failed: %s", what, s);
}

/* Messages are cut into pieces of at most this many bytes (MPI counts are int). */
#define PIECE ((size_t)1 << 30)

int comm_init(int *argc, char ***argv, mds_comm **world)
{
    *world = NULL;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited && mpi_check(MPI_Init(argc, argv), "MPI_Init")) return -1;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size == 1 && slurm_ntasks() > 1)
        return fail("Slurm started %d tasks but MPI sees a world of one process (srun could not wire MPI up; "
                    "launch with 'srun --mpi=pmix' or 'mpirun')", slurm_ntasks());
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (MPI_Get_library_version(lib, &len) == MPI_SUCCESS) {
        lib[strcspn(lib, ",\n")] = 0;
        snprintf(backend_name, sizeof backend_name, "MPI (%s)", lib);
    }
    local_rank_value = env_local_rank();
    if (local_rank_value < 0) {
        MPI_Comm node;
        local_rank_value = 0;
        if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
            MPI_Comm_rank(node, &local_rank_value);
            MPI_Comm_free(&node);
        }
    }
    mds_comm *c = new_comm(rank, size);
    if (!c) return fail("out of memory");
    c->mc = MPI_COMM_WORLD;
    *world = c;
    return 0;
}

void comm_finalize(void)
{
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
}

void comm_abort(int code)
{
    fflush(stdout);
    fflush(stderr);
    int inited = 0, fin = 0, size = 1;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (inited && !fin) {
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        if (size > 1) MPI_Abort(MPI_COMM_WORLD, code);
    }
    exit(code);
}

const char *comm_backend(void) { return backend_name; }

int comm_split(mds_comm *c, int color, int key, mds_comm **out)
{
    *out = NULL;
    MPI_Comm nc;
    if (mpi_check(MPI_Comm_split(c->mc, color, key, &nc), "MPI_Comm_split")) return -1;
    MPI_Comm_set_errhandler(nc, MPI_ERRORS_RETURN);
    int r, s;
    MPI_Comm_rank(nc, &r);
    MPI_Comm_size(nc, &s);
    mds_comm *g = new_comm(r, s);
    if (!g) {
        MPI_Comm_free(&nc);
        return fail("out of memory");
    }
    g->mc = nc;
    *out = g;
    return 0;
}

static MPI_Datatype mpi_type(enum comm_dtype dt) { return dt == COMM_F32 ? MPI_FLOAT : MPI_DOUBLE; }
static size_t dt_size(enum comm_dtype dt) { return dt == COMM_F32 ? 4 : 8; }

/* Rank-ordered sum of n elements in place, n*p*elsize small enough for int counts. */
static int ordered_allreduce(mds_comm *c, unsigned char *buf, size_t n, enum comm_dtype dt)
{
    int p = c->size;
    size_t es = dt_size(dt), chunk = (n + (size_t)p - 1) / (size_t)p;
    unsigned char *sbuf = scratch(c, 3 * (size_t)p * chunk * es);
    if (!sbuf) return fail("out of memory for a %zu-element all-reduce", n);
    unsigned char *rbuf = sbuf + (size_t)p * chunk * es, *share = rbuf + (size_t)p * chunk * es;
    memcpy(sbuf, buf, n * es);
    memset(sbuf + n * es, 0, ((size_t)p * chunk - n) * es);
    if (mpi_check(MPI_Alltoall(sbuf, (int)chunk, mpi_type(dt), rbuf, (int)chunk, mpi_type(dt), c->mc),
                  "MPI_Alltoall"))
        return -1;
    ordered_sum(share, rbuf, chunk, p, dt);
    if (mpi_check(MPI_Allgather(share, (int)chunk, mpi_type(dt), sbuf, (int)chunk, mpi_type(dt), c->mc),
                  "MPI_Allgather"))
        return -1;
    memcpy(buf, sbuf, n * es);
    count(c, COMM_K_ALLREDUCE, 2 * (size_t)(p - 1) * chunk * es);
    return 0;
}

int comm_allreduce(mds_comm *c, void *buf, size_t n, enum comm_dtype dt, enum comm_op op)
{
    if (c->size == 1 || n == 0) return 0;
    size_t es = dt_size(dt);
    if (op == COMM_MAX) {   /* the maximum is exact in any order */
        for (size_t off = 0; off < n;) {
            size_t k = n - off < PIECE / es ? n - off : PIECE / es;
            if (mpi_check(MPI_Allreduce(MPI_IN_PLACE, (unsigned char *)buf + off * es, (int)k, mpi_type(dt),
                                        MPI_MAX, c->mc), "MPI_Allreduce"))
                return -1;
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

int comm_reduce_scatter(mds_comm *c, float *out, const float *in, size_t chunk)
{
    int p = c->size;
    if (p == 1) {
        if (out != in) memmove(out, in, chunk * sizeof *out);
        return 0;
    }
    if (chunk * sizeof(float) > PIECE / 4) return fail("reduce-scatter of %zu floats per rank is too large", chunk);
    float *rbuf = scratch(c, (size_t)p * chunk * sizeof(float));
    if (!rbuf) return fail("out of memory for a reduce-scatter");
    if (mpi_check(MPI_Alltoall(in, (int)chunk, MPI_FLOAT, rbuf, (int)chunk, MPI_FLOAT, c->mc), "MPI_Alltoall"))
        return -1;
    ordered_sum(out, rbuf, chunk, p, COMM_F32);
    count(c, COMM_K_REDUCE_SCATTER, (size_t)(p - 1) * chunk * sizeof(float));
    return 0;
}

int comm_allgather(mds_comm *c, float *out, const float *in, size_t chunk)
{
    int p = c->size;
    if (p == 1) {
        if (out != in) memmove(out, in, chunk * sizeof *out);
        return 0;
    }
    if (chunk * sizeof(float) > PIECE / 4) return fail("all-gather of %zu floats per rank is too large", chunk);
    const void *src = in == out + (size_t)c->rank * chunk ? MPI_IN_PLACE : (const void *)in;
    if (mpi_check(MPI_Allgather(src, (int)chunk, MPI_FLOAT, out, (int)chunk, MPI_FLOAT, c->mc), "MPI_Allgather"))
        return -1;
    count(c, COMM_K_ALLGATHER, (size_t)(p - 1) * chunk * sizeof(float));
    return 0;
}

int comm_broadcast(mds_comm *c, void *buf, size_t bytes, int root)
{
    if (c->size == 1) return 0;
    for (size_t off = 0; off < bytes; off += PIECE) {
        size_t k = bytes - off < PIECE ? bytes - off : PIECE;
        if (mpi_check(MPI_Bcast((unsigned char *)buf + off, (int)k, MPI_BYTE, root, c->mc), "MPI_Bcast")) return -1;
    }
    count(c, COMM_K_BROADCAST, c->rank == root ? bytes : 0);
    return 0;
}

int comm_barrier(mds_comm *c)
{
    if (c->size == 1) return 0;
    return mpi_check(MPI_Barrier(c->mc), "MPI_Barrier");
}

int comm_sendrecv(mds_comm *c, const void *sbuf, size_t sbytes, int speer, void *rbuf, size_t rbytes, int rpeer)
{
    size_t soff = 0, roff = 0;
    if (speer >= c->size || rpeer >= c->size) return fail("send/receive peer out of range");
    do {
        MPI_Request req[2];
        int nreq = 0;
        size_t sk = 0, rk = 0;
        if (rpeer >= 0 && roff < rbytes) {
            rk = rbytes - roff < PIECE ? rbytes - roff : PIECE;
            if (mpi_check(MPI_Irecv((unsigned char *)rbuf + roff, (int)rk, MPI_BYTE, rpeer, 7, c->mc, &req[nreq++]),
                          "MPI_Irecv"))
                return -1;
        }
        if (speer >= 0 && soff < sbytes) {
            sk = sbytes - soff < PIECE ? sbytes - soff : PIECE;
            if (mpi_check(MPI_Isend((const unsigned char *)sbuf + soff, (int)sk, MPI_BYTE, speer, 7, c->mc,
                                    &req[nreq++]), "MPI_Isend"))
                return -1;
        }
        if (nreq && mpi_check(MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE), "MPI_Waitall")) return -1;
        soff += sk;
        roff += rk;
    } while ((speer >= 0 && soff < sbytes) || (rpeer >= 0 && roff < rbytes));
    if (speer >= 0) count(c, COMM_K_P2P, sbytes);
    return 0;
}

#else /* one process */

int comm_init(int *argc, char ***argv, mds_comm **world)
{
    (void)argc;
    (void)argv;
    *world = NULL;
    if (slurm_ntasks() > 1)
        return fail("Slurm started %d tasks but this mdstrain was built without MPI (install libopenmpi-dev and "
                    "rebuild)", slurm_ntasks());
    local_rank_value = env_local_rank() > 0 ? env_local_rank() : 0;
    *world = new_comm(0, 1);
    return *world ? 0 : fail("out of memory");
}

void comm_finalize(void) {}

void comm_abort(int code)
{
    fflush(stdout);
    fflush(stderr);
    exit(code);
}

const char *comm_backend(void) { return "none (one process, built without MPI)"; }

int comm_split(mds_comm *c, int color, int key, mds_comm **out)
{
    (void)color;
    (void)key;
    *out = new_comm(0, c->size);
    return *out ? 0 : fail("out of memory");
}

int comm_allreduce(mds_comm *c, void *buf, size_t n, enum comm_dtype dt, enum comm_op op)
{
    (void)c; (void)buf; (void)n; (void)dt; (void)op;
    return 0;
}

int comm_reduce_scatter(mds_comm *c, float *out, const float *in, size_t chunk)
{
    (void)c;
    if (out != in) memmove(out, in, chunk * sizeof *out);
    return 0;
}

int comm_allgather(mds_comm *c, float *out, const float *in, size_t chunk)
{
    (void)c;
    if (out != in) memmove(out, in, chunk * sizeof *out);
    return 0;
}

int comm_broadcast(mds_comm *c, void *buf, size_t bytes, int root)
{
    (void)c; (void)buf; (void)bytes;
    return root == 0 ? 0 : fail("broadcast root %d out of range", root);
}

int comm_barrier(mds_comm *c)
{
    (void)c;
    return 0;
}

int comm_sendrecv(mds_comm *c, const void *sbuf, size_t sbytes, int speer, void *rbuf, size_t rbytes, int rpeer)
{
    (void)c; (void)sbuf; (void)sbytes; (void)rbuf; (void)rbytes;
    if (speer >= 0 || rpeer >= 0) return fail("send/receive in a one-process build");
    return 0;
}

#endif
