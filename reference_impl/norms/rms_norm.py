"""RMSNorm: the core reference and every model family's casting order (arXiv:1910.07467).

``y = x * rsqrt(mean(x**2) + eps) * gain`` over the last dimension. This module holds the math and
declares it for the catalog:

- the core reference, :func:`rms_norm` (:class:`RMSNormFunction`, explicit backward): statistics and the
  gain in float32 (float64 for float64 input), one cast at the end, eps inside the root, row statistics
  summed in a fixed order (see :mod:`reference_impl.reference` for the conventions of the core);
- the families' casting orders, :func:`convention_rms_norm` (:class:`ConventionRMSNormFunction`), with eps
  inside or outside the root; the orders themselves (:func:`reference_impl.shared.apply_gain`) are shared
  with the fused residual add and the tensor-parallel norms. :mod:`reference_impl.conventions` tables them
  and re-exports these functions under their old names (``conventions.rms_norm``, ...).
"""
from __future__ import annotations

import torch

from .. import oracle as _oracle
from .. import shared as _sh
from .. import tolerances as _tol
from .._checks import check_grad, check_norm_args, compute_dtype, functorch_active
from ..shared import row_mean, rows
from .spec import Impl, Layer, NormSpec, NotApplicable, common_bad, gain, randn


# ------------------------------------------------------------------ the core reference

# --8<-- [start:rms_forward]
def rms_forward(x, weight, eps):
    eps = check_norm_args(x, weight, eps)  # shapes, dtypes, devices, eps: a clear error, never a number
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
        dw = (dy.to(cd) * xhat).reshape(rows(x), x.shape[-1]).sum(dim=0).to(weight.dtype)
    return dx.to(x.dtype), dw
# --8<-- [end:rms_backward]


def rms_rstd(x, eps):
    """The reciprocal RMS per row, ``(..., 1)``, in the compute dtype, as :func:`rms_forward` computes it
    (with its checks of x and eps)."""
    eps = check_norm_args(x, None, eps)
    return torch.rsqrt(row_mean(x.to(compute_dtype(x)).pow(2)) + eps)


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
    return check_norm_args(x, weight, eps)


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


def rms_norm_backward(dy, x, weight=None, eps: float = 1e-6):
    """Explicit RMSNorm backward. Returns ``(dx, dweight)``; ``dweight`` is ``None`` without a weight.

    ``dx = rstd * (g - xhat * mean(g * xhat))`` with ``g = dy * weight`` and ``xhat = x * rstd``;
    ``dweight = sum over rows of dy * xhat``.
    """
    eps = check_rms_args(x, weight, eps)
    check_grad(dy, x)
    rstd = rms_rstd(x, eps)
    return rms_backward(dy, x, weight, rstd)


# ------------------------------------------------------------------ the model families' casting orders

def check_convention_rms_args(x, weight, eps, convention, placement) -> float:
    """The checks of :func:`convention_rms_norm`; returns the resolved eps."""
    return check_norm_args(x, weight, eps,
                           extra=lambda: (_sh.check_convention(convention), _sh.check_placement(placement)),
                           resolve_eps=lambda e: _sh.resolve_eps(e, x, convention))


class ConventionRMSNormFunction(torch.autograd.Function):
    """``ConventionRMSNormFunction.apply(x, weight, eps, convention, placement)``; explicit backward.
    ``apply`` checks its arguments as :func:`convention_rms_norm` does and, inside torch.func transforms,
    runs the forward as plain torch operations (exact under vmap, grad, jvp)."""

    @classmethod
    def apply(cls, x, weight, eps, convention, placement):
        eps = check_convention_rms_args(x, weight, eps, convention, placement)
        if functorch_active():
            return _sh.rms_forward(x, weight, eps, convention, placement)[0]
        return super().apply(x, weight, eps, convention, placement)

    @staticmethod
    def forward(ctx, x, weight, eps, convention, placement):
        y, rstd = _sh.rms_forward(x, weight, eps, convention, placement)
        ctx.save_for_backward(x, weight, rstd)
        ctx.convention, ctx.placement = convention, placement
        ctx.eps = eps
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: recompute rstd from x so double backward is exact
            rstd = _sh.inv_rms(_sh.mean_square(x.to(rstd.dtype), ctx.convention), ctx.eps, ctx.placement)
        dx, dw = _sh.rms_backward(dy, x, weight, rstd, ctx.convention, ctx.placement)
        need = ctx.needs_input_grad
        return (dx if need[0] else None), (dw if need[1] else None), None, None, None


