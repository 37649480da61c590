"""ScaleNorm (Nguyen and Salazar, arXiv:1910.05895): ``g * x / max(||x||_2, eps)`` with one scalar gain.
The math is here (:func:`scale_norm`, :class:`ScaleNormFunction` with its explicit backward);
``reference_impl.variants.scale_norm`` is the same function."""
from __future__ import annotations

import math

import numpy as np
import torch

from .._checks import FLOAT_DTYPES, check_norm_args, compute_dtype, functorch_active


def _scale_forward(x, g, eps):
    cd = compute_dtype(x)
    xf = x.to(cd)
    n = torch.linalg.vector_norm(xf, dim=-1, keepdim=True)
    return (g.to(cd) * xf / n.clamp(min=eps)).to(x.dtype), n


def _check_scale(x, g, eps) -> float:
    def extra():
        if not isinstance(g, torch.Tensor):
            raise TypeError(f"g must be a torch.Tensor, got {type(g).__name__}")
        if g.dtype not in FLOAT_DTYPES:
            raise TypeError(f"g has dtype {g.dtype}; expected one of float16, bfloat16, float32, float64")
        if g.numel() != 1:
            raise ValueError(f"g must hold exactly one value (ScaleNorm has a single scalar gain), got shape {tuple(g.shape)}")
        if g.device != x.device:
            raise ValueError(f"g is on {g.device} but x is on {x.device}")
    return check_norm_args(x, None, eps, extra=extra)  # eps bounded by the compute dtype, where it is clamped


class ScaleNormFunction(torch.autograd.Function):
    """``ScaleNormFunction.apply(x, g, eps)``; explicit backward."""

    @classmethod
    def apply(cls, x, g, eps):
        eps = _check_scale(x, g, eps)
        if functorch_active():
            return _scale_forward(x, g, eps)[0]
        return super().apply(x, g, eps)

    @staticmethod
    def forward(ctx, x, g, eps):
        y, n = _scale_forward(x, g, eps)
        ctx.save_for_backward(x, g, n)
        ctx.eps = eps
        return y

    @staticmethod
    def backward(ctx, dy):
        x, g, n = ctx.saved_tensors
        cd = n.dtype
        if torch.is_grad_enabled():  # create_graph: recompute the norm from x so double backward is exact
            n = torch.linalg.vector_norm(x.to(cd), dim=-1, keepdim=True)
        xf, dyf, gf = x.to(cd), dy.to(cd), g.to(cd)
        active = n > ctx.eps  # where the clamp is active, y = g x / eps is linear in x
        nc = n.clamp(min=ctx.eps)
        u = xf / nc
        dot = (dyf * u).sum(-1, keepdim=True)
        dx = gf / nc * (dyf - torch.where(active, u * dot, torch.zeros_like(u)))
        dg = None
        if ctx.needs_input_grad[1]:
            dg = dot.sum().reshape(g.shape).to(g.dtype)
        return dx.to(x.dtype), dg, None


# --8<-- [start:scale_norm]
def scale_norm(x, g, eps=1e-5):
    """ScaleNorm (arXiv:1910.05895): ``g * x / max(||x||_2, eps)`` with one learned scalar ``g``.

    The paper initialises g to sqrt(d). ``g`` is a one-element float tensor; computed in float32
    (float64 for float64 input), one cast at the end.
    """
    eps = _check_scale(x, g, eps)
    return ScaleNormFunction.apply(x, g, eps)
# --8<-- [end:scale_norm]


# ------------------------------------------------------------------ the catalog entry
from ._bounds import rms_like
from .spec import BadInput, NormSpec, replace_input, common_bad, randn


def _inputs(shape, dtype, g):
    return {"x": randn(shape, dtype, g, 2.0), "g": torch.tensor([math.sqrt(shape[-1])], dtype=dtype)}


def _oracle(x, g, eps):
    return g[0] * x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), eps)


def _bound(inputs, params):
    x = inputs["x"]
    return rms_like(_oracle(x.double().numpy(), inputs["g"].double().numpy(), **params), x.shape[-1], x.dtype)


SPECS = (NormSpec(
    name="scale_norm", title="ScaleNorm: one learned scalar over the unit-length row",
    source="Nguyen and Salazar, arXiv:1910.05895",
    reference=lambda x, g, eps: scale_norm(x, g, eps), oracle=_oracle, bound=_bound, make_inputs=_inputs,
    params={"eps": 1e-2}, grads=("x", "g"),
    bad_inputs=common_bad(())[:4] + (
        BadInput("g with two values", replace_input("g", lambda g: torch.cat([g, g])), ValueError, "exactly one"),
        BadInput("negative eps", lambda i, p: (i, {**p, "eps": -1.0}), ValueError, "eps")),
),)
