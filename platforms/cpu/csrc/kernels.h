// The kernels built once per instruction set (kernels_<isa>.cpp), as a table of plain
// functions over raw pointers: these files include no PyTorch header, so nothing of
// PyTorch's is compiled with an instruction set the CPU may lack. ops.cpp calls them.
#pragma once

#include <cstdint>

namespace pagoda_cpu {

// A weight-only quantized weight: N rows of K codes (4-bit: two a byte, in blocks of 32
// weights whose byte j holds weight j in its low nibble and weight j + 16 in its high
// one, GGUF's order; 8-bit: one a byte), float32 scale and offset per group of `group`
// inputs (32 << group_shift): w = code * scale + offset.
struct WoqWeight {
  const uint8_t* codes;
  const float* scales;
  // Null for symmetric codes (GGUF Q4_0 and Q8_0, GPTQ's symmetric int4): every offset is
  // -2^(bits-1) * scale, so none is stored or read.
  const float* offsets;
  int64_t n, k, group_shift, bits;
};

// Rows of activations rounded to int8 per block of 32 inputs (a weight's act_block; see
// woq_q8.inc): x[r, i] = q[r, i] * d[r, i / 32]; sums[r, g] is the rounded row summed over
// the weight's group g of inputs.
struct Q8Rows {
  const int8_t* q;     // [rows, k]
  const float* d;      // [rows, k / 32]
  const float* sums;   // [rows, k / group]
};

// Activations are float32 or bfloat16 (the Dtype of every pointer named so below);
// rows of a matrix are `stride` elements apart, their entries contiguous. Each function
// handles rows r0 <= r < r1 (the caller splits rows across threads).
enum class Dtype { kFloat32 = 0, kBFloat16 = 1 };

struct RotaryArgs {
  const int64_t* positions;  // [T]: the cos/sin row of each token
  const float* cos_sin;      // [*, rot_dim]: cos in the first half, sin in the second
  int64_t rot_dim;
  bool is_neox;              // pairs (i, i + rot_dim / 2), else (2i, 2i + 1)
  int64_t head_size;
};

// One decode query token per sequence against its paged KV cache, grouped-query.
struct DecodeAttentionArgs {
  const void* query;        // [B, H, D], contiguous
  const void* cache;        // [2, blocks, block_size, KVH, D], contiguous, query's dtype
  const int32_t* tables;    // [B, table_stride] block numbers
  const int64_t* seq_lens;  // [B]
  void* out;                // [B, H, D], query's dtype
  int64_t table_stride, blocks, block_size, kv_heads, heads, head_size;
  float scale, soft_cap;    // soft_cap 0: none
  int64_t window;           // attend to the last `window` positions (0: all)
  int64_t splits;           // parts each pair's attended positions are split into
  float* partial;           // splits > 1: [pairs * splits, heads / kv_heads, head_size + 2]
};

struct Kernels {
  const char* isa;
  // out = rms_norm(x + residual) * weight, summed = x + residual rounded to the dtype
  // (residual and summed null: out = rms_norm(x) * weight); weight float32 [d].
  void (*rms_norm)(Dtype dtype, const void* x, int64_t x_stride, const void* residual,
                   int64_t residual_stride, const float* weight, float eps, int64_t d,
                   void* out, void* summed, int64_t r0, int64_t r1);
  // out[r, :d] = silu(x[r, :d]) * x[r, d:2d]; out contiguous [rows, d].
  void (*silu_and_mul)(Dtype dtype, const void* x, int64_t x_stride, int64_t d, void* out,
                       int64_t r0, int64_t r1);
  // Rotates `heads` heads of token r of x (token stride x_stride, heads head_size apart)
  // into out (contiguous [T, heads, head_size]); dims past rot_dim are copied.
  void (*rotary)(Dtype dtype, const RotaryArgs& args, const void* x, int64_t x_stride,
                 int64_t heads, void* out, int64_t r0, int64_t r1);
  // Attention of parts i0 <= i < i1 of (sequence, KV head) pairs (i = pair * splits +
  // part, pair = b * kv_heads + kv_head): with one part a pair, its output; with several,
  // each part's partial sums, which decode_attention_merge then combines into the output.
  // head_size a multiple of 16 and at most 256; `scores` scratch of ceil(max(seq_lens) /
  // splits) * heads / kv_heads floats (a part's positions).
  void (*decode_attention)(Dtype dtype, const DecodeAttentionArgs& args, float* scores,
                           int64_t i0, int64_t i1);
  // Pairs i0 <= i < i1: their parts' partial sums (splits > 1) combined into the output.
  void (*decode_attention_merge)(Dtype dtype, const DecodeAttentionArgs& args, int64_t i0,
                                 int64_t i1);

  // y[m, n] = x[m, :] . w[n, :] (+ bias[n]) for all m < rows and n0 <= n < n1;
  // x float32 [rows, k], y float32 [rows, w.n], bias float32 [w.n] or null; xsums
  // group_sums' of x where this build has group_sums, else null (and may be null for
  // symmetric 8-bit codes, which have no offset term).
  void (*woq_gemv)(const WoqWeight& w, const float* x, const float* xsums, int64_t rows,
                   const float* bias, float* y, int64_t n0, int64_t n1);
  // sums[r, g] = x[r, :] summed over group g of the k inputs (32 << group_shift a group),
  // for woq_gemv; null where that GEMV takes no sums (it dequantizes each weight).
  void (*group_sums)(const float* x, int64_t rows, int64_t k, int64_t group_shift,
                     float* sums);
  // The same product for many rows: weight rows dequantized gemm_tile_n at a time into
  // wbuf (gemm_tile_n * w.k floats, the caller's, one per thread) and reused for every row.
  void (*woq_gemm)(const WoqWeight& w, const float* x, int64_t rows, const float* bias,
                   float* y, int64_t n0, int64_t n1, float* wbuf);
  // Rows r0 <= r < r1 of x float32 [rows, k] rounded to int8 blocks: q [rows, k], d
  // [rows, k / 32] and sums [rows, k / (32 << group_shift)] (the Q8Rows of a weight).
  void (*quantize_q8)(const float* x, int64_t k, int64_t group_shift, int8_t* q, float* d,
                      float* sums, int64_t r0, int64_t r1);
  // woq_gemv's product of the rounded rows, its blocks' products summed in integers.
  void (*woq_gemv_q8)(const WoqWeight& w, const Q8Rows& x, int64_t rows, const float* bias,
                      float* y, int64_t n0, int64_t n1);
  // out[n, :] = w[n, :] for n0 <= n < n1; out float32 [w.n, w.k].
  void (*woq_dequantize)(const WoqWeight& w, float* out, int64_t n0, int64_t n1);
  int64_t gemm_tile_n;
};

// The table of each build, or null where this compiler or machine has no such build.
const Kernels* kernels_avx512_vnni();
const Kernels* kernels_avx512();
const Kernels* kernels_avx2();
const Kernels* kernels_generic();

}  // namespace pagoda_cpu
