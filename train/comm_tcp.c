/*
 * comm_tcp.c - the TCP transport of comm.h: N processes started by any
 * launcher (srun without PMI, torchrun-style scripts, a shell loop) that
 * know their rank and the world size form the world themselves, with plain
 * POSIX sockets.
 *
 * Rendezvous.  Rank 0 listens at MASTER_PORT; every other rank opens its own
 * listening socket (any port), connects to MASTER_ADDR:MASTER_PORT and says
 * hello (rank, world size, its port).  When all have come, rank 0 sends each
 * the table of every rank's address (as rank 0 saw it) and port and a
 * random job token.  Then rank j connects to every rank i < j (rank 0 at
 * MASTER_PORT again) and accepts from every rank above it.  A full mesh: one
 * connection per pair, carrying every group's messages; the rendezvous
 * connection to rank 0 stays open as the side channel (below).
 *
 * Messages.  Each has a 24-byte header (magic, the group's sequence number
 * for this pair and direction, the group id, the length), checked on
 * arrival: the trainer uses groups in the same order on both sides of a
 * pair, and a message of another group, out of sequence or of another
 * length is an error, never a silent mix-up.  Sockets stay blocking; the
 * transfers of one collective all progress together through poll() with
 * MSG_DONTWAIT, so two ranks sending to each other at once never deadlock.
 *
 * Failure.  A peer that closes its connection (it ended, or it failed and
 * exited) is an error; the trainer then exits, closing its own connections,
 * so a failing rank brings the others down within the time the connections
 * take to report it.  So that every rank names the rank where the failure
 * began, not the neighbour that went down because of it, the side channel
 * carries 16-byte notices: a rank failing for its own reason (comm_abort)
 * sends "failed", the first rank to lose a peer without a word sends
 * "gone", a rank ending normally "bye"; rank 0 passes each on to every
 * rank, and takes a side channel closed without "bye" for a rank gone.
 * Every transfer also waits on the side channel, and a broken connection
 * waits up to NOTICE_WAIT seconds for word before it blames its peer.
 * (A SIGKILLed rank gives no word: its connections close, which is word
 * enough.)  No timeouts after the rendezvous: a training step, or a rank
 * stopped in a debugger, may take any time (--distributed-timeout-minutes
 * is comm.c's watchdog).
 *
 * Not done: several connections per pair, shared memory between ranks of a
 * node, IPv6 link-local addresses with scope ids, a step timeout.
 */
#include "comm_internal.h"
#include "le.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HELLO_MAGIC 0x4d445348u   /* "MDSH" */
#define TABLE_MAGIC 0x4d445354u   /* "MDST" */
#define MESH_MAGIC  0x4d44534du   /* "MDSM" */
#define MSG_MAGIC   0x4d445347u   /* "MDSG" */
#define NOTE_MAGIC  0x4d44534eu   /* "MDSN" */
#define PROTO_VERSION 1u
#define HOSTLEN 64                /* a numeric IPv4 or IPv6 address */
#define HDR 24
#define NOTE 16                   /* a notice on the side channel: magic, kind, rank, reporter */
#define NOTICE_WAIT 2.0           /* seconds a rank that lost a peer waits for word of the cause */

/* Notices (see "Failure" above). */
enum { NOTE_GONE = 1, NOTE_FAILED = 2, NOTE_BYE = 3 };

struct tcp_world {
    int rank, size;
    int *fd;                  /* (size) connection to each rank, -1 for this one */
    int *ctl;                 /* (size) side channel: rank 0 has one to each rank, the others ctl[0]; -1 none */
    int told;                 /* this rank has sent or received a notice of failure */
    _Atomic int lost_peer;    /* a worker thread (comm_allreduce_start) lost this rank; -1 none */
    char (*host)[HOSTLEN];    /* (size) each rank's address, for messages */
    int *port;                /* (size) each rank's listening port */
    char master[300];         /* "host:port" */
    char name[320];
    uint64_t token;
};
static struct tcp_world W;

struct tcp_group {
    uint64_t id;
    int *ranks;               /* (size) world rank of each member */
    uint32_t *sseq, *rseq;    /* (size) messages sent to / received from each member */
    uint32_t nsplit;          /* splits of this group so far (the same on every member) */
};


static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int ms_left(double deadline)
{
    double s = deadline - now();
    return s <= 0 ? 0 : s > 1e6 ? 1000000000 : (int)(s * 1000) + 1;
}

static void tune(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
}

/* Wait until fd is ready for events or the deadline passes: 0, or -1 with
 * errno (ETIMEDOUT at the deadline). */
static int wait_ready(int fd, short events, double deadline)
{
    for (;;) {
        struct pollfd pf = {fd, events, 0};
        int k = poll(&pf, 1, ms_left(deadline));
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        return 0;
    }
}

