"""The symbolic registry: derivations, identities, invariances, float64 agreement with every other layer.

Float64 comparisons use the tolerance policy's bound for one float64 evaluation (reference_impl.tolerances);
two independent float64 evaluations of the same quantity (the lambdified SymPy expression and the oracle,
say) each lie within that bound of the exact value, so they may differ by twice the bound (triangle
inequality). That factor 2 is the only thing added here.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sympy as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import reference_impl as ri
from reference_impl import oracle
from reference_impl import symbolic as S
from reference_impl import tolerances as tol
from reference_impl.norms import formula_registry

REG = formula_registry()            # the core's formulas and the catalog's
F64 = torch.float64
U64 = tol.unit_roundoff(F64)


def _data(rows, d, seed, offset=0.0):
    g = np.random.default_rng(seed)
    x = g.standard_normal((rows, d)) * 2 + offset
    w = 1 + 0.5 * g.standard_normal(d)
    b = 0.3 * g.standard_normal(d)
    dy = g.standard_normal((rows, d))
    return x, w, b, dy


def _t(a):
    return torch.tensor(a, dtype=F64)


# ---------------------------------------------------------------------------------- the registry


def test_registry_ids_are_stable_and_complete():
    required = {"rms.forward", "rms.vjp_x", "rms.vjp_weight", "ln.forward", "ln.vjp_x", "ln.vjp_weight",
                "ln.vjp_bias", "prms.forward", "rms.rms_identity", "rms.mean_square_identity", "rms.jacobian",
                "ln.jacobian", "ln.as_rms", "claim.c12"}
    assert required <= set(REG)
    for fid, f in REG.items():
        assert f.id == fid and f.kind in ("definition", "derived", "identity", "claim", "count")
        assert " = " in f.latex
    # the whole registry is the symbolic core's and the catalog's, assembled by the catalog
    from reference_impl.norms import catalog_formulas

    core, catalog_ids = S.registry(), [f.id for f in catalog_formulas()]
    assert catalog_ids and not set(catalog_ids) & set(core)
    assert sorted(REG) == sorted([*core, *catalog_ids])
    assert all(REG[fid].latex == S.get(fid).latex for fid in core)
    with pytest.raises(KeyError, match="no formula 'rms.nonexistent' in the core registry .*formula_registry"):
        S.get("rms.nonexistent")


PROVED = ["rms.jacobian_raw", "rms.vjp_x_raw", "rms.forward_short", "rms.jacobian", "rms.vjp_x", "rms.vjp_weight", "rms.rms_identity",
          "rms.mean_square_identity", "rms.sphere", "ln.jacobian", "ln.vjp_x", "ln.vjp_weight", "ln.vjp_bias",
          "ln.as_rms", "inv.rms.scale", "inv.prms.scale", "inv.ln.scale", "inv.ln.shift"]
# the hand derivation of docs/gradients.md, one formula per step
STEPS = ["rms.bwd_step1", "rms.bwd_step2", "rms.bwd_step3", "rms.bwd_step4", "ln.bwd_step1", "ln.bwd_step2",
         "ln.bwd_step3", "ln.bwd_step4", "ln.bwd_step5"]


# identities proven in the module of the layer that uses them
REPO = Path(__file__).resolve().parents[2]
PROVED_ELSEWHERE = {"equiv.ms_split": "tests/core/test_equivalence.py", "equiv.rms_split": "tests/core/test_equivalence.py",
                    "equiv.rms_mean": "tests/core/test_equivalence.py"}


def test_every_proof_obligation_is_listed():
    # a catalog norm's own formulas are proven by tests/core/test_catalog.py, derived from its spec
    from reference_impl.norms import catalog_formulas

    listed = PROVED + STEPS + list(PROVED_ELSEWHERE) + [f.id for f in catalog_formulas() if f.kind in ("derived", "identity")]
    assert sorted(listed) == sorted(f.id for f in REG.values() if f.kind in ("derived", "identity"))
    for fid, module in PROVED_ELSEWHERE.items():
        assert fid in (REPO / module).read_text(), f"{fid} is not proven in {module}"


@pytest.mark.guards("rms.jacobian_raw", "rms.vjp_x_raw", "rms.forward_short", "rms.jacobian", "rms.vjp_x", "rms.vjp_weight", "rms.rms_identity",
                    "rms.mean_square_identity", "rms.sphere", "ln.jacobian", "ln.vjp_x", "ln.vjp_weight",
                    "ln.vjp_bias", "ln.as_rms", "inv.rms.scale", "inv.prms.scale", "inv.ln.scale", "inv.ln.shift")
@pytest.mark.parametrize("fid", PROVED)
def test_closed_form_equals_sympy_derivation_for_general_d(fid):
    """Each derived closed form equals what sympy.diff produced; each identity holds, for symbolic d."""
    assert REG[fid].holds()


@pytest.mark.guards("rms.bwd_step1", "rms.bwd_step2", "rms.bwd_step3", "rms.bwd_step4", "ln.bwd_step1",
                    "ln.bwd_step2", "ln.bwd_step3", "ln.bwd_step4", "ln.bwd_step5")  # the ids of STEPS, spelled out
@pytest.mark.parametrize("fid", STEPS)
def test_each_step_of_the_hand_derivation_equals_sympy(fid):
    """Each step of the backward derived by hand equals sympy.diff of the same quantity, for symbolic d
    (tests/core/test_derivation_steps.py checks them again at explicit sizes)."""
    assert REG[fid].holds()


@pytest.mark.guards("rms.mean_square", "rms.rstd", "ln.mean", "ln.var", "ln.rstd", "prms.forward",
                    "prms.mean_square")
def test_statistics_match_reference_and_prms_definition():
    """The per-row statistics against the reference's saved rstd and NumPy; pRMSNorm against a direct
    evaluation of its definition (RMS of the first k features, eps inside the root) and, for k = d,
    against RMSNorm."""
    x, w, _, _ = _data(5, 20, seed=10, offset=0.7)
    _, r_ref = ri.reference.rms_forward(_t(x), None, 1e-6)
    np.testing.assert_allclose(REG["rms.rstd"].numeric()(x=x, eps=1e-6), r_ref.numpy()[:, 0], rtol=8 * tol.gamma(30, U64))
    np.testing.assert_allclose(REG["rms.mean_square"].numeric()(x=x), np.mean(x * x, -1), rtol=4 * tol.gamma(20, U64))
    _, r_ln = ri.reference.ln_forward(_t(x), None, None, 1e-5)
    np.testing.assert_allclose(REG["ln.rstd"].numeric()(x=x, eps=1e-5), r_ln.numpy()[:, 0], rtol=8 * tol.gamma(30, U64))
    np.testing.assert_allclose(REG["ln.mean"].numeric()(x=x), np.mean(x, -1), rtol=4 * tol.gamma(20, U64))
    np.testing.assert_allclose(REG["ln.var"].numeric()(x=x), np.var(x, -1), rtol=8 * tol.gamma(20, U64))
    for kk in (1, 5, 20):
        direct = w * x / np.sqrt(np.mean(x[:, :kk] ** 2, -1, keepdims=True) + 1e-6)
        np.testing.assert_allclose(REG["prms.forward"].numeric()(x=x, weight=w, eps=1e-6, k=kk), direct,
                                   rtol=8 * tol.gamma(30, U64))
        np.testing.assert_allclose(REG["prms.mean_square"].numeric()(x=x, k=kk), np.mean(x[:, :kk] ** 2, -1),
                                   rtol=4 * tol.gamma(20, U64))
    tol.assert_within(REG["prms.forward"].numeric()(x=x, weight=w, eps=1e-6, k=20), oracle.rms_norm_forward(x, w, 1e-6),
                      2 * tol.rms_forward_bound(x, w, 1e-6, F64), "pRMSNorm with k = d")


@pytest.mark.guards("rms.vjp_x", "ln.vjp_x")
def test_prove_equal_rejects_a_wrong_closed_form():
    """The prover is not vacuous: dropping LayerNorm's mean term, or using xhat^2 instead of xhat_i
    xhat_j, is caught."""
    f = REG["ln.vjp_x"]
    wrong = S.expand_defs(S.r * (S.g[S.i] - S.xhat[S.i] * S.sum_over(S.g[S.j] * S.xhat[S.j]) / S.d), f.defs)
    assert not S.prove_equal(f.derived, wrong)
    wrong = S.expand_defs(S.r * (S.g[S.i] - S.xhat[S.i] ** 2 * S.sum_over(S.g[S.j]) / S.d), S.RMS_DEFS)
    assert not S.prove_equal(REG["rms.vjp_x"].derived, wrong)


@pytest.mark.guards("rms.jacobian", "rms.vjp_x", "rms.vjp_weight", "ln.jacobian", "ln.vjp_x", "ln.vjp_weight",
                    "ln.vjp_bias")
@pytest.mark.parametrize("n", range(1, 9))
def test_closed_forms_match_explicit_jacobians(n):
    """For d = n the closed forms equal J^T dy (and each J entry, via the coefficient of dy) computed by
    differentiating the n explicit components."""
    for norm, fwd, stat in (("rms", S.RMS_Y, S.MS), ("ln", S.LN_Y, S.VAR)):
        base = S.instantiate(stat + S.eps, n)
        J = S.explicit_jacobian(fwd, n)
        dyv = sp.Matrix([S.dy[a] for a in range(1, n + 1)])
        v = J.T * dyv
        closed = REG[f"{norm}.vjp_x"].expr
        for a in range(n):
            assert S.equal_explicit(v[a], S.instantiate(closed, n, i=a + 1), base), (norm, n, a)
        if n <= 4:  # entry by entry as well (the dy coefficients above already pin every entry)
            Jc = REG[f"{norm}.jacobian"].expr
            assert all(S.equal_explicit(J[a, b], S.instantiate(Jc, n, i=a + 1, m=b + 1), base)
                       for a in range(n) for b in range(n))
        comps = [S.instantiate(fwd, n, i=a) for a in range(1, n + 1)]
        for a in range(1, n + 1):
            gw = sum(S.dy[q] * sp.diff(comps[q - 1], S.gamma[a]) for q in range(1, n + 1))
            assert S.equal_explicit(gw, S.instantiate(REG[f"{norm}.vjp_weight"].expr, n, i=a), base)
            if norm == "ln":
                gb = sum(S.dy[q] * sp.diff(comps[q - 1], S.beta[a]) for q in range(1, n + 1))
                assert sp.simplify(gb - S.instantiate(REG["ln.vjp_bias"].expr, n, i=a)) == 0


# ------------------------------------------------------------------- float64 agreement, all layers


def _autograd(norm, x, w, b, dy, eps):
    """PyTorch autograd through a plain differentiable expression (no custom backward)."""
    xt, wt, bt = (_t(a).requires_grad_() for a in (x, w, b))
    if norm == "rms":
        y = xt * torch.rsqrt(xt.pow(2).mean(-1, keepdim=True) + eps) * wt
    else:
        xc = xt - xt.mean(-1, keepdim=True)
        y = xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + eps) * wt + bt
    y.backward(_t(dy))
    db = bt.grad.numpy() if bt.grad is not None else None
    return y.detach().numpy(), xt.grad.numpy(), wt.grad.numpy(), db


@pytest.mark.guards("rms.forward", "rms.forward_short", "rms.vjp_x", "rms.vjp_weight")
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (4, 33), (2, 64)], ids=str)
def test_rms_sympy_oracle_reference_autograd_agree(shape):
    x, w, _, dy = _data(*shape, seed=11)
    eps = 1e-6
    b2 = 2 * tol.rms_forward_bound(x, w, eps, F64)
    y_sym = REG["rms.forward"].numeric()(x=x, weight=w, eps=eps)
    y_short = REG["rms.forward_short"].numeric()(x=x, weight=w, eps=eps)
    y_or = oracle.rms_norm_forward(x, w, eps)
    y_ref = ri.rms_norm(_t(x), _t(w), eps).numpy()
    y_ag, dx_ag, dw_ag, _ = _autograd("rms", x, w, np.zeros_like(w), dy, eps)
    for name, y in (("sympy", y_sym), ("sympy short", y_short), ("reference", y_ref), ("autograd", y_ag)):
        tol.assert_within(y, y_or, b2, f"rms forward: {name} vs oracle")
    bdx, bdw = tol.rms_backward_bounds(dy, x, w, eps, F64)
    dx_sym = REG["rms.vjp_x"].numeric()(x=x, weight=w, dy=dy, eps=eps)
    dw_sym = REG["rms.vjp_weight"].numeric()(x=x, dy=dy, eps=eps)
    dx_or, dw_or = oracle.rms_norm_backward(dy, x, w, eps)
    dx_ref, dw_ref = (a.numpy() for a in ri.rms_norm_backward(_t(dy), _t(x), _t(w), eps))
    for name, dx, dw in (("sympy", dx_sym, dw_sym), ("reference", dx_ref, dw_ref), ("autograd", dx_ag, dw_ag)):
        tol.assert_within(dx, dx_or, 2 * bdx, f"rms dx: {name} vs oracle")
        tol.assert_within(dw, dw_or, 2 * bdw, f"rms dweight: {name} vs oracle")


@pytest.mark.guards("ln.forward", "ln.as_rms", "ln.vjp_x", "ln.vjp_weight", "ln.vjp_bias")
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (4, 33), (2, 64)], ids=str)
def test_ln_sympy_oracle_reference_autograd_agree(shape):
    x, w, b, dy = _data(*shape, seed=12, offset=1.5)
    eps = 1e-5
    b2 = 2 * tol.ln_forward_bound(x, w, b, eps, F64)
    y_or = oracle.layer_norm_forward(x, w, b, eps)
    y_sym = REG["ln.forward"].numeric()(x=x, weight=w, bias=b, eps=eps)
    y_as = REG["ln.as_rms"].numeric()(x=x, weight=w, bias=b, eps=eps)
    y_ref = ri.layer_norm(_t(x), _t(w), _t(b), eps).numpy()
    y_ag, dx_ag, dw_ag, db_ag = _autograd("ln", x, w, b, dy, eps)
    for name, y in (("sympy", y_sym), ("sympy as_rms", y_as), ("reference", y_ref), ("autograd", y_ag)):
        tol.assert_within(y, y_or, b2, f"ln forward: {name} vs oracle")
    bdx, bdw, bdb = tol.ln_backward_bounds(dy, x, w, b, eps, F64)
    dx_sym = REG["ln.vjp_x"].numeric()(x=x, weight=w, dy=dy, eps=eps)
    dw_sym = REG["ln.vjp_weight"].numeric()(x=x, dy=dy, eps=eps)
    db_sym = REG["ln.vjp_bias"].numeric()(dy=dy)
    dx_or, dw_or, db_or = oracle.layer_norm_backward(dy, x, w, b, eps)
    dx_ref, dw_ref, db_ref = (a.numpy() for a in ri.layer_norm_backward(_t(dy), _t(x), _t(w), _t(b), eps))
    for name, dx, dw, db in (("sympy", dx_sym, dw_sym, db_sym), ("reference", dx_ref, dw_ref, db_ref),
                             ("autograd", dx_ag, dw_ag, db_ag)):
        tol.assert_within(dx, dx_or, 2 * bdx, f"ln dx: {name} vs oracle")
        tol.assert_within(dw, dw_or, 2 * bdw, f"ln dweight: {name} vs oracle")
        tol.assert_within(db, db_or, 2 * bdb, f"ln dbias: {name} vs oracle")


def _jac_numeric(fid, x, w, eps):
    """The registry's Jacobian for one row: lambdified with i as a column and m as a row of indices."""
    f = REG[fid]
    delta = sp.Function("delta")
    expr = S._zero_based(f.expr).replace(sp.KroneckerDelta, delta)
    fn = sp.lambdify([S.x, S.gamma, S.eps, S.d, S.i, S.m], expr,
                     modules=[{"delta": lambda a, b: (a == b).astype(float)}, "numpy"])
    dd = x.size
    out = fn(x, w, eps, dd, np.arange(dd)[:, None], np.arange(dd)[None, :])
    return np.broadcast_to(np.asarray(out, dtype=np.float64), (dd, dd))


