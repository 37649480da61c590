"""How the kit calls a function under test and the model's own norm on a probe: the pieces
:mod:`~reference_impl.check.kit`, :mod:`~reference_impl.check.diagnosis` and
:mod:`~reference_impl.check.consistency` share (the calling protocol is in the kit's docstring)."""
from __future__ import annotations

import copy

import numpy as np
import torch

from . import matching as M
from .models import Target, hf_module

_EPS_ATTRS = ("eps", "variance_epsilon", "epsilon")


def module_for(fn: torch.nn.Module, p: M.Probe, target: Target, weight=None, requires_grad=False):
    """A copy of the module ``fn`` holding the probe's weight (and bias) in its own parameters, in the
    probe's dtypes, and the model's eps; returns ``(module, [its weight, its bias])`` (the parameters the
    gradients are taken through)."""
    m = copy.deepcopy(fn)
    w = p.weight if weight is None else weight
    params = []
    for name, t in (("weight", w), ("bias", p.bias)):
        if t is None:
            continue
        mine = getattr(m, name, None)
        if not isinstance(mine, torch.Tensor):
            raise TypeError(f"the module {type(fn).__name__} has no tensor {name!r}, but {target.name}'s norm has one")
        with torch.no_grad():
            mine.data = t.detach().clone()
        if isinstance(mine, torch.nn.Parameter):
            mine.requires_grad_(requires_grad)
        params.append(mine)
    for attr in _EPS_ATTRS:
        if isinstance(getattr(m, attr, None), float):
            setattr(m, attr, p.eps)
    return m, params


def call(fn, p: M.Probe, target: Target, residual=False, x=None, weight=None):
    """Call ``fn`` on a probe by the protocol of the module docstring (``x``/``weight`` replace the probe's,
    e.g. by tensors that require grad)."""
    x = p.x if x is None else x
    w = p.weight if weight is None else weight
    if isinstance(fn, torch.nn.Module):
        m, _ = module_for(fn, p, target, w)
        if p.gate is not None:
            return m(x, p.gate)
        return m(x, p.residual) if residual else m(x)
    if target.kind == "gated_rms":
        return fn(x, w, p.gate, p.eps)
    if residual:
        return fn(x, p.residual, w, p.eps)
    if target.kind == "layer":
        return fn(x, w, p.bias, p.eps)
    if target.kind == "l2":
        return fn(x, p.eps)
    return fn(x, w, p.eps)


def truth(target: Target, p: M.Probe, residual=False, use_hf=True):
    """The model's output on a probe: its own module from transformers when it can be built, else the
    catalog's replay of its casting order (tested bit-identical to the modules). Returns (y, s, what)."""
    from .matching import _runner, candidate_list

    s = None
    x = p.x
    if residual:
        s = x + p.residual  # the decoder layer's "hidden_states = residual + hidden_states", in x's dtype
        x = s
    if use_hf:
        if target.kind == "gated_rms":
            from .roles import gated_module

            m = gated_module(target, x.shape[-1], p.weight)
        else:
            m = hf_module(target, x.shape[-1], p.weight, p.bias)
        if m is not None:
            with torch.no_grad():
                y = m.to(x.device)(x) if p.gate is None else m.to(x.device)(x, p.gate)
                return y, s, f"{target.norm_class} from the installed transformers"
    if target.kind == "gated_rms":
        from .roles import gated_truth

        with torch.no_grad():
            return gated_truth(target, p), s, f"the catalog's {target.convention} (a replay of the module's order)"
    cand = next(c for c in candidate_list(target.kind) if c.name == target.candidate)
    q = M.Probe(x, p.weight, p.bias, p.eps, p.label, p.gain, None, p.scale)
    with torch.no_grad():
        return _runner(cand, target.kind)(q), s, f"the catalog's {target.candidate} (a replay of the module's order)"


def reference_grads(target: Target, p: M.Probe, dy) -> list:
    """The float64 gradients of the target's math on a probe and their derived bounds:
    ``[(dx, bound), (dweight, bound), (dbias, bound)]`` (None where the norm has no such input); for a gated
    norm ``[(dx, bound), (dweight, bound), (dgate, bound)]`` (:func:`reference_impl.check.roles.gated_reference_grads`)."""
    from .. import oracle as O
    from .. import tolerances as T

    if target.kind == "gated_rms":
        from .roles import gated_reference_grads

        return gated_reference_grads(target, p, dy)
    xd, dyd = p.x.detach().cpu().double().numpy(), dy.detach().cpu().double().numpy()
    if target.kind == "rms":
        eff = p.effective_gain()
        dx64, dw64 = O.rms_norm_backward_placed(dyd, xd, None if eff is None else eff.cpu().double().numpy(),
                                                p.eps, target.placement)
        bdx, bdw = T.convention_backward_bounds(dy.cpu(), p.x.cpu(), None if p.weight is None else p.weight.cpu(),
                                                p.eps, target.convention, target.placement, extra_low=2,
                                                w_low_rows=True)
        return [(dx64, bdx + range_terms(target, p, dy, 2)), (dw64, bdw), (None, None)]
    b = None if p.bias is None else p.bias.cpu()
    w = None if p.weight is None else p.weight.cpu()  # OLMo's LayerNorm has neither gain nor bias
    dx64, dw64, db64 = O.layer_norm_backward(dyd, xd, None if w is None else w.double().numpy(),
                                             None if b is None else b.double().numpy(), p.eps)
    bdx, bdw, bdb = T.ln_family_backward_bounds(dy.cpu(), p.x.cpu(), w, b, p.eps,
                                                extra_low=2, w_low_rows=True)
    return [(dx64, bdx + range_terms(target, p, dy, 2)), (dw64, bdw), (db64, bdb)]


