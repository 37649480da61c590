"""Norms applied per attention head: the value norm, QK-norms built on LayerNorm (one gain shared by the heads,
or a gain per head), and the L2 normalization of q and k inside the gated delta rule.

- ``value_norm`` (Gemma 3n, Gemma 4): the values, viewed ``(..., heads, head_dim)``, each head divided by its
  RMS over ``head_dim``, without a gain: ``Gemma3nRMSNorm(head_dim, with_scale=False)`` in
  transformers, models/gemma3n/modeling_gemma3n.py, and ``Gemma4RMSNorm(..., with_scale=False)`` in
  models/gemma4/modeling_gemma4.py (the attention's ``v_norm``). float32 statistics, ``x * (ms + eps)**-0.5``
  with ``torch.pow``, one rounding to x's dtype.
- ``qk_norm.layer_norm`` (Persimmon, Fuyu): ``nn.LayerNorm(head_dim)`` on the queries and keys viewed
  ``(..., heads, head_dim)``, one gain and bias shared by the heads (models/persimmon/modeling_persimmon.py,
  ``q_layernorm`` / ``k_layernorm``).
- ``qk_norm.layer_per_head_gain.<order>``: LayerNorm over ``head_dim`` with a separate gain (and bias) for each
  head, a ``(heads, head_dim)`` weight, in three orders: ``stablelm`` (one ``nn.LayerNorm`` per head,
  ``StableLmLayerNormPerHead``, models/stablelm/modeling_stablelm.py), ``chameleon`` (the statistics without
  affine in x's dtype with eps fixed at 1e-5, then ``* weight + bias``, two more roundings,
  ``ChameleonLayerNorm``, models/chameleon/modeling_chameleon.py) and ``cohere`` (float32 two-pass
  statistics, the gain in float32, one rounding: ``CohereLayerNorm(hidden_size=(heads, head_dim))``,
  models/cohere/modeling_cohere.py, built when the config sets ``use_qk_norm``).
- ``gated_delta_l2_norm.<order>`` (Qwen3-Next, Qwen3.5, Kimi Linear): q and k divided by their Euclidean length
  over ``head_dim`` with eps 1e-6 added to the sum of squares, after the cast to float32, before the gated
  delta rule: ``x * rsqrt(sum x**2 + eps)`` (``l2norm`` in models/qwen3_next/modeling_qwen3_next.py) or
  ``x / sqrt(sum x**2 + eps)`` (``l2norm`` in models/kimi_linear/modeling_kimi_linear.py). The result stays
  in float32, as the recurrence that follows runs in it.

All are plain torch operations: autograd gives every derivative. Shapes: ``x`` ``(..., heads, head_dim)``
where a head count matters; the norm is always over the last dimension.
"""
from __future__ import annotations

import numpy as np
import sympy as sp
import torch
import torch.nn.functional as F

from .. import symbolic as S
from .. import tolerances as _tol
from .._checks import check_eps, check_input, check_param, compute_dtype, eps_limit
from ._bounds import rms_like, u
from .spec import BadInput, NormSpec, NotApplicable, common_bad, randn, replace_input, set_param

_T = "transformers, models/{0}/modeling_{0}.py ({1})"
F32 = torch.float32


# ------------------------------------------------------------------ the math

# --8<-- [start:value_norm]
def value_norm(x, eps=1e-6):
    """Gemma 3n / Gemma 4's value norm: each head of the values ``x`` (``(..., head_dim)``) divided by its
    RMS, no gain.

    float32 statistics (float64 input is computed in float32, as the model does), ``(ms + eps) ** -0.5``
    with ``torch.pow`` as the model writes it, one rounding to x's dtype. eps inside the root.
    """
    check_input(x)
    eps = check_eps(eps, max_value=eps_limit(F32))
    xf = x.to(F32)
    return (xf * torch.pow(xf.pow(2).mean(-1, keepdim=True) + eps, -0.5)).to(x.dtype)
# --8<-- [end:value_norm]


