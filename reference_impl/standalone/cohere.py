"""Cohere's LayerNorm, as transformers' ``CohereLayerNorm`` computes it (models/cohere/modeling_cohere.py).
Self-contained: copy it, it needs only torch."""
# --8<-- [start:cohere_layer_norm]
import torch


def cohere_layer_norm(x, weight, eps=1e-5):
    """LayerNorm without bias, in Cohere's order: two-pass statistics in float32, gain in float32, one
    rounding to x's dtype.

    x: (..., d) float16, bfloat16, float32 or float64 (computed in float32). weight: (d,) gain, or None.
    eps: inside the square root.
    """
    xf = x.to(torch.float32)
    mean = xf.mean(-1, keepdim=True)
    var = (xf - mean).pow(2).mean(-1, keepdim=True)
    h = (xf - mean) * torch.rsqrt(var + eps)
    if weight is not None:
        h = weight.to(torch.float32) * h
    return h.to(x.dtype)
# --8<-- [end:cohere_layer_norm]
