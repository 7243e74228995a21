/*
 * test_comm.c - the communicator of train/comm.h, on however many ranks it is
 * started with (tests/cli/test_parallel.sh runs it alone and under mpirun
 * with 3 and 4 ranks).  Every rank checks its own results; only rank 0
 * prints the "ok"/"FAIL" lines, with the verdict of all ranks.
 *
 * Values are chosen so that the rank order of a sum shows: rank r adds
 * 1e8 * (r == 0) + r * 0.5, whose float sum depends on the order, and the
 * expected value is computed here in rank order.
 *
 * The collectives' tests run twice: on the world as it is, then with host
 * staging (comm_set_staging) through counting memmove copies, which must
 * give the same results and stage every byte; comm_place's decisions are
 * checked over injected device counts.
 */
#include "comm.h"
#include "comm_internal.h"   /* the device transport's table, faked below */
#include "dtype.h"
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static mds_comm *world;
static int rank, size;

/* All ranks agree that every rank passed the last test. */
static int all_ok(int mine)
{
    double v = mine ? 0.0 : 1.0;
    if (comm_allreduce(world, &v, 1, COMM_F64, COMM_SUM) != 0) return 0;
    return v == 0.0;
}

#define TEST(fn) do { \
        int before_ = harness_failed; \
        fn(); \
        int ok_ = all_ok(harness_failed == before_); \
        if (!ok_) harness_tests_failed++; \
        if (rank == 0) { printf("%s %s\n", ok_ ? "ok" : "FAIL", #fn); fflush(stdout); } \
    } while (0)

static float contrib(int r, size_t i) { return (r == 0 ? 1e8f : 0.0f) + 0.5f * (float)r + (float)(i % 7); }

static void test_allreduce_rank_order(void)
{
    /* sizes below, at and above the rank count, not multiples of it */
    size_t sizes[] = {1, 2, 3, 5, 1000, 4099};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        float *x = malloc(n * sizeof *x);
        for (size_t i = 0; i < n; i++) x[i] = contrib(rank, i);
        CHECK(comm_allreduce(world, x, n, COMM_F32, COMM_SUM) == 0);
        for (size_t i = 0; i < n; i++) {
            float want = contrib(0, i);
            for (int r = 1; r < size; r++) want += contrib(r, i);
            if (x[i] != want) { CHECK(x[i] == want); break; }
        }
        free(x);
    }
    double d[3] = {rank + 0.25, -rank, 1.0};
    CHECK(comm_allreduce(world, d, 3, COMM_F64, COMM_SUM) == 0);
    CHECK(d[0] == size * (size - 1) / 2.0 + 0.25 * size && d[1] == -size * (size - 1) / 2.0 && d[2] == size);
}

/* comm_allreduce_start: several all-reduces queued on a group's worker
 * thread while this thread goes on, then comm_wait: the same rank-ordered
 * sums as comm_allreduce; the counters count them; the group can start
 * again after the wait, and comm_free ends the thread. */
static void test_allreduce_start(void)
{
    mds_comm *g = NULL;
    CHECK(comm_split(world, 0, rank, &g) == 0);
    if (!g) return;
    CHECK(comm_async_ok());
    size_t sizes[] = {1, 1000, 4099};
    float *x[3];
    for (int round = 0; round < 2; round++) {
        for (int k = 0; k < 3; k++) {
            x[k] = malloc(sizes[k] * sizeof *x[k]);
            for (size_t i = 0; i < sizes[k]; i++) x[k][i] = contrib(rank, i + (size_t)k);
            CHECK(comm_allreduce_start(g, x[k], sizes[k], COMM_F32, COMM_SUM) == 0);
        }
        CHECK(comm_wait(g) == 0);
        for (int k = 0; k < 3; k++) {
            for (size_t i = 0; i < sizes[k]; i++) {
                float want = contrib(0, i + (size_t)k);
                for (int r = 1; r < size; r++) want += contrib(r, i + (size_t)k);
                if (x[k][i] != want) { CHECK(x[k][i] == want); break; }
            }
            free(x[k]);
        }
    }
    comm_stats st;
    comm_get_stats(g, &st);
    CHECK(st.calls[COMM_K_ALLREDUCE] == (size > 1 ? 6u : 0u));
    CHECK(comm_wait(g) == 0);   /* nothing outstanding */
    comm_free(g);
}

