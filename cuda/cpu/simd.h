// The vector layer of the CPU norm kernels: one struct per instruction set, and the two row helpers
// every kernel is written with. Self-contained: it needs <immintrin.h> and c10's two 16-bit float types
// (header-only: c10/util/BFloat16.h, c10/util/Half.h), nothing else from PyTorch.
//
//   Vec512Bf16  AVX-512F/BW/VL/DQ + AVX512-BF16  16 float lanes, one-instruction bf16 conversion
//   Vec512      AVX-512F/BW/VL/DQ                16 float lanes
//   Vec256      AVX2 + FMA + F16C                8 float lanes
//   VecScalar   portable C++                     1 lane
//   S           one element: the tail of a row that is not a multiple of the vector width
//
// Each struct is compiled for its instruction set (the `#pragma GCC target` region around it), and its
// `run(body)` calls `body(Vec{})` with every call inside inlined and compiled for that instruction set
// (GCC's `flatten`). A kernel is a template over the vector type V, so one kernel text gives every build;
// isa.h picks one at run time. No `-m` flag applies to the whole library, so it loads on any x86-64
// processor.
//
// Every conversion to a 16-bit type rounds to nearest, ties to even, exactly as c10::BFloat16(float) and
// c10::Half(float) do, so a vector lane and the scalar tail give the same bits for the same element.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace normlab_cpu {

// Scalar conversions; the 16-bit ones round to nearest even (c10's own conversions).
inline float to_f(float v) { return v; }
inline float to_f(c10::BFloat16 v) { return static_cast<float>(v); }
inline float to_f(c10::Half v) { return static_cast<float>(v); }
inline float from_f(float v, float*) { return v; }
inline c10::BFloat16 from_f(float v, c10::BFloat16*) { return c10::BFloat16(v); }
inline c10::Half from_f(float v, c10::Half*) { return c10::Half(v); }

// One lane: the tail of a row (hidden sizes that are not a multiple of the vector width) uses the same
// operations in the same order as a vector lane, so every element gets identical bits either way.
struct S {
  static constexpr int W = 1;
  using R = float;
  static inline R set1(float v) { return v; }
  static inline R add(R a, R b) { return a + b; }
  static inline R sub(R a, R b) { return a - b; }
  static inline R mul(R a, R b) { return a * b; }
  static inline R fmadd(R a, R b, R c) { return std::fma(a, b, c); }  // one rounding, as the vector FMAs
  template <class T> static inline R load(const T* p) { return to_f(*p); }
  template <class T> static inline void store(T* p, R v) { *p = from_f(v, p); }
  template <class T> static inline R round(R v, T* tag) { return to_f(from_f(v, tag)); }
};

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")
// --8<-- [start:vec512]
struct Vec512 {
  static constexpr int W = 16;  // float lanes per register
  using R = __m512;
  static inline R zero() { return _mm512_setzero_ps(); }
  static inline R set1(float v) { return _mm512_set1_ps(v); }
  static inline R add(R a, R b) { return _mm512_add_ps(a, b); }
  static inline R sub(R a, R b) { return _mm512_sub_ps(a, b); }
  static inline R mul(R a, R b) { return _mm512_mul_ps(a, b); }
  static inline R fmadd(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }  // a*b + c, one rounding
  static inline float hsum(R a) { return _mm512_reduce_add_ps(a); }          // fixed lane order

