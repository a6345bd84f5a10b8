// FP8 (W8A8) linear of one row on tensor cores: out = fp8_linear(x, W) (+ bias) for x [1, K]
// of a 16-bit type and W [N, K] of float8 e4m3 codes with a float32 scale per row
// (pagoda.quant.tensors.Fp8Weight without blocks, the codes row-major as
// pagoda.kernels.triton.quant_linear.prepare_fp8 keeps them).
//
// x is quantized as the reference does: scale = max(amax(|x|), 1e-12 * 448) / 448 (or the
// checkpoint's static input scale), q = x / scale rounded to the nearest e4m3, saturated.
// Every block quantizes the whole row into shared memory first, as float16 values (each e4m3
// value is one exactly), while its warps' first weight loads are in flight. The codes become
// float16 pairs in one conversion each (cvt.rn.f16x2.e4m3x2 from sm_89 on), exactly too, so
// mma.sync m16n8k16 multiplies the two e4m3 values exactly and sums in float32: what the
// reference computes, in another order, before both scales multiply the sum.
//
// Each warp multiplies 16 weight rows by the row of x (the MMA's column 0; the other seven
// columns are zeros). Lane (g, t) loads 16 bytes of rows g and g + 8 a step (inputs 16t to
// 16t + 15 of a 64-input chunk), and MMA i of the step takes bytes 4i to 4i + 3 of them as
// its k indices 2t, 2t + 1, 2t + 8, 2t + 9; the lane reads x at the same inputs, so no
// weight moves. A block's warps split K; their sums meet in shared memory.
//
// A long K is also split between blocks (grid dimension y). Each split quantizes only its
// part of x (the scale still comes from the whole row), writes its scaled float32 sums,
// and sum_splits adds them. On an H100 it took the 8B shape's down projection (K = 14336)
// from 34.9 to 32.3 µs in 4 splits, still behind Triton's 24.4 (pagoda_cuda.fp8_ops).

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common.cuh"

namespace {

using pagoda_cuda::from_float;
using pagoda_cuda::to_float;
using pagoda_cuda::unpack8;

constexpr int kRows = pagoda_cuda::kMmaRows;  // weight rows a block (the MMA's M)
constexpr int kChunk = 64;                    // inputs a warp step: 4 lanes x 16 codes
constexpr int kMaxInputs = 16384;             // K: the quantized row in 32 KB of shared memory
constexpr float kFp8Max = 448.0f;
constexpr float kMinScale = 1e-12f;           // pagoda.quant.tensors.MIN_SCALE

// Two e4m3 codes (the low byte first) as a float16 pair (the low half first).
__device__ __forceinline__ uint32_t codes_to_halves(uint32_t two_codes) {
  const __half2_raw pair =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_codes), __NV_E4M3);
  return static_cast<uint32_t>(pair.x) | (static_cast<uint32_t>(pair.y) << 16);
}

// x / scale to the nearest e4m3 (saturated), as a float16 (exact).
__device__ __forceinline__ __half quantize(float x, float scale) {
  const __nv_fp8_storage_t code = __nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, __NV_E4M3);
  return __half(__nv_cvt_fp8_to_halfraw(code, __NV_E4M3));
}

// The row's activation scale (per token, or the static one), and its inputs [v0, v1) in
// vectors of eight quantized into `row` (as float16, row[0] the first), by every thread of
// the block; returns once they are all there.
template <typename T, int THREADS>
__device__ __forceinline__ float quantize_row(uint4* row, const T* x, const float* static_scale,
                                              int k, int v0, int v1) {
  const int vectors = k / 8;
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  float scale;
  if (static_scale != nullptr) {
    scale = *static_scale;
  } else {
    float amax = 0.0f;
    for (int v = threadIdx.x; v < vectors; v += THREADS) {
      float f[8];
      unpack8<T>(__ldg(xv + v), f);
#pragma unroll
      for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(f[i]));
    }
    amax = pagoda_cuda::block_all_reduce<THREADS>(amax, [](float a, float b) {
      return fmaxf(a, b);
    });
    scale = fmaxf(amax, kMinScale * kFp8Max) / kFp8Max;  // a true division, as the reference's
  }
  for (int v = v0 + threadIdx.x; v < v1; v += THREADS) {
    float f[8];
    unpack8<T>(__ldg(xv + v), f);
    uint4 q;
    __half* qh = reinterpret_cast<__half*>(&q);
#pragma unroll
    for (int i = 0; i < 8; ++i) qh[i] = quantize(f[i], scale);
    row[v - v0] = q;
  }
  __syncthreads();
  return scale;
}

