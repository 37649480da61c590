// Fused LayerNorm for the CPU: normlab::layer_norm_fwd and normlab::layer_norm_bwd (schemas and contract
// in cuda/ops.cpp). Same structure as rms_norm_cpu.cpp: the kernel text after `#else` is compiled once per
// instruction set (AVX-512, AVX2, scalar) and chosen at run time.
//
// Forward, per row (the row stays in cache across the passes):
//   pass 1  mean = sum x / d
//   pass 2  var = sum (x - mean)^2 / d            (two-pass: no cancellation), rstd = 1 / sqrt(var + eps)
//   pass 3  y = round_x(((x - mean) * rstd) * w + b)
// Backward, per row: pass 1 sums g and g * xhat (g = dy * w, xhat = (x - mean) * rstd);
// pass 2 dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), and dy * xhat, dy added to the block partials
// of dweight and dbias (fixed row blocks, fixed-order reduction: deterministic).
#ifndef NL_KERNEL_BODY
#include "cpu_common.h"

#include <torch/library.h>

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

}  // namespace normlab_cpu

#define NL_KERNEL_BODY
#define NL_ISA 512
#define NL_BF16_NATIVE 1
namespace normlab_cpu::isa512bf16 {
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,f16c")
#include "simd.h"
#include "layer_norm_cpu.cpp"
#pragma GCC pop_options
}  // namespace normlab_cpu::isa512bf16
#undef NL_BF16_NATIVE
#define NL_BF16_NATIVE 0
namespace normlab_cpu::isa512 {
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")
#include "simd.h"
#include "layer_norm_cpu.cpp"
#pragma GCC pop_options
}  // namespace normlab_cpu::isa512
#undef NL_BF16_NATIVE
#undef NL_ISA
#define NL_ISA 256
namespace normlab_cpu::isa256 {
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "simd.h"
#include "layer_norm_cpu.cpp"
#pragma GCC pop_options
}  // namespace normlab_cpu::isa256
#undef NL_ISA
#define NL_ISA 0
namespace normlab_cpu::isa0 {
#include "simd.h"
#include "layer_norm_cpu.cpp"
}  // namespace normlab_cpu::isa0
#undef NL_ISA
#undef NL_KERNEL_BODY

namespace normlab_cpu {
namespace {

// Calls f(T{}, float{}, float{}) with the element type of x; gains and biases are passed as float32.
template <class F>
void by_types3(at::ScalarType xt, F&& f) {
  switch (xt) {
    case at::kFloat: f(float{}, float{}, float{}); break;
    case at::kBFloat16: f(c10::BFloat16{}, float{}, float{}); break;
    case at::kHalf: f(c10::Half{}, float{}, float{}); break;
    default: TORCH_CHECK(false, "normlab: unsupported dtype ", xt);
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_fwd_cpu(const at::Tensor& x,
                                                                  const c10::optional<at::Tensor>& weight,
                                                                  const c10::optional<at::Tensor>& bias,
                                                                  double eps) {
  const char* op = "normlab::layer_norm_fwd";
  check_x(x, op);
  check_param(weight, x, op, "weight");
  check_param(bias, x, op, "bias");
  TORCH_CHECK(eps >= 0 && std::isfinite(eps), op, ": eps must be finite and non-negative, got ", eps);
  const int64_t d = x.size(-1);
  const int64_t rows = c10::multiply_integers(x.sizes().slice(0, x.dim() - 1));
  at::Tensor y = at::empty_like(x);
  at::Tensor mean = stats_like(x), rstd = stats_like(x);
  const at::Tensor wf = as_f32(weight), bf = as_f32(bias);
  LnFwdArgs a{x.data_ptr(), wf.defined() ? wf.data_ptr() : nullptr, bf.defined() ? bf.data_ptr() : nullptr, y.data_ptr(), mean.data_ptr<float>(),
              rstd.data_ptr<float>(), d, static_cast<float>(eps),
              static_cast<int64_t>(y.nbytes()) >= stream_bytes()};
  by_types3(x.scalar_type(), [&](auto t, auto wt, auto bt) {
    using T = decltype(t);
    using WT = decltype(wt);
    using BT = decltype(bt);
    auto fn = &isa0::ln_fwd_rows<T, WT, BT>;
    switch (pick_isa()) {
      case Isa::avx512bf16: fn = &isa512bf16::ln_fwd_rows<T, WT, BT>; break;
      case Isa::avx512: fn = &isa512::ln_fwd_rows<T, WT, BT>; break;
      case Isa::avx2: fn = &isa256::ln_fwd_rows<T, WT, BT>; break;
      default: break;
    }
    const int64_t grain = std::max<int64_t>(1, kGrainElems / std::max<int64_t>(d, 1));
    at::parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) { fn(a, r0, r1); });
  });
  return {y, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_bwd_cpu(const at::Tensor& dy, const at::Tensor& x,
                                                                  const c10::optional<at::Tensor>& weight,
                                                                  const at::Tensor& mean, const at::Tensor& rstd) {
  const char* op = "normlab::layer_norm_bwd";
  check_x(x, op);
  check_same(dy, x, op, "dy");
  check_param(weight, x, op, "weight");
  for (const at::Tensor* s : {&mean, &rstd})
    TORCH_CHECK(s->scalar_type() == at::kFloat && s->is_contiguous() && s->sizes() == x.sizes().slice(0, x.dim() - 1),
                op, ": mean and rstd must be contiguous float32 tensors of shape x.shape[:-1]");
  const int64_t d = x.size(-1);
  const int64_t rows = c10::multiply_integers(x.sizes().slice(0, x.dim() - 1));
  const int64_t nb = (rows + kRowBlock - 1) / kRowBlock;
  at::Tensor dx = at::empty_like(x);
  at::Tensor db = at::empty({d}, dy.options());
  at::Tensor dw = weight.has_value() ? at::empty({d}, weight->options()) : at::empty({0}, x.options());
  // part[b] holds block b's partial dweight (first d floats) and dbias (next d floats).
  at::Tensor part = at::zeros({nb, 2 * d}, x.options().dtype(at::kFloat));
  const at::Tensor wf = as_f32(weight);
  LnBwdArgs a{dy.data_ptr(), x.data_ptr(), wf.defined() ? wf.data_ptr() : nullptr,
              mean.data_ptr<float>(), rstd.data_ptr<float>(), dx.data_ptr(), d,
              static_cast<int64_t>(dx.nbytes()) >= stream_bytes()};
  if (d > 0) {
    by_types3(x.scalar_type(), [&](auto t, auto wt, auto) {
      using T = decltype(t);
      using WT = decltype(wt);
      auto fn = &isa0::ln_bwd_rows<T, WT>;
      switch (pick_isa()) {
        case Isa::avx512bf16: fn = &isa512bf16::ln_bwd_rows<T, WT>; break;
        case Isa::avx512: fn = &isa512::ln_bwd_rows<T, WT>; break;
        case Isa::avx2: fn = &isa256::ln_bwd_rows<T, WT>; break;
        default: break;
      }
      float* p = part.data_ptr<float>();
      at::parallel_for(0, nb, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) fn(a, b * kRowBlock, std::min(rows, (b + 1) * kRowBlock), p + b * 2 * d);
      });
    });
  }
  at::Tensor both = at::empty({2 * d}, x.options().dtype(at::kFloat));
  reduce_blocks(part, both);
  if (weight.has_value()) dw.copy_(both.slice(0, 0, d));
  db.copy_(both.slice(0, d, 2 * d));
  return {dx, dw, db};
}

}  // namespace

TORCH_LIBRARY_IMPL(normlab, CPU, m) {
  m.impl("layer_norm_fwd", &layer_norm_fwd_cpu);
  m.impl("layer_norm_bwd", &layer_norm_bwd_cpu);
}

}  // namespace normlab_cpu