def convention_rms_norm(x, weight=None, eps=1e-6, *, convention="llama", eps_placement="inside"):
    """RMSNorm over the last dimension with a model family's casting order (the table in
    :mod:`reference_impl.conventions`); ``conventions.rms_norm`` is this function.

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
        TypeError / ValueError: as :func:`rms_norm`, plus an unknown convention or placement.

    Range: every convention squares in float32 and sums with torch's float32 mean, so a row whose sum of
    squares passes float32's maximum (any ``|x|`` above about 1.8e19, or an RMS above
    ``sqrt(float32 max / d)``) gets rstd 0 and comes out as zeros, as the modules do; with ``eps=0`` a row
    whose squares underflow to 0 gives Inf/NaN. docs/numerics.md gives the measured thresholds.
    """
    eps = check_convention_rms_args(x, weight, eps, convention, eps_placement)
    if convention == "reference" and eps_placement == "inside":
        return RMSNormFunction.apply(x, weight, eps)
    return ConventionRMSNormFunction.apply(x, weight, eps, convention, eps_placement)


def convention_rms_norm_backward(dy, x, weight=None, eps=1e-6, *, convention="llama", eps_placement="inside"):
    """Explicit backward of :func:`convention_rms_norm`. Returns ``(dx, dweight)`` (``dweight`` None without
    weight); ``conventions.rms_norm_backward`` is this function.

    ``dx = r * (g - xhat * mean(g * xhat))`` with ``g = dy * gain``, ``gain = 1 + w`` for gemma, ``w``
    otherwise; with eps outside, ``xhat`` in the bracket becomes ``x / sqrt(ms)``. ``dweight = sum dy * xhat``.
    """
    eps = check_convention_rms_args(x, weight, eps, convention, eps_placement)
    check_grad(dy, x)
    if convention == "reference" and eps_placement == "inside":  # the core, as the forward
        return rms_norm_backward(dy, x, weight, eps)
    cd = _sh.stat_dtype(x, convention)
    xf = x.to(cd)
    rstd = _sh.inv_rms(_sh.mean_square(xf, convention), eps, eps_placement)
    return _sh.rms_backward(dy, x, weight, rstd, convention, eps_placement)


# ------------------------------------------------------------------ the catalog entries

FORMULAS = ("rms.forward", "rms.vjp_x", "rms.vjp_weight")


def _inputs(around):
    def make(shape, dtype, g):
        return {"x": randn(shape, dtype, g, 2.0), "weight": gain(shape[-1], dtype, g, around)}
    return make


def _reference(x, weight, eps, convention, eps_placement):
    return convention_rms_norm(x, weight, eps, convention=convention, eps_placement=eps_placement)


def _oracle_fn(x, weight, eps, convention, eps_placement):
    w = None if weight is None else (1.0 + weight if convention == "gemma" else weight)
    return _oracle.rms_norm_forward_placed(x, w, eps, eps_placement)


def _bound(inputs, params):
    return _tol.convention_forward_bound(inputs["x"], inputs["weight"], params["eps"], params["convention"],
                                         params["eps_placement"])


def _native_bound(inputs, params):
    # the native ops return x's dtype whatever the weight's: bound the llama order with w in x's dtype
    x = inputs["x"]
    return _tol.convention_forward_bound(x, inputs["weight"], params["eps"], params["convention"],
                                         params["eps_placement"], x_dtype=x.dtype, w_dtype=x.dtype)


def _twin(x, weight, eps, convention, eps_placement):
    """The same math computed in float64 (the families compute in float32 even for float64 input)."""
    w = None if weight is None else (1.0 + weight if convention == "gemma" else weight)
    return convention_rms_norm(x, w, eps, convention="reference", eps_placement=eps_placement)


def _native(name):
    def run(x, weight, eps, convention, eps_placement):
        from .. import ops

        fn = ops.fused_rms_norm
        if name == "triton":
            from ..ops.triton_norm import triton_rms_norm as fn
        return fn(x, weight, eps, convention=convention)
    return run


def _impls(convention):
    if convention not in ("llama", "gemma"):
        return {}
    return {
        "normlab (CPU)": Impl(_native("normlab"), "cpu"),
        "normlab (CUDA)": Impl(_native("normlab"), "cuda"),
        "Triton": Impl(_native("triton"), "cuda"),
    }


_FAMILIES = {
    "reference": (), "torch": ("torch.nn.RMSNorm",),
    "llama": ("Llama", "Mistral", "Mixtral", "Qwen2", "Qwen3", "DeepSeek-V3", "Phi-3", "Mamba-2"),
    "gemma": ("Gemma", "Gemma 2", "Gemma 3", "Qwen3-Next"), "t5": ("T5",), "olmo2": ("OLMo 2",),
}
_TITLES = {
    "reference": "RMSNorm, the core order (float32 statistics and gain, one cast)",
    "llama": "RMSNorm, Llama order (cast before the gain)",
    "gemma": "RMSNorm with the (1 + w) gain of Gemma and Qwen3-Next",
    "t5": "RMSNorm, T5 order (cast to a half weight's dtype)",
    "olmo2": "RMSNorm, OLMo 2 order (gain in float32, one cast)",
    "torch": "RMSNorm as torch.nn.RMSNorm computes it",
}
_SOURCES = {
    "reference": "Zhang and Sennrich, arXiv:1910.07467",
    "llama": "transformers, models/llama/modeling_llama.py (LlamaRMSNorm)",
    "gemma": "transformers, models/gemma/modeling_gemma.py (GemmaRMSNorm); models/qwen3_next/modeling_qwen3_next.py",
    "t5": "transformers, models/t5/modeling_t5.py (T5LayerNorm)",
    "olmo2": "transformers, models/olmo2/modeling_olmo2.py (Olmo2RMSNorm)",
    "torch": "torch.nn.RMSNorm",
}