  static inline R load(const float* p) { return _mm512_loadu_ps(p); }
  // bf16 is the top half of a float32: one masked word permutation puts element k in the top half of
  // lane k and zeros the bottom half (a widening move and a shift would take two instructions)
  static inline R load(const c10::BFloat16* p) {
    const __m512i idx = _mm512_set_epi16(15, 0, 14, 0, 13, 0, 12, 0, 11, 0, 10, 0, 9, 0, 8, 0,
                                         7, 0, 6, 0, 5, 0, 4, 0, 3, 0, 2, 0, 1, 0, 0, 0);
    const __m512i raw = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, idx, raw));
  }
  static inline R load(const c10::Half* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static inline __m512i bf16_bits(R v) {  // round-to-nearest-even to bf16; NaN -> 0x7FC0 as in c10
    __m512i u = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_mask_blend_epi32(nan, r, _mm512_set1_epi32(0x7FC0));
  }
  static inline __m256i bf16_pack(R v) { return _mm512_cvtepi32_epi16(bf16_bits(v)); }
  // round to nearest even to bf16, kept as a float32: bf16_bits without its final shift, the low half
  // cleared by a mask instead of a shift down and back up (NaN -> 0x7FC00000, c10's NaN widened)
  static inline R bf16_round(R v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_and_si512(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))),
                                       _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)));
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(nan, r, _mm512_set1_epi32(0x7FC00000)));
  }
  static inline void store(float* p, R v) { _mm512_storeu_ps(p, v); }
  static inline void store(c10::BFloat16* p, R v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bf16_pack(v));
  }
  static inline void store(c10::Half* p, R v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  // Non-temporal stores (bypass the cache: no read-for-ownership of the destination line). The caller
  // guarantees 64-byte alignment of the first vector; later vectors stay aligned.
  static inline void stream(float* p, R v) { _mm512_stream_ps(p, v); }
  static inline void stream(c10::BFloat16* p, R v) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), bf16_pack(v));
  }
  static inline void stream(c10::Half* p, R v) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  // Round each lane to the element type T and back to float (the "cast to x's dtype" of Llama).
  static inline R round(R v, float*) { return v; }
  static inline R round(R v, c10::BFloat16*) { return bf16_round(v); }
  static inline R round(R v, c10::Half*) {
    return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  // Two vectors -> 32 bf16 (a in the low half): the integer rounding of both, one NaN check for the pair
  // (the blend only when a lane is NaN), then one permutation for all 64 bytes instead of two shifts and
  // two narrowing moves. The same bits as bf16_pack of each.
  static inline __m512i bf16_pack2(R a, R b) {
    const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7FFF);
    const __m512i ua = _mm512_castps_si512(a), ub = _mm512_castps_si512(b);
    // the rounded bf16 is the upper half of each 32-bit lane (bf16_bits before its shift)
    __m512i ra = _mm512_add_epi32(ua, _mm512_add_epi32(_mm512_and_si512(_mm512_srli_epi32(ua, 16), one), half));
    __m512i rb = _mm512_add_epi32(ub, _mm512_add_epi32(_mm512_and_si512(_mm512_srli_epi32(ub, 16), one), half));
    const __mmask16 na = _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), nb = _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q);
    if (__builtin_expect(!_kortestz_mask16_u8(na, nb), 0)) {
      ra = _mm512_mask_blend_epi32(na, ra, _mm512_set1_epi32(0x7FC00000));
      rb = _mm512_mask_blend_epi32(nb, rb, _mm512_set1_epi32(0x7FC00000));
    }
    // one two-source word permutation takes the upper halves, a's 16 then b's: words 2k+1 of a, then of b
    const __m512i odd = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33,
                                         31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    return _mm512_permutex2var_epi16(ra, odd, rb);
  }
  static inline void store2(c10::BFloat16* p, R a, R b) {
    _mm512_storeu_si512(reinterpret_cast<__m512i*>(p), bf16_pack2(a, b));
  }
  static inline void stream2(c10::BFloat16* p, R a, R b) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(p), bf16_pack2(a, b));
  }
  // A pair of vectors at p and p + W for the other types.
  template <class T> static inline void store2(T* p, R a, R b) { store(p, a); store(p + W, b); }
  template <class T> static inline void stream2(T* p, R a, R b) { stream(p, a); stream(p + W, b); }
  static inline void fence() { _mm_sfence(); }
  // Runs body(Vec512{}) with every call inside inlined and compiled for this instruction set.
  template <class F> __attribute__((flatten)) static void run(const F& body) { body(Vec512{}); }
};
// --8<-- [end:vec512]
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,f16c")
// AVX512-BF16 converts 16 lanes in one instruction, rounding to nearest even, but it treats denormal
// inputs as zero and keeps NaN payloads; lanes like that (rare) take Vec512's exact path instead.
// Only the bf16 conversions differ from Vec512; the forwarding overloads keep float and fp16 as they are
// (no `using Vec512::store`: GCC would take two same-signature functions with different targets in one
// scope for function multiversioning).
struct Vec512Bf16 : Vec512 {
  static inline __m256i bf16_pack(R v) {
    const __mmask16 odd = _mm512_fpclass_ps_mask(v, 0xA1);  // QNaN | SNaN | denormal
    if (__builtin_expect(!_kortestz_mask16_u8(odd, odd), 0))  // KORTEST: test the mask without a move to a GPR
      return _mm512_cvtepi32_epi16(bf16_bits(v));
    return (__m256i)_mm512_cvtneps_pbh(v);
  }
  static inline R bf16_widen(__m256i b) {  // 16 bf16 values -> 16 floats (append 16 zero bits)
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
  }
  static inline R bf16_round(R v) {  // one conversion and one widening instead of the 7-op integer RNE
    return bf16_widen(bf16_pack(v));
  }
  // Two vectors -> 32 bf16 in one VCVTNE2PS2BF16 (b to the high half), with one class check for both.
  static inline __m512i bf16_pack2(R a, R b) {
    if (__builtin_expect(!_kortestz_mask16_u8(_mm512_fpclass_ps_mask(a, 0xA1), _mm512_fpclass_ps_mask(b, 0xA1)), 0))
      return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(bf16_bits(a))),
                                _mm512_cvtepi32_epi16(bf16_bits(b)), 1);
    return (__m512i)_mm512_cvtne2ps_pbh(b, a);
  }
  static inline void store(c10::BFloat16* p, R v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bf16_pack(v));
  }
  static inline void stream(c10::BFloat16* p, R v) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), bf16_pack(v));
  }
  static inline R round(R v, c10::BFloat16*) { return bf16_round(v); }
  static inline void store2(c10::BFloat16* p, R a, R b) {
    _mm512_storeu_si512(reinterpret_cast<__m512i*>(p), bf16_pack2(a, b));
  }
  static inline void stream2(c10::BFloat16* p, R a, R b) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(p), bf16_pack2(a, b));
  }
  static inline void store(float* p, R v) { Vec512::store(p, v); }
  static inline void store(c10::Half* p, R v) { Vec512::store(p, v); }
  static inline void stream(float* p, R v) { Vec512::stream(p, v); }
  static inline void stream(c10::Half* p, R v) { Vec512::stream(p, v); }
  static inline R round(R v, float* t) { return Vec512::round(v, t); }
  static inline R round(R v, c10::Half* t) { return Vec512::round(v, t); }
  template <class T> static inline void store2(T* p, R a, R b) { store(p, a); store(p + W, b); }
  template <class T> static inline void stream2(T* p, R a, R b) { stream(p, a); stream(p + W, b); }
  template <class F> __attribute__((flatten)) static void run(const F& body) { body(Vec512Bf16{}); }
};
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
struct Vec256 {
  static constexpr int W = 8;
  using R = __m256;
  static inline R zero() { return _mm256_setzero_ps(); }
  static inline R set1(float v) { return _mm256_set1_ps(v); }
  static inline R add(R a, R b) { return _mm256_add_ps(a, b); }
  static inline R sub(R a, R b) { return _mm256_sub_ps(a, b); }
  static inline R mul(R a, R b) { return _mm256_mul_ps(a, b); }
  static inline R fmadd(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  static inline float hsum(R a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static inline R load(const float* p) { return _mm256_loadu_ps(p); }
  static inline R load(const c10::BFloat16* p) {
    __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
  }
  static inline R load(const c10::Half* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static inline __m256i bf16_bits(R v) {
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
    __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), _mm256_castps_si256(nan));
  }
  static inline __m128i pack16(__m256i r) {  // eight 32-bit lanes (< 2^16) -> eight 16-bit values
    __m256i p = _mm256_packus_epi32(r, r);  // packs within each 128-bit half
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(p, 0x08));
  }
  static inline void store(float* p, R v) { _mm256_storeu_ps(p, v); }
  static inline void store(c10::BFloat16* p, R v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), pack16(bf16_bits(v)));
  }
  static inline void store(c10::Half* p, R v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static inline void stream(float* p, R v) { _mm256_stream_ps(p, v); }
  static inline void stream(c10::BFloat16* p, R v) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), pack16(bf16_bits(v)));
  }
  static inline void stream(c10::Half* p, R v) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static inline R round(R v, float*) { return v; }
  static inline R round(R v, c10::BFloat16*) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(bf16_bits(v), 16));
  }
  static inline R round(R v, c10::Half*) {
    return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  // Two vectors -> 16 bf16 (a first): both rounded, one NaN test for the pair, one pack and one
  // permutation. The same bits as two single stores.
  static inline __m256i bf16_pack2(R a, R b) {
    const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7FFF);
    const __m256i ua = _mm256_castps_si256(a), ub = _mm256_castps_si256(b);
    __m256i ra = _mm256_srli_epi32(_mm256_add_epi32(ua, _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(ua, 16), one), half)), 16);
    __m256i rb = _mm256_srli_epi32(_mm256_add_epi32(ub, _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(ub, 16), one), half)), 16);
    const __m256 na = _mm256_cmp_ps(a, a, _CMP_UNORD_Q), nb = _mm256_cmp_ps(b, b, _CMP_UNORD_Q);
    const __m256 any = _mm256_or_ps(na, nb);
    if (__builtin_expect(!_mm256_testz_ps(any, any), 0)) {
      ra = _mm256_blendv_epi8(ra, _mm256_set1_epi32(0x7FC0), _mm256_castps_si256(na));
      rb = _mm256_blendv_epi8(rb, _mm256_set1_epi32(0x7FC0), _mm256_castps_si256(nb));
    }
    return _mm256_permute4x64_epi64(_mm256_packus_epi32(ra, rb), 0xD8);  // [a lo, b lo, a hi, b hi] -> a, b
  }
  static inline void store2(c10::BFloat16* p, R a, R b) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bf16_pack2(a, b));
  }
  static inline void stream2(c10::BFloat16* p, R a, R b) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), bf16_pack2(a, b));
  }
  // A pair of vectors at p and p + W for the other types.
  template <class T> static inline void store2(T* p, R a, R b) { store(p, a); store(p + W, b); }
  template <class T> static inline void stream2(T* p, R a, R b) { stream(p, a); stream(p + W, b); }
  static inline void fence() { _mm_sfence(); }
  template <class F> __attribute__((flatten)) static void run(const F& body) { body(Vec256{}); }
};
#pragma GCC pop_options

