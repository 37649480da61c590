"""RMSNorm variants: partial (pRMSNorm), grouped (Mamba-2), fused residual add, QK-norm placements, ScaleNorm.

Every variant has an explicit backward (``torch.autograd.Function``; reshapes around it are plain views)
and the core's input checks. Each Function's ``apply`` checks its own arguments too, and inside torch.func
transforms (vmap, grad, jvp, ...) runs the forward as plain torch operations, which they handle exactly.
Range (as the core reference and the modules): squares are formed in float32, so ``|x|`` above about
1.8e19 gives rstd 0 (zeros), and with ``eps=0`` rows whose squares underflow give Inf/NaN. Shapes are ``(..., d)``, normalization over the last dimension unless stated.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from . import conventions as _cv
from ._checks import FLOAT_DTYPES, check_eps, check_input, check_param, compute_dtype, eps_limit, functorch_active


def _rows2d(t):
    return t.reshape(math.prod(t.shape[:-1]), t.shape[-1])


# ------------------------------------------------------------------ partial RMSNorm (Zhang & Sennrich 2019)

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
    check_input(x)
    check_param(weight, x, "weight")
    _cv.check_placement(placement)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= x.shape[-1]:
        raise ValueError(f"k must be an int in [1, {x.shape[-1]}] (features the RMS is taken over), got {k!r}")
    return check_eps(eps, max_value=eps_limit(compute_dtype(x)))


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
            dw = _rows2d(dy.to(cd) * xhat).sum(0).to(w.dtype)
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


# ------------------------------------------------------------------ grouped RMSNorm (Mamba-2)

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
    check_input(x)
    check_param(weight, x, "weight")
    if isinstance(gs, bool) or not isinstance(gs, int) or gs < 1 or x.shape[-1] % gs:
        raise ValueError(f"group size must be a positive int dividing the last dimension {x.shape[-1]}, got {gs!r}")
    if gate is not None:
        check_input(gate, "gate")
        if gate.shape != x.shape:
            raise ValueError(f"gate has shape {tuple(gate.shape)} but x has shape {tuple(x.shape)}")
        if gate.device != x.device:
            raise ValueError(f"gate is on {gate.device} but x is on {x.device}")
    return check_eps(eps, max_value=eps_limit(torch.float32))


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
            dw = _rows2d(dyf * ahat.view(a.shape)).sum(0).to(w.dtype)
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


# ------------------------------------------------------------------ fused residual add + RMSNorm

def _check_fused_add(x, residual, weight, eps, convention) -> float:
    check_input(x)
    check_input(residual, "residual")
    if residual.shape != x.shape:
        raise ValueError(f"residual has shape {tuple(residual.shape)} but x has shape {tuple(x.shape)}")
    if residual.device != x.device:
        raise ValueError(f"residual is on {residual.device} but x is on {x.device}")
    check_param(weight, x, "weight")
    _cv.check_convention(convention)
    return _cv.resolve_eps(eps, x, convention)


class FusedAddRMSNormFunction(torch.autograd.Function):
    """``FusedAddRMSNormFunction.apply(x, residual, weight, eps, convention)`` -> ``(y, residual + x)``."""

    @classmethod
    def apply(cls, x, residual, weight, eps, convention):
        eps = _check_fused_add(x, residual, weight, eps, convention)
        if functorch_active():
            s = residual + x
            return _cv.rms_forward(s, weight, eps, convention, "inside")[0], s
        return super().apply(x, residual, weight, eps, convention)

    @staticmethod
    def forward(ctx, x, residual, weight, eps, convention):
        s = residual + x  # the new residual stream, in promote(x, residual), as `residual + hidden_states`
        y, rstd = _cv.rms_forward(s, weight, eps, convention, "inside")
        ctx.save_for_backward(x, residual, weight, rstd)
        ctx.convention, ctx.eps = convention, eps
        ctx.dtypes = (x.dtype, residual.dtype)
        return y, s

    @staticmethod
    def backward(ctx, dy, ds):
        x, residual, w, rstd = ctx.saved_tensors
        s = residual + x  # recomputed (not saved) so that, under create_graph, it stays tied to x and residual
        if torch.is_grad_enabled():
            rstd = torch.rsqrt(_cv.row_mean(s.to(rstd.dtype).pow(2), ctx.convention) + ctx.eps)
        dsum, dw = _cv.rms_backward(dy, s, w, rstd, ctx.convention, "inside")
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


# ------------------------------------------------------------------ QK-norm placements

QK_PLACEMENTS = ("per_head", "full")


# --8<-- [start:qk_norm]
def qk_norm(q, k, q_weight, k_weight, head_dim, eps=1e-6, *, placement="per_head", convention="llama"):
    """RMSNorm on the query and key projections before attention (QK-norm).

    ``q``: ``(..., n_q_heads * head_dim)``, ``k``: ``(..., n_kv_heads * head_dim)``, as the projections
    return them. ``placement="per_head"``: each head's ``head_dim`` features get their own RMS and one
    shared ``(head_dim,)`` gain (Qwen3, Gemma 3). ``placement="full"``: one RMS over the whole projection
    and a gain as wide as it (OLMo 2). Returns ``(q_normed, k_normed)`` in the input shapes.
    """
    if placement not in QK_PLACEMENTS:
        raise ValueError(f"placement must be 'per_head' or 'full', got {placement!r}")
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 1:
        raise ValueError(f"head_dim must be a positive int, got {head_dim!r}")
    out = []
    for t, w, name in ((q, q_weight, "q"), (k, k_weight, "k")):
        check_input(t, name)
        if t.shape[-1] % head_dim:
            raise ValueError(f"{name}'s last dimension {t.shape[-1]} is not a multiple of head_dim={head_dim}")
        if placement == "per_head":
            heads = t.view(*t.shape[:-1], t.shape[-1] // head_dim, head_dim)
            out.append(_cv.rms_norm(heads, w, eps, convention=convention).reshape(t.shape))
        else:
            out.append(_cv.rms_norm(t, w, eps, convention=convention))
    return out[0], out[1]
# --8<-- [end:qk_norm]


# ------------------------------------------------------------------ ScaleNorm (Nguyen & Salazar 2019)

def _scale_forward(x, g, eps):
    cd = compute_dtype(x)
    xf = x.to(cd)
    n = torch.linalg.vector_norm(xf, dim=-1, keepdim=True)
    return (g.to(cd) * xf / n.clamp(min=eps)).to(x.dtype), n


def _check_scale(x, g, eps) -> float:
    check_input(x)
    if not isinstance(g, torch.Tensor):
        raise TypeError(f"g must be a torch.Tensor, got {type(g).__name__}")
    if g.dtype not in FLOAT_DTYPES:
        raise TypeError(f"g has dtype {g.dtype}; expected one of float16, bfloat16, float32, float64")
    if g.numel() != 1:
        raise ValueError(f"g must hold exactly one value (ScaleNorm has a single scalar gain), got shape {tuple(g.shape)}")
    if g.device != x.device:
        raise ValueError(f"g is on {g.device} but x is on {x.device}")
    return check_eps(eps, max_value=eps_limit(compute_dtype(x)))  # clamped in that dtype


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


__all__ = ["partial_rms_norm", "grouped_rms_norm", "fused_add_rms_norm", "qk_norm", "scale_norm", "QK_PLACEMENTS"]
