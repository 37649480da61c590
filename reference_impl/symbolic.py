"""The symbolic registry: every formula on the site, as a SymPy expression with a stable id.

Definitions are written once (RMSNorm, LayerNorm, partial RMSNorm of arXiv:1910.07467, eps inside the
square root) for a *general* hidden size ``d``: vectors are ``IndexedBase`` objects indexed from 1 to
``d`` and statistics are ``Sum`` objects. Everything else is derived from them by SymPy:

- Jacobians come from ``sympy.diff`` of the forward definition with respect to ``x_m``;
- vector-Jacobian products (VJPs) are ``sum_i dy_i * J_im`` evaluated by :func:`normalize`, which only
  applies two rules SymPy leaves undone for symbolic ``d``: a sum over ``j`` of ``delta_jm * f(j)`` is
  ``f(m)`` (``m`` lies in ``1..d``), and a factor free of ``j`` leaves the sum over ``j``;
- each closed form shown on the site is proven equal to the derived expression (:func:`prove_equal`),
  and the tests confirm it again against explicit Jacobians for d = 1..8 (:func:`explicit_jacobian`).

Each :class:`Formula` carries its id, the right-hand side as displayed (with abbreviations such as ``r``
and ``xhat``), the same expression in primitive terms, its LaTeX (what the site prints) and a NumPy
function (``lambdify``). Notation: ``dy`` is the upstream gradient dL/dy (printed as ``\\bar{y}``); a
bar marks a gradient (``\\bar{x}_i = dL/dx_i``); ``g_i = \\gamma_i \\bar{y}_i``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

import numpy as np
import sympy as sp
from sympy import Indexed, IndexedBase, KroneckerDelta, Sum

# ----------------------------------------------------------------------------------------- symbols

d = sp.Symbol("d", integer=True, positive=True)            # hidden size
k = sp.Symbol("k", integer=True, positive=True)            # pRMSNorm: number of leading features used
eps = sp.Symbol("epsilon", nonnegative=True)
c = sp.Symbol("c", positive=True)                          # a positive re-scaling factor
s = sp.Symbol("s", real=True)                              # a shift (re-centering)
alpha = sp.Symbol("alpha", real=True)                      # a learned input scale (DyT, Derf)
i, j, l, m = sp.symbols("i j l m", integer=True)           # i: output index; j, l: summation; m: d/dx_m
x = IndexedBase("x", real=True)
gamma = IndexedBase("gamma", real=True)
beta = IndexedBase("beta", real=True)
dy = IndexedBase("dy", real=True)                          # upstream gradient dL/dy
one = IndexedBase("one")                                   # the all-ones vector (display only)
# display abbreviations, expanded by Formula.defs before any proof or evaluation
r = sp.Symbol("r", positive=True)
mu = sp.Symbol("mu", real=True)
var = sp.Symbol("sigma2", nonnegative=True)
ms = sp.Symbol("ms", nonnegative=True)
xhat = IndexedBase("xhat", real=True)
g = IndexedBase("g", real=True)

LATEX_NAMES = {
    dy.label: r"\bar{y}", xhat.label: r"\hat{x}", var: r"\sigma^{2}", ms: r"\operatorname{ms}",
    one.label: r"\mathbf{1}", eps: r"\epsilon",
}
# (the registry adds the name of the rsqrt count symbol)
NUMERIC_ARGS = {x: "x", gamma: "weight", beta: "bias", dy: "dy"}   # IndexedBase -> keyword name
ROW_ARRAYS = ("x", "dy")
FEATURE_ARRAYS = ("weight", "bias")


def sum_over(body, idx=j, hi=d):
    """``sum_{idx=1}^{hi} body``."""
    return Sum(body, (idx, 1, hi))


def latex(expr, order: str = "lex") -> str:
    """The site's LaTeX for a SymPy expression; ``order="rev-lex"`` prints x_j - mu and ms + eps."""
    return sp.latex(expr, symbol_names=LATEX_NAMES, order=order)


