"""Three norms that transformers writes out with statistics or a rounding in the input's dtype. Each region
is self-contained: copy it, it needs only torch.

- ``imagegpt_rms_norm``: models/imagegpt/modeling_imagegpt.py (``ImageGPTLayerNorm``, an RMSNorm).
- ``x_dtype_layer_norm``: models/pocket_tts/modeling_pocket_tts.py (``PocketTTSFlowLayerNorm``); the same
  code in models/gradium_phonon_tts/modeling_gradium_phonon_tts.py.
- ``deberta_layer_norm``: models/deberta/modeling_deberta.py (``DebertaLayerNorm``).
"""
# --8<-- [start:imagegpt_rms_norm]
import torch


def imagegpt_rms_norm(x, weight, eps=1e-5):
    """RMSNorm with every step in x's dtype: x / sqrt(mean(x**2) + eps) * weight.

    x: (..., d) float; in float16, x**2 overflows for |x| > 256 (the row then becomes 0).
    weight: (d,) gain, or None. eps: inside the square root. The product with a float32 weight is float32.
    """
    y = x / torch.sqrt(torch.mean(torch.square(x), dim=-1, keepdim=True) + eps)
    return y if weight is None else y * weight
# --8<-- [end:imagegpt_rms_norm]


# --8<-- [start:x_dtype_layer_norm]
import torch


def x_dtype_layer_norm(x, weight, bias, eps=1e-5):
    """LayerNorm written out in x's dtype: (x - mean) * rsqrt(biased var + eps) * weight + bias.

    x: (..., d) float (the statistics are taken in x's dtype: no float32 upcast).
    weight, bias: (d,) or None. eps: inside the square root.
    """
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)
    y = (x - mean) * torch.rsqrt(var + eps)
    if weight is not None:
        y = y * weight
    return y if bias is None else y + bias
# --8<-- [end:x_dtype_layer_norm]


# --8<-- [start:deberta_layer_norm]
import torch


def deberta_layer_norm(x, weight, bias, eps=1e-12):
    """DeBERTa's LayerNorm: float32 two-pass statistics, divide by sqrt(var + eps), round to x's dtype, then
    weight * h + bias (in the promoted dtype: float32 for a float32 weight).

    x: (..., d) float (float64 is computed in float32, as the model does). weight, bias: (d,) or None.
    """
    h = x.float()
    mean = h.mean(-1, keepdim=True)
    var = (h - mean).pow(2).mean(-1, keepdim=True)
    h = ((h - mean) / torch.sqrt(var + eps)).to(x.dtype)  # the rounding before gain and bias
    y = h if weight is None else weight * h
    return y if bias is None else y + bias
# --8<-- [end:deberta_layer_norm]