@pytest.mark.guards("rms.jacobian", "ln.jacobian")
@pytest.mark.parametrize("d", [1, 2, 7, 16])
def test_jacobians_match_autograd(d):
    """J_im from the registry vs torch.autograd.functional.jacobian. Each entry r*gamma_i*(delta - ...)
    is a handful of products after two reductions: error <= 2*gamma(d+10) * r|gamma_i| (delta +
    |xhat_i xhat_m|/d + 1/d) (the policy's backward analysis with g = e_m)."""
    x, w, _, _ = _data(1, d, seed=13, offset=0.5)
    x = x[0]
    for fid, fn, eps in (("rms.jacobian", lambda t: ri.rms_norm(t, _t(w), 1e-6), 1e-6),
                         ("ln.jacobian", lambda t: ri.layer_norm(t, _t(w), None, 1e-5), 1e-5)):
        J = _jac_numeric(fid, x, w, eps)
        Ja = torch.autograd.functional.jacobian(fn, _t(x)).numpy()
        xc = x - x.mean() if fid.startswith("ln") else x
        rr = 1 / np.sqrt(np.mean(xc * xc) + eps)
        xh = xc * rr
        bound = 2 * tol.gamma(d + 10, U64) * rr * np.abs(w)[:, None] * (np.eye(d) + np.abs(np.outer(xh, xh)) / d + 1 / d)
        tol.assert_within(J, Ja, bound, fid)


