// W8A8 FP8 linear of one row on tensor cores: out = fp8_linear(x, W) (+ bias) for x [1, K]
// in a 16-bit type and W [N, K] float8 e4m3 with a float32 scale per row
// (pagoda.quant.tensors.Fp8Weight, per-row scales), x quantized to e4m3 per token (scale =
// max(amax, 448 * 1e-12) / 448) or by a static scale, as pagoda.ops.quant_reference does:
// divided by its scale (an IEEE division), saturated, rounded to nearest even.
//
// Each block quantizes x into shared memory once (its threads split K), while its warps'
// first weight loads are already in flight, then multiplies 16 weight rows: the e4m3 codes
// are mma.sync m16n8k32's A operand as they lie in memory (no conversion), the quantized x
// its B operand (column 0; the other 7 columns are zero). Lane (g, t) loads 16 bytes of
// rows g and g + 8 per 64 inputs (inputs 16t to 16t + 15 of the chunk): its bytes 0-3 and
// 4-7 stand for the MMA's k indices 4t..4t+3 and 4t+16..4t+19 of a first product, bytes
// 8-15 for a second, and x's bytes are taken at the same inputs. A block's warps split K
// and meet in shared memory; the float32 sum is scaled by both scales at the end.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common.cuh"

namespace {

using pagoda_cuda::from_float;
using pagoda_cuda::to_float;

constexpr int kRows = pagoda_cuda::kMmaRows;  // weight rows a block (the MMA's M)
constexpr int kChunk = 64;  // inputs a warp step: 4 lanes x 16 bytes
constexpr float kFp8Max = 448.0f;
constexpr float kMinScale = 1e-12f;  // pagoda.quant.tensors.MIN_SCALE

__device__ __forceinline__ void mma_e4m3(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890  // float8 MMAs: Ada and later
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
  __trap();  // the launcher's callers check the capability (pagoda_cuda.native)
#endif
}

template <typename T, int WARPS>
__global__ void __launch_bounds__(WARPS * 32)
    fp8_mma_kernel(T* __restrict__ out, const T* __restrict__ x,
                   const uint8_t* __restrict__ weight, const float* __restrict__ wscale,
                   const float* __restrict__ static_scale, const T* __restrict__ bias, int k,
                   int64_t stride_wn) {
  extern __shared__ uint4 shared[];  // x quantized, k bytes (16-byte words)
  __shared__ float partial[WARPS][kRows];
  __shared__ float block_amax[WARPS];
  uint8_t* xq = reinterpret_cast<uint8_t*>(shared);

  const auto [warp, g, t, begin, end, row] = pagoda_cuda::lane_tile<WARPS>(k / kChunk);
  const int lane = threadIdx.x % 32;
  const uint4* wa = reinterpret_cast<const uint4*>(weight + row * stride_wn) + t;
  const uint4* wb = reinterpret_cast<const uint4*>(weight + (row + 8) * stride_wn) + t;

  // The first chunk's weights stream while x is quantized.
  uint4 next_a = {}, next_b = {};
  if (begin < end) {
    next_a = __ldcs(wa + 4 * begin);
    next_b = __ldcs(wb + 4 * begin);
  }

  // x's scale: static, or its amax over the row (every block computes it: K reads from L2).
  const uint4* xv = reinterpret_cast<const uint4*>(x);  // 8 values a word
  float scale;
  if (static_scale != nullptr) {
    scale = *static_scale;
  } else {
    float amax = 0.0f;
    for (int i = threadIdx.x; i < k / 8; i += WARPS * 32) {
      const uint4 word = __ldg(xv + i);
      const T* v = reinterpret_cast<const T*>(&word);
#pragma unroll
      for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(to_float(v[j])));
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    }
    if (lane == 0) block_amax[warp] = amax;
    __syncthreads();
    amax = block_amax[0];
#pragma unroll
    for (int w = 1; w < WARPS; ++w) amax = fmaxf(amax, block_amax[w]);
    scale = fmaxf(amax, kMinScale * kFp8Max) / kFp8Max;
  }
  for (int i = threadIdx.x; i < k / 8; i += WARPS * 32) {
    const uint4 word = __ldg(xv + i);
    const T* v = reinterpret_cast<const T*>(&word);
    uint32_t packed[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      uint32_t bytes = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float q = fminf(fmaxf(__fdiv_rn(to_float(v[4 * half + j]), scale), -kFp8Max),
                              kFp8Max);
        const __nv_fp8_e4m3 code(q);  // round to nearest even
        bytes |= static_cast<uint32_t>(code.__x) << (8 * j);
      }
      packed[half] = bytes;
    }
    reinterpret_cast<uint2*>(xq)[i] = make_uint2(packed[0], packed[1]);
  }
  __syncthreads();

  float acc[4] = {};
  const uint4* xs = reinterpret_cast<const uint4*>(xq) + t;
  for (int c = begin; c < end; ++c) {
    const uint4 cur_a = next_a, cur_b = next_b;
    if (c + 1 < end) {
      next_a = __ldcs(wa + 4 * (c + 1));
      next_b = __ldcs(wb + 4 * (c + 1));
    }
    // Column 0 is x; lanes of the other columns give zeros.
    const uint4 xw = g == 0 ? xs[4 * c] : make_uint4(0, 0, 0, 0);
    // Each chunk's products summed apart and then added in float32: Hopper's float8 MMAs
    // keep fewer bits than float32 in their accumulator.
    float part[4] = {};
    mma_e4m3(part, cur_a.x, cur_b.x, cur_a.y, cur_b.y, xw.x, xw.y);
    mma_e4m3(part, cur_a.z, cur_b.z, cur_a.w, cur_b.w, xw.z, xw.w);
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[i] += part[i];
  }

  // Column 0 of rows g and g + 8 sits in lanes t = 0 (c0 and c2).
  if (t == 0) {
    partial[warp][g] = acc[0];
    partial[warp][g + 8] = acc[2];
  }
  __syncthreads();
  if (threadIdx.x < kRows) {
    const int r = threadIdx.x;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) sum += partial[w][r];
    const int64_t n_index = static_cast<int64_t>(blockIdx.x) * kRows + r;
    sum = sum * scale * wscale[n_index];
    if (bias != nullptr) sum += to_float(bias[n_index]);
    out[n_index] = from_float<T>(sum);
  }
}