template <typename T, int WARPS>
__global__ void __launch_bounds__(WARPS * 32)
    fp8_row_kernel(T* __restrict__ out, const T* __restrict__ x,
                   const uint8_t* __restrict__ codes, const float* __restrict__ row_scales,
                   const float* __restrict__ static_scale, const T* __restrict__ bias, int k,
                   int64_t stride_wn, int split_chunks, float* __restrict__ split_sums) {
  __shared__ float partial[WARPS][kRows];
  extern __shared__ uint4 row_x[];  // this split's inputs of x quantized, as float16

  // This block's split of K: chunks [first, last) (all of K without a split).
  const int first = blockIdx.y * split_chunks;
  const int last = min(k / kChunk, first + split_chunks);
  auto [warp, g, t, begin, end, row] = pagoda_cuda::lane_tile<WARPS>(last - first);
  begin += first;
  end += first;
  const uint4* wa = reinterpret_cast<const uint4*>(codes + row * stride_wn) + t;
  const uint4* wb = reinterpret_cast<const uint4*>(codes + (row + 8) * stride_wn) + t;
  uint4 next_a = {}, next_b = {};
  if (begin < end) {
    next_a = __ldcs(wa + 4 * begin);
    next_b = __ldcs(wb + 4 * begin);
  }
  // The first codes are on their way; x may still be the kernel ahead's.
  pagoda_cuda::wait_for_inputs();
  const float x_scale = quantize_row<T, WARPS * 32>(row_x, x, static_scale, k,
                                                   first * (kChunk / 8), last * (kChunk / 8));

  float acc[4] = {};
  for (int c = begin; c < end; ++c) {
    const uint4 cur_a = next_a, cur_b = next_b;
    if (c + 1 < end) {  // the next chunk's codes stream while this one multiplies
      next_a = __ldcs(wa + 4 * (c + 1));
      next_b = __ldcs(wb + 4 * (c + 1));
    }
    // x at inputs 16t .. 16t + 15 of the chunk, for the lanes of column 0 (g = 0)
    const int xi = 2 * (4 * (c - first) + t);
    const uint4 x_lo = g == 0 ? row_x[xi] : make_uint4(0, 0, 0, 0);
    const uint4 x_hi = g == 0 ? row_x[xi + 1] : make_uint4(0, 0, 0, 0);
    const uint32_t a_words[4] = {cur_a.x, cur_a.y, cur_a.z, cur_a.w};
    const uint32_t b_words[4] = {cur_b.x, cur_b.y, cur_b.z, cur_b.w};
    const uint32_t xs[8] = {x_lo.x, x_lo.y, x_lo.z, x_lo.w, x_hi.x, x_hi.y, x_hi.z, x_hi.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // bytes 4i .. 4i + 3 of each row: k indices 2t, +1, +8, +9
      const uint32_t a[4] = {codes_to_halves(a_words[i] & 0xffffu),
                             codes_to_halves(b_words[i] & 0xffffu),
                             codes_to_halves(a_words[i] >> 16), codes_to_halves(b_words[i] >> 16)};
      pagoda_cuda::mma_f16(acc, a, xs[2 * i], xs[2 * i + 1]);
    }
  }

  // Lane (g, 0) holds column 0 of rows g (acc[0]) and g + 8 (acc[2]).
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
    float y = sum * (x_scale * row_scales[n_index]);
    if (split_sums != nullptr) {  // sum_splits adds the splits' and the bias
      split_sums[blockIdx.y * static_cast<int64_t>(gridDim.x) * kRows + n_index] = y;
      return;
    }
    if (bias != nullptr) y += to_float(bias[n_index]);
    out[n_index] = from_float<T>(y);
  }
}