// Portable code, one "lane": the build every x86-64 processor runs.
struct VecScalar {
  static constexpr int W = 1;
  using R = float;
  static inline R zero() { return 0.0f; }
  static inline R set1(float v) { return v; }
  static inline R add(R a, R b) { return a + b; }
  static inline R sub(R a, R b) { return a - b; }
  static inline R mul(R a, R b) { return a * b; }
  static inline R fmadd(R a, R b, R c) { return std::fma(a, b, c); }  // one rounding, as S::fmadd
  static inline float hsum(R a) { return a; }
  template <class T> static inline R load(const T* p) { return to_f(*p); }
  template <class T> static inline void store(T* p, R v) { *p = from_f(v, p); }
  template <class T> static inline void stream(T* p, R v) { *p = from_f(v, p); }
  template <class T> static inline R round(R v, T* tag) { return to_f(from_f(v, tag)); }
  // A pair of vectors at p and p + W (the AVX512-BF16 build overrides it for bf16 with one conversion).
  template <class T> static inline void store2(T* p, R a, R b) { store(p, a); store(p + W, b); }
  template <class T> static inline void stream2(T* p, R a, R b) { stream(p, a); stream(p + W, b); }
  static inline void fence() {}
  template <class F> static void run(const F& body) { body(VecScalar{}); }
};

