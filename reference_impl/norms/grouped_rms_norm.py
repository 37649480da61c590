"""Grouped RMSNorm of Mamba-2 (arXiv:2405.21060; transformers ``MambaRMSNormGated``): one RMS per group
of ``d // groups`` consecutive features, the gain after the cast (llama order).
The math is here (:func:`grouped_rms_norm`, :class:`GroupedRMSNormFunction` with its explicit backward);
``reference_impl.variants.grouped_rms_norm`` is the same function."""
from __future__ import annotations

import numpy as np
import torch

import torch.nn.functional as F

from .._checks import check_input, check_norm_args, functorch_active
from ..shared import rows2d


def group_size(d: int, groups) -> int:
    if isinstance(groups, bool) or not isinstance(groups, int):
        raise TypeError(f"groups must be an int, got {type(groups).__name__}")
    if groups < 1:
        raise ValueError(f"groups must be >= 1, got {groups}")
    if d % groups:
        raise ValueError(f"the last dimension {d} is not divisible by groups={groups}")
    return d // groups


# --8<-- [start:grouped_forward]
def _grouped_forward(x, gate, w, eps, gs):
    """Mamba-2's gated grouped RMSNorm (transformers MambaRMSNormGated): optional SiLU gate, one RMS
    per group of ``gs`` consecutive features, computed in float32, cast, then the gain (llama order)."""
    a = x.to(torch.float32)
    if gate is not None:
        a = a * F.silu(gate.to(torch.float32))
    ag = a.view(*a.shape[:-1], a.shape[-1] // gs, gs)
    r = torch.rsqrt(ag.pow(2).mean(-1, keepdim=True) + eps)
    h = (ag * r).view(a.shape).to(x.dtype)
    return (h if w is None else w * h), a, r
# --8<-- [end:grouped_forward]


def _check_grouped(x, gate, weight, eps, gs) -> float:
    def extra():
        if isinstance(gs, bool) or not isinstance(gs, int) or gs < 1 or x.shape[-1] % gs:
            raise ValueError(f"group size must be a positive int dividing the last dimension {x.shape[-1]}, got {gs!r}")
        if gate is not None:
            check_input(gate, "gate")
            if gate.shape != x.shape:
                raise ValueError(f"gate has shape {tuple(gate.shape)} but x has shape {tuple(x.shape)}")
            if gate.device != x.device:
                raise ValueError(f"gate is on {gate.device} but x is on {x.device}")
    return check_norm_args(x, weight, eps, eps_dtype=torch.float32, extra=extra)


class GroupedRMSNormFunction(torch.autograd.Function):
    """``GroupedRMSNormFunction.apply(x, gate, weight, eps, group_size)``; explicit backward."""

    @classmethod
    def apply(cls, x, gate, weight, eps, gs):
        eps = _check_grouped(x, gate, weight, eps, gs)
        if functorch_active():
            return _grouped_forward(x, gate, weight, eps, gs)[0]
        return super().apply(x, gate, weight, eps, gs)

    @staticmethod
    def forward(ctx, x, gate, weight, eps, gs):
        y, a, r = _grouped_forward(x, gate, weight, eps, gs)
        ctx.save_for_backward(x, gate, weight, r)
        ctx.gs = gs
        ctx.eps = eps
        return y

    @staticmethod
    def backward(ctx, dy):
        x, gate, w, r = ctx.saved_tensors
        gs = ctx.gs
        xf = x.to(torch.float32)
        a = xf if gate is None else xf * F.silu(gate.to(torch.float32))
        shape_g = (*a.shape[:-1], a.shape[-1] // gs, gs)
        if torch.is_grad_enabled():  # create_graph: recompute r from x (and gate) so double backward is exact
            r = torch.rsqrt(a.view(shape_g).pow(2).mean(-1, keepdim=True) + ctx.eps)
        ahat = (a.view(shape_g) * r)
        dyf = dy.to(torch.float32)
        g = (dyf if w is None else dyf * w.to(torch.float32)).view(shape_g)
        da = (r * (g - ahat * (g * ahat).mean(-1, keepdim=True))).view(a.shape)
        dx = dgate = dw = None
        if gate is None:
            dx = da
        else:
            zf = gate.to(torch.float32)
            s = torch.sigmoid(zf)
            dx = da * zf * s  # silu(z) = z * sigmoid(z)
            if ctx.needs_input_grad[1]:
                dgate = (da * xf * s * (1 + zf * (1 - s))).to(gate.dtype)  # silu'(z) = s (1 + z (1 - s))
        if w is not None and ctx.needs_input_grad[2]:
            dw = rows2d(dyf * ahat.view(a.shape)).sum(0).to(w.dtype)
        return dx.to(x.dtype), dgate, dw, None, None


def grouped_rms_norm(x, weight=None, groups=1, eps=1e-6, *, gate=None):
    """Grouped RMSNorm as in Mamba-2 (arXiv:2405.21060; transformers ``MambaRMSNormGated``).

    The last dimension ``d`` is split into ``groups`` groups of ``d // groups`` consecutive features, each
    normalized by its own RMS; ``gate`` (same shape as x) multiplies x by ``silu(gate)`` first. The gain
    ``(d,)`` is applied after the cast to x's dtype (llama order). ``groups=1`` is llama-convention RMSNorm.
    """
    check_input(x)
    gs = group_size(x.shape[-1], groups)
    eps = _check_grouped(x, gate, weight, eps, gs)
    return GroupedRMSNormFunction.apply(x, gate, weight, eps, gs)


# ------------------------------------------------------------------ the catalog entry
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
    reference=lambda x, weight, groups, eps: grouped_rms_norm(x, weight, groups, eps),
    oracle=_oracle, bound=_bound, make_inputs=_inputs, params={"groups": 3, "eps": 1e-6},
    conventions=("llama",), families=("Mamba-2",),
    shapes=((0, 6), (1, 3), (3, 9), (2, 3, 33), (4, 129)), grads=("x", "weight"), float64_exact=False,
    grad_twin=lambda x, weight, groups, eps: _twin(x, weight, groups, eps),
    bad_inputs=common_bad(("weight",)) + (
        BadInput("groups not dividing d", set_param("groups", 4), ValueError, "not divisible"),),
),)