# ------------------------------------------------------------------------------ identities, C09-C11


@pytest.mark.guards("rms.rms_identity", "C10")
def test_rms_equals_norm_over_sqrt_d():
    x, _, _, _ = _data(5, 37, seed=14)
    lhs = REG["rms.rms_identity"].numeric("lhs")(x=x)
    rhs = REG["rms.rms_identity"].numeric()(x=x)
    direct = np.linalg.norm(x, axis=-1) / np.sqrt(37)
    np.testing.assert_allclose(lhs, direct, rtol=4 * tol.gamma(37, U64))
    np.testing.assert_allclose(rhs, direct, rtol=4 * tol.gamma(37, U64))
    assert REG["rms.rms_identity"].holds()


@pytest.mark.guards("rms.mean_square_identity", "rms.sphere", "C09")
def test_normalized_row_length_and_direction():
    """Without gain the output keeps x's direction (cosine 1) and has squared length d*ms/(ms+eps):
    sqrt(d) only when eps = 0. A non-uniform gain turns the direction; a uniform gain c scales the radius."""
    d = 24
    x, w, _, _ = _data(6, d, seed=15)
    x[0] *= 1e-3                                   # a small row: eps visibly shrinks its radius
    for eps in (0.0, 1e-6, 1e-2):
        y = oracle.rms_norm_forward(x, None, eps)
        msq = np.mean(x * x, -1)
        length2 = REG["rms.sphere"].numeric()(x=x, eps=eps)
        np.testing.assert_allclose(np.sum(y * y, -1), length2, rtol=8 * tol.gamma(d, U64))
        np.testing.assert_allclose(length2, d * msq / (msq + eps), rtol=8 * tol.gamma(d, U64))
        cos = np.sum(y * x, -1) / (np.linalg.norm(y, axis=-1) * np.linalg.norm(x, axis=-1))
        np.testing.assert_allclose(cos, 1.0, rtol=8 * tol.gamma(d, U64))
        if eps == 0.0:
            np.testing.assert_allclose(length2, d, rtol=8 * tol.gamma(d, U64))
        else:
            assert np.all(length2 < d) and length2[0] < 0.99 * d
    yw = oracle.rms_norm_forward(x, w, 0.0)
    cos_w = np.sum(yw * x, -1) / (np.linalg.norm(yw, axis=-1) * np.linalg.norm(x, axis=-1))
    assert np.all(cos_w < 0.99)                    # the gain changes the direction
    yc = oracle.rms_norm_forward(x, np.full(d, 3.0), 0.0)
    np.testing.assert_allclose(np.linalg.norm(yc, axis=-1), 3.0 * np.sqrt(d), rtol=8 * tol.gamma(d, U64))


