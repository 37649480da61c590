"""OLMo 2's RMSNorm, as transformers' ``Olmo2RMSNorm`` computes it (models/olmo2/modeling_olmo2.py).
Self-contained: copy it, it needs only torch."""
# --8<-- [start:olmo2_rms_norm]
import torch


def olmo2_rms_norm(x, weight, eps=1e-6):
    """RMSNorm in OLMo 2's order: normalize and apply the gain in float32, round once to x's dtype.

    x: (..., d) float16, bfloat16, float32 or float64 (computed in float32). weight: (d,) gain, or None.
    eps: inside the square root. Returns round_x(w * (x * rsqrt(mean(x**2) + eps))) in x's dtype.
    """
    xf = x.to(torch.float32)
    h = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        h = weight * h
    return h.to(x.dtype)
# --8<-- [end:olmo2_rms_norm]
