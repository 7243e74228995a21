/*
 * fuzz_tensorboard.c - fuzz target for the TensorBoard event reader
 * (train/tensorboard.h): any bytes are refused cleanly or read without
 * touching memory outside the input.  Invariants that abort() when broken:
 *   - every view (tag, file_version) lies inside the input, every event's
 *     record offset is inside it and increases;
 *   - the result is a known code, and reading again gives the same code and
 *     the same events (no hidden state);
 *   - a successful read of N events read whole, and cut at the last record
 *     boundary still succeeds with the same events (a killed writer's file).
 * Not covered: the writer (tests/unit/test_tensorboard.c), I/O errors.
 */
#include "tensorboard.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct walk {
    const uint8_t *data;
    size_t size;
    size_t events, values;
    uint64_t last_offset;
    uint64_t sum;   /* of steps and value bits: compared between two reads */
};

static int inside(const struct walk *w, const void *p, size_t n)
{
    const uint8_t *q = p;
    return q >= w->data && q <= w->data + w->size && n <= (size_t)(w->data + w->size - q);
}

static int on_event(void *ctx, const tb_event *ev)
{
    struct walk *w = ctx;
    if (ev->offset >= w->size || (w->events && ev->offset <= w->last_offset)) {
        fprintf(stderr, "fuzz_tensorboard: record offset out of order\n");
        abort();
    }
    if (ev->file_version && !inside(w, ev->file_version, ev->file_version_len)) {
        fprintf(stderr, "fuzz_tensorboard: file_version outside the input\n");
        abort();
    }
    for (size_t i = 0; i < ev->nvalues; i++) {
        const tb_value *v = &ev->values[i];
        if (v->tag && !inside(w, v->tag, v->tag_len)) {
            fprintf(stderr, "fuzz_tensorboard: tag outside the input\n");
            abort();
        }
        uint32_t b;
        memcpy(&b, &v->simple_value, 4);
        w->sum += v->has_simple_value ? b : 0;
    }
    w->sum += (uint64_t)ev->step;
    w->last_offset = ev->offset;
    w->events++;
    w->values += ev->nvalues;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct walk a = {data, size, 0, 0, 0, 0}, b = a;
    char err[256];
    int rc = tb_read_events(data, size, on_event, &a, err, sizeof err);
    int rc2 = tb_read_events(data, size, on_event, &b, err, sizeof err);
    if (rc != rc2 || a.events != b.events || a.values != b.values || a.sum != b.sum) {
        fprintf(stderr, "fuzz_tensorboard: two reads differ\n");
        abort();
    }
    if (rc != 0 && rc != TB_ERR_TRUNCATED && rc != TB_ERR_CRC && rc != TB_ERR_FORMAT) {
        fprintf(stderr, "fuzz_tensorboard: unexpected code %d\n", rc);
        abort();
    }
    if (rc == 0 && a.events) {
        /* the prefix up to the last record's start reads the events before it */
        struct walk c = {data, (size_t)a.last_offset, 0, 0, 0, 0};
        if (tb_read_events(data, (size_t)a.last_offset, on_event, &c, err, sizeof err) != 0 || c.events != a.events - 1) {
            fprintf(stderr, "fuzz_tensorboard: a whole-record prefix does not read\n");
            abort();
        }
    }
    return 0;
}
