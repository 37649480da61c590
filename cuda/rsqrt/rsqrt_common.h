// Shared by the CPU study (rsqrt_cpu.cpp) and the GPU sweep (rsqrt_gpu.cu): bit casts, the bit-trick
// seeds with their Newton steps, the correctly rounded reference, and the error-histogram bins.
// Plain C++ (no torch); functions are __host__ __device__ under nvcc.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define RSQ_HD __host__ __device__ __forceinline__
#else
#define RSQ_HD inline
#endif

namespace rsq {

RSQ_HD uint32_t f2u(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

RSQ_HD float u2f(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

RSQ_HD uint64_t d2u(double d) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(d));
#else
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
#endif
}

RSQ_HD double u2d(uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  double d;
  std::memcpy(&d, &u, 8);
  return d;
#endif
}

// The float with bits b as a double, built from the bits: exact, and immune to flush-to-zero modes
// (under nvcc -use_fast_math a float-to-double conversion may flush a subnormal input to zero).
RSQ_HD double f32_bits_to_f64(uint32_t b) {
  const uint32_t e = (b >> 23) & 0xffu, m = b & 0x7fffffu;
  const uint64_t sign = static_cast<uint64_t>(b >> 31) << 63;
  if (e == 0) {  // zero or subnormal: m * 2^-149, an exact integer conversion and power-of-two scaling
    const double v = static_cast<double>(m) * 0x1p-149;
    return (b >> 31) ? -v : v;
  }
  if (e == 0xffu) return u2d(sign | 0x7ff0000000000000ull | (static_cast<uint64_t>(m) << 29));
  return u2d(sign | (static_cast<uint64_t>(e - 127u + 1023u) << 52) | (static_cast<uint64_t>(m) << 29));
}

// Products that the compiler must not fuse into an FMA (nvcc fuses a*b+c by default; the host build
// passes -ffp-contract=off), so the bit trick rounds identically on CPU and GPU.
RSQ_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
RSQ_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

// --8<-- [start:bit_trick]
// The bit trick: reinterpret x as an integer, halve it and subtract from a magic constant; the result,
// read back as a float, approximates 1/sqrt(x). Each Newton step is y <- y * (c - (x/2 * y) * y), with
// c = 1.5 for the classic step; Walczyk, Moroz & Cieslinski change c (and the magic) to balance the error.
struct BitTrick {
  uint32_t magic;
  float c1;  // coefficient of the first Newton step
  float c2;  // coefficient of the second Newton step
};

constexpr BitTrick kQuake{0x5f3759dfu, 1.5f, 1.5f};     // Quake III Arena, q_math.c
constexpr BitTrick kLomont{0x5f375a86u, 1.5f, 1.5f};    // Lomont (2003), optimal after one step
constexpr BitTrick kWalczyk{0x5f376908u, 1.50087896f, 1.50000057f};  // Walczyk et al. (2021), InvSqrt2

RSQ_HD float bit_trick(float x, BitTrick t, int steps) {
  const float h = mul_rn(0.5f, x);
  float y = u2f(t.magic - (f2u(x) >> 1));
  if (steps >= 1) y = mul_rn(y, sub_rn(t.c1, mul_rn(mul_rn(h, y), y)));
  if (steps >= 2) y = mul_rn(y, sub_rn(t.c2, mul_rn(mul_rn(h, y), y)));
  return y;
}
// --8<-- [end:bit_trick]

RSQ_HD int ctz64(uint64_t v) {
#if defined(__CUDA_ARCH__)
  return __ffsll(static_cast<long long>(v)) - 1;
#else
  return __builtin_ctzll(v);
#endif
}

// True when 1/sqrt(x) > m exactly, for a positive finite float x and a positive double m with at most
// 27 significant bits (a float midpoint has 25). Equivalent to x*m^2 < 1; with x = X*2^ex and
// m = M*2^em (X, M integers) that is X*M^2 < 2^-(ex+2em), an integer comparison in 128 bits
// (X*M^2 < 2^24 * 2^54). *tie is set when x*m^2 == 1 (impossible for midpoints: see rsqrt.md).
RSQ_HD bool rsqrt_above(float x, double m, int* tie) {
  const uint32_t xb = f2u(x);
  const uint32_t xe = (xb >> 23) & 0xffu;
  uint64_t X = xb & 0x7fffffu;
  int ex;
  if (xe == 0) {
    ex = -149;
  } else {
    X |= 0x800000u;
    ex = static_cast<int>(xe) - 150;
  }
  const uint64_t mb = d2u(m);
  uint64_t M = (mb & 0xfffffffffffffull) | (1ull << 52);
  int em = static_cast<int>((mb >> 52) & 0x7ffu) - 1075;
  const int tz = ctz64(M);
  M >>= tz;
  em += tz;
  const unsigned __int128 P = static_cast<unsigned __int128>(X) * M * M;
  const int k = -(ex + 2 * em);
  if (k <= 0) return false;  // P >= 1 >= 2^k
  if (k >= 127) return true;
  const unsigned __int128 pow2 = static_cast<unsigned __int128>(1) << k;
  if (P == pow2) *tie = 1;
  return P < pow2;
}

// --8<-- [start:reference]
// RN_float(1/sqrt(x)) for a positive finite float x, given r = 1.0/sqrt((double)x).
// r carries two double roundings: |r/R - 1| < 2^-52 (+O(2^-106)). Rounding r to float is therefore
// correct unless r lies within 2^-52*R of a float midpoint; anything within 2^-50 of one is decided
// exactly by rsqrt_above instead. *ambiguous counts those inputs, *corrected those where plain
// double-then-round would have been wrong.
RSQ_HD uint32_t rsqrt_cr_bits(float x, double r, int* ambiguous, int* corrected, int* tie) {
  const float yc = static_cast<float>(r);
  const uint32_t yb = f2u(yc);
  const double yd = static_cast<double>(yc);
  const uint32_t nb = (r >= yd) ? yb + 1u : yb - 1u;  // the neighbour on r's side of yc
  const double m = 0.5 * (yd + static_cast<double>(u2f(nb)));  // exact: 25 significant bits
  if (std::fabs(r - m) > 0x1p-50 * m) return yb;
  *ambiguous += 1;
  const bool above = rsqrt_above(x, m, tie);
  const uint32_t lo = yb < nb ? yb : nb, hi = yb < nb ? nb : yb;
  const uint32_t res = above ? hi : lo;
  if (res != yb) *corrected += 1;
  return res;
}
// --8<-- [end:reference]

// 1/ulp(R) for R = 1/sqrt(x) in the float format, from r (R is never within 2^-52 of a power of two
// unless it is one, so r's exponent is R's).
RSQ_HD double inv_ulp_of(double r) {
  const int e = static_cast<int>((d2u(r) >> 52) & 0x7ffu) - 1023;
  return u2d(static_cast<uint64_t>(1023 + 23 - e) << 52);
}

// Ordered integer of a float's bits: the difference of two is the number of floats between them.
RSQ_HD int64_t ordered(uint32_t b) {
  return (b & 0x80000000u) ? -static_cast<int64_t>(b & 0x7fffffffu) : static_cast<int64_t>(b);
}

// Histogram bins. Integer ulp distance d: bin 0 is d == 0, bin k holds 2^(k-1) <= d < 2^k (k = 1..32),
// bin 33 a NaN or infinite result. Relative error |e|: bin 0 is e == 0, bin j holds
// 2^(j-42) <= |e| < 2^(j-41) (j = 1..50, clamped at both ends), bin 51 a NaN or infinite result.
constexpr int kUlpBins = 34;
constexpr int kRelBins = 52;

// Both are branch-free so that the CPU sweep's error pass vectorizes.
RSQ_HD int ulp_bin(uint64_t d) {
#if defined(__CUDA_ARCH__)
  return 64 - __clzll(static_cast<long long>(d));
#else
  const int k = 64 - __builtin_clzll(d | 1u);  // d | 1 keeps clz defined; d = 0 and d = 1 both give 1
  return d == 0 ? 0 : k;
#endif
}

RSQ_HD int rel_bin(double e) {
  const uint64_t b = d2u(e) & 0x7fffffffffffffffull;  // |e|
  int ex = static_cast<int>(b >> 52) - 1023;
  ex = ex < -41 ? -41 : ex;
  ex = ex > 8 ? 8 : ex;
  return b == 0 ? 0 : ex + 42;
}

}  // namespace rsq
