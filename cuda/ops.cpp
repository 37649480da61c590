// The `normlab` operator library: the one place where the schemas of the native ops are declared.
//
// Device implementations register against these schemas elsewhere:
//   cuda/cpu/rms_norm_cpu.cpp, cuda/cpu/layer_norm_cpu.cpp   TORCH_LIBRARY_IMPL(normlab, CPU, m)
//   the CUDA sources                                         TORCH_LIBRARY_IMPL(normlab, CUDA, m)
// The fake (meta) implementations and the autograd formulas are registered from Python in
// reference_impl/fused.py (torch.library.register_fake / register_autograd), so torch.compile can trace
// the ops without graph breaks.
//
// Contract shared by every implementation (the Python wrapper makes inputs contiguous before calling):
//   * Normalization runs over the last dimension of a contiguous x of dtype float32, bfloat16 or float16.
//     Let d = x.size(-1) and rows = x.numel() / d. All statistics and arithmetic are float32.
//   * weight and bias are 1-D of length d, on x's device, with dtype x.dtype or float32 (other dtypes are
//     rejected with an error). Outputs y and dx have x's dtype; dweight has weight's dtype.
//   * rstd (and mean) are float32 with shape x.shape[:-1]. eps sits inside the square root.
//
// rms_norm_fwd(x, weight, residual, eps, convention) -> (y, residual_out, rstd)
//   residual given:  h = round_to_x_dtype(float(x) + float(residual)) is normalized and returned as
//                    residual_out (the next layer's residual stream); residual has x's shape and dtype.
//   residual None:   h = x, and residual_out is an empty tensor of shape [0] and dtype x.dtype.
//   rstd = 1 / sqrt(sum(h^2) / d + eps).
//   convention 0 (Llama):  y = round_x(round_x(h * rstd) * weight)   (Hugging Face LlamaRMSNorm order:
//                           normalize in fp32, cast to x's dtype, then multiply by the weight)
//   convention 1 (Gemma):  y = round_x((h * rstd) * (1 + float(weight)))   (the offset gain, cast once)
//   weight None:           y = round_x(h * rstd) in both conventions.
// rms_norm_bwd(dy, x, weight, rstd, convention) -> (dx, dweight)
//   x is the tensor that was normalized (h when a residual was fused). With xhat = x * rstd and
//   g = dy * weight_eff (weight_eff = weight, 1 + weight, or 1 without a weight):
//   dx = rstd * (g - xhat * mean(g * xhat)),  dweight = sum over rows of dy * xhat.
//   dweight is an empty tensor of shape [0] when weight is None.
// layer_norm_fwd(x, weight, bias, eps) -> (y, mean, rstd)
//   mean = sum(x) / d, rstd = 1 / sqrt(sum((x - mean)^2) / d + eps) (two-pass, biased variance),
//   y = round_x(((x - mean) * rstd) * weight + bias).
// layer_norm_bwd(dy, x, weight, mean, rstd) -> (dx, dweight, dbias)
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * weight;
//   dweight = sum over rows of dy * xhat (empty [0] when weight is None);
//   dbias = sum over rows of dy, accumulated in float32 and returned in dy's dtype, always (bias
//   presence is not part of the schema; the Python autograd formula drops it when there is no bias).
// Gradient reductions over rows (dweight, dbias) are deterministic: fixed row blocks, fixed-order sums,
// no atomics, so repeated calls are bit-identical; a row's dx never depends on the other rows.
#include <torch/library.h>

// --8<-- [start:schema]
TORCH_LIBRARY(normlab, m) {
  m.def("rms_norm_fwd(Tensor x, Tensor? weight, Tensor? residual, float eps, int convention) "
        "-> (Tensor y, Tensor residual_out, Tensor rstd)");
  m.def("rms_norm_bwd(Tensor dy, Tensor x, Tensor? weight, Tensor rstd, int convention) "
        "-> (Tensor dx, Tensor dweight)");
  m.def("layer_norm_fwd(Tensor x, Tensor? weight, Tensor? bias, float eps) "
        "-> (Tensor y, Tensor mean, Tensor rstd)");
  m.def("layer_norm_bwd(Tensor dy, Tensor x, Tensor? weight, Tensor mean, Tensor rstd) "
        "-> (Tensor dx, Tensor dweight, Tensor dbias)");
}
// --8<-- [end:schema]
