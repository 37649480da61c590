"""PyTorch reference for RMSNorm and LayerNorm with the backward written out (no autograd inside).

Conventions of this core reference:

- Normalization over the last dimension; any leading shape, including empty ones.
- Statistics and the whole computation run in float32 (float64 for float64 input); the result is cast
  once to the input dtype at the end. The gain and bias are used in that compute dtype.
- eps sits inside the square root: ``x * rsqrt(mean(x**2) + eps)``.
- Row statistics (means) are summed in float64 in a fixed, sequential order per row and then rounded to
  the compute dtype, so a row's result does not depend on the other rows or the batch layout (torch's
  own reductions split long rows differently depending on how many rows there are, which moves the last
  bit). Squares are formed in the compute dtype, as the modules this mirrors do.
- Range: in float32, a square overflows for ``|x|`` above ``sqrt(float32 max)`` (about 1.8e19), which makes
  the row's mean square Inf and its rstd 0, so the row comes out as zeros (RMSNorm) or NaN/zeros
  (LayerNorm), as ``torch.nn.functional.rms_norm`` does. With ``eps=0``, a row whose squares all underflow
  (``|x|`` below about 2.6e-23, the square root of float32's smallest subnormal) has mean square 0 and
  rstd Inf: Inf or NaN. docs/numerics.md states both thresholds as a test measures them.
- Non-finite values stay in their row; other rows are unaffected. A NaN makes its whole row NaN. An Inf
  makes the row's mean square Inf, so RMSNorm's rstd is 0: the row's finite entries become 0 and the Inf
  entry NaN (0 * Inf), exactly as ``torch.nn.functional.rms_norm`` does; LayerNorm's row becomes all NaN
  (Inf - Inf in the centring). With ``eps=0`` an all-zero row gives NaN (0 * Inf).
- Gradients come back in the dtype of the tensor they belong to.
"""
from __future__ import annotations

import torch

import math

from ._checks import check_eps, check_grad, check_input, check_param, compute_dtype, eps_limit, functorch_active


def _rows(x):
    """Number of rows (product of the leading dimensions); well defined when the last one is empty."""
    return math.prod(x.shape[:-1])


def row_mean(t: torch.Tensor) -> torch.Tensor:
    """Mean over the last dimension, ``(..., 1)`` in ``t``'s dtype, the same bits whatever the batch.

    The sum runs in float64 in sequential order along each row (``cumsum`` never splits a row across
    threads, unlike ``sum``/``mean``, whose split depends on the number of rows), then it is rounded once.
    """
    return (t.to(torch.float64).cumsum(dim=-1)[..., -1:] / t.shape[-1]).to(t.dtype)


# --8<-- [start:rms_forward]
def rms_forward(x, weight, eps):
    cd = compute_dtype(x)
    xf = x.to(cd)
    rstd = torch.rsqrt(row_mean(xf.pow(2)) + eps)  # one statistic per row
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
    dx = rstd * (g - xhat * row_mean(g * xhat))
    dw = None
    if weight is not None:
        dw = (dy.to(cd) * xhat).reshape(_rows(x), x.shape[-1]).sum(dim=0).to(weight.dtype)
    return dx.to(x.dtype), dw
# --8<-- [end:rms_backward]


# --8<-- [start:ln_forward]
def ln_forward(x, weight, bias, eps):
    cd = compute_dtype(x)
    xf = x.to(cd)
    xc = xf - row_mean(xf)
    rstd = torch.rsqrt(row_mean(xc.pow(2)) + eps)  # two-pass variance: no cancellation
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
    xhat = (xf - row_mean(xf)) * rstd
    dyf = dy.to(cd)
    g = dyf if weight is None else dyf * weight.to(cd)
    dx = rstd * (g - row_mean(g) - xhat * row_mean(g * xhat))
    d = x.shape[-1]
    dw = None if weight is None else (dyf * xhat).reshape(_rows(x), d).sum(dim=0).to(weight.dtype)
    db = None if bias is None else dyf.reshape(_rows(x), d).sum(dim=0).to(bias.dtype)
    return dx.to(x.dtype), dw, db
# --8<-- [end:ln_backward]


def square_edges(dtype: torch.dtype = torch.float32) -> dict:
    """Where squares formed in ``dtype`` leave its range, found by stepping through its values:
    ``overflow``, the smallest positive value whose square is Inf (a row holding one gets rstd 0 and comes
    out as zeros); ``underflow``, the largest value whose square is 0 (with ``eps=0`` a row with every
    ``|x|`` at or below it has mean square 0 and rstd Inf). docs/numerics.md prints both."""
    inf, zero = torch.tensor(math.inf, dtype=dtype), torch.tensor(0.0, dtype=dtype)
    over = torch.tensor(math.sqrt(torch.finfo(dtype).max), dtype=dtype)
    while torch.isfinite(over * over):
        over = torch.nextafter(over, inf)
    while not torch.isfinite(torch.nextafter(over, zero) ** 2):
        over = torch.nextafter(over, zero)
    under = torch.tensor(math.sqrt(torch.finfo(dtype).smallest_normal * torch.finfo(dtype).eps), dtype=dtype)
    while under * under != 0:
        under = torch.nextafter(under, zero)
    while torch.nextafter(under, inf) ** 2 == 0:
        under = torch.nextafter(under, inf)
    return {"overflow": float(over), "underflow": float(under)}


