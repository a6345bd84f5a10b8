// The AVX-512 kernels again, for CPUs that also have AVX512-VNNI (Ice Lake, Zen 4 on):
// vpdpbusd sums a block's 32 code-by-activation products in one instruction in gguf_a8's
// GEMV (woq_q8.inc), 8-bit codes as they are; every other kernel is the AVX-512 build's.
// setup.py gives this file those target flags; without them it is an empty stub.
#include "kernels.h"
#if defined(__AVX512F__) && defined(__FMA__) && defined(__AVX512VNNI__)
#include <immintrin.h>

#include <cstring>
#define PAGODA_ISA avx512_vnni
#define PAGODA_VEC_AVX512
#include "kernels.inc"
#else
const pagoda_cpu::Kernels* pagoda_cpu::kernels_avx512_vnni() { return nullptr; }
#endif
