"""The algebra under the symbolic registry: symbols, definitions, the two sum rules, proofs, :class:`Formula`.

The registry itself is in :mod:`reference_impl.symbolic.formulas`, operation and byte counts in
:mod:`reference_impl.symbolic.costs`; :mod:`reference_impl.symbolic` re-exports all three.

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
from typing import Callable

import numpy as np
import sympy as sp
from sympy import Indexed, IndexedBase, KroneckerDelta, Sum
from sympy.printing.latex import LatexPrinter
from sympy.printing.precedence import PRECEDENCE

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
z = IndexedBase("z", real=True)                            # a gated norm's gate (keyword "gate")
one = IndexedBase("one")                                   # the all-ones vector (display only)
# display abbreviations, expanded by Formula.defs before any proof or evaluation
r = sp.Symbol("r", positive=True)
mu = sp.Symbol("mu", real=True)
var = sp.Symbol("sigma2", nonnegative=True)
ms = sp.Symbol("ms", nonnegative=True)
xhat = IndexedBase("xhat", real=True)
g = IndexedBase("g", real=True)
u = IndexedBase("u", real=True)                            # a gated input (gate before the norm)
uhat = IndexedBase("uhat", real=True)


class sigmoid(sp.Function):
    """The logistic function ``1 / (1 + exp(-a))``, kept whole so that formulas print it by name; its
    derivative is ``sigmoid(a) (1 - sigmoid(a))``; NumPy evaluates it through ``exp(-|a|)`` (no overflow)."""

    def fdiff(self, argindex=1):
        a = self.args[0]
        return sigmoid(a) * (1 - sigmoid(a))

    def _eval_rewrite_as_exp(self, a, **kwargs):
        return 1 / (1 + sp.exp(-a))

    def _eval_is_real(self):
        return self.args[0].is_real

    def _latex(self, printer, exp=None):
        out = rf"\operatorname{{sigmoid}}\left({printer._print(self.args[0])}\right)"
        return out if exp is None else rf"{out}^{{{exp}}}"


def silu(a):
    """``a * sigmoid(a)`` (also called swish): written out, so every formula shows what it computes."""
    return a * sigmoid(a)

LATEX_NAMES = {
    dy.label: r"\bar{y}", xhat.label: r"\hat{x}", var: r"\sigma^{2}", ms: r"\operatorname{ms}",
    one.label: r"\mathbf{1}", eps: r"\epsilon", uhat.label: r"\hat{u}",
}
# (the registry adds the name of the rsqrt count symbol)
NUMERIC_ARGS = {x: "x", gamma: "weight", beta: "bias", dy: "dy", z: "gate"}   # IndexedBase -> keyword name
ROW_ARRAYS = ("x", "dy", "gate")
FEATURE_ARRAYS = ("weight", "bias")


def sum_over(body, idx=j, hi=d):
    """``sum_{idx=1}^{hi} body``."""
    return Sum(body, (idx, 1, hi))


class _Printer(LatexPrinter):
    """SymPy's printer, except that a mean prints with its factor in front: ``Sum(...)/d``,
    ``Sum(...)/(d + 1)``, ``2 Sum(...)/k`` print as ``\\frac{1}{d} \\sum ...``, ``\\frac{1}{d + 1} \\sum ...``,
    ``\\frac{2}{k} \\sum ...``.

    SymPy sets ``Sum/d`` as a fraction with the sum in its numerator; inside a square root that shrinks the
    sum to script size (7-8 px on a phone). The factor in front keeps it at text size.
    """

    def _print_Mul(self, expr):
        coeff, rest = expr.as_coeff_Mul()
        factors = sp.Mul.make_args(rest)
        sums = [f for f in factors if isinstance(f, Sum)]
        inverse = [f for f in factors if f.is_Pow and f.exp == -1 and not f.base.has(Sum)]
        if not (coeff.is_Rational and len(inverse) == 1 and sums and len(inverse) + len(sums) == len(factors)):
            return super()._print_Mul(expr)
        sign = "- " if coeff < 0 else ""
        num, den = abs(coeff.p), coeff.q
        base = inverse[0].base
        below = self._print(base) if den == 1 else f"{den} {self.parenthesize(base, PRECEDENCE['Mul'])}"
        return rf"{sign}\frac{{{num}}}{{{below}}} {self._print(sp.Mul(*sums))}"


def latex(expr, order: str = "lex") -> str:
    """The site's LaTeX for a SymPy expression; ``order="rev-lex"`` prints x_j - mu and ms + eps."""
    return _Printer({"symbol_names": LATEX_NAMES, "order": order}).doprint(expr)


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
    width: what ``d`` stands for. ``"row"`` (the default): the length of the last axis of the arrays the
    numeric function is given, which every sum reaching ``d`` must cover exactly. Anything else names
    another length (``"group width"``): the numeric function then takes ``d`` only from its caller
    (``d=``) and checks the arrays' last axis against it.
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
    width: str = "row"
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
        scalars ``eps``, ``k``, ``c``, ``s`` (and ``d``, see ``width``). Per-element results have ``x``'s shape, per-row ones drop the
        last axis, ``reduce_rows`` ones are ``(d,)``. Float64 throughout."""
        if side not in self._numeric:
            expr = self.expr if side == "rhs" else self.lhs_expr
            self._numeric[side] = _make_numeric(expr, self.reduce_rows, self.width, self.id)
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


def _sigmoid(a):
    """1 / (1 + exp(-a)) without overflow: exp of -|a| only, e / (1 + e) on the negative side."""
    e = np.exp(-np.abs(a))
    return np.where(np.asarray(a) >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


_SCALARS = {eps: "eps", k: "k", c: "c", s: "s", d: "d", alpha: "alpha"}


def _sum_limits(expr) -> list[tuple[str, sp.Expr]]:
    """(printed sum, its number of terms) for every sum of a zero-based expression."""
    return [(str(sm), sm.limits[0][2] - sm.limits[0][1] + 1)
            for sm in sorted(expr.atoms(Sum), key=sp.default_sort_key)]


def _bind_d(kw: dict, dd: int, width: str, fid: str) -> int:
    """The value of ``d``: the row length, or the caller's ``d=`` for a formula whose d is another width."""
    given = kw.get("d")
    if width == "row":
        if given is not None and given != dd:
            raise ValueError(f"formula {fid}: d is the row length here (the arrays' last axis, {dd}), "
                             f"but d={given} was given; a formula whose d is another length declares it "
                             f"with Formula(width=...)")
        return dd
    if given is None:
        raise TypeError(f"formula {fid}: d is the {width}, not the row length: pass d= explicitly")
    if given != dd:
        raise ValueError(f"formula {fid}: d is the {width} (d={given}) but the arrays' last axis has "
                         f"{dd}: reshape them so that the last axis holds one {width}")
    return dd