// --8<-- [start:row_helpers]
// Sum over one row of term(q, j), where q is V (a whole vector at j) or S (one element at j). Four
// independent vector accumulators, then one, then the lanes in a fixed order, then the scalar tail: the
// order depends only on d, so a row's result never depends on its neighbours or on threads.
template <class V, class F>
inline float row_sum(int64_t d, F&& term) {
  constexpr int W = V::W;
  typename V::R a0 = V::zero(), a1 = V::zero(), a2 = V::zero(), a3 = V::zero();
  int64_t j = 0;
  for (; j + 4 * W <= d; j += 4 * W) {
    a0 = V::add(a0, term(V{}, j));
    a1 = V::add(a1, term(V{}, j + W));
    a2 = V::add(a2, term(V{}, j + 2 * W));
    a3 = V::add(a3, term(V{}, j + 3 * W));
  }
  for (; j + W <= d; j += W) a0 = V::add(a0, term(V{}, j));
  float s = V::hsum(V::add(V::add(a0, a1), V::add(a2, a3)));
  for (; j < d; ++j) s += term(S{}, j);
  return s;
}

// Two sums over one row in one sweep, each in row_sum's order (the same bits as two row_sum calls).
template <class V, class F, class G>
inline void row_sum2(int64_t d, F&& f, G&& g, float& sf, float& sg) {
  constexpr int W = V::W;
  typename V::R a0 = V::zero(), a1 = V::zero(), a2 = V::zero(), a3 = V::zero();
  typename V::R b0 = V::zero(), b1 = V::zero(), b2 = V::zero(), b3 = V::zero();
  int64_t j = 0;
  for (; j + 4 * W <= d; j += 4 * W) {
    a0 = V::add(a0, f(V{}, j));
    b0 = V::add(b0, g(V{}, j));
    a1 = V::add(a1, f(V{}, j + W));
    b1 = V::add(b1, g(V{}, j + W));
    a2 = V::add(a2, f(V{}, j + 2 * W));
    b2 = V::add(b2, g(V{}, j + 2 * W));
    a3 = V::add(a3, f(V{}, j + 3 * W));
    b3 = V::add(b3, g(V{}, j + 3 * W));
  }
  for (; j + W <= d; j += W) {
    a0 = V::add(a0, f(V{}, j));
    b0 = V::add(b0, g(V{}, j));
  }
  sf = V::hsum(V::add(V::add(a0, a1), V::add(a2, a3)));
  sg = V::hsum(V::add(V::add(b0, b1), V::add(b2, b3)));
  for (; j < d; ++j) {
    sf += f(S{}, j);
    sg += g(S{}, j);
  }
}

