/*
 * comm.h - the trainer's communicator: one interface for every collective the
 * parallel trainer needs (all-reduce, reduce-scatter, all-gather, broadcast,
 * point-to-point send/receive, splitting into groups).  train/comm.c
 * implements it above three transports: MPI (train/comm_mpi.c, built with
 * mpicc when MPI is found, MDS_HAVE_MPI), TCP (train/comm_tcp.c, plain
 * sockets, every build) and one process, in which every group has one rank;
 * NCCL (train/comm_nccl.c, CUDA and NCCL builds, MDS_HAVE_NCCL) carries the
 * device buffers of a world made by comm_nccl_init() over one of them
 * (compiled, not yet run on a GPU nor selected by mdstrain).
 *
 * Determinism: what a SUM promises under each transport.
 *  - MPI, TCP and one process (all of comm.c's generic layer, which only
 *    asks the transport to move bytes): every SUM is computed in rank order
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
 * the others see its connections close, fail and exit in turn.
 *
 * Counters.  Each communicator counts the calls and the bytes this rank
 * sent per kind of operation (comm_stats), for `make bench` and -v.
 *
 * Streams.  comm_set_stream() gives a communicator the device stream its
 * collectives belong to (a cudaStream_t, as void *).  A device transport
 * (NCCL) enqueues on it and returns at once; the host transports (MPI, TCP,
 * one process) ignore it and work synchronously on host-addressable memory,
 * so their caller synchronises its backend before the call (the CPU backend
 * has nothing to wait for).
 *
 * Thread safety: one thread calls into a communicator at a time.
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

/*
 * comm_split() - the ranks of c with the same color form a group, ordered
 * by key (ties by rank in c); MPI_Comm_split.  Collective over c.
 */
int comm_split(mds_comm *c, int color, int key, mds_comm **out);
void comm_free(mds_comm *c);

/* In-place all-reduce of n elements of dt; SUM in rank order (see above). */
int comm_allreduce(mds_comm *c, void *buf, size_t n, enum comm_dtype dt, enum comm_op op);

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
 * from comm_init; kept, not owned): binds this rank's GPU (the local rank
 * of SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK or LOCAL_RANK; refused when
 * a host has more ranks than GPUs or two ranks would share one), then one
 * ncclUniqueId per communicator, made by its rank 0 and broadcast over the
 * host ranks; groups come from comm_split as usual.  On the NCCL world and
 * its groups, device buffers go to NCCL, enqueued on the stream
 * (comm_set_stream), and host buffers through the host transport.
 * Collective over host.  Free the world with comm_free before host.
 * Built only with CUDA and NCCL (train/comm_nccl.c); compiled, never run
 * on a GPU in this project's tests, and not yet selected by mdstrain.
 * @return : 0, or -1 with comm_error() (no GPU, too many ranks on a host,
 *           an NCCL failure, or "built without NCCL").
 */
int comm_nccl_init(mds_comm *host, mds_comm **world);

void comm_get_stats(const mds_comm *c, comm_stats *s);
void comm_reset_stats(mds_comm *c);

#ifdef __cplusplus
}
#endif

#endif /* MDS_COMM_H */
