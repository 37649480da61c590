"""Gated RMSNorm: an RMSNorm whose output is multiplied by an activation of a second input, the gate.

Four casting orders are in use in transformers 5.24, and they differ in the last bits:

- ``gated_rms_norm.qwen3_next``, the gate after the normalization, rounded before the gain:
  ``y = round_x( round_x(x * rsqrt(mean(x**2) + eps)) * w * act(gate) )`` with the statistics and the gate
  product in float32 (transformers, models/qwen3_next/modeling_qwen3_next.py, ``Qwen3NextRMSNormGated``;
  the same code in qwen3_5, qwen3_5_moe, olmo_hybrid and qwen4_exp). The product ``w * round_x(...)`` is
  taken in the promoted dtype of the two: float32 for a float32 gain, x's dtype for a gain stored in it.
- ``gated_rms_norm.kimi_linear``, the gate after the normalization, all in float32 with the gain cast to
  float32, one rounding at the end (transformers, models/kimi_linear/modeling_kimi_linear.py,
  ``KimiLinearRMSNormGated``; the same code in bailing_hybrid, lara_mini, glm5_next and falcon_h1 with its
  default ``norm_before_gate=True``).
- ``gated_rms_norm.mamba2``, the gate before the normalization: ``x`` in float32 times ``silu(gate)`` in
  float32, one RMS per group of ``d // groups`` features, rounded to x's dtype, then times the gain in the
  promoted dtype (transformers, models/mamba2/modeling_mamba2.py, ``MambaRMSNormGated``; the same code in
  bamba, granitemoehybrid, nemotron_h and zamba2). Here the gate changes what eps does: it scales x before
  the mean square is taken.
- ``gated_rms_norm.falcon_h1``, the gate before the normalization with no rounding before the gain:
  ``x * silu(gate)`` in float32, one RMS per group, times the gain, all in float32, one rounding to x's
  dtype at the end (transformers, models/falcon_h1/modeling_falcon_h1.py, ``FalconH1RMSNormGated`` built
  with ``norm_before_gate=False``, as ``FalconH1Mixer`` builds it from ``config.mamba_norm_before_gate``).

``activation`` is ``"silu"`` (``z * sigmoid(z)``) or ``"sigmoid"``: the models pick it per class. All three
compute in float32 whatever x's dtype (float64 input too, as the model code does); a float64 twin of each
is used for the gradient checks. Shapes: ``x`` and ``gate`` ``(..., d)`` of one dtype, ``weight`` ``(d,)``;
the result has x's shape and the dtype the model code gives (x's for the first two, the promotion of the
gain's and x's for the Mamba-2 order).
"""
from __future__ import annotations

import numpy as np
import torch

from .._checks import check_eps, check_input, check_param, eps_limit
from . import gated_formulas as GF
from ._bounds import rms_like, u
from .spec import BadInput, NormSpec, NotApplicable, common_bad, gain, randn, replace_input, set_param

ACTIVATIONS = ("silu", "sigmoid")
PAGE = "norms-gated.md"
_T = "transformers, models/{0}/modeling_{0}.py ({1})"


def _act(name, z):
    return torch.nn.functional.silu(z) if name == "silu" else torch.sigmoid(z)


def _check(x, weight, gate, eps, activation, groups=1):
    check_input(x)
    check_input(gate, "gate")
    if gate.shape != x.shape:
        raise ValueError(f"gate has shape {tuple(gate.shape)} but x has shape {tuple(x.shape)}; the gate "
                         "multiplies x element by element")
    if gate.device != x.device:
        raise ValueError(f"gate is on {gate.device} but x is on {x.device}")
    if weight is None:
        raise TypeError("weight must be a torch.Tensor: the gated norms of these models always have a gain")
    check_param(weight, x, "weight")
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; the known ones are {', '.join(ACTIVATIONS)}")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ValueError(f"groups must be a positive int, got {groups!r}")
    if x.shape[-1] % groups:
        raise ValueError(f"the last dimension of x ({x.shape[-1]}) is not divisible by groups={groups}")
    # every order adds eps to a float32 mean square: float32's largest value is the most it can add
    return check_eps(eps, max_value=eps_limit(torch.float32))


