// The argument checks of every normlab op, shared by the CPU glue (cuda/cpu/*_cpu.cpp), the CUDA glue
// (cuda/gpu/ops_cuda.cpp) and the CUDA glue's CPU emulation, so each bad input raises the same exception
// on every device, and the same type as the Python entry points (reference_impl/_checks.py):
//   TORCH_CHECK_TYPE  -> TypeError   a dtype the op does not support
//   TORCH_CHECK_VALUE -> ValueError  a shape, device, layout, eps, convention or overlap the op refuses
// Device placement itself (CPU tensors to the CPU kernels) is the dispatcher's job; here every tensor
// must be on x's device.
#pragma once

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <c10/util/Optional.h>

#include <cmath>
#include <limits>

namespace normlab_checks {

inline bool supported_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
}

// x: float32, bfloat16 or float16; at least one dimension; a non-empty, contiguous last dimension.
inline void check_x(const at::Tensor& x, const char* op, const char* name = "x") {
  TORCH_CHECK_TYPE(supported_dtype(x.scalar_type()), op, ": ", name, " has dtype ", x.scalar_type(),
                   "; the fused ops support float32, bfloat16 and float16");
  TORCH_CHECK_VALUE(x.dim() >= 1, op, ": ", name,
                    " is a 0-d tensor; normalization needs at least one dimension (the last one)");
  TORCH_CHECK_VALUE(x.size(-1) > 0, op, ": ", name,
                    " has an empty last dimension (size 0); there is nothing to normalize over");
  TORCH_CHECK_VALUE(x.is_contiguous(), op, ": ", name,
                    " must be contiguous (the Python entry points make every input contiguous)");
}

inline void check_device(const at::Tensor& t, const at::Tensor& x, const char* op, const char* name) {
  TORCH_CHECK_VALUE(t.device() == x.device(), op, ": ", name, " is on ", t.device(), " but x is on ", x.device());
}

// A tensor of x's shape and dtype (the residual, dy, an output buffer).
inline void check_like_x(const at::Tensor& t, const at::Tensor& x, const char* op, const char* name) {
  check_device(t, x, op, name);
  TORCH_CHECK_TYPE(t.scalar_type() == x.scalar_type(), op, ": ", name, " has dtype ", t.scalar_type(),
                   " but x has dtype ", x.scalar_type(), "; they must match");
  TORCH_CHECK_VALUE(t.sizes() == x.sizes(), op, ": ", name, " has shape ", t.sizes(), " but x has shape ", x.sizes());
  TORCH_CHECK_VALUE(t.is_contiguous(), op, ": ", name, " must be contiguous");
}

// A gain or bias: shape (d,), dtype x.dtype or float32, contiguous, on x's device.
inline void check_param(const c10::optional<at::Tensor>& p, const at::Tensor& x, const char* op, const char* name) {
  if (!p.has_value()) return;
  const at::Tensor& t = *p;
  check_device(t, x, op, name);
  TORCH_CHECK_TYPE(t.scalar_type() == x.scalar_type() || t.scalar_type() == at::kFloat, op, ": ", name,
                   " has dtype ", t.scalar_type(), "; the fused op needs x's dtype (", x.scalar_type(), ") or float32");
  TORCH_CHECK_VALUE(t.dim() == 1 && t.size(0) == x.size(-1), op, ": ", name, " has shape ", t.sizes(),
                    " but the normalized (last) dimension of x has size ", x.size(-1));
  TORCH_CHECK_VALUE(t.is_contiguous(), op, ": ", name, " must be contiguous");
}

// A per-row statistic saved by the forward (rstd, mean): float32 of shape x.shape[:-1], contiguous.
inline void check_stat(const at::Tensor& s, const at::Tensor& x, const char* op, const char* name) {
  check_device(s, x, op, name);
  TORCH_CHECK_TYPE(s.scalar_type() == at::kFloat, op, ": ", name, " has dtype ", s.scalar_type(), "; it must be float32");
  TORCH_CHECK_VALUE(s.sizes() == x.sizes().slice(0, x.dim() - 1), op, ": ", name, " has shape ", s.sizes(),
                    "; it must be x.shape[:-1] = ", x.sizes().slice(0, x.dim() - 1));
  TORCH_CHECK_VALUE(s.is_contiguous(), op, ": ", name, " must be contiguous");
}

