/*
 * comm.h - the trainer's communicator: one interface for every collective the
 * parallel trainer needs (all-reduce, reduce-scatter, all-gather, broadcast,
 * point-to-point send/receive, splitting into groups).  train/comm.c
 * implements it above three transports: MPI (train/comm_mpi.c, built with
 * mpicc when MPI is found, MDS_HAVE_MPI), TCP (train/comm_tcp.c, plain
 * sockets, every build) and one process, in which every group has one rank;
 * NCCL (train/comm_nccl.c, CUDA and NCCL builds, MDS_HAVE_NCCL) carries the
 * device buffers of a world made by comm_nccl_init() over one of them; and
 * host staging (comm_set_staging) carries device buffers over the host
 * transports by copying them to host memory and back, for several ranks
 * sharing one GPU.  comm_place() decides which, and which GPU, per rank.
 * (NCCL and staging on a GPU are compiled here, not yet run on one.)
 *
 * Determinism: what a SUM promises under each transport.
 *  - MPI, TCP and one process (all of comm.c's generic layer, which only
 *    asks the transport to move bytes), host-staged or not: every SUM is computed in rank order
 *    — a rank's share of the result is the sum, in the order rank 0, 1, ...,
 *    p-1, of every rank's contribution, and the shares are then gathered.
 *    So the result is bitwise the same on every rank, from run to run and
 *    across these transports, whatever algorithm MPI would pick (its own
 *    MPI_Allreduce promises none of this), which is what makes a resumed
 *    parallel run bitwise identical to a straight one.  F32 and F64 add in
 *    their own precision; BF16 and F16 add in float, in rank order, and are
 *    rounded once (round to nearest even).  The data moved equals a ring
 *    all-reduce's: 2 (p-1)/p N elements sent per rank.
 *  - NCCL (the GPU issue): the same result on every rank (NCCL's all-reduce
 *    is consistent across ranks), and the same from run to run for a fixed
 *    world, algorithm and protocol, but NOT rank-ordered: bits may differ
 *    from the host transports'.  A test holding NCCL to the host transports
 *    compares at a tolerance.
 * MAX is exact under every transport (the maximum does not depend on order).
 *
 * Failure.  A function that fails returns a negative value and leaves a
 * one-line message in comm_error(); the trainer then calls comm_abort(),
 * which ends every rank of the job (MPI_Abort): a failing rank never leaves
 * the others waiting in a collective.  Over TCP the failing rank exits and
 * the others see its connections close, fail and exit in turn, each naming
 * the rank where the failure began (a rank killed outright included): rank
 * 0 passes the word on over the rendezvous connection (comm_tcp.c).  Under
 * mpirun the launcher ends every rank when one dies and names it.
 *
 * Counters.  Each communicator counts the calls and the bytes this rank
 * sent per kind of operation (comm_stats), for `make bench` and -v.
 *
 * Streams.  comm_set_stream() gives a communicator the device stream its
 * collectives are ordered with (a cudaStream_t, as void *; NULL is CUDA's
 * legacy default stream, the CUDA backend's).  A device transport (NCCL)
 * runs on a stream of its own per communicator, made to wait for the work
 * already queued on that stream and making the later work wait for it
 * (events), and returns at once; the host transports (MPI, TCP, one
 * process) ignore it and work synchronously on host-addressable memory, so
 * their caller synchronises its backend before the call (the CPU backend
 * has nothing to wait for) — host staging does that itself.  Groups made
 * by comm_split inherit the stream and the staging of their parent.
 *
 * Thread safety: one thread calls into a communicator at a time (a
 * communicator with started all-reduces belongs to its worker until
 * comm_wait; see comm_allreduce_start).
 */
#ifndef MDS_COMM_H
#define MDS_COMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mds_comm mds_comm;

enum comm_dtype { COMM_F32, COMM_F64, COMM_BF16, COMM_F16 };
enum comm_op { COMM_SUM, COMM_MAX };

/* Kinds of operation the counters distinguish. */
enum comm_kind { COMM_K_ALLREDUCE, COMM_K_REDUCE_SCATTER, COMM_K_ALLGATHER, COMM_K_BROADCAST, COMM_K_P2P,
                 COMM_K_NUM };