// Three sums over one row in one sweep, each in row_sum's order (the same bits as three row_sum calls): what
// a backward needs from one read of dy and x, where two sweeps would widen each 16-bit element twice.
template <class V, class F, class G, class H>
inline void row_sum3(int64_t d, F&& f, G&& g, H&& h, float& sf, float& sg, float& sh) {
  constexpr int W = V::W;
  typename V::R a[3][4];
  for (int k = 0; k < 3; ++k) a[k][0] = a[k][1] = a[k][2] = a[k][3] = V::zero();
  auto step = [&](int u, int64_t j) {
    a[0][u] = V::add(a[0][u], f(V{}, j));
    a[1][u] = V::add(a[1][u], g(V{}, j));
    a[2][u] = V::add(a[2][u], h(V{}, j));
  };
  int64_t j = 0;
  for (; j + 4 * W <= d; j += 4 * W) {
    step(0, j);
    step(1, j + W);
    step(2, j + 2 * W);
    step(3, j + 3 * W);
  }
  for (; j + W <= d; j += W) step(0, j);
  float s[3];
  for (int k = 0; k < 3; ++k) s[k] = V::hsum(V::add(V::add(a[k][0], a[k][1]), V::add(a[k][2], a[k][3])));
  for (; j < d; ++j) {
    s[0] += f(S{}, j);
    s[1] += g(S{}, j);
    s[2] += h(S{}, j);
  }
  sf = s[0], sg = s[1], sh = s[2];
}