/* Read or write exactly n bytes before the deadline (rendezvous only).
 * 0, or -1 with errno (ETIMEDOUT, ECONNRESET for end of file). */
static int io_full(int fd, void *buf, size_t n, int writing, double deadline)
{
    unsigned char *p = buf;
    while (n) {
        if (wait_ready(fd, (short)(writing ? POLLOUT : POLLIN), deadline)) return -1;
        ssize_t m = writing ? send(fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL) : recv(fd, p, n, MSG_DONTWAIT);
        if (m < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
        if (m < 0) return -1;
        if (m == 0) {
            errno = ECONNRESET;
            return -1;
        }
        p += m;
        n -= (size_t)m;
    }
    return 0;
}

static const char *why(int e) { return e == ECONNRESET ? "connection closed" : strerror(e); }

/* The numeric address of a connected socket's peer. */
static void peer_host(int fd, char *host)
{
    struct sockaddr_storage a;
    socklen_t len = sizeof a;
    if (getpeername(fd, (struct sockaddr *)&a, &len) ||
        getnameinfo((struct sockaddr *)&a, len, host, HOSTLEN, NULL, 0, NI_NUMERICHOST))
        snprintf(host, HOSTLEN, "?");
}

/* A listening socket of family fam on port (0: any); its port in *bound. */
static int listen_on(int fam, int port, int *bound)
{
    int fd = socket(fam, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_storage a;
    memset(&a, 0, sizeof a);
    socklen_t len;
    if (fam == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&a;
        s6->sin6_family = AF_INET6;
        s6->sin6_addr = in6addr_any;
        s6->sin6_port = htons((uint16_t)port);
        len = sizeof *s6;
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&a;
        s4->sin_family = AF_INET;
        s4->sin_addr.s_addr = htonl(INADDR_ANY);
        s4->sin_port = htons((uint16_t)port);
        len = sizeof *s4;
    }
    if (bind(fd, (struct sockaddr *)&a, len) || listen(fd, SOMAXCONN)) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    len = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &len);
    *bound = ntohs(fam == AF_INET6 ? ((struct sockaddr_in6 *)&a)->sin6_port : ((struct sockaddr_in *)&a)->sin_port);
    return fd;
}

static int resolve(const char *host, int port, struct addrinfo **res)
{
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    return getaddrinfo(host, ps, &hints, res);
}

/* Connect to host:port, retrying refusals until the deadline.  fd or -1 (errno). */
static int connect_to(const char *host, int port, double deadline, int *gai)
{
    *gai = 0;
    for (;;) {
        struct addrinfo *res;
        int rc = resolve(host, port, &res);
        if (rc) {
            if (rc != EAI_AGAIN || now() >= deadline) {
                *gai = rc;
                return -1;
            }
        } else {
            int e = ECONNREFUSED;
            for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
                int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
                if (fd < 0) {
                    e = errno;
                    continue;
                }
                int ok = connect(fd, ai->ai_addr, ai->ai_addrlen) == 0;
                if (!ok && errno == EINPROGRESS) {
                    struct pollfd pf = {fd, POLLOUT, 0};
                    int ms = ms_left(deadline);
                    if (poll(&pf, 1, ms > 2000 ? 2000 : ms) == 1) {
                        socklen_t len = sizeof e;
                        getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len);
                        ok = e == 0;
                    } else {
                        e = ETIMEDOUT;
                    }
                } else if (!ok) {
                    e = errno;
                }
                if (ok) {
                    freeaddrinfo(res);
                    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
                    tune(fd);
                    return fd;
                }
                close(fd);
            }
            freeaddrinfo(res);
            errno = e;
        }
        if (now() >= deadline) {
            if (!rc) errno = errno ? errno : ETIMEDOUT;
            return -1;
        }
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* Accept one connection before the deadline: fd, or -1 with errno. */
static int accept_by(int lfd, double deadline)
{
    for (;;) {
        if (wait_ready(lfd, POLLIN, deadline)) return -1;
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) {
            tune(fd);
            return fd;
        }
        if (errno != EINTR && errno != ECONNABORTED && errno != EAGAIN) return -1;
    }
}

static uint64_t random_token(void)
{
    uint64_t t = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, &t, sizeof t) != (ssize_t)sizeof t) t = 0;
        close(fd);
    }
    return t ^ (uint64_t)getpid() << 32 ^ (uint64_t)(now() * 1e9);
}