typedef struct comm_stats {
    uint64_t calls[COMM_K_NUM];
    uint64_t bytes_sent[COMM_K_NUM];   /* bytes this rank sent */
    uint64_t bytes_staged;             /* bytes host staging copied, both ways */
} comm_stats;

/*
 * comm_init() - start the transport and return the world communicator.
 * MPI when a launcher set it up in a way this MPI can join (mpirun, srun
 * --mpi=pmix; a PMI-1/PMI-2 server alone, srun --mpi=pmi2, only with MPICH
 * and its kin: Open MPI would abort in MPI_Init).  Otherwise, when WORLD_SIZE > 1 (with RANK) or SLURM_NTASKS > 1
 * (with SLURM_PROCID), TCP: the ranks meet at MASTER_ADDR:MASTER_PORT (by
 * default Slurm's first node and 10000 + the job id's last 4 digits) within
 * MDS_RENDEZVOUS_TIMEOUT seconds (300), so srun without PMI never gives N
 * separate trainings.  Otherwise one process (MPI is not initialised).
 * @return : 0, or -1 with a one-line message in comm_error() (a bad
 *           variable, an unreachable master, a wrong task count).
 */
int comm_init(int *argc, char ***argv, mds_comm **world);

/* End the transport (MPI_Finalize, closing the connections); the world and every group must be freed. */
void comm_finalize(void);

/* End every rank of the job with exit status code (after flushing stdio). */
void comm_abort(int code) __attribute__((noreturn));

int comm_rank(const mds_comm *c);
int comm_size(const mds_comm *c);
const char *comm_backend(void);        /* "MPI (Open MPI 4.1.4)", "TCP (host:port)",
                                          "none (one process, built with MPI (Open MPI v4.1.4))" */
const char *comm_error(void);          /* the last failure's message */
const char *comm_transport(const mds_comm *c);   /* c's own transport: "NCCL 2.21.5", or as comm_backend() */

/*
 * comm_split() - the ranks of c with the same color form a group, ordered
 * by key (ties by rank in c); MPI_Comm_split.  Collective over c.
 */
int comm_split(mds_comm *c, int color, int key, mds_comm **out);
void comm_free(mds_comm *c);

/* In-place all-reduce of n elements of dt; SUM in rank order (see above). */
int comm_allreduce(mds_comm *c, void *buf, size_t n, enum comm_dtype dt, enum comm_op op);

/*
 * comm_allreduce_start() - comm_allreduce begun now and finished by
 * comm_wait(c), so that computation overlaps it (mdstrain's
 * --overlap-grad-reduce).  Host transports (and host staging): a thread of
 * c's own runs c's started all-reduces one after another, in the order
 * started, through comm_allreduce itself — the same rank-ordered sums, the
 * same bits.  A device transport enqueues on c's stream at once, and the
 * compute stream waits for it at comm_wait (no host thread).  Until
 * comm_wait, the caller touches neither the buffers nor c (starting more
 * is allowed) and uses other communicators only, whose transfers go to
 * other ranks than c's (the trainer's data-parallel group beside its
 * tensor- and pipeline-parallel ones: no two ranks share two of them).
 * Refused when the transport cannot take a second thread (MPI without
 * MPI_THREAD_MULTIPLE: comm_async_ok).
 * @return : 0, or -1 with comm_error(); comm_wait returns the first
 *           failure of any started all-reduce (later ones are not run).
 */
int comm_allreduce_start(mds_comm *c, void *buf, size_t n, enum comm_dtype dt, enum comm_op op);
/* comm_reduce_scatter begun now, finished by comm_wait(c), under the same
 * rules (the distributed optimizer's --overlap-grad-reduce buckets): the
 * same rank-ordered sums, run in the order started with c's all-reduces. */
int comm_reduce_scatter_start(mds_comm *c, float *out, const float *in, size_t chunk);
/* comm_allgather begun now (the distributed optimizer's
 * --overlap-param-gather), finished by comm_wait or comm_wait_some. */
