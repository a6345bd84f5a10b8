// 4-bit weight-only linear for a few rows on tensor cores: out = x W^T (+ bias), for 1 to 16
// rows of x, where W [N, K] is stored as 4-bit codes with a float32 scale and an integer
// zero point per row and group of GROUP inputs, W[n, k] = (code - z[n, k / GROUP]) *
// s[n, k / GROUP]
// (pagoda.quant.tensors.GroupQuantWeight whose offsets are -z * s, the codes in
// pagoda.kernels.triton.woq_gemm's layout).
//
// Layout read as it is (no second copy of the weight): codes in int32 words [N, K / 8],
// eight consecutive inputs a word, the code of input 8w + f in bit field bitrev3(f). So the
// fields p and p + 4 (bits 4p and 4p + 16) hold two adjacent inputs, 2 bitrev2(p) and
// 2 bitrev2(p) + 1, and one AND-OR of the word shifted right by 4p turns them into a pair of
// 16-bit floats M + code (M = 128 for bfloat16, 1024 for float16: the code lands in the
// mantissa's low bits), which a subtraction of M + z makes code - z: a small integer, exact.
// Groups of 128 inputs or more hold a warp step's chunk whole: the MMAs multiply the codes
// as they are (every product exact) and each chunk's float32 sums are scaled once. Smaller
// groups are scaled per weight before the MMA (a multiply by the scale in the 16-bit type,
// rounded once, as the GEMM's dequantized tiles are). Two or three such operations make two
// weights.
//
// Each warp multiplies 16 weight rows by up to 8 (NT = 1) or 16 (NT = 2) rows of x with
// mma.sync m16n8k16 (float32 accumulation): the weights are its A operand, x its B operand
// (a column per row of x). A lane (g, t) of the warp holds, per 128 inputs, one 16-byte
// load of rows g and g + 8 (words 4t to 4t + 3 of the chunk) and the matching 64 bytes of
// its column's x; the MMA's k index 2t (+1, +8, +9) stands for whichever inputs lane t
// loaded, which is all the product needs, since every lane agrees on it. A block's warps
// split K; their partial sums meet in shared memory.
//
// One row of x may come as the input of the RMSNorm before the linear instead
// (pagoda_woq4_mma_row, a one-sequence decode step's qkv and gate_up projections): each block
// then computes x = rms_norm(h (+ residual)) * norm_weight into shared memory first, in the
// float32 arithmetic of the norm's own kernel and rounded to T as it stores it, and the first
// block also stores h + residual (the residual stream after the add). That saves the norm's
// own launch, at the price of every block reading the row (a few KB, from L2) before its
// first product.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common.cuh"
#include "row_input.cuh"

namespace {

using pagoda_cuda::from_float;
using pagoda_cuda::kMaxRowInputs;
using pagoda_cuda::kNormed;
using pagoda_cuda::kNormedResidual;
using pagoda_cuda::kPlain;
using pagoda_cuda::RowNorm;
using pagoda_cuda::to_float;
using pagoda_cuda::unpack8;

constexpr int kRows = pagoda_cuda::kMmaRows;  // weight rows a block (the MMA's M)
constexpr int kChunk = 128;  // inputs a warp step: 4 lanes x 4 words x 8 codes

template <typename T>
struct Half;

template <>
struct Half<__nv_bfloat16> {
  using T2 = __nv_bfloat162;
  static constexpr uint32_t kMagic = 0x43004300u;  // 128.0 in both halves
  static __device__ T2 pair(__nv_bfloat16 v) { return __bfloat162bfloat162(v); }
  static __device__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <>
struct Half<__half> {
  using T2 = __half2;
  static constexpr uint32_t kMagic = 0x64006400u;  // 1024.0 in both halves
  static __device__ T2 pair(__half v) { return __half2half2(v); }
  static __device__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    pagoda_cuda::mma_f16(c, a, b0, b1);
  }
};

// code - z of fields p and p + 4 of `word` (already shifted right by 4p), as a pair (times
// `scale` where SCALED); `biased_zero` holds M + z.
template <typename T, bool SCALED>
__device__ __forceinline__ uint32_t dequantize_pair(uint32_t word, typename Half<T>::T2 scale,
                                                    typename Half<T>::T2 biased_zero) {
  using T2 = typename Half<T>::T2;
  // (word & 0x000F000F) | magic in one LOP3 (0xEA: (a & b) | c); written as C, ptxas emits
  // two, each constant an immediate.
  uint32_t biased;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(biased) : "r"(word), "n"(0x000F000F),
      "r"(Half<T>::kMagic));
  T2 weight = __hsub2(*reinterpret_cast<T2*>(&biased), biased_zero);  // code - z: exact
  if constexpr (SCALED) weight = __hmul2(weight, scale);
  return *reinterpret_cast<uint32_t*>(&weight);
}

