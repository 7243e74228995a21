/*
 * comm_internal.h - what the transports of comm.h share: the communicator
 * structure, the table of a transport's primitives and the error helper.
 * train/comm.c holds everything that does not depend on the transport (the
 * rank-ordered sums, the counters, the choice of transport and the
 * one-process world); train/comm_mpi.c (MPI, built by mpicc only when MPI is
 * found) and train/comm_tcp.c (plain POSIX sockets, always built) move the
 * bytes; train/comm_nccl.c (CUDA and NCCL builds) adds comm_dev_ops for
 * device buffers.  Not a public interface: only the comm*.c files include it.
 */
#ifndef MDS_COMM_INTERNAL_H
#define MDS_COMM_INTERNAL_H

#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A transport's primitives.  Every one is collective over the communicator
 * except sendrecv, moves bytes exactly (no arithmetic but max, which is
 * exact in any order), and returns 0 or -1 with comm_fail()'s message.
 *   alltoall:  block i of s (bytes each) goes to rank i, block i of r comes from rank i
 *   allgather: r (size blocks of bytes) = every rank's s; s NULL: this rank's block is already in r
 *   max:       in-place element-wise maximum of n F32 or F64 elements
 *   split:     fills g's rank, size and impl (see comm_split)
 * Sizes are the generic layer's pieces: below 2^31 bytes per block.
 */
struct comm_ops {
    int (*split)(mds_comm *c, int color, int key, mds_comm *g);
    void (*release)(mds_comm *c);   /* frees c->impl */
    int (*alltoall)(mds_comm *c, const void *s, void *r, size_t bytes);
    int (*allgather)(mds_comm *c, const void *s, void *r, size_t bytes);
    int (*max)(mds_comm *c, void *buf, size_t n, enum comm_dtype dt);
    int (*broadcast)(mds_comm *c, void *buf, size_t bytes, int root);
    int (*barrier)(mds_comm *c);
    int (*sendrecv)(mds_comm *c, const void *sbuf, size_t sbytes, int speer, void *rbuf, size_t rbytes, int rpeer);
    void (*finalize)(void);
    void (*abort)(int code);        /* may return: comm_abort then exits */
    const char *(*name)(void);
};

/*
 * A device transport's own collectives (NCCL, train/comm_nccl.c), which
 * comm.c calls instead of its rank-ordered host path when is_device() says
 * the buffer is device memory; each enqueues on the communicator's stream
 * and returns.  comm.c keeps the counters (the same formulas).  barrier
 * waits for the stream, then for every rank.
 */
struct comm_dev_ops {
    int (*is_device)(const void *p);
    int (*allreduce)(mds_comm *c, void *buf, size_t n, enum comm_dtype dt, enum comm_op op);
    int (*reduce_scatter)(mds_comm *c, float *out, const float *in, size_t chunk);
    int (*allgather)(mds_comm *c, float *out, const float *in, size_t chunk);
    int (*broadcast)(mds_comm *c, void *buf, size_t bytes, int root);
    int (*sendrecv)(mds_comm *c, const void *sbuf, size_t sbytes, int speer, void *rbuf, size_t rbytes, int rpeer);
    int (*barrier)(mds_comm *c);
    /* comm_allreduce_start / comm_wait: as allreduce, but the compute
       stream waits for it only at wait (NULL: allreduce, waited at once) */
    int (*allreduce_start)(mds_comm *c, void *buf, size_t n, enum comm_dtype dt, enum comm_op op);
    int (*wait)(mds_comm *c);
    /* comm_reduce_scatter_start: as reduce_scatter, waited for at wait
       (NULL: reduce_scatter, waited at once) */
    int (*reduce_scatter_start)(mds_comm *c, float *out, const float *in, size_t chunk);
    /* comm_allgather_start: as allgather, waited for at wait or wait_some
       (NULL: allgather, waited at once) */
    int (*allgather_start)(mds_comm *c, float *out, const float *in, size_t chunk);
    /* comm_wait_some: the compute stream waits for the first n collectives
       started since the last wait (NULL: for all of them, as wait) */
    int (*wait_some)(mds_comm *c, size_t n);
};

