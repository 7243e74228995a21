/*
 * grow.h - the one growable-array helper of train/: grow *p (of *cap
 * elements of sz bytes) by doubling until it holds need elements.
 * @return : 0, or -1 when out of memory or the size overflows (*p and *cap
 *           are then unchanged).
 */
#ifndef MDS_GROW_H
#define MDS_GROW_H

#include <stdint.h>
#include <stdlib.h>

static inline int mds_grow(void **p, size_t *cap, size_t need, size_t sz)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need) {
        if (c > SIZE_MAX / 2) return -1;
        c *= 2;
    }
    if (sz && c > SIZE_MAX / sz) return -1;
    void *q = realloc(*p, c * sz);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

#endif /* MDS_GROW_H */