def _check_sums(limits, values: dict, dd: int, fid: str) -> None:
    """Every sum reaching ``d`` covers the whole last axis; a sum to another bound (pRMSNorm's ``k``)
    stays inside it. A sum written for another width (``d - 1`` terms of a row of d) is an error here,
    not a silently shorter sum."""
    for text, terms in limits:
        n = terms.subs(values)
        if not n.is_Integer:
            raise ValueError(f"formula {fid}: the sum {text} has {terms} terms, not a whole number at {values}")
        if (d in terms.free_symbols and int(n) != dd) or not 0 <= int(n) <= dd:
            raise ValueError(f"formula {fid}: the sum {text} has {terms} = {int(n)} terms but the arrays' last "
                             f"axis has {dd}, and d is bound to that length: write the formula with d the length "
                             f"of the arrays it reads (a row [x, -sum x] built from x of length d sums x to d "
                             f"and divides by d + 1), or declare what d is with Formula(width=...)")


def _make_numeric(expr, reduce_rows: bool, width: str = "row", fid: str = "formula"):
    expr = _zero_based(expr)
    limits = _sum_limits(expr)
    bases = sorted((b for b in expr.atoms(IndexedBase)), key=lambda b: str(b))
    unknown = [b for b in bases if b not in NUMERIC_ARGS]
    if unknown:
        raise ValueError(f"cannot evaluate {unknown}: expand abbreviations first")
    scalars = [sym for sym in _SCALARS if sym in expr.free_symbols]
    labels = {b.label for b in bases}
    unnamed = sorted((str(sym) for sym in expr.free_symbols
                      if isinstance(sym, sp.Symbol) and sym not in _SCALARS and sym != i and sym not in labels))
    if unnamed:  # lambdify would leave them as SymPy symbols, and NumPy fails far from here
        raise ValueError(f"cannot evaluate a formula with the scalar(s) {unnamed}: give each its keyword in "
                         f"_SCALARS (reference_impl/symbolic/algebra.py), e.g. {{{unnamed[0]}: \"{unnamed[0]}\"}}")
    names = [NUMERIC_ARGS[b] for b in bases] + [_SCALARS[sym] for sym in scalars]
    has_i = i in expr.free_symbols
    # no cse: sympy 1.14 hoists summands that use the bound index out of their Sum
    fn = sp.lambdify(bases + scalars + [i], expr, modules=[{"erf": _ERF, "sigmoid": _sigmoid}, "numpy"])

    def numeric(**kw):
        missing = [n for n in names if n not in kw and n not in ("d", "weight", "bias")]
        if missing:
            raise TypeError(f"missing argument(s) {missing}; this formula takes {names}")
        xr = np.asarray(kw["x"] if "x" in kw else kw["dy"], dtype=np.float64)
        dd = _bind_d(kw, xr.shape[-1], width, fid)
        lead = xr.shape[:-1]
        _check_sums(limits, {d: dd, **{sym: kw[key] for sym, key in _SCALARS.items() if key in kw and sym != d}},
                    dd, fid)
        vals = []
        for n in names:
            if n in ROW_ARRAYS:
                vals.append(np.asarray(kw[n], dtype=np.float64).reshape(-1, dd).T)       # (d, N)
            elif n in FEATURE_ARRAYS:
                default = np.ones(dd) if n == "weight" else np.zeros(dd)
                v = default if kw.get(n) is None else np.asarray(kw[n], dtype=np.float64)
                if v.shape != (dd,):
                    raise ValueError(f"formula {fid}: {n} has shape {v.shape}, the row length is {dd}")
                vals.append(v.reshape(dd, 1))
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
    numeric.binds = {"d": "the arrays' last axis" if width == "row" else f"d= (the {width})"}
    return numeric
