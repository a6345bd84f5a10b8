// 16 float lanes (loaded from float32 or bfloat16) and 16 bytes, in the registers of the build that includes this file:
// one AVX-512 register (PAGODA_VEC_AVX512), two AVX2 ones (PAGODA_VEC_AVX2), or plain
// arrays the compiler vectorizes as it can (any CPU). Included inside each build's own
// anonymous namespace (kernels.inc), so every build has its own copy of these inline
// functions, compiled for its instruction set.

#if defined(PAGODA_VEC_AVX512) || defined(PAGODA_VEC_AVX2)
// The 8 lanes of a 256-bit register summed (both builds have 256-bit registers).
inline float hsum8(__m256 a) {
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}
#endif

#if defined(PAGODA_VEC_AVX512)

struct F32x16 { __m512 v; };
struct U8x16 { __m128i v; };
inline F32x16 zeros() { return {_mm512_setzero_ps()}; }
inline F32x16 splat(float a) { return {_mm512_set1_ps(a)}; }
inline F32x16 load(const float* p) { return {_mm512_loadu_ps(p)}; }
inline void store(float* p, F32x16 a) { _mm512_storeu_ps(p, a.v); }
inline F32x16 fma(F32x16 a, F32x16 b, F32x16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
inline F32x16 add(F32x16 a, F32x16 b) { return {_mm512_add_ps(a.v, b.v)}; }
inline float hsum(F32x16 a) { return _mm512_reduce_add_ps(a.v); }
inline U8x16 load_u8(const uint8_t* p) { return {_mm_loadu_si128((const __m128i*)p)}; }
inline U8x16 low_nibbles(U8x16 a) { return {_mm_and_si128(a.v, _mm_set1_epi8(0x0F))}; }
inline U8x16 high_nibbles(U8x16 a) {
  return {_mm_and_si128(_mm_srli_epi16(a.v, 4), _mm_set1_epi8(0x0F))};
}
inline F32x16 to_f32(U8x16 a) { return {_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(a.v))}; }
inline F32x16 load_bf16(const uint16_t* p) {
  const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p));
  return {_mm512_castsi512_ps(_mm512_slli_epi32(wide, 16))};
}

#elif defined(PAGODA_VEC_AVX2)

struct F32x16 { __m256 lo, hi; };
struct U8x16 { __m128i v; };
inline F32x16 zeros() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
inline F32x16 splat(float a) { return {_mm256_set1_ps(a), _mm256_set1_ps(a)}; }
inline F32x16 load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
inline void store(float* p, F32x16 a) {
  _mm256_storeu_ps(p, a.lo);
  _mm256_storeu_ps(p + 8, a.hi);
}
inline F32x16 fma(F32x16 a, F32x16 b, F32x16 c) {
  return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
inline F32x16 add(F32x16 a, F32x16 b) {
  return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)};
}
inline float hsum(F32x16 a) { return hsum8(_mm256_add_ps(a.lo, a.hi)); }
inline U8x16 load_u8(const uint8_t* p) { return {_mm_loadu_si128((const __m128i*)p)}; }
inline U8x16 low_nibbles(U8x16 a) { return {_mm_and_si128(a.v, _mm_set1_epi8(0x0F))}; }
inline U8x16 high_nibbles(U8x16 a) {
  return {_mm_and_si128(_mm_srli_epi16(a.v, 4), _mm_set1_epi8(0x0F))};
}
inline F32x16 to_f32(U8x16 a) {
  return {_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(a.v)),
          _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(a.v, a.v)))};
}
inline F32x16 load_bf16(const uint16_t* p) {
  const __m256i lo = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p));
  const __m256i hi = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(p + 8)));
  return {_mm256_castsi256_ps(_mm256_slli_epi32(lo, 16)),
          _mm256_castsi256_ps(_mm256_slli_epi32(hi, 16))};
}

#else

struct F32x16 { float v[16]; };
struct U8x16 { uint8_t v[16]; };
#define PAGODA_LANES(expr) for (int i = 0; i < 16; ++i) expr
inline F32x16 zeros() { return F32x16{}; }
inline F32x16 splat(float a) { F32x16 r; PAGODA_LANES(r.v[i] = a); return r; }
inline F32x16 load(const float* p) { F32x16 r; std::memcpy(r.v, p, sizeof r.v); return r; }
inline void store(float* p, F32x16 a) { std::memcpy(p, a.v, sizeof a.v); }
inline F32x16 fma(F32x16 a, F32x16 b, F32x16 c) {
  PAGODA_LANES(c.v[i] += a.v[i] * b.v[i]);
  return c;
}
inline F32x16 add(F32x16 a, F32x16 b) { PAGODA_LANES(a.v[i] += b.v[i]); return a; }
inline float hsum(F32x16 a) { float s = 0.f; PAGODA_LANES(s += a.v[i]); return s; }
inline U8x16 load_u8(const uint8_t* p) { U8x16 r; std::memcpy(r.v, p, sizeof r.v); return r; }
inline U8x16 low_nibbles(U8x16 a) { PAGODA_LANES(a.v[i] &= 0x0F); return a; }
inline U8x16 high_nibbles(U8x16 a) { PAGODA_LANES(a.v[i] >>= 4); return a; }
inline F32x16 to_f32(U8x16 a) { F32x16 r; PAGODA_LANES(r.v[i] = a.v[i]); return r; }
inline F32x16 load_bf16(const uint16_t* p) {
  F32x16 r;
  PAGODA_LANES(r.v[i] = __builtin_bit_cast(float, uint32_t(p[i]) << 16));
  return r;
}
#undef PAGODA_LANES

#endif