def rms_rstd(x, eps):
    """The reciprocal RMS per row, ``(..., 1)``, in the compute dtype, as :func:`rms_forward` computes it."""
    return torch.rsqrt(row_mean(x.to(compute_dtype(x)).pow(2)) + eps)


def ln_rstd(x, eps):
    """The reciprocal standard deviation per row (two-pass), as :func:`ln_forward` computes it."""
    xf = x.to(compute_dtype(x))
    return torch.rsqrt(row_mean((xf - row_mean(xf)).pow(2)) + eps)


# Double backward: the explicit backward is built from torch operations on (dy, x, weight, rstd), so it is
# differentiable, except that the saved rstd was computed without a graph. When the backward itself is
# recorded (create_graph=True, torch.is_grad_enabled() inside backward) rstd is recomputed from the saved
# input, so the second derivative sees how rstd depends on x. Without it, rstd would act as a constant and
# Hessian-vector products would come out wrong without an error.
#
# ``apply`` is the public entry point of each Function: it checks its arguments (the Function is public, and
# an int32 tensor or eps=-1 must not come back as a number), and inside torch.func transforms (vmap, grad,
# jvp, ...) it runs the forward as plain torch operations, which those transforms handle exactly.


def check_rms_args(x, weight, eps) -> float:
    """The checks of :func:`rms_norm`; returns eps as a float, bounded by the compute dtype's maximum."""
    check_input(x)
    check_param(weight, x, "weight")
    return check_eps(eps, max_value=eps_limit(compute_dtype(x)))


def check_ln_args(x, weight, bias, eps) -> float:
    """The checks of :func:`layer_norm`; returns eps as a float."""
    check_input(x)
    check_param(weight, x, "weight")
    check_param(bias, x, "bias")
    return check_eps(eps, max_value=eps_limit(compute_dtype(x)))


class RMSNormFunction(torch.autograd.Function):
    """``RMSNormFunction.apply(x, weight, eps)``; backward uses the explicit formula above and is itself
    differentiable (double backward is exact). ``apply`` checks its arguments as :func:`rms_norm` does."""

    @classmethod
    def apply(cls, x, weight, eps):
        eps = check_rms_args(x, weight, eps)
        if functorch_active():
            return rms_forward(x, weight, eps)[0]
        return super().apply(x, weight, eps)

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
    itself differentiable (double backward is exact). ``apply`` checks its arguments as :func:`layer_norm`."""

    @classmethod
    def apply(cls, x, weight, bias, eps):
        eps = check_ln_args(x, weight, bias, eps)
        if functorch_active():
            return ln_forward(x, weight, bias, eps)[0]
        return super().apply(x, weight, bias, eps)

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
        ValueError: 0-d ``x``, ``weight`` of the wrong shape or device, negative or non-finite ``eps``, or
            ``eps`` above the compute dtype's largest finite value (float32's for 16- and 32-bit input).

    Inside ``torch.func`` transforms (vmap, grad, jvp, hessian, ...) the forward runs as plain torch
    operations, so those transforms see the exact derivatives.
    """
    eps = check_rms_args(x, weight, eps)  # here too: torch.compile traces the Function without its apply
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
    eps = check_ln_args(x, weight, bias, eps)
    return LayerNormFunction.apply(x, weight, bias, eps)


def rms_norm_backward(dy, x, weight=None, eps: float = 1e-6):
    """Explicit RMSNorm backward. Returns ``(dx, dweight)``; ``dweight`` is ``None`` without a weight.

    ``dx = rstd * (g - xhat * mean(g * xhat))`` with ``g = dy * weight`` and ``xhat = x * rstd``;
    ``dweight = sum over rows of dy * xhat``.
    """
    eps = check_rms_args(x, weight, eps)
    check_grad(dy, x)
    rstd = rms_rstd(x, eps)
    return rms_backward(dy, x, weight, rstd)


def layer_norm_backward(dy, x, weight=None, bias=None, eps: float = 1e-5):
    """Explicit LayerNorm backward. Returns ``(dx, dweight, dbias)``; ``None`` for absent parameters.

    ``dx = rstd * (g - mean(g) - xhat * mean(g * xhat))``; ``dweight = sum dy * xhat``; ``dbias = sum dy``.
    """
    eps = check_ln_args(x, weight, bias, eps)
    check_grad(dy, x)
    rstd = ln_rstd(x, eps)
    return ln_backward(dy, x, weight, bias, rstd)