/* comm_reduce_scatter_start queued between all-reduces on the worker, then
 * comm_wait: each rank's chunk is the rank-ordered sum, as
 * comm_reduce_scatter's; the counters count both kinds. */
static void test_reduce_scatter_start(void)
{
    mds_comm *g = NULL;
    CHECK(comm_split(world, 0, rank, &g) == 0);
    if (!g) return;
    size_t chunks[] = {1, 333, 2050};
    float *in[3], *out[3], y[64];
    for (int k = 0; k < 3; k++) {
        size_t n = chunks[k] * (size_t)size;
        in[k] = malloc(n * sizeof *in[k]);
        out[k] = malloc(chunks[k] * sizeof *out[k]);
        for (size_t i = 0; i < n; i++) in[k][i] = contrib(rank, i + 7 * (size_t)k);
        CHECK(comm_reduce_scatter_start(g, out[k], in[k], chunks[k]) == 0);
        for (int i = 0; i < 64; i++) y[i] = contrib(rank, (size_t)i);
        if (k == 1) CHECK(comm_allreduce_start(g, y, 64, COMM_F32, COMM_SUM) == 0);
    }
    CHECK(comm_wait(g) == 0);
    for (int k = 0; k < 3; k++) {
        for (size_t i = 0; i < chunks[k]; i++) {
            size_t at = (size_t)rank * chunks[k] + i + 7 * (size_t)k;
            float want = contrib(0, at);
            for (int r = 1; r < size; r++) want += contrib(r, at);
            if (out[k][i] != want) { CHECK(out[k][i] == want); break; }
        }
        free(in[k]);
        free(out[k]);
    }
    float want = contrib(0, 5);
    for (int r = 1; r < size; r++) want += contrib(r, 5);
    CHECK(y[5] == want);
    comm_stats st;
    comm_get_stats(g, &st);
    CHECK(st.calls[COMM_K_REDUCE_SCATTER] == (size > 1 ? 3u : 0u) && st.calls[COMM_K_ALLREDUCE] == (size > 1 ? 1u : 0u));
    comm_free(g);
}

/* comm_allgather_start, several, and comm_wait_some: after waiting for the
 * first n, those n are complete (every rank's block in rank order), whatever
 * the rest are doing; comm_wait ends the round. */
static void test_allgather_start(void)
{
    mds_comm *g = NULL;
    CHECK(comm_split(world, 0, rank, &g) == 0);
    if (!g) return;
    size_t chunks[] = {3, 1000, 17};
    float *out[3];
    for (int k = 0; k < 3; k++) {
        out[k] = malloc(chunks[k] * (size_t)size * sizeof *out[k]);
        float *mine = out[k] + (size_t)rank * chunks[k];
        for (size_t i = 0; i < chunks[k]; i++) mine[i] = contrib(rank, i + (size_t)k);
        CHECK(comm_allgather_start(g, out[k], mine, chunks[k]) == 0);   /* in place */
    }
    for (int k = 0; k < 3; k++) {
        CHECK(comm_wait_some(g, (size_t)k + 1) == 0);
        int bad = 0;
        for (int r = 0; r < size; r++)
            for (size_t i = 0; i < chunks[k]; i++)
                bad += out[k][(size_t)r * chunks[k] + i] != contrib(r, i + (size_t)k);
        CHECK(bad == 0);
    }
    CHECK(comm_wait(g) == 0);
    for (int k = 0; k < 3; k++) free(out[k]);
    comm_stats st;
    comm_get_stats(g, &st);
    CHECK(st.calls[COMM_K_ALLGATHER] == (size > 1 ? 3u : 0u));
    comm_free(g);
}

