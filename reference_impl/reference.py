"""PyTorch reference for RMSNorm and LayerNorm with the backward written out (no autograd inside).

Conventions of this core reference:

- Normalization over the last dimension; any leading shape, including empty ones.
- Statistics and the whole computation run in float32 (float64 for float64 input); the result is cast
  once to the input dtype at the end. The gain and bias are used in that compute dtype.
- eps sits inside the square root: ``x * rsqrt(mean(x**2) + eps)``.
- Non-finite values stay in their row; other rows are unaffected. A NaN makes its whole row NaN. An Inf
  makes the row's mean square Inf, so RMSNorm's rstd is 0: the row's finite entries become 0 and the Inf
  entry NaN (0 * Inf), exactly as ``torch.nn.functional.rms_norm`` does; LayerNorm's row becomes all NaN
  (Inf - Inf in the centring). With ``eps=0`` an all-zero row gives NaN (0 * Inf).
- Gradients come back in the dtype of the tensor they belong to.
"""
from __future__ import annotations

import torch

import math

from ._checks import check_eps, check_grad, check_input, check_param, compute_dtype


def _rows(x):
    """Number of rows (product of the leading dimensions); well defined when the last one is empty."""
    return math.prod(x.shape[:-1])


# --8<-- [start:rms_forward]
def rms_forward(x, weight, eps):
    cd = compute_dtype(x)
    xf = x.to(cd)
    rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)  # one statistic per row, kept for backward
    y = xf * rstd
    if weight is not None:
        y = y * weight.to(cd)
    return y.to(x.dtype), rstd
# --8<-- [end:rms_forward]


# --8<-- [start:rms_backward]
def rms_backward(dy, x, weight, rstd):
    cd = rstd.dtype
    xhat = x.to(cd) * rstd
    g = dy.to(cd) if weight is None else dy.to(cd) * weight.to(cd)
    # dx = rstd * (g - xhat * mean(g * xhat)): the Jacobian is rstd times a projection.
    dx = rstd * (g - xhat * (g * xhat).mean(dim=-1, keepdim=True))
    dw = None
    if weight is not None:
        dw = (dy.to(cd) * xhat).reshape(_rows(x), x.shape[-1]).sum(dim=0).to(weight.dtype)
    return dx.to(x.dtype), dw
# --8<-- [end:rms_backward]


# --8<-- [start:ln_forward]
def ln_forward(x, weight, bias, eps):
    cd = compute_dtype(x)
    xf = x.to(cd)
    xc = xf - xf.mean(dim=-1, keepdim=True)
    rstd = torch.rsqrt(xc.pow(2).mean(dim=-1, keepdim=True) + eps)  # two-pass variance: no cancellation
    y = xc * rstd
    if weight is not None:
        y = y * weight.to(cd)
    if bias is not None:
        y = y + bias.to(cd)
    return y.to(x.dtype), rstd
# --8<-- [end:ln_forward]


# --8<-- [start:ln_backward]
def ln_backward(dy, x, weight, bias, rstd):
    cd = rstd.dtype
    xf = x.to(cd)
    xhat = (xf - xf.mean(dim=-1, keepdim=True)) * rstd
    dyf = dy.to(cd)
    g = dyf if weight is None else dyf * weight.to(cd)
    dx = rstd * (g - g.mean(dim=-1, keepdim=True) - xhat * (g * xhat).mean(dim=-1, keepdim=True))
    d = x.shape[-1]
    dw = None if weight is None else (dyf * xhat).reshape(_rows(x), d).sum(dim=0).to(weight.dtype)
    db = None if bias is None else dyf.reshape(_rows(x), d).sum(dim=0).to(bias.dtype)
    return dx.to(x.dtype), dw, db
# --8<-- [end:ln_backward]


def rms_rstd(x, eps):
    """The reciprocal RMS per row, ``(..., 1)``, in the compute dtype, as :func:`rms_forward` computes it."""
    return torch.rsqrt(x.to(compute_dtype(x)).pow(2).mean(dim=-1, keepdim=True) + eps)


def ln_rstd(x, eps):
    """The reciprocal standard deviation per row (two-pass), as :func:`ln_forward` computes it."""
    xf = x.to(compute_dtype(x))
    return torch.rsqrt((xf - xf.mean(dim=-1, keepdim=True)).pow(2).mean(dim=-1, keepdim=True) + eps)


