// The smallest useful CPU RMSNorm: the first kernel of the CPU kernels page, before the production kernels of
// cuda/cpu/ (vectors, bfloat16 and float16, two model conventions, a fused residual, tiles of short rows,
// threads, a backward). float32 in and out, eps inside the root, the gain applied in float32, one rounding.
// Built on its own by reference_impl/ops/cpu_first.py; no other library includes it.
#include <torch/extension.h>

#include <cmath>
#include <cstdint>

namespace {

// --8<-- [start:first_rows]
// x and y: `rows` rows of d floats, one after another; w: d floats
void rms_norm_rows(const float* x, const float* w, float* y, int64_t rows, int64_t d,
                   float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    float sum = 0.0f;  // pass 1: the sum of squares, in float, left to right
    for (int64_t j = 0; j < d; ++j) sum += xr[j] * xr[j];
    const float rstd = 1.0f / std::sqrt(sum / static_cast<float>(d) + eps);
    // pass 2: scale; the row is read again, from the cache
    for (int64_t j = 0; j < d; ++j) yr[j] = xr[j] * rstd * w[j];
  }
}
// --8<-- [end:first_rows]

// --8<-- [start:first_glue]
at::Tensor rms_norm_first(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const char* op = "rms_norm_first";
  TORCH_CHECK_TYPE(x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat, op,
                   ": x and weight must be float32, got ", x.scalar_type(), " and ",
                   weight.scalar_type());
  TORCH_CHECK_VALUE(x.device().is_cpu() && weight.device().is_cpu(), op,
                    ": x and weight must be CPU tensors");
  TORCH_CHECK_VALUE(x.dim() >= 1 && x.size(-1) > 0, op,
                    ": x needs a non-empty last dimension, got shape ", x.sizes());
  TORCH_CHECK_VALUE(weight.dim() == 1 && weight.size(0) == x.size(-1), op,
                    ": weight must have shape (", x.size(-1), ",), got ", weight.sizes());
  TORCH_CHECK_VALUE(std::isfinite(eps) && eps >= 0, op,
                    ": eps must be finite and >= 0, got ", eps);
  const at::Tensor xc = x.contiguous(), wc = weight.contiguous();
  at::Tensor y = at::empty_like(xc);
  const int64_t d = xc.size(-1);
  rms_norm_rows(xc.data_ptr<float>(), wc.data_ptr<float>(), y.data_ptr<float>(),
                xc.numel() / d, d, static_cast<float>(eps));
  return y;
}
// --8<-- [end:first_glue]

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("rms_norm_first", &rms_norm_first,
        "RMSNorm of float32 rows, one row at a time (the CPU page's first kernel)",
        pybind11::arg("x"), pybind11::arg("weight"), pybind11::arg("eps") = 1e-6);
}
