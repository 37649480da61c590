// LayerNorm kernels for the CPU, one template for every instruction set (V, T, WT, BT as in
// rms_norm_kernels.h; this header and simd.h are all a copy needs).
//
// Forward, per row (the row stays in cache across the passes):
//   [residual] h = round_x(x + residual), stored as residual_out, and x below is h; with residual_fp32
//           (the "fp32" residual contract) the passes read s = x + residual in fp32 instead of h
//   pass 1  m = sum x / d                          (m is off by the rounding errors of the float32 sum)
//   pass 2  c = sum (x - m) / d and q = sum (x - m)^2 / d in one sweep: c is the correction of the mean,
//           mean = m + c, var = q - c^2 (exact algebra; no cancellation while c^2 is not far above var)
//           rstd = 1 / sqrt(var + eps)
//   pass 3  y = round_x((((x - m) - c) * rstd) * w + b)   (x - m exact for x near m: the error of m
//           never reaches y, even for a mean a million times the spread)
//   [a sum that overflowed or underflowed: ln_fwd_row_wide does the row in double instead]
// Backward, per row: pass 1 sums g, x - mean and g * (x - mean) * rstd in one sweep (g = dy * w; c = sum (x -
// mean) / d corrects the float32 rounding of the saved mean, xhat = (x - mean - c) * rstd, and
// mean(g * xhat) = (sum g (x - mean) rstd - c rstd sum g) / d);
// pass 2 dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), and dy * xhat, dy added to the float32
// partial sums of dweight and dbias that the caller reduces in a fixed order (deterministic).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "simd.h"

