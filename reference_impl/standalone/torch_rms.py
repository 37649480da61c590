"""RMSNorm as ``torch.nn.RMSNorm`` and ``torch.nn.functional.rms_norm`` compute it, written out in torch
operations (torch/nn/modules/normalization.py). Self-contained: copy it, it needs only torch."""
# --8<-- [start:torch_rms_norm]
import torch


def torch_rms_norm(x, weight, eps=None):
    """RMSNorm in torch.nn.RMSNorm's order: compute in float32 (float64 for float64 x), gain in that dtype,
    one rounding to x's dtype at the end.

    x: (..., d) float16, bfloat16, float32 or float64. weight: (d,) gain, or None. eps: inside the square
    root; None means the compute dtype's machine epsilon (float32's for half input, not the half dtype's).
    """
    cd = torch.float64 if x.dtype == torch.float64 else torch.float32
    if eps is None:
        eps = torch.finfo(cd).eps
    xf = x.to(cd)
    h = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        h = h.mul(weight)
    return h.to(x.dtype)
# --8<-- [end:torch_rms_norm]