@pytest.mark.guards("rms.mean_square_identity", "C11")
def test_per_dimension_second_moment_is_not_gamma_squared():
    """What holds per row: mean_i xhat_i^2 = ms/(ms+eps) (proven for general d, checked here). What the
    claim says, E[y_i^2] = gamma_i^2 for every i, fails for data whose coordinates differ in scale; it
    holds (with eps = 0) when the data set is closed under permuting coordinates."""
    d, n = 8, 4000
    g = np.random.default_rng(16)
    scales = np.array([4.0, 2.0, 1.0, 1.0, 0.5, 0.5, 0.25, 0.25])
    x = g.standard_normal((n, d)) * scales
    w = 1 + 0.5 * g.standard_normal(d)
    eps = 1e-6
    xhat = oracle.rms_norm_forward(x, None, eps)
    msq = np.mean(x * x, -1)
    np.testing.assert_allclose(REG["rms.mean_square_identity"].numeric("lhs")(x=x, eps=eps), msq / (msq + eps),
                               rtol=8 * tol.gamma(d, U64))
    second = np.mean((xhat * w) ** 2, axis=0) / w ** 2       # E[y_i^2] / gamma_i^2 over the data set
    assert second[0] > 3.0 and second[-1] < 0.1             # far from 1 in both directions
    # the exchangeable case: every cyclic shift of every row, eps = 0 -> exactly 1 for every i
    sym = np.concatenate([np.roll(x[:200], s, axis=1) for s in range(d)])
    e2 = np.mean(oracle.rms_norm_forward(sym, None, 0.0) ** 2, axis=0)
    np.testing.assert_allclose(e2, 1.0, rtol=16 * tol.gamma(d, U64))


