// RMSNorm kernels for the CPU, one template for every instruction set: V is a vector struct of simd.h
// (Vec512Bf16, Vec512, Vec256, VecScalar), T the element type of x (float, c10::BFloat16, c10::Half),
// WT the gain's (the torch glue passes float32). This header and simd.h are all a copy needs; the caller
// runs a kernel under V::run (isa.h's with_isa) so it is compiled for V's instruction set, splits the
// rows between threads, and owns the memory. Contract (every pointer contiguous, rows of d elements):
//
// Forward, per row (one row stays in the L1/L2 cache between its passes, so memory sees each byte once):
//   [residual]  h = round_x(x + residual), stored as residual_out; with residual_fp32 (the "fp32"
//               residual contract) the passes below read s = x + residual in fp32 instead of h
//   pass 1      s = sum h^2                     (fp32, fixed summation order)
//               rstd = 1 / sqrt(s / d + eps)     (the only value saved for backward besides the input)
//               [s overflowed or underflowed: rms_fwd_row_wide does the row in double instead]
//   pass 2      y = round_x(round_x(h * rstd) * w)       convention 0, Llama
//               y = round_x((h * rstd) * (1 + w))        convention 1, Gemma
//               y = round_x(h * rstd)                    no weight
// Backward, per row: pass 1 a = sum g*h with g = dy * weight_eff; pass 2 dx = rstd * (g - xhat * m) with
// xhat = h * rstd, m = a * rstd / d, and the row's dy * xhat added to a float32 dweight partial sum.
#pragma once

#include <cmath>
#include <cstdint>

#include <type_traits>

#include "rms_bf16.h"
#include "simd.h"