template <typename T>
cudaError_t launch(void* out, const void* x, const void* weight, const void* wscale,
                   const void* static_scale, const void* bias, int n, int k, int64_t stride_wn,
                   int warps, cudaStream_t stream) {
  auto kernel = warps == 4 ? fp8_mma_kernel<T, 4> : fp8_mma_kernel<T, 8>;
  const int smem = k;  // x's codes
  if (smem > 48 * 1024) {
    const cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
  }
  kernel<<<n / kRows, warps * 32, smem, stream>>>(
      static_cast<T*>(out), static_cast<const T*>(x), static_cast<const uint8_t*>(weight),
      static_cast<const float*>(wscale), static_cast<const float*>(static_scale),
      static_cast<const T*>(bias), k, stride_wn);
  return cudaGetLastError();
}

}  // namespace

extern "C" {

// out [1, n] = fp8_linear(x [1, k], W) + bias with dtype 0 bfloat16, 1 float16 (x, bias,
// out); W [n, stride_wn] e4m3 bytes, wscale [n] float32, static_scale a float32 scalar or
// null (per token); n a multiple of 16, k of 64; x and W's rows 16-byte aligned; warps 4
// or 8 split K. Launched on `stream` of CUDA device `device`. Returns 0, a CUDA error or a
// pagoda_cuda::Error.
int pagoda_fp8_mma(int dtype, void* out, const void* x, const void* weight, const void* wscale,
                   const void* static_scale, const void* bias, int n, int k, int64_t stride_wn,
                   int warps, int device, void* stream) {
  if (n % kRows != 0 || k % kChunk != 0 || k <= 0 || (warps != 4 && warps != 8)) {
    return pagoda_cuda::kBadShape;
  }
  if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) return e;
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case pagoda_cuda::kBfloat16:
      return launch<__nv_bfloat16>(out, x, weight, wscale, static_scale, bias, n, k, stride_wn,
                                   warps, s);
    case pagoda_cuda::kFloat16:
      return launch<__half>(out, x, weight, wscale, static_scale, bias, n, k, stride_wn, warps,
                            s);
    default:
      return pagoda_cuda::kBadType;
  }
}

}  // extern "C"
