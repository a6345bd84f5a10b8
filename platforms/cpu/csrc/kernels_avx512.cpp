// The kernels for x86-64 CPUs with AVX-512 (F, BW, VL, DQ) and FMA (setup.py gives
// this file those target flags; without them it is an empty stub).
#include "kernels.h"
#if defined(__AVX512F__) && defined(__FMA__)
#include <immintrin.h>

#include <cstring>
#define PAGODA_ISA avx512
#define PAGODA_VEC_AVX512
#include "kernels.inc"
#else
const pagoda_cpu::Kernels* pagoda_cpu::kernels_avx512() { return nullptr; }
#endif
