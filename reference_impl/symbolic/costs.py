"""Explicit checks at a fixed hidden size, and operation counts per row (:func:`count_ops`,
:func:`forward_ops`), from the definitions. The counts that read the registry's formulas (the input
gradient's operations, the bytes per row) are in :mod:`reference_impl.symbolic.formulas`, next to it."""
from __future__ import annotations

import sympy as sp
from sympy import Indexed, Sum

from .algebra import LN_Y, RMS_Y, _J, beta, d, i, j, l, m, x

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


ELEM_BYTES = sp.Symbol("b", positive=True, integer=True)   # bytes per element of x, y, dy, dx
