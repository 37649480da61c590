"""Unweighted RMSNorm that rounds the inverse RMS to x's dtype before the product (DeepSeek-V4).

``y = x * round_x(rsqrt(mean(float32(x)**2) + eps))``: the mean square and the reciprocal root in float32,
the one statistic per row rounded to x's dtype, then the product taken in x's dtype (a second rounding).
Llama's order rounds once, after the product in float32; this order rounds twice and lands up to about one
ulp of x's dtype away from it. No gain. eps inside the root. ``x``: ``(..., d)`` float; the result has its
shape and dtype. Float64 input is computed in float32 as the model code does.

Source: transformers, models/deepseek_v4/modeling_deepseek_v4.py (``DeepseekV4UnweightedRMSNorm``); the same
line in models/glm5_next/modeling_glm5_next.py (``Glm5NextTextUnweightedRMSNorm``).
"""
from __future__ import annotations

import numpy as np
import torch

from .._checks import check_eps, check_input
from ._bounds import rms_like, u
from .spec import NormSpec, NotApplicable, common_bad, randn


def _math(x, eps, cd):
    return x * torch.rsqrt(x.to(cd).square().mean(-1, keepdim=True) + eps).to(x.dtype)


def deepseek_v4_rms_norm(x, eps=1e-6):
    """``x * rsqrt(mean(x**2) + eps).to(x.dtype)``: float32 statistics, the inverse RMS rounded to x's
    dtype, the product in x's dtype. No gain."""
    check_input(x)
    return _math(x, check_eps(eps), torch.float32)


def _oracle(x, eps):
    return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps)


def _bound(inputs, params):
    x = inputs["x"]
    y = np.abs(_oracle(x.double().numpy(), **params))
    # the RMS analysis with float32 statistics, plus the inverse RMS rounded to x's dtype (one more u_x)
    return rms_like(y, x.shape[-1], x.dtype, compute=torch.float32) + u(x.dtype) * y


def _match(p):
    if p.weight is not None or p.gain != "none":
        raise NotApplicable("an unweighted norm")
    return deepseek_v4_rms_norm(p.x, p.eps)


SPECS = (NormSpec(
    name="rms_norm.deepseek_v4",
    title="Unweighted RMSNorm with the inverse RMS rounded to x's dtype (DeepSeek-V4)",
    source="transformers, models/deepseek_v4/modeling_deepseek_v4.py (DeepseekV4UnweightedRMSNorm)",
    reference=deepseek_v4_rms_norm, oracle=_oracle, bound=_bound,
    make_inputs=lambda shape, dtype, g: {"x": randn(shape, dtype, g, 2.0)}, params={"eps": 1e-6},
    conventions=("rounded statistic", "no gain"), families=(), float64_exact=False,
    grad_twin=lambda x, eps: _math(x, eps, torch.float64), bad_inputs=common_bad(()),
    page="norms-gated.md", match_kind="rms", match_run=_match, match_rank=50,
    match_description="rounds the inverse RMS (float32 statistics) to x's dtype and multiplies in x's dtype, "
                      "without a gain: DeepSeek-V4's unweighted order",
),)