/* Rank 0: accept every rank's hello, then send each the table. */
static int master_gather(int lfd, double deadline, double timeout)
{
    int missing = W.size - 1;
    unsigned char h[20];
    while (missing) {
        int fd = accept_by(lfd, deadline);
        if (fd < 0) {
            if (errno != ETIMEDOUT) return comm_fail("rank 0: accept at %s failed: %s", W.master, strerror(errno));
            int first = 1;
            while (W.ctl[first] >= 0) first++;
            return comm_fail("rank 0: %d of %d ranks did not reach %s within %g s (rank %d missing; do all tasks "
                             "have the same SLURM_NTASKS/WORLD_SIZE?)", missing, W.size - 1, W.master, timeout, first);
        }
        /* a stranger (or a port scanner) that says nothing useful is dropped */
        if (io_full(fd, h, sizeof h, 0, now() + 10 < deadline ? now() + 10 : deadline) ||
            le_get32(h) != HELLO_MAGIC || le_get32(h + 4) != PROTO_VERSION) {
            close(fd);
            continue;
        }
        int r = (int)le_get32(h + 8), s = (int)le_get32(h + 12), port = (int)le_get32(h + 16);
        if (s != W.size) {
            close(fd);
            return comm_fail("rank 0: rank %d announces a world of %d ranks, rank 0 one of %d (SLURM_NTASKS/WORLD_SIZE "
                             "differ between tasks)", r, s, W.size);
        }
        if (r <= 0 || r >= W.size || W.ctl[r] >= 0) {
            close(fd);
            return comm_fail("rank 0: a second process claims rank %d at %s (SLURM_PROCID/RANK repeated?)", r, W.master);
        }
        W.ctl[r] = fd;
        W.port[r] = port;
        peer_host(fd, W.host[r]);
        missing--;
    }
    size_t tlen = 16 + (size_t)W.size * (4 + HOSTLEN);
    unsigned char *t = calloc(1, tlen);
    if (!t) return comm_fail("out of memory");
    le_put32(t, TABLE_MAGIC);
    le_put32(t + 4, (uint32_t)W.size);
    le_put64(t + 8, W.token);
    for (int r = 0; r < W.size; r++) {
        le_put32(t + 16 + (size_t)r * (4 + HOSTLEN), (uint32_t)W.port[r]);
        memcpy(t + 20 + (size_t)r * (4 + HOSTLEN), W.host[r], HOSTLEN);
    }
    for (int r = 1; r < W.size; r++)
        if (io_full(W.ctl[r], t, tlen, 1, deadline)) {
            free(t);
            return comm_fail("rank 0: cannot send the rank table to rank %d (%s): %s", r, W.host[r], why(errno));
        }
    free(t);
    return 0;
}

/* Accept the mesh connections of every rank above this one. */
static int accept_mesh(int lfd, double deadline, double timeout)
{
    unsigned char m[16];
    for (int missing = W.size - 1 - W.rank; missing > 0;) {
        int c = accept_by(lfd, deadline);
        if (c < 0)
            return comm_fail("rank %d: %d higher ranks did not connect within %g s: %s", W.rank, missing, timeout,
                             strerror(errno));
        int r;
        if (io_full(c, m, sizeof m, 0, deadline) || le_get32(m) != MESH_MAGIC || le_get64(m + 8) != W.token ||
            (r = (int)le_get32(m + 4)) <= W.rank || r >= W.size || W.fd[r] >= 0) {
            close(c);   /* not of this job */
            continue;
        }
        W.fd[r] = c;
        missing--;
    }
    return 0;
}

/* Rank > 0: hello to rank 0 (that connection stays the side channel), read
 * the table, connect to the ranks below and accept those above. */
