"""Normalizations without a gain: Llama 4's ``Llama4TextL2Norm`` (transformers,
models/llama4/modeling_llama4.py), which divides by the RMS, and nGPT's normalization to unit length
(Loshchilov et al., arXiv:2410.01131). Each function is self-contained: copy one, it needs only torch."""
# --8<-- [start:llama4_l2_norm]
import torch


def llama4_l2_norm(x, eps=1e-5):
    """Llama 4's query/key norm: x * rsqrt(mean(x**2) + eps) in float32, rounded to x's dtype; no gain.

    x: (..., head_dim) float16, bfloat16, float32 or float64 (computed in float32). Despite the class's name
    the result has unit RMS (length sqrt(head_dim)), not unit length. eps: inside the root; the model passes
    config.rms_norm_eps.
    """
    xf = x.to(torch.float32)
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
# --8<-- [end:llama4_l2_norm]


# --8<-- [start:l2_norm]
import torch


def l2_norm(x, eps=1e-12):
    """x / max(||x||_2, eps) over the last dimension: every row to unit length (nGPT).

    x: (..., d) float16, bfloat16, float32 or float64. Computed in float32 (float64 for float64 x), one
    rounding to x's dtype; an all-zero row stays zero.
    """
    cd = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(cd)
    return (xf / torch.linalg.vector_norm(xf, dim=-1, keepdim=True).clamp_min(eps)).to(x.dtype)
# --8<-- [end:l2_norm]