// eps is added in float32: finite, non-negative and at most the largest float32.
inline void check_eps(double eps, const char* op) {
  TORCH_CHECK_VALUE(std::isfinite(eps) && eps >= 0 && eps <= std::numeric_limits<float>::max(), op,
                    ": eps must be a finite, non-negative number no larger than the largest float32, got ", eps);
}

inline void check_convention(int64_t convention, const char* op) {
  TORCH_CHECK_VALUE(convention == 0 || convention == 1, op,
                    ": convention must be 0 (llama) or 1 (gemma), got ", convention);
}

// The RMSNorm forward's code: the convention plus 2 for the "fp32" residual contract (cuda/ops.h).
inline void check_fwd_code(int64_t code, const char* op) {
  TORCH_CHECK_VALUE(code >= 0 && code <= 3, op,
                    ": convention must be 0 or 1 (llama, gemma), plus 2 for the fp32 residual contract; got ", code);
}

// The LayerNorm forward's residual contract: 0 ("hf") or 2 ("fp32"), the codes RMSNorm adds to its
// convention.
inline void check_ln_contract(int64_t code, const char* op) {
  TORCH_CHECK_VALUE(code == 0 || code == 2, op,
                    ": residual_contract must be 0 (hf) or 2 (fp32); got ", code);
}

// An output buffer of an out= op must not share memory with an input (the kernels read a row after
// writing parts of others) nor with another output.
inline void check_no_overlap(const at::Tensor& out, const at::Tensor& other, const char* op, const char* out_name,
                             const char* other_name) {
  TORCH_CHECK_VALUE(at::get_overlap_status(out, other) == at::MemOverlapStatus::No, op, ": ", out_name,
                    " shares memory with ", other_name, "; pass a separate buffer");
}

inline void check_no_overlap(const at::Tensor& out, const c10::optional<at::Tensor>& other, const char* op,
                             const char* out_name, const char* other_name) {
  if (other.has_value()) check_no_overlap(out, *other, op, out_name, other_name);
}

// One output buffer of an out= op: x's shape and dtype, contiguous, on x's device, sharing no memory with
// x or the optional inputs a and b.
inline void check_out(const at::Tensor& out, const char* name, const at::Tensor& x,
                      const c10::optional<at::Tensor>& a, const char* a_name, const c10::optional<at::Tensor>& b,
                      const char* b_name, const char* op) {
  check_like_x(out, x, op, name);
  check_no_overlap(out, x, op, name, "x");
  check_no_overlap(out, a, op, name, a_name);
  check_no_overlap(out, b, op, name, b_name);
}

// --8<-- [start:out_checks]
// rms_norm_fwd_out: y, and residual_out exactly when a residual is given; neither overlaps an input
// nor the other.
inline void check_rms_out(const at::Tensor& x, const c10::optional<at::Tensor>& weight,
                          const c10::optional<at::Tensor>& residual, const at::Tensor& y,
                          const c10::optional<at::Tensor>& residual_out, const char* op) {
  check_out(y, "y (out)", x, weight, "weight", residual, "residual", op);
  TORCH_CHECK_VALUE(residual.has_value() == residual_out.has_value(), op,
                    residual.has_value() ? ": a residual is given, so residual_out must be too"
                                         : ": residual_out is given without a residual");
  if (residual_out.has_value()) {
    check_out(*residual_out, "residual_out", x, weight, "weight", residual, "residual", op);
    check_no_overlap(*residual_out, y, op, "residual_out", "y (out)");
  }
}
// --8<-- [end:out_checks]

// layer_norm_fwd_out: y, and residual_out exactly when a residual is given; neither overlaps an input
// (x, weight, bias, residual) nor the other.
inline void check_ln_out(const at::Tensor& x, const c10::optional<at::Tensor>& weight,
                         const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& residual,
                         const at::Tensor& y, const c10::optional<at::Tensor>& residual_out, const char* op) {
  check_out(y, "y (out)", x, weight, "weight", bias, "bias", op);
  check_no_overlap(y, residual, op, "y (out)", "residual");
  TORCH_CHECK_VALUE(residual.has_value() == residual_out.has_value(), op,
                    residual.has_value() ? ": a residual is given, so residual_out must be too"
                                         : ": residual_out is given without a residual");
  if (residual_out.has_value()) {
    check_out(*residual_out, "residual_out", x, weight, "weight", bias, "bias", op);
    check_no_overlap(*residual_out, residual, op, "residual_out", "residual");
    check_no_overlap(*residual_out, y, op, "residual_out", "y (out)");
  }
}

}  // namespace normlab_checks