static int join(const char *master, int mport, int lfd, int lport, double deadline, double timeout)
{
    int gai;
    int fd = connect_to(master, mport, deadline, &gai);
    if (fd < 0) {
        if (gai) return comm_fail("rank %d: cannot resolve the master %s: %s", W.rank, W.master, gai_strerror(gai));
        return comm_fail("rank %d: cannot reach the master at %s within %g s: %s", W.rank, W.master, timeout,
                         strerror(errno));
    }
    W.ctl[0] = fd;
    snprintf(W.host[0], HOSTLEN, "%s", master);
    W.port[0] = mport;
    unsigned char h[20];
    le_put32(h, HELLO_MAGIC);
    le_put32(h + 4, PROTO_VERSION);
    le_put32(h + 8, (uint32_t)W.rank);
    le_put32(h + 12, (uint32_t)W.size);
    le_put32(h + 16, (uint32_t)lport);
    if (io_full(fd, h, sizeof h, 1, deadline))
        return comm_fail("rank %d: cannot say hello to the master at %s: %s", W.rank, W.master, why(errno));
    size_t tlen = 16 + (size_t)W.size * (4 + HOSTLEN);
    unsigned char *t = malloc(tlen);
    if (!t) return comm_fail("out of memory");
    /* a little longer than rank 0 waits, so that its message, the clearer, decides */
    if (io_full(fd, t, 16, 0, deadline + 2) || le_get32(t) != TABLE_MAGIC || (int)le_get32(t + 4) != W.size ||
        io_full(fd, t + 16, tlen - 16, 0, deadline + 2)) {
        int e = errno;
        free(t);
        if (e == ETIMEDOUT)
            return comm_fail("rank %d: the master at %s did not gather all %d ranks within %g s", W.rank, W.master,
                             W.size, timeout);
        return comm_fail("rank %d: the master at %s ended the rendezvous (%s; see rank 0's message)", W.rank,
                         W.master, why(e));
    }
    W.token = le_get64(t + 8);
    for (int r = 1; r < W.size; r++) {
        W.port[r] = (int)le_get32(t + 16 + (size_t)r * (4 + HOSTLEN));
        memcpy(W.host[r], t + 20 + (size_t)r * (4 + HOSTLEN), HOSTLEN);
        W.host[r][HOSTLEN - 1] = 0;
    }
    free(t);
    unsigned char m[16];
    for (int r = 0; r < W.rank; r++) {
        int c = connect_to(W.host[r], W.port[r], deadline, &gai);
        if (c < 0)
            return comm_fail("rank %d: cannot connect to rank %d at %s:%d: %s", W.rank, r, W.host[r], W.port[r],
                             gai ? gai_strerror(gai) : strerror(errno));
        W.fd[r] = c;
        le_put32(m, MESH_MAGIC);
        le_put32(m + 4, (uint32_t)W.rank);
        le_put64(m + 8, W.token);
        if (io_full(c, m, sizeof m, 1, deadline))
            return comm_fail("rank %d: cannot say hello to rank %d at %s:%d: %s", W.rank, r, W.host[r], W.port[r],
                             why(errno));
    }
    return accept_mesh(lfd, deadline, timeout);
}

static void world_close(void)
{
    for (int r = 0; r < W.size; r++) {
        if (W.fd && W.fd[r] >= 0) close(W.fd[r]);
        if (W.ctl && W.ctl[r] >= 0) close(W.ctl[r]);
    }
    free(W.fd);
    free(W.ctl);
    free(W.host);
    free(W.port);
    W.fd = NULL;
    W.ctl = NULL;
    W.host = NULL;
    W.port = NULL;
}

/* ---- transfers ----------------------------------------------------------- */

/* One send or receive of a collective: header then payload. */
struct xop {
    int peer;                 /* world rank */
    int sending;
    unsigned char *buf;
    size_t len, done;         /* done counts the header's bytes too */
    unsigned char hdr[HDR];
};

static void op_init(struct xop *o, const struct tcp_group *g, int member, int sending, const void *buf, size_t len)
{
    o->peer = g->ranks[member];
    o->sending = sending;
    o->buf = (unsigned char *)buf;
    o->len = len;
    o->done = 0;
    le_put32(o->hdr, MSG_MAGIC);
    le_put32(o->hdr + 4, sending ? g->sseq[member]++ : g->rseq[member]++);
    le_put64(o->hdr + 8, g->id);
    le_put64(o->hdr + 16, len);
}

static int lost(int peer, int e)
{
    return comm_fail("lost the connection to rank %d (%s): %s", peer, W.host[peer], why(e));
}

/* ---- the side channel: who failed ---------------------------------------- */

/* One notice on fd, best effort (the peer may be gone already). */
static void note_send(int fd, uint32_t kind, int rank, int by)
{
    unsigned char n[NOTE];
    le_put32(n, NOTE_MAGIC);
    le_put32(n + 4, kind);
    le_put32(n + 8, (uint32_t)rank);
    le_put32(n + 12, (uint32_t)by);
    if (fd >= 0) (void)io_full(fd, n, NOTE, 1, now() + 1);
}

/* Tell the job: rank 0 tells every rank but the reporter, another rank
 * tells rank 0, which passes it on. */
static void note_tell(uint32_t kind, int rank, int by)
{
    if (kind != NOTE_BYE) W.told = 1;
    if (W.rank) {
        note_send(W.ctl[0], kind, rank, by);
        return;
    }
    for (int r = 1; r < W.size; r++)
        if (r != by) note_send(W.ctl[r], kind, rank, by);
}

/* What a notice of failure says: the rank where the failure began. */
static void note_text(char *msg, size_t cap, uint32_t kind, int rank, int by)
{
    if (kind == NOTE_FAILED) snprintf(msg, cap, "rank %d failed (its own message says why)", rank);
    else snprintf(msg, cap, "rank %d is gone (rank %d lost its connection to it)", rank, by);
}

