"""The pre-norm block boundary in one call: ``s = residual + x; return rms_norm(s), s``.
Math: :func:`reference_impl.variants.fused_add_rms_norm` (llama order by default)."""
from __future__ import annotations

import numpy as np
import torch

from .. import tolerances as _tol
from .. import variants as _va
from .spec import BadInput, Impl, NormSpec, common_bad, gain, randn

u = _tol.unit_roundoff


def _inputs(shape, dtype, g):
    return {"x": randn(shape, dtype, g, 2.0), "residual": randn(shape, dtype, g, 2.0), "weight": gain(shape[-1], dtype, g)}


def _oracle(x, residual, weight, eps, convention):
    s = x + residual
    return s / np.sqrt(np.mean(s * s, -1, keepdims=True) + eps) * weight, s


def _bound(inputs, params):
    x, res, w = inputs["x"], inputs["residual"], inputs["weight"]
    s = x + res  # rounded once, in x's dtype: a relative error u_x on each s_i moves y_i by at most 2 u_x |y_i|
    y, s64 = _oracle(x.double().numpy(), res.double().numpy(), w.double().numpy(), **params)
    by = _tol.convention_forward_bound(s, w, params["eps"], params["convention"]) + 2 * u(x.dtype) * np.abs(y)
    # s itself: one rounding into x's dtype (u_x |s|), compared in float64 (u_64 |s|), and the subnormal floor
    bs = (u(x.dtype) + u(torch.float64)) * np.abs(s64) + float(torch.finfo(x.dtype).tiny) * u(x.dtype)
    return by, bs


def _native(device_name):
    def run(x, residual, weight, eps, convention):
        from .. import ops

        if device_name == "triton":
            from ..ops.triton_norm import triton_rms_norm

            return triton_rms_norm(x, weight, eps, residual=residual, convention=convention)
        return ops.fused_rms_norm(x, weight, eps, residual=residual, convention=convention)
    return run


def _native_bound(inputs, params):
    x = inputs["x"]
    by, bs = _bound(inputs, params)
    return by + u(x.dtype) * np.abs(_oracle(x.double().numpy(), inputs["residual"].double().numpy(),
                                            inputs["weight"].double().numpy(), **params)[0]), bs


def _twin(x, residual, weight, eps, convention):
    s = x + residual
    return s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps) * weight, s


def _mismatch(inputs, params):
    return {**inputs, "residual": inputs["residual"][..., :-1]}, params


SPECS = (NormSpec(
    name="fused_add_rms_norm", title="Residual add fused with RMSNorm (llama order)",
    source="transformers decoder layers (hidden_states = residual + hidden_states, then the next norm)",
    reference=lambda x, residual, weight, eps, convention: _va.fused_add_rms_norm(x, residual, weight, eps, convention=convention),
    oracle=_oracle, bound=_bound, make_inputs=_inputs, params={"eps": 1e-6, "convention": "llama"},
    conventions=("llama",), families=("Llama", "Mistral", "Qwen2", "Qwen3"),
    implementations={"normlab (CPU)": Impl(_native("normlab"), "cpu", bound=_native_bound),
                     "normlab (CUDA)": Impl(_native("normlab"), "cuda", bound=_native_bound),
                     "Triton": Impl(_native("triton"), "cuda", bound=_native_bound)},
    grads=("x", "residual", "weight"), float64_exact=False, grad_twin=_twin,
    bad_inputs=common_bad(("weight",)) + (BadInput("residual of another shape", _mismatch, ValueError, "residual"),),
),)