# how reference_impl.check.matching compares a module with these entries: what each casting order does (eps
# placement and the gain are added by the matching's describe()), in preference order (the first equal wins)
MATCH_SENTENCES = {
    "llama": "rounds before the gain: Llama's order (normalize in float32, round to x's dtype, then multiply "
             "by the gain)",
    "gemma": "applies (1 + w) in float32, then rounds once: Gemma's order",
    "t5": "scales the input in float32 and rounds to a half weight's dtype before the gain: T5's order",
    "olmo2": "applies the gain in float32, then rounds once: OLMo 2's order",
    "torch": "computes in float32 with the gain in float32, then rounds once: torch.nn.RMSNorm's order",
    "reference": "computes in float32 (float64 for float64 input) with the gain in it, then rounds once",
}


def match_gain(p, convention, folded=False):
    """The weight a casting order gets for a matching probe ``p``: its stored weight, or for a ``"1+w"``
    probe under a non-Gemma order the gain ``1 + w`` in float32 (rounded to the weight's dtype when
    ``folded``). Raises :class:`~reference_impl.norms.spec.NotApplicable` where the order does not apply."""
    if folded and p.gain != "1+w":
        raise NotApplicable("only a (1 + w) gain can be folded")
    if p.gain == "none" or p.weight is None:
        return None
    if convention == "gemma":
        if p.gain != "1+w":
            raise NotApplicable("Gemma's order stores an offset from one")
        return p.weight
    if p.gain == "1+w":  # another order applied to the gain 1 + w
        g = 1.0 + p.weight.float()
        return g.to(p.weight.dtype) if folded else g
    return p.weight


def _match_run(p, convention, placement="inside", folded=False):
    return convention_rms_norm(p.x, match_gain(p, convention, folded), p.eps, convention=convention,
                               eps_placement=placement)


def _match_variants(convention, placement):
    """The matching candidates of an entry: each eps placement it owns, then the gain 1 + w folded."""
    if placement == "outside":  # rms_norm.eps_outside: the core order with eps outside, no folded twin
        return (("", {"convention": convention, "placement": "outside"}),)
    out = []
    for pl in ("inside",) if convention == "reference" else _sh.EPS_PLACEMENTS:
        shown = ("eps outside",) if pl == "outside" else ()
        out.append((shown, {"convention": convention, "placement": pl}))
        if convention != "gemma":
            out.append((shown + ("1 + w folded",), {"convention": convention, "placement": pl, "folded": True}))
    return tuple(out)


def _torch_layer(width, eps):
    """torch.nn.RMSNorm over ``width`` features: the module this entry replays, as a model holds it."""
    return torch.nn.RMSNorm(width, eps=eps)


def _spec(convention, placement="inside"):
    name = "rms_norm" if convention == "reference" else f"rms_norm.{convention}"
    title, source = _TITLES[convention], _SOURCES[convention]
    if placement == "outside":
        name, title = "rms_norm.eps_outside", "RMSNorm with eps outside the root, x / (rms + eps)"
        source = "the RMSNorm authors' code, github.com/bzhangGo/rmsnorm (rmsnorm_torch.py)"
    exact = convention in ("reference", "torch")
    return NormSpec(
        name=name, title=title, source=source, reference=_reference, oracle=_oracle_fn, bound=_bound,
        make_inputs=_inputs(0.0 if convention == "gemma" else 1.0),
        params={"eps": 1e-6, "convention": convention, "eps_placement": placement},
        formulas=FORMULAS if name == "rms_norm" else (), conventions=(convention, f"eps {placement}"),
        families=_FAMILIES[convention] if placement == "inside" else (),
        implementations={k: Impl(v.fn, v.device, v.dtypes, bound=_native_bound) for k, v in _impls(convention).items()}
        if placement == "inside" else {},
        grads=("x", "weight"), float64_exact=exact, grad_twin=None if exact else _twin,
        bad_inputs=common_bad(("weight",)),
        match_kind="rms", match_run=_match_run, match_variants=_match_variants(convention, placement),
        match_rank=list(MATCH_SENTENCES).index(convention) + 1 + (placement == "outside"),
        match_description=MATCH_SENTENCES[convention],
        layer=Layer("rms", _torch_layer) if (convention, placement) == ("torch", "inside") else None,
    )


SPECS = tuple(_spec(c) for c in _sh.RMS_CONVENTIONS) + (_spec("reference", "outside"),)