@pytest.mark.guards("ln.as_rms")
def test_layer_norm_is_rms_norm_of_centred_input():
    x, w, b, _ = _data(4, 19, seed=17, offset=5.0)
    xc = x - x.mean(-1, keepdims=True)
    via_rms = ri.rms_norm(_t(xc), _t(w), 1e-5).numpy() + b
    tol.assert_within(via_rms, oracle.layer_norm_forward(x, w, b, 1e-5), 2 * tol.ln_forward_bound(x, w, b, 1e-5, F64))


# ------------------------------------------------------------------------------------ invariances
# Columns of Table 1 in arXiv:1910.07467, section 4, with a = W v the summed input of the layer.
# "Holds" cells are proven symbolically (inv.* identities) and property-tested with eps = 0; the eps > 0
# behaviour is pinned exactly by the same identities (eps is rescaled, not cancelled).

NORMS = {
    "rms": lambda a, eps: oracle.rms_norm_forward(a, None, eps),
    "prms": lambda a, eps: _prms(a, eps),
    "ln": lambda a, eps: oracle.layer_norm_forward(a, None, None, eps),
}


def _prms(a, eps, p=0.25):
    k = max(1, int(np.ceil(p * a.shape[-1])))
    return REG["prms.forward"].numeric()(x=a, eps=eps, k=k)


small = st.floats(-3, 3, allow_nan=False).filter(lambda v: abs(v) > 1e-3)
scale = st.floats(0.01, 100.0)


def _close(a, b, d):
    return np.allclose(a, b, rtol=0, atol=64 * tol.gamma(d + 10, U64) * (1 + np.abs(b).max()))


@pytest.mark.guards("inv.rms.scale", "inv.prms.scale", "inv.ln.scale")
@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), scale, scale)
def test_invariance_weight_matrix_and_dataset_rescaling(seed, c_w, c_data):
    """W -> c W, or every input v -> c v: a -> c a, and every norm is unchanged (eps = 0)."""
    g = np.random.default_rng(seed)
    W, v = g.standard_normal((12, 6)), g.standard_normal((5, 6))
    for name, f in NORMS.items():
        base = f(v @ W.T, 0.0)
        assert _close(f(v @ (c_w * W).T, 0.0), base, 12), name
        assert _close(f((c_data * v) @ W.T, 0.0), base, 12), name


@pytest.mark.guards("inv.rms.scale", "inv.prms.scale", "inv.ln.scale", "C36")
def test_invariance_single_case_rescaling_and_eps_effect():
    """One input scaled alone: per-row statistics make every norm invariant at eps = 0. With eps > 0 the
    identities say Norm(c a; eps) = Norm(a; eps / c^2): the output changes exactly as if eps changed."""
    g = np.random.default_rng(18)
    a = g.standard_normal((4, 16))
    cs = np.array([[1.0], [1e-3], [50.0], [1.0]])
    for name, f in NORMS.items():
        assert _close(f(a * cs, 0.0), f(a, 0.0), 16), name
        eps = 1e-4
        for row in range(4):
            c_row = cs[row, 0]
            assert _close(f(a[row:row + 1] * c_row, eps), f(a[row:row + 1], eps / c_row ** 2), 16), name
        assert not _close(f(a * cs, eps)[1], f(a, eps)[1], 16), name   # a 1e-3 re-scale is not invisible
        lhs = REG[f"inv.{name}.scale"].numeric("lhs")(x=a, eps=eps, c=1e-3, k=4)
        rhs = REG[f"inv.{name}.scale"].numeric()(x=a, eps=eps, c=1e-3, k=4)
        assert _close(lhs, rhs, 16), name


