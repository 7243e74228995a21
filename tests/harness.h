/*
 * harness.h - the unit-test harness (about 20 lines, redis testhelp.h style).
 *
 * Each test is a void function; RUN(fn) runs it and prints "ok fn" or
 * "FAIL fn" on stdout, which tests/run.sh counts.  CHECK() reports the file
 * and line of a failed condition on stderr and lets the test go on.
 * harness_report() returns the exit status (1 when anything failed).
 * RUN_IF(cond, fn, why) runs fn only if cond holds, else prints
 * "skip fn: why" (a test needing a library this build lacks); run.sh counts
 * skips apart, neither passed nor failed.
 * Not thread safe: checks run on the main thread only.
 */
#ifndef MDS_TESTS_HARNESS_H
#define MDS_TESTS_HARNESS_H

#include <stdio.h>

static int harness_failed, harness_tests_failed;

#define CHECK(cond) do { \
        if (!(cond)) { \
            harness_failed++; \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        } \
    } while (0)

#define RUN(fn) do { \
        int harness_before_ = harness_failed; \
        fn(); \
        int harness_ok_ = harness_failed == harness_before_; \
        if (!harness_ok_) harness_tests_failed++; \
        printf("%s %s\n", harness_ok_ ? "ok" : "FAIL", #fn); \
        fflush(stdout); \
    } while (0)

#define RUN_IF(cond, fn, why) do { \
        if (cond) { \
            RUN(fn); \
        } else { \
            printf("skip %s: %s\n", #fn, why); \
            fflush(stdout); \
        } \
    } while (0)

static inline int harness_report(void) { return harness_tests_failed ? 1 : 0; }

#endif
