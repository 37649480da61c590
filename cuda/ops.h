// The `normlab` operator library: the one place where the schemas of the native ops are declared
// (define_ops; cuda/ops.cpp registers them as the library `normlab`, the CUDA glue's CPU emulation
// registers the same schemas as `normlab_emu` for the tests).
//
// Device implementations register against these schemas elsewhere:
//   cuda/cpu/rms_norm_cpu.cpp, cuda/cpu/layer_norm_cpu.cpp   TORCH_LIBRARY_IMPL(normlab, CPU, m)
//   cuda/gpu/ops_cuda.cpp                                    TORCH_LIBRARY_IMPL(normlab, CUDA, m)
// The fake (meta) implementations and the autograd formulas are registered from Python
// (reference_impl/ops/library.py, reference_impl/ops/autograd.py), so torch.compile traces the ops
// without graph breaks and double backward works. Every implementation checks its arguments with
// cuda/op_checks.h: TypeError for a dtype, ValueError for any other bad argument.
//
// Contract shared by every implementation (the Python wrapper makes inputs contiguous before calling):
//   * Normalization runs over the last dimension of a contiguous x of dtype float32, bfloat16 or float16.
//     Let d = x.size(-1) > 0 and rows = x.numel() / d (0 rows is fine). All statistics and arithmetic
//     are float32.
//   * weight and bias are 1-D of length d, on x's device, with dtype x.dtype or float32. Outputs y and dx
//     have x's dtype; dweight and dbias are float32, the unrounded fp32 sums over rows (the autograd
//     formula rounds each once to its parameter's dtype).
//   * rstd (and mean) are float32 with shape x.shape[:-1]. eps sits inside the square root; it must be
//     finite, non-negative and at most the largest float32.
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
//   convention + 2 (the "fp32" residual contract; CPU and CUDA kernels): rstd and y are computed from
//                    s = float(x) + float(residual) instead of h; residual_out is still round_x(s).
// rms_norm_fwd_out(..., *, y, residual_out) -> rstd
//   The same, writing y (and residual_out, when a residual is given) into the caller's buffers: x's
//   shape and dtype, contiguous, on x's device, sharing no memory with an input or with each other.
//   No autograd: an input that requires grad (with grad mode on) is a ValueError.
// rms_norm_bwd(dy, x, weight, rstd, convention) -> (dx, dweight)
//   x is the tensor that was normalized (h when a residual was fused). With xhat = x * rstd and
//   g = dy * weight_eff (weight_eff = weight, 1 + weight, or 1 without a weight):
//   dx = rstd * (g - xhat * mean(g * xhat)),  dweight = sum over rows of dy * xhat (float32).
//   dweight is an empty tensor of shape [0] when weight is None.
// layer_norm_fwd(x, weight, bias, eps, residual=None, residual_contract=0) -> (y, mean, rstd, residual_out)
//   mean = sum(x) / d, rstd = 1 / sqrt(sum((x - mean)^2) / d + eps) (two-pass, biased variance),
//   y = round_x(((x - mean) * rstd) * weight + bias).
//   residual given: as rms_norm_fwd, x is replaced by h = round_x(float(x) + float(residual)), returned
//   as residual_out; residual_contract 2 (the "fp32" contract) takes mean, rstd and y from
//   s = float(x) + float(residual) instead, residual_out still round_x(s). residual_contract is 0 or 2.
//   residual None: residual_out is an empty tensor of shape [0] and dtype x.dtype.
// layer_norm_fwd_out(..., *, y, residual_out=None) -> (mean, rstd)   y (and residual_out, exactly when
//   a residual is given) written into the caller's buffers, as rms_norm_fwd_out.
// layer_norm_bwd(dy, x, weight, mean, rstd) -> (dx, dweight, dbias)
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * weight;
//   dweight = sum over rows of dy * xhat (empty [0] when weight is None); dbias = sum over rows of dy,
//   always (bias presence is not part of the schema; the Python autograd formula drops it when there is
//   no bias). Both float32.
// Gradient reductions over rows (dweight, dbias) are deterministic: fixed row blocks, fixed-order sums,
// no atomics, so repeated calls are bit-identical; a row's dx never depends on the other rows.
#pragma once

#include <torch/library.h>

namespace normlab {

// --8<-- [start:schema]
inline void define_ops(torch::Library& m) {
  m.def("rms_norm_fwd(Tensor x, Tensor? weight, Tensor? residual, float eps, int convention) "
        "-> (Tensor y, Tensor residual_out, Tensor rstd)");
  m.def("rms_norm_fwd_out(Tensor x, Tensor? weight, Tensor? residual, float eps, int convention, *, "
        "Tensor(a!) y, Tensor(b!)? residual_out) -> Tensor rstd");
  m.def("rms_norm_bwd(Tensor dy, Tensor x, Tensor? weight, Tensor rstd, int convention) "
        "-> (Tensor dx, Tensor dweight)");
  m.def("layer_norm_fwd(Tensor x, Tensor? weight, Tensor? bias, float eps, Tensor? residual=None, "
        "int residual_contract=0) -> (Tensor y, Tensor mean, Tensor rstd, Tensor residual_out)");
  m.def("layer_norm_fwd_out(Tensor x, Tensor? weight, Tensor? bias, float eps, Tensor? residual=None, "
        "int residual_contract=0, *, Tensor(a!) y, Tensor(b!)? residual_out=None) -> (Tensor mean, Tensor rstd)");
  m.def("layer_norm_bwd(Tensor dy, Tensor x, Tensor? weight, Tensor mean, Tensor rstd) "
        "-> (Tensor dx, Tensor dweight, Tensor dbias)");
}
// --8<-- [end:schema]

}  // namespace normlab
