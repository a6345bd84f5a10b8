// What pagoda-cuda's CUDA C++ kernels share: the launchers' error codes, the 16-bit types'
// conversions and how a block's lanes split a 16-row tile of the weight.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

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

constexpr int kMmaRows = 16;  // weight rows a block: the MMA's M

// A lane's share of a block of WARPS warps that multiply kMmaRows weight rows and split
// `chunks` steps of K between them, each warp a contiguous range [begin, end). Lane
// (g, t) = (lane / 4, lane % 4) holds rows g and g + 8 of the MMA's fragments; `row` is
// the weight row of its g.
struct LaneTile {
  int warp, g, t, begin, end;
  int64_t row;
};

template <int WARPS>
__device__ __forceinline__ LaneTile lane_tile(int chunks) {
  LaneTile tile;
  tile.warp = threadIdx.x / 32;
  tile.g = threadIdx.x % 32 / 4;
  tile.t = threadIdx.x % 4;
  tile.row = static_cast<int64_t>(blockIdx.x) * kMmaRows + tile.g;
  const int per_warp = (chunks + WARPS - 1) / WARPS;
  tile.begin = tile.warp * per_warp;
  tile.end = min(chunks, tile.begin + per_warp);
  return tile;
}

}  // namespace pagoda_cuda
