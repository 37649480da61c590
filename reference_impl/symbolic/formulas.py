"""The core registry: the formulas of the shared definitions, each a SymPy expression with a stable id.

Built from the definitions of :mod:`reference_impl.symbolic.algebra` (:func:`registry`, :func:`get`).
The catalog norms' own formulas (a spec's ``build_formulas``) are not here: this package imports nothing
above it. The site's whole registry, these and the catalog's together, is
:func:`reference_impl.norms.formula_registry`, assembled in the catalog, which imports this package.
"""
from __future__ import annotations

from functools import lru_cache

import sympy as sp
from sympy import IndexedBase, KroneckerDelta

from .algebra import (LATEX_NAMES, LN_DEFS, LN_Y, MS, MU, NUMERIC_ARGS, PMS, PRMS_DEFS, ROW_ARRAYS, R_LN, R_RMS,
                      RMS, RMS_DEFS, RMS_Y, VAR, Formula, LayerNorm, PRMSNorm, RMSNorm, beta, c, d, dy, eps, g, gamma, i, m, mu, ms,
                      j, normalize, one, r, s, sum_over, var, vjp, x, xhat)
from .costs import ELEM_BYTES, count_ops, forward_ops

# ------------------------------------------------------------------------------ building the registry


def _jacobian_closed(kind: str):
    if kind == "rms":
        return r * gamma[i] * (KroneckerDelta(i, m) - xhat[i] * xhat[m] / d)
    return r * gamma[i] * (KroneckerDelta(i, m) - sp.Rational(1, 1) / d - xhat[i] * xhat[m] / d)


