"""What several norms of the catalog share: the batch-invariant row mean and the model families' casting orders.

Each norm's own math (its forward, its ``autograd.Function`` with the explicit backward, its public
function) lives in its catalog module in :mod:`reference_impl.norms`; this module holds only the pieces
more than one of them uses, so that a norm module imports them and nothing here imports a norm.

- :func:`row_mean`: the core reference's mean over the last dimension, summed in float64 in sequential
  order, so a row's bits do not depend on the batch (RMSNorm, LayerNorm, the ``reference`` convention).
- The casting orders of :mod:`reference_impl.conventions` (whose docstring tables them): the convention
  names and their checks, the statistic dtype, :func:`apply_gain` and the generic forward and explicit
  backward :func:`rms_forward` / :func:`rms_backward`, which the RMSNorm conventions, the fused residual
  add and the tensor-parallel norms all run.
"""
from __future__ import annotations

import math

import torch

from ._checks import check_eps, compute_dtype, eps_limit

RMS_CONVENTIONS = ("reference", "llama", "gemma", "t5", "olmo2", "torch")
LN_CONVENTIONS = ("neox", "cohere")
EPS_PLACEMENTS = ("inside", "outside")
HALF = (torch.float16, torch.bfloat16)


def rows(x):
    """Number of rows (product of the leading dimensions); well defined when the last one is empty."""
    return math.prod(x.shape[:-1])


def rows2d(t):
    """``t`` viewed as ``(rows, d)``."""
    return t.reshape(math.prod(t.shape[:-1]), t.shape[-1])


def row_mean(t: torch.Tensor) -> torch.Tensor:
    """Mean over the last dimension, ``(..., 1)`` in ``t``'s dtype, the same bits whatever the batch.

    The sum runs in float64 in sequential order along each row (``cumsum`` never splits a row across
    threads, unlike ``sum``/``mean``, whose split depends on the number of rows), then it is rounded once.
    """
    return (t.to(torch.float64).cumsum(dim=-1)[..., -1:] / t.shape[-1]).to(t.dtype)


def check_convention(convention, allowed=RMS_CONVENTIONS, kind="RMSNorm") -> str:
    if not isinstance(convention, str):
        raise TypeError(f"convention must be a string, got {type(convention).__name__}")
    if convention not in allowed:
        hint = ""
        if convention in LN_CONVENTIONS:
            hint = f"; {convention!r} is a LayerNorm convention: use conventions.layer_norm"
        elif convention in RMS_CONVENTIONS:
            hint = f"; {convention!r} is an RMSNorm convention: use conventions.rms_norm"
        raise ValueError(f"unknown {kind} convention {convention!r}; expected one of {', '.join(allowed)}{hint}")
    return convention


def check_placement(eps_placement) -> str:
    if eps_placement not in EPS_PLACEMENTS:
        raise ValueError(f"eps_placement must be 'inside' or 'outside', got {eps_placement!r}")
    return eps_placement


def stat_dtype(x: torch.Tensor, convention: str) -> torch.dtype:
    """The dtype the convention computes its statistics in: float32, except float64 for reference/torch."""
    if convention in ("reference", "torch"):
        return compute_dtype(x)
    return torch.float32


def resolve_eps(eps, x: torch.Tensor, convention: str) -> float:
    """``eps=None`` is allowed for the torch convention only, and means the compute dtype's epsilon."""
    if eps is None:
        if convention != "torch":
            raise TypeError(f"eps=None is only accepted with convention='torch' (got convention={convention!r})")
        return float(torch.finfo(compute_dtype(x)).eps)
    return check_eps(eps, max_value=eps_limit(stat_dtype(x, convention)))


def inv_rms(ms: torch.Tensor, eps: float, placement: str) -> torch.Tensor:
    """``rsqrt(ms + eps)`` with eps inside the root, ``1 / (sqrt(ms) + eps)`` outside."""
    if placement == "inside":
        return torch.rsqrt(ms + eps)
    return 1.0 / (torch.sqrt(ms) + eps)


