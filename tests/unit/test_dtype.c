/*
 * test_dtype.c - kernels/dtype.h: the fp32 <-> bf16 / fp16 conversions.
 *
 * Every one of the 2^16 bf16 and fp16 values converts to fp32 and back to
 * itself (NaNs to a NaN); fp32 -> fp16 agrees with the compiler's own
 * IEEE conversion (_Float16, round to nearest even) and fp32 -> bf16 with a
 * rounding written here from the two neighbouring bf16 values, on every
 * 2^32 / STRIDE-th bit pattern plus the edge cases (ties, the largest
 * finite values and overflow, subnormals, zeros, infinities, NaN).
 * It does not test arithmetic in 16 bits (there is none).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dtype.h"
#include "harness.h"

#define STRIDE 997u   /* odd, so every low-bit pattern is visited */

/* bf16 reference: the nearer of the two bf16 neighbours (truncation and the
 * next one up in magnitude), ties to the even one, in double. */
static uint16_t bf16_ref(float f)
{
    uint32_t u = mds_f32_bits(f);
    if (isnan(f))
        return 0;   /* checked separately */
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    double x = fabs((double)f), a = fabs((double)mds_bf16_to_f32(lo)), b = fabs((double)mds_bf16_to_f32(hi));
    if ((lo & 0x7fff) == 0x7f80)
        return lo;   /* infinity */
    if ((hi & 0x7fff) == 0x7f80)
        b = ldexp(1.0, 128);   /* the value infinity stands for when rounding: one ulp above the largest */
    if (x - a < b - x) return lo;
    if (x - a > b - x) return hi;
    return (lo & 1) ? hi : lo;
}

static int same16(uint16_t a, uint16_t b, int f16)
{
    int nan_a = f16 ? ((a & 0x7c00) == 0x7c00 && (a & 0x3ff)) : ((a & 0x7f80) == 0x7f80 && (a & 0x7f));
    int nan_b = f16 ? ((b & 0x7c00) == 0x7c00 && (b & 0x3ff)) : ((b & 0x7f80) == 0x7f80 && (b & 0x7f));
    return nan_a || nan_b ? nan_a && nan_b : a == b;
}

static void round_trips(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        bad += !same16(mds_f32_to_bf16(mds_bf16_to_f32((uint16_t)h)), (uint16_t)h, 0);
        bad += !same16(mds_f32_to_f16(mds_f16_to_f32((uint16_t)h)), (uint16_t)h, 1);
        _Float16 c;
        uint16_t hh = (uint16_t)h;
        memcpy(&c, &hh, 2);
        float want = (float)c, got = mds_f16_to_f32(hh);
        bad += !(isnan(want) ? isnan(got) : mds_f32_bits(want) == mds_f32_bits(got));
    }
    CHECK(bad == 0);
}

static void check_one(float f, int *bad)
{
    _Float16 c = (_Float16)f;
    uint16_t want16;
    memcpy(&want16, &c, 2);
    if (!same16(mds_f32_to_f16(f), want16, 1)) {
        if (*bad < 5)
            fprintf(stderr, "fp16(%a): got %04x want %04x\n", (double)f, mds_f32_to_f16(f), want16);
        (*bad)++;
    }
    if (isnan(f)) {
        uint16_t b = mds_f32_to_bf16(f);
        if (!((b & 0x7f80) == 0x7f80 && (b & 0x7f))) (*bad)++;
        return;
    }
    uint16_t wantb = bf16_ref(f);
    if (mds_f32_to_bf16(f) != wantb) {
        if (*bad < 5)
            fprintf(stderr, "bf16(%a): got %04x want %04x\n", (double)f, mds_f32_to_bf16(f), wantb);
        (*bad)++;
    }
}

static void conversions(void)
{
    int bad = 0;
    static const float edges[] = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, 65536.0f, 1e-8f,
                                  5.960464477539063e-8f, 2.9802322387695312e-8f, 2.98023259e-8f, 6.1035156e-5f,
                                  6.1035153e-5f, 1.00048828125f, 1.00146484375f, 3.3895313892515355e38f,
                                  1.0039062f, 1.01171875f, 1e-40f, -1e-45f, INFINITY, -INFINITY, NAN};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        check_one(edges[i], &bad);
    for (uint64_t u = 0; u < 0x100000000ull; u += STRIDE)
        check_one(mds_bits_f32((uint32_t)u), &bad);
    CHECK(bad == 0);
}

static void helpers(void)
{
    CHECK(mds_dtype_size(MDS_F32) == 4 && mds_dtype_size(MDS_BF16) == 2 && mds_dtype_size(MDS_F16) == 2);
    CHECK(mds_dtype_size(7) == 0);
    CHECK(strcmp(mds_dtype_name(MDS_BF16), "bf16") == 0 && strcmp(mds_dtype_name(MDS_F16), "fp16") == 0);
    CHECK(mds_round_to(MDS_BF16, 1.00390625f) == 1.0f);        /* a tie, to even */
    CHECK(mds_round_to(MDS_BF16, 1.01171875f) == 1.015625f);   /* a tie, to even (up) */
    CHECK(mds_round_to(MDS_F16, 65520.0f) == INFINITY);
    CHECK(mds_round_to(MDS_F32, 0.1f) == 0.1f);
    uint16_t buf[2];
    mds_store(MDS_F16, buf, 1, 0.333333f);
    CHECK(fabsf(mds_load(MDS_F16, buf, 1) - 0.333333f) < 1e-3f);
    float fb[1];
    mds_store(MDS_F32, fb, 0, 0.1f);
    CHECK(mds_load(MDS_F32, fb, 0) == 0.1f);
}

int main(void)
{
    RUN(round_trips);
    RUN(conversions);
    RUN(helpers);
    return harness_report();
}