static void test_allreduce_max(void)
{
    float x[4] = {(float)rank, -(float)rank, rank == size - 1 ? INFINITY : 0.0f, 3.0f};
    CHECK(comm_allreduce(world, x, 4, COMM_F32, COMM_MAX) == 0);
    CHECK(x[0] == size - 1 && x[1] == 0 && isinf(x[2]) && x[3] == 3.0f);
}

/* 16-bit sums: each rank's value converted to float, added in rank order,
 * rounded once; MAX exact. */
static uint16_t to16(int bf, float x) { return bf ? mds_f32_to_bf16(x) : mds_f32_to_f16(x); }
static float from16(int bf, uint16_t h) { return bf ? mds_bf16_to_f32(h) : mds_f16_to_f32(h); }
static float value16(int r, size_t i) { return (r == 0 ? 1000.0f : 0.0f) + 0.3f * (float)r + (float)(i % 5) * 0.01f; }

static void test_allreduce_half(void)
{
    for (int bf = 0; bf < 2; bf++) {
        size_t n = 1001;
        uint16_t *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
        for (size_t i = 0; i < n; i++)
            x[i] = y[i] = to16(bf, value16(rank, i));
        CHECK(comm_allreduce(world, x, n, bf ? COMM_BF16 : COMM_F16, COMM_SUM) == 0);
        for (size_t i = 0; i < n; i++) {
            float acc = from16(bf, to16(bf, value16(0, i)));
            for (int r = 1; r < size; r++)
                acc += from16(bf, to16(bf, value16(r, i)));
            if (x[i] != to16(bf, acc)) { CHECK(x[i] == to16(bf, acc)); break; }
        }
        CHECK(comm_allreduce(world, y, n, bf ? COMM_BF16 : COMM_F16, COMM_MAX) == 0);
        for (size_t i = 0; i < n; i++) {
            uint16_t want = to16(bf, value16(0, i));
            for (int r = 1; r < size; r++)
                if (from16(bf, to16(bf, value16(r, i))) > from16(bf, want)) want = to16(bf, value16(r, i));
            if (y[i] != want) { CHECK(y[i] == want); break; }
        }
        free(x);
        free(y);
    }
}

static void test_reduce_scatter_allgather(void)
{
    size_t chunk = 37;
    float *in = malloc((size_t)size * chunk * sizeof *in), *out = malloc(chunk * sizeof *out);
    for (size_t i = 0; i < (size_t)size * chunk; i++) in[i] = contrib(rank, i);
    CHECK(comm_reduce_scatter(world, out, in, chunk) == 0);
    for (size_t i = 0; i < chunk; i++) {
        size_t g = (size_t)rank * chunk + i;
        float want = contrib(0, g);
        for (int r = 1; r < size; r++) want += contrib(r, g);
        if (out[i] != want) { CHECK(out[i] == want); break; }
    }
    /* all-gather, out of place and in place */
    float *all = malloc((size_t)size * chunk * sizeof *all);
    for (size_t i = 0; i < chunk; i++) out[i] = (float)(rank * 1000 + (int)i);
    CHECK(comm_allgather(world, all, out, chunk) == 0);
    for (int r = 0; r < size; r++)
        for (size_t i = 0; i < chunk; i++) CHECK(all[(size_t)r * chunk + i] == (float)(r * 1000 + (int)i));
    memset(all, 0, (size_t)size * chunk * sizeof *all);
    for (size_t i = 0; i < chunk; i++) all[(size_t)rank * chunk + i] = (float)(rank + 7);
    CHECK(comm_allgather(world, all, all + (size_t)rank * chunk, chunk) == 0);
    for (int r = 0; r < size; r++) CHECK(all[(size_t)r * chunk] == (float)(r + 7));
    free(in); free(out); free(all);
}

