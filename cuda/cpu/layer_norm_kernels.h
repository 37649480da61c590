// LayerNorm kernels for the CPU, one template for every instruction set (V, T, WT, BT as in
// rms_norm_kernels.h; this header and simd.h are all a copy needs).
//
// Forward, per row (the row stays in cache across the passes):
//   pass 1  mean = sum x / d
//   pass 2  var = sum (x - mean)^2 / d            (two-pass: no cancellation), rstd = 1 / sqrt(var + eps)
//   pass 3  y = round_x(((x - mean) * rstd) * w + b)
// Backward, per row: pass 1 sums g and g * xhat (g = dy * w, xhat = (x - mean) * rstd);
// pass 2 dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), and dy * xhat, dy added to the float32
// partial sums of dweight and dbias that the caller reduces in a fixed order (deterministic).
#pragma once

#include <cmath>
#include <cstdint>

#include "simd.h"

namespace normlab_cpu {

struct LnFwdArgs {
  const void* x;
  const void* w;  // nullptr: no weight
  const void* b;  // nullptr: no bias
  void* y;
  float* mean;
  float* rstd;
  int64_t d;
  float eps;
  bool stream;
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
};

// The row lambdas return vector registers; GCC notes that their ABI differs without AVX, but every call
// is inlined into V::run (compiled for V's instruction set), so no such value crosses a function boundary.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

// --8<-- [start:ln_fwd]
template <class V, class T, class WT, class BT>
void ln_fwd_rows(const LnFwdArgs& a, int64_t r0, int64_t r1) {
  const int64_t d = a.d;
  const WT* w = static_cast<const WT*>(a.w);
  const BT* b = static_cast<const BT*>(a.b);
  const float fd = static_cast<float>(d);
  for (int64_t i = r0; i < r1; ++i) {
    const T* x = static_cast<const T*>(a.x) + i * d;
    T* y = static_cast<T*>(a.y) + i * d;
    const float mu = row_sum<V>(d, [&](auto q, int64_t j) { return decltype(q)::load(x + j); }) / fd;
    const float var = row_sum<V>(d, [&](auto q, int64_t j) {
      using Q = decltype(q);
      auto c = Q::sub(Q::load(x + j), Q::set1(mu));
      return Q::mul(c, c);
    }) / fd;
    const float rs = 1.0f / std::sqrt(var + a.eps);
    a.mean[i] = mu;
    a.rstd[i] = rs;
    row_store<V>(y, d, a.stream, [&](auto q, int64_t j) {
      using Q = decltype(q);
      auto v = Q::mul(Q::sub(Q::load(x + j), Q::set1(mu)), Q::set1(rs));
      if (w) v = Q::mul(v, Q::load(w + j));
      if (b) v = Q::add(v, Q::load(b + j));
      return v;
    });
  }
  if (a.stream) V::fence();
}
// --8<-- [end:ln_fwd]

// --8<-- [start:ln_bwd]
template <class V, class T, class WT>
void ln_bwd_rows(const LnBwdArgs& a, int64_t r0, int64_t r1, float* part) {
  const int64_t d = a.d;
  const WT* w = static_cast<const WT*>(a.w);
  const float fd = static_cast<float>(d);
  float* pw = part;      // dweight partial
  float* pb = part + d;  // dbias partial
  for (int64_t i = r0; i < r1; ++i) {
    const T* dy = static_cast<const T*>(a.dy) + i * d;
    const T* x = static_cast<const T*>(a.x) + i * d;
    T* dx = static_cast<T*>(a.dx) + i * d;
    const float mu = a.mean[i], rs = a.rstd[i];
    auto g = [&](auto q, int64_t j) {
      using Q = decltype(q);
      return w ? Q::mul(Q::load(dy + j), Q::load(w + j)) : Q::load(dy + j);
    };
    auto xhat = [&](auto q, int64_t j) {
      using Q = decltype(q);
      return Q::mul(Q::sub(Q::load(x + j), Q::set1(mu)), Q::set1(rs));
    };
    const float mg = row_sum<V>(d, g) / fd;
    const float mgx = row_sum<V>(d, [&](auto q, int64_t j) { return decltype(q)::mul(g(q, j), xhat(q, j)); }) / fd;
    row_store<V>(dx, d, a.stream, [&](auto q, int64_t j) {
      using Q = decltype(q);
      return Q::mul(Q::set1(rs), Q::sub(Q::sub(g(q, j), Q::set1(mg)), Q::mul(xhat(q, j), Q::set1(mgx))));
    });
    row_store<V>(pw, d, false, [&](auto q, int64_t j) {
      using Q = decltype(q);
      return Q::add(Q::load(pw + j), Q::mul(Q::load(dy + j), xhat(q, j)));
    });
    row_store<V>(pb, d, false, [&](auto q, int64_t j) {
      using Q = decltype(q);
      return Q::add(Q::load(pb + j), Q::load(dy + j));
    });
  }
  if (a.stream) V::fence();
}
// --8<-- [end:ln_bwd]

#pragma GCC diagnostic pop

}  // namespace normlab_cpu
