"""RMSNorm and LayerNorm as real model families compute them, operation for operation.

The core reference (:mod:`reference_impl.reference`) computes in float32, applies the gain in float32 and
rounds once at the end. Model code does not all do that: the order of the casts decides which bits come
out in bfloat16 and float16. Each convention here replays one family's order of operations exactly, so its
forward output is bit-identical (``torch.equal``) to the installed module (tests/core/test_transformers_parity.py).

RMSNorm conventions (``rms_norm(..., convention=...)``); ``h = xf * rsqrt(mean(xf**2) + eps)``:

===========  ===========================================================================================
reference    the core: compute in float32 (float64 for float64 input), ``h * w`` in that dtype, one cast
             to ``x.dtype`` at the end.
llama        ``xf = x.to(float32)``; ``w * h.to(x.dtype)``: cast *before* the gain, the product in
             ``promote(x.dtype, w.dtype)``. transformers' LlamaRMSNorm, also Mistral, Mixtral, Qwen2,
             Qwen3, DeepSeek-V3, Phi-3. float64 input is computed in float32 too.
gemma        ``(h * (1 + w.float())).type_as(x)``: the stored weight is an offset from 1 (initialised to 0),
             applied in float32, one cast at the end. Gemma, Gemma 2, Gemma 3.
t5           the mean square from ``x.to(float32)``, but ``x * rsqrt(...)`` multiplies the *uncast* input
             (type promotion); the result is cast to the weight's dtype only if that is float16/bfloat16,
             then ``w * h``. T5LayerNorm.
olmo2        ``(w * h).to(x.dtype)`` with ``xf = x.to(float32)``: gain in float32, one cast. Olmo2RMSNorm.
torch        ``torch.nn.RMSNorm`` / ``F.rms_norm``: compute dtype float32 (float64 for float64 input),
             gain applied in that dtype, one cast. ``eps=None`` means ``torch.finfo(compute dtype).eps``,
             i.e. float32's epsilon for float16 and bfloat16 input, not the input dtype's.
===========  ===========================================================================================

LayerNorm conventions (``layer_norm(..., convention=...)``): ``neox`` is ``torch.nn.LayerNorm`` as
GPT-NeoX/Pythia call it (the forward *is* ``F.layer_norm``: its fused kernel's reduction order cannot be
replayed in Python); ``cohere`` is CohereLayerNorm (two-pass float32 statistics, gain in float32, no bias).

``eps_placement``: ``"inside"`` the root, ``x * rsqrt(ms + eps)`` (every family above), or ``"outside"``,
``x / (sqrt(ms) + eps)``, as in the RMSNorm authors' PyTorch code (github.com/bzhangGo/rmsnorm,
``rmsnorm_torch.py``: ``x / (rms_x + self.eps)``, default eps 1e-8). Casting order is kept for either.

Backward: every convention has an explicit backward (no autograd inside): the RMSNorm gradient with the
convention's effective gain (``1 + w`` for gemma), computed in float32 (float64 where the convention
computes in float64), each gradient returned in its tensor's dtype.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from . import reference as _ref
from ._checks import check_eps, check_grad, check_input, check_param, compute_dtype, eps_limit, functorch_active

RMS_CONVENTIONS = ("reference", "llama", "gemma", "t5", "olmo2", "torch")
LN_CONVENTIONS = ("neox", "cohere")
EPS_PLACEMENTS = ("inside", "outside")
HALF = (torch.float16, torch.bfloat16)


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


def _inv_rms(ms: torch.Tensor, eps: float, placement: str) -> torch.Tensor:
    if placement == "inside":
        return torch.rsqrt(ms + eps)
    return 1.0 / (torch.sqrt(ms) + eps)


def row_mean(t, convention):
    """Mean over the last dimension, ``(..., 1)``: torch's mean, as the modules compute it; the core's
    batch-invariant row mean for ``reference`` (so it stays bit-identical to :mod:`reference_impl.reference`)."""
    return _ref.row_mean(t) if convention == "reference" else t.mean(-1, keepdim=True)


def _mean_square(xf, convention):
    return row_mean(xf.pow(2), convention)


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
    rstd = _inv_rms(_mean_square(xf, convention), eps, placement)
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
    m = row_mean(g * xhat, convention)
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


def check_rms_args(x, weight, eps, convention, placement) -> float:
    """The checks of :func:`rms_norm`; returns the resolved eps."""
    check_input(x)
    check_param(weight, x, "weight")
    check_convention(convention)
    check_placement(placement)
    return resolve_eps(eps, x, convention)


class ConventionRMSNormFunction(torch.autograd.Function):
    """``ConventionRMSNormFunction.apply(x, weight, eps, convention, placement)``; explicit backward.
    ``apply`` checks its arguments as :func:`rms_norm` does and, inside torch.func transforms, runs the
    forward as plain torch operations (exact under vmap, grad, jvp)."""

    @classmethod
    def apply(cls, x, weight, eps, convention, placement):
        eps = check_rms_args(x, weight, eps, convention, placement)
        if functorch_active():
            return rms_forward(x, weight, eps, convention, placement)[0]
        return super().apply(x, weight, eps, convention, placement)

    @staticmethod
    def forward(ctx, x, weight, eps, convention, placement):
        y, rstd = rms_forward(x, weight, eps, convention, placement)
        ctx.save_for_backward(x, weight, rstd)
        ctx.convention, ctx.placement = convention, placement
        ctx.eps = eps
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: recompute rstd from x so double backward is exact
            rstd = _inv_rms(_mean_square(x.to(rstd.dtype), ctx.convention), ctx.eps, ctx.placement)
        dx, dw = rms_backward(dy, x, weight, rstd, ctx.convention, ctx.placement)
        need = ctx.needs_input_grad
        return (dx if need[0] else None), (dw if need[1] else None), None, None, None


def rms_norm(x, weight=None, eps=1e-6, *, convention="llama", eps_placement="inside"):
    """RMSNorm over the last dimension with a model family's casting order (see the module docstring).

    Args:
        x: ``(..., d)`` float16, bfloat16, float32 or float64 tensor.
        weight: ``(d,)`` gain or ``None``. For ``gemma`` this is the stored offset (the gain is ``1 + w``).
        eps: non-negative number; ``None`` only with ``convention="torch"`` (float32's epsilon for
            float16/bfloat16/float32 input, float64's for float64 input).
        convention: one of ``reference, llama, gemma, t5, olmo2, torch``.
        eps_placement: ``"inside"`` (``rsqrt(ms + eps)``) or ``"outside"`` (``1 / (sqrt(ms) + eps)``).

    Returns:
        The family's output. Its dtype is ``x.dtype``, except: ``llama`` gives ``promote(x, w)`` and ``t5``
        gives ``w.dtype`` for a half weight, else ``promote(float32, x, w)``, as the modules do.
        Differentiable in ``x`` and ``weight`` (explicit backward).

    Raises:
        TypeError / ValueError: as :func:`reference_impl.rms_norm`, plus an unknown convention or placement.

    Range: every convention squares in float32 and sums with torch's float32 mean, so a row whose sum of
    squares passes float32's maximum (any ``|x|`` above about 1.8e19, or an RMS above
    ``sqrt(float32 max / d)``) gets rstd 0 and comes out as zeros, as the modules do; with ``eps=0`` a row
    whose squares underflow to 0 gives Inf/NaN. docs/numerics.md gives the measured thresholds.
    """
    eps = check_rms_args(x, weight, eps, convention, eps_placement)
    if convention == "reference" and eps_placement == "inside":
        return _ref.RMSNormFunction.apply(x, weight, eps)
    return ConventionRMSNormFunction.apply(x, weight, eps, convention, eps_placement)


def rms_norm_backward(dy, x, weight=None, eps=1e-6, *, convention="llama", eps_placement="inside"):
    """Explicit backward of :func:`rms_norm`. Returns ``(dx, dweight)`` (``dweight`` None without weight).

    ``dx = r * (g - xhat * mean(g * xhat))`` with ``g = dy * gain``, ``gain = 1 + w`` for gemma, ``w``
    otherwise; with eps outside, ``xhat`` in the bracket becomes ``x / sqrt(ms)``. ``dweight = sum dy * xhat``.
    """
    eps = check_rms_args(x, weight, eps, convention, eps_placement)
    check_grad(dy, x)
    if convention == "reference" and eps_placement == "inside":  # the core, as rms_norm's forward
        return _ref.rms_norm_backward(dy, x, weight, eps)
    cd = stat_dtype(x, convention)
    xf = x.to(cd)
    rstd = _inv_rms(_mean_square(xf, convention), eps, eps_placement)
    return rms_backward(dy, x, weight, rstd, convention, eps_placement)


# --8<-- [start:ln_conventions]
def _ln_forward(x, w, b, eps, convention):
    if convention == "neox":  # GPT-NeoX builds torch.nn.LayerNorm: the forward is torch's own kernel
        d = x.shape[-1]
        return F.layer_norm(x, (d,), w, b, eps)
    xf = x.to(torch.float32)  # cohere: two-pass statistics in fp32, gain in fp32, one cast
    mean = xf.mean(-1, keepdim=True)
    var = (xf - mean).pow(2).mean(-1, keepdim=True)
    h = (xf - mean) * torch.rsqrt(var + eps)
    if w is not None:
        h = w.to(torch.float32) * h
    if b is not None:
        h = h + b.to(torch.float32)
    return h.to(x.dtype)
# --8<-- [end:ln_conventions]


def check_ln_args(x, weight, bias, eps, convention) -> float:
    """The checks of :func:`layer_norm`; returns eps as a float."""
    check_input(x)
    check_param(weight, x, "weight")
    check_param(bias, x, "bias")
    check_convention(convention, LN_CONVENTIONS, "LayerNorm")
    eps = check_eps(eps, max_value=eps_limit(torch.float32 if convention == "cohere" else compute_dtype(x)))
    if convention == "neox":
        for name, p in (("weight", weight), ("bias", bias)):
            if p is not None and p.dtype != x.dtype:
                raise TypeError(f"neox (torch.nn.LayerNorm) needs {name} in x's dtype {x.dtype}, got {p.dtype}")
    return eps


class ConventionLayerNormFunction(torch.autograd.Function):
    """``ConventionLayerNormFunction.apply(x, weight, bias, eps, convention)``; explicit backward. ``apply``
    checks its arguments and, inside torch.func transforms, runs the forward as plain torch operations."""

    @classmethod
    def apply(cls, x, weight, bias, eps, convention):
        eps = check_ln_args(x, weight, bias, eps, convention)
        if functorch_active():
            return _ln_forward(x, weight, bias, eps, convention)
        return super().apply(x, weight, bias, eps, convention)

    @staticmethod
    def forward(ctx, x, weight, bias, eps, convention):
        y = _ln_forward(x, weight, bias, eps, convention)
        ctx.save_for_backward(x, weight, bias)
        ctx.eps = eps
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, bias = ctx.saved_tensors
        cd = compute_dtype(x)
        xf = x.to(cd)
        xc = xf - xf.mean(-1, keepdim=True)
        rstd = torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + ctx.eps)
        dx, dw, db = _ref.ln_backward(dy, x, weight, bias, rstd)
        need = ctx.needs_input_grad
        return (dx if need[0] else None), (dw if need[1] else None), (db if need[2] else None), None, None


def layer_norm(x, weight=None, bias=None, eps=1e-5, *, convention="neox"):
    """LayerNorm over the last dimension as a family computes it: ``neox`` (torch.nn.LayerNorm, as in
    GPT-NeoX/Pythia) or ``cohere`` (CohereLayerNorm: float32 two-pass statistics, no bias in the model).

    Shapes, dtypes and errors as :func:`reference_impl.layer_norm`. Output dtype ``x.dtype``. The
    backward is the core's explicit LayerNorm backward (two-pass statistics in float32/float64).

    Range: as :func:`rms_norm`, a row whose squared deviations overflow float32 (about 1.8e19 from the
    mean) has rstd 0, and with ``eps=0`` a row whose squared deviations underflow gives Inf/NaN.
    """
    eps = check_ln_args(x, weight, bias, eps, convention)
    return ConventionLayerNormFunction.apply(x, weight, bias, eps, convention)


__all__ = [
    "RMS_CONVENTIONS", "LN_CONVENTIONS", "EPS_PLACEMENTS", "rms_norm", "rms_norm_backward", "layer_norm",
    "apply_gain", "effective_gain", "stat_dtype", "output_dtype", "rms_forward", "rms_backward", "resolve_eps",
]
