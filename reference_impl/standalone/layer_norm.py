"""The site's core LayerNorm (Ba, Kiros and Hinton, arXiv:1607.06450): two-pass statistics in float32.
Self-contained: copy it, it needs only torch."""
# --8<-- [start:reference_layer_norm]
import torch


def reference_layer_norm(x, weight=None, bias=None, eps=1e-5):
    """LayerNorm over the last dimension: y = (x - mean) * rsqrt(var + eps) * weight + bias.

    x: (..., d) float16, bfloat16, float32 or float64. weight, bias: (d,) or None. eps: inside the root.
    Computed in float32 (float64 for float64 x); the variance is the mean of the centred squares (two
    passes: no cancellation); each mean is summed in float64 in order along the row and rounded once (the
    same bits whatever the batch); gain and bias in float32, one rounding to x's dtype.
    """
    cd = torch.float64 if x.dtype == torch.float64 else torch.float32

    def row_mean(t):
        return (t.to(torch.float64).cumsum(-1)[..., -1:] / t.shape[-1]).to(t.dtype)

    xf = x.to(cd)
    xc = xf - row_mean(xf)
    y = xc * torch.rsqrt(row_mean(xc.pow(2)) + eps)
    if weight is not None:
        y = y * weight.to(cd)
    if bias is not None:
        y = y + bias.to(cd)
    return y.to(x.dtype)
# --8<-- [end:reference_layer_norm]
