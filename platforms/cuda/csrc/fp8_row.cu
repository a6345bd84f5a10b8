// FP8 (W8A8) linear of one row on tensor cores: out = fp8_linear(x, W) (+ bias) for x [1, K]
// of a 16-bit type and W [N, K] of float8 e4m3 codes with a float32 scale per row
// (pagoda.quant.tensors.Fp8Weight without blocks, the codes row-major as
// pagoda.kernels.triton.quant_linear.prepare_fp8 keeps them).
//
// x is quantized as the reference does: scale = max(amax(|x|), 1e-12 * 448) / 448 (or the
// checkpoint's static input scale), q = x / scale rounded to the nearest e4m3, saturated.
// Every block quantizes the row into shared memory first, as float16 values (each e4m3
// value is one exactly), while its warps' first weight loads are in flight. The codes become
// float16 pairs in one conversion each (cvt.rn.f16x2.e4m3x2 from sm_89 on), exactly too, so
// mma.sync m16n8k16 multiplies the two e4m3 values exactly and sums in float32: what the
// reference computes, in another order, before both scales multiply the sum.
//
// x may also come as the input of the RMSNorm before the linear (row_input.cuh): each block
// then computes the normed row into shared memory before it quantizes it, so a decode
// step's projections the kernel serves launch no norm kernel (pagoda_cuda.fp8_ops).
//
// Each warp multiplies 16 weight rows (a tile) by the row of x (the MMA's column 0; the
// other seven columns are zeros). Lane (g, t) loads 16 bytes of rows g and g + 8 a step
// (inputs 16t to 16t + 15 of a 64-input chunk), and MMA i of the step takes bytes 4i to
// 4i + 3 of them as its k indices 2t, 2t + 1, 2t + 8, 2t + 9; the lane reads x at the same
// inputs, so no weight moves; it loads the next step's codes while it multiplies. A block
// of 16 warps holds TILES (1 or 2) tiles of 16 rows (so that its quantized row serves more
// weights), its warps split between them and each tile's warps split K; their sums meet in
// shared memory. (On an H100, 8 warps a block, 4 tiles, and 2 or 4 steps' loads in flight
// were slower on every 8B shape the kernel serves: docs/benchmarks.md, session 29.)
//
// A long K may also be split between blocks (grid dimension y). Each split quantizes only
// its part of a plain x (the scale still comes from the whole row), writes its scaled
// float32 sums, and sum_splits adds them.

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common.cuh"
#include "row_input.cuh"

namespace {

using pagoda_cuda::from_float;
using pagoda_cuda::RowNorm;
using pagoda_cuda::to_float;
using pagoda_cuda::unpack8;

constexpr int kRows = pagoda_cuda::kMmaRows;  // weight rows a tile (the MMA's M)
constexpr int kChunk = 64;                    // inputs a warp step: 4 lanes x 16 codes
constexpr int kMaxInputs = pagoda_cuda::kMaxRowInputs;  // K: the row in 32 KB of shared memory
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

// The row's activation scale: the static one, or from the amax of `vectors` 16-byte
// vectors of T at `values` (global or shared memory), by every thread of the block (THREADS
// of them), the same float in each.
template <typename T, int THREADS>
__device__ __forceinline__ float activation_scale(const uint4* values, int vectors,
                                                  const float* static_scale) {
  if (static_scale != nullptr) return *static_scale;
  float amax = 0.0f;
  for (int v = threadIdx.x; v < vectors; v += THREADS) {
    float f[8];
    unpack8<T>(values[v], f);
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(f[i]));
  }
  amax = pagoda_cuda::block_all_reduce<THREADS>(amax, [](float a, float b) {
    return fmaxf(a, b);
  });
  return fmaxf(amax, kMinScale * kFp8Max) / kFp8Max;  // a true division, as the reference's
}

// dst[i] = src[i] quantized by `scale` (as float16 values), for `count` vectors of eight,
// by every thread of the block; returns once they are all there. dst may be src.
template <typename T, int THREADS>
__device__ __forceinline__ void quantize_vectors(uint4* dst, const uint4* src, int count,
                                                 float scale) {
  for (int v = threadIdx.x; v < count; v += THREADS) {
    float f[8];
    unpack8<T>(src[v], f);
    uint4 q;
    __half* qh = reinterpret_cast<__half*>(&q);
#pragma unroll
    for (int i = 0; i < 8; ++i) qh[i] = quantize(f[i], scale);
    dst[v] = q;
  }
  __syncthreads();
}

