// The torch glue of the CPU LayerNorm: normlab::layer_norm_fwd (with the optional fused residual add) and
// normlab::layer_norm_bwd (schemas and contract in cuda/ops.h), the same structure as rms_norm_cpu.cpp, with the kernels of
// layer_norm_kernels.h.
#include <torch/library.h>

#include "cpu_common.h"
#include "isa.h"
#include "layer_norm_kernels.h"

#include <type_traits>
#include <vector>

namespace normlab_cpu {
namespace {

// Calls f(T{}, float{}, float{}) with the element type of x; gains and biases are passed as float32.
template <class F>
void by_types3(at::ScalarType xt, F&& f) {
  switch (xt) {
    case at::kFloat: f(float{}, float{}, float{}); break;
    case at::kBFloat16: f(c10::BFloat16{}, float{}, float{}); break;
    case at::kHalf: f(c10::Half{}, float{}, float{}); break;
    default: TORCH_CHECK_TYPE(false, "normlab: unsupported dtype ", xt);
  }
}

void check_fwd_args(const at::Tensor& x, const c10::optional<at::Tensor>& weight,
                    const c10::optional<at::Tensor>& bias, double eps, const c10::optional<at::Tensor>& residual,
                    int64_t contract, const char* op) {
  check_x(x, op);
  check_param(weight, x, op, "weight");
  check_param(bias, x, op, "bias");
  if (residual.has_value()) check_like_x(*residual, x, op, "residual");
  check_eps(eps, op);
  check_ln_contract(contract, op);  // 0 "hf", 2 "fp32"
}

// Writes y, mean, rstd and residual_out (when a residual is given), allocated and checked by the caller.
void ln_fwd_into(const at::Tensor& x, const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& bias,
                 double eps, const c10::optional<at::Tensor>& residual, int64_t contract, at::Tensor& y,
                 at::Tensor& mean, at::Tensor& rstd, at::Tensor& res_out) {
  const int64_t d = x.size(-1);
  const int64_t rows = rows_of(x);
  const at::Tensor wf = as_f32(weight), bf = as_f32(bias);
  LnFwdArgs a{x.data_ptr(), residual.has_value() ? residual->data_ptr() : nullptr,
              residual.has_value() ? res_out.data_ptr() : nullptr,
              wf.defined() ? wf.data_ptr() : nullptr, bf.defined() ? bf.data_ptr() : nullptr,
              y.data_ptr(), mean.data_ptr<float>(), rstd.data_ptr<float>(), d, static_cast<float>(eps),
              use_stream(y.data_ptr(), static_cast<int64_t>(y.nbytes())), contract == 2, prefetch_rows()};
  by_types3(x.scalar_type(), [&](auto t, auto wt, auto bt) {
    using T = decltype(t);
    using WT = decltype(wt);
    using BT = decltype(bt);
    const Isa isa = pick_isa();
    const int64_t grain = std::max<int64_t>(1, kGrainElems / std::max<int64_t>(d, 1));
    const bool tiles = use_tiles(d, sizeof(T)) && !a.residual;
    const bool plain = !a.residual && !tiles && plain_rows();
    at::parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) {
      std::vector<float> buf(plain && !std::is_same_v<T, float> ? d : 0);  // one row widened to float32
      with_isa(isa, [&](auto v) {
        using V = decltype(v);
        if (tiles)
          ln_fwd_tiles<V, T, WT, BT>(a, r0, r1);
        else if (!plain)
          ln_fwd_rows<V, T, WT, BT>(a, r0, r1);
        else if (a.w && a.b)
          ln_fwd_plain<V, T, WT, BT, true, true>(a, r0, r1, buf.data());
        else if (a.w)
          ln_fwd_plain<V, T, WT, BT, true, false>(a, r0, r1, buf.data());
        else if (a.b)
          ln_fwd_plain<V, T, WT, BT, false, true>(a, r0, r1, buf.data());
        else
          ln_fwd_plain<V, T, WT, BT, false, false>(a, r0, r1, buf.data());
      });
    });
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> layer_norm_fwd_cpu(
    const at::Tensor& x, const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& bias, double eps,
    const c10::optional<at::Tensor>& residual, int64_t contract) {
  check_fwd_args(x, weight, bias, eps, residual, contract, "normlab::layer_norm_fwd");
  at::Tensor y = at::empty_like(x);
  at::Tensor res_out = residual.has_value() ? at::empty_like(x) : at::empty({0}, x.options());
  at::Tensor mean = stats_like(x), rstd = stats_like(x);
  ln_fwd_into(x, weight, bias, eps, residual, contract, y, mean, rstd, res_out);
  return {y, mean, rstd, res_out};
}

// The out= variant: y (and residual_out) go into the caller's buffers.
std::tuple<at::Tensor, at::Tensor> layer_norm_fwd_out_cpu(const at::Tensor& x, const c10::optional<at::Tensor>& weight,
                                                          const c10::optional<at::Tensor>& bias, double eps,
                                                          const c10::optional<at::Tensor>& residual, int64_t contract,
                                                          at::Tensor& y, const c10::optional<at::Tensor>& residual_out) {
  const char* op = "normlab::layer_norm_fwd_out";
  check_fwd_args(x, weight, bias, eps, residual, contract, op);
  check_ln_out(x, weight, bias, residual, y, residual_out, op);
  at::Tensor res_out = residual_out.has_value() ? *residual_out : at::Tensor();
  at::Tensor mean = stats_like(x), rstd = stats_like(x);
  ln_fwd_into(x, weight, bias, eps, residual, contract, y, mean, rstd, res_out);
  return {mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_bwd_cpu(const at::Tensor& dy, const at::Tensor& x,
                                                                  const c10::optional<at::Tensor>& weight,
                                                                  const at::Tensor& mean, const at::Tensor& rstd) {
  const char* op = "normlab::layer_norm_bwd";
  check_x(x, op);
  check_like_x(dy, x, op, "dy");
  check_param(weight, x, op, "weight");
  check_stat(mean, x, op, "mean");
  check_stat(rstd, x, op, "rstd");
  const int64_t d = x.size(-1);
  const int64_t rows = rows_of(x);
  const int64_t nb = (rows + kRowBlock - 1) / kRowBlock;
  at::Tensor dx = at::empty_like(x);
  // dweight and dbias: the float32 sums, rounded once by the caller to each parameter's dtype
  at::Tensor db = at::empty({d}, x.options().dtype(at::kFloat));
  at::Tensor dw = weight.has_value() ? at::empty({d}, x.options().dtype(at::kFloat)) : at::empty({0}, x.options());
  // part[b] holds block b's partial dweight (first d floats) and dbias (next d floats).
  at::Tensor part = at::zeros({nb, 2 * d}, x.options().dtype(at::kFloat));
  const at::Tensor wf = as_f32(weight);
  LnBwdArgs a{dy.data_ptr(), x.data_ptr(), wf.defined() ? wf.data_ptr() : nullptr,
              mean.data_ptr<float>(), rstd.data_ptr<float>(), dx.data_ptr(), d,
              use_stream(dx.data_ptr(), static_cast<int64_t>(dx.nbytes())), prefetch_rows()};
  by_types3(x.scalar_type(), [&](auto t, auto wt, auto) {
    using T = decltype(t);
    using WT = decltype(wt);
    const Isa isa = pick_isa();
    float* p = part.data_ptr<float>();
    at::parallel_for(0, nb, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t r0 = b * kRowBlock, r1 = std::min(rows, r0 + kRowBlock);
        with_isa(isa, [&](auto v) {
          if (a.w)
            ln_bwd_rows<decltype(v), T, WT, true>(a, r0, r1, p + b * 2 * d);
          else
            ln_bwd_rows<decltype(v), T, WT, false>(a, r0, r1, p + b * 2 * d);
        });
      }
    });
  });
  at::Tensor both = at::empty({2 * d}, x.options().dtype(at::kFloat));
  reduce_blocks(part, both);
  if (weight.has_value()) dw.copy_(both.slice(0, 0, d));
  db.copy_(both.slice(0, d, 2 * d));
  return {dx, dw, db};
}

}  // namespace

TORCH_LIBRARY_IMPL(normlab, CPU, m) {
  m.impl("layer_norm_fwd", &layer_norm_fwd_cpu);
  m.impl("layer_norm_fwd_out", &layer_norm_fwd_out_cpu);
  m.impl("layer_norm_bwd", &layer_norm_bwd_cpu);
}

}  // namespace normlab_cpu