def _check_heads(x, weight, bias, name="x"):
    check_input(x, name)
    if x.dim() < 2:
        raise ValueError(f"{name} must be (..., heads, head_dim); got shape {tuple(x.shape)}")
    for p, pname in ((weight, "weight"), (bias, "bias")):
        check_param(p, x, pname, tuple(x.shape[-2:]), what="a gain per head (heads, head_dim)")


LN_HEAD_ORDERS = ("stablelm", "chameleon", "cohere")
CHAMELEON_EPS = 1e-5   # ChameleonLayerNorm.forward passes eps=1e-5 whatever it was built with


def per_head_gain_layer_norm(x, weight, bias=None, eps=1e-5, *, order="stablelm"):
    """LayerNorm over ``head_dim`` with a gain (and bias) per head: ``x`` ``(..., heads, head_dim)``,
    ``weight`` and ``bias`` ``(heads, head_dim)``. ``order``: ``stablelm`` (``F.layer_norm`` with each
    head's own affine, one rounding), ``chameleon`` (``F.layer_norm`` without affine and eps 1e-5, then
    ``* weight + bias`` in the promoted dtype) or ``cohere`` (float32 two-pass statistics, gain in float32,
    one rounding to x's dtype; Cohere has no bias). Returns x's shape."""
    if order not in LN_HEAD_ORDERS:
        raise ValueError(f"unknown order {order!r}; the known ones are {', '.join(LN_HEAD_ORDERS)}")
    _check_heads(x, weight, bias)
    if weight is None:
        raise TypeError("weight must be a torch.Tensor: a per-head gain is what these norms add")
    if order == "chameleon":
        if eps != CHAMELEON_EPS:
            raise ValueError(f"eps must be {CHAMELEON_EPS} for the chameleon order (the model fixes it), got {eps!r}")
        y = F.layer_norm(x, x.shape[-1:], None, None, CHAMELEON_EPS) * weight
        return y if bias is None else y + bias
    if order == "cohere":
        eps = check_eps(eps, max_value=eps_limit(F32))
        if bias is not None:
            raise ValueError("the cohere order has no bias (CohereLayerNorm has none)")
        xf = x.to(F32)
        xc = xf - xf.mean(-1, keepdim=True)
        return (weight.to(F32) * (xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + eps))).to(x.dtype)
    eps = check_eps(eps, max_value=eps_limit(compute_dtype(x)))
    heads = [F.layer_norm(x[..., h, :], x.shape[-1:], weight[h], None if bias is None else bias[h], eps)
             for h in range(x.shape[-2])]
    return torch.stack(heads, dim=-2)


# --8<-- [start:layer_qk_norm]
def layer_qk_norm(q, k, q_weight, q_bias, k_weight, k_bias, eps=1e-5):
    """LayerNorm QK-norm (Persimmon, Fuyu): ``torch.nn.LayerNorm(head_dim)`` on ``q`` and ``k`` viewed
    ``(..., heads, head_dim)``, one ``(head_dim,)`` gain and bias each, shared by the heads. Returns
    ``(q_normed, k_normed)`` in the input shapes and dtypes (statistics in float32 for half inputs, as
    ``torch.nn.functional.layer_norm`` computes them)."""
    out = []
    for t, w, b, name in ((q, q_weight, q_bias, "q"), (k, k_weight, k_bias, "k")):
        check_input(t, name)
        for p, pname in ((w, f"{name}_weight"), (b, f"{name}_bias")):
            check_param(p, t, pname)  # (head_dim,), float, on the device of its tensor
        out.append(F.layer_norm(t, t.shape[-1:], w, b, check_eps(eps, max_value=eps_limit(compute_dtype(t)))))
    return out[0], out[1]
# --8<-- [end:layer_qk_norm]


L2_ORDERS = ("qwen3_next", "kimi_linear")


def gated_delta_l2_norm(x, eps=1e-6, *, order="qwen3_next"):
    """q or k of the gated delta rule divided by its Euclidean length over the last dimension, eps 1e-6
    added to the sum of squares (not ``max(||x||, eps)`` as in ``F.normalize``). Computed on x cast to
    float32 (as the models cast before it) and returned in float32: ``qwen3_next`` multiplies by
    ``rsqrt(sum + eps)``, ``kimi_linear`` divides by ``sqrt(sum + eps)``."""
    if order not in L2_ORDERS:
        raise ValueError(f"unknown order {order!r}; the known ones are {', '.join(L2_ORDERS)}")
    check_input(x)
    eps = check_eps(eps, max_value=eps_limit(F32))
    return _l2(x.to(F32), eps, order)


