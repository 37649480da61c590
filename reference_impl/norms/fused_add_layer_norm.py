"""The pre-norm block boundary of a LayerNorm model in one call: ``s = residual + x; return layer_norm(s), s``.
Math: :func:`reference_impl.norms.layer_norm.layer_norm` applied to the sum, rounded once to x's dtype (the "hf"
residual contract)."""
from __future__ import annotations

import numpy as np
import torch

from .. import oracle as _oracle
from .. import tolerances as _tol
from .._checks import check_input
from .layer_norm import layer_norm
from .spec import BadInput, Impl, NormSpec, common_bad, randn

u = _tol.unit_roundoff


def _inputs(shape, dtype, g):
    return {"x": randn(shape, dtype, g, 2.0), "residual": randn(shape, dtype, g, 2.0, 1.0),
            "weight": randn((shape[-1],), dtype, g, 0.5, 1.0), "bias": randn((shape[-1],), dtype, g, 0.3)}


def _reference(x, residual, weight, bias, eps):
    check_input(x)
    check_input(residual, "residual")
    if residual.shape != x.shape:
        raise ValueError(f"residual has shape {tuple(residual.shape)} but x has shape {tuple(x.shape)}")
    s = x + residual
    return layer_norm(s, weight, bias, eps), s


def _oracle_fn(x, residual, weight, bias, eps):
    s = x + residual
    return _oracle.layer_norm_forward(s, weight, bias, eps), s


def _bound(inputs, params):
    x, res, w, b = inputs["x"], inputs["residual"], inputs["weight"], inputs["bias"]
    s = x + res  # rounded once, in x's dtype: a relative error u_x on each s_i moves y_i by at most 2 u_x |y_i| r
    _, s64 = _oracle_fn(*(t.double().numpy() for t in (x, res, w, b)), **params)
    sd = s.double().numpy()
    r = 1 / np.sqrt(np.var(sd, -1, keepdims=True) + params["eps"])
    shift = 2 * u(x.dtype) * np.abs(w.double().numpy()) * r * (np.abs(sd) + np.mean(np.abs(sd), -1, keepdims=True))
    by = _tol.ln_forward_bound(s, w, b, params["eps"], x.dtype) + shift
    # s itself: one rounding into x's dtype (u_x |s|), compared in float64 (u_64 |s|), and the subnormal floor
    bs = (u(x.dtype) + u(torch.float64)) * np.abs(s64) + float(torch.finfo(x.dtype).tiny) * u(x.dtype)
    return by, bs


def _native(device_name):
    def run(x, residual, weight, bias, eps):
        from .. import ops

        if device_name == "triton":
            from ..ops.triton_norm import triton_layer_norm

            return triton_layer_norm(x, weight, bias, eps, residual=residual)
        return ops.fused_layer_norm(x, weight, bias, eps, residual=residual)
    return run


def _native_bound(inputs, params):
    x = inputs["x"]
    by, bs = _bound(inputs, params)
    y = _oracle_fn(*(inputs[k].double().numpy() for k in ("x", "residual", "weight", "bias")), **params)[0]
    return by + u(x.dtype) * np.abs(y), bs


def _mismatch(inputs, params):
    return {**inputs, "residual": inputs["residual"][..., :-1]}, params


SPECS = (NormSpec(
    name="fused_add_layer_norm", title="Residual add fused with LayerNorm",
    source="transformers, models/gpt2/modeling_gpt2.py (GPT2Block: attn_output + residual, then ln_2)",
    reference=_reference, oracle=_oracle_fn, bound=_bound, make_inputs=_inputs, params={"eps": 1e-5},
    implementations={"normlab (CPU)": Impl(_native("normlab"), "cpu", bound=_native_bound),
                     "normlab (CUDA)": Impl(_native("normlab"), "cuda", bound=_native_bound),
                     "Triton": Impl(_native("triton"), "cuda", bound=_native_bound)},
    grads=("x", "residual", "weight", "bias"),
    bad_inputs=common_bad(("weight", "bias")) + (BadInput("residual of another shape", _mismatch, ValueError, "residual"),),
),)