@lru_cache(maxsize=1)
def registry() -> dict[str, Formula]:
    """Builds (once) and returns {id: Formula} for the shared definitions (the catalog's formulas are added
    by :func:`reference_impl.norms.formula_registry`). Every derived entry is checked by :meth:`Formula.holds`
    in the tests, not here, so importing stays fast."""
    F: list[Formula] = []
    y_i = IndexedBase("y")[i]
    xbar_i = IndexedBase(r"\bar{x}")[i]
    gbar_i = IndexedBase(r"\bar{\gamma}")[i]
    bbar_i = IndexedBase(r"\bar{\beta}")[i]
    J_im = IndexedBase("J")[i, m]

    # RMSNorm
    F.append(Formula("rms.mean_square", "Mean square of a row", ms, MS, RMS_DEFS, "definition"))
    F.append(Formula("rms.rstd", "Reciprocal RMS, the one statistic saved per row", r,
                     1 / sp.sqrt(ms + eps), RMS_DEFS, "definition", order="rev-lex"))
    F.append(Formula("rms.forward", "RMSNorm forward, eps inside the root", y_i, RMS_Y, RMS_DEFS, "definition", order="rev-lex"))
    F.append(Formula("rms.forward_short", "RMSNorm forward with the saved statistic", y_i,
                     gamma[i] * xhat[i], RMS_DEFS, "identity", proof_lhs=RMS_Y))
    raw_j, raw_v = sp.diff(RMS_Y, x[m]), vjp(RMS_Y, x)
    F.append(Formula("rms.jacobian_raw", "RMSNorm Jacobian as sympy.diff returns it", J_im, raw_j, RMS_DEFS,
                     "derived", derived=raw_j))
    F.append(Formula("rms.vjp_x_raw", "RMSNorm input gradient after the two sum rules", xbar_i, raw_v, RMS_DEFS,
                     "derived", derived=raw_v))
    F.append(Formula("rms.jacobian", "RMSNorm Jacobian", J_im, _jacobian_closed("rms"), RMS_DEFS, "derived",
                     derived=sp.diff(RMS_Y, x[m])))
    F.append(Formula("rms.vjp_x", "RMSNorm input gradient", xbar_i,
                     r * (g[i] - xhat[i] * sum_over(g[j] * xhat[j]) / d), RMS_DEFS, "derived",
                     derived=vjp(RMS_Y, x)))
    F.append(Formula("rms.vjp_weight", "RMSNorm gain gradient (summed over rows)", gbar_i,
                     dy[i] * xhat[i], RMS_DEFS, "derived", derived=vjp(RMS_Y, gamma), reduce_rows=True))
    # identities about RMS
    F.append(Formula("rms.rms_identity", "RMS is the 2-norm over sqrt(d)", RMS(x),
                     sp.sqrt(sum_over(x[j] ** 2)) / sp.sqrt(d), RMS_DEFS, "identity"))
    F.append(Formula("rms.mean_square_identity", "Mean of the normalized squares", sum_over(xhat[j] ** 2) / d,
                     ms / (ms + eps), RMS_DEFS, "identity", order="rev-lex"))
    F.append(Formula("rms.sphere", "Squared length of the normalized row", sum_over(xhat[j] ** 2),
                     d * ms / (ms + eps), RMS_DEFS, "identity", order="rev-lex"))

    # LayerNorm
    # printed with j, the summation index of every other statistic (MU itself sums over l so that it can
    # sit inside the variance's sum over j)
    F.append(Formula("ln.mean", "Mean of a row", mu, sum_over(x[j]) / d, LN_DEFS, "definition"))
    F.append(Formula("ln.var", "Biased variance of a row", var, sum_over((x[j] - mu) ** 2) / d, LN_DEFS,
                     "definition", order="rev-lex"))
    F.append(Formula("ln.rstd", "Reciprocal standard deviation, saved per row", r, 1 / sp.sqrt(var + eps),
                     LN_DEFS, "definition", order="rev-lex"))
    F.append(Formula("ln.forward", "LayerNorm forward, eps inside the root", y_i,
                     gamma[i] * (x[i] - mu) / sp.sqrt(var + eps) + beta[i], LN_DEFS, "definition", order="rev-lex"))
    F.append(Formula("ln.jacobian", "LayerNorm Jacobian", J_im, _jacobian_closed("ln"), LN_DEFS, "derived",
                     derived=sp.diff(LN_Y, x[m])))
    F.append(Formula("ln.vjp_x", "LayerNorm input gradient", xbar_i,
                     r * (g[i] - sum_over(g[j]) / d - xhat[i] * sum_over(g[j] * xhat[j]) / d), LN_DEFS,
                     "derived", derived=vjp(LN_Y, x)))
    F.append(Formula("ln.vjp_weight", "LayerNorm gain gradient (summed over rows)", gbar_i, dy[i] * xhat[i],
                     LN_DEFS, "derived", derived=vjp(LN_Y, gamma), reduce_rows=True))
    F.append(Formula("ln.vjp_bias", "LayerNorm bias gradient (summed over rows)", bbar_i, dy[i], LN_DEFS,
                     "derived", derived=vjp(LN_Y, beta), reduce_rows=True))
    F.append(Formula("ln.as_rms", "LayerNorm is RMSNorm of the centred row, plus the bias", LayerNorm(x, eps),
                     RMSNorm(x - mu * one, eps) + beta, LN_DEFS, "identity", order="rev-lex"))

    # partial RMSNorm (arXiv:1910.07467, section 4.1): the RMS from the first k of d features
    F.append(Formula("prms.forward", "pRMSNorm forward", y_i, gamma[i] * x[i] / sp.sqrt(ms + eps), PRMS_DEFS,
                     "definition", order="rev-lex"))
    F.append(Formula("prms.mean_square", "pRMSNorm mean square of the first k features", ms, PMS, PRMS_DEFS,
                     "definition"))

    # invariances at the normalization's input (arXiv:1910.07467, section 4)
    F.append(Formula("inv.rms.scale", "RMSNorm under input re-scaling", RMSNorm(c * x, eps),
                     RMSNorm(x, eps / c ** 2), RMS_DEFS, "identity"))
    F.append(Formula("inv.prms.scale", "pRMSNorm under input re-scaling", PRMSNorm(c * x, eps),
                     PRMSNorm(x, eps / c ** 2), PRMS_DEFS, "identity"))
    F.append(Formula("inv.ln.scale", "LayerNorm under input re-scaling", LayerNorm(c * x, eps),
                     LayerNorm(x, eps / c ** 2), LN_DEFS, "identity"))
    F.append(Formula("inv.ln.shift", "LayerNorm under input re-centering", LayerNorm(x + s * one, eps),
                     LayerNorm(x, eps), LN_DEFS, "identity", order="rev-lex"))

    # cost per row, counted by count_ops from the definitions above (a "count": checked by the tests)
    rsq = sp.Symbol("rsqrt")
    LATEX_NAMES[rsq] = r"\operatorname{rsqrt}"
    for norm, name in (("rms", "RMSNorm"), ("ln", "LayerNorm")):
        ops = forward_ops(norm)
        F.append(Formula(f"cost.{norm}.forward_flops", f"{name} forward: arithmetic per row",
                         rf"\text{{flops}}_{{\text{{{name}, fwd}}}}", ops["add"] + ops["mul"] + ops["rsqrt"] * rsq,
                         {}, "count"))
        ops = backward_ops(norm, next(f.display for f in F if f.id == f"{norm}.vjp_x"))
        F.append(Formula(f"cost.{norm}.backward_flops", f"{name} input gradient: arithmetic per row",
                         rf"\text{{flops}}_{{\text{{{name}, bwd}}}}", ops["add"] + ops["mul"] + ops["rsqrt"] * rsq,
                         {}, "count"))
        for pass_ in ("forward", "backward"):
            F.append(Formula(f"cost.{norm}.{pass_}_bytes", f"{name} {pass_}: bytes moved per row",
                             rf"\text{{bytes}}_{{\text{{{name}, {pass_[0]}wd}}}}", bytes_per_row(norm, pass_, {f.id: f for f in F}),
                             {}, "count"))

    # equivalence of Pre-LN and Pre-RMSNorm models, gain folding, rotation (reference_impl/equivalence.py,
    # page training.md; tests/core/test_equivalence.py)
    W_, b_ = IndexedBase("W", real=True), IndexedBase("b", real=True)
    Q_ = sp.Symbol("Q", commutative=False)
    F.append(Formula("equiv.centre_weight", "Centring a writer of the residual stream: its weight", IndexedBase(r"\tilde{W}")[i, m],
                     W_[i, m] - sum_over(W_[j, m]) / d, {}, "definition"))
    F.append(Formula("equiv.centre_bias", "Centring a writer of the residual stream: its bias", IndexedBase(r"\tilde{b}")[i],
                     b_[i] - sum_over(b_[j]) / d, {}, "definition"))
    F.append(Formula("equiv.ms_split", "Mean square = variance + squared mean", ms, var + mu ** 2,
                     {ms: MS, var: VAR, mu: MU}, "identity", proof_lhs=MS))
    F.append(Formula("equiv.rms_split", "RMSNorm of a row that is not centred", y_i,
                     gamma[i] * r * (x[i] - mu) + gamma[i] * mu * r, {**RMS_DEFS, mu: MU}, "identity",
                     proof_lhs=RMS_Y, order="rev-lex"))
    F.append(Formula("equiv.rms_mean", "Mean of RMSNorm's output at unit gain", sum_over(xhat[j]) / d, mu * r,
                     {**RMS_DEFS, mu: MU}, "identity"))
    F.append(Formula("equiv.fold_weight", "Folding a norm's gain into the next linear layer", IndexedBase(r"W^{\prime}")[i, j],
                     W_[i, j] * gamma[j], {}, "definition"))
    F.append(Formula("equiv.fold_bias", "Folding a norm's bias into the next linear layer's bias", IndexedBase(r"b^{\prime}")[i],
                     b_[i] + sum_over(W_[i, j] * beta[j]), {}, "definition"))
    F.append(Formula("equiv.rotation", "RMSNorm (unit gain) commutes with an orthogonal Q (row vectors)",
                     RMSNorm(x * Q_, eps), RMSNorm(x, eps) * Q_, RMS_DEFS, "claim",
                     note="computational invariance, arXiv:2401.15024 (SliceGPT) and arXiv:2404.00456 (QuaRot); "
                          "judged by tests/core/test_equivalence.py"))

    # the backward by hand (docs/gradients.md): every step of the chain rule, each proven equal to what
    # sympy.diff gives for the same quantity (tests/core/test_symbolic.py, tests/core/test_derivation_steps.py).
    # Sums are built unevaluated and printed in the order written (order="none"), as one would write them.
    A = lambda *terms: sp.Add(*terms, evaluate=False)                        # noqa: E731
    d_dxm = lambda name: rf"\frac{{\partial {name}}}{{\partial x_{{m}}}}"    # noqa: E731
    xbar_m = IndexedBase(r"\bar{x}")[m]
    delta = KroneckerDelta(i, m)
    F.append(Formula("rms.bwd_step1", "RMSNorm backward, step 1: the mean square", d_dxm(r"\operatorname{ms}"),
                     2 * x[m] / d, RMS_DEFS, "derived", derived=normalize(sp.diff(MS, x[m]))))
    F.append(Formula("rms.bwd_step2", "RMSNorm backward, step 2: the reciprocal RMS", d_dxm("r"),
                     -r ** 3 * x[m] / d, RMS_DEFS, "derived", derived=normalize(sp.diff(R_RMS, x[m]))))
    F.append(Formula("rms.bwd_step3", "RMSNorm backward, step 3: the product rule", d_dxm("y_{i}"),
                     gamma[i] * A(r * delta, -r ** 3 * x[i] * x[m] / d), RMS_DEFS, "derived",
                     derived=sp.diff(RMS_Y, x[m]), order="none"))
    F.append(Formula("rms.bwd_step4", "RMSNorm backward, step 4: the vector-Jacobian product", xbar_m,
                     sum_over(g[i] * r * A(delta, -xhat[i] * xhat[m] / d), i), RMS_DEFS, "derived",
                     derived=normalize(sum_over(dy[i] * sp.diff(RMS_Y, x[m]), i)), order="none"))
    F.append(Formula("ln.bwd_step1", "LayerNorm backward, step 1: the mean", d_dxm(r"\mu"),
                     1 / d, LN_DEFS, "derived", derived=normalize(sp.diff(MU, x[m]))))
    F.append(Formula("ln.bwd_step2", "LayerNorm backward, step 2: the variance", d_dxm(r"\sigma^{2}"),
                     2 / d * A(x[m], -mu), LN_DEFS, "derived", derived=normalize(sp.diff(VAR, x[m])), order="none"))
    F.append(Formula("ln.bwd_step3", "LayerNorm backward, step 3: the reciprocal standard deviation", d_dxm("r"),
                     -r ** 3 * A(x[m], -mu) / d, LN_DEFS, "derived", derived=normalize(sp.diff(R_LN, x[m])),
                     order="none"))
    F.append(Formula("ln.bwd_step4", "LayerNorm backward, step 4: the product rule", d_dxm("y_{i}"),
                     gamma[i] * A(r * A(delta, -sp.Integer(1) / d), -r ** 3 * A(x[i], -mu) * A(x[m], -mu) / d),
                     LN_DEFS, "derived", derived=sp.diff(LN_Y, x[m]), order="none"))
    F.append(Formula("ln.bwd_step5", "LayerNorm backward, step 5: the vector-Jacobian product", xbar_m,
                     sum_over(g[i] * r * A(delta, -sp.Integer(1) / d, -xhat[i] * xhat[m] / d), i),
                     LN_DEFS, "derived", derived=normalize(sum_over(dy[i] * sp.diff(LN_Y, x[m]), i)), order="none"))

    # --- across devices (reference_impl/distributed.py) --------------------------------------------------
    # Bytes each rank sends per row for one forward and one backward, counted from the float32 partials the
    # code exchanges, under ring algorithms: an all-reduce of N bytes sends 2(p-1)/p N per rank, an
    # all-gather whose result has N bytes sends (p-1)/p N. Checked against the bytes handed to the
    # collectives (tests/core/test_distributed.py); p is the number of ranks of the group.
    p_ = sp.Symbol("p", integer=True, positive=True)
    ring_ar, ring_ag, f32 = 2 * (p_ - 1) / p_, (p_ - 1) / p_, 4
    for fid, title, name, expr in (
        ("dist.rms.sharded_bytes", "Sharded RMSNorm: one float32 partial per row each way (all-reduce)",
         "RMSNorm, sharded", ring_ar * f32 + ring_ar * f32),
        ("dist.rms.sharded_bytes_deterministic", "Sharded RMSNorm, deterministic: partials all-gathered",
         "RMSNorm, sharded, det.", ring_ag * f32 * p_ + ring_ag * f32 * p_),
        ("dist.ln.sharded_bytes", "Sharded LayerNorm: (sum, sum of squares), then two backward partials",
         "LayerNorm, sharded", ring_ar * 2 * f32 + ring_ar * 2 * f32),
        ("dist.ln.sharded_bytes_welford", "Sharded LayerNorm with Welford/Chan: (mean, M2) all-gathered",
         "LayerNorm, sharded, Welford", ring_ag * 2 * f32 * p_ + ring_ar * 2 * f32),
        ("dist.allgather_row_bytes", "Gathering the whole row instead (forward only)",
         "all-gather of the row", ring_ag * d * ELEM_BYTES),
    ):
        F.append(Formula(fid, title, rf"\text{{bytes per row}}_{{\text{{{name}}}}}", sp.factor(expr), {}, "count"))
    for fid, title, name, n_grads in (
        ("dist.rms.sequence_parallel_bytes", "Sequence-parallel RMSNorm: the float32 dweight all-reduce",
         "RMSNorm, sequence-parallel", 1),
        ("dist.ln.sequence_parallel_bytes", "Sequence-parallel LayerNorm: dweight and dbias in one all-reduce",
         "LayerNorm, sequence-parallel", 2),
    ):
        F.append(Formula(fid, title, rf"\text{{bytes per step}}_{{\text{{{name}}}}}", sp.factor(ring_ar * n_grads * f32 * d),
                         {}, "count"))
    # merging two shards' statistics (Chan, Golub & LeVeque 1979), quoted; tests/core/test_distributed.py proves it
    n_a, n_b = sp.symbols("n_a n_b", integer=True, positive=True)
    F.append(Formula("dist.chan_merge", "Sum of squared deviations of two merged shards (Chan et al.)", "M_{2}",
                     sp.Symbol("M_{2,a}") + sp.Symbol("M_{2,b}") + sp.Symbol("delta") ** 2 * n_a * n_b / (n_a + n_b),
                     {}, "claim", note="delta = mean_b - mean_a; n_a, n_b: the shards' widths"))

    # the article's gradient (claim C12), quoted so that a test can judge it: y is the output gamma*xhat
    F.append(Formula("claim.c12", "The article's RMSNorm gradient, as quoted", xbar_i,
                     gamma[i] * r * (dy[i] - (gamma[i] * xhat[i]) / d
                                     * sum_over(gamma[j] * xhat[j] * dy[j])), RMS_DEFS, "claim",
                     note="y_i read as the layer output gamma_i * xhat_i; see tests/core/test_symbolic.py"))

    ids = [f.id for f in F]
    dup = sorted({fid for fid in ids if ids.count(fid) > 1})
    if dup:
        raise ValueError(f"formula ids declared twice: {dup}")
    return {f.id: f for f in F}


