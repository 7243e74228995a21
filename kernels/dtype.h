/*
 * dtype.h - the element types of the trainer's tensors and the exact
 * conversions between them, shared by every backend and by the
 * communicator (header-only, so train/comm*.c need no library to link).
 *
 *   MDS_F32   IEEE binary32 (4 bytes): the CPU oracle, master weights,
 *             optimizer state and gradient accumulation
 *   MDS_BF16  bfloat16 (2 bytes): the top half of a binary32
 *   MDS_F16   IEEE binary16 (2 bytes)
 *
 * Conversions to the 16-bit types round to nearest, ties to even (what
 * PyTorch's .to(dtype) and CUDA's __float2bfloat16_rn / __float2half_rn do),
 * keep NaN a quiet NaN and overflow to infinity; conversions back are exact.
 * What it deliberately does not do: FP8, stochastic rounding, or any
 * arithmetic in the 16-bit types (sums are done in float and rounded once).
 */
#ifndef MDS_DTYPE_H
#define MDS_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Callable from CUDA device code too (kernels/cuda/mixed.cu rounds with
 * these very functions); plain C elsewhere. */
#ifdef __CUDACC__
#define MDS_DT_HD __host__ __device__
#else
#define MDS_DT_HD
#endif

enum mds_dtype { MDS_F32 = 0, MDS_BF16 = 1, MDS_F16 = 2, MDS_NUM_DTYPES };

/* Bytes per element; 0 for an unknown dtype. */
static inline MDS_DT_HD size_t mds_dtype_size(int dt)
{
    return dt == MDS_F32 ? 4 : dt == MDS_BF16 || dt == MDS_F16 ? 2 : 0;
}

/* "fp32", "bf16", "fp16" (Megatron's names); "?" for an unknown dtype. */
static inline const char *mds_dtype_name(int dt)
{
    return dt == MDS_F32 ? "fp32" : dt == MDS_BF16 ? "bf16" : dt == MDS_F16 ? "fp16" : "?";
}

static inline MDS_DT_HD uint32_t mds_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline MDS_DT_HD float mds_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline MDS_DT_HD uint16_t mds_f32_to_bf16(float f)
{
    uint32_t u = mds_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);          /* NaN stays a quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);                 /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

static inline MDS_DT_HD float mds_bf16_to_f32(uint16_t h)
{
    return mds_bits_f32((uint32_t)h << 16);
}

static inline MDS_DT_HD uint16_t mds_f32_to_f16(float f)
{
    uint32_t u = mds_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u);             /* quiet NaN */
    if (a >= 0x477ff000u)
        return (uint16_t)(sign | 0x7c00u);             /* rounds to >= 65520: infinity */
    if (a < 0x38800000u) {
        /* subnormal or zero in binary16: value / 2^-24, rounded to nearest even */
        if (a < 0x33000000u)
            return (uint16_t)sign;                      /* below half the smallest subnormal */
        uint32_t mant = (a & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(a >> 23);               /* 14 .. 24 */
        uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u)))
            q++;
        return (uint16_t)(sign | q);
    }
    /* normal: rebias the exponent, round the 13 dropped mantissa bits */
    uint32_t r = a - 0x38000000u;                        /* exponent 127 -> 15 */
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

static inline MDS_DT_HD float mds_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f)
        return mds_bits_f32(sign | 0x7f800000u | (m << 13));    /* inf, NaN */
    if (e == 0) {
        if (m == 0)
            return mds_bits_f32(sign);
        float f = (float)m * 5.9604644775390625e-8f;            /* m * 2^-24, exact */
        return sign ? -f : f;
    }
    return mds_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

/* x rounded to dt and back (the value a dt tensor would hold). */
static inline MDS_DT_HD float mds_round_to(int dt, float x)
{
    if (dt == MDS_BF16)
        return mds_bf16_to_f32(mds_f32_to_bf16(x));
    if (dt == MDS_F16)
        return mds_f16_to_f32(mds_f32_to_f16(x));
    return x;
}

/* Element i of a dt array as float. */
static inline MDS_DT_HD float mds_load(int dt, const void *p, size_t i)
{
    if (dt == MDS_F32)
        return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return dt == MDS_BF16 ? mds_bf16_to_f32(h) : mds_f16_to_f32(h);
}

/* x as the bits of dt (MDS_BF16 or MDS_F16), rounded to nearest even. */
static inline MDS_DT_HD uint16_t mds_f32_to_16(int dt, float x)
{
    return dt == MDS_BF16 ? mds_f32_to_bf16(x) : mds_f32_to_f16(x);
}

/* Stores x, rounded, as element i of a dt array. */
static inline MDS_DT_HD void mds_store(int dt, void *p, size_t i, float x)
{
    if (dt == MDS_F32)
        ((float *)p)[i] = x;
    else
        ((uint16_t *)p)[i] = mds_f32_to_16(dt, x);
}

#ifdef __cplusplus
}
#endif

#endif /* MDS_DTYPE_H */