namespace normlab_cpu {

struct RmsFwdArgs {
  const void* x;
  const void* residual;  // nullptr when no residual is fused
  void* residual_out;
  const void* w;         // nullptr when there is no weight
  void* y;
  float* rstd;
  int64_t d;
  float eps;
  int convention;        // 0 Llama, 1 Gemma
  bool stream;           // non-temporal stores for y
  bool residual_fp32 = false;  // statistic and output from fp32 x + residual, not from round_x(x + residual)
  bool prefetch = false;  // prefetch the next row during a row's last pass (prefetch_l2, simd.h)
};

struct RmsBwdArgs {
  const void* dy;
  const void* x;
  const void* w;
  const float* rstd;
  void* dx;
  int64_t d;
  int convention;
  bool stream;
  bool prefetch = false;  // prefetch the next row's dy and x during a row's last pass
};

// The wide second pass of a row whose float32 sum of squares left the normal range (sum_out_of_range):
// the sum, rstd and h * rstd in double (which holds the square of every float32), each product rounded
// once to float32, then the convention's casts. Returns false, writing nothing, for a row the float32
// pass already gets right: one with Inf or NaN (they propagate as before) or all zeros. The saved rstd is
// rounded to float32; it overflows only when eps = 0 and every |h| is below about 1e-38. With r (the "fp32"
// residual contract) the row is the float32 sum h[j] + r[j] (h then points at x).
template <class T, class WT>
bool rms_fwd_row_wide(const T* h, T* y, const WT* w, int64_t d, float eps, int convention, float* rstd,
                      const T* r = nullptr) {
  auto at = [&](int64_t j) -> float { return r ? to_f(h[j]) + to_f(r[j]) : to_f(h[j]); };
  double ss = 0.0;
  for (int64_t j = 0; j < d; ++j) {
    const double v = at(j);
    if (!std::isfinite(v)) return false;
    ss += v * v;
  }
  if (ss == 0.0) return false;
  const double rs = 1.0 / std::sqrt(ss / static_cast<double>(d) + static_cast<double>(eps));
  *rstd = static_cast<float>(rs);
  for (int64_t j = 0; j < d; ++j) {
    const float t = static_cast<float>(static_cast<double>(at(j)) * rs);
    if (!w)
      y[j] = from_f(t, y);
    else if (convention == 0)
      y[j] = from_f(to_f(from_f(t, y)) * w[j], y);
    else
      y[j] = from_f(t * (1.0f + w[j]), y);
  }
  return true;
}

// The row lambdas return vector registers; GCC notes that their ABI differs without AVX, but every call
// is inlined into V::run (compiled for V's instruction set), so no such value crosses a function boundary.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

// --8<-- [start:rms_fwd]
template <class V, class T, class WT>
void rms_fwd_rows(const RmsFwdArgs& a, int64_t r0, int64_t r1) {
  const int64_t d = a.d;
  const WT* w = static_cast<const WT*>(a.w);
  for (int64_t i = r0; i < r1; ++i) {
    const T* h = static_cast<const T*>(a.x) + i * d;
    const T* x = h;
    const T* r = a.residual ? static_cast<const T*>(a.residual) + i * d : nullptr;
    T* y = static_cast<T*>(a.y) + i * d;
    const bool more = a.prefetch && i + 1 < r1;  // the next row's x (and residual), asked for in the last pass
    const T* xn = more ? x + d : nullptr;
    const T* rn = more && r ? r + d : nullptr;
    if (a.residual) {  // h = round_x(x + residual): stored once, then read back from the cache
      T* ho = static_cast<T*>(a.residual_out) + i * d;
      row_store<V>(ho, d, false, [&](auto q, int64_t j) {
        using Q = decltype(q);
        return Q::add(Q::load(h + j), Q::load(r + j));
      });
      h = ho;
    }
    const bool from_sum = r && a.residual_fp32;
    auto src = [&](auto q, int64_t j) {  // the row that is normalized: h, or s = x + residual in fp32
      using Q = decltype(q);
      return from_sum ? Q::add(Q::load(x + j), Q::load(r + j)) : Q::load(h + j);
    };
    const float ss = row_sum<V>(d, [&](auto q, int64_t j) {
      auto v = src(q, j);
      using Q = decltype(q);
      return Q::mul(v, v);
    });  // the squares are rounded before the add in every lane and in the tail alike
    if (__builtin_expect(sum_out_of_range(ss), 0) &&
        rms_fwd_row_wide<T, WT>(from_sum ? x : h, y, w, d, a.eps, a.convention, a.rstd + i, from_sum ? r : nullptr))
      continue;
    const float rs = 1.0f / std::sqrt(ss / static_cast<float>(d) + a.eps);
    a.rstd[i] = rs;
    if (!w) {
      row_store<V>(y, d, a.stream, [&](auto q, int64_t j) {
        using Q = decltype(q);
        prefetch_l2(xn, j), prefetch_l2(rn, j);
        return Q::mul(src(q, j), Q::set1(rs));
      });
    } else if (a.convention == 0) {  // Llama: cast the normalized row to x's dtype, then scale
      row_store<V>(y, d, a.stream, [&](auto q, int64_t j) {
        using Q = decltype(q);
        prefetch_l2(xn, j), prefetch_l2(rn, j);
        return Q::mul(Q::round(Q::mul(src(q, j), Q::set1(rs)), static_cast<T*>(nullptr)), Q::load(w + j));
      });
    } else {  // Gemma: scale by (1 + w) in fp32, cast once
      row_store<V>(y, d, a.stream, [&](auto q, int64_t j) {
        using Q = decltype(q);
        prefetch_l2(xn, j), prefetch_l2(rn, j);
        return Q::mul(Q::mul(src(q, j), Q::set1(rs)), Q::add(Q::set1(1.0f), Q::load(w + j)));
      });
    }
  }
  if (a.stream) V::fence();
}
// --8<-- [end:rms_fwd]

// --8<-- [start:rms_fwd_tiles]
// The same forward for short rows (no residual), a tile of R rows at a time: the R sums of squares run
// together, then the R values of rstd, then the R output rows with the gain loaded once per column block.
// Every row goes through exactly rms_fwd_rows's operations in the same order, so the bits are the same; a
// tile with a row whose sum left the normal range, and the rows left over after the last whole tile, are
// handed to rms_fwd_rows itself.
template <class V, class T, class WT>
void rms_fwd_tiles(const RmsFwdArgs& a, int64_t r0, int64_t r1) {
  constexpr int R = tile_rows<V>();
  const int64_t d = a.d;
  const WT* w = static_cast<const WT*>(a.w);
  const float fd = static_cast<float>(d);
  int64_t i = r0;
  for (; i + R <= r1; i += R) {
    const T* h = static_cast<const T*>(a.x) + i * d;  // row r of the tile at h + r * d
    T* y = static_cast<T*>(a.y) + i * d;
    float ss[R], rs[R];
    rows_sum<V, R>(d, [&](auto q, int r, int64_t j) {
      using Q = decltype(q);
      auto v = Q::load(h + r * d + j);
      return Q::mul(v, v);
    }, ss);
    bool odd = false;
    for (int r = 0; r < R; ++r) odd = odd || sum_out_of_range(ss[r]);
    if (__builtin_expect(odd, 0)) {
      RmsFwdArgs one = a;
      one.stream = false;  // the tile's own fence comes at the end
      rms_fwd_rows<V, T, WT>(one, i, i + R);
      continue;
    }
    for (int r = 0; r < R; ++r) {
      rs[r] = 1.0f / std::sqrt(ss[r] / fd + a.eps);
      a.rstd[i + r] = rs[r];
    }
    if (!w) {
      rows_store<V, R>(y, d, a.stream, [&](auto q, int64_t) { return decltype(q)::set1(0.0f); },
                       [&](auto q, int r, int64_t j, auto) {
                         using Q = decltype(q);
                         return Q::mul(Q::load(h + r * d + j), Q::set1(rs[r]));
                       });
    } else if (a.convention == 0) {  // Llama: cast the normalized row to x's dtype, then scale
      rows_store<V, R>(y, d, a.stream, [&](auto q, int64_t j) { return decltype(q)::load(w + j); },
                       [&](auto q, int r, int64_t j, auto g) {
                         using Q = decltype(q);
                         return Q::mul(Q::round(Q::mul(Q::load(h + r * d + j), Q::set1(rs[r])), static_cast<T*>(nullptr)), g);
                       });
    } else {  // Gemma: the offset gain 1 + w, once per tile
      rows_store<V, R>(y, d, a.stream,
                       [&](auto q, int64_t j) {
                         using Q = decltype(q);
                         return Q::add(Q::set1(1.0f), Q::load(w + j));
                       },
                       [&](auto q, int r, int64_t j, auto g) {
                         using Q = decltype(q);
                         return Q::mul(Q::mul(Q::load(h + r * d + j), Q::set1(rs[r])), g);
                       });
    }
  }
  if (i < r1) {
    rms_fwd_rows<V, T, WT>(a, i, r1);  // fences itself when streaming
  } else if (a.stream) {
    V::fence();
  }
}
// --8<-- [end:rms_fwd_tiles]

// --8<-- [start:rms_fwd_bf16]
// bfloat16 rows on a processor with AVX512-BF16 (rms_bf16.h): R rows at a time (R = 1 for long rows, a
// tile for short ones; every row gets the same bits either way). A row that rms_bf16.h's check turns
// away (a denormal, Inf or NaN in reach, a sum of squares out of range) goes through rms_fwd_rows.
template <class V, class T, class WT>
constexpr bool bf16_fast_path() {
  return std::is_same_v<V, Vec512Bf16> && std::is_same_v<T, c10::BFloat16> && std::is_same_v<WT, float>;
}

template <class V, int R, int D>
void rms_fwd_bf16(const RmsFwdArgs& a, int64_t r0, int64_t r1) {
  using namespace bf16_fast;
  const int64_t d = a.d;
  const float* w = static_cast<const float*>(a.w);
  const float gain = least_gain(w, d, a.convention);
  const float fd = static_cast<float>(d);
  auto finish = [&](int64_t i, float ss, uint32_t mag, float rs) {
    if (__builtin_expect(!row_ok(ss, mag, rs, gain), 0)) {
      RmsFwdArgs one = a;
      one.stream = false;  // the fence comes at the end
      rms_fwd_rows<V, c10::BFloat16, float>(one, i, i + 1);
      return;
    }
    a.rstd[i] = rs;
    const c10::BFloat16* x = static_cast<const c10::BFloat16*>(a.x) + i * d;
    c10::BFloat16* y = static_cast<c10::BFloat16*>(a.y) + i * d;
    const c10::BFloat16* xn = a.prefetch && R == 1 && i + 1 < r1 ? x + d : nullptr;  // long rows: the next row
    if (!w)
      store_row<2, D>(x, y, w, d, rs, a.stream, xn);
    else if (a.convention == 0)
      store_row<0, D>(x, y, w, d, rs, a.stream, xn);
    else
      store_row<1, D>(x, y, w, d, rs, a.stream, xn);
  };
  const c10::BFloat16* x0 = static_cast<const c10::BFloat16*>(a.x);
  int64_t i = r0;
  for (; i + R <= r1; i += R) {
    float ss[R];
    uint32_t mag[R];
    sumsq<R, D>(x0 + i * d, d, ss, mag);
    float rs[R];
    if constexpr (R % 4 == 0) {  // four rows' rstd at once: the same IEEE operations, the same bits
      for (int r = 0; r < R; r += 4)
        _mm_storeu_ps(rs + r, _mm_div_ps(_mm_set1_ps(1.0f), _mm_sqrt_ps(_mm_add_ps(_mm_div_ps(_mm_loadu_ps(ss + r), _mm_set1_ps(fd)), _mm_set1_ps(a.eps)))));
    } else {
      for (int r = 0; r < R; ++r) rs[r] = 1.0f / std::sqrt(ss[r] / fd + a.eps);
    }
    for (int r = 0; r < R; ++r) finish(i + r, ss[r], mag[r], rs[r]);
  }
  for (; i < r1; ++i) {
    float ss[1];
    uint32_t mag[1];
    sumsq<1, D>(x0 + i * d, d, ss, mag);
    finish(i, ss[0], mag[0], 1.0f / std::sqrt(ss[0] / fd + a.eps));
  }
  if (a.stream) V::fence();
}
// --8<-- [end:rms_fwd_bf16]

// The forward the glue runs: the bfloat16 path above where it applies (no residual), otherwise the
// tiled or the row-at-a-time template.
template <class V, class T, class WT>
void rms_fwd_any(const RmsFwdArgs& a, int64_t r0, int64_t r1, bool tiles) {
  if constexpr (bf16_fast_path<V, T, WT>()) {
    if (!a.residual) {
      // the head sizes of QK-norm get loops unrolled for their length, and 64 and 128 a tile of 8 rows
      constexpr int R = tile_rows<V>();
      if (!tiles)
        rms_fwd_bf16<V, 1, 0>(a, r0, r1);
      else if (a.d == 64)
        rms_fwd_bf16<V, 2 * R, 64>(a, r0, r1);
      else if (a.d == 128)
        rms_fwd_bf16<V, 2 * R, 128>(a, r0, r1);
      else if (a.d == 256)
        rms_fwd_bf16<V, R, 256>(a, r0, r1);
      else
        rms_fwd_bf16<V, R, 0>(a, r0, r1);
      return;
    }
  }
  if (tiles)
    rms_fwd_tiles<V, T, WT>(a, r0, r1);
  else
    rms_fwd_rows<V, T, WT>(a, r0, r1);
}

// --8<-- [start:rms_bwd]
// Rows [r0, r1) form one block; `part` (length d, zeroed) receives the block's dweight partial sum.
template <class V, class T, class WT>
void rms_bwd_rows(const RmsBwdArgs& a, int64_t r0, int64_t r1, float* part) {
  const int64_t d = a.d;
  const WT* w = static_cast<const WT*>(a.w);
  const bool gemma = a.convention == 1;
  for (int64_t i = r0; i < r1; ++i) {
    const T* dy = static_cast<const T*>(a.dy) + i * d;
    const T* x = static_cast<const T*>(a.x) + i * d;
    T* dx = static_cast<T*>(a.dx) + i * d;
    const float rs = a.rstd[i];
    const bool more = a.prefetch && i + 1 < r1;  // the next row's dy and x, asked for in the last pass
    const T* dyn = more ? dy + d : nullptr;
    const T* xn = more ? x + d : nullptr;
    auto g = [&](auto q, int64_t j) {  // g = dy * weight_eff
      using Q = decltype(q);
      auto v = Q::load(dy + j);
      if (!w) return v;
      return Q::mul(v, gemma ? Q::add(Q::set1(1.0f), Q::load(w + j)) : Q::load(w + j));
    };
    const float gh = row_sum<V>(d, [&](auto q, int64_t j) {
      using Q = decltype(q);
      return Q::mul(g(q, j), Q::load(x + j));
    });
    const float m = gh * rs / static_cast<float>(d);  // mean(g * xhat)
    // dx, and in the same sweep the row's dy * xhat added to the dweight partial: row_store asks for each
    // element position exactly once (a vector or one element), so dy and x are loaded and widened once
    row_store<V>(dx, d, a.stream, [&](auto q, int64_t j) {
      using Q = decltype(q);
      prefetch_l2(dyn, j), prefetch_l2(xn, j);
      const auto dyv = Q::load(dy + j);
      const auto xhat = Q::mul(Q::load(x + j), Q::set1(rs));
      if (part) Q::store(part + j, Q::add(Q::load(part + j), Q::mul(dyv, xhat)));
      auto gv = dyv;
      if (w) gv = Q::mul(dyv, gemma ? Q::add(Q::set1(1.0f), Q::load(w + j)) : Q::load(w + j));
      return Q::mul(Q::set1(rs), Q::sub(gv, Q::mul(xhat, Q::set1(m))));
    });
  }
  if (a.stream) V::fence();
}
// --8<-- [end:rms_bwd]

#pragma GCC diagnostic pop

}  // namespace normlab_cpu