// One 128-input chunk of a warp: words `wa` (row g) and `wb` (row g + 8), four each, their
// groups' scales (where SCALED) and M + zero points, and x's 32 inputs per column tile in
// `xs`.
template <typename T, int NT, bool SCALED>
__device__ __forceinline__ void multiply_chunk(float (&acc)[NT][4], const uint4& wa,
                                               const uint4& wb, typename Half<T>::T2 sa,
                                               typename Half<T>::T2 za, typename Half<T>::T2 sb,
                                               typename Half<T>::T2 zb,
                                               const uint4 (&xs)[NT][4]) {
  const uint32_t a_words[4] = {wa.x, wa.y, wa.z, wa.w};
  const uint32_t b_words[4] = {wb.x, wb.y, wb.z, wb.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint32_t a[4], b[4];  // pairs of inputs (0, 1), (4, 5), (2, 3), (6, 7) of word i
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      a[p] = dequantize_pair<T, SCALED>(a_words[i] >> (4 * p), sa, za);
      b[p] = dequantize_pair<T, SCALED>(b_words[i] >> (4 * p), sb, zb);
    }
    const uint32_t first[4] = {a[0], b[0], a[1], b[1]};
    const uint32_t second[4] = {a[2], b[2], a[3], b[3]};
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      Half<T>::mma(acc[j], first, xs[j][i].x, xs[j][i].z);
      Half<T>::mma(acc[j], second, xs[j][i].y, xs[j][i].w);
    }
  }
}

// WHOLE: the group holds whole chunks (128 inputs or more), scaled after their MMAs.
// INPUT: what x is (Input; anything but kPlain with NT = 1 and one row).
template <typename T, int NT, int WARPS, bool WHOLE, int INPUT = kPlain>
__global__ void __launch_bounds__(WARPS * 32)
    woq4_mma_kernel(T* __restrict__ out, const T* __restrict__ x,
                    const uint32_t* __restrict__ words, const float* __restrict__ scales,
                    const T* __restrict__ zeros, const T* __restrict__ bias, int m, int k,
                    int64_t stride_xm, int64_t stride_om, int64_t stride_wn, int64_t stride_sn,
                    int group_shift, RowNorm<T> norm) {
  using H = Half<T>;
  using T2 = typename H::T2;
  static_assert(INPUT == kPlain || NT == 1, "a normed input is one row");
  __shared__ float partial[WARPS][kRows][8 * NT];
  extern __shared__ uint4 row_input[];  // the normed row, k / 8 vectors (INPUT != kPlain)

  const auto [warp, g, t, begin, end, row] = pagoda_cuda::lane_tile<WARPS>(k / kChunk);
  const uint4* wa = reinterpret_cast<const uint4*>(words + row * stride_wn) + t;
  const uint4* wb = reinterpret_cast<const uint4*>(words + (row + 8) * stride_wn) + t;
  const float* sa = scales + row * stride_sn;
  const float* sb = sa + 8 * stride_sn;
  const T* za = zeros + row * stride_sn;
  const T* zb = za + 8 * stride_sn;
  uint32_t magic_bits = H::kMagic;
  const T2 magic = *reinterpret_cast<T2*>(&magic_bits);
  const uint4* xr[NT];
  bool live[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int col = g + 8 * j;
    live[j] = col < m;
    xr[j] = reinterpret_cast<const uint4*>(x + (live[j] ? col : 0) * stride_xm + 32 * t);
  }

  float acc[NT][4] = {};
  uint4 next_a = {}, next_b = {};
  if (begin < end) {
    next_a = __ldcs(wa + 4 * begin);
    next_b = __ldcs(wb + 4 * begin);
  }
  // The first weights are on their way; x, and out's memory, may still be the kernel
  // ahead's while this one was launched dependently.
  pagoda_cuda::wait_for_inputs();
  if constexpr (INPUT != kPlain) {
    pagoda_cuda::normed_row<T, INPUT, WARPS * 32>(row_input, x, norm, k);
  }
  for (int c = begin; c < end; ++c) {
    const uint4 cur_a = next_a, cur_b = next_b;
    if (c + 1 < end) {  // the next chunk's weights stream while this one multiplies
      next_a = __ldcs(wa + 4 * (c + 1));
      next_b = __ldcs(wb + 4 * (c + 1));
    }
    const int grp = (c * kChunk + 32 * t) >> group_shift;
    const T2 z_a = __hadd2(H::pair(za[grp]), magic);
    const T2 z_b = __hadd2(H::pair(zb[grp]), magic);
    uint4 xs[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if constexpr (INPUT == kPlain) {
          xs[j][i] = live[j] ? __ldg(xr[j] + 16 * c + i) : make_uint4(0, 0, 0, 0);
        } else {  // the same inputs of the row in shared memory
          xs[j][i] = live[j] ? row_input[16 * c + 4 * t + i] : make_uint4(0, 0, 0, 0);
        }
      }
    }
    if constexpr (WHOLE) {
      float sums[NT][4] = {};
      multiply_chunk<T, NT, false>(sums, cur_a, cur_b, T2{}, z_a, T2{}, z_b, xs);
      const float s_a = sa[grp], s_b = sb[grp];
#pragma unroll
      for (int j = 0; j < NT; ++j) {  // fragments 0, 1: row g; 2, 3: row g + 8
        acc[j][0] = fmaf(s_a, sums[j][0], acc[j][0]);
        acc[j][1] = fmaf(s_a, sums[j][1], acc[j][1]);
        acc[j][2] = fmaf(s_b, sums[j][2], acc[j][2]);
        acc[j][3] = fmaf(s_b, sums[j][3], acc[j][3]);
      }
    } else {
      multiply_chunk<T, NT, true>(acc, cur_a, cur_b, H::pair(from_float<T>(sa[grp])), z_a,
                                  H::pair(from_float<T>(sb[grp])), z_b, xs);
    }
  }

  // Lane (g, t) holds rows g and g + 8, columns 2t and 2t + 1 of each tile.
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    partial[warp][g][8 * j + 2 * t] = acc[j][0];
    partial[warp][g][8 * j + 2 * t + 1] = acc[j][1];
    partial[warp][g + 8][8 * j + 2 * t] = acc[j][2];
    partial[warp][g + 8][8 * j + 2 * t + 1] = acc[j][3];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kRows * m; i += WARPS * 32) {
    const int r = i % kRows, col = i / kRows;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) sum += partial[w][r][col];
    const int64_t n_index = static_cast<int64_t>(blockIdx.x) * kRows + r;
    if (bias != nullptr) sum += to_float(bias[n_index]);
    out[col * stride_om + n_index] = from_float<T>(sum);
  }
}