def _l2(xf, eps, order):
    ss = (xf * xf).sum(-1, keepdim=True) + eps
    return xf * torch.rsqrt(ss) if order == "qwen3_next" else xf / torch.sqrt(ss)


# ------------------------------------------------------------------ formulas (value norm, delta-rule L2)

def _formulas(prefix, what, scale):
    """``y_i = x_i r`` with ``r = 1 / sqrt(scale * sum_j x_j**2 + eps)`` (scale ``1/d``: the RMS; ``1``: the
    length), and its input gradient, derived by SymPy and shown in closed form."""
    i, j, x, dy, d, r, xhat = S.i, S.j, S.x, S.dy, S.d, S.r, S.xhat
    R = 1 / sp.sqrt(scale * S.sum_over(x[j] ** 2) + S.eps)
    defs = {r: R, xhat: lambda q: x[q] * R}
    norm = 1 / d if scale != 1 else 1
    F_ = S.Formula
    return [
        F_(f"{prefix}.forward", f"{what}, forward (no gain)", sp.IndexedBase("y")[i], x[i] * r, defs, "definition"),
        F_(f"{prefix}.vjp_x", f"{what}, input gradient", sp.IndexedBase(r"\bar{x}")[i],
           r * (dy[i] - norm * xhat[i] * S.sum_over(dy[j] * xhat[j])), defs, "derived",
           derived=S.vjp(x[i] * R, x)),
    ]


def value_formulas():
    return _formulas("value_norm", "Value norm (RMS per head)", 1 / S.d)


def l2_formulas():
    return _formulas("delta_l2", "L2 normalization of q and k in the gated delta rule", 1)


# ------------------------------------------------------------------ oracles and bounds

def _v_oracle(x, eps):
    return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps)


def _v_bound(inputs, params):
    x = inputs["x"]
    y = np.abs(_v_oracle(x.double().numpy(), **params))
    # the RMS analysis with float32 statistics; pow(., -0.5) charged one float32 rounding more than rsqrt
    return rms_like(y, x.shape[-1], x.dtype, compute=F32) + u(F32) * y


def _l2_oracle(x, eps, order):
    return x / np.sqrt(np.sum(x * x, -1, keepdims=True) + eps)


def _l2_bound(inputs, params):
    x = inputs["x"]
    y = np.abs(_l2_oracle(x.double().numpy(), **params))
    # a sum (not a mean) of d squares: the RMS analysis over d values, output float32; x rounded to float32
    # first when it is float64, and the divide of the kimi order one float32 rounding more
    return rms_like(y, x.shape[-1], F32, F32, compute=F32) + 4 * u(F32) * y


def _ln64(x, eps):
    xc = x - x.mean(-1, keepdims=True)
    return xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + eps)


def _head_oracle(x, weight, eps, order, bias=None):
    y = _ln64(x, eps) * weight
    return y if bias is None else y + bias


def _head_bound(inputs, params):
    x, w, b = inputs["x"], inputs["weight"], inputs.get("bias")
    order, eps = params["order"], params["eps"]
    if order == "stablelm":
        return _tol.ln_forward_bound(x, w, b, eps, x.dtype)
    if order == "cohere":
        compute = F32
        bound = _tol.ln_forward_bound(x, w, None, eps, x.dtype, compute=compute)
        if x.dtype == torch.float64:  # x rounded to float32 first (as the layer_norm.cohere entry charges it)
            xd = x.detach().double().numpy()
            r = 1 / np.sqrt(np.var(xd, -1, keepdims=True) + eps)
            bound = bound + u(F32) * np.abs(w.detach().double().numpy()) * r * (
                np.abs(xd) + np.mean(np.abs(xd), -1, keepdims=True))
        return bound
    # chameleon: LayerNorm without affine rounded to x's dtype, then the product and the sum, each rounded
    out = torch.promote_types(torch.promote_types(x.dtype, w.dtype), b.dtype if b is not None else w.dtype)
    wd = np.abs(w.detach().double().numpy())
    xhat = np.abs(_ln64(x.detach().double().numpy(), eps))
    y = np.abs(_head_oracle(x.detach().double().numpy(), w.detach().double().numpy(), eps, order,
                            None if b is None else b.detach().double().numpy()))
    plain = _tol.ln_forward_bound(x, None, None, eps, x.dtype)
    floor = 2 * float(torch.finfo(out).tiny) * u(out)
    return wd * plain * (1 + u(out)) + u(out) * (wd * xhat + y) * (1 + u(out)) + floor


