/*
 * pyemu.c - the numpy and Python behaviour the training-data pipeline has to
 * reproduce bit for bit: numpy's legacy RandomState (MT19937, its bounded
 * integers and shuffle), numpy's Generator as default_rng(seed) builds it
 * (SeedSequence, PCG64, Lemire's bounded integers), numpy.sum's pairwise
 * summation and Megatron's normalize() on top of it, Python's round(), and
 * the pieces of json.dumps the cache descriptions need (string escaping,
 * repr(float)) on a growing string buffer.
 *
 * What it deliberately does not do: anything Megatron decides (gptdata.c,
 * gptcache.c), any other numpy distribution, dtype or bit generator, or
 * general JSON.  It never prints and nothing here fails, except that a
 * ds_sbuf records running out of memory for its owner to report.
 */
#include "dataset_internal.h"

#include <fenv.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* numpy legacy RandomState                                                 */
/* ------------------------------------------------------------------------ */

#if defined(__GNUC__)
#define PREFETCH_W(addr) __builtin_prefetch(addr, 1)
#else
#define PREFETCH_W(addr) ((void)0)
#endif

#define MT_N 624
#define MT_M 397

void ds_random_seed(ds_random_state *rs, uint32_t seed)
{
    rs->key[0] = seed;
    for (int i = 1; i < MT_N; i++)
        rs->key[i] = 1812433253u * (rs->key[i - 1] ^ (rs->key[i - 1] >> 30)) + (uint32_t)i;
    rs->pos = MT_N;
}

static void mt_generate(ds_random_state *rs)
{
    uint32_t *k = rs->key;
    int i;
    for (i = 0; i < MT_N - MT_M; i++) {
        uint32_t y = (k[i] & 0x80000000u) | (k[i + 1] & 0x7fffffffu);
        k[i] = k[i + MT_M] ^ (y >> 1) ^ (-(y & 1u) & 0x9908b0dfu);
    }
    for (; i < MT_N - 1; i++) {
        uint32_t y = (k[i] & 0x80000000u) | (k[i + 1] & 0x7fffffffu);
        k[i] = k[i + (MT_M - MT_N)] ^ (y >> 1) ^ (-(y & 1u) & 0x9908b0dfu);
    }
    uint32_t y = (k[MT_N - 1] & 0x80000000u) | (k[0] & 0x7fffffffu);
    k[MT_N - 1] = k[MT_M - 1] ^ (y >> 1) ^ (-(y & 1u) & 0x9908b0dfu);
    rs->pos = 0;
}

/* The draws are inlined into the shuffle loops below (a call per draw
   was a tenth of the index build); the exported functions wrap them. */
