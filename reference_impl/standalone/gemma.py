"""Gemma's RMSNorm, as transformers' ``GemmaRMSNorm`` computes it (models/gemma/modeling_gemma.py); also
Gemma 2, Gemma 3 and Qwen3-Next. Self-contained: copy it, it needs only torch."""
# --8<-- [start:gemma_rms_norm]
import torch


def gemma_rms_norm(x, weight, eps=1e-6):
    """RMSNorm with Gemma's gain (1 + w): normalize and apply the gain in float32, round once at the end.

    x: (..., d) float16, bfloat16, float32 or float64 (computed in float32). weight: (d,) the stored offset
    from 1 (checkpoints store w, the model multiplies by 1 + w), or None. eps: inside the square root.
    Returns round_x(x * rsqrt(mean(x**2) + eps) * (1 + float32(w))) in x's dtype.
    """
    xf = x.to(torch.float32)
    h = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        h = h * (1.0 + weight.float())
    return h.type_as(x)
# --8<-- [end:gemma_rms_norm]
