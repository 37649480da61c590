// Fused RMSNorm for the CPU: normlab::rms_norm_fwd and normlab::rms_norm_bwd (schemas in cuda/ops.cpp,
// where the full contract is written down).
//
// Forward, per row (one row stays in the L1/L2 cache between its passes, so memory sees each byte once):
//   [residual]  h = round_x(x + residual), stored as residual_out
//   pass 1      s = sum h^2                     (fp32, fixed summation order)
//               rstd = 1 / sqrt(s / d + eps)     (the only value saved for backward besides the input)
//   pass 2      y = round_x(round_x(h * rstd) * w)       convention 0, Llama
//               y = round_x((h * rstd) * (1 + w))        convention 1, Gemma
// Backward, per row: pass 1 a = sum g*h with g = dy * weight_eff; pass 2 dx = rstd * (g - xhat * m) with
// xhat = h * rstd, m = a * rstd / d, and the row's dy * xhat added to its block's dweight partial.
//
// The kernel text between `#else` and the last `#endif` is compiled three times (AVX-512, AVX2, scalar) by
// including this file from itself inside `#pragma GCC target` regions; cpu_common.h chooses one at run time.
// Inputs must be contiguous and x, weight, residual of dtype float32, bfloat16 or float16 (weight may be
// float32 with 16-bit x). Rows run in parallel with at::parallel_for.
#ifndef NL_KERNEL_BODY
#include "cpu_common.h"

#include <torch/library.h>

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
};

}  // namespace normlab_cpu

// --8<-- [start:foreach_isa]
#define NL_KERNEL_BODY
#define NL_ISA 512
#define NL_BF16_NATIVE 1
namespace normlab_cpu::isa512bf16 {
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,f16c")
#include "simd.h"
#include "rms_norm_cpu.cpp"
#pragma GCC pop_options
}  // namespace normlab_cpu::isa512bf16
#undef NL_BF16_NATIVE
#define NL_BF16_NATIVE 0
namespace normlab_cpu::isa512 {
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")
#include "simd.h"
#include "rms_norm_cpu.cpp"
#pragma GCC pop_options
}  // namespace normlab_cpu::isa512
#undef NL_BF16_NATIVE
#undef NL_ISA
#define NL_ISA 256
namespace normlab_cpu::isa256 {
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "simd.h"
#include "rms_norm_cpu.cpp"
#pragma GCC pop_options
}  // namespace normlab_cpu::isa256
#undef NL_ISA
#define NL_ISA 0
namespace normlab_cpu::isa0 {
#include "simd.h"
#include "rms_norm_cpu.cpp"
}  // namespace normlab_cpu::isa0
#undef NL_ISA
#undef NL_KERNEL_BODY
// --8<-- [end:foreach_isa]

namespace normlab_cpu {
namespace {

template <class T, class WT>
void rms_fwd_dispatch(const RmsFwdArgs& a, int64_t rows) {
  auto fn = &isa0::rms_fwd_rows<T, WT>;
  switch (pick_isa()) {
    case Isa::avx512bf16: fn = &isa512bf16::rms_fwd_rows<T, WT>; break;
    case Isa::avx512: fn = &isa512::rms_fwd_rows<T, WT>; break;
    case Isa::avx2: fn = &isa256::rms_fwd_rows<T, WT>; break;
    default: break;
  }
  const int64_t grain = std::max<int64_t>(1, kGrainElems / std::max<int64_t>(a.d, 1));
  at::parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) { fn(a, r0, r1); });
}

template <class T, class WT>
void rms_bwd_dispatch(const RmsBwdArgs& a, int64_t rows, float* part) {
  auto fn = &isa0::rms_bwd_rows<T, WT>;
  switch (pick_isa()) {
    case Isa::avx512bf16: fn = &isa512bf16::rms_bwd_rows<T, WT>; break;
    case Isa::avx512: fn = &isa512::rms_bwd_rows<T, WT>; break;
    case Isa::avx2: fn = &isa256::rms_bwd_rows<T, WT>; break;
    default: break;
  }
  const int64_t nb = (rows + kRowBlock - 1) / kRowBlock;
  // Fixed blocks of kRowBlock rows; each block owns one row of `part` (its dweight partial sum).
  at::parallel_for(0, nb, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      fn(a, b * kRowBlock, std::min(rows, (b + 1) * kRowBlock), part ? part + b * a.d : nullptr);
  });
}