# Double backward: the explicit backward is built from torch operations on (dy, x, weight, rstd), so it is
# differentiable, except that the saved rstd was computed without a graph. When the backward itself is
# recorded (create_graph=True, torch.is_grad_enabled() inside backward) rstd is recomputed from the saved
# input, so the second derivative sees how rstd depends on x. Without it, rstd would act as a constant and
# Hessian-vector products would come out wrong without an error.


class RMSNormFunction(torch.autograd.Function):
    """``RMSNormFunction.apply(x, weight, eps)``; backward uses the explicit formula above and is itself
    differentiable (double backward is exact)."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        y, rstd = rms_forward(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        ctx.eps = eps
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: rstd must carry its dependence on x
            rstd = rms_rstd(x, ctx.eps)
        dx, dw = rms_backward(dy, x, weight, rstd)
        return (dx if ctx.needs_input_grad[0] else None), (dw if ctx.needs_input_grad[1] else None), None


class LayerNormFunction(torch.autograd.Function):
    """``LayerNormFunction.apply(x, weight, bias, eps)``; backward uses the explicit formula above and is
    itself differentiable (double backward is exact)."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        y, rstd = ln_forward(x, weight, bias, eps)
        ctx.save_for_backward(x, weight, bias, rstd)
        ctx.eps = eps
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, bias, rstd = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: rstd must carry its dependence on x
            rstd = ln_rstd(x, ctx.eps)
        dx, dw, db = ln_backward(dy, x, weight, bias, rstd)
        need = ctx.needs_input_grad
        return (dx if need[0] else None), (dw if need[1] else None), (db if need[2] else None), None


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
) -> torch.Tensor:
    """RMSNorm over the last dimension: ``x * rsqrt(mean(x**2, -1) + eps) * weight``.

    Args:
        x: ``(..., d)`` tensor of dtype float16, bfloat16, float32 or float64.
        weight: gain of shape ``(d,)``, or ``None`` for no gain.
        eps: non-negative number added to the mean square inside the square root.

    Returns:
        Tensor of ``x``'s shape and dtype. Differentiable in ``x`` and ``weight``.

    Raises:
        TypeError: non-tensor input, or an integer, bool or complex dtype.
        ValueError: 0-d ``x``, ``weight`` of the wrong shape or device, negative or non-finite ``eps``.
    """
    check_input(x)
    check_param(weight, x, "weight")
    eps = check_eps(eps)
    return RMSNormFunction.apply(x, weight, eps)


def layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """LayerNorm over the last dimension: ``(x - mean) * rsqrt(var + eps) * weight + bias``.

    The variance is the biased one (divides by ``d``), as in ``torch.nn.functional.layer_norm``.
    Shapes, dtypes and errors as in :func:`rms_norm`; ``bias`` has shape ``(d,)`` or is ``None``.
    """
    check_input(x)
    check_param(weight, x, "weight")
    check_param(bias, x, "bias")
    eps = check_eps(eps)
    return LayerNormFunction.apply(x, weight, bias, eps)


def rms_norm_backward(dy, x, weight=None, eps: float = 1e-6):
    """Explicit RMSNorm backward. Returns ``(dx, dweight)``; ``dweight`` is ``None`` without a weight.

    ``dx = rstd * (g - xhat * mean(g * xhat))`` with ``g = dy * weight`` and ``xhat = x * rstd``;
    ``dweight = sum over rows of dy * xhat``.
    """
    check_input(x)
    check_grad(dy, x)
    check_param(weight, x, "weight")
    eps = check_eps(eps)
    cd = compute_dtype(x)
    rstd = torch.rsqrt(x.to(cd).pow(2).mean(dim=-1, keepdim=True) + eps)
    return rms_backward(dy, x, weight, rstd)


def layer_norm_backward(dy, x, weight=None, bias=None, eps: float = 1e-5):
    """Explicit LayerNorm backward. Returns ``(dx, dweight, dbias)``; ``None`` for absent parameters.

    ``dx = rstd * (g - mean(g) - xhat * mean(g * xhat))``; ``dweight = sum dy * xhat``; ``dbias = sum dy``.
    """
    check_input(x)
    check_grad(dy, x)
    check_param(weight, x, "weight")
    check_param(bias, x, "bias")
    eps = check_eps(eps)
    cd = compute_dtype(x)
    xf = x.to(cd)
    xc = xf - xf.mean(dim=-1, keepdim=True)
    rstd = torch.rsqrt(xc.pow(2).mean(dim=-1, keepdim=True) + eps)
    return ln_backward(dy, x, weight, bias, rstd)