@pytest.mark.guards("inv.ln.shift", "C36")
@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), small)
def test_invariance_weight_matrix_recentering(seed, shift):
    """W -> W + 1 u^T shifts every a_i by the same u.v: LayerNorm is unchanged (for any eps, exactly in
    exact arithmetic), RMSNorm and pRMSNorm are not."""
    g = np.random.default_rng(seed)
    W, v = g.standard_normal((12, 6)), g.standard_normal((5, 6))
    u = shift * np.ones(6)
    a, a2 = v @ W.T, v @ (W + np.outer(np.ones(12), u)).T
    assert _close(NORMS["ln"](a2, 1e-5), NORMS["ln"](a, 1e-5), 12)
    # the invariance does not come from the gain and bias: it holds with gamma = 1, beta = 0 (above) and
    # with any gamma, beta, because they act after the statistics have removed the shift
    w, b = g.standard_normal(12), g.standard_normal(12)
    assert _close(oracle.layer_norm_forward(a2, w, b, 1e-5), oracle.layer_norm_forward(a, w, b, 1e-5), 12)
    assert REG["inv.ln.shift"].holds()


@pytest.mark.guards("inv.ln.shift")
def test_non_invariances_have_counterexamples():
    """The cross cells of the table: a counterexample each."""
    a = np.array([[1.0, 2.0, -0.5, 3.0, 0.25, -1.0, 0.5, 2.5]])
    W = np.eye(8)
    for name in ("rms", "prms"):                                   # re-centering
        assert not _close(NORMS[name](a + 2.0, 0.0), NORMS[name](a, 0.0), 8), name
    for name, f in NORMS.items():
        row = a.copy()
        row[0, 3] *= 5.0                                           # one weight vector (row of W) re-scaled
        assert not _close(f(row, 0.0), f(a, 0.0), 8), name
        shift = np.array([0.5, -1.0, 0.0, 2.0, 0.0, 0.0, 1.0, -0.5]) @ W.T   # data re-centering: a + W u
        assert not _close(f(a + shift, 0.0), f(a, 0.0), 8), name


# ------------------------------------------------------------------------------------------- C12


def _article(x, w, dy, eps, reading):
    """The article's formula (claim.c12) under a reading: 'quoted' (y = gamma*xhat, gamma per feature),
    'pre-gain' (y = xhat, gamma per feature outside the bracket)."""
    if reading == "quoted":
        return REG["claim.c12"].numeric()(x=x, weight=w, dy=dy, eps=eps)
    rr = 1 / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps)
    xh = x * rr
    return w * rr * (dy - xh * np.mean(xh * dy, -1, keepdims=True))


@pytest.mark.guards("claim.c12", "rms.vjp_x", "C12")
def test_c12_article_gradient_holds_only_for_a_scalar_gain():
    """Proven for general d: article - correct = r xhat_i (1 - gamma_i^2) sum_j(gamma_j xhat_j dy_j)/d as
    quoted, so it holds iff every gamma_i^2 = 1; read with y = xhat (pre-gain) and one scalar gain c,
    it is exactly right for every c. Checked numerically against autograd."""
    art, correct = REG["claim.c12"].expr, REG["rms.vjp_x"].expr
    rr, xh = S.R_RMS, S.x[S.i] * S.R_RMS
    gap = rr * xh * (1 - S.gamma[S.i] ** 2) * S.sum_over(S.gamma[S.j] * S.x[S.j] * S.R_RMS * S.dy[S.j]) / S.d
    assert S.prove_equal(art - correct, gap)
    cc = sp.Symbol("c_gain", positive=True)
    pre_gain = cc * rr * (S.dy[S.i] - xh * S.sum_over(S.x[S.j] * S.R_RMS * S.dy[S.j]) / S.d)
    scalar_correct = correct.replace(lambda e: isinstance(e, sp.Indexed) and e.base == S.gamma, lambda e: cc)
    assert S.prove_equal(pre_gain, scalar_correct)

    x, w, _, dy = _data(3, 16, seed=19)
    eps = 1e-6
    _, dx_true, _, _ = _autograd("rms", x, w, np.zeros(16), dy, eps)
    bdx, _ = tol.rms_backward_bounds(dy, x, w, eps, F64)
    with pytest.raises(AssertionError):
        tol.assert_within(_article(x, w, dy, eps, "quoted"), dx_true, 2 * bdx, "quoted")
    with pytest.raises(AssertionError):
        tol.assert_within(_article(x, w, dy, eps, "pre-gain"), dx_true, 2 * bdx, "pre-gain, vector gain")
    for cval in (1.0, -1.0, 2.5):
        wc = np.full(16, cval)
        _, dx_c, _, _ = _autograd("rms", x, wc, np.zeros(16), dy, eps)
        bdx_c, _ = tol.rms_backward_bounds(dy, x, wc, eps, F64)
        tol.assert_within(_article(x, wc, dy, eps, "pre-gain"), dx_c, 2 * bdx_c, f"pre-gain c={cval}")
        if cval ** 2 == 1:
            tol.assert_within(_article(x, wc, dy, eps, "quoted"), dx_c, 2 * bdx_c, f"quoted c={cval}")


