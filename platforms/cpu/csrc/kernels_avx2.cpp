// The kernels for x86-64 CPUs with AVX2 and FMA.
#include "kernels.h"
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include <cstring>
#pragma GCC target("avx2,fma,f16c")
#define PAGODA_ISA avx2
#define PAGODA_VEC_AVX2
#include "kernels.inc"
#else
const pagoda_cpu::Kernels* pagoda_cpu::kernels_avx2() { return nullptr; }
#endif
