// The kernels for x86-64 CPUs with AVX-512 (F, BW, VL, DQ) and FMA.
#include "kernels.h"
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include <cstring>
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#define PAGODA_ISA avx512
#define PAGODA_VEC_AVX512
#include "kernels.inc"
#else
const pagoda_cpu::Kernels* pagoda_cpu::kernels_avx512() { return nullptr; }
#endif
