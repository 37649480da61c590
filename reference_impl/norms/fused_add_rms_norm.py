"""The pre-norm block boundary in one call: ``s = residual + x; return rms_norm(s), s``.
The math is here (:func:`fused_add_rms_norm`, llama order by default, and :class:`FusedAddRMSNormFunction`
with its explicit backward, on the casting orders of :mod:`reference_impl.shared`);
``reference_impl.variants.fused_add_rms_norm`` is the same function."""
from __future__ import annotations

import numpy as np
import torch

from .. import shared as _sh
from .. import tolerances as _tol
from .._checks import check_input, check_norm_args, functorch_active


def _check_fused_add(x, residual, weight, eps, convention) -> float:
    check_input(x)
    check_input(residual, "residual")
    if residual.shape != x.shape:
        raise ValueError(f"residual has shape {tuple(residual.shape)} but x has shape {tuple(x.shape)}")
    if residual.device != x.device:
        raise ValueError(f"residual is on {residual.device} but x is on {x.device}")
    return check_norm_args(x, weight, eps, extra=lambda: _sh.check_convention(convention),
                           resolve_eps=lambda e: _sh.resolve_eps(e, x, convention))


class FusedAddRMSNormFunction(torch.autograd.Function):
    """``FusedAddRMSNormFunction.apply(x, residual, weight, eps, convention)`` -> ``(y, residual + x)``."""

    @classmethod
    def apply(cls, x, residual, weight, eps, convention):
        eps = _check_fused_add(x, residual, weight, eps, convention)
        if functorch_active():
            s = residual + x
            return _sh.rms_forward(s, weight, eps, convention, "inside")[0], s
        return super().apply(x, residual, weight, eps, convention)

    @staticmethod
    def forward(ctx, x, residual, weight, eps, convention):
        s = residual + x  # the new residual stream, in promote(x, residual), as `residual + hidden_states`
        y, rstd = _sh.rms_forward(s, weight, eps, convention, "inside")
        ctx.save_for_backward(x, residual, weight, rstd)
        ctx.convention, ctx.eps = convention, eps
        ctx.dtypes = (x.dtype, residual.dtype)
        return y, s

    @staticmethod
    def backward(ctx, dy, ds):
        x, residual, w, rstd = ctx.saved_tensors
        s = residual + x  # recomputed (not saved) so that, under create_graph, it stays tied to x and residual
        if torch.is_grad_enabled():
            rstd = torch.rsqrt(_sh.family_row_mean(s.to(rstd.dtype).pow(2), ctx.convention) + ctx.eps)
        dsum, dw = _sh.rms_backward(dy, s, w, rstd, ctx.convention, "inside")
        total = dsum.to(torch.promote_types(dsum.dtype, torch.float32))
        if ds is not None:
            total = total + ds.to(total.dtype)  # the new residual feeds both the norm and the next block
        need = ctx.needs_input_grad
        return ((total.to(ctx.dtypes[0]) if need[0] else None), (total.to(ctx.dtypes[1]) if need[1] else None),
                (dw if need[2] else None), None, None)


# --8<-- [start:fused_add]
def fused_add_rms_norm(x, residual, weight=None, eps=1e-6, *, convention="llama"):
    """``s = residual + x; return rms_norm(s), s``: the pre-norm block boundary in one call.

    Bit-identical to the unfused pair a decoder layer runs (``hidden = residual + hidden`` then the next
    layer's norm). Returns ``(normalized, new_residual)``; the new residual has ``promote(x, residual)``.
    """
    eps = _check_fused_add(x, residual, weight, eps, convention)
    return FusedAddRMSNormFunction.apply(x, residual, weight, eps, convention)
# --8<-- [end:fused_add]


# ------------------------------------------------------------------ the catalog entry
from .rms_norm import MATCH_SENTENCES, match_gain
from .spec import BadInput, Impl, NormSpec, NotApplicable, common_bad, gain, randn

