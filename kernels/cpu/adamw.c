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
void adamw_update_cpu(float *params, float *m, float *v, const float *grads, size_t N, int t,
                      float lr, float beta1, float beta2, float eps, float weight_decay,
                      float grad_scale)
{
    float bc1 = (float)(1.0 - pow((double)beta1, t));
    float bc2 = (float)(1.0 - pow((double)beta2, t));
    OMP(parallel for schedule(static))
    for (size_t i = 0; i < N; i++) {
        float g = grads[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float update = (mi / bc1) / (sqrtf(vi / bc2) + eps) + weight_decay * params[i];
        params[i] -= lr * update;
    }
}