int comm_allgather_start(mds_comm *c, float *out, const float *in, size_t chunk);
int comm_wait(mds_comm *c);
/* Wait for the first n collectives started on c since its last comm_wait
 * (their buffers are then the caller's again; the rest go on); comm_wait
 * still ends the round.  A failure of any of them so far is returned. */
int comm_wait_some(mds_comm *c, size_t n);
/* 1 when comm_allreduce_start can run on the host transport of this job. */
int comm_async_ok(void);

/* The device stream of c's collectives (see "Streams"); NULL: none. */
void comm_set_stream(mds_comm *c, void *stream);

/*
 * comm_reduce_scatter() - in holds size*chunk floats; rank r receives in
 * out the rank-ordered sum of every rank's in[r*chunk, (r+1)*chunk).
 */
int comm_reduce_scatter(mds_comm *c, float *out, const float *in, size_t chunk);

/* comm_allgather() - out (size*chunk floats) = every rank's in, in rank order.
 * in may equal out + rank*chunk (in place). */
int comm_allgather(mds_comm *c, float *out, const float *in, size_t chunk);

int comm_broadcast(mds_comm *c, void *buf, size_t bytes, int root);
int comm_barrier(mds_comm *c);

/*
 * comm_sendrecv() - send sbytes of sbuf to rank speer and receive rbytes
 * into rbuf from rank rpeer, both at once (neither waits for the other, so
 * two neighbours may exchange without deadlock).  A peer < 0 skips that
 * half.  Messages between two ranks arrive in the order they were sent.
 */
int comm_sendrecv(mds_comm *c, const void *sbuf, size_t sbytes, int speer, void *rbuf, size_t rbytes, int rpeer);

/*
 * comm_set_timeout() - bound how long this rank waits inside one
 * collective or send/receive (Megatron's --distributed-timeout-minutes; a
 * NCCL watchdog's role): a thread checks every 0.1 s and, once a call has
 * waited more than seconds, calls expired(waited) from that thread, which
 * must end the process (print, then _exit: the other ranks then see this
 * one gone, over TCP as closed connections, under mpirun as a process that
 * exited without MPI_Finalize, which ends the job).  MPI itself has no
 * timeout for a collective.  Call once, before the collectives; seconds
 * <= 0 leaves waits unbounded (the default).
 * @return : 0, or -1 (the thread could not start) with comm_error().
 */
int comm_set_timeout(double seconds, void (*expired)(double waited_s));

/*
 * comm_nccl_init() - the NCCL world over the host world `host` (TCP or MPI,
 * from comm_init; kept, not owned), on the GPU the caller made current for
 * this rank (comm_place, then the backend binds it): refused when two ranks
 * are on the same GPU (UUIDs gathered over host); then one ncclUniqueId per
 * communicator, made by its rank 0 and broadcast over the host ranks (an
 * NCCL communicator even for a group of one rank); groups come from
 * comm_split as usual.  On the NCCL world and its groups, device buffers
 * go to NCCL (see "Streams") and host buffers through the host transport.
 * A thread watches the enqueued work: an asynchronous NCCL error
 * (ncclCommGetAsyncError), or work not done within comm_set_timeout's
 * seconds (600 when none was set), aborts every NCCL communicator (ncclCommAbort) and ends the
 * process through comm_set_fatal's function with one line naming the rank
 * and the collective.  Collective over host.  Free the world with
 * comm_free before host.  Built only with CUDA and NCCL
 * (train/comm_nccl.c); run at world size 1 on an H200 (2026-11-27), not yet
 * between GPUs.
 * @return : 0; -1 with comm_error() on the rank that failed (no GPU, a
 *           shared GPU, an NCCL failure, or "built without NCCL"); -2 on
 *           the others, which every rank learns of before any NCCL call
 *           (so none waits in NCCL for a rank that stopped).
 */
int comm_nccl_init(mds_comm *host, mds_comm **world);

/* 1 when this build has the NCCL transport (train/comm_nccl.c). */
int comm_have_nccl(void);

/*
 * comm_set_fatal() - what a transport's own thread calls, with a one-line
 * message ("rank 3: NCCL all-reduce (group of 2 ranks): ..."), when work it
 * had accepted failed or timed out while the caller was elsewhere; the
 * function must end the process.  Default: the message on stderr, exit 1.
 */
