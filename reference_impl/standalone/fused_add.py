"""The pre-norm block boundary of Llama's decoder layer (transformers, models/llama/modeling_llama.py):
``hidden = residual + hidden`` followed by the next ``LlamaRMSNorm``, in one function. Self-contained: copy
it, it needs only torch."""
# --8<-- [start:llama_add_rms_norm]
import torch


def llama_add_rms_norm(x, residual, weight, eps=1e-6):
    """Adds the residual, then normalizes the sum in Llama's order. Returns (normalized, new_residual).

    x, residual: (..., d); the sum is residual + x in promote(x.dtype, residual.dtype), rounded as torch
    adds. weight: (d,) gain, or None. eps: inside the root. The norm rounds to the sum's dtype before the gain.
    """
    s = residual + x
    h = s.to(torch.float32)
    h = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(s.dtype)
    return (h if weight is None else weight * h), s
# --8<-- [end:llama_add_rms_norm]