template <typename T>
using Kernel = decltype(&woq4_mma_kernel<T, 1, 8, true>);

// The kernel for m rows (one 8-column MMA tile up to 8, two above; a normed row is one),
// `warps` warps and groups of 1 << group_shift inputs.
template <typename T, bool WHOLE, int INPUT>
Kernel<T> pick(int m, int warps) {
  if constexpr (INPUT == kPlain) {
    if (m > 8) {  // 4 or 8 warps (bad_shape)
      return warps == 4 ? woq4_mma_kernel<T, 2, 4, WHOLE> : woq4_mma_kernel<T, 2, 8, WHOLE>;
    }
  }
  return warps == 4 ? woq4_mma_kernel<T, 1, 4, WHOLE, INPUT>
         : warps == 8 ? woq4_mma_kernel<T, 1, 8, WHOLE, INPUT>
                      : woq4_mma_kernel<T, 1, 16, WHOLE, INPUT>;
}

template <typename T, int INPUT = kPlain>
Kernel<T> pick(int m, int warps, int group_shift) {
  return group_shift >= 7 ? pick<T, true, INPUT>(m, warps) : pick<T, false, INPUT>(m, warps);
}

template <typename T>
cudaError_t launch(Kernel<T> kernel, size_t shared_bytes, void* out, const void* x,
                   const void* words, const void* scales, const void* zeros, const void* bias,
                   int m, int n, int k, int64_t stride_xm, int64_t stride_om, int64_t stride_wn,
                   int64_t stride_sn, int group_shift, int warps, const RowNorm<T>& norm,
                   bool dependent, cudaStream_t stream) {
  return pagoda_cuda::launch_kernel(
      kernel, n / kRows, warps * 32, shared_bytes, stream, dependent, static_cast<T*>(out),
      static_cast<const T*>(x), static_cast<const uint32_t*>(words),
      static_cast<const float*>(scales), static_cast<const T*>(zeros),
      static_cast<const T*>(bias), m, k, stride_xm, stride_om, stride_wn, stride_sn,
      group_shift, norm);
}