void comm_set_fatal(void (*fatal)(const char *msg));

/*
 * Host staging: collectives on device memory through the host transports.
 * The copy functions of the backend that owns the buffers: copy() moves
 * bytes between any two of host and device memory and is complete when it
 * returns; sync() waits for the device's queued work (0, or -1 with
 * error()).  The CPU backend's are memmove and nothing, so a CPU run can
 * take this path and prove its logic (mdstrain --device-comm host-staged).
 */
typedef struct comm_copy_ops {
    void (*copy)(void *dst, const void *src, size_t bytes);
    int (*sync)(void);
    const char *(*error)(void);
    /* the host memory of the staged copies (CUDA: page-locked, so the
       copies run at the bus's speed); NULL: malloc and free */
    int (*host_alloc)(void **ptr, size_t bytes);
    void (*host_free)(void *ptr);
} comm_copy_ops;

/*
 * comm_set_staging() - every collective of c (and of the groups split from
 * it afterwards) syncs the device, copies its buffers into host memory of
 * c's own, runs the host transport's rank-ordered path there, and copies
 * the results back: the same bits as the host transports on host memory.
 * Every buffer is staged, device or host (a host-to-host copy is a
 * memcpy), so one path serves both.  ops is kept, not copied; NULL stops.
 * Not with a device transport (NCCL goes first when both are set).
 */
void comm_set_staging(mds_comm *c, const comm_copy_ops *ops);

/*
 * The transport and GPU of one rank (comm_place): pure, so the unit tests
 * inject any device count.  Inputs:
 */
enum comm_want { COMM_WANT_AUTO, COMM_WANT_NCCL, COMM_WANT_STAGED };   /* mdstrain's --device-comm */
enum comm_route { COMM_ROUTE_HOST, COMM_ROUTE_NCCL, COMM_ROUTE_STAGED };

typedef struct comm_place_in {
    int gpu;            /* the backend is a GPU (else routes are HOST or STAGED, gpu -1) */
    int want;           /* enum comm_want */
    int world_size;
    int local_rank;     /* this rank's place among its host's ranks (comm_local) */
    int local_size;     /* ranks on this rank's host */
    int ngpus;          /* GPUs this rank sees */
    int per_task;       /* CUDA_VISIBLE_DEVICES is set: a launcher may show each task its own GPU */
    int have_nccl;      /* built with NCCL */
    const char *host;   /* this host's name, for messages */
} comm_place_in;

typedef struct comm_place_out {
    int route;          /* enum comm_route */
    int device;         /* the GPU ordinal to bind; -1: none */
    int shared;         /* ranks of this host share GPUs (host staging) */
} comm_place_out;

/*
 * comm_place() - AUTO: one process runs as before (HOST, GPU local rank
 * or 0); several ranks take NCCL, each on the GPU of its local rank, when
 * the host has no more ranks than GPUs (or a launcher shows each task one
 * GPU: CUDA_VISIBLE_DEVICES set and one GPU seen), and are refused
 * otherwise, naming --device-comm host-staged.  NCCL: as AUTO's several
 * ranks, even for one process.  STAGED: host staging, on GPU local rank
 * mod GPUs (on the CPU backend: staged through memcpy, a test of the path).
 * @return : 0, or -1 with one line in why (no GPU, more local ranks than
 *           GPUs, no NCCL in this build, NCCL without a GPU backend).
 */
int comm_place(const comm_place_in *in, comm_place_out *out, char *why, size_t whylen);

/*
 * comm_local() - this rank's place on its host: the host names of every
 * rank of c gathered (collective over c), *local_size the ranks on this
 * host, *local_rank the launcher's (SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK,
 * LOCAL_RANK: *source names it) or else this rank's place among them
 * (*source "host order").  host (cap bytes) receives this host's name.
 * @return : 0, or -1 with comm_error().
 */
int comm_local(mds_comm *c, int *local_rank, int *local_size, const char **source, char *host, size_t cap);

void comm_get_stats(const mds_comm *c, comm_stats *s);
void comm_reset_stats(mds_comm *c);

#ifdef __cplusplus
}
#endif

#endif /* MDS_COMM_H */