namespace normlab_cpu {

struct LnFwdArgs {
  const void* x;
  const void* residual;  // nullptr when no residual is fused
  void* residual_out;
  const void* w;  // nullptr: no weight
  const void* b;  // nullptr: no bias
  void* y;
  float* mean;
  float* rstd;
  int64_t d;
  float eps;
  bool stream;
  bool residual_fp32 = false;  // statistics and output from fp32 x + residual, not from round_x(x + residual)
  bool prefetch = false;  // prefetch the next row during a row's last pass (prefetch_l2, simd.h)
};

struct LnBwdArgs {
  const void* dy;
  const void* x;
  const void* w;
  const float* mean;
  const float* rstd;
  void* dx;
  int64_t d;
  bool stream;
  bool prefetch = false;  // prefetch the next row's dy and x during a row's last pass
};

// The wide second pass of a row whose float32 sums left the normal range (the mean's sum overflowed,
// or the sum of squared deviations overflowed or underflowed): mean, variance, rstd and the normalized
// values in double, each rounded once to float32 before the gain and bias. Returns false, writing nothing,
// for a row the float32 pass already gets right: one with Inf or NaN, or a constant row (variance 0) whose
// float32 sum stays finite. A constant row whose sum overflows float32 (a row of 1e38s) is done here: its
// float32 mean would be Inf and x - mean NaN, where the right output is the bias.
// With r (the "fp32" residual contract) the row is the float32 sum x[j] + r[j].
template <class T, class WT, class BT>
bool ln_fwd_row_wide(const T* x, T* y, const WT* w, const BT* b, int64_t d, float eps, float* mean, float* rstd,
                     const T* r = nullptr) {
  auto at = [&](int64_t j) -> float { return r ? to_f(x[j]) + to_f(r[j]) : to_f(x[j]); };
  double s = 0.0;
  for (int64_t j = 0; j < d; ++j) {
    const double v = at(j);
    if (!std::isfinite(v)) return false;
    s += v;
  }
  const double mu = s / static_cast<double>(d);
  double q = 0.0;
  for (int64_t j = 0; j < d; ++j) {
    const double c = static_cast<double>(at(j)) - mu;
    q += c * c;
  }
  if (q == 0.0 && std::fabs(s) < 0.5 * static_cast<double>(std::numeric_limits<float>::max())) return false;
  const double rs = 1.0 / std::sqrt(q / static_cast<double>(d) + static_cast<double>(eps));
  *mean = static_cast<float>(mu);
  *rstd = static_cast<float>(rs);
  for (int64_t j = 0; j < d; ++j) {
    float v = static_cast<float>((static_cast<double>(at(j)) - mu) * rs);
    if (w) v = v * w[j];
    if (b) v = v + b[j];
    y[j] = from_f(v, y);
  }
  return true;
}

// The row lambdas return vector registers; GCC notes that their ABI differs without AVX, but every call
// is inlined into V::run (compiled for V's instruction set), so no such value crosses a function boundary.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

// --8<-- [start:ln_fwd_plain]
// The forward of a row without a fused residual, the gain and bias known at compile time (no test per
// element). The statistics and the output are ln_fwd_rows's, operation for operation, so the bits are the
// same; what changes is where the passes read the row from. For 16-bit rows the first pass widens each
// element once and keeps the float32 value in `buf` (one row, from the L1 cache), so the second and third
// passes load float32 instead of converting again; float32 rows are read in place.
template <class V, class T, class WT, class BT, bool HasW, bool HasB>
void ln_fwd_plain(const LnFwdArgs& a, int64_t r0, int64_t r1, float* buf) {
  const int64_t d = a.d;
  const WT* w = static_cast<const WT*>(a.w);
  const BT* b = static_cast<const BT*>(a.b);
  const float fd = static_cast<float>(d);
  constexpr bool widen = !std::is_same_v<T, float>;
  for (int64_t i = r0; i < r1; ++i) {
    const T* x = static_cast<const T*>(a.x) + i * d;
    T* y = static_cast<T*>(a.y) + i * d;
    const T* xn = a.prefetch && i + 1 < r1 ? x + d : nullptr;  // the next row, asked for in the last pass
    const float* f = nullptr;                                  // the row as float32
    float mu;
    if constexpr (widen) {
      mu = row_sum<V>(d, [&](auto q, int64_t j) {  // each position is asked for once: load, keep, add
        using Q = decltype(q);
        const auto v = Q::load(x + j);
        Q::store(buf + j, v);
        return v;
      }) / fd;
      f = buf;
    } else {
      f = x;
      mu = row_sum<V>(d, [&](auto q, int64_t j) { return decltype(q)::load(f + j); }) / fd;
    }
    float sc, sq;
    row_sum2<V>(
        d, [&](auto q, int64_t j) { return decltype(q)::sub(decltype(q)::load(f + j), decltype(q)::set1(mu)); },
        [&](auto q, int64_t j) {
          using Q = decltype(q);
          auto c = Q::sub(Q::load(f + j), Q::set1(mu));
          return Q::mul(c, c);
        },
        sc, sq);
    if (__builtin_expect(sum_out_of_range(sq) || !std::isfinite(mu), 0) &&
        ln_fwd_row_wide<T, WT, BT>(x, y, w, b, d, a.eps, a.mean + i, a.rstd + i))
      continue;
    const float c = sc / fd;
    const float var = std::max(sq / fd - c * c, 0.0f);
    const float rs = 1.0f / std::sqrt(var + a.eps);
    a.mean[i] = mu + c;
    a.rstd[i] = rs;
    row_store<V>(y, d, a.stream, [&](auto q, int64_t j) {
      using Q = decltype(q);
      prefetch_l2(xn, j);
      auto v = Q::mul(Q::sub(Q::sub(Q::load(f + j), Q::set1(mu)), Q::set1(c)), Q::set1(rs));
      if constexpr (HasW) v = Q::mul(v, Q::load(w + j));
      if constexpr (HasB) v = Q::add(v, Q::load(b + j));
      return v;
    });
  }
  if (a.stream) V::fence();
}
// --8<-- [end:ln_fwd_plain]

// --8<-- [start:ln_fwd]
template <class V, class T, class WT, class BT>
void ln_fwd_rows(const LnFwdArgs& a, int64_t r0, int64_t r1) {
  const int64_t d = a.d;
  const WT* w = static_cast<const WT*>(a.w);
  const BT* b = static_cast<const BT*>(a.b);
  const float fd = static_cast<float>(d);
  for (int64_t i = r0; i < r1; ++i) {
    const T* x = static_cast<const T*>(a.x) + i * d;
    const T* x0 = x;
    const T* r = a.residual ? static_cast<const T*>(a.residual) + i * d : nullptr;
    T* y = static_cast<T*>(a.y) + i * d;
    const bool more = a.prefetch && i + 1 < r1;  // the next row's x (and residual), asked for in the last pass
    const T* xn = more ? x0 + d : nullptr;
    const T* rn = more && r ? r + d : nullptr;
    if (r) {  // h = round_x(x + residual): stored once, then read back from the cache
      T* ho = static_cast<T*>(a.residual_out) + i * d;
      row_store<V>(ho, d, false, [&](auto q, int64_t j) {
        using Q = decltype(q);
        return Q::add(Q::load(x0 + j), Q::load(r + j));
      });
      x = ho;
    }
    const bool from_sum = r && a.residual_fp32;
    auto src = [&](auto q, int64_t j) {  // the row that is normalized: x (or h), or s = x + residual in fp32
      using Q = decltype(q);
      return from_sum ? Q::add(Q::load(x0 + j), Q::load(r + j)) : Q::load(x + j);
    };
    const float mu = row_sum<V>(d, src) / fd;
    float sc, sq;  // sum (x - mu) and sum (x - mu)^2
    row_sum2<V>(
        d, [&](auto q, int64_t j) { return decltype(q)::sub(src(q, j), decltype(q)::set1(mu)); },
        [&](auto q, int64_t j) {
          using Q = decltype(q);
          auto c = Q::sub(src(q, j), Q::set1(mu));
          return Q::mul(c, c);
        },
        sc, sq);
    if (__builtin_expect(sum_out_of_range(sq) || !std::isfinite(mu), 0) &&
        ln_fwd_row_wide<T, WT, BT>(from_sum ? x0 : x, y, w, b, d, a.eps, a.mean + i, a.rstd + i,
                                   from_sum ? r : nullptr))
      continue;
    const float c = sc / fd;  // the correction of the mean
    const float var = std::max(sq / fd - c * c, 0.0f);
    const float rs = 1.0f / std::sqrt(var + a.eps);
    a.mean[i] = mu + c;
    a.rstd[i] = rs;
    row_store<V>(y, d, a.stream, [&](auto q, int64_t j) {
      using Q = decltype(q);
      prefetch_l2(xn, j), prefetch_l2(rn, j);
      auto v = Q::mul(Q::sub(Q::sub(src(q, j), Q::set1(mu)), Q::set1(c)), Q::set1(rs));
      if (w) v = Q::mul(v, Q::load(w + j));
      if (b) v = Q::add(v, Q::load(b + j));
      return v;
    });
  }
  if (a.stream) V::fence();
}
// --8<-- [end:ln_fwd]

// --8<-- [start:ln_fwd_tiles]
// The same forward for short rows without a residual, a tile of R rows at a time (as rms_fwd_tiles): the bits of ln_fwd_rows
// (row_sum2's two sums are row_sum's, so two rows_sum sweeps give them), the weight and bias loaded once
// per column block. A tile with a row that needs the wide pass, and the rows after the last whole tile,
// go to ln_fwd_rows.
template <class V, class T, class WT, class BT>
void ln_fwd_tiles(const LnFwdArgs& a, int64_t r0, int64_t r1) {
  constexpr int R = tile_rows<V>();
  const int64_t d = a.d;
  const WT* w = static_cast<const WT*>(a.w);
  const BT* b = static_cast<const BT*>(a.b);
  const float fd = static_cast<float>(d);
  int64_t i = r0;
  for (; i + R <= r1; i += R) {
    const T* x = static_cast<const T*>(a.x) + i * d;  // row r of the tile at x + r * d
    T* y = static_cast<T*>(a.y) + i * d;
    float mu[R], sc[R], sq[R], c[R], rs[R];
    rows_sum<V, R>(d, [&](auto q, int r, int64_t j) { return decltype(q)::load(x + r * d + j); }, mu);
    for (int r = 0; r < R; ++r) mu[r] /= fd;
    rows_sum<V, R>(d, [&](auto q, int r, int64_t j) {
      using Q = decltype(q);
      return Q::sub(Q::load(x + r * d + j), Q::set1(mu[r]));
    }, sc);
    rows_sum<V, R>(d, [&](auto q, int r, int64_t j) {
      using Q = decltype(q);
      auto t = Q::sub(Q::load(x + r * d + j), Q::set1(mu[r]));
      return Q::mul(t, t);
    }, sq);
    bool odd = false;
    for (int r = 0; r < R; ++r) odd = odd || sum_out_of_range(sq[r]) || !std::isfinite(mu[r]);
    if (__builtin_expect(odd, 0)) {
      LnFwdArgs one = a;
      one.stream = false;  // the tile's own fence comes at the end
      ln_fwd_rows<V, T, WT, BT>(one, i, i + R);
      continue;
    }
    for (int r = 0; r < R; ++r) {
      c[r] = sc[r] / fd;
      const float var = std::max(sq[r] / fd - c[r] * c[r], 0.0f);
      rs[r] = 1.0f / std::sqrt(var + a.eps);
      a.mean[i + r] = mu[r] + c[r];
      a.rstd[i + r] = rs[r];
    }
    rows_store<V, R>(
        y, d, a.stream,
        [&](auto q, int64_t j) {
          using Q = decltype(q);
          struct { typename Q::R w, b; } g{w ? Q::load(w + j) : Q::set1(0.0f), b ? Q::load(b + j) : Q::set1(0.0f)};
          return g;
        },
        [&](auto q, int r, int64_t j, auto g) {
          using Q = decltype(q);
          auto v = Q::mul(Q::sub(Q::sub(Q::load(x + r * d + j), Q::set1(mu[r])), Q::set1(c[r])), Q::set1(rs[r]));
          if (w) v = Q::mul(v, g.w);
          if (b) v = Q::add(v, g.b);
          return v;
        });
  }
  if (i < r1) {
    ln_fwd_rows<V, T, WT, BT>(a, i, r1);  // fences itself when streaming
  } else if (a.stream) {
    V::fence();
  }
}
// --8<-- [end:ln_fwd_tiles]

// --8<-- [start:ln_bwd]
// One row's statistics for the backward: mean(g) and mean(g * xhat) from one sweep over dy and x (sum g,
// sum (x - mean) and sum g * (x - mean) * rstd; the saved mean is rounded to float32, and c = sum (x -
// mean) / d corrects it: xhat = (x - mean - c) * rstd, mean(g * xhat) = (sum g (x - mean) rstd - c rstd
// sum g) / d), returned as the constants of the last pass:
//   xhat = (x - mean) * rstd + ncr,   dx = (g * rstd + nrmg) + xhat * nrmgx
// (dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), each line two fused multiply-adds: one rounding
// each, the same in every vector lane and in the row's tail, S::fmadd).
struct LnBwdRow {
  float mu, rs, ncr, nrmg, nrmgx;
};

template <class V, class T, class WT, bool HasW>
inline LnBwdRow ln_bwd_stats(const T* dy, const T* x, const WT* w, float mu, float rs, int64_t d) {
  const float fd = static_cast<float>(d);
  auto g = [&](auto q, int64_t j) {
    using Q = decltype(q);
    if constexpr (HasW) return Q::mul(Q::load(dy + j), Q::load(w + j));
    else return Q::load(dy + j);
  };
  auto xm = [&](auto q, int64_t j) { return decltype(q)::sub(decltype(q)::load(x + j), decltype(q)::set1(mu)); };
  float sg, sc, sgx;
  row_sum3<V>(d, g, xm, [&](auto q, int64_t j) {
    using Q = decltype(q);
    return Q::mul(g(q, j), Q::mul(xm(q, j), Q::set1(rs)));
  }, sg, sc, sgx);
  const float c = std::isfinite(sc) ? sc / fd : 0.0f;
  const float mg = sg / fd;
  const float mgx = (sgx - c * rs * sg) / fd;
  return {mu, rs, -c * rs, -rs * mg, -rs * mgx};
}

// The last pass at element j (a vector or one element, q): dx of the row, with dy * xhat and dy added to
// the partials held in pw and pb (registers: a pair of rows adds into them one row after the other, the
// order of the row-by-row loop, so the sums have the same bits either way).
template <bool HasW, class Q, class T, class WT>
inline typename Q::R ln_bwd_value(Q, const T* dy, const T* x, const WT* w, const LnBwdRow& s, int64_t j,
                                  typename Q::R& pw, typename Q::R& pb) {
  const auto dyv = Q::load(dy + j);
  const auto xh = Q::fmadd(Q::sub(Q::load(x + j), Q::set1(s.mu)), Q::set1(s.rs), Q::set1(s.ncr));
  pw = Q::fmadd(dyv, xh, pw);
  pb = Q::add(pb, dyv);
  typename Q::R gv = dyv;
  if constexpr (HasW) gv = Q::mul(dyv, Q::load(w + j));
  return Q::fmadd(xh, Q::set1(s.nrmgx), Q::fmadd(gv, Q::set1(s.rs), Q::set1(s.nrmg)));
}

// Rows [r0, r1) of one block; part holds the block's dweight partial (first d floats) and dbias partial
// (next d). Rows go two at a time through the last pass, so the partials are read and written once per
// pair instead of once per row (for bfloat16 rows the partials are four times the row's own bytes); a
// pair whose outputs cannot both be streamed from a line boundary, and the last odd row, go alone. HasW:
// whether there is a gain (known at compile time, so no element tests for it).
template <class V, class T, class WT, bool HasW>
void ln_bwd_rows(const LnBwdArgs& a, int64_t r0, int64_t r1, float* part) {
  constexpr int W = V::W;
  const int64_t d = a.d;
  const WT* w = static_cast<const WT*>(a.w);
  float* pw = part;      // dweight partial
  float* pb = part + d;  // dbias partial
  const bool whole_lines = (d * int64_t(sizeof(T))) % 64 == 0;
  for (int64_t i = r0; i < r1;) {
    const T* dy = static_cast<const T*>(a.dy) + i * d;
    const T* x = static_cast<const T*>(a.x) + i * d;
    T* dx = static_cast<T*>(a.dx) + i * d;
    const bool pair = i + 1 < r1 && W > 1 &&
                      (!a.stream || (whole_lines && (reinterpret_cast<uintptr_t>(dx) & 63) == 0));
    const int64_t n = pair ? 2 : 1;
    const bool more = a.prefetch && i + n < r1;  // the next rows' dy and x, asked for in the last pass
    const T* dyn = more ? dy + n * d : nullptr;
    const T* xn = more ? x + n * d : nullptr;
    const LnBwdRow s0 = ln_bwd_stats<V, T, WT, HasW>(dy, x, w, a.mean[i], a.rstd[i], d);
    if (!pair) {
      row_store<V>(dx, d, a.stream, [&](auto q, int64_t j) {
        using Q = decltype(q);
        prefetch_l2(dyn, j), prefetch_l2(xn, j);
        auto vw = Q::load(pw + j), vb = Q::load(pb + j);
        const auto v = ln_bwd_value<HasW>(q, dy, x, w, s0, j, vw, vb);
        Q::store(pw + j, vw), Q::store(pb + j, vb);
        return v;
      });
      i += 1;
      continue;
    }
    const LnBwdRow s1 = ln_bwd_stats<V, T, WT, HasW>(dy + d, x + d, w, a.mean[i + 1], a.rstd[i + 1], d);
    auto both = [&](auto q, int64_t j, auto& y0, auto& y1) {
      using Q = decltype(q);
      prefetch_l2(dyn, j), prefetch_l2(xn, j), prefetch_l2(dyn ? dyn + d : nullptr, j),
          prefetch_l2(xn ? xn + d : nullptr, j);
      auto vw = Q::load(pw + j), vb = Q::load(pb + j);
      y0 = ln_bwd_value<HasW>(q, dy, x, w, s0, j, vw, vb);
      y1 = ln_bwd_value<HasW>(q, dy + d, x + d, w, s1, j, vw, vb);
      Q::store(pw + j, vw), Q::store(pb + j, vb);
    };
    int64_t j = 0;
    for (; j + 2 * W <= d; j += 2 * W) {
      typename V::R a0, a1, b0, b1;
      both(V{}, j, a0, b0);
      both(V{}, j + W, a1, b1);
      if (a.stream) {
        V::stream2(dx + j, a0, a1), V::stream2(dx + d + j, b0, b1);
      } else {
        V::store2(dx + j, a0, a1), V::store2(dx + d + j, b0, b1);
      }
    }
    for (; j + W <= d; j += W) {
      typename V::R a0, b0;
      both(V{}, j, a0, b0);
      V::store(dx + j, a0), V::store(dx + d + j, b0);
    }
    for (; j < d; ++j) {
      float a0, b0;
      both(S{}, j, a0, b0);
      S::store(dx + j, a0), S::store(dx + d + j, b0);
    }
    i += 2;
  }
  if (a.stream) V::fence();
}
// --8<-- [end:ln_bwd]

#pragma GCC diagnostic pop

}  // namespace normlab_cpu
