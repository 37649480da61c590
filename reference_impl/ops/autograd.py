"""Autograd formulas of the ``normlab`` ops, first and higher order.

First order runs the native backward ops (``rms_norm_bwd``, ``layer_norm_bwd``). Those ops are
differentiable too, so ``torch.autograd.grad(..., create_graph=True)`` followed by a second ``grad`` (a
Hessian-vector product, a gradient penalty) is exact and never silently zero:

- the forward ops' statistics (``rstd``, LayerNorm's ``mean``) are differentiable outputs. Nothing
  downstream uses them in a first-order backward (their gradient arrives as ``None`` and costs nothing),
  but the backward ops take them as inputs, so in a double backward their gradients flow back into ``x``
  through ``d rstd / dx`` and ``d mean / dx`` (written out below);
- the backward ops' own backward is the vector-Jacobian product of the reference math of the kernels
  (:func:`rms_bwd_math`, :func:`ln_bwd_math`), a differentiable PyTorch expression evaluated in float32, so
  third and higher orders work as well.

Gradients that do not reach an output arrive as ``None`` (``set_materialize_grads(False)``): the common
first-order backward does exactly the work of the native op and nothing more.
"""
from __future__ import annotations

import torch

__all__ = ["register", "rms_bwd_math", "ln_bwd_math"]


# --- the reference math of the backward kernels (float32; the graph of these is what double backward
#     differentiates) -------------------------------------------------------------------------------

def rms_bwd_math(dy, x, weight, rstd, convention: int):
    """``rms_norm_bwd`` as a differentiable expression: ``(dx in x's dtype, dweight float32 or None)``.

    ``xhat = x * rstd``, ``g = dy * w_eff`` (``w``, ``1 + w`` for Gemma, 1 without a weight),
    ``dx = rstd * (g - xhat * mean(g * xhat))``, ``dweight = sum over rows of dy * xhat``.
    """
    dyf, xf = dy.float(), x.float()
    r = rstd.unsqueeze(-1)
    xhat = xf * r
    if weight is None:
        g = dyf
    else:
        g = dyf * (weight.float() + 1 if convention == 1 else weight.float())
    dx = r * (g - xhat * (g * xhat).mean(-1, keepdim=True))
    dw = None if weight is None else (dyf * xhat).reshape(-1, x.shape[-1]).sum(0)
    return dx.to(x.dtype), dw


def ln_bwd_math(dy, x, weight, mean, rstd):
    """``layer_norm_bwd`` as a differentiable expression: ``(dx, dweight or None, dbias)``, dweight and
    dbias in float32. ``xhat = (x - mean) * rstd``, ``g = dy * w``,
    ``dx = rstd * (g - mean(g) - xhat * mean(g * xhat))``."""
    dyf, xf = dy.float(), x.float()
    r = rstd.unsqueeze(-1)
    xhat = (xf - mean.unsqueeze(-1)) * r
    g = dyf if weight is None else dyf * weight.float()
    dx = r * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
    d = x.shape[-1]
    dw = None if weight is None else (dyf * xhat).reshape(-1, d).sum(0)
    return dx.to(x.dtype), dw, dyf.reshape(-1, d).sum(0)


def _vjp(fn, primals, cotangents):
    """Vector-Jacobian product of ``fn(*primals)`` (outputs: tensors or None) with ``cotangents``.

    ``torch.func.vjp`` treats the primals as the function's own inputs, so a primal that itself depends
    on another one (the first backward's ``dy`` on ``x``) is not differentiated twice; inside a
    ``create_graph=True`` backward the result stays connected to the outer graph (third order and beyond).
    """
    if all(c is None for c in cotangents):
        return [None] * len(primals)
    given = [i for i, p in enumerate(primals) if p is not None]

    def f(*tensors):
        args = list(primals)
        for i, t in zip(given, tensors):
            args[i] = t
        return tuple(o for o in fn(*args) if o is not None)

    keep = [c for o, c in zip(fn(*primals), cotangents) if o is not None]  # which outputs exist
    outs, vjp_fn = torch.func.vjp(f, *[primals[i] for i in given])
    cots = tuple(torch.zeros_like(o) if c is None else c.to(o.dtype) for o, c in zip(outs, keep))
    grads = [None] * len(primals)
    for i, g in zip(given, vjp_fn(cots)):
        grads[i] = g
    return grads


