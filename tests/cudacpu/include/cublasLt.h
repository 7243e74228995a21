/* cublasLt.h for make check-cuda-cpu: the cublasLtMatmul subset matmul.cu
 * uses, on cublasGemmEx's reference GEMM (tests/cudacpu/cuda_shim.h). */
#include "../cuda_shim.h"
