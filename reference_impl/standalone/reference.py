"""The site's core RMSNorm (Zhang and Sennrich, arXiv:1910.07467), the order every accuracy bound on the
site is derived for. Self-contained: copy it, it needs only torch."""
# --8<-- [start:reference_rms_norm]
import torch


def reference_rms_norm(x, weight=None, eps=1e-6):
    """RMSNorm over the last dimension: y = x * rsqrt(mean(x**2) + eps) * weight.

    x: (..., d) float16, bfloat16, float32 or float64. weight: (d,) gain, or None. eps: inside the root.
    Squares, root and gain in float32 (float64 for float64 x): float16 squares overflow above 256, and a
    half-precision running sum drops small terms. The mean square is summed in float64 in order along
    the row, then rounded once, so a row's bits do not depend on the batch it is in. One rounding to x's
    dtype at the end.
    """
    cd = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(cd)
    ms = (xf.pow(2).to(torch.float64).cumsum(-1)[..., -1:] / x.shape[-1]).to(cd)
    y = xf * torch.rsqrt(ms + eps)
    if weight is not None:
        y = y * weight.to(cd)
    return y.to(x.dtype)
# --8<-- [end:reference_rms_norm]