def _cast(g, like):
    return None if g is None or like is None else g.to(like.dtype)


# --- d rstd / dx and d mean / dx: used when a double backward sends a gradient to the statistics -------

def _rms_rstd_vjp(h, rstd, d_rstd):
    # rstd = (mean(h^2) + eps)^(-1/2)  ->  d rstd / d h_j = -rstd^3 * h_j / d
    r = rstd.unsqueeze(-1)
    return (d_rstd.unsqueeze(-1) * (-(r ** 3)) * h.float() / h.shape[-1]).to(h.dtype)


def _ln_stats_vjp(x, mean, rstd, d_mean, d_rstd):
    # mean = sum(x) / d; rstd = (var + eps)^(-1/2) with var = mean((x - mean)^2):
    # d rstd / d x_j = -rstd^3 (x_j - mean) / d (the term through mean sums to zero)
    d = x.shape[-1]
    g = torch.zeros_like(x, dtype=torch.float32)
    if d_mean is not None:
        g = g + d_mean.unsqueeze(-1) / d
    if d_rstd is not None:
        r = rstd.unsqueeze(-1)
        g = g + d_rstd.unsqueeze(-1) * (-(r ** 3)) * (x.float() - mean.unsqueeze(-1)) / d
    return g.to(x.dtype)


# --- eps = 0: a row whose RMS (or standard deviation) is below about 2**-126 has a reciprocal above float32's
#     range; the forward computes it in double and its output is right, but the saved float32 rstd is Inf,
#     so the kernels' backward would return Inf and NaN. With eps = 0 the backward therefore runs here, in
#     float64 from the saved input (no saved statistic), each gradient rounded once: dweight and dbias
#     come out right, and dx is the correctly rounded value (Inf only where the true value passes float32's
#     range, as it does for rows that small). These are differentiable PyTorch operations, so a double
#     backward through them is exact as well.

def _eps0_rms_bwd(dy, h, weight, convention):
    hf, dyf = h.double(), dy.double()
    r = torch.rsqrt(hf.pow(2).mean(-1, keepdim=True))
    xhat = hf * r
    g = dyf if weight is None else dyf * (weight.double() + 1 if convention == 1 else weight.double())
    dx = r * (g - xhat * (g * xhat).mean(-1, keepdim=True))
    dw = None if weight is None else (dyf * xhat).reshape(-1, h.shape[-1]).sum(0).to(weight.dtype)
    return dx.to(h.dtype), dw


def _eps0_ln_bwd(dy, x, weight, has_bias):
    xf, dyf = x.double(), dy.double()
    xc = xf - xf.mean(-1, keepdim=True)
    r = torch.rsqrt(xc.pow(2).mean(-1, keepdim=True))
    xhat = xc * r
    g = dyf if weight is None else dyf * weight.double()
    dx = r * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
    d = x.shape[-1]
    dw = None if weight is None else (dyf * xhat).reshape(-1, d).sum(0)
    db = dyf.reshape(-1, d).sum(0) if has_bias else None
    return dx.to(x.dtype), dw, db


def _add(a, b):
    if a is None:
        return b
    return a if b is None else a + b


# --8<-- [start:autograd]
def _rms_setup(ctx, inputs, output):
    x, weight, residual, eps, convention = inputs
    y, res_out, rstd = output
    # the normalized tensor is h = x + residual when a residual is fused: that is what backward needs
    ctx.save_for_backward(res_out if residual is not None else x, weight, rstd)
    ctx.convention = convention & 1  # bit 1 (the fp32 residual contract) is a forward-only setting
    ctx.has_residual = residual is not None
    ctx.eps = eps
    ctx.set_materialize_grads(False)  # an output nobody used sends None, not a tensor of zeros