// One row of x that is an RMSNorm's input (pagoda_woq4_mma_row), the row in shared memory.
template <typename T>
cudaError_t launch_row(int input, void* out, const void* x, const void* residual,
                       const void* norm_weight, void* summed, float eps, const void* words,
                       const void* scales, const void* zeros, const void* bias, int n, int k,
                       int64_t stride_wn, int64_t stride_sn, int group_shift, int warps,
                       bool dependent, cudaStream_t stream) {
  const RowNorm<T> norm{static_cast<const T*>(residual), static_cast<const T*>(norm_weight),
                        static_cast<T*>(summed), eps};
  const Kernel<T> kernel = input == kNormedResidual
                              ? pick<T, kNormedResidual>(1, warps, group_shift)
                              : pick<T, kNormed>(1, warps, group_shift);
  return launch<T>(kernel, static_cast<size_t>(k) * sizeof(T),
                   out, x, words, scales, zeros, bias, 1, n, k, k, n, stride_wn, stride_sn,
                   group_shift, warps, norm, dependent, stream);
}

bool bad_shape(int m, int n, int k, int group_shift, int warps) {
  return m < 1 || m > 16 || n % kRows != 0 || k <= 0 || k % kChunk != 0 || group_shift < 5 ||
         group_shift > 8 || (warps != 4 && warps != 8 && (warps != 16 || m > 8));
}

}  // namespace

extern "C" {

// out [m, n] (row stride stride_om) = x [m, k] (row stride stride_xm) W^T + bias, with
// dtype 0 bfloat16, 1 float16 (x, zeros, bias and out); words [n, stride_wn]; float32
// scales and zero points (integers 0 to 15) [n, stride_sn]; group = 1 << group_shift
// inputs, 32 to 256;
// 1 <= m <= 16, n a multiple of 16, k of 128; warps 4, 8 or (m <= 8) 16 split K. x and the
// words 16-byte aligned (rows included). Launched on `stream` of CUDA device `device`, while the
// kernel ahead still runs where `dependent` (sm_90 on: the weights' first loads overlap its
// end). Returns 0, a CUDA error or a pagoda_cuda::Error.
int pagoda_woq4_mma(int dtype, void* out, const void* x, const void* words, const void* scales,
                    const void* zeros, const void* bias, int m, int n, int k,
                    int64_t stride_xm, int64_t stride_om, int64_t stride_wn, int64_t stride_sn,
                    int group_shift, int warps, int dependent, int device, void* stream) {
  if (bad_shape(m, n, k, group_shift, warps)) return pagoda_cuda::kBadShape;
  if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) return e;
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case pagoda_cuda::kBfloat16:
      return launch<__nv_bfloat16>(pick<__nv_bfloat16>(m, warps, group_shift), 0, out, x,
                                   words, scales, zeros, bias, m, n, k, stride_xm, stride_om,
                                   stride_wn, stride_sn, group_shift, warps, {}, dependent, s);
    case pagoda_cuda::kFloat16:
      return launch<__half>(pick<__half>(m, warps, group_shift), 0, out, x, words, scales,
                            zeros, bias, m, n, k, stride_xm, stride_om, stride_wn, stride_sn,
                            group_shift, warps, {}, dependent, s);
    default:
      return pagoda_cuda::kBadType;
  }
}

// The same for one row whose x is the input of an RMSNorm: out [1, n] = (rms_norm(x (+
// residual), eps) * norm_weight) W^T + bias, with `input` 1 (no residual) or 2 (x +
// residual, which is also stored into `summed`); x, residual, norm_weight and summed [k]
// contiguous and 16-byte aligned, k at most 16384 (the row is kept in shared memory).
int pagoda_woq4_mma_row(int dtype, int input, void* out, const void* x, const void* residual,
                        const void* norm_weight, void* summed, float eps, const void* words,
                        const void* scales, const void* zeros, const void* bias, int n, int k,
                        int64_t stride_wn, int64_t stride_sn, int group_shift, int warps,
                        int dependent, int device, void* stream) {
  if (bad_shape(1, n, k, group_shift, warps) || (input != kNormed && input != kNormedResidual) ||
      k > kMaxRowInputs) {
    return pagoda_cuda::kBadShape;
  }
  if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) return e;
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case pagoda_cuda::kBfloat16:
      return launch_row<__nv_bfloat16>(input, out, x, residual, norm_weight, summed, eps, words,
                                       scales, zeros, bias, n, k, stride_wn, stride_sn,
                                       group_shift, warps, dependent, s);
    case pagoda_cuda::kFloat16:
      return launch_row<__half>(input, out, x, residual, norm_weight, summed, eps, words, scales,
                                zeros, bias, n, k, stride_wn, stride_sn, group_shift, warps,
                                dependent, s);
    default:
      return pagoda_cuda::kBadType;
  }
}

}  // extern "C"