# ------------------------------------------------------------------ the math (compute dtype as a parameter)

def _after_gate(x, weight, gate, eps, activation, round_first, cd):
    xf = x.to(cd)
    h = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    h = weight * h.to(x.dtype) if round_first else weight.to(cd) * h
    return (h * _act(activation, gate.to(cd))).to(x.dtype)


def _before_gate(x, weight, gate, eps, groups, cd, round_first=True):
    if round_first:  # Mamba-2 casts x first; Falcon-H1 multiplies x as it is (a float64 x: a float64 product)
        xf = x.to(cd) * torch.nn.functional.silu(gate.to(cd))
    else:
        xf = (x * torch.nn.functional.silu(gate.to(cd))).to(cd)
    xg = xf.reshape(*xf.shape[:-1], groups, xf.shape[-1] // groups)
    h = (xg * torch.rsqrt(xg.pow(2).mean(-1, keepdim=True) + eps)).reshape(xf.shape)
    if round_first:
        return weight * h.to(x.dtype)
    # the gain in its own dtype times the float32 row (promoted), then one rounding to x's dtype
    return (weight * h).to(x.dtype)


def qwen3_next_gated_rms_norm(x, weight, gate, eps=1e-6, activation="silu"):
    """Qwen3-Next's order: normalize in float32, round to x's dtype, times ``weight``, times
    ``act(gate)`` in float32, round once to x's dtype. eps inside the root."""
    eps = _check(x, weight, gate, eps, activation)
    return _after_gate(x, weight, gate, eps, activation, True, torch.float32)


def kimi_linear_gated_rms_norm(x, weight, gate, eps=1e-6, activation="sigmoid"):
    """Kimi-Linear's order: normalize, times ``weight`` cast to float32, times ``act(gate)``, all in float32,
    then one rounding to x's dtype. eps inside the root."""
    eps = _check(x, weight, gate, eps, activation)
    return _after_gate(x, weight, gate, eps, activation, False, torch.float32)


def mamba2_gated_rms_norm(x, weight, gate, eps=1e-6, groups=1):
    """Mamba-2's order: ``x * silu(gate)`` in float32, one RMS per group of ``d // groups`` features (eps
    inside the root), round to x's dtype, then times ``weight`` (promoted dtype)."""
    eps = _check(x, weight, gate, eps, "silu", groups)
    return _before_gate(x, weight, gate, eps, groups, torch.float32)


def falcon_h1_gated_rms_norm(x, weight, gate, eps=1e-6, groups=1):
    """Falcon-H1's order with ``mamba_norm_before_gate=False``: ``x * silu(gate)`` in float32, one RMS per
    group of ``d // groups`` features (eps inside the root), times ``weight``, all in float32, then one
    rounding to x's dtype."""
    eps = _check(x, weight, gate, eps, "silu", groups)
    return _before_gate(x, weight, gate, eps, groups, torch.float32, round_first=False)


# ------------------------------------------------------------------ oracle, bound, inputs

def _sigmoid64(z):
    return 1.0 / (1.0 + np.exp(-z))


def _act64(name, z):
    return z * _sigmoid64(z) if name == "silu" else _sigmoid64(z)


def _normalized64(x, eps, groups=1):
    xg = x.reshape(*x.shape[:-1], groups, x.shape[-1] // groups)
    return (xg / np.sqrt(np.mean(xg * xg, -1, keepdims=True) + eps)).reshape(x.shape)


def _oracle_after(x, weight, gate, eps, activation):
    return _normalized64(x, eps) * weight * _act64(activation, gate)


def _oracle_before(x, weight, gate, eps, groups):
    return _normalized64(x * _act64("silu", gate), eps, groups) * weight


def _eta(dtype) -> float:
    """Half the smallest positive subnormal of ``dtype``: the absolute error a rounding to nearest can add
    below the normal range (fl(a) = a (1 + delta) + eta, |delta| <= u, |eta| <= this)."""
    return float(torch.finfo(dtype).tiny) * u(dtype)


def _bound(oracle, group_of, *, promoted_out=False, rounds_normalized=False):
    """|err| <= the RMS analysis of the normalization (float32 statistics, output in x's dtype) plus the
    roundings after it: the normalized rows to x's dtype, a gain product in x's dtype when the gain is stored
    there, the activation and the gate product in float32 (a few float32 roundings; 8 u_32 covers silu's
    exp, divide and product), the final rounding. Charged against |y|.

    The subnormal floor: an order that rounds the normalized row to x's dtype before the gain
    (``rounds_normalized``: Qwen3-Next, Mamba-2) adds up to eta_x (half of x's smallest subnormal) to each
    normalized element, which the gain (and the gate's activation, gate after) then multiplies: eta_x |w| |a|,
    plus eta_x |a| for a gain product taken in x's dtype. A float16 row whose gated input is tiny next to
    its RMS lands there (tests/core/test_gated_norms.py shows a case the relative terms alone miss). The
    float32 steps add the same with eta_32 (4 of them at most); the final rounding's floor is in rms_like."""
    def bound(inputs, params):
        x, w = inputs["x"], inputs["weight"]
        args = {k: v.detach().double().numpy() for k, v in inputs.items()}
        y = np.abs(oracle(**args, **params))
        out = torch.promote_types(x.dtype, w.dtype) if promoted_out else x.dtype
        extra = 2 * u(x.dtype) + u(out) + 8 * u(torch.float32)
        total = rms_like(y, group_of(x.shape[-1], params), x.dtype, out, compute=torch.float32) + extra * y
        wa = np.abs(args["weight"])
        a = np.abs(_act64(params["activation"], args["gate"])) if "activation" in params else 1.0
        floor = 4 * _eta(torch.float32) * (wa + 1.0) * a
        if rounds_normalized:
            floor = floor + _eta(x.dtype) * (wa + float(w.dtype == x.dtype)) * a
        return total + floor * (1.0 + 16 * u(torch.float32))
    return bound


def _inputs(shape, dtype, g):
    # the gate spread over [-6, 6]: silu and sigmoid both bend there, and both stay away from 0 and 1
    return {"x": randn(shape, dtype, g, 2.0), "weight": gain(shape[-1], dtype, g),
            "gate": randn(shape, dtype, g, 2.0)}


def _twin_after(round_first):
    def twin(x, weight, gate, eps, activation):
        return _after_gate(x, weight, gate, eps, activation, round_first, torch.float64)
    return twin


def _twin_before(x, weight, gate, eps, groups):
    return _before_gate(x, weight, gate, eps, groups, torch.float64)


def _twin_before_float32_gain(x, weight, gate, eps, groups):
    return _before_gate(x, weight, gate, eps, groups, torch.float64, round_first=False)


# ------------------------------------------------------------------ the entries

def _match(fn, **fixed):
    """``match_run(probe, **variant options)``: ``fn`` on the probe's x, gain, gate and eps, with ``fixed``
    and the variant's options as keywords (reference_impl.check.matching)."""
    def run(p, **options):
        if p.gate is None:
            raise NotApplicable("no gate")
        if p.weight is None or p.gain != "w":
            raise NotApplicable("the gated norms store the gain itself")
        return fn(p.x, p.weight, p.gate, p.eps, **fixed, **options)
    return run


_BAD = common_bad(("weight",)) + (
    BadInput("gate of another shape", replace_input("gate", lambda z: z[..., :1]), ValueError, "gate has shape"),
    BadInput("gate not a tensor", replace_input("gate", lambda z: z.tolist()), TypeError, "torch.Tensor"),
    BadInput("no weight", replace_input("weight", None), TypeError, "always have a gain"),
)
# what the gate's placement decides: the oracle, the features one RMS spans, the parameter a bad call gets
# wrong, and the matching variants (one per activation where the activation is a parameter)
_AFTER = dict(oracle=_oracle_after, group_of=lambda d, p: d,
              bad=BadInput("unknown activation", set_param("activation", "gelu"), ValueError, "activation"),
              variants=tuple((a, {"activation": a}) for a in ACTIVATIONS))
_BEFORE = dict(oracle=_oracle_before, group_of=lambda d, p: d // p["groups"],
               bad=BadInput("groups not dividing d", set_param("groups", 4), ValueError, "not divisible"),
               variants=())


def _entry(name, title, source, reference, gate, *, params, twin, conventions, rank, says, formulas, families=(),
           match_fixed=None, promoted_out=False, rounds_normalized=False):
    """One gated entry from what sets it apart: its name, title and citation, its reference, the gate's
    placement (``_AFTER`` or ``_BEFORE``), its parameters, float64 twin, conventions, rank among the matching
    candidates, the sentence matching says of it and its registry formulas (``(ids, builder)``, from
    :mod:`reference_impl.norms.gated_formulas`); ``promoted_out`` / ``rounds_normalized`` as in
    :func:`_bound`. Inputs, gradients, bad calls and page are shared."""
    return NormSpec(
        name=name, title=title, source=source, reference=reference, oracle=gate["oracle"],
        bound=_bound(gate["oracle"], gate["group_of"], promoted_out=promoted_out,
                     rounds_normalized=rounds_normalized), make_inputs=_inputs, params=params,
        conventions=conventions, families=families, grads=("x", "weight", "gate"), float64_exact=False,
        grad_twin=twin, bad_inputs=_BAD + (gate["bad"],), page=PAGE, match_kind="gated_rms",
        match_run=_match(reference, **(match_fixed or {})), match_variants=gate["variants"], match_rank=rank,
        match_description=says, formulas=formulas[0], build_formulas=formulas[1],
    )


SPECS = (
    _entry("gated_rms_norm.qwen3_next", "Gated RMSNorm, gate after the norm, rounded before the gain (Qwen3-Next)",
           _T.format("qwen3_next", "Qwen3NextRMSNormGated"), qwen3_next_gated_rms_norm, _AFTER,
           params={"eps": 1e-6, "activation": "silu"}, twin=_twin_after(True),
           conventions=("rounded before the gain", "gate after"), families=("Qwen3-Next",), rank=10,
           rounds_normalized=True,
           formulas=(GF.after_ids("silu"), lambda: GF.after_formulas("silu")),
           says="normalizes in float32, rounds to x's dtype, multiplies by the gain and by the gate's activation "
                "in float32, then rounds once: Qwen3-Next's gated order"),
    _entry("gated_rms_norm.kimi_linear", "Gated RMSNorm, gate after the norm, all in float32 (Kimi-Linear)",
           _T.format("kimi_linear", "KimiLinearRMSNormGated"), kimi_linear_gated_rms_norm, _AFTER,
           params={"eps": 1e-6, "activation": "sigmoid"}, twin=_twin_after(False),
           conventions=("float32 gain", "gate after"), rank=11,
           formulas=(GF.after_ids("sigmoid"), lambda: GF.after_formulas("sigmoid")),
           says="normalizes, multiplies by the float32 gain and by the gate's activation, all in float32, then "
                "rounds once: Kimi-Linear's gated order"),
    _entry("gated_rms_norm.mamba2", "Gated RMSNorm, gate before the norm, one RMS per group (Mamba-2)",
           _T.format("mamba2", "MambaRMSNormGated") + "; Dao and Gu, arXiv:2405.21060", mamba2_gated_rms_norm,
           _BEFORE, params={"eps": 1e-6, "groups": 1}, twin=_twin_before,
           conventions=("rounded before the gain", "gate before"), families=("Mamba-2",), rank=12,
           promoted_out=True, rounds_normalized=True,
           formulas=(GF.before_ids(), GF.before_formulas),
           says="multiplies x by silu(gate) in float32, normalizes, rounds to x's dtype, then multiplies by the "
                "gain: Mamba-2's order, the gate before the normalization", match_fixed={"groups": 1}),
    _entry("gated_rms_norm.falcon_h1", "Gated RMSNorm, gate before the norm, all in float32 (Falcon-H1)",
           _T.format("falcon_h1", "FalconH1RMSNormGated, norm_before_gate=False"), falcon_h1_gated_rms_norm,
           _BEFORE, params={"eps": 1e-6, "groups": 1}, twin=_twin_before_float32_gain,
           conventions=("float32 gain", "gate before"), rank=13,
           formulas=(GF.before_ids(), None),  # Mamba-2's math, rounded otherwise: its formulas, built once there
           says="multiplies x by silu(gate), normalizes and multiplies by the gain, all in float32, then rounds "
                "once: Falcon-H1's order with the gate before the normalization", match_fixed={"groups": 1}),
)
