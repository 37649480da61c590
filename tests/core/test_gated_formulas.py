"""The gated RMSNorms' registry formulas (reference_impl/norms/gated_formulas.py) beyond the catalog's generic
test (tests/core/test_catalog.py proves each derived one for general d and evaluates it against the float64
twin's autograd): the closed forms against explicit Jacobians at d = 1..3, the prover rejecting a wrong
activation derivative or a dropped gate factor, and the sigmoid the formulas use being 1 / (1 + exp(-a)).
"""
from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from reference_impl import symbolic as S
from reference_impl.norms import formula_registry
from reference_impl.norms import gated_formulas as GF
from reference_impl.symbolic.algebra import _sigmoid, sigmoid, uhat, z

REG = formula_registry()
PREFIXES = ("gate_after_silu", "gate_after_sigmoid", "gate_before_silu")
WRT = {"vjp_x": S.x, "vjp_gate": z, "vjp_weight": S.gamma}
ALL_IDS = GF.after_ids("silu") + GF.after_ids("sigmoid") + GF.before_ids()


@pytest.mark.guards(*ALL_IDS)
def test_every_gated_formula_is_in_the_registry_and_on_its_entry():
    from reference_impl.norms import CATALOG

    shown = {fid for name in ("gated_rms_norm.qwen3_next", "gated_rms_norm.kimi_linear", "gated_rms_norm.mamba2")
             for fid in CATALOG[name].formulas}
    assert shown == set(ALL_IDS) and set(ALL_IDS) <= set(REG)
    assert CATALOG["gated_rms_norm.qwen3_next"].params["activation"] == "silu"
    assert CATALOG["gated_rms_norm.kimi_linear"].params["activation"] == "sigmoid"
    assert set(CATALOG["gated_rms_norm.kimi_linear"].formulas) == set(GF.after_ids("sigmoid"))


@pytest.mark.guards(*ALL_IDS)
@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("n", (1, 2, 3))
def test_gated_gradients_match_explicit_jacobians(prefix, n):
    """At d = n: sum_q dy_q d y_q / d w_a, from the n explicit components of the forward definition, equals
    the closed form at i = a, for w = x, the gate z and the gain."""
    fwd = REG[f"{prefix}.forward"].expr
    stat = REG[f"{prefix}.forward"].defs[S.ms]
    base = S.instantiate(stat + S.eps, n)
    comps = [S.instantiate(fwd, n, i=a) for a in range(1, n + 1)]
    for suffix, base_w in WRT.items():
        closed = REG[f"{prefix}.{suffix}"].expr
        for a in range(1, n + 1):
            explicit = sum(S.dy[q] * sp.diff(comps[q - 1], base_w[a]) for q in range(1, n + 1))
            assert S.equal_explicit(explicit, S.instantiate(closed, n, i=a), base), (prefix, suffix, n, a)


@pytest.mark.guards("gate_after_silu.vjp_gate", "gate_before_silu.vjp_x", "gate_after_sigmoid.vjp_x")
def test_the_prover_rejects_wrong_gated_gradients():
    """Not vacuous: sigmoid's derivative where silu's belongs, the gate factor dropped from the gate-before
    input gradient, and the gate left out of g in the gate-after one are each caught."""
    i = S.i
    f = REG["gate_after_silu.vjp_gate"]
    wrong = S.expand_defs(S.dy[i] * S.gamma[i] * S.xhat[i] * sigmoid(z[i]) * (1 - sigmoid(z[i])), f.defs)
    assert f.holds() and not S.prove_equal(f.derived, wrong)
    f = REG["gate_before_silu.vjp_x"]
    ubar = S.r * (S.g[i] - uhat[i] * S.sum_over(S.g[S.j] * uhat[S.j]) / S.d)   # the gate factor dropped
    assert f.holds() and not S.prove_equal(f.derived, S.expand_defs(ubar, f.defs))
    f = REG["gate_after_sigmoid.vjp_x"]                                         # RMSNorm's, g without the gate
    assert f.holds() and not S.prove_equal(f.derived, REG["rms.vjp_x"].expr)


def test_sigmoid_is_the_logistic_function():
    """The symbolic sigmoid's derivative is that of 1 / (1 + exp(-a)); its NumPy value is that function
    (to a few float64 roundings), without overflow far out on the negative side."""
    a = sp.Symbol("a", real=True)
    logistic = 1 / (1 + sp.exp(-a))
    assert sp.simplify(sigmoid(a).rewrite(sp.exp) - logistic) == 0
    assert sp.simplify((sp.diff(sigmoid(a), a) - sp.diff(logistic, a)).rewrite(sp.exp)) == 0
    v = np.linspace(-30, 30, 601)
    np.testing.assert_allclose(_sigmoid(v), 1 / (1 + np.exp(-v)), rtol=1e-15, atol=0)
    with np.errstate(over="raise", divide="raise", invalid="raise"):   # underflow to 0 is the right answer
        assert _sigmoid(np.array([-1000.0]))[0] == 0.0 and _sigmoid(np.array([1000.0]))[0] == 1.0