// out[i] = the splits' sums of output i added in split order (+ bias[i]).
template <typename T>
__global__ void sum_splits(T* __restrict__ out, const float* __restrict__ split_sums,
                           const T* __restrict__ bias, int n, int splits) {
  pagoda_cuda::wait_for_inputs();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float y = 0.0f;
  for (int s = 0; s < splits; ++s) y += split_sums[static_cast<int64_t>(s) * n + i];
  if (bias != nullptr) y += to_float(bias[i]);
  out[i] = from_float<T>(y);
}

template <typename T>
cudaError_t launch(void* out, const void* x, const void* codes, const void* row_scales,
                   const void* static_scale, const void* bias, int n, int k, int64_t stride_wn,
                   int splits, float* split_sums, bool dependent, cudaStream_t stream) {
  const int chunks = k / kChunk, split_chunks = (chunks + splits - 1) / splits;
  splits = (chunks + split_chunks - 1) / split_chunks;  // none empty
  if (splits == 1) split_sums = nullptr;
  if (const cudaError_t e = pagoda_cuda::launch_kernel(
          fp8_row_kernel<T, 8>, dim3(n / kRows, splits), 8 * 32,
          static_cast<size_t>(split_chunks) * kChunk * sizeof(__half), stream, dependent,
          static_cast<T*>(out), static_cast<const T*>(x), static_cast<const uint8_t*>(codes),
          static_cast<const float*>(row_scales), static_cast<const float*>(static_scale),
          static_cast<const T*>(bias), k, stride_wn, split_chunks, split_sums);
      e != cudaSuccess || split_sums == nullptr) {
    return e;
  }
  constexpr int kThreads = 256;
  return pagoda_cuda::launch_kernel(sum_splits<T>, (n + kThreads - 1) / kThreads, kThreads, 0,
                                    stream, dependent, static_cast<T*>(out),
                                    static_cast<const float*>(split_sums),
                                    static_cast<const T*>(bias), n, splits);
}

}  // namespace

extern "C" {

// out [1, n] = fp8_linear(x [1, k]) with codes [n, stride_wn] (float8 e4m3, rows 16-byte
// aligned) and float32 row scales [n]; `static_scale` a float32 scalar or null (per token);
// dtype 0 bfloat16, 1 float16 (x, bias and out, all contiguous, x 16-byte aligned); n a
// multiple of 16, k of 64 and at most 16384. K is split between `splits` blocks a tile of
// outputs (at most one per 64 inputs), whose float32 sums go to `split_sums` ([splits, n],
// the caller's scratch; unused with one split) before a second kernel adds them. Launched
// on `stream` of device `device`, dependently where `dependent` (sm_90 on). Returns 0, a
// CUDA error or a pagoda_cuda::Error.
int pagoda_fp8_row(int dtype, void* out, const void* x, const void* codes,
                   const void* row_scales, const void* static_scale, const void* bias, int n,
                   int k, int64_t stride_wn, int splits, void* split_sums, int dependent,
                   int device, void* stream) {
  if (n <= 0 || n % kRows != 0 || k <= 0 || k % kChunk != 0 || k > kMaxInputs ||
      stride_wn % 16 != 0 || splits < 1 || (splits > 1 && split_sums == nullptr)) {
    return pagoda_cuda::kBadShape;
  }
  if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) return e;
  auto s = static_cast<cudaStream_t>(stream);
  auto sums = static_cast<float*>(split_sums);
  switch (dtype) {
    case pagoda_cuda::kBfloat16:
      return launch<__nv_bfloat16>(out, x, codes, row_scales, static_scale, bias, n, k,
                                   stride_wn, splits, sums, dependent, s);
    case pagoda_cuda::kFloat16:
      return launch<__half>(out, x, codes, row_scales, static_scale, bias, n, k, stride_wn,
                            splits, sums, dependent, s);
    default:
      return pagoda_cuda::kBadType;
  }
}

}  // extern "C"
