"""The hand derivation of the backward (docs/gradients.md), step by step, at explicit sizes.

tests/core/test_symbolic.py proves every step equal to ``sympy.diff`` for a symbolic hidden size d. Here each
step is checked again without the sum rules of ``symbolic.normalize``: for d = 1..4 the step's formula,
with every sum written out, must equal the derivative of the explicit components; and a deliberately
wrong step (a sign flipped, LayerNorm's mean term dropped) must fail the same check, so the check can fail.
"""
from __future__ import annotations

import pytest
import sympy as sp

from reference_impl import symbolic as S

REG = S.registry()
# what each step differentiates: (quantity in primitive terms, statistic under the root, needs index i)
TARGETS = {
    "rms.bwd_step1": (S.MS, S.MS, False),
    "rms.bwd_step2": (S.R_RMS, S.MS, False),
    "rms.bwd_step3": (S.RMS_Y, S.MS, True),
    "ln.bwd_step1": (S.MU, S.VAR, False),
    "ln.bwd_step2": (S.VAR, S.VAR, False),
    "ln.bwd_step3": (S.R_LN, S.VAR, False),
    "ln.bwd_step4": (S.LN_Y, S.VAR, True),
}
VJPS = {"rms.bwd_step4": (S.RMS_Y, S.MS), "ln.bwd_step5": (S.LN_Y, S.VAR)}


def _derivative_matches(expr_step, quantity, stat, n, with_i) -> bool:
    base = S.instantiate(stat + S.eps, n)
    for a in range(1, n + 1) if with_i else [None]:
        q = S.instantiate(quantity, n, i=a) if with_i else S.instantiate(quantity, n)
        for b in range(1, n + 1):
            want = sp.diff(q, S.x[b])
            got = S.instantiate(expr_step, n, i=a, m=b) if with_i else S.instantiate(expr_step, n, m=b)
            if not S.equal_explicit(want, got, base):
                return False
    return True


def _vjp_matches(expr_step, forward, stat, n) -> bool:
    base = S.instantiate(stat + S.eps, n)
    comps = [S.instantiate(forward, n, i=a) for a in range(1, n + 1)]
    for b in range(1, n + 1):
        want = sum(S.dy[a] * sp.diff(comps[a - 1], S.x[b]) for a in range(1, n + 1))
        if not S.equal_explicit(want, S.instantiate(expr_step, n, m=b), base):
            return False
    return True


@pytest.mark.guards("rms.bwd_step1", "rms.bwd_step2", "rms.bwd_step3", "ln.bwd_step1", "ln.bwd_step2",
                    "ln.bwd_step3", "ln.bwd_step4")  # the keys of TARGETS (the page scanner reads literals)
@pytest.mark.parametrize("fid", list(TARGETS))
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_derivative_steps_at_explicit_sizes(fid, n):
    quantity, stat, with_i = TARGETS[fid]
    assert _derivative_matches(REG[fid].expr, quantity, stat, n, with_i)


@pytest.mark.guards("rms.bwd_step4", "ln.bwd_step5")
@pytest.mark.parametrize("fid", list(VJPS))
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_vector_jacobian_steps_at_explicit_sizes(fid, n):
    forward, stat = VJPS[fid]
    assert _vjp_matches(REG[fid].expr, forward, stat, n)


@pytest.mark.guards("rms.bwd_step2", "ln.bwd_step5")
def test_a_wrong_step_is_caught():
    wrong_sign = S.expand_defs(S.r ** 3 * S.x[S.m] / S.d, S.RMS_DEFS)
    assert not _derivative_matches(wrong_sign, S.R_RMS, S.MS, 3, False)
    no_mean_term = S.expand_defs(S.sum_over(S.g[S.i] * S.r * (sp.KroneckerDelta(S.i, S.m) - S.xhat[S.i] * S.xhat[S.m] / S.d), S.i),
                                 S.LN_DEFS)
    assert not _vjp_matches(no_mean_term, S.LN_Y, S.VAR, 3)


def test_guard_marks_name_every_step():
    """The decorators spell the ids out (the page scanner reads literals): none may be missing."""
    from site_hooks import guards

    guards.clear_caches()
    by_id, _ = guards.scan_tests()
    for fid in list(TARGETS) + list(VJPS):
        assert any("test_derivation_steps.py" in t for t in by_id.get(fid, [])), fid
