"""pRMSNorm, partial RMSNorm (Zhang and Sennrich, arXiv:1910.07467, section 4): the RMS from the first
``k = int(d * p)`` features, applied to all ``d``. The math is here (:func:`partial_rms_norm`, :class:`PartialRMSNormFunction` with its
explicit backward); ``reference_impl.variants.partial_rms_norm`` is the same function."""
from __future__ import annotations

import math

import numpy as np
import torch

from .._checks import check_input, check_norm_args, compute_dtype, functorch_active
from ..shared import check_placement, rows2d


def partial_size(d: int, p) -> int:
    """pRMSNorm estimates the RMS from the first ``int(d * p)`` features (as in the authors' code)."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or math.isnan(p):
        raise TypeError(f"p must be a real number in (0, 1], got {p!r}")
    if not 0.0 < p <= 1.0:
        raise ValueError(f"p must lie in (0, 1], got {p}")
    k = int(d * p)
    if k < 1:
        raise ValueError(f"p={p} keeps int({d} * {p}) = 0 features of {d}; the RMS needs at least one")
    return k


# --8<-- [start:prms_forward]
def _prms_stats(xf, k, eps, placement):
    ms = xf[..., :k].pow(2).mean(-1, keepdim=True)  # RMS from the first k features only
    r = torch.rsqrt(ms + eps) if placement == "inside" else 1.0 / (torch.sqrt(ms) + eps)
    return ms, r
# --8<-- [end:prms_forward]


def _prms_forward(x, weight, eps, k, placement):
    cd = compute_dtype(x)
    xf = x.to(cd)
    _, r = _prms_stats(xf, k, eps, placement)
    y = xf * r
    if weight is not None:
        y = y * weight.to(cd)
    return y.to(x.dtype), r


def _check_partial(x, weight, eps, k, placement) -> float:
    def extra():
        check_placement(placement)
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= x.shape[-1]:
            raise ValueError(f"k must be an int in [1, {x.shape[-1]}] (features the RMS is taken over), got {k!r}")
    return check_norm_args(x, weight, eps, extra=extra)


class PartialRMSNormFunction(torch.autograd.Function):
    """``PartialRMSNormFunction.apply(x, weight, eps, k, placement)``: RMS over the first k features."""

    @classmethod
    def apply(cls, x, weight, eps, k, placement):
        eps = _check_partial(x, weight, eps, k, placement)
        if functorch_active():
            return _prms_forward(x, weight, eps, k, placement)[0]
        return super().apply(x, weight, eps, k, placement)

    @staticmethod
    def forward(ctx, x, weight, eps, k, placement):
        y, r = _prms_forward(x, weight, eps, k, placement)
        ctx.save_for_backward(x, weight, r)
        ctx.k, ctx.eps, ctx.placement = k, eps, placement
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w, r = ctx.saved_tensors
        k = ctx.k
        cd = r.dtype
        xf = x.to(cd)
        if torch.is_grad_enabled():  # create_graph: recompute r from x so double backward is exact
            r = _prms_stats(xf, k, ctx.eps, ctx.placement)[1]
        xhat = xf * r
        g = dy.to(cd) if w is None else dy.to(cd) * w.to(cd)
        # dx_i = r (g_i - [i < k] c_i * sum_j(g_j xhat_j) / k), c = xhat (eps inside) or x / sqrt(ms) (outside)
        m = (g * xhat).sum(-1, keepdim=True) / k
        if ctx.placement == "inside":
            c = xhat[..., :k]
        else:
            s = torch.sqrt(xf[..., :k].pow(2).mean(-1, keepdim=True))
            c = torch.where(s > 0, xf[..., :k] / torch.where(s > 0, s, torch.ones_like(s)), torch.zeros_like(s))
        dx = r * g
        dx = torch.cat([dx[..., :k] - r * c * m, dx[..., k:]], dim=-1)
        dw = None
        if w is not None and ctx.needs_input_grad[1]:
            dw = rows2d(dy.to(cd) * xhat).sum(0).to(w.dtype)
        return dx.to(x.dtype), dw, None, None, None


def partial_rms_norm(x, weight=None, p=0.0625, eps=1e-8, *, eps_placement="inside"):
    """pRMSNorm (arXiv:1910.07467, Sec. 4): RMS over the first ``k = int(d * p)`` features, applied to all d.

    Computes in float32 (float64 for float64 input), gain in that dtype, one cast (the core order).
    ``p`` in (0, 1]; ``p = 1`` is plain RMSNorm. The authors' default eps is 1e-8.
    """
    check_input(x)
    k = partial_size(x.shape[-1], p)
    eps = _check_partial(x, weight, eps, k, eps_placement)  # here too: torch.compile skips the Function's apply
    return PartialRMSNormFunction.apply(x, weight, eps, k, eps_placement)


# ------------------------------------------------------------------ the catalog entry
from ._bounds import rms_like
from .spec import BadInput, NormSpec, set_param, common_bad, gain, randn


def _inputs(shape, dtype, g):
    return {"x": randn(shape, dtype, g, 2.0), "weight": gain(shape[-1], dtype, g)}


def _oracle(x, weight, p, eps):
    k = int(x.shape[-1] * p)
    ms = np.mean(x[..., :k] ** 2, -1, keepdims=True)
    return x / np.sqrt(ms + eps) * weight


def _bound(inputs, params):
    x = inputs["x"]
    k = int(x.shape[-1] * params["p"])
    return rms_like(_oracle(x.double().numpy(), inputs["weight"].double().numpy(), **params), k, x.dtype)


SPECS = (NormSpec(
    name="prms_norm", title="pRMSNorm: the RMS of the first k = int(d p) features",
    source="Zhang and Sennrich, arXiv:1910.07467, section 4",
    reference=lambda x, weight, p, eps: partial_rms_norm(x, weight, p, eps),
    oracle=_oracle, bound=_bound, make_inputs=_inputs, params={"p": 0.5, "eps": 1e-8},
    formulas=("prms.forward", "prms.mean_square"), conventions=("reference", "eps inside"),
    shapes=((0, 8), (1, 2), (3, 7), (2, 3, 33), (4, 129)), grads=("x", "weight"),
    bad_inputs=common_bad(("weight",))[:-2] + (
        BadInput("p of zero", set_param("p", 0.0), ValueError, r"\(0, 1\]"),
        BadInput("p keeping no feature", set_param("p", 1e-9), ValueError, "at least one")),
),)