#else  // ===================== kernel body: compiled once per instruction set =====================
// V (this instruction set), S (one lane), row_sum and row_store come from simd.h and cpu_common.h.

// --8<-- [start:ln_fwd]
template <class T, class WT, class BT>
void ln_fwd_rows(const LnFwdArgs& a, int64_t r0, int64_t r1) {
  const int64_t d = a.d;
  const WT* w = static_cast<const WT*>(a.w);
  const BT* b = static_cast<const BT*>(a.b);
  const float fd = static_cast<float>(d);
  for (int64_t i = r0; i < r1; ++i) {
    const T* x = static_cast<const T*>(a.x) + i * d;
    T* y = static_cast<T*>(a.y) + i * d;
    const float mu = row_sum(d, [&](auto q, int64_t j) { return decltype(q)::load(x + j); }) / fd;
    const float var = row_sum(d, [&](auto q, int64_t j) {
      using Q = decltype(q);
      auto c = Q::sub(Q::load(x + j), Q::set1(mu));
      return Q::mul(c, c);
    }) / fd;
    const float rs = 1.0f / std::sqrt(var + a.eps);
    a.mean[i] = mu;
    a.rstd[i] = rs;
    row_store(y, d, a.stream, [&](auto q, int64_t j) {
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
template <class T, class WT>
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
    const float mg = row_sum(d, g) / fd;
    const float mgx = row_sum(d, [&](auto q, int64_t j) { return decltype(q)::mul(g(q, j), xhat(q, j)); }) / fd;
    row_store(dx, d, a.stream, [&](auto q, int64_t j) {
      using Q = decltype(q);
      return Q::mul(Q::set1(rs), Q::sub(Q::sub(g(q, j), Q::set1(mg)), Q::mul(xhat(q, j), Q::set1(mgx))));
    });
    row_store(pw, d, false, [&](auto q, int64_t j) {
      using Q = decltype(q);
      return Q::add(Q::load(pw + j), Q::mul(Q::load(dy + j), xhat(q, j)));
    });
    row_store(pb, d, false, [&](auto q, int64_t j) {
      using Q = decltype(q);
      return Q::add(Q::load(pb + j), Q::load(dy + j));
    });
  }
  if (a.stream) V::fence();
}
// --8<-- [end:ln_bwd]

#endif
