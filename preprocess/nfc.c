/*
 * nfc.c - NFC with the Unicode 9.0 data of HuggingFace tokenizers; see nfc.h.
 *
 * Tables, built once from hftab.c: a two-stage table per code point holding
 * the canonical combining class and a "may change" bit (NFC_QC not Yes, or
 * ccc != 0).  Decompositions and compositions are looked up by binary search
 * in hftab.c's sorted arrays: they are only needed in the slow path, for the
 * few segments that hold a combining mark or a decomposable character.
 * Hangul syllables are composed and decomposed arithmetically (UAX #15).
 */
#include "nfc.h"
#include "hftab.h"
#include "utf8.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define BLOCKS (0x110000 >> 8)
#define MAYBE 0x100u

static uint16_t stage1[BLOCKS];
static uint16_t *stage2;   /* ccc | MAYBE */
static int init_failed;
static pthread_once_t once = PTHREAD_ONCE_INIT;

#define SBASE 0xAC00u
#define LBASE 0x1100u
#define VBASE 0x1161u
#define TBASE 0x11A7u
#define LCOUNT 19u
#define VCOUNT 21u
#define TCOUNT 28u
#define NCOUNT (VCOUNT * TCOUNT)
#define SCOUNT (LCOUNT * NCOUNT)

static void build(void)
{
    uint16_t *v = calloc(0x110000, sizeof *v);
    uint16_t *blocks = malloc((size_t)BLOCKS * 256 * sizeof *blocks);
    if (!v || !blocks) {
        free(v);
        free(blocks);
        init_failed = 1;
        return;
    }
    for (size_t i = 0; i < hftab_ccc_len; i++)
        for (uint32_t c = hftab_ccc[i][0]; c <= hftab_ccc[i][1]; c++)
            v[c] = (uint16_t)hftab_ccc[i][2];
    for (size_t i = 0; i < hftab_nfc_maybe_len; i++)
        for (uint32_t c = hftab_nfc_maybe[i][0]; c <= hftab_nfc_maybe[i][1]; c++)
            v[c] |= MAYBE;
    size_t nb = 0;
    for (size_t b = 0; b < BLOCKS; b++) {
        const uint16_t *blk = v + b * 256;
        size_t k;
        for (k = 0; k < nb; k++)
            if (memcmp(blocks + k * 256, blk, 256 * sizeof *blk) == 0)
                break;
        if (k == nb)
            memcpy(blocks + nb++ * 256, blk, 256 * sizeof *blk);
        stage1[b] = (uint16_t)k;
    }
    free(v);
    uint16_t *shrunk = realloc(blocks, nb * 256 * sizeof *blocks);
    stage2 = shrunk ? shrunk : blocks;
}

int nfc_init(void)
{
    pthread_once(&once, build);
    return init_failed ? -1 : 0;
}

static inline unsigned info(uint32_t cp)
{
    return cp < 0x110000 ? stage2[(size_t)stage1[cp >> 8] * 256 + (cp & 0xFF)] : 0;
}

size_t nfc_quick_check(const unsigned char *s, size_t n)
{
    if (nfc_init() != 0)
        return 0;
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c < 0xCC) {            /* ASCII, a continuation byte we skip, or U+0080..U+02FF */
            i++;
            continue;
        }
        uint32_t cp;
        size_t l = utf8_next(s, n, i, &cp, 0xFFFD);
        if (info(cp))
            return i;
        i += l;
    }
    return n;
}

size_t nfc_bound(size_t n)
{
    return n * hftab_nfc_max_ratio + 4;
}

void nfc_scratch_release(nfc_scratch *s)
{
    free(s->cp);
    s->cp = NULL;
    s->cap = 0;
}

static const uint32_t *find_decomp(uint32_t cp)
{
    size_t lo = 0, hi = hftab_decomp_len;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (hftab_decomp[mid][0] < cp) lo = mid + 1;
        else hi = mid;
    }
    return lo < hftab_decomp_len && hftab_decomp[lo][0] == cp ? hftab_decomp[lo] : NULL;
}

static uint32_t find_comp(uint32_t a, uint32_t b)
{
    if (a >= LBASE && a < LBASE + LCOUNT && b >= VBASE && b < VBASE + VCOUNT)
        return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
    if (a >= SBASE && a < SBASE + SCOUNT && (a - SBASE) % TCOUNT == 0 && b > TBASE && b < TBASE + TCOUNT)
        return a + (b - TBASE);
    size_t lo = 0, hi = hftab_comp_len;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (hftab_comp[mid][0] < a || (hftab_comp[mid][0] == a && hftab_comp[mid][1] < b)) lo = mid + 1;
        else hi = mid;
    }
    return lo < hftab_comp_len && hftab_comp[lo][0] == a && hftab_comp[lo][1] == b ? hftab_comp[lo][2] : 0;
}

