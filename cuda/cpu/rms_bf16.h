// The RMSNorm forward for bfloat16 rows on processors with AVX512-BF16, with about half the instructions
// per element of the generic template (rms_norm_kernels.h), whose bfloat16 build is limited by the
// instruction count, not by memory. Three changes:
//
//   pass 1   VDPBF16PS multiplies pairs of bfloat16 and adds both products to a float32 lane: one
//            instruction squares and sums 32 elements, with no conversion to float32 first.
//   pass 2   32 elements per step: one load, two widenings, and every rounding to bfloat16 done for 32
//            lanes by one VCVTNE2PS2BF16, with no per-vector class check.
//   tails    a row that is not a multiple of 32 ends with masked loads and stores, not a scalar loop.
//
// The class checks go because a row is checked once instead. The bfloat16 instructions treat denormal
// inputs as zero and flush denormal results (Intel SDM, VDPBF16PS and VCVTNE2PS2BF16: DAZ and FTZ implied),
// which c10's conversions do not. So pass 1 also finds the row's smallest nonzero magnitude, and a row
// takes this path only when no element and no value rounded can be denormal: the sum of squares is in
// the normal range (no Inf or NaN either), every nonzero |x| is at least 2^-62 (so each square is normal),
// and the smallest nonzero |x| * rstd * |gain| is at least 2^-124 (every value converted is normal). Any
// other row goes through the generic template, whose bits every test knows. Rounding is to nearest even
// in both, so for the rows taken here the outputs are the same bits as the generic kernel's given the same
// rstd; rstd itself comes from a different order of additions (pairs of squares first), a different value
// within the float32 summation bound.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "simd.h"

namespace normlab_cpu {

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,f16c")
namespace bf16_fast {

// --8<-- [start:bf16_fast]
// 32 bfloat16 as two vectors of 16 floats (a bfloat16 is the upper half of a float32): the lower and
// the upper 16 elements, each by one masked word permutation that puts element k in the top half of
// lane k and zeros the bottom half.
inline __m512 lo(__m512i v) {
  const __m512i idx = _mm512_set_epi16(15, 0, 14, 0, 13, 0, 12, 0, 11, 0, 10, 0, 9, 0, 8, 0,
                                       7, 0, 6, 0, 5, 0, 4, 0, 3, 0, 2, 0, 1, 0, 0, 0);
  return _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, idx, v));
}
inline __m512 hi(__m512i v) {
  const __m512i idx = _mm512_set_epi16(31, 0, 30, 0, 29, 0, 28, 0, 27, 0, 26, 0, 25, 0, 24, 0,
                                       23, 0, 22, 0, 21, 0, 20, 0, 19, 0, 18, 0, 17, 0, 16, 0);
  return _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, idx, v));
}
// a to the lower 16 bfloat16, b to the upper 16, each rounded to nearest even (normal inputs only)
inline __m512i pack(__m512 a, __m512 b) { return (__m512i)_mm512_cvtne2ps_pbh(b, a); }
inline __mmask32 tail_mask(int64_t n) { return n >= 32 ? ~__mmask32(0) : (__mmask32(1) << n) - 1; }

