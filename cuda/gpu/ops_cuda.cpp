// CUDA implementations of the normlab ops (schemas in cuda/ops.h), plus the teaching op
// normlab::rms_norm_fwd_version that runs one chosen RMSNorm forward version (1-4, 6).
// This file holds the torch glue only: argument checks (cuda/op_checks.h, shared with the CPU glue),
// output allocation, the current stream. The kernels are in the .cu files beside it, behind the
// raw-pointer launchers of launchers.h, so nvcc never parses a torch header.
//
// Compiled with NORMLAB_EMULATION defined (cuda/gpu/emulation/ops_emu.cpp), the same glue registers the
// same ops in the library `normlab_emu` under the CPU dispatch key, on top of the kernels run by the CPU
// emulation (emulation/emu.h): the tests then exercise glue, launchers and kernels without a GPU. The two
// builds differ only in the device shim (device_shim.h): allocation, stream, device guard, device type.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/util/irange.h>
#include <torch/library.h>

#include <cmath>
#include <optional>
#include <tuple>

#include "../op_checks.h"
#include "../ops.h"
#include "device_shim.h"
#include "launchers.h"

namespace {

using namespace normlab_checks;
using namespace normlab_shim;

at::Tensor new_like(const at::Tensor& x) { return new_tensor(x.sizes(), x.options()); }

int code_of(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return 0;
    case at::kHalf: return 1;
    case at::kBFloat16: return 2;
    default: return -2;
  }
}

void check_cuda(int err, const char* op) {
  TORCH_CHECK(err == 0, op, ": CUDA error: ", normlab_cuda_error_string(err));
}

// The shared checks, plus what only this glue needs: the tensors are on this glue's device, and the
// row length fits the launchers' int.
void check_x_here(const at::Tensor& x, const char* op) {
  check_x(x, op);
  TORCH_CHECK_VALUE(x.device().type() == kDevice, op, ": this kernel runs on ", c10::DeviceTypeName(kDevice),
                    " tensors; x is on ", x.device());
  TORCH_CHECK_VALUE(x.size(-1) <= (int64_t{1} << 30), op, ": the last dimension is too large (", x.size(-1), ")");
}

int64_t rows_of(const at::Tensor& x) {
  int64_t rows = 1;
  for (const auto i : c10::irange(x.dim() - 1)) rows *= x.size(i);
  return rows;
}

at::Tensor stats_like(const at::Tensor& x) {
  return new_tensor(x.sizes().slice(0, x.dim() - 1), x.options().dtype(at::kFloat));
}

const void* ptr_or_null(const std::optional<at::Tensor>& t) { return t.has_value() ? t->data_ptr() : nullptr; }

// convention: the op's code (0 or 1, plus 2 for the "fp32" residual contract) when contract_bit is set,
// else 0 or 1 only (the teaching op, which takes no residual).
void check_rms_fwd(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                   const std::optional<at::Tensor>& residual, double eps, int64_t convention, const char* op,
                   bool contract_bit = true) {
  check_x_here(x, op);
  check_param(weight, x, op, "weight");
  if (residual.has_value()) check_like_x(*residual, x, op, "residual");
  check_eps(eps, op);
  if (contract_bit) check_fwd_code(convention, op); else check_convention(convention, op);
}