static int grow(nfc_scratch *sc, size_t need)
{
    if (need <= sc->cap)
        return 0;
    size_t c = sc->cap ? sc->cap * 2 : 64;
    while (c < need)
        c *= 2;
    uint32_t *p = realloc(sc->cp, c * sizeof *p);
    if (!p)
        return -1;
    sc->cp = p;
    sc->cap = c;
    return 0;
}

/* Appends the full canonical decomposition of cp. */
static int decompose(nfc_scratch *sc, size_t *m, uint32_t cp)
{
    if (cp >= SBASE && cp < SBASE + SCOUNT) {
        uint32_t s = cp - SBASE, t = s % TCOUNT;
        if (grow(sc, *m + 3))
            return -1;
        sc->cp[(*m)++] = LBASE + s / NCOUNT;
        sc->cp[(*m)++] = VBASE + (s % NCOUNT) / TCOUNT;
        if (t)
            sc->cp[(*m)++] = TBASE + t;
        return 0;
    }
    const uint32_t *d = (info(cp) & MAYBE) || cp >= 0xC0 ? find_decomp(cp) : NULL;
    if (!d) {
        if (grow(sc, *m + 1))
            return -1;
        sc->cp[(*m)++] = cp;
        return 0;
    }
    if (decompose(sc, m, d[1]))
        return -1;
    return d[2] ? decompose(sc, m, d[2]) : 0;
}

/* NFC of one segment s[0..n), written at out; returns the bytes or SIZE_MAX. */
static size_t segment(const unsigned char *s, size_t n, unsigned char *out, nfc_scratch *sc)
{
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += utf8_next(s, n, i, &cp, 0xFFFD);
        if (decompose(sc, &m, cp))
            return SIZE_MAX;
    }
    uint32_t *b = sc->cp;
    /* canonical ordering: a stable insertion sort of each run of non-starters */
    for (size_t i = 1; i < m; i++) {
        unsigned ci = info(b[i]) & 0xFF;
        if (!ci)
            continue;
        uint32_t x = b[i];
        size_t j = i;
        while (j > 0) {
            unsigned cj = info(b[j - 1]) & 0xFF;
            if (cj <= ci)
                break;
            b[j] = b[j - 1];
            j--;
        }
        b[j] = x;
    }
    /* composition */
    size_t w = 0, starter = SIZE_MAX;
    unsigned last_cc = 0;
    int after = 0; /* something was kept after the starter */
    for (size_t i = 0; i < m; i++) {
        uint32_t c = b[i];
        unsigned cc = info(c) & 0xFF;
        if (starter != SIZE_MAX && !(after && (last_cc == 0 || last_cc >= cc))) {
            uint32_t k = find_comp(b[starter], c);
            if (k) {
                b[starter] = k;
                continue;
            }
        }
        b[w] = c;
        if (cc == 0) {
            starter = w;
            after = 0;
            last_cc = 0;
        } else {
            after = 1;
            last_cc = cc;
        }
        w++;
    }
    size_t o = 0;
    for (size_t i = 0; i < w; i++)
        o += utf8_put(out + o, b[i]);
    return o;
}

size_t nfc_normalize(const unsigned char *s, size_t n, unsigned char *out, nfc_scratch *sc)
{
    if (nfc_init() != 0)
        return SIZE_MAX;
    size_t o = 0, i = 0;
    while (i < n) {
        /* copy up to the next character that may change, then back up to
           the stable boundary before it */
        size_t k = nfc_quick_check(s + i, n - i) + i;
        if (k == n) {
            memcpy(out + o, s + i, n - i);
            return o + n - i;
        }
        size_t start = k;
        while (start > i) {
            size_t p = start - 1;
            while (p > i && (s[p] & 0xC0) == 0x80)
                p--;
            uint32_t cp;
            utf8_next(s, n, p, &cp, 0xFFFD);
            start = p;
            if (!info(cp))
                break;  /* a stable starter: the segment begins with it */
        }
        memcpy(out + o, s + i, start - i);
        o += start - i;
        /* the segment ends before the next stable character after k */
        size_t end = k;
        while (end < n) {
            uint32_t cp;
            size_t l = utf8_next(s, n, end, &cp, 0xFFFD);
            if (end > k && !info(cp))
                break;
            end += l;
        }
        size_t r = segment(s + start, end - start, out + o, sc);
        if (r == SIZE_MAX)
            return SIZE_MAX;
        o += r;
        i = end;
    }
    return o;
}
