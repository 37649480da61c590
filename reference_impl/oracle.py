"""Float64 NumPy oracle for RMSNorm and LayerNorm over the last axis, eps inside the square root.

Every array is converted to float64 first, so a low-precision input is represented exactly and the only
error left is float64 rounding (unit roundoff ``2**-53``). Shapes: ``x`` is ``(..., d)``; ``weight`` and
``bias`` are ``(d,)`` or ``None`` (meaning ones and zeros). Gradients of the gain and bias are summed over
every leading axis.
"""
from __future__ import annotations

import numpy as np


def _f64(a):
    return None if a is None else np.asarray(a, dtype=np.float64)


def _rows(x):
    return int(np.prod(x.shape[:-1]))


# --8<-- [start:rms_forward]
def rms_norm_forward(x, weight=None, eps=1e-6):
    """y = x / sqrt(mean(x**2) + eps) * weight."""
    x, w = _f64(x), _f64(weight)
    rstd = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    y = x * rstd
    return y if w is None else y * w
# --8<-- [end:rms_forward]


# --8<-- [start:rms_backward]
def rms_norm_backward(dy, x, weight=None, eps=1e-6):
    """Returns (dx, dweight); dweight is None when weight is None.

    With xhat = x * rstd and g = dy * weight:  dx = rstd * (g - xhat * mean(g * xhat)).
    """
    dy, x, w = _f64(dy), _f64(x), _f64(weight)
    rstd = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    xhat = x * rstd
    g = dy if w is None else dy * w
    dx = rstd * (g - xhat * np.mean(g * xhat, axis=-1, keepdims=True))
    dw = None if w is None else (dy * xhat).reshape(_rows(x), x.shape[-1]).sum(axis=0)
    return dx, dw
# --8<-- [end:rms_backward]


# --8<-- [start:ln_forward]
def layer_norm_forward(x, weight=None, bias=None, eps=1e-5):
    """y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias, with the biased (1/d) variance."""
    x, w, b = _f64(x), _f64(weight), _f64(bias)
    xc = x - np.mean(x, axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt(np.mean(xc * xc, axis=-1, keepdims=True) + eps)
    y = xc * rstd
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y
# --8<-- [end:ln_forward]


# --8<-- [start:ln_backward]
def layer_norm_backward(dy, x, weight=None, bias=None, eps=1e-5):
    """Returns (dx, dweight, dbias); a gradient is None when its parameter is None.

    With xhat = (x - mean) * rstd and g = dy * weight:
    dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
    """
    dy, x, w = _f64(dy), _f64(x), _f64(weight)
    xc = x - np.mean(x, axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt(np.mean(xc * xc, axis=-1, keepdims=True) + eps)
    xhat = xc * rstd
    g = dy if w is None else dy * w
    dx = rstd * (g - np.mean(g, axis=-1, keepdims=True) - xhat * np.mean(g * xhat, axis=-1, keepdims=True))
    d = x.shape[-1]
    dw = None if w is None else (dy * xhat).reshape(_rows(x), d).sum(axis=0)
    db = None if bias is None else dy.reshape(_rows(x), d).sum(axis=0)
    return dx, dw, db
# --8<-- [end:ln_backward]


# ----------------------------------------------------------------------------------------------------
# RMSNorm with eps inside or outside the root (the functions above put it inside)
# ----------------------------------------------------------------------------------------------------

def rms_norm_forward_placed(x, weight=None, eps=1e-6, eps_placement="inside"):
    """float64 NumPy RMSNorm with eps inside (``x / sqrt(ms + eps)``) or outside (``x / (sqrt(ms) + eps)``)."""
    x = np.asarray(x, dtype=np.float64)
    ms = np.mean(x * x, axis=-1, keepdims=True)
    r = 1.0 / np.sqrt(ms + eps) if eps_placement == "inside" else 1.0 / (np.sqrt(ms) + eps)
    y = x * r
    return y if weight is None else y * np.asarray(weight, dtype=np.float64)


def rms_norm_backward_placed(dy, x, weight=None, eps=1e-6, eps_placement="inside"):
    """float64 gradient of :func:`rms_norm_forward_placed`: returns (dx, dweight)."""
    dy, x = np.asarray(dy, np.float64), np.asarray(x, np.float64)
    d = x.shape[-1]
    ms = np.mean(x * x, -1, keepdims=True)
    s = np.sqrt(ms)
    r = 1.0 / np.sqrt(ms + eps) if eps_placement == "inside" else 1.0 / (s + eps)
    xhat = x * r
    g = dy if weight is None else dy * np.asarray(weight, np.float64)
    m = np.mean(g * xhat, -1, keepdims=True)
    if eps_placement == "inside":
        dx = r * (g - xhat * m)
    else:
        with np.errstate(invalid="ignore", divide="ignore"):
            dx = r * (g - np.where(s > 0, x / np.where(s > 0, s, 1.0), 0.0) * m)
    dw = None if weight is None else (dy * xhat).reshape(-1, d).sum(0)
    return dx, dw
