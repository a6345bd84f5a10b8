// What pagoda-cuda's CUDA C++ kernels share: the launchers' error codes and the 16-bit
// types' conversions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace pagoda_cuda {

// Error codes of the launchers besides CUDA's own (cudaError_t values are below 1000);
// pagoda_cuda_error_string (errors.cu) names each.
enum Error { kBadShape = 1001, kBadType = 1002 };

// The launchers' dtype argument.
enum Dtype { kBfloat16 = 0, kFloat16 = 1 };

__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ __nv_bfloat16 from_float(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_float(float v) { return __float2half_rn(v); }

}  // namespace pagoda_cuda