static void test_broadcast_barrier(void)
{
    char buf[16];
    memset(buf, rank == size - 1 ? 'z' : 'a', sizeof buf);
    CHECK(comm_broadcast(world, buf, sizeof buf, size - 1) == 0);
    CHECK(buf[0] == 'z' && buf[15] == 'z');
    CHECK(comm_barrier(world) == 0);
}

/* A ring: everyone sends right and receives from the left at once (no
 * deadlock), then the reverse; messages between a pair keep their order. */
static void test_sendrecv_ring(void)
{
    if (size == 1) {
        CHECK(comm_sendrecv(world, NULL, 0, -1, NULL, 0, -1) == 0);
        return;
    }
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    size_t n = 300000;   /* larger than any eager limit */
    int *s = malloc(n * sizeof *s), *r = malloc(n * sizeof *r);
    for (int round = 0; round < 2; round++) {
        for (size_t i = 0; i < n; i++) s[i] = rank * 10 + round + (int)(i & 1023);
        CHECK(comm_sendrecv(world, s, n * sizeof *s, right, r, n * sizeof *r, left) == 0);
        CHECK(r[0] == left * 10 + round && r[n - 1] == left * 10 + round + (int)((n - 1) & 1023));
    }
    CHECK(comm_sendrecv(world, s, sizeof *s, left, r, sizeof *r, right) == 0);
    CHECK(r[0] == right * 10 + 1);
    free(s); free(r);
}

/* Groups of even and odd ranks: sums stay inside the group; counters count. */
static void test_split_and_stats(void)
{
    mds_comm *g = NULL;
    CHECK(comm_split(world, rank % 2, -rank, &g) == 0);   /* key -rank: reversed order */
    if (!g) return;
    int gs = comm_size(g), gr = comm_rank(g);
    CHECK(gs == (size + 1 - rank % 2) / 2);
    CHECK(gr == gs - 1 - rank / 2);
    float x = (float)rank;
    comm_reset_stats(g);
    CHECK(comm_allreduce(g, &x, 1, COMM_F32, COMM_SUM) == 0);
    float want = 0;
    for (int r = rank % 2; r < size; r += 2) want += (float)r;
    CHECK(x == want);
    comm_stats st;
    comm_get_stats(g, &st);
    CHECK(st.calls[COMM_K_ALLREDUCE] == (gs > 1 ? 1u : 0u));
    CHECK(st.bytes_sent[COMM_K_ALLREDUCE] == (uint64_t)(gs > 1 ? 2 * (gs - 1) * 4 : 0));
    comm_free(g);
}

/* A fake device transport: "device" buffers are fake_buf; nothing moves. */
static float fake_buf[16];
static int fake_calls;
static int fake_is_device(const void *p)
{
    return (const float *)p >= fake_buf && (const float *)p < fake_buf + 16;
}
static int fake_allreduce(mds_comm *c, void *b, size_t n, enum comm_dtype dt, enum comm_op op)
{
    (void)c; (void)b; (void)n; (void)dt; (void)op;
    return fake_calls++, 0;
}
static int fake_rs(mds_comm *c, float *o, const float *i, size_t k) { (void)c; (void)o; (void)i; (void)k; return fake_calls++, 0; }
static int fake_bcast(mds_comm *c, void *b, size_t n, int r) { (void)c; (void)b; (void)n; (void)r; return fake_calls++, 0; }
static int fake_p2p(mds_comm *c, const void *s, size_t sn, int sp, void *r, size_t rn, int rp)
{
    (void)c; (void)s; (void)sn; (void)sp; (void)r; (void)rn; (void)rp;
    return fake_calls++, 0;
}
static int fake_barrier(mds_comm *c) { (void)c; return fake_calls++, 0; }

/*
 * comm.c's dispatch to a device transport (the NCCL one's path, which no
 * machine here can run): device buffers go to its table and are counted
 * with the host formulas (bench/comm_plan.py's); host buffers on the same
 * communicator still take the rank-ordered host path.
 */