# ----------------------------------------------------------------------------------- definitions

MS = sum_over(x[j] ** 2) / d                               # mean square
MU = sum_over(x[l], l) / d                                 # mean
VAR = sum_over((x[j] - MU) ** 2) / d                       # biased variance, two-pass form
R_RMS = 1 / sp.sqrt(MS + eps)
R_LN = 1 / sp.sqrt(VAR + eps)
RMS_Y = gamma[i] * x[i] * R_RMS
LN_Y = gamma[i] * (x[i] - MU) * R_LN + beta[i]
PMS = sum_over(x[j] ** 2, j, k) / k                        # pRMSNorm: mean square of x_1..x_k
PRMS_Y = gamma[i] * x[i] / sp.sqrt(PMS + eps)


def _indexed_sub(base, fn):
    """A replacement rule turning ``base[idx]`` into ``fn(idx)``."""
    return (lambda e: isinstance(e, Indexed) and e.base == base, lambda e: fn(e.indices[0]))


def _at(expr, idx):
    """``expr`` (written with free index i) at index ``idx``."""
    return expr.xreplace({i: idx})


RMS_DEFS = {r: R_RMS, ms: MS, xhat: lambda q: x[q] * R_RMS, g: lambda q: gamma[q] * dy[q]}
LN_DEFS = {r: R_LN, mu: MU, var: VAR, xhat: lambda q: (x[q] - MU) * R_LN, g: lambda q: gamma[q] * dy[q]}
PRMS_DEFS = {r: 1 / sp.sqrt(PMS + eps), ms: PMS, xhat: lambda q: x[q] / sp.sqrt(PMS + eps),
             g: lambda q: gamma[q] * dy[q]}


def expand_defs(expr, defs: dict):
    """Replaces display abbreviations (r, mu, xhat_q, ...) by their definitions, recursively."""
    for _ in range(4):
        new = expr
        for key, val in defs.items():
            if isinstance(key, IndexedBase):
                new = new.replace(*_indexed_sub(key, val))
            else:
                new = new.xreplace({key: val})
        if new == expr:
            return expr
        expr = new
    return expr


# --------------------------------------------------------------------------- the two sum rules


def _sum_terms(body, idx, lo, hi):
    """Evaluates ``sum_{idx=lo}^{hi} body`` for symbolic bounds: Kronecker deltas collapse, free factors leave."""
    out = sp.Integer(0)
    for term in sp.Add.make_args(sp.expand(body)):
        factors = sp.Mul.make_args(term)
        delta = next((f for f in factors if isinstance(f, KroneckerDelta) and idx in f.free_symbols), None)
        if delta is not None:
            other = delta.args[1] if delta.args[0] == idx else delta.args[0]
            rest = sp.Mul(*[f for f in factors if f is not delta])
            out += rest.xreplace({idx: other})             # valid because `other` lies in lo..hi
            continue
        dep = [f for f in factors if idx in f.free_symbols]
        free = sp.Mul(*[f for f in factors if idx not in f.free_symbols])
        out += free * (Sum(sp.Mul(*dep), (idx, lo, hi)) if dep else (hi - lo + 1))
    return out


_J = sp.Symbol("j", integer=True)


def _canonical(expr):
    """Renames every summation variable to ``j`` so equal sums compare equal."""
    def ren(e):
        (v, lo, hi), = e.limits
        return Sum(e.function.xreplace({v: _J}), (_J, lo, hi))
    return expr.replace(lambda e: isinstance(e, Sum) and len(e.limits) == 1, ren)


def normalize(expr):
    """Applies the two sum rules bottom-up until nothing changes; the result has no nested sums."""
    for _ in range(12):
        new = expr.replace(lambda e: isinstance(e, Sum) and len(e.limits) == 1,
                           lambda e: _sum_terms(e.function, *e.limits[0]))
        new = _canonical(sp.expand(new))
        if new == expr:
            return expr
        expr = new
    raise RuntimeError("normalize did not reach a fixed point")


