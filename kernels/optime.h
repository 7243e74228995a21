/*
 * optime.h - the time each op of a backend takes, for mdstrain's
 * --op-times: where a step's time goes, op by op, on the CPU or a GPU,
 * without a profiler.
 *
 * mds_optime_wrap() returns a backend that is the given one with every op
 * of its table, and its zero() and copy(), run between two of its marks
 * (backend.h) while counting is on; sync() resolves the marks taken and
 * adds each op's time to its row: one row per op, and per shape (C, OC)
 * for the four matmul ops, so the classifier's GEMM is told from the
 * layers'.  On a GPU the time is the device's between two events around
 * the op's launches: what its kernels take, not the host's launch cost;
 * time no op accounts for (the host falling behind, communication on
 * other streams) is the gap between the rows' sum and the wall clock.
 *
 * One backend per process is wrapped, and driven by one thread, as
 * mdstrain does; the results are the wrapped backend's, bit for bit (the
 * marks read clocks, nothing else).
 */
#ifndef MDS_OPTIME_H
#define MDS_OPTIME_H

#include <stdint.h>
#include <stdio.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The timed backend over inner (its name, device and everything else
 * inner's), counting off; NULL when inner has no marks or one is already
 * wrapped. */
const mds_backend *mds_optime_wrap(const mds_backend *inner);

/* Counting on (1) or off (0): the ops called while it is on are timed.
 * Marks already taken are resolved at the next sync() either way. */
void mds_optime_count(int on);

/* The rows so far into f, most time first: for the matmuls and attention
 * the TFLOP/s of their products (a linear's 2 B T C OC forward, twice that
 * backward; causal attention's 2 B T^2 C forward, twice that backward), the
 * calls and milliseconds per iteration over `iterations`, each row's share
 * of the ops' total, then
 * the total against wall_ms, the wall clock's milliseconds per iteration
 * over the same iterations.  Call after a sync().  A failure to take or
 * resolve a mark (counting stopped there) is said instead of the rows. */
void mds_optime_report(FILE *f, const char *title, uint64_t iterations, double wall_ms);

#ifdef __cplusplus
}
#endif

#endif