/*
 * Read the notice waiting on the side channel of rank `from` (0 on ranks
 * above 0): 0 for a farewell (the channel is closed), else -1 with the
 * message naming the rank where the failure began; rank 0 passes it on.
 * A channel that closes without a farewell means `from` ended without
 * comm_finalize: that rank is gone.
 */
static int note_read(int from)
{
    unsigned char n[NOTE];
    int e = io_full(W.ctl[from], n, NOTE, 0, now() + NOTICE_WAIT) ? errno : le_get32(n) != NOTE_MAGIC ? EPROTO : 0;
    if (e) {
        if (W.rank == 0) note_tell(NOTE_GONE, from, 0);
        W.told = 1;
        return lost(from, e);
    }
    uint32_t kind = le_get32(n + 4);
    int r = (int)le_get32(n + 8), by = (int)le_get32(n + 12);
    if (kind == NOTE_BYE) {
        close(W.ctl[from]);
        W.ctl[from] = -1;
        return 0;
    }
    if (W.rank == 0) note_tell(kind, r, by);
    W.told = 1;
    char msg[96];
    note_text(msg, sizeof msg, kind, r, by);
    return comm_fail("%s", msg);
}

/*
 * comm_peer_check for a thread beside the main one (the NCCL watcher, while
 * NCCL kernels wait and no host transfer reads the side channel): peek at
 * the side channel, consuming nothing (a farewell stays there, so the end
 * of file behind it is never mistaken for a loss).  Rank 0 passes on what
 * it finds, as note_read does.
 */
static int tcp_peer_check(char *msg, size_t cap)
{
    for (int r = 0; W.ctl && r < (W.rank ? 1 : W.size); r++) {
        unsigned char n[NOTE];
        ssize_t m = W.ctl[r] < 0 ? -1 : recv(W.ctl[r], n, NOTE, MSG_PEEK | MSG_DONTWAIT);
        if (m == 0) {
            if (W.rank == 0) note_tell(NOTE_GONE, r, 0);
            snprintf(msg, cap, "lost the connection to rank %d (%s): connection closed", r, W.host[r]);
            return 1;
        }
        if (m < NOTE || le_get32(n) != NOTE_MAGIC || le_get32(n + 4) == NOTE_BYE) continue;
        int dead = (int)le_get32(n + 8), by = (int)le_get32(n + 12);
        if (W.rank == 0) note_tell(le_get32(n + 4), dead, by);
        note_text(msg, cap, le_get32(n + 4), dead, by);
        return 1;
    }
    return 0;
}

/*
 * The connection to peer broke in a transfer.  A rank that fails says so
 * on the side channel before it exits, and rank 0 passes on what it sees,
 * so wait a moment for that word: the message then names the rank where
 * the failure began, not the neighbour that passed it on.  Without word,
 * peer is the one gone: say so.
 */
static int peer_lost(int peer, int e)
{
    if (comm_on_worker) {   /* the side channel is the main thread's: tcp_abort tells */
        atomic_store(&W.lost_peer, peer);
        return lost(peer, e);
    }
    int from = W.rank ? 0 : peer;
    if (!(W.rank && peer == 0) && W.ctl[from] >= 0 && !wait_ready(W.ctl[from], POLLIN, now() + NOTICE_WAIT)) {
        int rc = note_read(from);
        if (rc) return rc;
    }
    if (!W.told) note_tell(NOTE_GONE, peer, W.rank);
    return lost(peer, e);
}