// The sum of the 16 lanes: lane k + lane k+8, then k + k+4, then k + k+2, then the last two. sum4 adds
// four vectors' lanes in the same pairs (IEEE addition is commutative, so each sum has the same bits as
// sum1 of its vector) with a quarter of the shuffles.
inline float sum1(__m512 v) {
  const __m256 t = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  const __m128 s = _mm_add_ps(u, _mm_shuffle_ps(u, u, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, _MM_SHUFFLE(3, 2, 0, 1))));
}
inline void sum4(__m512 v0, __m512 v1, __m512 v2, __m512 v3, float* out) {
  // [v0 lanes 0-7 + 8-15, v1 lanes 0-7 + 8-15], the same for v2, v3
  const __m512 a = _mm512_add_ps(_mm512_shuffle_f32x4(v0, v1, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_f32x4(v0, v1, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 b = _mm512_add_ps(_mm512_shuffle_f32x4(v2, v3, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_f32x4(v2, v3, _MM_SHUFFLE(3, 2, 3, 2)));
  // one 128-bit lane per row: its lanes 0-3 + 4-7
  const __m512 c = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 e = _mm512_add_ps(c, _mm512_shuffle_ps(c, c, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m512 f = _mm512_add_ps(e, _mm512_shuffle_ps(e, e, _MM_SHUFFLE(3, 2, 0, 1)));
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, f);
  out[0] = lanes[0], out[1] = lanes[4], out[2] = lanes[8], out[3] = lanes[12];
}
// The smallest of the 32 unsigned 16-bit lanes.
inline uint32_t min1(__m512i m) {
  const __m256i h = _mm256_min_epu16(_mm512_castsi512_si256(m), _mm512_extracti64x4_epi64(m, 1));
  const __m128i q = _mm_min_epu16(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(_mm_minpos_epu16(q))) & 0xFFFFu;
}
// The bits of the smallest nonzero |x| as a float32 (0 when every x is zero), from the minimum of 2x - 1.
inline uint32_t magnitude(uint32_t least) { return least == 0xFFFFu ? 0u : ((least + 1u) >> 1) << 16; }

// min1 of four vectors at once, turned into magnitudes.
inline void min4(__m512i m0, __m512i m1, __m512i m2, __m512i m3, uint32_t* mag) {
  const __m512i m01 = _mm512_min_epu16(_mm512_shuffle_i64x2(m0, m1, _MM_SHUFFLE(1, 0, 1, 0)),
                                       _mm512_shuffle_i64x2(m0, m1, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512i m23 = _mm512_min_epu16(_mm512_shuffle_i64x2(m2, m3, _MM_SHUFFLE(1, 0, 1, 0)),
                                       _mm512_shuffle_i64x2(m2, m3, _MM_SHUFFLE(3, 2, 3, 2)));
  __m512i q = _mm512_min_epu16(_mm512_shuffle_i64x2(m01, m23, _MM_SHUFFLE(2, 0, 2, 0)),
                               _mm512_shuffle_i64x2(m01, m23, _MM_SHUFFLE(3, 1, 3, 1)));
  q = _mm512_min_epu16(q, _mm512_shuffle_epi32(q, _MM_PERM_BADC));  // one 128-bit lane per row
  q = _mm512_min_epu16(q, _mm512_shuffle_epi32(q, _MM_PERM_CDAB));
  q = _mm512_min_epu16(q, _mm512_srli_epi32(q, 16));
  alignas(64) uint32_t lanes[16];
  _mm512_store_si512(lanes, q);
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) mag[r] = magnitude(lanes[4 * r] & 0xFFFFu);
}

// Sum of squares of R rows of d bfloat16 (row r at x + r * d; d is the compile-time D when D > 0, for
// the short head sizes), each row in the same order whatever R and D are: four float32 accumulators over
// steps of 128 elements, then the first alone over steps of 32, then the masked tail, then
// (a0 + a1) + (a2 + a3) and the lanes in sum1's order. Each VDPBF16PS adds to lane k the square of element
// 2k+1 and then that of element 2k. mag[r] receives the bits of the row's smallest nonzero |x| as a
// float32 (0 for a row of zeros): the unsigned minimum of 2x - 1 over the raw 16-bit words drops the sign
// bit and sends 0 to 0xFFFF, above every other value.
template <int R, int D>
inline void sumsq(const c10::BFloat16* x, int64_t dn, float* ss, uint32_t* mag) {
  const int64_t d = D > 0 ? D : dn;
  __m512 a[R][4];
  __m512i m[R];
  const __m512i minus1 = _mm512_set1_epi16(-1);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    a[r][0] = a[r][1] = a[r][2] = a[r][3] = _mm512_setzero_ps();
    m[r] = minus1;
  }
  auto step = [&](int r, int k, __m512i v) {
    a[r][k] = _mm512_dpbf16_ps(a[r][k], (__m512bh)v, (__m512bh)v);
    m[r] = _mm512_min_epu16(m[r], _mm512_add_epi16(_mm512_add_epi16(v, v), minus1));
  };
  int64_t j = 0;
#pragma GCC unroll 4
  for (; j + 128 <= d; j += 128) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const c10::BFloat16* p = x + r * d + j;
      step(r, 0, _mm512_loadu_si512(p));
      step(r, 1, _mm512_loadu_si512(p + 32));
      step(r, 2, _mm512_loadu_si512(p + 64));
      step(r, 3, _mm512_loadu_si512(p + 96));
    }
  }
#pragma GCC unroll 4
  for (; j + 32 <= d; j += 32) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) step(r, 0, _mm512_loadu_si512(x + r * d + j));
  }
  if (j < d) {
    const __mmask32 k = tail_mask(d - j);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) step(r, 0, _mm512_maskz_loadu_epi16(k, x + r * d + j));
  }
  // (a0 + a1) + (a2 + a3); a row shorter than 128 leaves a1..a3 at +0, and adding +0 to a sum of squares
  // (+0 or more, or NaN) changes no bit, so those adds are skipped there
  __m512 t[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    t[r] = d < 128 ? a[r][0] : _mm512_add_ps(_mm512_add_ps(a[r][0], a[r][1]), _mm512_add_ps(a[r][2], a[r][3]));
  if constexpr (R % 4 == 0) {
#pragma GCC unroll 4
    for (int r = 0; r < R; r += 4) {
      sum4(t[r], t[r + 1], t[r + 2], t[r + 3], ss + r);
      min4(m[r], m[r + 1], m[r + 2], m[r + 3], mag + r);
    }
  } else {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      ss[r] = sum1(t[r]);
      mag[r] = magnitude(min1(m[r]));
    }
  }
}