def prove_equal(a, b) -> bool:
    """True when ``a - b`` simplifies to 0 for general d (sums replaced by opaque non-negative symbols
    where they are sums of squares, real symbols otherwise)."""
    diff = normalize(sp.expand(a - b))
    if diff == 0:
        return True
    sums = sorted(diff.atoms(Sum), key=sp.default_sort_key)
    reps = {}
    for n, sm in enumerate(sums):
        square = sm.function.is_Pow and sm.function.exp == 2
        reps[sm] = sp.Symbol(f"S{n}", nonnegative=True) if square else sp.Symbol(f"S{n}", real=True)
    return sp.simplify(diff.xreplace(reps)) == 0


def vjp(forward, wrt: IndexedBase):
    """``sum_i dy_i * d forward_i / d wrt_m``, normalized, written with free index i (m renamed)."""
    jac = sp.diff(forward, wrt[m])
    return normalize(sum_over(dy[i] * jac, i)).xreplace({m: i})


# -------------------------------------------------------------------------------------- registry


@dataclass
class Formula:
    """One formula: ``lhs = display`` on the site; ``expr`` is ``display`` in primitive terms.

    kind: ``definition`` (typed once, the source of truth), ``derived`` (``derived`` holds what SymPy
    produced from a definition; ``expr`` is proven equal to it), ``identity`` (``lhs`` and ``display``
    are both SymPy expressions proven equal), or ``claim`` (a formula quoted from a source, judged by a test).
    reduce_rows: the numeric value is summed over the rows of a batch (gain and bias gradients).
    """

    id: str
    title: str
    lhs: object
    display: sp.Expr
    defs: dict
    kind: str
    note: str = ""
    derived: sp.Expr | None = None
    reduce_rows: bool = False
    proof_lhs: object = None
    order: str = "lex"
    _numeric: dict = field(default_factory=dict, repr=False)

    @property
    def expr(self):
        """The right side in primitive terms: operators unfolded, abbreviations expanded."""
        return expand_defs(unfold(self.display), self.defs)

    @property
    def lhs_expr(self):
        """The left side in primitive terms (``proof_lhs`` when the shown left side is only a name)."""
        return expand_defs(unfold(self.lhs if self.proof_lhs is None else self.proof_lhs), self.defs)

    @property
    def latex(self) -> str:
        left = self.lhs if isinstance(self.lhs, str) else latex(self.lhs, self.order)
        return f"{left} = {latex(self.display, self.order)}"

    def holds(self) -> bool:
        """The formula's own proof obligation (trivially true for definitions and claims)."""
        if self.kind == "derived":
            return prove_equal(self.derived, self.expr)
        if self.kind == "identity":
            return prove_equal(self.lhs_expr, self.expr)
        return True

    def numeric(self, side: str = "rhs") -> Callable:
        """NumPy function of keyword arrays ``x, dy`` (shape ``(..., d)``), ``weight, bias`` (``(d,)``),
        scalars ``eps``, ``k``, ``c``, ``s``. Per-element results have ``x``'s shape, per-row ones drop the
        last axis, ``reduce_rows`` ones are ``(d,)``. Float64 throughout."""
        if side not in self._numeric:
            expr = self.expr if side == "rhs" else self.lhs_expr
            self._numeric[side] = _make_numeric(expr, self.reduce_rows)
        return self._numeric[side]


class _Op(sp.Function):
    """An operator applied to a vector expression, printed upright; :func:`unfold` gives its components."""

    def _latex(self, printer, exp=None):
        body = ",\\; ".join(printer._print(a) for a in self.args)
        return rf"\operatorname{{{self.op_name}}}\left({body}\right)"


class RMSNorm(_Op):
    op_name = "RMSNorm"


class LayerNorm(_Op):
    op_name = "LayerNorm"


class PRMSNorm(_Op):
    op_name = "pRMSNorm"


class RMS(_Op):
    op_name = "RMS"


def _component(vec, idx):
    """Component ``idx`` of a vector expression built from x, one and scalars (``c x + s 1``)."""
    return vec.xreplace({x: x[idx], one: sp.Integer(1)})


