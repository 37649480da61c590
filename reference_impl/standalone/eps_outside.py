"""RMSNorm with eps outside the square root, x / (rms + eps), as in the RMSNorm authors' code
(github.com/bzhangGo/rmsnorm, rmsnorm_torch.py). Self-contained: copy it, it needs only torch."""
# --8<-- [start:rms_norm_eps_outside]
import torch


def rms_norm_eps_outside(x, weight=None, eps=1e-8):
    """RMSNorm with eps added to the root: y = x / (sqrt(mean(x**2)) + eps) * weight.

    x: (..., d) float16, bfloat16, float32 or float64. weight: (d,) gain, or None. Computed in float32
    (float64 for float64 x; the mean square summed in float64 along the row, rounded once), gain in that
    dtype, one rounding to x's dtype. It differs from eps inside the root only for rows whose mean square
    is not large against eps.
    """
    cd = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(cd)
    ms = (xf.pow(2).to(torch.float64).cumsum(-1)[..., -1:] / x.shape[-1]).to(cd)
    y = xf * (1.0 / (torch.sqrt(ms) + eps))
    if weight is not None:
        y = y * weight.to(cd)
    return y.to(x.dtype)
# --8<-- [end:rms_norm_eps_outside]
