"""Norms whose statistics or intermediate rounding sit in the input's dtype: three orders that transformers
5.24 writes out by hand and that no float32-statistics entry reproduces bit for bit.

- ``rms_norm.imagegpt``: ImageGPT's ``ImageGPTLayerNorm`` is an RMSNorm (no mean is subtracted), computed
  entirely in x's dtype and dividing by the root: ``y = (x / sqrt(mean(x**2) + eps)) * w``
  (transformers, models/imagegpt/modeling_imagegpt.py). In float16 ``x**2`` overflows for ``|x| > 256``.
- ``layer_norm.x_dtype``: LayerNorm written out in x's dtype, ``(x - mean) * rsqrt(var + eps) * w + b``
  with the biased variance (transformers, models/pocket_tts/modeling_pocket_tts.py,
  ``PocketTTSFlowLayerNorm``; models/gradium_phonon_tts/modeling_gradium_phonon_tts.py,
  ``GradiumPhononTTSFlowLayerNorm``): half-precision statistics for half-precision input.
- ``layer_norm.deberta``: DeBERTa's ``DebertaLayerNorm`` computes the statistics in float32 (two passes),
  divides by ``sqrt(var + eps)``, rounds the normalized rows to x's dtype and only then applies the gain and
  bias (transformers, models/deberta/modeling_deberta.py): Llama's casting order applied to a LayerNorm.

Shapes: ``x`` ``(..., d)``; ``weight`` and ``bias`` ``(d,)``; eps inside the root. Results take the dtype
the model code gives: x's, or the promotion with a float32 gain.
"""
from __future__ import annotations

import numpy as np
import torch

from .. import tolerances as _tol
from .._checks import check_eps, check_input, check_param
from ._bounds import rms_like, u
from .spec import NormSpec, NotApplicable, common_bad, gain, randn

PAGE = "norms-gated.md"


def _check(x, weight, bias, eps):
    check_input(x)
    check_param(weight, x, "weight")
    check_param(bias, x, "bias")
    return check_eps(eps)


def imagegpt_rms_norm(x, weight, eps=1e-5):
    """``x / sqrt(mean(x**2) + eps) * weight``, every step in x's dtype (float16 squares overflow past
    256); the product with a float32 ``weight`` is float32."""
    eps = _check(x, weight, None, eps)
    y = x / torch.sqrt(torch.mean(torch.square(x), dim=-1, keepdim=True) + eps)
    return y if weight is None else y * weight


def x_dtype_layer_norm(x, weight, bias, eps=1e-5):
    """LayerNorm with mean, biased variance and rsqrt in x's dtype, then ``* weight + bias``."""
    eps = _check(x, weight, bias, eps)
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)
    y = (x - mean) * torch.rsqrt(var + eps)
    if weight is not None:
        y = y * weight
    return y if bias is None else y + bias


def _deberta(x, weight, bias, eps, cd):
    xf = x.to(cd)
    mean = xf.mean(-1, keepdim=True)
    var = (xf - mean).pow(2).mean(-1, keepdim=True)
    h = ((xf - mean) / torch.sqrt(var + eps)).to(x.dtype)
    y = h if weight is None else weight * h
    return y if bias is None else y + bias


def deberta_layer_norm(x, weight, bias, eps=1e-12):
    """DeBERTa's order: float32 two-pass statistics, divide by ``sqrt(var + eps)``, round to x's dtype, then
    ``weight * h + bias`` (promoted dtype)."""
    eps = _check(x, weight, bias, eps)
    return _deberta(x, weight, bias, eps, torch.float32)


# ------------------------------------------------------------------ oracles and bounds

def _rms64(x, weight, eps):
    y = x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps)
    return y if weight is None else y * weight


def _ln64(x, weight, bias, eps):
    xc = x - x.mean(-1, keepdims=True)
    y = xc / np.sqrt(np.mean(xc * xc, -1, keepdims=True) + eps)
    y = y if weight is None else y * weight
    return y if bias is None else y + bias


def _np(t):
    return None if t is None else t.detach().double().numpy()


def _out(x, *ps):
    dt = x.dtype
    for p in ps:
        if p is not None:
            dt = torch.promote_types(dt, p.dtype)
    return dt


def _imagegpt_bound(inputs, params):
    """The RMS analysis with the mean square accumulated in x's dtype, plus the square root and the division
    (two roundings in x's dtype) and the gain product in the output dtype."""
    x, w = inputs["x"], inputs["weight"]
    y = np.abs(_rms64(_np(x), _np(w), **params))
    out = _out(x, w)
    return rms_like(y, x.shape[-1], x.dtype, out, compute=x.dtype) + (2 * u(x.dtype) + u(out)) * y