u = _tol.unit_roundoff


def _inputs(shape, dtype, g):
    return {"x": randn(shape, dtype, g, 2.0), "residual": randn(shape, dtype, g, 2.0), "weight": gain(shape[-1], dtype, g)}


def _oracle(x, residual, weight, eps, convention):
    s = x + residual
    return s / np.sqrt(np.mean(s * s, -1, keepdims=True) + eps) * weight, s


def _bound(inputs, params):
    x, res, w = inputs["x"], inputs["residual"], inputs["weight"]
    s = x + res  # rounded once, in x's dtype: a relative error u_x on each s_i moves y_i by at most 2 u_x |y_i|
    y, s64 = _oracle(x.double().numpy(), res.double().numpy(), w.double().numpy(), **params)
    by = _tol.convention_forward_bound(s, w, params["eps"], params["convention"]) + 2 * u(x.dtype) * np.abs(y)
    # s itself: one rounding into x's dtype (u_x |s|), compared in float64 (u_64 |s|), and the subnormal floor
    bs = (u(x.dtype) + u(torch.float64)) * np.abs(s64) + float(torch.finfo(x.dtype).tiny) * u(x.dtype)
    return by, bs


def _native(device_name):
    def run(x, residual, weight, eps, convention):
        from .. import ops

        if device_name == "triton":
            from ..ops.triton_norm import triton_rms_norm

            return triton_rms_norm(x, weight, eps, residual=residual, convention=convention)
        return ops.fused_rms_norm(x, weight, eps, residual=residual, convention=convention)
    return run


def _native_bound(inputs, params):
    x = inputs["x"]
    by, bs = _bound(inputs, params)
    return by + u(x.dtype) * np.abs(_oracle(x.double().numpy(), inputs["residual"].double().numpy(),
                                            inputs["weight"].double().numpy(), **params)[0]), bs


def _twin(x, residual, weight, eps, convention):
    s = x + residual
    return s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps) * weight, s


def _mismatch(inputs, params):
    return {**inputs, "residual": inputs["residual"][..., :-1]}, params


def _match_run(p, convention, folded=False):
    if p.residual is None:
        raise NotApplicable("no residual")
    return fused_add_rms_norm(p.x, p.residual, match_gain(p, convention, folded), p.eps, convention=convention)


# matching candidates "fused_add_rms_norm.<order>" (and "... (1 + w folded)"), in the RMS entries' preference order
_MATCH_VARIANTS = tuple(v for c in MATCH_SENTENCES for v in
                        ((("." + c,), {"convention": c}),)
                        + (() if c == "gemma" else ((("." + c, "1 + w folded"), {"convention": c, "folded": True}),)))

SPECS = (NormSpec(
    name="fused_add_rms_norm", title="Residual add fused with RMSNorm (llama order)",
    source="transformers decoder layers (hidden_states = residual + hidden_states, then the next norm)",
    reference=lambda x, residual, weight, eps, convention: fused_add_rms_norm(x, residual, weight, eps, convention=convention),
    oracle=_oracle, bound=_bound, make_inputs=_inputs, params={"eps": 1e-6, "convention": "llama"},
    conventions=("llama",), families=("Llama", "Mistral", "Qwen2", "Qwen3"),
    implementations={"normlab (CPU)": Impl(_native("normlab"), "cpu", bound=_native_bound),
                     "normlab (CUDA)": Impl(_native("normlab"), "cuda", bound=_native_bound),
                     "Triton": Impl(_native("triton"), "cuda", bound=_native_bound)},
    grads=("x", "residual", "weight"), float64_exact=False, grad_twin=_twin,
    bad_inputs=common_bad(("weight",)) + (BadInput("residual of another shape", _mismatch, ValueError, "residual"),),
    match_kind="fused_add_rms", match_run=_match_run, match_variants=_MATCH_VARIANTS, match_rank=4,
    match_description=MATCH_SENTENCES,
),)