@pytest.mark.guards("rms.jacobian", "ln.jacobian", "C12")
@pytest.mark.parametrize("d", [3, 8, 64])
def test_c12_stability_comes_from_the_statistic_not_the_mean_term(d):
    """With gamma = 1 and eps = 0 both Jacobians are r times an orthogonal projection (singular values 1
    and 0), so the mean term does not enlarge LayerNorm's gradient. The real difference is r: LN's
    1/sqrt(var+eps) is never smaller than RMSNorm's 1/sqrt(ms+eps), since var = ms - mean^2."""
    x, _, _, _ = _data(1, d, seed=20 + d, offset=1.0)
    x = x[0]
    ones = np.ones(d)
    for fid, rr, zeros in (("rms.jacobian", 1 / np.sqrt(np.mean(x * x)), 1),
                           ("ln.jacobian", 1 / np.sqrt(np.var(x)), 2)):
        sv = np.linalg.svd(_jac_numeric(fid, x, ones, 0.0) / rr, compute_uv=False)
        np.testing.assert_allclose(sv[: d - zeros], 1.0, atol=8 * d * tol.gamma(d + 10, U64))
        np.testing.assert_allclose(sv[d - zeros:], 0.0, atol=8 * d * tol.gamma(d + 10, U64))
    for eps in (0.0, 1e-5):
        assert 1 / np.sqrt(np.var(x) + eps) >= 1 / np.sqrt(np.mean(x * x) + eps)
    # an offset row: LN's gradient gain is many times RMSNorm's
    xo = x + 100.0
    assert np.sqrt(np.mean(xo * xo) / np.var(xo)) > 10


# -------------------------------------------------------------------------------- costs (C08)


@pytest.mark.guards("cost.rms.forward_flops", "cost.ln.forward_flops", "cost.rms.backward_flops",
                    "cost.ln.backward_flops", "C08")
def test_operation_counts_per_row():
    """count_ops on the definitions for general d, against counts done by hand from the reference code
    (rms_forward: x*x, sum, /d, +eps, rsqrt, x*r, *w; ln_forward adds the mean, the centring and +b)."""
    dd = S.d
    assert S.forward_ops("rms") == {"add": dd, "mul": 3 * dd + 1, "rsqrt": 1}
    assert S.forward_ops("ln") == {"add": 4 * dd - 1, "mul": 3 * dd + 2, "rsqrt": 1}
    assert S.forward_ops("ln", bias=False) == {"add": 3 * dd - 1, "mul": 3 * dd + 2, "rsqrt": 1}
    assert S.backward_ops("rms") == {"add": 2 * dd - 1, "mul": 5 * dd + 1, "rsqrt": 0}
    assert S.backward_ops("ln") == {"add": 5 * dd - 2, "mul": 5 * dd + 2, "rsqrt": 0}
    # the counter itself on small cases
    assert S.count_ops(S.sum_over(S.x[S.j] ** 2)) == {"add": dd - 1, "mul": dd, "rsqrt": 0}
    assert S.count_ops(S.PMS) == {"add": S.k - 1, "mul": S.k + 1, "rsqrt": 0}
    # the registry shows exactly these counts
    rsq = sp.Symbol("rsqrt")
    for norm in ("rms", "ln"):
        ops = S.forward_ops(norm)
        assert sp.expand(REG[f"cost.{norm}.forward_flops"].display - (ops["add"] + ops["mul"] + rsq)) == 0
    # RMSNorm saves 3d arithmetic per row in the forward (no mean, no centring, no bias) and 3d in the backward
    assert sp.expand(REG["cost.ln.forward_flops"].display - REG["cost.rms.forward_flops"].display) == 3 * dd
    assert sp.expand(REG["cost.ln.backward_flops"].display - REG["cost.rms.backward_flops"].display) == 3 * dd


@pytest.mark.guards("cost.rms.forward_bytes", "cost.ln.forward_bytes", "cost.rms.backward_bytes",
                    "cost.ln.backward_bytes", "C08")
def test_bytes_per_row_and_saved_statistics():
    """Both norms move the same row data (x in, y out; x and dy in, dx out); they differ only in the
    float32 statistics saved per row: one for RMSNorm (r), two for LayerNorm as torch keeps (mean, r)."""
    b, dd = S.ELEM_BYTES, S.d
    assert S.bytes_per_row("rms") == 2 * b * dd + 4 and S.bytes_per_row("ln") == 2 * b * dd + 8
    assert S.bytes_per_row("rms", "backward") == 3 * b * dd + 4
    assert S.bytes_per_row("ln", "backward") == 3 * b * dd + 8
    # torch.nn.functional.layer_norm's autograd saves a mean and an rstd per row, our reference one rstd
    x = torch.randn(6, 32, dtype=torch.float32, requires_grad=True)
    out, mean, rstd = torch.ops.aten.native_layer_norm(x, [32], None, None, 1e-5)
    assert mean.shape == (6, 1) and rstd.shape == (6, 1)
    # the RMSNorm forward saves exactly one statistic per row
    y, r = ri.reference.rms_forward(x.detach(), None, 1e-6)
    assert r.shape == (6, 1)


def test_means_print_with_the_factor_in_front():
    """A mean prints as 1/d times the sum, never as a fraction with the sum in its numerator: inside a
    square root such a fraction sets the sum in script size, too small to read on a phone."""
    from reference_impl.symbolic import formulas
    from reference_impl.symbolic.algebra import MS, latex

    assert latex(MS) == r"\frac{1}{d} \sum_{j=1}^{d} {x}_{j}^{2}"
    assert r"\sqrt{\frac{1}{d} \sum_{j=1}^{d} {x}_{j}^{2} + \epsilon}" in formulas.get("rms.forward").latex


