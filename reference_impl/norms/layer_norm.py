"""LayerNorm (Ba, Kiros, Hinton, arXiv:1607.06450): the core reference and two families' orders.

``y = (x - mean) * rsqrt(var + eps) * weight + bias`` with the biased variance. This module holds the
math and declares it for the catalog: the core reference :func:`layer_norm` (:class:`LayerNormFunction`,
explicit backward, two-pass statistics in float32, float64 for float64 input, one cast at the end) and
the families' orders :func:`convention_layer_norm` (``neox``: ``torch.nn.LayerNorm``; ``cohere``:
CohereLayerNorm). :mod:`reference_impl.reference` and :mod:`reference_impl.conventions` re-export them
under their old names.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from .. import oracle as _oracle
from .. import shared as _sh
from .. import tolerances as _tol
from .._checks import check_eps, check_grad, check_norm_args, compute_dtype, eps_limit, functorch_active
from ..shared import row_mean, rows
from .spec import Impl, Layer, NormSpec, common_bad, randn


# ------------------------------------------------------------------ the core reference

# --8<-- [start:ln_forward]
def ln_forward(x, weight, bias, eps):
    eps = check_norm_args(x, weight, eps, bias=bias)  # a clear error for a bad input, never a number
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
    dw = None if weight is None else (dyf * xhat).reshape(rows(x), d).sum(dim=0).to(weight.dtype)
    db = None if bias is None else dyf.reshape(rows(x), d).sum(dim=0).to(bias.dtype)
    return dx.to(x.dtype), dw, db
# --8<-- [end:ln_backward]


def ln_rstd(x, eps):
    """The reciprocal standard deviation per row (two-pass), as :func:`ln_forward` computes it (with its
    checks of x and eps)."""
    eps = check_norm_args(x, None, eps)
    xf = x.to(compute_dtype(x))
    return torch.rsqrt(row_mean((xf - row_mean(xf)).pow(2)) + eps)


def check_ln_args(x, weight, bias, eps) -> float:
    """The checks of :func:`layer_norm`; returns eps as a float."""
    return check_norm_args(x, weight, eps, bias=bias)


class LayerNormFunction(torch.autograd.Function):
    """``LayerNormFunction.apply(x, weight, bias, eps)``; backward uses the explicit formula above and is
    itself differentiable (double backward is exact: under ``create_graph`` rstd is recomputed from the
    saved input). ``apply`` checks its arguments as :func:`layer_norm`."""

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


def layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """LayerNorm over the last dimension: ``(x - mean) * rsqrt(var + eps) * weight + bias``.

    The variance is the biased one (divides by ``d``), as in ``torch.nn.functional.layer_norm``.
    Shapes, dtypes and errors as in :func:`reference_impl.reference.rms_norm`; ``bias`` has shape ``(d,)``
    or is ``None``.
    """
    eps = check_ln_args(x, weight, bias, eps)
    return LayerNormFunction.apply(x, weight, bias, eps)


def layer_norm_backward(dy, x, weight=None, bias=None, eps: float = 1e-5):
    """Explicit LayerNorm backward. Returns ``(dx, dweight, dbias)``; ``None`` for absent parameters.

    ``dx = rstd * (g - mean(g) - xhat * mean(g * xhat))``; ``dweight = sum dy * xhat``; ``dbias = sum dy``.
    """
    eps = check_ln_args(x, weight, bias, eps)
    check_grad(dy, x)
    rstd = ln_rstd(x, eps)
    return ln_backward(dy, x, weight, bias, rstd)


# ------------------------------------------------------------------ the model families' orders

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


def check_convention_ln_args(x, weight, bias, eps, convention) -> float:
    """The checks of :func:`convention_layer_norm`; returns eps as a float."""
    eps = check_norm_args(
        x, weight, eps, bias=bias,
        extra=lambda: _sh.check_convention(convention, _sh.LN_CONVENTIONS, "LayerNorm"),
        resolve_eps=lambda e: check_eps(
            e, max_value=eps_limit(torch.float32 if convention == "cohere" else compute_dtype(x))))
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
        eps = check_convention_ln_args(x, weight, bias, eps, convention)
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
        dx, dw, db = ln_backward(dy, x, weight, bias, rstd)
        need = ctx.needs_input_grad
        return (dx if need[0] else None), (dw if need[1] else None), (db if need[2] else None), None, None


def convention_layer_norm(x, weight=None, bias=None, eps=1e-5, *, convention="neox"):
    """LayerNorm over the last dimension as a family computes it: ``neox`` (torch.nn.LayerNorm, as in
    GPT-NeoX/Pythia) or ``cohere`` (CohereLayerNorm: float32 two-pass statistics, no bias in the model);
    ``conventions.layer_norm`` is this function.

    Shapes, dtypes and errors as :func:`layer_norm`. Output dtype ``x.dtype``. The backward is the core's
    explicit LayerNorm backward (two-pass statistics in float32/float64).

    Range: as :func:`reference_impl.norms.rms_norm.convention_rms_norm`, a row whose squared deviations
    overflow float32 (about 1.8e19 from the mean) has rstd 0, and with ``eps=0`` a row whose squared
    deviations underflow gives Inf/NaN.
    """
    eps = check_convention_ln_args(x, weight, bias, eps, convention)
    return ConventionLayerNormFunction.apply(x, weight, bias, eps, convention)


# ------------------------------------------------------------------ the catalog entries

FORMULAS = ("ln.forward", "ln.vjp_x", "ln.vjp_weight", "ln.vjp_bias")


def _inputs(shape, dtype, g):
    x = randn(shape, dtype, g, 2.0, 0.0 if dtype == torch.float16 else 3.0)  # an offset: centring must work
    return {"x": x, "weight": randn((shape[-1],), dtype, g, 0.5, 1.0), "bias": randn((shape[-1],), dtype, g, 0.3)}


def _reference(x, weight, bias, eps, convention):
    if convention == "reference":
        return layer_norm(x, weight, bias, eps)
    return convention_layer_norm(x, weight, bias, eps, convention=convention)


def _oracle_fn(x, weight, bias, eps, convention):
    return _oracle.layer_norm_forward(x, weight, bias, eps)


def _bound(inputs, params):
    x, w, b = inputs["x"], inputs["weight"], inputs["bias"]
    compute = torch.float32 if (params["convention"] != "reference" and x.dtype == torch.float64) else None
    bound = _tol.ln_forward_bound(x, w, b, params["eps"], x.dtype, compute=compute)
    if compute is not None:  # x rounded to float32 first: u32 |x_i| on x_i, u32 mean|x| on the mean, times |w| r
        xd = x.detach().double().numpy()
        r = 1 / np.sqrt(np.var(xd, -1, keepdims=True) + params["eps"])
        wd = np.abs(w.detach().double().numpy())
        bound = bound + _tol.unit_roundoff(torch.float32) * wd * r * (np.abs(xd) + np.mean(np.abs(xd), -1, keepdims=True))
    return bound


def _twin(x, weight, bias, eps, convention):
    return layer_norm(x, weight, bias, eps)


def _native(name):
    def run(x, weight, bias, eps, convention):
        from .. import ops

        if name == "triton":
            from ..ops.triton_norm import triton_layer_norm

            return triton_layer_norm(x, weight, bias, eps)
        return ops.fused_layer_norm(x, weight, bias, eps)
    return run


# how reference_impl.check.matching compares a module with these entries: what each order does, and its
# preference among the layer candidates (the first equal wins)
_MATCH = {
    "neox": (2, "computes as torch.nn.LayerNorm's kernel does (float32 statistics, one rounding)"),
    "cohere": (3, "computes two-pass float32 statistics, applies the gain in float32, then rounds once: "
                  "Cohere's order"),
    "reference": (4, "computes in float32 (float64 for float64 input) with the gain in it, then rounds once"),
}


def _match_run(p, convention):
    return _reference(p.x, p.weight, p.bias, p.eps, convention)


def _torch_layer(width, eps):
    """torch.nn.LayerNorm over ``width`` features (the neox entry replays it), as a model holds it."""
    return torch.nn.LayerNorm(width, eps=eps)


def _spec(convention):
    name = "layer_norm" if convention == "reference" else f"layer_norm.{convention}"
    titles = {"reference": "LayerNorm, the core order (two-pass statistics)",
              "neox": "LayerNorm as torch.nn.LayerNorm computes it (GPT-NeoX, Pythia)",
              "cohere": "LayerNorm, Cohere order (float32 two-pass statistics, gain in float32)"}
    sources = {"reference": "Ba, Kiros and Hinton, arXiv:1607.06450",
               "neox": "transformers, models/gpt_neox/modeling_gpt_neox.py (torch.nn.LayerNorm)",
               "cohere": "transformers, models/cohere/modeling_cohere.py (CohereLayerNorm)"}
    families = {"reference": (), "neox": ("GPT-NeoX / Pythia",), "cohere": ("Cohere (Command R)",)}
    impls = {}
    if convention == "reference":
        impls = {"normlab (CPU)": Impl(_native("normlab"), "cpu"), "normlab (CUDA)": Impl(_native("normlab"), "cuda"),
                 "Triton": Impl(_native("triton"), "cuda")}
    return NormSpec(
        name=name, title=titles[convention], source=sources[convention], reference=_reference,
        oracle=_oracle_fn, bound=_bound, make_inputs=_inputs, params={"eps": 1e-5, "convention": convention},
        formulas=FORMULAS if convention == "reference" else (), conventions=(convention,),
        families=families[convention], implementations=impls, grads=("x", "weight", "bias"),
        float64_exact=convention != "cohere", grad_twin=_twin if convention == "cohere" else None,
        bad_inputs=common_bad(("weight", "bias")),
        match_kind="layer", match_run=_match_run, match_variants=(("", {"convention": convention}),),
        match_rank=_MATCH[convention][0], match_description=_MATCH[convention][1],
        layer=Layer("ln", _torch_layer) if convention == "neox" else None,
    )


SPECS = tuple(_spec(c) for c in ("reference",) + _sh.LN_CONVENTIONS)