def family_row_mean(t, convention):
    """Mean over the last dimension, ``(..., 1)``: torch's mean, as the modules compute it; the core's
    batch-invariant :func:`row_mean` for ``reference`` (so it stays bit-identical to the core reference)."""
    return row_mean(t) if convention == "reference" else t.mean(-1, keepdim=True)


def mean_square(xf, convention):
    return family_row_mean(xf.pow(2), convention)


# --8<-- [start:conventions_forward]
def apply_gain(x, rstd, w, convention):
    """The family's casting order after the statistic: ``x`` the input, ``rstd`` its float32 (float64)
    reciprocal RMS of shape ``(..., 1)``, ``w`` the gain or ``None``. Returns y in the family's dtype."""
    xf = x.to(rstd.dtype)
    if convention == "llama":  # normalize in fp32, cast to the input dtype, then the gain
        h = (xf * rstd).to(x.dtype)
        return h if w is None else w * h
    if convention == "gemma":  # gain (1 + w) in fp32, then one cast
        h = xf * rstd
        return (h if w is None else h * (1.0 + w.float())).type_as(x)
    if convention == "t5":  # statistics in fp32, product with the uncast input, cast to a half weight's dtype
        h = x * rstd
        if w is None:
            return h.to(x.dtype)
        if w.dtype in HALF:
            h = h.to(w.dtype)
        return w * h
    if convention == "olmo2":  # gain in fp32, then one cast
        h = xf * rstd
        return (h if w is None else w * h).to(x.dtype)
    # reference and torch: compute dtype, gain in it, one cast (torch's decomposition of _fused_rms_norm)
    h = xf * rstd
    if w is not None:
        h = h * w.to(rstd.dtype) if convention == "reference" else h.mul(w)
    return h.to(x.dtype)


def rms_forward(x, w, eps, convention, placement):
    """Returns (y, rstd); rstd is the float32/float64 statistic the backward needs."""
    xf = x.to(stat_dtype(x, convention))
    rstd = inv_rms(mean_square(xf, convention), eps, placement)
    return apply_gain(x, rstd, w, convention), rstd
# --8<-- [end:conventions_forward]


def output_dtype(x_dtype, w_dtype, convention):
    """The dtype the family's module returns."""
    if w_dtype is None:
        return x_dtype
    if convention == "llama":
        return torch.promote_types(x_dtype, w_dtype)
    if convention == "t5":
        if w_dtype in HALF:
            return w_dtype
        return torch.promote_types(torch.promote_types(x_dtype, torch.float32), w_dtype)
    return x_dtype


def effective_gain(w, convention):
    """The gain the math applies: ``1 + w`` for gemma (in float32, as Gemma computes it), else ``w``."""
    if w is None:
        return None
    return 1.0 + w.float() if convention == "gemma" else w


def rms_backward(dy, x, w, rstd, convention, placement):
    """Explicit backward in the statistic dtype. Returns (dx, dw); dw has w's dtype."""
    cd = rstd.dtype
    xf = x.to(cd)
    xhat = xf * rstd
    dyf = dy.to(cd)
    g_w = effective_gain(w, convention)
    g = dyf if g_w is None else dyf * g_w.to(cd)
    m = family_row_mean(g * xhat, convention)
    if placement == "inside":
        dx = rstd * (g - xhat * m)
    else:  # r = 1/(s + eps): dx = r * (g - (x / s) * mean(g * xhat)); x/s := 0 on an all-zero row
        s = torch.sqrt(xf.pow(2).mean(-1, keepdim=True))
        x_over_s = torch.where(s > 0, xf / torch.where(s > 0, s, torch.ones_like(s)), torch.zeros_like(xf))
        dx = rstd * (g - x_over_s * m)
    dw = None
    if w is not None:
        dw = (dyf * xhat).reshape(math.prod(x.shape[:-1]), x.shape[-1]).sum(0).to(w.dtype)
    return dx.to(x.dtype), dw