static inline uint32_t mt_next32(ds_random_state *rs)
{
    if (rs->pos >= MT_N)
        mt_generate(rs);
    uint32_t y = rs->key[rs->pos++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

/* numpy's mask: the smallest 2^k - 1 >= max (max > 0) */
static inline uint64_t interval_mask(uint64_t max)
{
#if defined(__GNUC__)
    return UINT64_MAX >> __builtin_clzll(max);
#else
    uint64_t mask = max;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    mask |= mask >> 32;
    return mask;
#endif
}

static inline uint64_t mt_interval(ds_random_state *rs, uint64_t max)
{
    if (max == 0)
        return 0;
    uint64_t mask = interval_mask(max), v;
    if (max <= 0xffffffffu) {
        while ((v = mt_next32(rs) & mask) > max)
            ;
    } else {
        do {
            uint64_t hi = mt_next32(rs);
            v = ((hi << 32) | mt_next32(rs)) & mask;
        } while (v > max);
    }
    return v;
}

uint32_t ds_random_next32(ds_random_state *rs)
{
    return mt_next32(rs);
}

uint64_t ds_random_interval(ds_random_state *rs, uint64_t max)
{
    return mt_interval(rs, max);
}

/*
 * The swap partners j depend only on the generator and i, never on the
 * array, so they are drawn SHUFFLE_AHEAD steps before their swap and x[j]
 * is prefetched: on arrays larger than the cache the random accesses then
 * overlap instead of stalling one after another.  Same draws, same order,
 * same permutation.
 */
#define SHUFFLE_AHEAD 32

void ds_random_shuffle(ds_random_state *rs, void *x, size_t n, size_t elsize)
{
    if (n < 2)
        return;
    if (elsize == 4) {
        uint32_t *a = x;
        size_t ring[SHUFFLE_AHEAD];
        size_t next = n - 1;           /* the next i to draw a partner for */
        for (size_t k = 0; k < SHUFFLE_AHEAD && next > 0; k++, next--) {
            ring[next % SHUFFLE_AHEAD] = (size_t)mt_interval(rs, next);
            PREFETCH_W(&a[ring[next % SHUFFLE_AHEAD]]);
        }
        for (size_t i = n - 1; i > 0; i--) {
            size_t j = ring[i % SHUFFLE_AHEAD];
            if (next > 0) {
                size_t jj = (size_t)mt_interval(rs, next);
                ring[next % SHUFFLE_AHEAD] = jj;
                PREFETCH_W(&a[jj]);
                next--;
            }
            uint32_t t = a[i];
            a[i] = a[j];
            a[j] = t;
        }
    } else {
        uint64_t *a = x;
        for (size_t i = n - 1; i > 0; i--) {
            size_t j = (size_t)mt_interval(rs, i);
            uint64_t t = a[i];
            a[i] = a[j];
            a[j] = t;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* numpy Generator: default_rng(seed) = PCG64 seeded through SeedSequence   */
/* ------------------------------------------------------------------------ */

/*
 * Only what MockGPTDataset needs: numpy.random.default_rng(seed).integers(
 * low, high, dtype=int32).  SeedSequence turns the seed's 32-bit words into
 * a pool of four words (hashmix/mix), and generate_state(4, uint64) gives
 * PCG64's 128-bit initial state and stream.  The 128-bit arithmetic is done
 * on pairs of 64-bit words so that no compiler extension is needed.
 */
#define SS_INIT_A 0x43b0d7e5u
#define SS_MULT_A 0x931e8875u
#define SS_INIT_B 0x8b51f9ddu
#define SS_MULT_B 0x58f38dedu
#define SS_MIX_MULT_L 0xca01f9ddu
#define SS_MIX_MULT_R 0x4973f715u
#define SS_POOL 4

static uint32_t ss_hashmix(uint32_t value, uint32_t *hash_const)
{
    value ^= *hash_const;
    *hash_const *= SS_MULT_A;
    value *= *hash_const;
    value ^= value >> 16;
    return value;
}

static uint32_t ss_mix(uint32_t x, uint32_t y)
{
    uint32_t r = SS_MIX_MULT_L * x - SS_MIX_MULT_R * y;
    r ^= r >> 16;
    return r;
}

/* (hi, lo) = a × b */
static void mul_64x64(uint64_t a, uint64_t b, uint64_t *hi, uint64_t *lo)
{
    uint64_t a0 = a & 0xffffffffu, a1 = a >> 32, b0 = b & 0xffffffffu, b1 = b >> 32;
    uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    uint64_t mid = (p00 >> 32) + (p01 & 0xffffffffu) + (p10 & 0xffffffffu);
    *lo = (mid << 32) | (p00 & 0xffffffffu);
    *hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
}

/* state = state × PCG_DEFAULT_MULTIPLIER_128 + inc (mod 2^128) */
static void pcg64_step(ds_pcg64 *g)
{
    const uint64_t mhi = 2549297995355413924ull, mlo = 4865540595714422341ull;
    uint64_t hi, lo;
    mul_64x64(g->state[1], mlo, &hi, &lo);
    hi += g->state[0] * mlo + g->state[1] * mhi;
    uint64_t lo2 = lo + g->inc[1];
    hi += g->inc[0] + (lo2 < lo);
    g->state[0] = hi;
    g->state[1] = lo2;
}

static void pcg64_add(uint64_t a[2], const uint64_t b[2])
{
    uint64_t lo = a[1] + b[1];
    a[0] += b[0] + (lo < a[1]);
    a[1] = lo;
}

void ds_pcg64_seed(ds_pcg64 *g, uint64_t seed)
{
    /* SeedSequence(seed): entropy = the seed's 32-bit words, low first
       ([0] for 0), zero-padded to the pool size, then mix_entropy */
    uint32_t entropy[SS_POOL] = {(uint32_t)seed, (uint32_t)(seed >> 32), 0, 0};
    uint32_t pool[SS_POOL], hc = SS_INIT_A;
    for (int i = 0; i < SS_POOL; i++)
        pool[i] = ss_hashmix(entropy[i], &hc);
    for (int s = 0; s < SS_POOL; s++)
        for (int d = 0; d < SS_POOL; d++)
            if (s != d)
                pool[d] = ss_mix(pool[d], ss_hashmix(pool[s], &hc));
    /* generate_state(4, uint64): eight words, paired little-endian */
    uint32_t w[8];
    hc = SS_INIT_B;
    for (int i = 0; i < 8; i++) {
        uint32_t v = pool[i % SS_POOL];
        v ^= hc;
        hc *= SS_MULT_B;
        v *= hc;
        v ^= v >> 16;
        w[i] = v;
    }
    uint64_t v[4];
    for (int i = 0; i < 4; i++)
        v[i] = (uint64_t)w[2 * i] | (uint64_t)w[2 * i + 1] << 32;
    /* pcg64_set_seed: initstate = (v0 << 64) | v1, initseq = (v2 << 64) |
       v3; pcg_setseq_128_srandom_r */
    g->state[0] = g->state[1] = 0;
    g->inc[0] = v[2] << 1 | v[3] >> 63;
    g->inc[1] = v[3] << 1 | 1u;
    pcg64_step(g);
    uint64_t init[2] = {v[0], v[1]};
    pcg64_add(g->state, init);
    pcg64_step(g);
    g->has32 = 0;
    g->buf32 = 0;
}

/* XSL-RR 128/64: step, then output from the new state. */
uint64_t ds_pcg64_next64(ds_pcg64 *g)
{
    pcg64_step(g);
    uint64_t x = g->state[0] ^ g->state[1];
    unsigned rot = (unsigned)(g->state[0] >> 58);
    return (x >> rot) | (x << ((64 - rot) & 63));
}

/* numpy's pcg64_next32: the low half of a 64-bit draw, then its high half. */
uint32_t ds_pcg64_next32(ds_pcg64 *g)
{
    if (g->has32) {
        g->has32 = 0;
        return g->buf32;
    }
    uint64_t x = ds_pcg64_next64(g);
    g->has32 = 1;
    g->buf32 = (uint32_t)(x >> 32);
    return (uint32_t)x;
}

/* Generator.integers(low, high, n, dtype=int32): random_bounded_uint32_fill
   with off = low, rng = high - 1 - low, Lemire's multiply-and-reject on
   32-bit draws (buffered_bounded_lemire_uint32). */
void ds_pcg64_integers_i32(ds_pcg64 *g, int32_t *out, size_t n, int32_t low, int32_t high)
{
    uint32_t rng = (uint32_t)((int64_t)high - 1 - low), off = (uint32_t)low;
    for (size_t i = 0; i < n; i++) {
        uint32_t v;
        if (rng == 0) {
            v = 0;
        } else if (rng == 0xffffffffu) {
            v = ds_pcg64_next32(g);
        } else {
            uint32_t excl = rng + 1;
            uint64_t m = (uint64_t)ds_pcg64_next32(g) * excl;
            uint32_t left = (uint32_t)m;
            if (left < excl) {
                uint32_t threshold = (0xffffffffu - rng) % excl;
                while (left < threshold) {
                    m = (uint64_t)ds_pcg64_next32(g) * excl;
                    left = (uint32_t)m;
                }
            }
            v = (uint32_t)(m >> 32);
        }
        out[i] = (int32_t)(off + v);
    }
}

/* ------------------------------------------------------------------------ */
/* numpy.sum, normalize, round                                              */
/* ------------------------------------------------------------------------ */

/* numpy's pairwise_sum for float64: a plain sum below 8 elements, eight
   interleaved accumulators up to 128, and above that the two halves (cut
   at a multiple of 8) summed recursively. */
static double pairwise_sum(const double *a, size_t n)
{
    if (n < 8) {
        double r = -0.0;
        for (size_t i = 0; i < n; i++)
            r += a[i];
        return r;
    }
    if (n <= 128) {
        double r[8];
        for (int k = 0; k < 8; k++)
            r[k] = a[k];
        size_t i;
        for (i = 8; i < n - n % 8; i += 8)
            for (int k = 0; k < 8; k++)
                r[k] += a[i + k];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++)
            res += a[i];
        return res;
    }
    size_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

double ds_numpy_sum(const double *a, size_t n)
{
    double acc = 0.0;
    for (size_t i = 0; i < n; i += 8192)
        acc += pairwise_sum(a + i, n - i < 8192 ? n - i : 8192);
    return acc;
}

int ds_normalize_weights(double *w, size_t n)
{
    if (!w || n == 0)
        return DS_ERR_ARG;
    for (size_t i = 0; i < n; i++)
        if (!(w[i] > 0) || !isfinite(w[i]))
            return DS_ERR_ARG;
    double s = ds_numpy_sum(w, n);
    if (!isfinite(s))
        return DS_ERR_ARG;
    for (size_t i = 0; i < n; i++)
        w[i] /= s;
    return 0;
}

/* Python's round() of a double to the nearest integer, ties to even. */
double ds_round_half_even(double x)
{
    int mode = fegetround();
    fesetround(FE_TONEAREST);
    double r = nearbyint(x);
    fesetround(mode);
    return r;
}


/* ------------------------------------------------------------------------ */
/* json.dumps pieces: a growing string, JSON strings, repr(float)           */
/* ------------------------------------------------------------------------ */

void ds_sb_printf(ds_sbuf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = 1;
            return;
        }
        if (b->s && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 1024;
        while (cap < b->n + (size_t)k + 1)
            cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

void ds_sb_indent(ds_sbuf *b, int level)
{
    ds_sb_printf(b, "\n%*s", 4 * level, "");
}

/* A JSON string as json.dumps writes it with ensure_ascii: non-ASCII as
   \uXXXX (surrogate pairs above the BMP), invalid UTF-8 bytes as if they
   were Latin-1 (Python would hold them as surrogateescape, \udcXX). */
void ds_sb_json_string(ds_sbuf *b, const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    ds_sb_printf(b, "\"");
    while (*s) {
        unsigned c = *s;
        if (c == '"' || c == '\\') {
            ds_sb_printf(b, "\\%c", c);
            s++;
        } else if (c == '\n') {
            ds_sb_printf(b, "\\n");
            s++;
        } else if (c == '\r') {
            ds_sb_printf(b, "\\r");
            s++;
        } else if (c == '\t') {
            ds_sb_printf(b, "\\t");
            s++;
        } else if (c == '\b') {
            ds_sb_printf(b, "\\b");
            s++;
        } else if (c == '\f') {
            ds_sb_printf(b, "\\f");
            s++;
        } else if (c < 0x20 || c == 0x7f) {
            ds_sb_printf(b, c == 0x7f ? "%c" : "\\u%04x", c);
            s++;
        } else if (c < 0x80) {
            ds_sb_printf(b, "%c", c);
            s++;
        } else {
            uint32_t cp = 0;
            int len = c >= 0xf0 && c < 0xf5 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
            int ok = len > 0;
            for (int i = 1; ok && i < len; i++)
                ok = (s[i] & 0xc0) == 0x80;
            if (ok) {
                cp = len == 2 ? (c & 0x1fu) : len == 3 ? (c & 0x0fu) : (c & 0x07u);
                for (int i = 1; i < len; i++)
                    cp = cp << 6 | (s[i] & 0x3fu);
                ok = !(len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp < 0xe000))) &&
                     !(len == 4 && (cp < 0x10000 || cp > 0x10ffff));
            }
            if (!ok) {
                ds_sb_printf(b, "\\udc%02x", c);
                s++;
                continue;
            }
            if (cp >= 0x10000) {
                cp -= 0x10000;
                ds_sb_printf(b, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
            } else {
                ds_sb_printf(b, "\\u%04x", cp);
            }
            s += len;
        }
    }
    ds_sb_printf(b, "\"");
}

/* repr(float): the shortest digits that round-trip (found by trying each
   precision of %e until strtod gives x back), then laid out as Python's
   float_repr_style 'short' does.  Only the digits and the exponent are taken
   from snprintf, so the locale's decimal point does not matter. */
size_t ds_py_float_repr(char *out, size_t cap, double x)
{
    char r[DS_PY_FLOAT_REPR_MAX];
    size_t n = 0;
#define PUT(c) (r[n++] = (c))
    if (isnan(x)) {
        memcpy(r, "nan", 3);
        n = 3;
    } else if (isinf(x)) {
        n = x > 0 ? 3 : 4;
        memcpy(r, x > 0 ? "inf" : "-inf", n);
    } else {
        char e[40];
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(e, sizeof e, "%.*e", prec - 1, x);
            if (strtod(e, NULL) == x)
                break;
        }
        /* e = [-]d[.ddd]e[+-]XX */
        char digits[24];
        int nd = 0;
        const char *p = e + (e[0] == '-');
        for (; *p && *p != 'e'; p++)
            if (*p >= '0' && *p <= '9')
                digits[nd++] = *p;
        int exp = atoi(p + 1);
        while (nd > 1 && digits[nd - 1] == '0')
            nd--;
        if (e[0] == '-')
            PUT('-');
        if (exp >= -4 && exp < 16) {
            if (exp < 0) {
                PUT('0');
                PUT('.');
                for (int i = 0; i < -exp - 1; i++)
                    PUT('0');
                for (int i = 0; i < nd; i++)
                    PUT(digits[i]);
            } else {
                for (int i = 0; i <= exp; i++)
                    PUT(i < nd ? digits[i] : '0');
                PUT('.');
                if (nd <= exp + 1)
                    PUT('0');
                for (int i = exp + 1; i < nd; i++)
                    PUT(digits[i]);
            }
        } else {
            PUT(digits[0]);
            if (nd > 1) {
                PUT('.');
                for (int i = 1; i < nd; i++)
                    PUT(digits[i]);
            }
            n += (size_t)snprintf(r + n, sizeof r - n, "e%c%02d", exp < 0 ? '-' : '+',
                                  exp < 0 ? -exp : exp);
        }
    }
#undef PUT
    if (cap) {
        size_t k = n < cap ? n : cap - 1;
        memcpy(out, r, k);
        out[k] = 0;
    }
    return n;
}

void ds_sb_py_float(ds_sbuf *b, double x)
{
    if (isnan(x)) {
        ds_sb_printf(b, "NaN");
        return;
    }
    if (isinf(x)) {
        ds_sb_printf(b, x > 0 ? "Infinity" : "-Infinity");
        return;
    }
    char r[DS_PY_FLOAT_REPR_MAX];
    ds_py_float_repr(r, sizeof r, x);
    ds_sb_printf(b, "%s", r);
}
