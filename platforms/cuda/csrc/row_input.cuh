// The input of a one-row linear in a fused decode layer: the row as it is, or the input of
// the RMSNorm before the linear, which the linear's kernel computes itself (each block the
// whole row, into shared memory) instead of launching the norm's own kernel.
#pragma once

#include <cstdint>

#include "common.cuh"

namespace pagoda_cuda {

// What x is: the row as it is, or the input of the RMSNorm before the linear (with or
// without a residual added first).
enum Input { kPlain = 0, kNormed = 1, kNormedResidual = 2 };
constexpr int kMaxRowInputs = 16384;  // a normed row's k: 32 KB of shared memory at most

// The input of a normed row's linear, one row of k values, to read and (summed) to write.
template <typename T>
struct RowNorm {
  const T* residual;  // added to x first (kNormedResidual)
  const T* weight;    // the norm's weight [k]
  T* summed;          // x + residual, stored by the grid's first block (kNormedResidual)
  float eps;
};

// row[0, k / 8) = rms_norm(x (+ residual)) * weight, one row of k values (a multiple of 8)
// in 16-byte vectors, by every thread of the block (THREADS of them); the grid's first
// block also stores x + residual. As pagoda.kernels.triton.norm's kernel computes it: the
// sum rounded to T, float32 squares summed, 1 / sqrt(mean + eps), each value times it,
// times the weight, rounded to T. Returns once the whole row is in `row`.
template <typename T, int INPUT, int THREADS>
__device__ __forceinline__ void normed_row(uint4* row, const T* x, const RowNorm<T>& norm,
                                           int k) {
  const int vectors = k / 8;
  const bool first_block = blockIdx.x == 0 && blockIdx.y == 0;
  float squares = 0.0f;
  for (int v = threadIdx.x; v < vectors; v += THREADS) {
    float f[8];
    unpack8<T>(__ldg(reinterpret_cast<const uint4*>(x) + v), f);
    if constexpr (INPUT == kNormedResidual) {
      float r[8];
      unpack8<T>(__ldg(reinterpret_cast<const uint4*>(norm.residual) + v), r);
#pragma unroll
      for (int i = 0; i < 8; ++i) f[i] = to_float(from_float<T>(f[i] + r[i]));
    }
    const uint4 summed = pack8<T>(f);
    if (INPUT == kNormedResidual && first_block) reinterpret_cast<uint4*>(norm.summed)[v] = summed;
    row[v] = summed;
#pragma unroll
    for (int i = 0; i < 8; ++i) squares = fmaf(f[i], f[i], squares);
  }
  const float total = block_all_reduce<THREADS>(squares, [](float a, float b) { return a + b; });
  const float inv_rms = 1.0f / sqrtf(total / static_cast<float>(k) + norm.eps);
  for (int v = threadIdx.x; v < vectors; v += THREADS) {  // this thread's own vectors
    float f[8], w[8];
    unpack8<T>(row[v], f);
    unpack8<T>(__ldg(reinterpret_cast<const uint4*>(norm.weight) + v), w);
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = f[i] * inv_rms * w[i];
    row[v] = pack8<T>(f);
  }
  __syncthreads();
}

}  // namespace pagoda_cuda