// A float32 sum of squares outside the normal range: it overflowed (elements above about 1.8e19 in
// magnitude) or underflowed to zero or to subnormals (all elements below about 1e-19). Such rows (and
// rows with Inf or NaN, which the wide pass hands back) take a second pass in double precision; every
// other row pays this one comparison.
inline bool sum_out_of_range(float s) { return !(s >= 1.17549435e-38f && s <= 3.40282347e38f); }

// out[j] = value(q, j) for a row of d elements. With `stream`, the few elements before the first 64-byte
// boundary go one by one and the rest with non-temporal vector stores. Element-wise results do not depend
// on which path computed them, so the split may depend on the address. An output whose address is not a
// multiple of the element size (a view at an odd byte offset: torch.frombuffer, a memory-mapped file with
// an odd header) never reaches a 64-byte boundary, and a streaming store there faults: it gets the
// unaligned ordinary stores instead.
template <class V, class T, class F>
inline void row_store(T* out, int64_t d, bool stream, F&& value) {
  constexpr int W = V::W;
  int64_t j = 0;
  if (stream && W > 1 && reinterpret_cast<uintptr_t>(out) % sizeof(T) == 0) {
    const int64_t off = static_cast<int64_t>(reinterpret_cast<uintptr_t>(out) & 63) / int64_t(sizeof(T));
    const int64_t head = off ? std::min<int64_t>(d, 64 / int64_t(sizeof(T)) - off) : 0;
    for (; j < head; ++j) S::store(out + j, value(S{}, j));
    for (; j + 2 * W <= d; j += 2 * W) V::stream2(out + j, value(V{}, j), value(V{}, j + W));
    for (; j + W <= d; j += W) V::stream(out + j, value(V{}, j));
  } else {  // two vectors per step: lets a 16-bit output be packed by one instruction per 64 bytes
    for (; j + 2 * W <= d; j += 2 * W) V::store2(out + j, value(V{}, j), value(V{}, j + W));
    for (; j + W <= d; j += W) V::store(out + j, value(V{}, j));
  }
  for (; j < d; ++j) S::store(out + j, value(S{}, j));
}
// --8<-- [end:row_helpers]

// --8<-- [start:prefetch]
// Software prefetch into the L2 cache (prefetcht1). The row kernels call it in a row's last pass for the
// same position of the next row, so memory keeps streaming the next row while this one is computed in the
// cache: the hardware prefetchers stop at every 4 KiB page and go quiet while a row is worked on. It loads
// nothing into a register and cannot fault, so it changes no result; a null pointer means "no next row".
template <class T>
inline void prefetch_l2(const T* next, int64_t j) {
  if (next) __builtin_prefetch(next + j, 0, 2);
}
// --8<-- [end:prefetch]

// --8<-- [start:tile_helpers]
// Short rows (d up to kShortRow) go through the kernels a tile of rows at a time: the per-row fixed costs
// (the reduction of the accumulators, the square root, the branches, the loop set-up) overlap between the
// rows of a tile, the loads of several rows are in flight together, and the gain is loaded once per tile.
// Rows per tile: enough independent accumulators to fill the register file (32 registers for AVX-512,
// 16 for AVX2), never so many that they spill.
constexpr int64_t kShortRow = 512;
template <class V> constexpr int tile_rows() { return V::W >= 16 ? 4 : 2; }

