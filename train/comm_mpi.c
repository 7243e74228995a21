/*
 * comm_mpi.c - the MPI transport of comm.h (built by mpicc, only when the
 * Makefile finds MPI).  It moves bytes only: the rank-ordered sums are
 * computed by train/comm.c from its all-to-all and all-gather, the same way
 * for every transport, so MPI and TCP runs of a layout agree bit for bit.
 */
#include "comm_internal.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char backend_name[MPI_MAX_LIBRARY_VERSION_STRING + 16] = "MPI";

/* MPI calls return a code; turn a failure into our message. */
static int mpi_check(int rc, const char *what)
{
    if (rc == MPI_SUCCESS) return 0;
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "error %d", rc);
    return comm_fail("%s failed: %s", what, s);
}

/* Point-to-point messages are cut into pieces of at most this many bytes (MPI counts are int). */
#define PIECE ((size_t)1 << 30)

static MPI_Comm mc(const mds_comm *c) { return *(const MPI_Comm *)c->impl; }

static int env_set(const char *name) { return getenv(name) && *getenv(name); }

/*
 * Whether MPI_Init will find the launcher's world.  mpirun (OMPI_*) and
 * PMIx servers (srun --mpi=pmix, PMIX_RANK) serve every MPI this builds
 * with.  A PMI-1/PMI-2 server alone (srun --mpi=pmi2, MPICH's hydra:
 * PMI_RANK, PMI_SIZE, PMI_FD) serves MPICH and its derivatives, but not
 * Open MPI: 5.x speaks only PMIx, and 4.x only when built --with-pmi, which
 * Debian's (and most distributions') is not, so MPI_Init would abort every
 * rank.  With Open MPI the job then meets over TCP instead (comm.c), with
 * the same results bit for bit.
 */
int comm_mpi_launched(void)
{
    if (env_set("OMPI_COMM_WORLD_SIZE") || env_set("PMIX_RANK")) return 1;
    static const char *const pmi[] = {"PMI_RANK", "PMI_SIZE", "PMI_FD", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof pmi / sizeof pmi[0]; i++) {
        if (!env_set(pmi[i])) continue;
#ifdef OPEN_MPI
        return 0;
#else
        return 1;
#endif
    }
    return 0;
}

static void mpi_release(mds_comm *c)
{
    MPI_Comm *m = c->impl;
    if (m && *m != MPI_COMM_WORLD && *m != MPI_COMM_NULL) MPI_Comm_free(m);
    free(m);
}

static int mpi_split(mds_comm *c, int color, int key, mds_comm *g)
{
    MPI_Comm *nc = malloc(sizeof *nc);
    if (!nc) return comm_fail("out of memory");
    if (mpi_check(MPI_Comm_split(mc(c), color, key, nc), "MPI_Comm_split")) {
        free(nc);
        return -1;
    }
    MPI_Comm_set_errhandler(*nc, MPI_ERRORS_RETURN);
    MPI_Comm_rank(*nc, &g->rank);
    MPI_Comm_size(*nc, &g->size);
    g->impl = nc;
    return 0;
}

static int mpi_alltoall(mds_comm *c, const void *s, void *r, size_t bytes)
{
    return mpi_check(MPI_Alltoall(s, (int)bytes, MPI_BYTE, r, (int)bytes, MPI_BYTE, mc(c)), "MPI_Alltoall");
}

static int mpi_allgather(mds_comm *c, const void *s, void *r, size_t bytes)
{
    return mpi_check(MPI_Allgather(s ? s : MPI_IN_PLACE, (int)bytes, MPI_BYTE, r, (int)bytes, MPI_BYTE, mc(c)),
                     "MPI_Allgather");
}

static int mpi_max(mds_comm *c, void *buf, size_t n, enum comm_dtype dt)
{
    return mpi_check(MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, dt == COMM_F32 ? MPI_FLOAT : MPI_DOUBLE, MPI_MAX,
                                   mc(c)), "MPI_Allreduce");
}

static int mpi_broadcast(mds_comm *c, void *buf, size_t bytes, int root)
{
    return mpi_check(MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, mc(c)), "MPI_Bcast");
}

static int mpi_barrier(mds_comm *c) { return mpi_check(MPI_Barrier(mc(c)), "MPI_Barrier"); }

static int mpi_sendrecv(mds_comm *c, const void *sbuf, size_t sbytes, int speer, void *rbuf, size_t rbytes, int rpeer)
{
    size_t soff = 0, roff = 0;
    do {
        MPI_Request req[2];
        int nreq = 0;
        size_t sk = 0, rk = 0;
        if (rpeer >= 0 && roff < rbytes) {
            rk = rbytes - roff < PIECE ? rbytes - roff : PIECE;
            if (mpi_check(MPI_Irecv((unsigned char *)rbuf + roff, (int)rk, MPI_BYTE, rpeer, 7, mc(c), &req[nreq++]),
                          "MPI_Irecv"))
                return -1;
        }
        if (speer >= 0 && soff < sbytes) {
            sk = sbytes - soff < PIECE ? sbytes - soff : PIECE;
            if (mpi_check(MPI_Isend((const unsigned char *)sbuf + soff, (int)sk, MPI_BYTE, speer, 7, mc(c),
                                    &req[nreq++]), "MPI_Isend"))
                return -1;
        }
        if (nreq && mpi_check(MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE), "MPI_Waitall")) return -1;
        soff += sk;
        roff += rk;
    } while ((speer >= 0 && soff < sbytes) || (rpeer >= 0 && roff < rbytes));
    return 0;
}

void comm_mpi_finalize(void)
{
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (inited && !fin) MPI_Finalize();
}

static void mpi_abort(int code)
{
    int inited = 0, fin = 0, size = 1;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (inited && !fin) {
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        if (size > 1) MPI_Abort(MPI_COMM_WORLD, code);
    }
}

static const char *mpi_name(void) { return backend_name; }

/* MPI_Get_library_version may be called before MPI_Init. */
const char *comm_mpi_library(void)
{
    static char name[MPI_MAX_LIBRARY_VERSION_STRING + 16];
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (MPI_Get_library_version(lib, &len) != MPI_SUCCESS) return "MPI";
    lib[strcspn(lib, ",\n")] = 0;
    snprintf(name, sizeof name, "MPI (%s)", lib);
    return name;
}

static const struct comm_ops mpi_ops = {
    mpi_split, mpi_release, mpi_alltoall, mpi_allgather, mpi_max, mpi_broadcast, mpi_barrier, mpi_sendrecv,
    comm_mpi_finalize, mpi_abort, mpi_name,
};

int comm_mpi_init(int *argc, char ***argv, mds_comm **world)
{
    *world = NULL;
    int inited = 0;
    MPI_Initialized(&inited);
    /* comm_allreduce_start's worker calls MPI beside the main thread */
    int provided = MPI_THREAD_SINGLE;
    if (!inited && mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread"))
        return -1;
    if (inited) MPI_Query_thread(&provided);
    comm_threads_ok = provided == MPI_THREAD_MULTIPLE;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (MPI_Get_library_version(lib, &len) == MPI_SUCCESS) {
        lib[strcspn(lib, ",\n")] = 0;
        snprintf(backend_name, sizeof backend_name, "MPI (%s)", lib);
    }
    MPI_Comm *w = malloc(sizeof *w);
    if (!w) return comm_fail("out of memory");
    *w = MPI_COMM_WORLD;
    *world = comm_new(rank, size, &mpi_ops, w);
    if (!*world) {
        free(w);
        return comm_fail("out of memory");
    }
    return 0;
}