/* Progress o without blocking: 1 when complete, 0 when it would block, -1 on failure. */
static int op_step(struct xop *o)
{
    int fd = W.fd[o->peer];
    while (o->done < HDR + o->len) {
        ssize_t m;
        if (o->sending) {
            struct iovec v[2];
            int nv = 0;
            if (o->done < HDR) v[nv++] = (struct iovec){o->hdr + o->done, HDR - o->done};
            size_t off = o->done < HDR ? 0 : o->done - HDR;
            if (o->len > off) v[nv++] = (struct iovec){o->buf + off, o->len - off};
            struct msghdr mh;
            memset(&mh, 0, sizeof mh);
            mh.msg_iov = v;
            mh.msg_iovlen = (size_t)nv;
            m = sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
        } else if (o->done < HDR) {
            m = recv(fd, o->hdr + o->done, HDR - o->done, MSG_DONTWAIT);
        } else {
            m = recv(fd, o->buf + (o->done - HDR), o->len - (o->done - HDR), MSG_DONTWAIT);
        }
        if (m < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        if (m < 0 && errno == EINTR) continue;
        if (m <= 0) return peer_lost(o->peer, m < 0 ? errno : ECONNRESET);
        o->done += (size_t)m;
    }
    return 1;
}

/* The rank whose side channel fd is. */
static int ctl_owner(int fd)
{
    int r = 0;
    while (r < W.size - 1 && W.ctl[r] != fd) r++;
    return r;
}

/* Check a received header against what this receive expects. */
static int check_header(const struct xop *o, const unsigned char *want)
{
    if (memcmp(o->hdr, want, HDR) == 0) return 0;
    if (le_get32(o->hdr) != MSG_MAGIC)
        return comm_fail("garbage from rank %d (%s) where a message was expected", o->peer, W.host[o->peer]);
    return comm_fail("from rank %d came message %u of group %016llx (%llu bytes) where message %u of group "
                     "%016llx (%llu bytes) was expected (the ranks disagree on the order of collectives)",
                     o->peer, le_get32(o->hdr + 4), (unsigned long long)le_get64(o->hdr + 8),
                     (unsigned long long)le_get64(o->hdr + 16), le_get32(want + 4), (unsigned long long)le_get64(want + 8),
                     (unsigned long long)le_get64(want + 16));
}

/*
 * Run n transfers to completion, all at once.  A receive reads its header
 * first and checks it before reading the payload.  At most 2 per peer
 * (one each way), so the byte streams stay in order.
 */
static int xfer(struct xop *ops, int n)
{
    struct pollfd stackpf[32];
    unsigned char stackwant[16][HDR];
    size_t npf = (size_t)n + (size_t)W.size;   /* the transfers', then the side channels' */
    struct pollfd *pf = npf <= 32 ? stackpf : malloc(npf * sizeof *pf);
    unsigned char (*want)[HDR] = n <= 16 ? stackwant : malloc((size_t)n * sizeof *want);
    int rc = 0;
    if (!pf || !want) {
        rc = comm_fail("out of memory");
        goto cleanup;
    }
    for (int i = 0; i < n; i++) {
        memcpy(want[i], ops[i].hdr, HDR);
        if (!ops[i].sending) ops[i].done = 0;
    }
    for (;;) {
        int np = 0;
        for (int i = 0; i < n; i++) {
            struct xop *o = &ops[i];
            if (o->done >= HDR + o->len) continue;
            /* receive the header alone, check it, then the payload */
            if (!o->sending && o->done < HDR) {
                size_t saved_len = o->len;
                o->len = 0;
                int k = op_step(o);
                o->len = saved_len;
                if (k < 0) {
                    rc = -1;
                    goto cleanup;
                }
                if (!k) {
                    pf[np++] = (struct pollfd){W.fd[o->peer], POLLIN, 0};
                    continue;
                }
                if (check_header(o, want[i])) {
                    rc = -1;
                    goto cleanup;
                }
            }
            int k = op_step(o);
            if (k < 0) {
                rc = -1;
                goto cleanup;
            }
            if (!k) {
                pf[np++] = (struct pollfd){W.fd[o->peer], (short)(o->sending ? POLLOUT : POLLIN), 0};
            }
        }
        if (!np) break;
        /* while waiting, listen for word of a failure elsewhere in the job */
        int nx = np;
        for (int r = 0; !comm_on_worker && r < (W.rank ? 1 : W.size); r++)
            if (W.ctl[r] >= 0) pf[nx++] = (struct pollfd){W.ctl[r], POLLIN, 0};
        int k = poll(pf, (nfds_t)nx, -1);
        if (k < 0 && errno != EINTR) {
            rc = comm_fail("poll failed: %s", strerror(errno));
            goto cleanup;
        }
        for (int i = np; k > 0 && i < nx; i++)
            if (pf[i].revents && (rc = note_read(ctl_owner(pf[i].fd))) < 0) goto cleanup;
    }
cleanup:
    if (pf != stackpf) free(pf);
    if (want != stackwant) free(want);
    return rc;
}

/* ---- groups and collectives ------------------------------------------- */

static struct tcp_group *G(const mds_comm *c) { return c->impl; }

static struct tcp_group *group_new(uint64_t id, int size)
{
    struct tcp_group *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->id = id;
    g->ranks = calloc((size_t)size, sizeof *g->ranks);
    g->sseq = calloc((size_t)size, sizeof *g->sseq);
    g->rseq = calloc((size_t)size, sizeof *g->rseq);
    if (!g->ranks || !g->sseq || !g->rseq) {
        free(g->ranks); free(g->sseq); free(g->rseq); free(g);
        return NULL;
    }
    return g;
}

static void tcp_release(mds_comm *c)
{
    struct tcp_group *g = G(c);
    if (!g) return;
    free(g->ranks); free(g->sseq); free(g->rseq); free(g);
}

/* The ops of a collective: up to one send and one receive per other member. */
static struct xop *ops_alloc(const mds_comm *c)
{
    struct xop *o = malloc(2 * (size_t)c->size * sizeof *o);
    if (!o) comm_fail("out of memory");
    return o;
}

static int run_ops(struct xop *o, int n)
{
    int rc = xfer(o, n);
    free(o);
    return rc;
}

static int tcp_alltoall(mds_comm *c, const void *s, void *r, size_t bytes)
{
    struct xop *o = ops_alloc(c);
    if (!o) return -1;
    int n = 0;
    for (int i = 0; i < c->size; i++) {
        if (i == c->rank) continue;
        op_init(&o[n++], G(c), i, 0, (unsigned char *)r + (size_t)i * bytes, bytes);
        op_init(&o[n++], G(c), i, 1, (const unsigned char *)s + (size_t)i * bytes, bytes);
    }
    memcpy((unsigned char *)r + (size_t)c->rank * bytes, (const unsigned char *)s + (size_t)c->rank * bytes, bytes);
    return run_ops(o, n);
}

static int tcp_allgather(mds_comm *c, const void *s, void *r, size_t bytes)
{
    unsigned char *mine = (unsigned char *)r + (size_t)c->rank * bytes;
    if (s && bytes) memmove(mine, s, bytes);
    struct xop *o = ops_alloc(c);
    if (!o) return -1;
    int n = 0;
    for (int i = 0; i < c->size; i++) {
        if (i == c->rank) continue;
        op_init(&o[n++], G(c), i, 0, (unsigned char *)r + (size_t)i * bytes, bytes);
        op_init(&o[n++], G(c), i, 1, mine, bytes);
    }
    return run_ops(o, n);
}

/* Every rank's elements, then the maximum in rank order (exact in any order). */
static int tcp_max(mds_comm *c, void *buf, size_t n, enum comm_dtype dt)
{
    size_t es = comm_dtype_size(dt);
    unsigned char *all = comm_scratch(c, (size_t)c->size * n * es);
    if (!all) return comm_fail("out of memory for a %zu-element all-reduce", n);
    if (tcp_allgather(c, buf, all, n * es)) return -1;
    for (int k = 0; k < c->size; k++)
        for (size_t i = 0; i < n; i++) {
            if (dt == COMM_F32) {
                float *d = buf, v = ((const float *)all)[(size_t)k * n + i];
                if (k == 0 || v > d[i]) d[i] = v;
            } else {
                double *d = buf, v = ((const double *)all)[(size_t)k * n + i];
                if (k == 0 || v > d[i]) d[i] = v;
            }
        }
    return 0;
}

static int tcp_broadcast(mds_comm *c, void *buf, size_t bytes, int root)
{
    struct xop *o = ops_alloc(c);
    if (!o) return -1;
    int n = 0;
    if (c->rank == root) {
        for (int i = 0; i < c->size; i++)
            if (i != root) op_init(&o[n++], G(c), i, 1, buf, bytes);
    } else {
        op_init(&o[n++], G(c), root, 0, buf, bytes);
    }
    return run_ops(o, n);
}

static int tcp_barrier(mds_comm *c)
{
    unsigned char none[1];   /* messages of no bytes */
    return tcp_allgather(c, NULL, none, 0);
}

static int tcp_sendrecv(mds_comm *c, const void *sbuf, size_t sbytes, int speer, void *rbuf, size_t rbytes, int rpeer)
{
    struct xop o[2];
    int n = 0;
    if (speer == c->rank || rpeer == c->rank) {   /* to and from itself */
        if (speer != rpeer || sbytes != rbytes) return comm_fail("send/receive to itself of unequal sizes");
        if (rbuf != sbuf) memmove(rbuf, sbuf, sbytes);
        return 0;
    }
    if (rpeer >= 0) op_init(&o[n++], G(c), rpeer, 0, rbuf, rbytes);
    if (speer >= 0) op_init(&o[n++], G(c), speer, 1, sbuf, sbytes);
    return xfer(o, n);
}

/* FNV-1a over the parent's id, its split count and the color: the same on
 * every member of the new group, different from its other groups. */
static uint64_t group_id(uint64_t parent, uint32_t nsplit, int color)
{
    unsigned char b[16];
    le_put64(b, parent);
    le_put32(b + 8, nsplit);
    le_put32(b + 12, (uint32_t)color);
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < 16; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h ? h : 1;   /* 0 is the world */
}

static int tcp_split(mds_comm *c, int color, int key, mds_comm *out)
{
    struct tcp_group *pg = G(c);
    int32_t *ck = malloc(2 * (size_t)c->size * sizeof *ck);
    if (!ck) return comm_fail("out of memory");
    ck[2 * c->rank] = color;
    ck[2 * c->rank + 1] = key;
    if (tcp_allgather(c, NULL, ck, 2 * sizeof *ck)) {
        free(ck);
        return -1;
    }
    int size = 0, rank = 0;
    for (int i = 0; i < c->size; i++) size += ck[2 * i] == color;
    struct tcp_group *g = group_new(group_id(pg->id, pg->nsplit++, color), size);
    if (!g) {
        free(ck);
        return comm_fail("out of memory");
    }
    /* members ordered by key, ties by rank in c (insertion sort: groups are small) */
    int n = 0;
    for (int i = 0; i < c->size; i++) {
        if (ck[2 * i] != color) continue;
        int j = n++;
        while (j > 0 && ck[2 * g->ranks[j - 1] + 1] > ck[2 * i + 1]) {
            g->ranks[j] = g->ranks[j - 1];
            j--;
        }
        g->ranks[j] = i;   /* rank in c for now */
    }
    for (int j = 0; j < size; j++) {
        if (g->ranks[j] == c->rank) rank = j;
        g->ranks[j] = pg->ranks[g->ranks[j]];
    }
    free(ck);
    out->rank = rank;
    out->size = size;
    out->impl = g;
    return 0;
}

/* A farewell on the side channel, so that rank 0 (or every rank, from rank
 * 0) knows the closing connections are no failure. */
static void tcp_finalize(void)
{
    if (W.ctl) note_tell(NOTE_BYE, W.rank, W.rank);
    world_close();
}

/* A rank failing says so before it exits: "failed" for its own reason,
 * "gone" when a worker thread lost a peer (comm_on_worker keeps the side
 * channel out of its hands).  comm_abort, and comm.c's watchdog
 * (comm_tell_failure), from its own thread. */
static void tell_failure(void)
{
    if (!W.ctl || W.told) return;
    int peer = atomic_load(&W.lost_peer);
    if (peer >= 0) note_tell(NOTE_GONE, peer, W.rank);
    else note_tell(NOTE_FAILED, W.rank, W.rank);
}

static void tcp_abort(int code)
{
    (void)code;
    tell_failure();
}

static const char *tcp_name(void) { return W.name; }

static const struct comm_ops tcp_ops = {
    tcp_split, tcp_release, tcp_alltoall, tcp_allgather, tcp_max, tcp_broadcast, tcp_barrier, tcp_sendrecv,
    tcp_finalize, tcp_abort, tcp_name,
};

int comm_tcp_init(int rank, int size, const char *master, int port, double timeout_s, mds_comm **world)
{
    *world = NULL;
    memset(&W, 0, sizeof W);
    W.rank = rank;
    W.size = size;
    snprintf(W.master, sizeof W.master, strchr(master, ':') ? "[%s]:%d" : "%s:%d", master, port);
    snprintf(W.name, sizeof W.name, "TCP (%s)", W.master);
    W.fd = malloc((size_t)size * sizeof *W.fd);
    W.ctl = malloc((size_t)size * sizeof *W.ctl);
    W.host = calloc((size_t)size, sizeof *W.host);
    W.port = calloc((size_t)size, sizeof *W.port);
    if (!W.fd || !W.ctl || !W.host || !W.port) {
        world_close();
        return comm_fail("out of memory");
    }
    for (int r = 0; r < size; r++) W.fd[r] = W.ctl[r] = -1;
    atomic_store(&W.lost_peer, -1);
    double deadline = now() + timeout_s;
    /* listen in the family of the master's address */
    struct addrinfo *res;
    int rc = resolve(master, port, &res);
    if (rc) {
        world_close();
        return comm_fail("rank %d: cannot resolve the master %s: %s", rank, W.master, gai_strerror(rc));
    }
    int fam = res->ai_family;
    freeaddrinfo(res);
    int lport = 0, lfd = listen_on(fam, rank == 0 ? port : 0, &lport);
    if (lfd < 0) {
        world_close();
        if (rank == 0) return comm_fail("rank 0: cannot listen at %s: %s", W.master, strerror(errno));
        return comm_fail("rank %d: cannot open a listening socket: %s", rank, strerror(errno));
    }
    if (rank == 0) {
        W.token = random_token();
        rc = master_gather(lfd, deadline, timeout_s);
        if (!rc) rc = accept_mesh(lfd, deadline, timeout_s);
    } else {
        rc = join(master, port, lfd, lport, deadline, timeout_s);
    }
    close(lfd);
    if (rc) {
        world_close();
        return -1;
    }
    struct tcp_group *g = group_new(0, size);
    if (!g) {
        world_close();
        return comm_fail("out of memory");
    }
    for (int r = 0; r < size; r++) g->ranks[r] = r;
    *world = comm_new(rank, size, &tcp_ops, g);
    comm_peer_check = tcp_peer_check;
    comm_tell_failure = tell_failure;
    if (!*world) {
        free(g->ranks); free(g->sseq); free(g->rseq); free(g);
        world_close();
        return comm_fail("out of memory");
    }
    return 0;
}