static void test_device_dispatch(void)
{
    static const struct comm_dev_ops fake = {fake_is_device, fake_allreduce, fake_rs, fake_rs, fake_bcast,
                                             fake_p2p, fake_barrier, NULL, NULL, NULL, NULL, NULL};
    mds_comm *g = NULL;
    CHECK(comm_split(world, 0, rank, &g) == 0);
    if (!g) return;
    g->dev = &fake;
    fake_calls = 0;
    int p = size, peer = (rank + 1) % size;
    double host = 1.0;
    CHECK(comm_allreduce(g, fake_buf, 5, COMM_F32, COMM_SUM) == 0);
    CHECK(comm_allreduce(g, fake_buf, 3, COMM_BF16, COMM_MAX) == 0);
    CHECK(comm_allreduce(g, &host, 1, COMM_F64, COMM_SUM) == 0);
    CHECK(host == (double)size);
    CHECK(comm_reduce_scatter(g, fake_buf, fake_buf, 2) == 0);
    CHECK(comm_allgather(g, fake_buf, fake_buf + 2 * rank, 2) == 0);
    CHECK(comm_broadcast(g, fake_buf, 12, 0) == 0);
    CHECK(comm_sendrecv(g, fake_buf, 8, peer, fake_buf + 4, 8, peer) == 0);
    CHECK(comm_barrier(g) == 0);
    /* a device transport runs even in a group of one (NCCL's world of one) */
    CHECK(fake_calls == 7);
    comm_stats st;
    comm_get_stats(g, &st);
    uint64_t ar = p > 1 ? (uint64_t)(2 * (p - 1) * ((5 + p - 1) / p) * 4 + 2 * (p - 1) * ((3 + p - 1) / p) * 2 +
                                     2 * (p - 1) * 8) : 0;
    CHECK(st.bytes_sent[COMM_K_ALLREDUCE] == ar);
    CHECK(st.calls[COMM_K_ALLREDUCE] == (p > 1 ? 3u : 0u));
    CHECK(st.bytes_sent[COMM_K_REDUCE_SCATTER] == (uint64_t)((p - 1) * 2 * 4));
    CHECK(st.bytes_sent[COMM_K_ALLGATHER] == (uint64_t)((p - 1) * 2 * 4));
    CHECK(st.bytes_sent[COMM_K_BROADCAST] == (p > 1 && rank == 0 ? 12u : 0u));
    CHECK(st.bytes_sent[COMM_K_P2P] == (p > 1 ? 8u : 0u));
    g->dev = NULL;
    comm_free(g);
}

/* Host staging's copy functions: memmove, counted; sync can be made to fail. */
static size_t staged_copies, staged_bytes;
static int sync_fails;
static void count_copy(void *d, const void *s, size_t n)
{
    staged_copies++;
    staged_bytes += n;
    memmove(d, s, n);
}
static int fake_sync(void) { return sync_fails ? -1 : 0; }
static const char *fake_error(void) { return "the fake device failed"; }
/* the staging area's allocator (the CUDA backend's is page-locked): counted */
static int host_allocs, host_frees;
static int fake_host_alloc(void **p, size_t n)
{
    host_allocs++;
    *p = malloc(n);
    return *p ? 0 : -1;
}
static void fake_host_free(void *p)
{
    if (p) host_frees++;
    free(p);
}
static const comm_copy_ops counting = {count_copy, fake_sync, fake_error, fake_host_alloc, fake_host_free};

/* Staging copies both ways, counts them, and a device failure is the
 * collective's failure (the other ranks are not left waiting: every rank
 * fails its sync here). */
