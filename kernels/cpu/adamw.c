/*
 * adamw.c - CPU reference of the AdamW update (decoupled weight decay, bias
 * correction) over a flat fp32 buffer.
 *
 * It keeps no master copy or low-precision parameters (fp32 throughout) and
 * does not shard: a distributed optimizer calls it on its own slice.
 */
#include <math.h>

#include "kernels.h"
#include "common.h"

/*
 * The operation order follows apex's multi_tensor_adam in ADAM_MODE_1
 * (AdamW), which Megatron's FusedAdam runs: update = m_hat / (sqrt(v_hat) +
 * eps) + wd * p, then p -= lr * update.  The bias corrections are computed
 * once in double (Python computes them in double too) and used as floats.
 */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void adamw_block(float *params, float *m, float *v, const float *grads, size_t n,
                        float lr, float beta1, float beta2, float eps, float weight_decay,
                        float grad_scale, float bc1, float bc2)
{
    for (size_t i = 0; i < n; i++)
        mds_adamw_elem(&params[i], &m[i], &v[i], grads[i], lr, beta1, beta2, eps, weight_decay, grad_scale,
                       bc1, bc2);
}

/* Elementwise, so blocks of ADAMW_BLOCK go to whichever thread is free; the
 * AVX-512 / AVX2 clones give the same bits (sqrt and division are exact
 * IEEE operations, and nothing is contracted). */
#define ADAMW_BLOCK 16384

void adamw_update_cpu(float *params, float *m, float *v, const float *grads, size_t N, int t,
                      float lr, float beta1, float beta2, float eps, float weight_decay,
                      float grad_scale)
{
    float bc1 = (float)(1.0 - pow((double)beta1, t));
    float bc2 = (float)(1.0 - pow((double)beta2, t));
    size_t nb = (N + ADAMW_BLOCK - 1) / ADAMW_BLOCK;
    OMP(parallel for schedule(dynamic, 4))
    for (size_t b = 0; b < nb; b++) {
        size_t i0 = b * ADAMW_BLOCK, n = N - i0 < ADAMW_BLOCK ? N - i0 : ADAMW_BLOCK;
        adamw_block(params + i0, m + i0, v + i0, grads + i0, n, lr, beta1, beta2, eps,
                    weight_decay, grad_scale, bc1, bc2);
    }
}