// Launches the forward into y, residual_out (defined when a residual is given) and rstd.
void rms_fwd_into(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                  const std::optional<at::Tensor>& residual, double eps, int64_t convention, at::Tensor& y,
                  at::Tensor& res_out, at::Tensor& rstd, const char* op) {
  DeviceGuard guard(x.device());
  const int w_code = weight.has_value() ? code_of(weight->scalar_type()) : -1;
  check_cuda(normlab_rms_fwd(code_of(x.scalar_type()), w_code, y.data_ptr(),
                             residual.has_value() ? res_out.data_ptr() : nullptr, rstd.data_ptr<float>(),
                             x.data_ptr(), ptr_or_null(residual), ptr_or_null(weight), rows_of(x),
                             static_cast<int>(x.size(-1)), static_cast<float>(eps), static_cast<int>(convention),
                             stream_of(x)),
             op);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> rms_norm_fwd_cuda(const at::Tensor& x,
                                                                 const std::optional<at::Tensor>& weight,
                                                                 const std::optional<at::Tensor>& residual,
                                                                 double eps, int64_t convention) {
  const char* op = "normlab::rms_norm_fwd";
  check_rms_fwd(x, weight, residual, eps, convention, op);
  at::Tensor y = new_like(x);
  at::Tensor res_out = residual.has_value() ? new_like(x) : at::empty({0}, x.options());
  at::Tensor rstd = stats_like(x);
  rms_fwd_into(x, weight, residual, eps, convention, y, res_out, rstd, op);
  return {y, res_out, rstd};
}

at::Tensor rms_norm_fwd_out_cuda(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                                 const std::optional<at::Tensor>& residual, double eps, int64_t convention,
                                 at::Tensor& y, const std::optional<at::Tensor>& residual_out) {
  const char* op = "normlab::rms_norm_fwd_out";
  check_rms_fwd(x, weight, residual, eps, convention, op);
  check_rms_out(x, weight, residual, y, residual_out, op);
  at::Tensor res_out = residual_out.has_value() ? *residual_out : at::Tensor();
  at::Tensor rstd = stats_like(x);
  rms_fwd_into(x, weight, residual, eps, convention, y, res_out, rstd, op);
  return rstd;
}

std::tuple<at::Tensor, at::Tensor> rms_norm_fwd_version_cuda(const at::Tensor& x,
                                                             const std::optional<at::Tensor>& weight, double eps,
                                                             int64_t version, int64_t convention, int64_t block_size) {
  const char* op = "normlab::rms_norm_fwd_version";
  check_rms_fwd(x, weight, std::nullopt, eps, convention, op, false);
  TORCH_CHECK_VALUE((version >= 1 && version <= 4) || version == 6, op, ": version must be 1, 2, 3, 4 or 6 (5 is "
                    "rms_norm_fwd with a residual), got ", version);
  TORCH_CHECK_VALUE(block_size >= 0 && block_size <= 1024, op, ": block_size must be 0 (default) or 1..1024, got ",
                    block_size);
  TORCH_CHECK_VALUE(version != 2 || (block_size & (block_size - 1)) == 0, op,
                    ": version 2's tree reduction needs a power-of-two block size, got ", block_size);
  TORCH_CHECK_VALUE(version < 4 || block_size == 0, op, ": version ", version,
                    " picks its block size from the row length; pass 0");
  DeviceGuard guard(x.device());
  at::Tensor y = new_like(x);
  at::Tensor rstd = stats_like(x);
  const int w_code = weight.has_value() ? code_of(weight->scalar_type()) : -1;
  const int xc = code_of(x.scalar_type());
  const int d = static_cast<int>(x.size(-1));
  int err;
  if (version >= 4) {
    err = normlab_rms_fwd_layout(static_cast<int>(version), xc, w_code, y.data_ptr(), rstd.data_ptr<float>(),
                                 x.data_ptr(), ptr_or_null(weight), rows_of(x), d, static_cast<float>(eps),
                                 static_cast<int>(convention), stream_of(x));
    // the arguments are checked above: the launcher refuses only a row too long for version 6
    TORCH_CHECK_VALUE(version != 6 || err == 0, op, ": version 6 takes rows of at most 256 vectors (2048 "
                      "fp16/bf16 or 1024 fp32 elements when 16-byte aligned, else 256 elements); d = ", d);
  } else {
    err = normlab_rms_fwd_step(static_cast<int>(version), static_cast<int>(block_size), xc, w_code, y.data_ptr(),
                               rstd.data_ptr<float>(), x.data_ptr(), ptr_or_null(weight), rows_of(x), d,
                               static_cast<float>(eps), static_cast<int>(convention), stream_of(x));
  }
  check_cuda(err, op);
  return {y, rstd};
}

std::tuple<at::Tensor, at::Tensor> rms_norm_bwd_cuda(const at::Tensor& dy, const at::Tensor& x,
                                                     const std::optional<at::Tensor>& weight, const at::Tensor& rstd,
                                                     int64_t convention) {
  const char* op = "normlab::rms_norm_bwd";
  check_x_here(x, op);
  check_like_x(dy, x, op, "dy");
  check_param(weight, x, op, "weight");
  check_stat(rstd, x, op, "rstd");
  check_convention(convention, op);
  DeviceGuard guard(x.device());
  const int64_t rows = rows_of(x);
  const int d = static_cast<int>(x.size(-1));
  const int xc = code_of(x.scalar_type());
  const int w_code = weight.has_value() ? code_of(weight->scalar_type()) : -1;
  at::Tensor dx = new_like(x);
  // dweight: the float32 sum, rounded once by the caller to the weight's dtype
  at::Tensor dw = weight.has_value() ? new_tensor({d}, x.options().dtype(at::kFloat)) : at::empty({0}, x.options());
  if (rows == 0) {  // nothing to launch: dweight is a sum over no rows
    dw.zero_();
    return {dx, dw};
  }
  int blocks = 0;
  check_cuda(normlab_rms_bwd_blocks(xc, w_code, dx.data_ptr(), dy.data_ptr(), x.data_ptr(), ptr_or_null(weight),
                                    rows, d, &blocks),
             op);
  at::Tensor part;
  if (weight.has_value() && blocks > 0) part = new_tensor({blocks, d}, x.options().dtype(at::kFloat));
  check_cuda(normlab_rms_bwd(xc, w_code, dx.data_ptr(), weight.has_value() ? dw.data_ptr<float>() : nullptr,
                             part.defined() ? part.data_ptr<float>() : nullptr, blocks, dy.data_ptr(), x.data_ptr(),
                             ptr_or_null(weight), rstd.data_ptr<float>(), rows, d, static_cast<int>(convention),
                             stream_of(x)),
             op);
  return {dx, dw};
}

// When weight and bias are both given with different dtypes (one x's dtype, one float32), both are
// widened to float32 for the kernel (exact: every bf16/fp16 value is a float32 value).
std::pair<std::optional<at::Tensor>, std::optional<at::Tensor>> common_param_dtype(
    const std::optional<at::Tensor>& w, const std::optional<at::Tensor>& b) {
  if (w.has_value() && b.has_value() && w->scalar_type() != b->scalar_type())
    return {w->to(at::kFloat), b->to(at::kFloat)};
  return {w, b};
}

void check_ln_fwd(const at::Tensor& x, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                  double eps, const std::optional<at::Tensor>& residual, int64_t contract, const char* op) {
  check_x_here(x, op);
  check_param(weight, x, op, "weight");
  check_param(bias, x, op, "bias");
  if (residual.has_value()) check_like_x(*residual, x, op, "residual");
  check_eps(eps, op);
  check_ln_contract(contract, op);
}

// Launches the forward into y, mean, rstd and residual_out (defined when a residual is given).
void ln_fwd_into(const at::Tensor& x, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                 double eps, const std::optional<at::Tensor>& residual, int64_t contract, at::Tensor& y,
                 at::Tensor& mean, at::Tensor& rstd, at::Tensor& res_out, const char* op) {
  DeviceGuard guard(x.device());
  auto [w, b] = common_param_dtype(weight, bias);
  const int w_code = w.has_value() ? code_of(w->scalar_type()) : (b.has_value() ? code_of(b->scalar_type()) : -1);
  check_cuda(normlab_ln_fwd(code_of(x.scalar_type()), w_code, y.data_ptr(),
                            residual.has_value() ? res_out.data_ptr() : nullptr, mean.data_ptr<float>(),
                            rstd.data_ptr<float>(), x.data_ptr(), ptr_or_null(residual), ptr_or_null(w),
                            ptr_or_null(b), rows_of(x), static_cast<int>(x.size(-1)), static_cast<float>(eps),
                            static_cast<int>(contract), stream_of(x)),
             op);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> layer_norm_fwd_cuda(
    const at::Tensor& x, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, double eps,
    const std::optional<at::Tensor>& residual, int64_t contract) {
  const char* op = "normlab::layer_norm_fwd";
  check_ln_fwd(x, weight, bias, eps, residual, contract, op);
  at::Tensor y = new_like(x);
  at::Tensor res_out = residual.has_value() ? new_like(x) : at::empty({0}, x.options());
  at::Tensor mean = stats_like(x), rstd = stats_like(x);
  ln_fwd_into(x, weight, bias, eps, residual, contract, y, mean, rstd, res_out, op);
  return {y, mean, rstd, res_out};
}

std::tuple<at::Tensor, at::Tensor> layer_norm_fwd_out_cuda(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                                                           const std::optional<at::Tensor>& bias, double eps,
                                                           const std::optional<at::Tensor>& residual, int64_t contract,
                                                           at::Tensor& y, const std::optional<at::Tensor>& residual_out) {
  const char* op = "normlab::layer_norm_fwd_out";
  check_ln_fwd(x, weight, bias, eps, residual, contract, op);
  check_ln_out(x, weight, bias, residual, y, residual_out, op);
  at::Tensor res_out = residual_out.has_value() ? *residual_out : at::Tensor();
  at::Tensor mean = stats_like(x), rstd = stats_like(x);
  ln_fwd_into(x, weight, bias, eps, residual, contract, y, mean, rstd, res_out, op);
  return {mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_bwd_cuda(const at::Tensor& dy, const at::Tensor& x,
                                                                   const std::optional<at::Tensor>& weight,
                                                                   const at::Tensor& mean, const at::Tensor& rstd) {
  const char* op = "normlab::layer_norm_bwd";
  check_x_here(x, op);
  check_like_x(dy, x, op, "dy");
  check_param(weight, x, op, "weight");
  check_stat(mean, x, op, "mean");
  check_stat(rstd, x, op, "rstd");
  DeviceGuard guard(x.device());
  const int64_t rows = rows_of(x);
  const int d = static_cast<int>(x.size(-1));
  const int xc = code_of(x.scalar_type());
  const int w_code = weight.has_value() ? code_of(weight->scalar_type()) : -1;
  at::Tensor dx = new_like(x);
  // dweight and dbias: the float32 sums, rounded once by the caller to each parameter's dtype
  at::Tensor db = new_tensor({d}, x.options().dtype(at::kFloat));
  at::Tensor dw = weight.has_value() ? new_tensor({d}, x.options().dtype(at::kFloat)) : at::empty({0}, x.options());
  if (rows == 0) {
    dw.zero_();
    db.zero_();
    return {dx, dw, db};
  }
  int blocks = 0;
  check_cuda(normlab_ln_bwd_blocks(xc, w_code, dx.data_ptr(), dy.data_ptr(), x.data_ptr(), ptr_or_null(weight),
                                   rows, d, &blocks),
             op);
  at::Tensor part_w, part_b;
  if (blocks > 0) {
    part_b = new_tensor({blocks, d}, x.options().dtype(at::kFloat));
    if (weight.has_value()) part_w = new_tensor({blocks, d}, x.options().dtype(at::kFloat));
  }
  check_cuda(normlab_ln_bwd(xc, w_code, dx.data_ptr(), weight.has_value() ? dw.data_ptr<float>() : nullptr,
                            db.data_ptr<float>(), part_w.defined() ? part_w.data_ptr<float>() : nullptr,
                            part_b.defined() ? part_b.data_ptr<float>() : nullptr, blocks, dy.data_ptr(),
                            x.data_ptr(), ptr_or_null(weight), mean.data_ptr<float>(), rstd.data_ptr<float>(), rows,
                            d, stream_of(x)),
             op);
  return {dx, dw, db};
}

}  // namespace

// The teaching op's schema lives here, not in cuda/ops.h: it exists only where the CUDA kernels do.
TORCH_LIBRARY_FRAGMENT(NL_LIBRARY, m) {
  m.def("rms_norm_fwd_version(Tensor x, Tensor? weight, float eps, int version, int convention, "
        "int block_size=0) -> (Tensor y, Tensor rstd)");
}

TORCH_LIBRARY_IMPL(NL_LIBRARY, NL_DISPATCH_KEY, m) {
  m.impl("rms_norm_fwd", &rms_norm_fwd_cuda);
  m.impl("rms_norm_fwd_out", &rms_norm_fwd_out_cuda);
  m.impl("rms_norm_bwd", &rms_norm_bwd_cuda);
  m.impl("layer_norm_fwd", &layer_norm_fwd_cuda);
  m.impl("layer_norm_fwd_out", &layer_norm_fwd_out_cuda);
  m.impl("layer_norm_bwd", &layer_norm_bwd_cuda);
  m.impl("rms_norm_fwd_version", &rms_norm_fwd_version_cuda);
}