// The output row: y = round(round(x * rs) * w) (convention 0, Llama), round(x * rs * (1 + w))
// (convention 1, Gemma) or round(x * rs) (no gain), 32 elements per step, the last step masked. The
// operations and their order are the generic kernel's, so each element gets the same bits from the
// same rs. Streams (non-temporal stores) when asked and the row starts on a 64-byte boundary.
template <int Conv, int D>
inline void store_row(const c10::BFloat16* x, c10::BFloat16* y, const float* w, int64_t dn, float rs,
                      bool stream, const c10::BFloat16* next = nullptr) {
  const int64_t d = D > 0 ? D : dn;
  const __m512 vr = _mm512_set1_ps(rs), one = _mm512_set1_ps(1.0f);
  auto value = [&](__m512i v, __m512 w0, __m512 w1) {
    __m512 a = _mm512_mul_ps(lo(v), vr), b = _mm512_mul_ps(hi(v), vr);
    if constexpr (Conv == 0) {
      const __m512i t = pack(a, b);
      a = _mm512_mul_ps(lo(t), w0);
      b = _mm512_mul_ps(hi(t), w1);
    } else if constexpr (Conv == 1) {
      a = _mm512_mul_ps(a, _mm512_add_ps(one, w0));
      b = _mm512_mul_ps(b, _mm512_add_ps(one, w1));
    }
    return pack(a, b);
  };
  int64_t j = 0;
  if (stream && (reinterpret_cast<uintptr_t>(y) & 63) == 0) {
#pragma GCC unroll 8
    for (; j + 32 <= d; j += 32) {
      prefetch_l2(next, j);  // the next row's line at this position (simd.h)
      const __m512i v = _mm512_loadu_si512(x + j);
      const __m512 w0 = Conv < 2 ? _mm512_loadu_ps(w + j) : one, w1 = Conv < 2 ? _mm512_loadu_ps(w + j + 16) : one;
      _mm512_stream_si512(reinterpret_cast<__m512i*>(y + j), value(v, w0, w1));
    }
  } else {
#pragma GCC unroll 8
    for (; j + 32 <= d; j += 32) {
      prefetch_l2(next, j);
      const __m512i v = _mm512_loadu_si512(x + j);
      const __m512 w0 = Conv < 2 ? _mm512_loadu_ps(w + j) : one, w1 = Conv < 2 ? _mm512_loadu_ps(w + j + 16) : one;
      _mm512_storeu_si512(y + j, value(v, w0, w1));
    }
  }
  if (j < d) {
    const __mmask32 k = tail_mask(d - j);
    const __mmask16 k0 = static_cast<__mmask16>(k), k1 = static_cast<__mmask16>(k >> 16);
    const __m512i v = _mm512_maskz_loadu_epi16(k, x + j);
    const __m512 w0 = Conv < 2 ? _mm512_maskz_loadu_ps(k0, w + j) : one;
    const __m512 w1 = Conv < 2 ? _mm512_maskz_loadu_ps(k1, w + j + 16) : one;
    _mm512_mask_storeu_epi16(y + j, k, value(v, w0, w1));
  }
}

// The smallest nonzero |gain| the outputs are multiplied by (w, 1 + w, or 1 without a gain); +Inf when
// every gain is zero (every product is then zero), 0 when a gain is Inf or NaN (no row takes this path).
inline float least_gain(const float* w, int64_t d, int convention) {
  if (!w) return 1.0f;
  float least = INFINITY;
  for (int64_t j = 0; j < d; ++j) {
    const float g = std::fabs(convention == 1 ? 1.0f + w[j] : w[j]);
    if (!std::isfinite(g)) return 0.0f;
    if (g != 0.0f && g < least) least = g;
  }
  return least;
}

// Whether a row with this sum of squares, smallest nonzero magnitude and rstd may take this path.
inline bool row_ok(float ss, uint32_t mag, float rs, float gain) {
  if (sum_out_of_range(ss) || mag < (uint32_t(127 - 62) << 23)) return false;  // |x| >= 2^-62 or zero
  float least;
  std::memcpy(&least, &mag, sizeof least);
  const float t = least * rs;
  return t >= 0x1p-124f && t * gain >= 0x1p-124f;
}
// --8<-- [end:bf16_fast]

}  // namespace bf16_fast
#pragma GCC pop_options

}  // namespace normlab_cpu
