"""The registry formulas of the gated RMSNorm entries (:mod:`reference_impl.norms.gated_rms_norm`).

Exact arithmetic, one group, eps inside the root; the casting orders that set the entries apart are not
part of the math. ``z`` is the gate (keyword ``gate`` when evaluated), ``sigmoid(a) = 1 / (1 + exp(-a))``
and ``silu(a) = a sigmoid(a)``, written out.

- gate after the norm (``gate_after_<act>``): ``y_i = gamma_i x_i act(z_i) / sqrt(ms + eps)``, ``ms`` the
  mean square of x; its input gradient is RMSNorm's with ``g_i = gamma_i dy_i act(z_i)``;
- gate before the norm (``gate_before_silu``): ``u_i = x_i silu(z_i)``, ``y_i = gamma_i u_i / sqrt(ms + eps)``
  with ``ms`` the mean square of u; its gradients go through ``u``'s: ``ubar_i = r (g_i - uhat_i sum_j g_j
  uhat_j / d)`` with ``g_i = gamma_i dy_i``, then ``xbar_i = ubar_i silu(z_i)``, ``zbar_i = ubar_i x_i
  silu'(z_i)``.

Every gradient is ``derived``: its ``derived`` field is what :func:`reference_impl.symbolic.vjp` returns
from the definition, and the shown closed form is proven equal to it for general d
(:meth:`~reference_impl.symbolic.Formula.holds`, tests/core/test_catalog.py).
"""
from __future__ import annotations

import sympy as sp

from .. import symbolic as S
from ..symbolic.algebra import sigmoid, silu, u, uhat, z

ACTS = {"silu": silu, "sigmoid": sigmoid}
SUFFIXES = ("forward", "vjp_x", "vjp_gate", "vjp_weight")


def _act_prime(act: str, a):
    """d act(a) / da, written with sigmoid: silu' = sigmoid (1 + a (1 - sigmoid)); sigmoid' = sigmoid (1 - sigmoid)."""
    if act == "silu":
        return sigmoid(a) * (1 + a * (1 - sigmoid(a)))
    return sigmoid(a) * (1 - sigmoid(a))


def _bar(name):
    return sp.IndexedBase(name)[S.i]


def after_ids(act: str) -> tuple:
    return tuple(f"gate_after_{act}.{s}" for s in ("forward", "g") + SUFFIXES[1:])


def before_ids() -> tuple:
    return ("gate_before_silu.gated_input", "gate_before_silu.mean_square") + tuple(
        f"gate_before_silu.{s}" for s in SUFFIXES)


def after_formulas(act: str) -> list:
    """Gate after the norm, ``y_i = gamma_i x_i act(z_i) / sqrt(ms + eps)``, with act ``silu`` or ``sigmoid``."""
    i, j, x, gam, dy, d, r, xhat, g = S.i, S.j, S.x, S.gamma, S.dy, S.d, S.r, S.xhat, S.g
    fn = ACTS[act]
    y_def = S.RMS_Y * fn(z[i])
    defs = {**S.RMS_DEFS, g: lambda q: gam[q] * dy[q] * fn(z[q])}
    pre = f"gate_after_{act}"
    F = S.Formula
    return [
        F(f"{pre}.forward", f"Gated RMSNorm forward, gate after the norm, {act}", sp.IndexedBase("y")[i],
          gam[i] * x[i] * fn(z[i]) / sp.sqrt(S.ms + S.eps), defs, "definition", order="rev-lex"),
        F(f"{pre}.g", f"What reaches the normalized row (gate after, {act})", g[i], gam[i] * dy[i] * fn(z[i]), defs,
          "definition"),
        F(f"{pre}.vjp_x", f"Gated RMSNorm input gradient (gate after, {act}; g_i = gamma_i dy_i {act}(z_i))",
          _bar(r"\bar{x}"), r * (g[i] - xhat[i] * S.sum_over(g[j] * xhat[j]) / d), defs, "derived",
          derived=S.vjp(y_def, x)),
        F(f"{pre}.vjp_gate", f"Gated RMSNorm gate gradient (gate after, {act})", _bar(r"\bar{z}"),
          dy[i] * gam[i] * xhat[i] * _act_prime(act, z[i]), defs, "derived", derived=S.vjp(y_def, z),
          order="rev-lex"),
        F(f"{pre}.vjp_weight", f"Gated RMSNorm gain gradient (gate after, {act}; summed over rows)",
          _bar(r"\bar{\gamma}"), dy[i] * xhat[i] * fn(z[i]), defs, "derived", derived=S.vjp(y_def, gam),
          reduce_rows=True),
    ]


def before_formulas() -> list:
    """Gate before the norm (one group), ``u_i = x_i silu(z_i)``, ``y_i = gamma_i u_i / sqrt(ms_u + eps)``."""
    i, j, x, gam, dy, d, r, g, ms, eps = S.i, S.j, S.x, S.gamma, S.dy, S.d, S.r, S.g, S.ms, S.eps
    U = lambda q: x[q] * silu(z[q])                        # noqa: E731
    MS_U = S.sum_over(U(j) ** 2) / d
    R_U = 1 / sp.sqrt(MS_U + eps)
    y_def = gam[i] * U(i) * R_U
    defs = {r: R_U, ms: MS_U, u: U, uhat: lambda q: U(q) * R_U, g: lambda q: gam[q] * dy[q]}
    ubar = r * (g[i] - uhat[i] * S.sum_over(g[j] * uhat[j]) / d)
    F = S.Formula
    return [
        F("gate_before_silu.gated_input", "The gated input (gate before the norm)", u[i], x[i] * silu(z[i]), defs,
          "definition"),
        F("gate_before_silu.mean_square", "Mean square of the gated input", ms, S.sum_over(u[j] ** 2) / d, defs,
          "definition"),
        F("gate_before_silu.forward", "Gated RMSNorm forward, gate before the norm (u_i = x_i silu(z_i))",
          sp.IndexedBase("y")[i], gam[i] * u[i] / sp.sqrt(ms + eps), defs, "definition", order="rev-lex"),
        F("gate_before_silu.vjp_x", "Gated RMSNorm input gradient (gate before; g_i = gamma_i dy_i)",
          _bar(r"\bar{x}"), silu(z[i]) * ubar, defs, "derived", derived=S.vjp(y_def, x)),
        F("gate_before_silu.vjp_gate", "Gated RMSNorm gate gradient (gate before)", _bar(r"\bar{z}"),
          x[i] * _act_prime("silu", z[i]) * ubar, defs, "derived", derived=S.vjp(y_def, z)),
        F("gate_before_silu.vjp_weight", "Gated RMSNorm gain gradient (gate before; summed over rows)",
          _bar(r"\bar{\gamma}"), dy[i] * uhat[i], defs, "derived", derived=S.vjp(y_def, gam), reduce_rows=True),
    ]