// One 64-input chunk of a warp: 16 bytes of codes of rows g (`wa`) and g + 8 (`wb`), and x's
// quantized inputs 16t .. 16t + 15 of the chunk at `xq` (two vectors, read by the lanes of
// column 0).
__device__ __forceinline__ void multiply_chunk(float (&acc)[4], const uint4& wa, const uint4& wb,
                                               const uint4* xq, int g) {
  const uint4 x_lo = g == 0 ? xq[0] : make_uint4(0, 0, 0, 0);
  const uint4 x_hi = g == 0 ? xq[1] : make_uint4(0, 0, 0, 0);
  const uint32_t a_words[4] = {wa.x, wa.y, wa.z, wa.w};
  const uint32_t b_words[4] = {wb.x, wb.y, wb.z, wb.w};
  const uint32_t xs[8] = {x_lo.x, x_lo.y, x_lo.z, x_lo.w, x_hi.x, x_hi.y, x_hi.z, x_hi.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // bytes 4i .. 4i + 3 of each row: k indices 2t, +1, +8, +9
    const uint32_t a[4] = {codes_to_halves(a_words[i] & 0xffffu),
                           codes_to_halves(b_words[i] & 0xffffu),
                           codes_to_halves(a_words[i] >> 16), codes_to_halves(b_words[i] >> 16)};
    pagoda_cuda::mma_f16(acc, a, xs[2 * i], xs[2 * i + 1]);
  }
}

constexpr int kWarps = 16;  // a block's