def _formula_owners() -> list[tuple[str, str]]:
    """(who shows it, formula id) for every registry formula: the catalog entries naming it, else "core";
    the test ids carry the entry's name, so ``pytest -k <name>`` runs the house rules for that entry's
    formulas."""
    from reference_impl.norms import CATALOG

    shown = {}
    for spec in CATALOG.values():
        for fid in spec.formulas:
            shown.setdefault(fid, []).append(spec.name)
    return [(owner, fid) for fid in sorted(REG) for owner in shown.get(fid, ["core"])]


MEAN_AS_FRACTION = __import__("re").compile(r"\\frac\{-? ?\\sum")


@pytest.mark.parametrize("owner,fid", _formula_owners(), ids=lambda v: v)
def test_each_formula_prints_its_means_with_the_factor_in_front(owner, fid):
    latex = REG[fid].latex
    assert not MEAN_AS_FRACTION.search(latex), f"{fid} ({owner}) prints a mean as a fraction over a sum: {latex}"


@pytest.mark.parametrize("expr,printed", [
    (lambda: S.sum_over(S.x[S.j], S.j, S.d + 1) / (S.d + 1), r"\frac{1}{d + 1} \sum_{j=1}^{d + 1} {x}_{j}"),
    (lambda: -S.sum_over(S.x[S.j] ** 2) / (S.d + 1), r"- \frac{1}{d + 1} \sum_{j=1}^{d} {x}_{j}^{2}"),
    (lambda: 2 * S.sum_over(S.x[S.j]) / S.k, r"\frac{2}{k} \sum_{j=1}^{d} {x}_{j}"),
    (lambda: S.sp.Rational(1, 2) * S.sum_over(S.x[S.j]) / (S.d + 1),
     r"\frac{1}{2 \left(d + 1\right)} \sum_{j=1}^{d} {x}_{j}"),
], ids=["over_d_plus_1", "negated", "coefficient", "rational"])
def test_means_over_any_count_print_with_the_factor_in_front(expr, printed):
    """The house form holds for a mean over d + 1 entries (a row [x, -sum x]) and with a coefficient, not
    only for a sum over a bare symbol; the house rule's pattern would catch the old fraction."""
    out = S.latex(expr())
    assert out == printed and not MEAN_AS_FRACTION.search(out)


def _augmented_ms(hi, over):
    """The mean square of the row [x, -sum x]: sum of x_j^2 and (sum x_j)^2, both to ``hi``, divided by ``over``."""
    x, j = S.x, S.j
    return S.Formula("test.augmented_ms", "mean square of [x, -sum x]", "q",
                     (S.sum_over(x[j] ** 2, j, hi) + S.sum_over(x[j], j, hi) ** 2) / over, {}, "definition")


def test_d_is_the_row_length_and_a_formula_written_for_another_width_is_refused():
    """Written with d the length of x (sums to d, mean over d + 1), the formula evaluates right; written with
    d the width of the augmented row (sums to d - 1), it is refused by name instead of silently summing one
    element short, and a d= that contradicts the row length is refused."""
    xs = np.array([[1.0, 2.0, 3.0], [-0.5, 0.25, 4.0]])
    aug = np.concatenate([xs, -xs.sum(-1, keepdims=True)], axis=-1)
    right = _augmented_ms(S.d, S.d + 1).numeric()
    np.testing.assert_allclose(right(x=xs), np.mean(aug ** 2, -1), rtol=1e-15)
    assert right.binds == {"d": "the arrays' last axis"}
    planted = _augmented_ms(S.d - 1, S.d).numeric()
    with pytest.raises(ValueError, match=r"test.augmented_ms: the sum .* has d - 1 = 2 terms but the arrays' "
                                         r"last axis has 3, and d is bound to that length"):
        planted(x=xs)
    with pytest.raises(ValueError, match=r"d is the row length here \(the arrays' last axis, 3\), but d=4"):
        right(x=xs, d=4)
    with pytest.raises(ValueError, match=r"weight has shape \(2,\), the row length is 3"):
        REG["rms.forward"].numeric()(x=xs, weight=np.ones(2), eps=1e-6)


def test_a_formula_whose_d_is_a_group_width_takes_d_from_its_caller():
    """A grouped norm's statistic over its group of d: the numeric function will not bind d to the row (a
    whole row of groups would silently give the row's mean square); it asks for d= and checks the groups."""
    f = S.Formula("test.group_ms", "mean square of a group", "ms", S.MS, {}, "definition", width="group width")
    xs = np.arange(1.0, 13.0).reshape(3, 4)                          # 3 groups of 4
    with pytest.raises(TypeError, match="d is the group width, not the row length: pass d="):
        f.numeric()(x=xs.reshape(12))
    with pytest.raises(ValueError, match=r"d is the group width \(d=4\) but the arrays' last axis has 12"):
        f.numeric()(x=xs.reshape(12), d=4)
    np.testing.assert_allclose(f.numeric()(x=xs, d=4), np.mean(xs ** 2, -1), rtol=1e-15)
    assert f.numeric().binds == {"d": "d= (the group width)"}
