// The torch glue of the CPU RMSNorm: normlab::rms_norm_fwd and normlab::rms_norm_bwd (schemas and contract
// in cuda/ops.cpp) check their arguments, allocate the outputs, split the rows between threads and run
// the kernels of rms_norm_kernels.h for the instruction set isa.h picks.
#include <torch/library.h>

#include "cpu_common.h"
#include "isa.h"
#include "rms_norm_kernels.h"

namespace normlab_cpu {
namespace {

template <class T, class WT>
void rms_fwd_dispatch(const RmsFwdArgs& a, int64_t rows) {
  const Isa isa = pick_isa();
  const int64_t grain = std::max<int64_t>(1, kGrainElems / std::max<int64_t>(a.d, 1));
  const bool tiles = use_tiles(a.d, sizeof(T)) && !a.residual;
  at::parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) {
    with_isa(isa, [&](auto v) { rms_fwd_any<decltype(v), T, WT>(a, r0, r1, tiles); });
  });
}

template <class T, class WT>
void rms_bwd_dispatch(const RmsBwdArgs& a, int64_t rows, float* part) {
  const Isa isa = pick_isa();
  const int64_t nb = (rows + kRowBlock - 1) / kRowBlock;
  // Fixed blocks of kRowBlock rows; each block owns one row of `part` (its dweight partial sum).
  at::parallel_for(0, nb, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * kRowBlock, r1 = std::min(rows, r0 + kRowBlock);
      float* block_part = part ? part + b * a.d : nullptr;
      with_isa(isa, [&](auto v) { rms_bwd_rows<decltype(v), T, WT>(a, r0, r1, block_part); });
    }
  });
}

// Calls f(T{}, float{}) with the element type of x; gains are passed as float32 (see as_f32).
template <class F>
void by_types(at::ScalarType xt, F&& f) {
  switch (xt) {
    case at::kFloat: f(float{}, float{}); break;
    case at::kBFloat16: f(c10::BFloat16{}, float{}); break;
    case at::kHalf: f(c10::Half{}, float{}); break;
    default: TORCH_CHECK_TYPE(false, "normlab: unsupported dtype ", xt);
  }
}

void check_fwd_args(const at::Tensor& x, const c10::optional<at::Tensor>& weight,
                    const c10::optional<at::Tensor>& residual, double eps, int64_t convention, const char* op) {
  check_x(x, op);
  check_param(weight, x, op, "weight");
  if (residual.has_value()) check_like_x(*residual, x, op, "residual");
  check_eps(eps, op);
  check_fwd_code(convention, op);  // bit 1: the residual contract (0 "hf", 2 "fp32")
}

// Writes y, residual_out (when a residual is given) and rstd, all allocated and checked by the caller.
void rms_fwd_into(const at::Tensor& x, const c10::optional<at::Tensor>& weight,
                  const c10::optional<at::Tensor>& residual, double eps, int64_t convention, at::Tensor& y,
                  at::Tensor& res_out, at::Tensor& rstd) {
  const at::Tensor wf = as_f32(weight);
  RmsFwdArgs a{x.data_ptr(),
               residual.has_value() ? residual->data_ptr() : nullptr,
               residual.has_value() ? res_out.data_ptr() : nullptr,
               wf.defined() ? wf.data_ptr() : nullptr,
               y.data_ptr(),
               rstd.data_ptr<float>(),
               x.size(-1),
               static_cast<float>(eps),
               static_cast<int>(convention & 1),
               use_stream(y.data_ptr(), static_cast<int64_t>(y.nbytes())),
               (convention & 2) != 0,
               prefetch_rows()};
  by_types(x.scalar_type(), [&](auto t, auto wt) { rms_fwd_dispatch<decltype(t), decltype(wt)>(a, rows_of(x)); });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> rms_norm_fwd_cpu(const at::Tensor& x,
                                                                const c10::optional<at::Tensor>& weight,
                                                                const c10::optional<at::Tensor>& residual,
                                                                double eps, int64_t convention) {
  check_fwd_args(x, weight, residual, eps, convention, "normlab::rms_norm_fwd");
  at::Tensor y = at::empty_like(x);
  at::Tensor res_out = residual.has_value() ? at::empty_like(x) : at::empty({0}, x.options());
  at::Tensor rstd = stats_like(x);
  rms_fwd_into(x, weight, residual, eps, convention, y, res_out, rstd);
  return {y, res_out, rstd};
}

// The out= variant: the caller's buffers receive y (and residual_out); no allocation but rstd's.
at::Tensor rms_norm_fwd_out_cpu(const at::Tensor& x, const c10::optional<at::Tensor>& weight,
                                const c10::optional<at::Tensor>& residual, double eps, int64_t convention,
                                at::Tensor& y, const c10::optional<at::Tensor>& residual_out) {
  const char* op = "normlab::rms_norm_fwd_out";
  check_fwd_args(x, weight, residual, eps, convention, op);
  check_rms_out(x, weight, residual, y, residual_out, op);
  at::Tensor res_out = residual_out.has_value() ? *residual_out : at::Tensor();
  at::Tensor rstd = stats_like(x);
  rms_fwd_into(x, weight, residual, eps, convention, y, res_out, rstd);
  return rstd;
}

std::tuple<at::Tensor, at::Tensor> rms_norm_bwd_cpu(const at::Tensor& dy, const at::Tensor& x,
                                                    const c10::optional<at::Tensor>& weight,
                                                    const at::Tensor& rstd, int64_t convention) {
  const char* op = "normlab::rms_norm_bwd";
  check_x(x, op);
  check_like_x(dy, x, op, "dy");
  check_param(weight, x, op, "weight");
  check_stat(rstd, x, op, "rstd");
  check_convention(convention, op);
  const int64_t d = x.size(-1);
  const int64_t rows = rows_of(x);
  at::Tensor dx = at::empty_like(x);
  at::Tensor dw, part;
  if (weight.has_value()) {  // dweight: the float32 sum, rounded once by the caller to the weight's dtype
    dw = at::empty({d}, x.options().dtype(at::kFloat));
    part = at::zeros({(rows + kRowBlock - 1) / kRowBlock, d}, x.options().dtype(at::kFloat));
  } else {
    dw = at::empty({0}, x.options());
  }
  const at::Tensor wf = as_f32(weight);
  RmsBwdArgs a{dy.data_ptr(), x.data_ptr(), wf.defined() ? wf.data_ptr() : nullptr,
               rstd.data_ptr<float>(), dx.data_ptr(), d, static_cast<int>(convention),
               use_stream(dx.data_ptr(), static_cast<int64_t>(dx.nbytes())), prefetch_rows()};
  by_types(x.scalar_type(), [&](auto t, auto wt) {
    rms_bwd_dispatch<decltype(t), decltype(wt)>(a, rows, part.defined() ? part.data_ptr<float>() : nullptr);
  });
  if (weight.has_value()) reduce_blocks(part, dw);
  return {dx, dw};
}

}  // namespace

TORCH_LIBRARY_IMPL(normlab, CPU, m) {
  m.impl("rms_norm_fwd", &rms_norm_fwd_cpu);
  m.impl("rms_norm_fwd_out", &rms_norm_fwd_out_cpu);
  m.impl("rms_norm_bwd", &rms_norm_bwd_cpu);
}

}  // namespace normlab_cpu