static void test_staging_counts(void)
{
    mds_comm *g = NULL;
    CHECK(comm_split(world, 0, rank, &g) == 0);
    if (!g) return;
    CHECK(world->stage == NULL || g->stage == world->stage);   /* inherited */
    comm_set_staging(g, &counting);
    staged_copies = staged_bytes = 0;
    int allocs0 = host_allocs, frees0 = host_frees;
    float x[10];
    for (int i = 0; i < 10; i++) x[i] = (float)rank;
    CHECK(comm_allreduce(g, x, 10, COMM_F32, COMM_SUM) == 0);
    CHECK(x[9] == (float)(size * (size - 1) / 2));
    CHECK(staged_copies == (size > 1 ? 2u : 0u) && staged_bytes == (size > 1 ? 80u : 0u));
    comm_stats st;
    comm_get_stats(g, &st);
    CHECK(st.bytes_staged == staged_bytes);
    sync_fails = 1;
    if (size > 1) {
        CHECK(comm_allreduce(g, x, 10, COMM_F32, COMM_SUM) == -1);
        CHECK(strstr(comm_error(), "the fake device failed") != NULL);
    }
    else
        CHECK(comm_sendrecv(g, x, 4, 0, x + 1, 4, 0) == -1);   /* to itself, staged too */
    sync_fails = 0;
    /* the area came from the staging ops' allocator and goes back to it */
    CHECK(host_allocs - allocs0 == 1 && host_frees == frees0);   /* grown once, for 40 bytes or 4 */
    comm_free(g);
    CHECK(host_frees - frees0 == host_allocs - allocs0);
}

/* comm_place over injected GPU counts (no GPU needed). */
static void test_place(void)
{
    char why[512];
    comm_place_out o;
    comm_place_in in = {.gpu = 1, .want = COMM_WANT_AUTO, .world_size = 8, .local_rank = 3, .local_size = 8,
                        .ngpus = 8, .have_nccl = 1, .host = "node1"};
    CHECK(comm_place(&in, &o, why, sizeof why) == 0 && o.route == COMM_ROUTE_NCCL && o.device == 3 && !o.shared);
    in.ngpus = 4;   /* more local ranks than GPUs: refused, naming the way out */
    CHECK(comm_place(&in, &o, why, sizeof why) == -1);
    CHECK(strstr(why, "8 ranks on host 'node1' (local rank 3) but 4 GPUs") && strstr(why, "--device-comm host-staged"));
    in.want = COMM_WANT_NCCL;
    CHECK(comm_place(&in, &o, why, sizeof why) == -1);
    in.want = COMM_WANT_STAGED;   /* shared: local rank mod GPUs */
    CHECK(comm_place(&in, &o, why, sizeof why) == 0 && o.route == COMM_ROUTE_STAGED && o.device == 3 && o.shared);
    in.local_rank = 6;
    CHECK(comm_place(&in, &o, why, sizeof why) == 0 && o.device == 2);
    in.ngpus = 1;   /* TP2xPP2 on one GPU */
    CHECK(comm_place(&in, &o, why, sizeof why) == 0 && o.device == 0 && o.shared);
    in.want = COMM_WANT_AUTO;   /* a launcher showing each task one GPU */
    in.per_task = 1;
    CHECK(comm_place(&in, &o, why, sizeof why) == 0 && o.route == COMM_ROUTE_NCCL && o.device == 0);
    in.per_task = 0;
    in.have_nccl = 0;
    in.ngpus = 8;
    CHECK(comm_place(&in, &o, why, sizeof why) == -1 && strstr(why, "built without it"));
    in.world_size = 1;   /* one process: as before, no NCCL needed */
    in.local_size = 1;
    in.local_rank = 0;
    CHECK(comm_place(&in, &o, why, sizeof why) == 0 && o.route == COMM_ROUTE_HOST && o.device == 0);
    in.have_nccl = 1;
    in.want = COMM_WANT_NCCL;   /* NCCL's world of one */
    CHECK(comm_place(&in, &o, why, sizeof why) == 0 && o.route == COMM_ROUTE_NCCL);
    in.ngpus = 0;
    CHECK(comm_place(&in, &o, why, sizeof why) == -1 && strstr(why, "no CUDA device"));
    /* the CPU backend: host transports, staged through memcpy, or refused NCCL */
    in.gpu = 0;
    CHECK(comm_place(&in, &o, why, sizeof why) == -1 && strstr(why, "--device-comm nccl needs --device cuda"));
    in.want = COMM_WANT_STAGED;
    CHECK(comm_place(&in, &o, why, sizeof why) == 0 && o.route == COMM_ROUTE_STAGED && o.device == -1);
    in.want = COMM_WANT_AUTO;
    CHECK(comm_place(&in, &o, why, sizeof why) == 0 && o.route == COMM_ROUTE_HOST && o.device == -1);
}