// The sums over R rows at once: s[r] is the sum of term(q, r, j) over row r, with every row's additions
// in row_sum's order (the same bits as R calls of row_sum, whatever R is).
template <class V, int R, class F>
inline void rows_sum(int64_t d, F&& term, float* s) {
  constexpr int W = V::W;
  typename V::R a[R][4];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) a[r][0] = a[r][1] = a[r][2] = a[r][3] = V::zero();
  int64_t j = 0;
  for (; j + 4 * W <= d; j += 4 * W) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      a[r][0] = V::add(a[r][0], term(V{}, r, j));
      a[r][1] = V::add(a[r][1], term(V{}, r, j + W));
      a[r][2] = V::add(a[r][2], term(V{}, r, j + 2 * W));
      a[r][3] = V::add(a[r][3], term(V{}, r, j + 3 * W));
    }
  }
  for (; j + W <= d; j += W) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) a[r][0] = V::add(a[r][0], term(V{}, r, j));
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) s[r] = V::hsum(V::add(V::add(a[r][0], a[r][1]), V::add(a[r][2], a[r][3])));
  for (; j < d; ++j) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) s[r] += term(S{}, r, j);
  }
}

// out[r * d + j] = value(q, r, j, gain(q, j)) for R consecutive rows of d elements: gain(q, j) (the weight, the bias: what
// every row of the tile shares) is loaded once per column block and handed to each row's value. Streaming
// follows row_store's rule per row; when the rows' outputs do not all sit at the same offset from a
// 64-byte boundary (a row length that is not a multiple of 64 bytes), each row goes through row_store.
// Rows are addressed from the first one (no arrays of pointers, which the compiler may keep in memory).
// Element-wise values do not depend on the path, so every path gives the same bits.
// (The per-row fallback's lambda returns vector registers: inlined into V::run like the kernels' own.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
template <class V, int R, class T, class G, class F>
inline void rows_store(T* out0, int64_t d, bool stream, G&& gain, F&& value) {
  constexpr int W = V::W;
  const uintptr_t p0 = reinterpret_cast<uintptr_t>(out0);
  const bool same = (d * int64_t(sizeof(T))) % 64 == 0;  // every row at row 0's offset from a line
  if (stream && W > 1 && !same) {
    for (int r = 0; r < R; ++r)
      row_store<V>((out0 + r * d), d, true, [&](auto q, int64_t j) { return value(q, r, j, gain(q, j)); });
    return;
  }
  int64_t j = 0;
  if (stream && W > 1 && p0 % sizeof(T) == 0) {
    const int64_t off = static_cast<int64_t>(p0 & 63) / int64_t(sizeof(T));
    const int64_t head = off ? std::min<int64_t>(d, 64 / int64_t(sizeof(T)) - off) : 0;
    for (; j < head; ++j) {
      const auto g = gain(S{}, j);
      for (int r = 0; r < R; ++r) S::store((out0 + r * d) + j, value(S{}, r, j, g));
    }
    for (; j + 2 * W <= d; j += 2 * W) {
      const auto g0 = gain(V{}, j), g1 = gain(V{}, j + W);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) V::stream2((out0 + r * d) + j, value(V{}, r, j, g0), value(V{}, r, j + W, g1));
    }
    for (; j + W <= d; j += W) {
      const auto g = gain(V{}, j);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) V::stream((out0 + r * d) + j, value(V{}, r, j, g));
    }
  } else {
    for (; j + 2 * W <= d; j += 2 * W) {
      const auto g0 = gain(V{}, j), g1 = gain(V{}, j + W);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) V::store2((out0 + r * d) + j, value(V{}, r, j, g0), value(V{}, r, j + W, g1));
    }
    for (; j + W <= d; j += W) {
      const auto g = gain(V{}, j);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) V::store((out0 + r * d) + j, value(V{}, r, j, g));
    }
  }
  for (; j < d; ++j) {
    const auto g = gain(S{}, j);
    for (int r = 0; r < R; ++r) S::store((out0 + r * d) + j, value(S{}, r, j, g));
  }
}
#pragma GCC diagnostic pop
// --8<-- [end:tile_helpers]

}  // namespace normlab_cpu