def range_terms(target: Target, p: M.Probe, dy, extra_low: int) -> np.ndarray:
    """What the backward bounds of :mod:`reference_impl.tolerances` leave out at the ends of the range, added
    to dx's bound: that analysis charges every rounding relative to its result, which holds in the normal
    range only. The kit's wide probes scale rows from 1e-3 sqrt(eps) to the edge where a float32 sum of
    squares would overflow, and there two roundings are absolute instead (eta_c: half the smallest
    subnormal of the dtype, 2**-150 for float32):

    - the term through the statistic. torch's backward of ``rsqrt(ms + eps)`` forms ``-0.5 grad r**3``;
      ``r**3`` leaves float32's normal range once the RMS exceeds 2**42 (about 4e12), where its absolute
      error is eta_32, at most ``r**3`` itself (it flushes to zero): a relative error of
      ``min(1, eta_32 / r**3)`` on the whole term ``r c_i mean(g xhat)`` (RMSNorm) or
      ``r xhat_i mean(g xhat)`` (LayerNorm), charged to its envelope ``r |c_i| mean|g xhat|``; the per-row
      scalar ``grad / d`` may itself be subnormal, eta_32 times ``2 |x_i|`` (the mean square's derivative);
    - each of the ``extra_low`` roundings in x's dtype on g (e.g. ``dy * w`` in bfloat16) adds at most
      eta_x to every g_j where the product is subnormal in x's dtype; through dx_i = r (g_i - c_i mean(g
      xhat)) (LayerNorm: also - mean(g)) that is ``eta_x r (1 + |c_i| mean|xhat|)`` (LayerNorm: ``2 +``).

    A float32 row whose RMS is above 2**42 and d = 1 meets the first term with equality: its exact dx is
    almost 0 and the float32 one is r g, the statistic's term lost (tests/check/test_kit.py). Statistics in
    float64 (the ``reference`` convention with float64 x): no term."""
    xd = p.x.detach().cpu().double().numpy()
    cd = torch.float32 if p.x.dtype != torch.float64 else torch.float64
    eta_c = float(torch.finfo(cd).tiny) * float(torch.finfo(cd).eps) / 2
    eta_x = float(torch.finfo(p.x.dtype).tiny) * float(torch.finfo(p.x.dtype).eps) / 2
    layer = target.kind == "layer"
    xc = xd - xd.mean(-1, keepdims=True) if layer else xd
    r = 1.0 / np.sqrt((xc * xc).mean(-1, keepdims=True) + p.eps)
    xhat = xc * r
    gain = p.effective_gain()
    g = dy.detach().cpu().double().numpy() * (1.0 if gain is None else gain.cpu().double().numpy())
    if target.kind == "rms" and target.placement != "inside":
        s = np.sqrt((xd * xd).mean(-1, keepdims=True))
        c = np.where(s > 0, xd / np.where(s > 0, s, 1.0), 0.0)
    else:
        c = xhat
    stat = r * np.abs(c) * np.abs(g * xhat).mean(-1, keepdims=True)
    with np.errstate(over="ignore", divide="ignore"):
        rel = np.minimum(1.0, eta_c / r ** 3)
    out = rel * stat + 2 * eta_c * np.abs(xc)
    out = out + extra_low * eta_x * r * ((2.0 if layer else 1.0) + np.abs(c) * np.abs(xhat).mean(-1, keepdims=True))
    return out * (1.0 + 2.0 ** -20)  # the bound's own float64 evaluation


def grad_names(target: Target) -> tuple[str, str, str]:
    """The inputs whose gradients the kit checks, in the order of :func:`reference_grads`."""
    return ("x", "weight", "gate") if target.kind == "gated_rms" else ("x", "weight", "bias")


def grad_call(fn, p: M.Probe, target: Target, residual: bool):
    """``run(x, weight) -> (y, params)``: the function's output and the tensors its gain (and bias, or
    gate) gradients are taken through: for an ``nn.Module`` its own parameters, else the weight given (and
    the probe's bias, made to require grad); a gated norm's gate is made to require grad and comes last."""
    def run(x, w):
        z = None if p.gate is None else p.gate.detach().clone().requires_grad_(True)
        if isinstance(fn, torch.nn.Module):
            m, params = module_for(fn, p, target, w, requires_grad=True)
            if z is not None:
                return m(x, z), params + [z]
            return (m(x, p.residual) if residual else m(x)), params
        b = None if p.bias is None else p.bias.detach().clone().requires_grad_(True)
        q = M.Probe(p.x, p.weight, b, p.eps, p.label, p.gain, p.residual, p.scale, z)
        return call(fn, q, target, residual, x=x, weight=w), [t for t in (w, b, z) if t is not None]
    return run