// Calls f(T{}, float{}) with the element type of x; gains are passed as float32 (see as_f32).
template <class F>
void by_types(at::ScalarType xt, F&& f) {
  switch (xt) {
    case at::kFloat: f(float{}, float{}); break;
    case at::kBFloat16: f(c10::BFloat16{}, float{}); break;
    case at::kHalf: f(c10::Half{}, float{}); break;
    default: TORCH_CHECK(false, "normlab: unsupported dtype ", xt);
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> rms_norm_fwd_cpu(const at::Tensor& x,
                                                                const c10::optional<at::Tensor>& weight,
                                                                const c10::optional<at::Tensor>& residual,
                                                                double eps, int64_t convention) {
  const char* op = "normlab::rms_norm_fwd";
  check_x(x, op);
  check_param(weight, x, op, "weight");
  if (residual.has_value()) check_same(*residual, x, op, "residual");
  TORCH_CHECK(convention == 0 || convention == 1, op, ": convention must be 0 (llama) or 1 (gemma), got ", convention);
  TORCH_CHECK(eps >= 0 && std::isfinite(eps), op, ": eps must be finite and non-negative, got ", eps);
  const int64_t d = x.size(-1);
  const int64_t rows = c10::multiply_integers(x.sizes().slice(0, x.dim() - 1));
  at::Tensor y = at::empty_like(x);
  at::Tensor res_out = residual.has_value() ? at::empty_like(x) : at::empty({0}, x.options());
  at::Tensor rstd = stats_like(x);
  const at::Tensor wf = as_f32(weight);
  RmsFwdArgs a{x.data_ptr(),
               residual.has_value() ? residual->data_ptr() : nullptr,
               residual.has_value() ? res_out.data_ptr() : nullptr,
               wf.defined() ? wf.data_ptr() : nullptr,
               y.data_ptr(),
               rstd.data_ptr<float>(),
               d,
               static_cast<float>(eps),
               static_cast<int>(convention),
               static_cast<int64_t>(y.nbytes()) >= stream_bytes()};
  by_types(x.scalar_type(), [&](auto t, auto wt) { rms_fwd_dispatch<decltype(t), decltype(wt)>(a, rows); });
  return {y, res_out, rstd};
}

std::tuple<at::Tensor, at::Tensor> rms_norm_bwd_cpu(const at::Tensor& dy, const at::Tensor& x,
                                                    const c10::optional<at::Tensor>& weight,
                                                    const at::Tensor& rstd, int64_t convention) {
  const char* op = "normlab::rms_norm_bwd";
  check_x(x, op);
  check_same(dy, x, op, "dy");
  check_param(weight, x, op, "weight");
  TORCH_CHECK(convention == 0 || convention == 1, op, ": convention must be 0 (llama) or 1 (gemma), got ", convention);
  TORCH_CHECK(rstd.scalar_type() == at::kFloat && rstd.is_contiguous() &&
                  rstd.sizes() == x.sizes().slice(0, x.dim() - 1),
              op, ": rstd must be a contiguous float32 tensor of shape x.shape[:-1]");
  const int64_t d = x.size(-1);
  const int64_t rows = c10::multiply_integers(x.sizes().slice(0, x.dim() - 1));
  at::Tensor dx = at::empty_like(x);
  at::Tensor dw, part;
  if (weight.has_value()) {
    dw = at::empty({d}, weight->options());
    part = at::zeros({(rows + kRowBlock - 1) / kRowBlock, d}, x.options().dtype(at::kFloat));
  } else {
    dw = at::empty({0}, x.options());
  }
  const at::Tensor wf = as_f32(weight);
  RmsBwdArgs a{dy.data_ptr(), x.data_ptr(), wf.defined() ? wf.data_ptr() : nullptr,
               rstd.data_ptr<float>(), dx.data_ptr(), d, static_cast<int>(convention),
               static_cast<int64_t>(dx.nbytes()) >= stream_bytes()};
  if (d > 0)
    by_types(x.scalar_type(), [&](auto t, auto wt) {
      rms_bwd_dispatch<decltype(t), decltype(wt)>(a, rows, part.defined() ? part.data_ptr<float>() : nullptr);
    });
  if (weight.has_value()) reduce_blocks(part, dw);
  return {dx, dw};
}

}  // namespace

TORCH_LIBRARY_IMPL(normlab, CPU, m) {
  m.impl("rms_norm_fwd", &rms_norm_fwd_cpu);
  m.impl("rms_norm_bwd", &rms_norm_bwd_cpu);
}

}  // namespace normlab_cpu