template <typename T, int TILES, int INPUT>
__global__ void __launch_bounds__(kWarps * 32)
    fp8_row_kernel(T* __restrict__ out, const T* __restrict__ x,
                   const uint8_t* __restrict__ codes, const float* __restrict__ row_scales,
                   const float* __restrict__ static_scale, const T* __restrict__ bias, int k,
                   int64_t stride_wn, int split_chunks, float* __restrict__ split_sums,
                   RowNorm<T> norm) {
  constexpr int kThreads = kWarps * 32, kTileWarps = kWarps / TILES;
  __shared__ float partial[kWarps][kRows];
  // x quantized, as float16: this split's inputs of a plain x, the whole of a normed one
  extern __shared__ uint4 row_x[];

  // This block's split of K: chunks [first, last) (all of K without a split).
  const int first = blockIdx.y * split_chunks;
  const int last = min(k / kChunk, first + split_chunks);
  auto [warp, g, t, begin, end, row] = pagoda_cuda::lane_tile<kWarps, TILES>(last - first);
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
  const int v0 = first * (kChunk / 8), v1 = last * (kChunk / 8);  // this split's vectors
  int stored_from;  // the first vector of x that row_x holds
  float x_scale;
  if constexpr (INPUT == pagoda_cuda::kPlain) {
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    x_scale = activation_scale<T, kThreads>(xv, k / 8, static_scale);
    quantize_vectors<T, kThreads>(row_x, xv + v0, v1 - v0, x_scale);
    stored_from = v0;
  } else {
    pagoda_cuda::normed_row<T, INPUT, kThreads>(row_x, x, norm, k);
    x_scale = activation_scale<T, kThreads>(row_x, k / 8, static_scale);
    quantize_vectors<T, kThreads>(row_x + v0, row_x + v0, v1 - v0, x_scale);
    stored_from = 0;
  }

  float acc[4] = {};
  for (int c = begin; c < end; ++c) {
    const uint4 cur_a = next_a, cur_b = next_b;
    if (c + 1 < end) {  // the next chunk's codes stream while this one multiplies
      next_a = __ldcs(wa + 4 * (c + 1));
      next_b = __ldcs(wb + 4 * (c + 1));
    }
    multiply_chunk(acc, cur_a, cur_b, row_x + (8 * c + 2 * t - stored_from), g);
  }

  // Lane (g, 0) holds column 0 of rows g (acc[0]) and g + 8 (acc[2]).
  if (t == 0) {
    partial[warp][g] = acc[0];
    partial[warp][g + 8] = acc[2];
  }
  __syncthreads();
  if (threadIdx.x < TILES * kRows) {
    const int r = threadIdx.x % kRows, sum_tile = threadIdx.x / kRows;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kTileWarps; ++w) sum += partial[sum_tile * kTileWarps + w][r];
    const int64_t n = static_cast<int64_t>(gridDim.x) * TILES * kRows;
    const int64_t n_index = (static_cast<int64_t>(blockIdx.x) * TILES + sum_tile) * kRows + r;
    float y = sum * (x_scale * row_scales[n_index]);
    if (split_sums != nullptr) {  // sum_splits adds the splits' and the bias
      split_sums[blockIdx.y * n + n_index] = y;
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
using Kernel = decltype(&fp8_row_kernel<T, 1, pagoda_cuda::kPlain>);

// The kernel of `tiles` tiles of 16 rows a block (1 or 2), for x as `INPUT` says.
template <typename T, int INPUT>
Kernel<T> pick(int tiles) {
  return tiles == 1 ? fp8_row_kernel<T, 1, INPUT> : fp8_row_kernel<T, 2, INPUT>;
}

template <typename T>
cudaError_t launch(int input, void* out, const void* x, const void* residual,
                   const void* norm_weight, void* summed, float eps, const void* codes,
                   const void* row_scales, const void* static_scale, const void* bias, int n,
                   int k, int64_t stride_wn, int splits, float* split_sums, int tiles,
                   bool dependent, cudaStream_t stream) {
  const RowNorm<T> norm{static_cast<const T*>(residual), static_cast<const T*>(norm_weight),
                        static_cast<T*>(summed), eps};
  const int chunks = k / kChunk, split_chunks = (chunks + splits - 1) / splits;
  splits = (chunks + split_chunks - 1) / split_chunks;  // none empty
  if (splits == 1) split_sums = nullptr;
  using pagoda_cuda::kNormed, pagoda_cuda::kNormedResidual, pagoda_cuda::kPlain;
  const Kernel<T> kernel = input == kPlain    ? pick<T, kPlain>(tiles)
                           : input == kNormed ? pick<T, kNormed>(tiles)
                                              : pick<T, kNormedResidual>(tiles);
  // A plain x's split in shared memory, or the whole normed row.
  const int stored = input == pagoda_cuda::kPlain ? split_chunks * kChunk : k;
  if (const cudaError_t e = pagoda_cuda::launch_kernel(
          kernel, dim3(n / (kRows * tiles), splits), kWarps * 32,
          static_cast<size_t>(stored) * sizeof(__half), stream, dependent, static_cast<T*>(out),
          static_cast<const T*>(x), static_cast<const uint8_t*>(codes),
          static_cast<const float*>(row_scales), static_cast<const float*>(static_scale),
          static_cast<const T*>(bias), k, stride_wn, split_chunks, split_sums, norm);
      e != cudaSuccess || split_sums == nullptr) {
    return e;
  }
  constexpr int kThreads = 256;
  return pagoda_cuda::launch_kernel(sum_splits<T>, (n + kThreads - 1) / kThreads, kThreads, 0,
                                    stream, dependent, static_cast<T*>(out),
                                    static_cast<const float*>(split_sums),
                                    static_cast<const T*>(bias), n, splits);
}

bool bad_shape(int input, int n, int k, int64_t stride_wn, int splits, bool scratch,
               int tiles) {
  return input < pagoda_cuda::kPlain || input > pagoda_cuda::kNormedResidual ||
         (tiles != 1 && tiles != 2) || n <= 0 || n % (kRows * tiles) != 0 || k <= 0 ||
         k % kChunk != 0 || k > kMaxInputs || stride_wn % 16 != 0 || splits < 1 ||
         (splits > 1 && !scratch);
}

}  // namespace

extern "C" {

// out [1, n] = fp8_linear(x [1, k]) with codes [n, stride_wn] (float8 e4m3, rows 16-byte
// aligned) and float32 row scales [n]; `static_scale` a float32 scalar or null (per token);
// dtype 0 bfloat16, 1 float16 (x, bias and out, all contiguous, x 16-byte aligned); k a
// multiple of 64 and at most 16384. `input` 0: x as it is; 1: x the input of an RMSNorm
// whose output the linear takes, rms_norm(x, eps) * norm_weight; 2: the same of x +
// residual, which is also stored into `summed` (x, residual, norm_weight and summed [k],
// contiguous and 16-byte aligned). Blocks multiply `tiles` (1 or 2) tiles of 16 outputs (n
// a multiple of 16 tiles). K is split between `splits` blocks a tile of outputs (at most
// one per 64 inputs), whose float32 sums go to `split_sums` ([splits, n], the caller's
// scratch; unused with one split) before a second kernel adds them. Launched on `stream`
// of device `device`, dependently where `dependent` (sm_90 on). Returns 0, a CUDA error or
// a pagoda_cuda::Error.
int pagoda_fp8_row(int dtype, int input, void* out, const void* x, const void* residual,
                   const void* norm_weight, void* summed, float eps, const void* codes,
                   const void* row_scales, const void* static_scale, const void* bias, int n,
                   int k, int64_t stride_wn, int splits, void* split_sums, int tiles,
                   int dependent, int device, void* stream) {
  if (bad_shape(input, n, k, stride_wn, splits, split_sums != nullptr, tiles)) {
    return pagoda_cuda::kBadShape;
  }
  if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) return e;
  auto s = static_cast<cudaStream_t>(stream);
  auto sums = static_cast<float*>(split_sums);
  switch (dtype) {
    case pagoda_cuda::kBfloat16:
      return launch<__nv_bfloat16>(input, out, x, residual, norm_weight, summed, eps, codes,
                                   row_scales, static_scale, bias, n, k, stride_wn, splits, sums,
                                   tiles, dependent, s);
    case pagoda_cuda::kFloat16:
      return launch<__half>(input, out, x, residual, norm_weight, summed, eps, codes,
                            row_scales, static_scale, bias, n, k, stride_wn, splits, sums, tiles,
                            dependent, s);
    default:
      return pagoda_cuda::kBadType;
  }
}

}  // extern "C"