def unfold(expr):
    """Rewrites ``RMSNorm(v, eps')``, ``LayerNorm(v, eps')``, ``pRMSNorm(v, eps')`` and ``RMS(v)`` in
    components (free index i), ``v`` being a vector expression such as ``c*x`` or ``x + s*one``."""
    def rms_norm(v, e):
        return RMS_Y.xreplace({eps: e}).replace(*_indexed_sub(x, lambda q: _component(v, q)))

    def layer_norm(v, e):
        return LN_Y.xreplace({eps: e}).replace(*_indexed_sub(x, lambda q: _component(v, q)))

    def prms_norm(v, e):
        return PRMS_Y.xreplace({eps: e}).replace(*_indexed_sub(x, lambda q: _component(v, q)))

    def rms(v):
        return sp.sqrt(MS).replace(*_indexed_sub(x, lambda q: _component(v, q)))

    table = {RMSNorm: rms_norm, LayerNorm: layer_norm, PRMSNorm: prms_norm, RMS: rms}
    out = expr.replace(lambda e: isinstance(e, _Op), lambda e: table[type(e)](*e.args))
    return _bare_vectors_at_i(out) if isinstance(expr, sp.Basic) and expr.has(_Op) else out


def _bare_vectors_at_i(expr):
    """After unfolding, a vector left bare next to components (``... + beta``) means its i-th component."""
    indexed = sorted(expr.atoms(Indexed), key=sp.default_sort_key)
    hide = {e: sp.Dummy() for e in indexed}
    bare = {b: b[i] for b in (x, gamma, beta, dy)}
    return expr.xreplace(hide).xreplace(bare).xreplace({v: e for e, v in hide.items()})


def _zero_based(expr):
    """Shifts every sum from 1..hi to 0..hi-1, matching NumPy indexing (the summands only index arrays)."""
    return expr.replace(lambda e: isinstance(e, Sum) and e.limits[0][1] == 1,
                        lambda e: Sum(e.function, (e.limits[0][0], 0, e.limits[0][2] - 1)))


_ERF = np.vectorize(math.erf, otypes=[np.float64])   # NumPy has no erf; math.erf is the C library's
_SCALARS = {eps: "eps", k: "k", c: "c", s: "s", d: "d", alpha: "alpha"}


def _make_numeric(expr, reduce_rows: bool):
    expr = _zero_based(expr)
    bases = sorted((b for b in expr.atoms(IndexedBase)), key=lambda b: str(b))
    unknown = [b for b in bases if b not in NUMERIC_ARGS]
    if unknown:
        raise ValueError(f"cannot evaluate {unknown}: expand abbreviations first")
    scalars = [sym for sym in _SCALARS if sym in expr.free_symbols]
    names = [NUMERIC_ARGS[b] for b in bases] + [_SCALARS[sym] for sym in scalars]
    has_i = i in expr.free_symbols
    # no cse: sympy 1.14 hoists summands that use the bound index out of their Sum
    fn = sp.lambdify(bases + scalars + [i], expr, modules=[{"erf": _ERF}, "numpy"])

    def numeric(**kw):
        missing = [n for n in names if n not in kw and n not in ("d", "weight", "bias")]
        if missing:
            raise TypeError(f"missing argument(s) {missing}; this formula takes {names}")
        xr = np.asarray(kw["x"] if "x" in kw else kw["dy"], dtype=np.float64)
        dd = xr.shape[-1]
        lead = xr.shape[:-1]
        vals = []
        for n in names:
            if n in ROW_ARRAYS:
                vals.append(np.asarray(kw[n], dtype=np.float64).reshape(-1, dd).T)       # (d, N)
            elif n in FEATURE_ARRAYS:
                default = np.ones(dd) if n == "weight" else np.zeros(dd)
                v = kw.get(n)
                vals.append((default if v is None else np.asarray(v, dtype=np.float64)).reshape(dd, 1))
            elif n == "d":
                vals.append(dd)
            else:
                vals.append(kw[n])
        out = np.asarray(fn(*vals, np.arange(dd)), dtype=np.float64)
        n_rows = math.prod(lead)
        if not has_i:                                     # one value per row
            return np.broadcast_to(out, (n_rows,)).reshape(lead)
        out = np.broadcast_to(out, (dd, n_rows))
        if reduce_rows:
            return out.sum(axis=1)
        return out.T.reshape(*lead, dd)

    numeric.arg_names = tuple(names)
    return numeric


