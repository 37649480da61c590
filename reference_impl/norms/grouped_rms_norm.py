"""Grouped RMSNorm of Mamba-2 (arXiv:2405.21060; transformers ``MambaRMSNormGated``): one RMS per group
of ``d // groups`` consecutive features, the gain after the cast (llama order).
Math: :func:`reference_impl.variants.grouped_rms_norm`."""
from __future__ import annotations

import numpy as np
import torch

from .. import variants as _va
from ._bounds import rms_like, u
from .spec import BadInput, NormSpec, set_param, common_bad, gain, randn


def _inputs(shape, dtype, g):
    return {"x": randn(shape, dtype, g, 2.0), "weight": gain(shape[-1], dtype, g)}


def _normalized(x, groups, eps):
    xg = x.reshape(*x.shape[:-1], groups, x.shape[-1] // groups)
    return (xg / np.sqrt(np.mean(xg ** 2, -1, keepdims=True) + eps)).reshape(x.shape)


def _oracle(x, weight, groups, eps):
    return _normalized(x, groups, eps) * weight


def _bound(inputs, params):
    x, w = inputs["x"], inputs["weight"]
    h = _normalized(x.double().numpy(), params["groups"], params["eps"])
    wd = np.abs(w.double().numpy())
    out = torch.promote_types(x.dtype, w.dtype)
    # h rounded to x's dtype (the llama cast), then w * h rounded to the output dtype
    return rms_like(h, x.shape[-1] // params["groups"], x.dtype, compute=torch.float32) * wd + u(out) * np.abs(h) * wd


def _twin(x, weight, groups, eps):
    """The same math in float64 with autograd (the reference computes in float32 even for float64 input)."""
    xg = x.reshape(*x.shape[:-1], groups, x.shape[-1] // groups)
    return (xg * torch.rsqrt(xg.pow(2).mean(-1, keepdim=True) + eps)).reshape(x.shape) * weight


SPECS = (NormSpec(
    name="grouped_rms_norm", title="Grouped RMSNorm (Mamba-2): one RMS per group of features",
    source="Dao and Gu, arXiv:2405.21060; transformers, models/mamba2/modeling_mamba2.py (MambaRMSNormGated)",
    reference=lambda x, weight, groups, eps: _va.grouped_rms_norm(x, weight, groups, eps),
    oracle=_oracle, bound=_bound, make_inputs=_inputs, params={"groups": 3, "eps": 1e-6},
    conventions=("llama",), families=("Mamba-2",),
    shapes=((0, 6), (1, 3), (3, 9), (2, 3, 33), (4, 129)), grads=("x", "weight"), float64_exact=False,
    grad_twin=lambda x, weight, groups, eps: _twin(x, weight, groups, eps),
    bad_inputs=common_bad(("weight",)) + (
        BadInput("groups not dividing d", set_param("groups", 4), ValueError, "not divisible"),),
),)