def _qk_oracle(q, k, q_weight, q_bias, k_weight, k_bias, eps):
    return _ln64(q, eps) * q_weight + q_bias, _ln64(k, eps) * k_weight + k_bias


def _qk_bound(inputs, params):
    return tuple(_tol.ln_forward_bound(inputs[t], inputs[f"{t}_weight"], inputs[f"{t}_bias"], params["eps"],
                                       inputs[t].dtype) for t in ("q", "k"))


# ------------------------------------------------------------------ sample inputs, twins

HEAD_SHAPES = ((0, 2, 3), (1, 1, 1), (3, 2, 7), (2, 3, 33), (4, 2, 129))


def _x_inputs(shape, dtype, g):
    return {"x": randn(shape, dtype, g, 2.0)}


def _head_inputs(order):
    def make(shape, dtype, g):
        x = randn(shape, dtype, g, 2.0, 0.0 if dtype == torch.float16 else 3.0)  # an offset: centring must work
        out = {"x": x, "weight": randn(shape[-2:], dtype, g, 0.5, 1.0)}
        if order != "cohere":  # CohereLayerNorm has no bias
            out["bias"] = randn(shape[-2:], dtype, g, 0.3)
        return out
    return make


def _qk_inputs(shape, dtype, g):
    k_shape = shape[:-2] + (max(1, shape[-2] // 2), shape[-1])
    return {"q": randn(shape, dtype, g, 2.0, 1.0), "k": randn(k_shape, dtype, g, 2.0, 1.0),
            "q_weight": randn(shape[-1:], dtype, g, 0.5, 1.0), "q_bias": randn(shape[-1:], dtype, g, 0.3),
            "k_weight": randn(shape[-1:], dtype, g, 0.5, 1.0), "k_bias": randn(shape[-1:], dtype, g, 0.3)}


def _v_twin(x, eps):
    return x * torch.pow(x.pow(2).mean(-1, keepdim=True) + eps, -0.5)


def _l2_twin(x, eps, order):
    return _l2(x, eps, order)


def _cohere_twin(x, weight, eps, order, bias=None):
    xc = x - x.mean(-1, keepdim=True)
    return weight * (xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + eps))


# ------------------------------------------------------------------ the entries

_HEAD_BAD = (
    BadInput("x without a heads dimension", replace_input("x", lambda x: x[..., 0, :]), ValueError, "heads"),
    BadInput("weight of one head only", replace_input("weight", lambda w: w[0]), ValueError, "shape"),
    BadInput("unknown order", set_param("order", "llama"), ValueError, "known ones"),
)


def _head_entry(order, title, source, families=()):
    return NormSpec(
        name=f"qk_norm.layer_per_head_gain.{order}", title=title, source=source,
        reference=per_head_gain_layer_norm, oracle=_head_oracle, bound=_head_bound,
        make_inputs=_head_inputs(order), params={"eps": 1e-5, "order": order},
        conventions=(order, "gain per head"), families=families, shapes=HEAD_SHAPES,
        grads=("x", "weight") if order == "cohere" else ("x", "weight", "bias"),
        float64_exact=order != "cohere", grad_twin=_cohere_twin if order == "cohere" else None,
        bad_inputs=common_bad(("weight",), eps=order != "chameleon") + _HEAD_BAD,
        match_kind="layer_per_head", match_run=_match_heads(order), match_rank=30 + LN_HEAD_ORDERS.index(order),
    )


def _match_heads(order):
    """``match_run(probe)`` for a per-head class (reference_impl.check.matching): the probe's x is
    ``(rows, heads, head_dim)`` and its gain and bias ``(heads, head_dim)``, as the census feeds such a class."""
    def run(p):
        if p.x.dim() < 3 or p.weight is None or p.weight.dim() != 2 or p.gain != "w":
            raise NotApplicable("a per-head norm takes (rows, heads, head_dim) with a (heads, head_dim) gain")
        return per_head_gain_layer_norm(p.x, p.weight, p.bias, p.eps, order=order)
    return run


SPECS = (
    NormSpec(
        name="value_norm", title="Value norm: RMS per head without a gain (Gemma 3n, Gemma 4)",
        source=_T.format("gemma4", "Gemma4RMSNorm with_scale=False, v_norm") + "; "
               + _T.format("gemma3n", "Gemma3nRMSNorm with_scale=False, v_norm"),
        reference=value_norm, oracle=_v_oracle, bound=_v_bound, make_inputs=_x_inputs, params={"eps": 1e-6},
        conventions=("float32, one rounding", "no gain"), float64_exact=False, grad_twin=_v_twin,
        bad_inputs=common_bad(()) + (BadInput("eps above float32's maximum", set_param("eps", 1e39), ValueError, "eps"),),
        formulas=("value_norm.forward", "value_norm.vjp_x"), build_formulas=value_formulas,
    ),
    NormSpec(
        name="qk_norm.layer_norm", title="QK-norm with LayerNorm over head_dim, one gain and bias (Persimmon)",
        source=_T.format("persimmon", "q_layernorm, k_layernorm: nn.LayerNorm(head_dim)"),
        reference=layer_qk_norm, oracle=_qk_oracle, bound=_qk_bound, make_inputs=_qk_inputs,
        params={"eps": 1e-5}, conventions=("neox", "per_head"), shapes=HEAD_SHAPES,
        grads=("q", "k", "q_weight", "q_bias", "k_weight", "k_bias"),
        bad_inputs=(
            BadInput("q not a tensor", replace_input("q", lambda q: q.tolist()), TypeError, "torch.Tensor"),
            BadInput("k_weight of the wrong length", replace_input("k_weight", lambda w: torch.cat([w, w[:1]])),
                     ValueError, "shape"),
            BadInput("negative eps", set_param("eps", -1.0), ValueError, "eps"),
        ),
    ),
    _head_entry("stablelm", "QK-norm with a LayerNorm per head, one gain per head (StableLM)",
                _T.format("stablelm", "StableLmLayerNormPerHead")),
    _head_entry("chameleon", "QK-norm with per-head gain and bias applied after the LayerNorm (Chameleon)",
                _T.format("chameleon", "ChameleonLayerNorm")),
    _head_entry("cohere", "QK-norm with a (heads, head_dim) gain, float32 LayerNorm (Cohere, use_qk_norm)",
                _T.format("cohere", "CohereLayerNorm(hidden_size=(num_heads, head_dim))"), ("Cohere (Command R)",)),
    *(NormSpec(
        name=f"gated_delta_l2_norm.{order}",
        title=f"L2 normalization of q and k in the gated delta rule ({label})",
        source=_T.format(order, "l2norm, use_qk_l2norm_in_kernel=True"),
        reference=gated_delta_l2_norm, oracle=_l2_oracle, bound=_l2_bound, make_inputs=_x_inputs,
        params={"eps": 1e-6, "order": order}, conventions=(order, "no gain", "float32 out"),
        families=("Qwen3-Next",) if order == "qwen3_next" else (),
        float64_exact=False, grad_twin=_l2_twin,
        bad_inputs=common_bad(()) + (BadInput("unknown order", set_param("order", "fla"), ValueError, "known ones"),),
        formulas=("delta_l2.forward", "delta_l2.vjp_x"), build_formulas=l2_formulas if order == "qwen3_next" else None,
    ) for order, label in (("qwen3_next", "Qwen3-Next, rsqrt"), ("kimi_linear", "Kimi Linear, divide"))),
)
