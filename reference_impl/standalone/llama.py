"""Llama's RMSNorm, as transformers' ``LlamaRMSNorm`` computes it (models/llama/modeling_llama.py); also the
Mistral, Mixtral, Qwen2, Qwen3, DeepSeek-V3 and Phi-3 norms. Self-contained: copy it, it needs only torch."""
# --8<-- [start:llama_rms_norm]
import torch


def llama_rms_norm(x, weight, eps=1e-6):
    """RMSNorm in Llama's order: normalize in float32, round to x's dtype, then multiply by the weight.

    x: (..., d) float16, bfloat16, float32 or float64 (float64 is computed in float32, as the model does).
    weight: (d,) gain, or None. eps: added to the mean square inside the square root.
    Returns weight * round_x(x * rsqrt(mean(x**2) + eps)), in promote(x.dtype, weight.dtype): a float32
    weight with bfloat16 activations gives a float32 result, as the module does.
    """
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    h = h.to(x.dtype)  # the rounding before the gain: what sets Llama's bits apart
    return h if weight is None else weight * h
# --8<-- [end:llama_rms_norm]
