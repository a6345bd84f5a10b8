// The kernels for x86-64 CPUs with AVX2 and FMA (setup.py gives this file those target
// flags; without them it is an empty stub).
#include "kernels.h"
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include <cstring>
#define PAGODA_ISA avx2
#define PAGODA_VEC_AVX2
#include "kernels.inc"
#else
const pagoda_cpu::Kernels* pagoda_cpu::kernels_avx2() { return nullptr; }
#endif
