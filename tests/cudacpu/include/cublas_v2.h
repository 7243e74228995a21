/* cublas_v2.h for make check-cuda-cpu: cublasGemmEx as a reference GEMM
 * (tests/cudacpu/cuda_shim.h). */
#include "../cuda_shim.h"