# ------------------------------------------------------------------------------ building the registry


def _jacobian_closed(kind: str):
    if kind == "rms":
        return r * gamma[i] * (KroneckerDelta(i, m) - xhat[i] * xhat[m] / d)
    return r * gamma[i] * (KroneckerDelta(i, m) - sp.Rational(1, 1) / d - xhat[i] * xhat[m] / d)


@lru_cache(maxsize=1)
def registry() -> dict[str, Formula]:
    """Builds (once) and returns {id: Formula}. Every derived entry is checked by :meth:`Formula.holds`
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

    # each catalog norm's own formulas (reference_impl/norms/*: a spec's build_formulas)
    from .norms import catalog_formulas

    F.extend(catalog_formulas())
    ids = [f.id for f in F]
    dup = sorted({fid for fid in ids if ids.count(fid) > 1})
    if dup:
        raise ValueError(f"formula ids declared twice: {dup}")
    return {f.id: f for f in F}


def get(formula_id: str) -> Formula:
    reg = registry()
    if formula_id not in reg:
        raise KeyError(f"no formula {formula_id!r} in the registry; known: {sorted(reg)}")
    return reg[formula_id]


# ---------------------------------------------------------------------------- explicit checks, costs


def instantiate(expr, n: int, **indices):
    """``expr`` at hidden size ``n`` with sums expanded and the named free indices fixed."""
    out = expr.xreplace({d: sp.Integer(n)}).doit()
    idx = {i: indices.get("i"), m: indices.get("m")}
    return out.xreplace({key: sp.Integer(v) for key, v in idx.items() if v is not None}).doit()


def explicit_jacobian(forward, n: int) -> sp.Matrix:
    """The n x n Jacobian of ``forward`` (free index i) by differentiating its n explicit components."""
    comps = sp.Matrix([instantiate(forward, n, i=a) for a in range(1, n + 1)])
    return comps.jacobian([x[a] for a in range(1, n + 1)])


def equal_explicit(a, b, root_base) -> bool:
    """Zero test for explicit expressions: the root ``sqrt(root_base)`` becomes a positive symbol t, after
    which both sides are rational in x, t, eps and ``cancel`` decides."""
    t = sp.Symbol("t", positive=True)
    diff = (a - b).subs(root_base, t ** 2)
    return sp.cancel(sp.expand(diff)) == 0


# ------------------------------------------------------------------ operation and byte counts per row

OP_KINDS = ("add", "mul", "rsqrt")
_IOTA = sp.Symbol("iota", integer=True)


def count_ops(expr, abbreviations: dict | None = None) -> dict[str, sp.Expr]:
    """Arithmetic one row needs to evaluate ``expr`` for every i, as polynomials in d.

    Walks the expression for general d. A node that depends on a feature index runs d times, a row
    statistic once; a sum over n terms costs its body n times plus n-1 adds. An n-term sum is n-1 adds
    (a negated term is a subtraction), an n-factor product n-1 multiplies, with its row-level factors
    (constants such as 1/d, statistics) combined once per row before the per-element multiply; a square
    is one multiply, ``z**(-1/2)`` one rsqrt. A node already computed (the same vector, whatever its
    index is called) is free: the centred row x - mu feeds both the variance and the output, as in the
    reference code. ``abbreviations`` ({IndexedBase: q -> definition}) are vectors computed once, on
    first use (xhat and g in the backward)."""
    counts = dict.fromkeys(OP_KINDS, sp.Integer(0))
    seen: set = set()
    abbreviations = abbreviations or {}

    def per_element(e):
        return bool(e.free_symbols & {i, j, l, m, _J, _IOTA})

    def key(e):
        return e.xreplace({q: _IOTA for q in e.free_symbols & {i, j, l, m, _J}})

    def visit(e, mult):
        if isinstance(e, Indexed) and e.base in abbreviations:
            if e.base not in seen:
                seen.add(e.base)
                visit(abbreviations[e.base](_IOTA), d)
            return
        if e.is_Atom or isinstance(e, Indexed) or not e.atoms(Indexed):
            return                                   # inputs, and constants such as 1/d
        kk = key(e)
        if kk in seen:
            return
        seen.add(kk)
        times = mult if per_element(e) else 1
        if isinstance(e, Sum):
            (_, lo, hi), = e.limits
            visit(e.function, hi - lo + 1)
            counts["add"] += hi - lo
            return
        if e.is_Add or e.is_Mul:
            parts = [-a if a.could_extract_minus_sign() else a for a in e.args] if e.is_Add else \
                [f for f in e.args if f != -1]
            row = [a for a in parts if not per_element(a)]
            elem = [a for a in parts if per_element(a)]
            op = "add" if e.is_Add else "mul"
            if elem:
                counts[op] += max(len(row) - 1, 0) + (len(elem) - 1 + (1 if row else 0)) * times
            else:
                counts[op] += len(row) - 1
            for a in parts:
                visit(a, mult)
            return
        if e.is_Pow and e.exp == 2:
            counts["mul"] += times
            visit(e.base, mult)
            return
        if e.is_Pow and e.exp == sp.Rational(-1, 2):
            counts["rsqrt"] += times
            visit(e.base, mult)
            return
        raise ValueError(f"count_ops: no cost rule for {e}")

    visit(expr, d)
    return {op: sp.expand(v) for op, v in counts.items()}


def forward_ops(norm: str, bias: bool = True) -> dict[str, sp.Expr]:
    """Operation counts of one row of ``rms`` or ``ln`` forward with a gain (LN with or without bias)."""
    expr = {"rms": RMS_Y, "ln": LN_Y}[norm]
    if norm == "ln" and not bias:
        expr = expr.xreplace({beta[i]: 0})
    return count_ops(expr)


def backward_ops(norm: str, shown=None) -> dict[str, sp.Expr]:
    """Operation counts of one row of the input gradient given the saved statistics (r, and mu for
    LayerNorm, stay symbols: they are loaded, not recomputed). The gain and bias gradients are sums
    over rows of dy*xhat and dy, charged to that reduction."""
    centre = (lambda q: x[q] * r) if norm == "rms" else (lambda q: (x[q] - mu) * r)
    shown = get(f"{norm}.vjp_x").display if shown is None else shown
    return count_ops(shown, {xhat: centre, g: lambda q: gamma[q] * dy[q]})


ELEM_BYTES = sp.Symbol("b", positive=True, integer=True)   # bytes per element of x, y, dy, dx
STATS_SAVED = {"rms": 1, "ln": 2}                           # float32 statistics per row: r; (mu, r) in PyTorch


def bytes_per_row(norm: str, pass_: str = "forward", formulas=None) -> sp.Expr:
    """Bytes a kernel must move per row, counted from the per-row arrays the registry's formulas read,
    plus the one array each pass writes (y, or dx) and the float32 statistics saved by the forward and
    read by the backward (RMSNorm: r; LayerNorm: r and the mean, as torch.nn.functional.layer_norm keeps
    them). Gain and bias are read once per launch, not per row, and are left out."""
    fid = f"{norm}.forward" if pass_ == "forward" else f"{norm}.vjp_x"
    f = formulas[fid] if formulas is not None else get(fid)
    reads = {b for b in f.expr.atoms(IndexedBase) if NUMERIC_ARGS.get(b) in ROW_ARRAYS}
    return (len(reads) + 1) * d * ELEM_BYTES + 4 * STATS_SAVED[norm]
