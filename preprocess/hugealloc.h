/*
 * hugealloc.h - large tables in 2 MiB pages where the kernel gives them on
 * request (transparent huge pages in `madvise` mode, Debian's default):
 * SentencePiece's word cache, which lookups hit anywhere in 16 MB, and
 * liblzma's dictionary, which the decoder reads back at match distances
 * all over it.  In 4 kB pages both cost a page fault per 4 kB on first use
 * and a TLB miss on most accesses.  Freed with free().
 */
#ifndef MDS_HUGEALLOC_H
#define MDS_HUGEALLOC_H

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#define MDS_HUGE_PAGE ((size_t)2 << 20)

/* bytes rounded up to whole 2 MiB pages, aligned to one and advised
 * MADV_HUGEPAGE (a hint: without it, 4 kB pages); NULL out of memory */
static inline void *mds_huge_alloc(size_t bytes)
{
    void *p = NULL;
    if (bytes > SIZE_MAX - MDS_HUGE_PAGE) return NULL;
    size_t whole = bytes ? (bytes + MDS_HUGE_PAGE - 1) / MDS_HUGE_PAGE * MDS_HUGE_PAGE : MDS_HUGE_PAGE;
    if (posix_memalign(&p, MDS_HUGE_PAGE, whole)) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, whole, MADV_HUGEPAGE);
#endif
    return p;
}

#endif