struct mds_comm {
    int rank, size;
    comm_stats st;
    unsigned char *scratch;   /* grown on demand by comm_scratch */
    size_t scratch_cap;
    const struct comm_ops *ops;
    void *impl;               /* the transport's own state */
    void *stream;             /* comm_set_stream's; unused by the host transports */
    const struct comm_dev_ops *dev;   /* NULL but for a device transport */
    const comm_copy_ops *stage;       /* comm_set_staging's; NULL: buffers used where they are */
    unsigned char *staged;    /* host copies of staged buffers, grown on demand */
    size_t staged_cap;
    void (*staged_free)(void *);   /* what frees staged (the staging ops' host_free); NULL: free */
    struct comm_async *async; /* the worker of the _start collectives; NULL until the first */
};

/* Set on comm_allreduce_start's worker threads: a transport keeps its
 * process-wide duties (comm_tcp.c's side channel) to the caller's thread. */
extern _Thread_local int comm_on_worker;
/* The transport may be called from several threads at once, each on its own
 * communicators (MPI: MPI_THREAD_MULTIPLE was granted); 1 unless a
 * transport says otherwise at its start. */
extern int comm_threads_ok;

/* Sets comm_error()'s message; returns -1. */
int comm_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* c's scratch buffer of at least bytes bytes (NULL when out of memory). */
void *comm_scratch(mds_comm *c, size_t bytes);
mds_comm *comm_new(int rank, int size, const struct comm_ops *ops, void *impl);
size_t comm_dtype_size(enum comm_dtype dt);
/* Called by the collective watchdog's thread before it ends the process
 * (the NCCL transport aborts its communicators); NULL: nothing. */
extern void (*comm_watchdog_hook)(void);
/* Set by a host transport that can tell, from any thread, without
 * blocking or taking anything the caller's thread reads, that a rank of
 * the job failed or is gone (comm_tcp.c's side channel): 1 with a message
 * naming it, else 0.  NULL: no such check (MPI: the launcher ends the job).
 * The NCCL watcher asks it while NCCL work is outstanding. */
extern int (*comm_peer_check)(char *msg, size_t cap);
/* Set by a host transport that can tell the other ranks, from any thread,
 * that this one is failing (comm_tcp.c: a notice on its side channel); the
 * collective watchdog calls it before it ends the process, so the others
 * name this rank rather than find it gone.  NULL: nothing to tell. */
extern void (*comm_tell_failure)(void);
/* comm_set_timeout's seconds (0: unbounded), for a transport's own watcher. */
double comm_timeout(void);
/* comm_set_fatal's function, never NULL. */
void comm_fatal(const char *msg) __attribute__((noreturn));

#ifdef MDS_HAVE_MPI
/* MPI_Init (when not done) and MPI_COMM_WORLD; *world NULL on failure. */
int comm_mpi_init(int *argc, char ***argv, mds_comm **world);
/* The launcher's environment says an MPI job that this MPI can join (mpirun,
 * srun --mpi=pmix; PMI-1/2 alone only for MPIs other than Open MPI). */
int comm_mpi_launched(void);
/* MPI_Finalize when MPI was initialised but another transport is used. */
void comm_mpi_finalize(void);
/* "MPI (Open MPI v4.1.4)": the library's name, without MPI_Init. */
const char *comm_mpi_library(void);
#endif

/*
 * comm_tcp_init() - the world of size ranks over TCP, this process being
 * rank.  Rendezvous at master:port (rank 0 listens there), then a full mesh
 * of connections; gives up after timeout_s seconds naming master:port.
 */
int comm_tcp_init(int rank, int size, const char *master, int port, double timeout_s, mds_comm **world);

#ifdef __cplusplus
}
#endif

#endif /* MDS_COMM_INTERNAL_H */
