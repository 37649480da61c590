"""Kernels that cannot run here, read: their order of operations, each step with the released line it is
on. The words are this study's reading; the line numbers and sha256 are found in the released file at run
time (a pattern per step), so a release that changes the code fails the study instead of keeping stale
lines.
"""
from __future__ import annotations

from dataclasses import dataclass

from .loader import line_of
from .sources import Archive, sha256

ASPECTS = ("input", "accumulate", "eps", "gain", "output", "residual")


@dataclass(frozen=True)
class Step:
    aspect: str
    pattern: str
    words: str


@dataclass(frozen=True)
class Kernel:
    release: str
    file: str
    function: str
    anchor: str
    steps: tuple
    models: str  # which model types use it, in words (the page's "applies to")
    why_not_run: str


KERNELS = (
    Kernel("llamacpp", "vendor/llama.cpp/ggml/src/ggml-cpu/ops.cpp", "ggml_compute_forward_rms_norm_f32",
           "static void ggml_compute_forward_rms_norm_f32(", (
               Step("input", "GGML_ASSERT(src0->nb[0] == sizeof(float));",
                    "x is float32 (the CPU back end keeps activations in float32)"),
               Step("accumulate", "sum += (ggml_float)(x[i00] * x[i00]);",
                    "x*x rounded in float32, summed in ggml_float (double), in index order"),
               Step("eps", "const float scale = 1.0f/sqrtf(mean + eps);",
                    "mean rounded to float32; scale = 1/sqrtf(mean + eps): eps inside, a square root then a division"),
               Step("gain", "y[i00] = x[i00] * scale * w[i00];",
                    "fused with the next multiply: (x * scale) * w in float32; unfused, the gain is a separate "
                    "ggml_mul of the float32 result"),
               Step("output", "ggml_vec_scale_f32(ne00, y, scale);", "the output stays float32: no rounding to a "
                    "half dtype between the norm and the gain")),
           "every RMSNorm model llama.cpp runs (the graph calls ggml_rms_norm, then multiplies by the weight)",
           "C++ inside llama.cpp's CPU back end; read from the source vendored by llama-cpp-python"),
    Kernel("llamacpp", "vendor/llama.cpp/src/llama-graph.cpp", "llm_graph_context::build_norm",
           "ggml_tensor * llm_graph_context::build_norm(", (
               Step("eps", "case LLM_NORM_RMS:   cur = ggml_rms_norm(ctx0, cur, hparams.f_norm_rms_eps); break;",
                    "every RMSNorm layer is ggml_rms_norm with the checkpoint's eps"),
               Step("gain", "cur = ggml_mul(ctx0, cur, mw);", "then the stored weight multiplies the float32 "
                    "result (the CPU back end fuses the two into the loop above)")),
           "every RMSNorm model llama.cpp runs",
           "graph construction, C++; read"),
    Kernel("megatron", "megatron/core/transformer/custom_layers/batch_invariant_kernels.py",
           "BatchInvariantRMSNormFn.forward", "class BatchInvariantRMSNormFn(", (
               Step("gain", "weight_eff = weight + 1.0 if zero_centered_gamma else weight",
                    "with zero_centered_gamma (how Megatron stores Gemma's offset) the forward computes "
                    "weight_eff = weight + 1"),
               Step("accumulate", "ms = mean_dim(x_fp32 * x_fp32, dim=-1, keepdim=True)",
                    "x in float32, squared, averaged by the batch-invariant mean_dim kernel"),
               Step("eps", "rsigma = torch.rsqrt(ms + eps)", "rsigma = rsqrt(mean + eps): eps inside"),
               Step("gain", "w_fp32 = weight.to(device=x.device, dtype=torch.float32)",
                    "the forward then multiplies by the stored weight in float32, not by weight_eff: with "
                    "zero_centered_gamma its output lacks the + 1"),
               Step("output", "out = out_fp32.to(x_dtype)", "(x * rsigma) * w in float32, one rounding to x's "
                    "dtype: OLMo 2's order"),
               Step("gain", "w_eff = (weight + 1.0) if ctx.zero_centered_gamma else weight",
                    "the backward does use weight + 1")),
           "every model Megatron-core trains with Transformer Engine's RMSNorm while its batch-invariant mode is "
           "on (it replaces TE's RMSNorm forward); the + 1 matters for Gemma",
           "it refuses CPU tensors and its mean_dim is a Triton GPU kernel; read"),
    Kernel("vllm", "vllm/model_executor/determinism/batch_invariant.py", "_rms_norm_kernel",
           "def _rms_norm_kernel(", (
               Step("accumulate", "sq_vals = vals_f32 * vals_f32", "x converted to float32, squared, summed in "
                    "float32 blocks of 1024 columns (one program per row: no dependence on the batch)"),
               Step("eps", "rms = tl.sqrt(mean_sq + eps)", "rms = sqrt(mean + eps), then inv_rms = 1 / rms: eps "
                    "inside, a square root and a division instead of rsqrt"),
               Step("gain", "output_f32 = output_f32 * weight.to(tl.float32)", "the gain converted to float32 "
                    "multiplies the float32 normalized value"),
               Step("output", "output = output_f32.to(vals.dtype)", "one rounding to x's dtype at the end "
                    "(OLMo 2's order for a float32 gain, not Llama's)"),
               Step("residual", "ops.fused_add_rms_norm(input, residual, weight, eps)", "with a residual, "
                    "VLLM_BATCH_INVARIANT falls back to the compiled fused add-norm kernel")),
           "every model whose layers use vLLM's RMSNorm, when VLLM_BATCH_INVARIANT=1 on CUDA",
           "a Triton GPU kernel, selected only on CUDA; read"),
)


def read_kernels(archives: dict) -> list[dict]:
    """One record per kernel whose release is at hand: file, sha256, function line, and each step's line."""
    out = []
    for k in KERNELS:
        arch: Archive | None = archives.get(k.release)
        if arch is None:
            continue
        data = arch.read(k.file)
        text = data.decode("utf-8", errors="replace")
        start = line_of(text, k.anchor)
        steps = [{"aspect": s.aspect, "line": line_of(text, s.pattern, after=start),
                  "order": s.words} for s in k.steps]
        out.append({"release": k.release, "file": k.file, "sha256": sha256(data), "function": k.function,
                    "line": start, "steps": steps, "applies_to": k.models, "why_not_run": k.why_not_run})
    return out