def get(formula_id: str) -> Formula:
    reg = registry()
    if formula_id not in reg:
        raise KeyError(f"no formula {formula_id!r} in the core registry (a catalog norm's formulas are in "
                       f"reference_impl.norms.formula_registry()); known: {sorted(reg)}")
    return reg[formula_id]


# ------------------------------------------------------------------------------ counts that read the registry

def backward_ops(norm: str, shown=None) -> dict[str, sp.Expr]:
    """Operation counts of one row of the input gradient given the saved statistics (r, and mu for
    LayerNorm, stay symbols: they are loaded, not recomputed). The gain and bias gradients are sums
    over rows of dy*xhat and dy, charged to that reduction."""
    centre = (lambda q: x[q] * r) if norm == "rms" else (lambda q: (x[q] - mu) * r)
    if shown is None:
        shown = get(f"{norm}.vjp_x").display
    return count_ops(shown, {xhat: centre, g: lambda q: gamma[q] * dy[q]})


STATS_SAVED = {"rms": 1, "ln": 2}                           # float32 statistics per row: r; (mu, r) in PyTorch


def bytes_per_row(norm: str, pass_: str = "forward", formulas=None) -> sp.Expr:
    """Bytes a kernel must move per row, counted from the per-row arrays the registry's formulas read,
    plus the one array each pass writes (y, or dx) and the float32 statistics saved by the forward and
    read by the backward (RMSNorm: r; LayerNorm: r and the mean, as torch.nn.functional.layer_norm keeps
    them). Gain and bias are read once per launch, not per row, and are left out."""
    fid = f"{norm}.forward" if pass_ == "forward" else f"{norm}.vjp_x"
    if formulas is None:
        formulas = {fid: get(fid)}
    f = formulas[fid]
    reads = {b for b in f.expr.atoms(IndexedBase) if NUMERIC_ARGS.get(b) in ROW_ARRAYS}
    return (len(reads) + 1) * d * ELEM_BYTES + 4 * STATS_SAVED[norm]
