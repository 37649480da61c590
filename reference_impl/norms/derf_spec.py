"""Derf's catalog entry: ``y = weight * erf(alpha * x + shift) + bias`` (arXiv:2512.10938).

The function itself lives in :mod:`reference_impl.norms.derf`; this module declares its oracle, bound,
formulas and sample inputs.
"""
from __future__ import annotations

import numpy as np
import sympy as sp

from .. import symbolic as S
from . import pointwise as P
from .derf import Derf, derf
from .spec import Layer, NormSpec


def _oracle(x, alpha, shift, weight, bias):
    return weight * P.erf(alpha * x + shift) + bias


def formulas():
    i, m, x, gam, bet, dy, al, sh = S.i, S.m, S.x, S.gamma, S.beta, S.dy, S.alpha, S.s
    Y = gam[i] * sp.erf(al * x[i] + sh) + bet[i]
    bar = lambda name: sp.IndexedBase(name)[i]  # noqa: E731
    gauss = 2 / sp.sqrt(sp.pi) * sp.exp(-(al * x[i] + sh) ** 2)
    scalar = lambda v: S.normalize(S.sum_over(dy[i] * sp.diff(Y, v), i)).xreplace({i: S.j})  # noqa: E731
    jgauss = gauss.xreplace({i: S.j})
    F = S.Formula
    return [
        F("derf.forward", "Derf forward", sp.IndexedBase("y")[i], Y, {}, "definition"),
        F("derf.vjp_x", "Derf input gradient", bar(r"\bar{x}"), dy[i] * gam[i] * al * gauss, {}, "derived",
          derived=S.vjp(Y, x)),
        F("derf.vjp_alpha", "Derf gradient of alpha (per row; summed over rows)", r"\bar{\alpha}",
          S.sum_over(dy[S.j] * gam[S.j] * x[S.j] * jgauss), {}, "derived", derived=scalar(al)),
        F("derf.vjp_shift", "Derf gradient of the shift (per row; summed over rows)", r"\bar{s}",
          S.sum_over(dy[S.j] * gam[S.j] * jgauss), {}, "derived", derived=scalar(sh)),
        F("derf.vjp_weight", "Derf gain gradient (summed over rows)", bar(r"\bar{\gamma}"),
          dy[i] * sp.erf(al * x[i] + sh), {}, "derived", derived=S.vjp(Y, gam), reduce_rows=True),
        F("derf.vjp_bias", "Derf bias gradient (summed over rows)", bar(r"\bar{\beta}"), dy[i], {}, "derived",
          derived=S.vjp(Y, bet), reduce_rows=True),
    ]


def _layer(width, eps):
    """A Derf layer over ``width`` features at its paper's initial values (no statistics: ``eps`` unused)."""
    return Derf(width)


SPECS = (NormSpec(
    name="derf", title="Derf: weight * erf(alpha x + shift) + bias, no statistics",
    source="Chen, Lu, Zhu, Sun and Liu, Stronger Normalization-Free Transformers, arXiv:2512.10938",
    reference=derf, oracle=_oracle, bound=P.bound(P.erf, P.derf_prime),
    make_inputs=P.inputs(alpha=0.8, shift=0.1),
    formulas=("derf.forward", "derf.vjp_x", "derf.vjp_alpha", "derf.vjp_shift", "derf.vjp_weight", "derf.vjp_bias"),
    build_formulas=formulas, grads=("x", "alpha", "shift", "weight", "bias"),
    bad_inputs=P.bad_inputs(("alpha", "shift")),
    layer=Layer("derf", _layer),
),)
