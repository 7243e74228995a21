/*
 * adamw.cu - CUDA AdamW step over a flat fp32 buffer: adamw.c's operation
 * order, with the bias corrections computed on the host in double exactly
 * as the CPU does, elementwise (sqrt and division are IEEE-exact without
 * fast math), so the CPU's bits.  No master copy, no multi-tensor launch.
 */
#include <math.h>

#include "common.cuh"

__global__ static void adamw_kernel(float *params, float *m, float *v, const float *grads, size_t N, float lr,
                                    float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                                    float bc1, float bc2)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N)
        return;
    mds_adamw_elem(&params[i], &m[i], &v[i], grads[i], lr, beta1, beta2, eps, weight_decay, grad_scale, bc1, bc2);
}

void adamw_update_cuda(float *params, float *m, float *v, const float *grads, size_t N, int t, float lr, float beta1,
                       float beta2, float eps, float weight_decay, float grad_scale)
{
    if (!N) return;
    float bc1 = (float)(1.0 - pow((double)beta1, t));
    float bc2 = (float)(1.0 - pow((double)beta2, t));
    adamw_kernel<<<mds_cu_blocks(N, 256), 256>>>(params, m, v, grads, N, lr, beta1, beta2, eps, weight_decay,
                                                 grad_scale, bc1, bc2);
    MDS_CU_LAUNCHED("adamw_update");
}