def _rms_backward(ctx, dy, d_res_out, d_rstd):
    h, weight, rstd = ctx.saved_tensors
    dh = dw = None
    if dy is not None and ctx.eps == 0:  # the saved rstd may have overflowed: see _eps0_rms_bwd
        dh, dw = _eps0_rms_bwd(dy, h, weight, ctx.convention)
    elif dy is not None:
        dh, dw = torch.ops.normlab.rms_norm_bwd(dy.contiguous(), h, weight, rstd, ctx.convention)
    if d_rstd is not None:  # only in a double backward: rstd feeds the first backward
        dh = _add(dh, _rms_rstd_vjp(h, rstd, d_rstd))
    if ctx.has_residual:  # residual_out = h is an output too: its gradient joins dy's
        dh = _add(dh, d_res_out)
    dres = dh if ctx.has_residual else None
    return dh, _cast(dw, weight), dres, None, None


def _ln_setup(ctx, inputs, output):
    x, weight, bias, eps, residual, _contract = inputs
    y, mean, rstd, res_out = output
    # as RMSNorm: with a fused residual the backward differentiates the rounded h (the contract bit is
    # forward-only)
    ctx.save_for_backward(res_out if residual is not None else x, weight, mean, rstd)
    ctx.bias_dtype = None if bias is None else bias.dtype
    ctx.has_residual = residual is not None
    ctx.eps = eps
    ctx.set_materialize_grads(False)


def _ln_backward(ctx, dy, d_mean, d_rstd, d_res_out):
    x, weight, mean, rstd = ctx.saved_tensors
    dx = dw = db = None
    if dy is not None and ctx.eps == 0:  # the saved rstd may have overflowed: see _eps0_rms_bwd
        dx, dw, db = _eps0_ln_bwd(dy, x, weight, ctx.bias_dtype is not None)
    elif dy is not None:
        dx, dw, db = torch.ops.normlab.layer_norm_bwd(dy.contiguous(), x, weight, mean, rstd)
    if d_mean is not None or d_rstd is not None:
        dx = _add(dx, _ln_stats_vjp(x, mean, rstd, d_mean, d_rstd))
    if ctx.has_residual:  # residual_out = h is an output too: its gradient joins dy's
        dx = _add(dx, d_res_out)
    db = None if ctx.bias_dtype is None or db is None else db.to(ctx.bias_dtype)
    return dx, _cast(dw, weight), db, None, dx if ctx.has_residual else None, None
# --8<-- [end:autograd]


# --- the backward ops' own backward: the VJP of their reference math -----------------------------------

def _rms_bwd_setup(ctx, inputs, output):
    dy, x, weight, rstd, convention = inputs
    ctx.save_for_backward(dy, x, weight, rstd)
    ctx.convention = convention
    ctx.set_materialize_grads(False)


def _rms_bwd_backward(ctx, g_dx, g_dw):
    dy, x, weight, rstd = ctx.saved_tensors
    if weight is None:
        g_dw = None
    grads = _vjp(lambda a, b, c, d: rms_bwd_math(a, b, c, d, ctx.convention), (dy, x, weight, rstd),
                 (g_dx, g_dw))
    return (*(_cast(g, p) for g, p in zip(grads, (dy, x, weight, rstd))), None)


def _ln_bwd_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)
    ctx.set_materialize_grads(False)


def _ln_bwd_backward(ctx, g_dx, g_dw, g_db):
    dy, x, weight, mean, rstd = ctx.saved_tensors
    if weight is None:
        g_dw = None
    primals = (dy, x, weight, mean, rstd)
    grads = _vjp(ln_bwd_math, primals, (g_dx, g_dw, g_db))
    return tuple(_cast(g, p) for g, p in zip(grads, primals))


def register() -> None:
    """Register every autograd formula (called once, when the library is loaded)."""
    torch.library.register_autograd("normlab::rms_norm_fwd", _rms_backward, setup_context=_rms_setup)
    torch.library.register_autograd("normlab::layer_norm_fwd", _ln_backward, setup_context=_ln_setup)
    torch.library.register_autograd("normlab::rms_norm_bwd", _rms_bwd_backward, setup_context=_rms_bwd_setup)
    torch.library.register_autograd("normlab::layer_norm_bwd", _ln_bwd_backward, setup_context=_ln_bwd_setup)