/* comm_local: every rank of this test runs on one host, in rank order
 * unless a launcher said otherwise. */
static void test_local(void)
{
    int lr = -1, ls = -1;
    const char *src = NULL;
    char host[64];
    CHECK(comm_local(world, &lr, &ls, &src, host, sizeof host) == 0);
    CHECK(ls == size && host[0] != 0);
    if (src && strcmp(src, "host order") == 0) CHECK(lr == rank);
}

/*
 * comm_nccl_init on every rank returns on every rank.  Built without NCCL:
 * refused with that reason.  Built with it but no GPU (the project's
 * machines): every rank fails with the reason, none waits in NCCL.  With a
 * GPU per rank: the NCCL world's host buffers go through the host
 * transport, rank-ordered (device buffers are make test-gpu's business).
 */
static void test_nccl_init(void)
{
    mds_comm *w = NULL;
    int rc = comm_nccl_init(world, &w);
#ifdef MDS_HAVE_NCCL
    if (rc != 0) {
        const char *e = comm_error();
        CHECK(w == NULL);
        CHECK(strstr(e, "no CUDA device") || strstr(e, " GPU") || strstr(e, "NCCL"));
        if (rank == 0) printf("# comm_nccl_init: %s\n", e);
        return;
    }
    CHECK(comm_size(w) == size && comm_rank(w) == rank);
    double d = rank + 0.5;
    CHECK(comm_allreduce(w, &d, 1, COMM_F64, COMM_SUM) == 0);
    CHECK(d == size * (size - 1) / 2.0 + 0.5 * size);
    CHECK(comm_barrier(w) == 0);
    comm_free(w);
#else
    CHECK(rc == -1 && w == NULL);
    CHECK(strstr(comm_error(), "built without NCCL") != NULL);
#endif
}

/* The tests of the collectives themselves (run plain, then host-staged). */
static void collectives(void)
{
    TEST(test_allreduce_rank_order);
    TEST(test_allreduce_start);
    TEST(test_reduce_scatter_start);
    TEST(test_allgather_start);
    TEST(test_allreduce_max);
    TEST(test_allreduce_half);
    TEST(test_reduce_scatter_allgather);
    TEST(test_broadcast_barrier);
    TEST(test_sendrecv_ring);
    TEST(test_split_and_stats);
}

int main(int argc, char **argv)
{
    if (comm_init(&argc, &argv, &world) != 0) {
        fprintf(stderr, "test_comm: %s\n", comm_error());
        return 1;
    }
    rank = comm_rank(world);
    size = comm_size(world);
    if (rank == 0) printf("# %d ranks, %s\n", size, comm_backend());
    collectives();
    TEST(test_device_dispatch);
    TEST(test_nccl_init);
    TEST(test_place);
    TEST(test_local);
    TEST(test_staging_counts);
    /* again, every buffer staged through the copies */
    comm_set_staging(world, &counting);
    staged_bytes = 0;
    collectives();
    if (rank == 0) printf("# host-staged: %zu bytes copied\n", staged_bytes);
    CHECK(size == 1 || staged_bytes > 0);
    TEST(test_staging_counts);
    comm_set_staging(world, NULL);
    int rc = harness_report();
    comm_free(world);
    comm_finalize();
    return rc;
}
