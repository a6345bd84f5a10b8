// The kernels built once per instruction set (kernels_<isa>.cpp), as a table of plain
// functions over raw pointers: these files include no PyTorch header, so nothing of
// PyTorch's is compiled with an instruction set the CPU may lack. ops.cpp calls them.
#pragma once

#include <cstdint>

namespace pagoda_cpu {

// A weight-only quantized weight: N rows of K codes (4-bit: two a byte, in blocks of 32
// weights whose byte j holds weight j in its low nibble and weight j + 16 in its high
// one, GGUF's order; 8-bit: one a byte), float32 scale and offset per group of `group`
// inputs (a multiple of 32): w = code * scale + offset.
struct WoqWeight {
  const uint8_t* codes;
  const float* scales;
  const float* offsets;
  int64_t n, k, group, bits;
};

struct Kernels {
  const char* isa;
  // y[m, n] = x[m, :] . w[n, :] (+ bias[n]) for all m < rows and n0 <= n < n1;
  // x float32 [rows, k], y float32 [rows, w.n], bias float32 [w.n] or null.
  void (*woq_gemv)(const WoqWeight& w, const float* x, int64_t rows, const float* bias,
                   float* y, int64_t n0, int64_t n1);
  // out[n, :] = w[n, :] for n0 <= n < n1; out float32 [w.n, w.k].
  void (*woq_dequantize)(const WoqWeight& w, float* out, int64_t n0, int64_t n1);
};

// The table of each build, or null where this compiler or machine has no such build.
const Kernels* kernels_avx512();
const Kernels* kernels_avx2();
const Kernels* kernels_generic();

}  // namespace pagoda_cpu
