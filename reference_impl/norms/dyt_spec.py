"""DyT's catalog entry: ``y = weight * tanh(alpha * x) + bias`` (arXiv:2503.10622).

The function itself lives in :mod:`reference_impl.norms.dyt`; this module declares its oracle, bound,
formulas and sample inputs.
"""
from __future__ import annotations

import numpy as np
import sympy as sp

from .. import symbolic as S
from . import pointwise as P
from .dyt import DyT, dyt
from .spec import Layer, NormSpec


def _oracle(x, alpha, weight, bias):
    return weight * np.tanh(alpha * x) + bias


def formulas():
    i, x, gam, bet, dy, al, j = S.i, S.x, S.gamma, S.beta, S.dy, S.alpha, S.j
    Y = gam[i] * sp.tanh(al * x[i]) + bet[i]
    bar = lambda name: sp.IndexedBase(name)[i]  # noqa: E731
    F = S.Formula
    return [
        F("dyt.forward", "DyT forward", sp.IndexedBase("y")[i], Y, {}, "definition"),
        F("dyt.vjp_x", "DyT input gradient", bar(r"\bar{x}"), dy[i] * gam[i] * al * (1 - sp.tanh(al * x[i]) ** 2),
          {}, "derived", derived=S.vjp(Y, x)),
        F("dyt.vjp_alpha", "DyT gradient of alpha (per row; summed over rows)", r"\bar{\alpha}",
          S.sum_over(dy[j] * gam[j] * x[j] * (1 - sp.tanh(al * x[j]) ** 2)), {}, "derived",
          derived=S.normalize(S.sum_over(dy[i] * sp.diff(Y, al), i)).xreplace({i: j})),
        F("dyt.vjp_weight", "DyT gain gradient (summed over rows)", bar(r"\bar{\gamma}"), dy[i] * sp.tanh(al * x[i]),
          {}, "derived", derived=S.vjp(Y, gam), reduce_rows=True),
        F("dyt.vjp_bias", "DyT bias gradient (summed over rows)", bar(r"\bar{\beta}"), dy[i], {}, "derived",
          derived=S.vjp(Y, bet), reduce_rows=True),
    ]


def _layer(width, eps):
    """A DyT layer over ``width`` features at its paper's initial values (no statistics: ``eps`` unused)."""
    return DyT(width)


SPECS = (NormSpec(
    name="dyt", title="DyT: weight * tanh(alpha x) + bias, no statistics",
    source="Zhu, Chen, He, LeCun and Liu, Transformers without Normalization, CVPR 2025, arXiv:2503.10622",
    reference=dyt, oracle=_oracle, bound=P.bound(np.tanh, P.tanh_prime), make_inputs=P.inputs(alpha=0.8),
    formulas=("dyt.forward", "dyt.vjp_x", "dyt.vjp_alpha", "dyt.vjp_weight", "dyt.vjp_bias"),
    build_formulas=formulas, grads=("x", "alpha", "weight", "bias"), bad_inputs=P.bad_inputs(("alpha",)),
    layer=Layer("dyt", _layer),
),)
