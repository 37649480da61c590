// CUDA implementations of the normlab ops (schemas in cuda/ops.cpp), plus the teaching op
// normlab::rms_norm_fwd_version that runs one chosen RMSNorm forward version (1-4).
// This file holds the torch glue only: argument checks, output allocation, the current stream. The
// kernels are in the .cu files beside it, behind the raw-pointer launchers of launchers.h, so nvcc never
// parses a torch header.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/irange.h>
#include <torch/library.h>

#include <cmath>
#include <optional>
#include <tuple>

#include "launchers.h"

namespace {

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

void check_x(const at::Tensor& x, const char* op) {
  TORCH_CHECK(x.is_cuda(), op, ": the CUDA kernel got a tensor on ", x.device());
  TORCH_CHECK(x.dim() >= 1, op, ": x must have at least one dimension");
  TORCH_CHECK_TYPE(code_of(x.scalar_type()) >= 0, op, ": x has dtype ", x.scalar_type(),
                   "; the CUDA kernels support float32, bfloat16 and float16");
  TORCH_CHECK(x.is_contiguous(), op, ": x must be contiguous");
  TORCH_CHECK(x.size(-1) <= (int64_t{1} << 30), op, ": the last dimension is too large (", x.size(-1), ")");
}

void check_same(const at::Tensor& t, const at::Tensor& x, const char* op, const char* name) {
  TORCH_CHECK(t.device() == x.device(), op, ": ", name, " is on ", t.device(), " but x is on ", x.device());
  TORCH_CHECK_TYPE(t.scalar_type() == x.scalar_type(), op, ": ", name, " has dtype ", t.scalar_type(),
                   " but x has ", x.scalar_type());
  TORCH_CHECK(t.sizes() == x.sizes(), op, ": ", name, " has shape ", t.sizes(), " but x has ", x.sizes());
  TORCH_CHECK(t.is_contiguous(), op, ": ", name, " must be contiguous");
}

void check_param(const std::optional<at::Tensor>& p, const at::Tensor& x, const char* op, const char* name) {
  if (!p.has_value()) return;
  TORCH_CHECK(p->device() == x.device(), op, ": ", name, " is on ", p->device(), " but x is on ", x.device());
  TORCH_CHECK_TYPE(p->scalar_type() == x.scalar_type() || p->scalar_type() == at::kFloat, op, ": ", name,
                   " has dtype ", p->scalar_type(), "; expected x's dtype (", x.scalar_type(), ") or float32");
  TORCH_CHECK(p->dim() == 1 && p->size(0) == x.size(-1), op, ": ", name, " must have shape (", x.size(-1),
              ",), got ", p->sizes());
  TORCH_CHECK(p->is_contiguous(), op, ": ", name, " must be contiguous");
}

void check_stat(const at::Tensor& s, const at::Tensor& x, const char* op, const char* name) {
  TORCH_CHECK(s.device() == x.device() && s.scalar_type() == at::kFloat && s.is_contiguous() &&
                  s.sizes() == x.sizes().slice(0, x.dim() - 1),
              op, ": ", name, " must be a contiguous float32 CUDA tensor of shape x.shape[:-1]");
}

int64_t rows_of(const at::Tensor& x) {
  int64_t rows = 1;
  for (const auto i : c10::irange(x.dim() - 1)) rows *= x.size(i);
  return rows;
}

at::Tensor stats_like(const at::Tensor& x) {
  return at::empty(x.sizes().slice(0, x.dim() - 1), x.options().dtype(at::kFloat));
}

const void* ptr_or_null(const std::optional<at::Tensor>& t) { return t.has_value() ? t->data_ptr() : nullptr; }

void* stream_of(const at::Tensor& x) { return c10::cuda::getCurrentCUDAStream(x.device().index()).stream(); }

std::tuple<at::Tensor, at::Tensor, at::Tensor> rms_norm_fwd_cuda(const at::Tensor& x,
                                                                 const std::optional<at::Tensor>& weight,
                                                                 const std::optional<at::Tensor>& residual,
                                                                 double eps, int64_t convention) {
  const char* op = "normlab::rms_norm_fwd";
  check_x(x, op);
  check_param(weight, x, op, "weight");
  if (residual.has_value()) check_same(*residual, x, op, "residual");
  TORCH_CHECK(convention == 0 || convention == 1, op, ": convention must be 0 (llama) or 1 (gemma), got ", convention);
  TORCH_CHECK(eps >= 0 && std::isfinite(eps), op, ": eps must be finite and non-negative, got ", eps);
  c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty_like(x);
  at::Tensor res_out = residual.has_value() ? at::empty_like(x) : at::empty({0}, x.options());
  at::Tensor rstd = stats_like(x);
  const int w_code = weight.has_value() ? code_of(weight->scalar_type()) : -1;
  check_cuda(normlab_rms_fwd(code_of(x.scalar_type()), w_code, y.data_ptr(),
                             residual.has_value() ? res_out.data_ptr() : nullptr, rstd.data_ptr<float>(),
                             x.data_ptr(), ptr_or_null(residual), ptr_or_null(weight), rows_of(x),
                             static_cast<int>(x.size(-1)), static_cast<float>(eps), static_cast<int>(convention),
                             stream_of(x)),
             op);
  return {y, res_out, rstd};
}

std::tuple<at::Tensor, at::Tensor> rms_norm_fwd_version_cuda(const at::Tensor& x,
                                                             const std::optional<at::Tensor>& weight, double eps,
                                                             int64_t version, int64_t convention, int64_t block_size) {
  const char* op = "normlab::rms_norm_fwd_version";
  check_x(x, op);
  check_param(weight, x, op, "weight");
  TORCH_CHECK(version >= 1 && version <= 4, op, ": version must be 1, 2, 3 or 4 (5 is rms_norm_fwd with a "
              "residual), got ", version);
  TORCH_CHECK(convention == 0 || convention == 1, op, ": convention must be 0 (llama) or 1 (gemma), got ", convention);
  TORCH_CHECK(eps >= 0 && std::isfinite(eps), op, ": eps must be finite and non-negative, got ", eps);
  TORCH_CHECK(block_size >= 0 && block_size <= 1024, op, ": block_size must be 0 (default) or 1..1024, got ", block_size);
  TORCH_CHECK(version != 2 || (block_size & (block_size - 1)) == 0, op,
              ": version 2's tree reduction needs a power-of-two block size, got ", block_size);
  TORCH_CHECK(version != 4 || block_size == 0, op, ": version 4 picks its block size from the row length; pass 0");
  c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty_like(x);
  at::Tensor rstd = stats_like(x);
  const int w_code = weight.has_value() ? code_of(weight->scalar_type()) : -1;
  const int xc = code_of(x.scalar_type());
  const int d = static_cast<int>(x.size(-1));
  int err;
  if (version == 4) {
    err = normlab_rms_fwd(xc, w_code, y.data_ptr(), nullptr, rstd.data_ptr<float>(), x.data_ptr(), nullptr,
                          ptr_or_null(weight), rows_of(x), d, static_cast<float>(eps), static_cast<int>(convention),
                          stream_of(x));
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
  check_x(x, op);
  check_same(dy, x, op, "dy");
  check_param(weight, x, op, "weight");
  check_stat(rstd, x, op, "rstd");
  TORCH_CHECK(convention == 0 || convention == 1, op, ": convention must be 0 (llama) or 1 (gemma), got ", convention);
  c10::cuda::CUDAGuard guard(x.device());
  const int64_t rows = rows_of(x);
  const int d = static_cast<int>(x.size(-1));
  const int xc = code_of(x.scalar_type());
  const int w_code = weight.has_value() ? code_of(weight->scalar_type()) : -1;
  at::Tensor dx = at::empty_like(x);
  at::Tensor dw = weight.has_value() ? at::empty({d}, weight->options()) : at::empty({0}, x.options());
  if (rows == 0 || d == 0) {  // nothing to launch: dweight is a sum over no rows (or has no columns)
    dw.zero_();
    return {dx, dw};
  }
  int blocks = 0;
  check_cuda(normlab_rms_bwd_blocks(xc, w_code, dx.data_ptr(), dy.data_ptr(), x.data_ptr(), ptr_or_null(weight),
                                    rows, d, &blocks),
             op);
  at::Tensor part;
  if (weight.has_value() && blocks > 0) part = at::empty({blocks, d}, x.options().dtype(at::kFloat));
  check_cuda(normlab_rms_bwd(xc, w_code, dx.data_ptr(), weight.has_value() ? dw.data_ptr() : nullptr,
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

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_fwd_cuda(const at::Tensor& x,
                                                                   const std::optional<at::Tensor>& weight,
                                                                   const std::optional<at::Tensor>& bias, double eps) {
  const char* op = "normlab::layer_norm_fwd";
  check_x(x, op);
  check_param(weight, x, op, "weight");
  check_param(bias, x, op, "bias");
  TORCH_CHECK(eps >= 0 && std::isfinite(eps), op, ": eps must be finite and non-negative, got ", eps);
  c10::cuda::CUDAGuard guard(x.device());
  auto [w, b] = common_param_dtype(weight, bias);
  const int w_code = w.has_value() ? code_of(w->scalar_type()) : (b.has_value() ? code_of(b->scalar_type()) : -1);
  at::Tensor y = at::empty_like(x);
  at::Tensor mean = stats_like(x), rstd = stats_like(x);
  check_cuda(normlab_ln_fwd(code_of(x.scalar_type()), w_code, y.data_ptr(), mean.data_ptr<float>(),
                            rstd.data_ptr<float>(), x.data_ptr(), ptr_or_null(w), ptr_or_null(b), rows_of(x),
                            static_cast<int>(x.size(-1)), static_cast<float>(eps), stream_of(x)),
             op);
  return {y, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_bwd_cuda(const at::Tensor& dy, const at::Tensor& x,
                                                                   const std::optional<at::Tensor>& weight,
                                                                   const at::Tensor& mean, const at::Tensor& rstd) {
  const char* op = "normlab::layer_norm_bwd";
  check_x(x, op);
  check_same(dy, x, op, "dy");
  check_param(weight, x, op, "weight");
  check_stat(mean, x, op, "mean");
  check_stat(rstd, x, op, "rstd");
  c10::cuda::CUDAGuard guard(x.device());
  const int64_t rows = rows_of(x);
  const int d = static_cast<int>(x.size(-1));
  const int xc = code_of(x.scalar_type());
  const int w_code = weight.has_value() ? code_of(weight->scalar_type()) : -1;
  at::Tensor dx = at::empty_like(x);
  at::Tensor db = at::empty({d}, dy.options());
  at::Tensor dw = weight.has_value() ? at::empty({d}, weight->options()) : at::empty({0}, x.options());
  if (rows == 0 || d == 0) {
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
    part_b = at::empty({blocks, d}, x.options().dtype(at::kFloat));
    if (weight.has_value()) part_w = at::empty({blocks, d}, x.options().dtype(at::kFloat));
  }
  check_cuda(normlab_ln_bwd(xc, w_code, dx.data_ptr(), weight.has_value() ? dw.data_ptr() : nullptr, db.data_ptr(),
                            part_w.defined() ? part_w.data_ptr<float>() : nullptr,
                            part_b.defined() ? part_b.data_ptr<float>() : nullptr, blocks, dy.data_ptr(),
                            x.data_ptr(), ptr_or_null(weight), mean.data_ptr<float>(), rstd.data_ptr<float>(), rows,
                            d, stream_of(x)),
             op);
  return {dx, dw, db};
}

}  // namespace

// The teaching op's schema lives here, not in cuda/ops.cpp: it exists only where the CUDA kernels do.
TORCH_LIBRARY_FRAGMENT(normlab, m) {
  m.def("rms_norm_fwd_version(Tensor x, Tensor? weight, float eps, int version, int convention, "
        "int block_size=0) -> (Tensor y, Tensor rstd)");
}

TORCH_LIBRARY_IMPL(normlab, CUDA, m) {
  m.impl("rms_norm_fwd", &rms_norm_fwd_cuda);
  m.impl("rms_norm_bwd", &rms_norm_bwd_cuda);
  m.impl("layer_norm_fwd", &layer_norm_fwd_cuda);
  m.impl("layer_norm_bwd", &layer_norm_bwd_cuda);
  m.impl("rms_norm_fwd_version", &rms_norm_fwd_version_cuda);
}