def _x_dtype_ln_bound(inputs, params):
    """LayerNorm's bound (reference_impl.tolerances.ln_forward_bound) with the statistics in x's dtype, plus
    the gain product rounded before the bias is added."""
    x, w, b = inputs["x"], inputs["weight"], inputs["bias"]
    out = _out(x, w, b)
    xw = np.abs(_ln64(_np(x), _np(w), None, params["eps"]))
    return _tol.ln_forward_bound(x, w, b, params["eps"], out, compute=x.dtype) + u(out) * xw


def _deberta_bound(inputs, params):
    """LayerNorm's bound without gain in float32 statistics and x's dtype out, carried through |w|; then the
    gain product and the bias sum, each rounded in the output dtype."""
    x, w, b = inputs["x"], inputs["weight"], inputs["bias"]
    out = _out(x, w, b)
    h = _tol.ln_forward_bound(x, None, None, params["eps"], x.dtype, compute=torch.float32)
    wh = np.abs(_ln64(_np(x), _np(w), None, params["eps"]))
    aw = 1.0 if w is None else np.abs(_np(w))
    ab = 0.0 if b is None else np.abs(_np(b))
    # the first u(x) of h is 2 u rounding steps of one ulp in x's dtype: one for the cast, one for the divide
    return h * aw + u(out) * (2 * wh + ab) + 2 * u(x.dtype) * wh


def _ln_inputs(shape, dtype, g):
    return {"x": randn(shape, dtype, g, 2.0, 0.5), "weight": randn((shape[-1],), dtype, g, 0.5, 1.0),
            "bias": randn((shape[-1],), dtype, g, 0.3)}


def _deberta_inputs(shape, dtype, g):
    return {"x": randn(shape, dtype, g, 2.0, 0.5), "weight": gain(shape[-1], dtype, g),
            "bias": gain(shape[-1], dtype, g, 0.0)}


# ------------------------------------------------------------------ matching

def _match_rms(p):
    if p.gain == "1+w":
        raise NotApplicable("stores the gain itself")
    return imagegpt_rms_norm(p.x, p.weight, p.eps)


def _match_layer(fn):
    def run(p):
        return fn(p.x, p.weight, p.bias, p.eps)
    return run


SPECS = (
    NormSpec(
        name="rms_norm.imagegpt", title="RMSNorm computed in x's dtype, dividing by the root (ImageGPT)",
        source="transformers, models/imagegpt/modeling_imagegpt.py (ImageGPTLayerNorm)",
        reference=imagegpt_rms_norm, oracle=_rms64, bound=_imagegpt_bound,
        make_inputs=lambda shape, dtype, g: {"x": randn(shape, dtype, g, 2.0), "weight": gain(shape[-1], dtype, g)},
        params={"eps": 1e-5}, conventions=("x's dtype", "eps inside"), grads=("x", "weight"),
        bad_inputs=common_bad(("weight",)), page=PAGE, match_kind="rms", match_run=_match_rms, match_rank=51,
        match_description="computes the RMS, the root, the division and the gain in x's dtype: ImageGPT's order",
    ),
    NormSpec(
        name="layer_norm.x_dtype", title="LayerNorm with its statistics in x's dtype (PocketTTS flow head)",
        source="transformers, models/pocket_tts/modeling_pocket_tts.py (PocketTTSFlowLayerNorm)",
        reference=x_dtype_layer_norm, oracle=_ln64, bound=_x_dtype_ln_bound, make_inputs=_ln_inputs,
        params={"eps": 1e-5}, conventions=("x's dtype",), grads=("x", "weight", "bias"),
        bad_inputs=common_bad(("weight", "bias")), page=PAGE, match_kind="layer",
        match_run=_match_layer(x_dtype_layer_norm), match_rank=51,
        match_description="computes mean, biased variance, rsqrt, gain and bias in x's dtype, no float32 upcast",
    ),
    NormSpec(
        name="layer_norm.deberta", title="LayerNorm rounded to x's dtype before gain and bias (DeBERTa)",
        source="transformers, models/deberta/modeling_deberta.py (DebertaLayerNorm)",
        reference=deberta_layer_norm, oracle=_ln64, bound=_deberta_bound, make_inputs=_deberta_inputs,
        params={"eps": 1e-12}, conventions=("rounded before gain and bias", "two-pass"),
        grads=("x", "weight", "bias"),
        float64_exact=False, grad_twin=lambda x, weight, bias, eps: _deberta(x, weight, bias, eps, torch.float64),
        bad_inputs=common_bad(("weight", "bias")), page=PAGE, match_kind="layer",
        match_run=_match_layer(deberta_layer_norm), match_rank=52,
        match_description="normalizes in float32 (two passes, dividing by the root), rounds to x's dtype, then "
                          "applies gain and bias: DeBERTa's order",
    ),
)