#else  // ===================== kernel body: compiled once per instruction set =====================
// V (this instruction set), S (one lane), row_sum and row_store come from simd.h and cpu_common.h.


// --8<-- [start:rms_fwd]
template <class T, class WT>
void rms_fwd_rows(const RmsFwdArgs& a, int64_t r0, int64_t r1) {
  const int64_t d = a.d;
  const WT* w = static_cast<const WT*>(a.w);
  for (int64_t i = r0; i < r1; ++i) {
    const T* h = static_cast<const T*>(a.x) + i * d;
    T* y = static_cast<T*>(a.y) + i * d;
    if (a.residual) {  // h = round_x(x + residual): stored once, then read back from the cache
      const T* r = static_cast<const T*>(a.residual) + i * d;
      T* ho = static_cast<T*>(a.residual_out) + i * d;
      row_store(ho, d, false, [&](auto q, int64_t j) {
        using Q = decltype(q);
        return Q::add(Q::load(h + j), Q::load(r + j));
      });
      h = ho;
    }
    const float ss = row_sum(d, [&](auto q, int64_t j) {
      using Q = decltype(q);
      auto v = Q::load(h + j);
      return Q::mul(v, v);
    });  // the squares are rounded before the add in every lane and in the tail alike
    const float rs = 1.0f / std::sqrt(ss / static_cast<float>(d) + a.eps);
    a.rstd[i] = rs;
    if (!w) {
      row_store(y, d, a.stream, [&](auto q, int64_t j) {
        using Q = decltype(q);
        return Q::mul(Q::load(h + j), Q::set1(rs));
      });
    } else if (a.convention == 0) {  // Llama: cast the normalized row to x's dtype, then scale
      row_store(y, d, a.stream, [&](auto q, int64_t j) {
        using Q = decltype(q);
        return Q::mul(Q::round(Q::mul(Q::load(h + j), Q::set1(rs)), static_cast<T*>(nullptr)), Q::load(w + j));
      });
    } else {  // Gemma: scale by (1 + w) in fp32, cast once
      row_store(y, d, a.stream, [&](auto q, int64_t j) {
        using Q = decltype(q);
        return Q::mul(Q::mul(Q::load(h + j), Q::set1(rs)), Q::add(Q::set1(1.0f), Q::load(w + j)));
      });
    }
  }
  if (a.stream) V::fence();
}
// --8<-- [end:rms_fwd]

// --8<-- [start:rms_bwd]
// Rows [r0, r1) form one block; `part` (length d, zeroed) receives the block's dweight partial sum.
template <class T, class WT>
void rms_bwd_rows(const RmsBwdArgs& a, int64_t r0, int64_t r1, float* part) {
  const int64_t d = a.d;
  const WT* w = static_cast<const WT*>(a.w);
  const bool gemma = a.convention == 1;
  for (int64_t i = r0; i < r1; ++i) {
    const T* dy = static_cast<const T*>(a.dy) + i * d;
    const T* x = static_cast<const T*>(a.x) + i * d;
    T* dx = static_cast<T*>(a.dx) + i * d;
    const float rs = a.rstd[i];
    auto g = [&](auto q, int64_t j) {  // g = dy * weight_eff
      using Q = decltype(q);
      auto v = Q::load(dy + j);
      if (!w) return v;
      return Q::mul(v, gemma ? Q::add(Q::set1(1.0f), Q::load(w + j)) : Q::load(w + j));
    };
    const float gh = row_sum(d, [&](auto q, int64_t j) {
      using Q = decltype(q);
      return Q::mul(g(q, j), Q::load(x + j));
    });
    const float m = gh * rs / static_cast<float>(d);  // mean(g * xhat)
    row_store(dx, d, a.stream, [&](auto q, int64_t j) {
      using Q = decltype(q);
      auto xhat = Q::mul(Q::load(x + j), Q::set1(rs));
      return Q::mul(Q::set1(rs), Q::sub(g(q, j), Q::mul(xhat, Q::set1(m))));
    });
    if (part) {  // dweight partial: the row is still in L1/L2
      row_store(part, d, false, [&](auto q, int64_t j) {
        using Q = decltype(q);
        return Q::add(Q::load(part + j), Q::mul(Q::load(dy + j), Q::mul(Q::load(x + j), Q::set1(rs))));
      });
    }
  }
  if (a.stream) V::fence();
}
// --8<-- [end:rms_bwd]

#endif
