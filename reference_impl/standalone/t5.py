"""T5's RMSNorm, as transformers' ``T5LayerNorm`` computes it (models/t5/modeling_t5.py). Self-contained:
copy it, it needs only torch."""
# --8<-- [start:t5_rms_norm]
import torch


def t5_rms_norm(x, weight, eps=1e-6):
    """RMSNorm in T5's order: the mean square from float32, multiplied into the uncast input.

    x: (..., d) float16, bfloat16, float32 or float64. weight: (d,) gain, or None. eps: inside the root.
    x * rsqrt(...) promotes to float32 (float64 for float64 x); the product is rounded to the weight's dtype
    when that is float16 or bfloat16, then multiplied by the weight. Result dtype: the weight's for a half
    weight, else promote(float32, x, weight); x's dtype without a weight.
    """
    ms = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
    h = x * torch.rsqrt(ms + eps)
    if weight is None:
        return h.to(x.dtype)
    if weight.dtype in (torch.float16, torch.bfloat16):
        h = h.to(weight.dtype)
    return weight * h
# --8<-- [end:t5_rms_norm]
