/* cuda_runtime.h for make check-cuda-cpu: the CUDA runtime names of
 * kernels/cuda/ mapped onto HIP-CPU (tests/cudacpu/cuda_shim.h). */
#include "../cuda_shim.h"
