"""The four-number example of the Start page, worked out by code instead of by hand.

``python -m reference_impl.studies.worked_example`` writes ``docs/data/worked_example.json`` (a second, no
timing involved): every intermediate value of RMSNorm and LayerNorm on the row ``X`` with gain 1 and bias 0,
as exact fractions (Python's :mod:`fractions`, so the hand arithmetic on the page is exact) and as floats,
plus what ``eps = 1e-6`` changes. ``tests/studies/test_worked_example.py`` checks the file against :func:`compute`,
and :func:`compute` against the SymPy registry, the float64 oracle and the PyTorch reference.
"""
from __future__ import annotations

import math
import sys
from fractions import Fraction

from ..provenance import REPO, finish, python_closure, record, write_json

OUT = REPO / "docs" / "data" / "worked_example.json"
COMMAND = "python -m reference_impl.studies.worked_example"
SOURCES = python_closure("reference_impl/studies/worked_example.py")

# Chosen so that the hand arithmetic stays in small fractions: mean 4, mean square 25 (RMS 5),
# variance 9 (standard deviation 3), and a mean far enough from 0 that the two norms visibly differ.
X = (-1, 5, 5, 7)
EPS_SHOWN = 1e-6   # a common released value (Llama 2, Mistral); see the History page


def _isqrt_exact(q: Fraction) -> Fraction:
    """The square root of a fraction that is a perfect square (the example is chosen so that it is)."""
    num, den = math.isqrt(q.numerator), math.isqrt(q.denominator)
    if Fraction(num * num, den * den) != q:
        raise ValueError(f"{q} is not the square of a fraction")
    return Fraction(num, den)


def _both(q: Fraction) -> dict:
    return {"exact": str(q), "value": float(q)}


def _vec(qs) -> dict:
    return {"exact": [str(q) for q in qs], "value": [float(q) for q in qs]}


def compute(x=X, eps: float = EPS_SHOWN) -> dict:
    """Every step of RMSNorm and LayerNorm on one row (gain 1, bias 0), exactly for eps = 0 and in float64
    for ``eps``. Raises ValueError for an empty row or a row whose statistics are not perfect squares."""
    if not x:
        raise ValueError("the example row must not be empty")
    xs = [Fraction(v) for v in x]
    d = len(xs)
    squares = [v * v for v in xs]
    ms = sum(squares) / d
    rms = _isqrt_exact(ms)
    y_rms = [v / rms for v in xs]
    mean = sum(xs) / d
    centred = [v - mean for v in xs]
    csq = [c * c for c in centred]
    var = sum(csq) / d
    std = _isqrt_exact(var)
    y_ln = [c / std for c in centred]
    xf = [float(v) for v in x]
    ms_f = sum(v * v for v in xf) / d
    mean_f = sum(xf) / d
    var_f = sum((v - mean_f) ** 2 for v in xf) / d
    y_rms_eps = [v / math.sqrt(ms_f + eps) for v in xf]
    y_ln_eps = [(v - mean_f) / math.sqrt(var_f + eps) for v in xf]
    return {
        "x": list(x),
        "d": d,
        "rms": {
            "squares": _vec(squares), "sum_of_squares": _both(sum(squares)), "mean_square": _both(ms),
            "rms": _both(rms), "r": _both(1 / rms), "y": _vec(y_rms),
            "y_mean": _both(sum(y_rms) / d), "y_mean_square": _both(sum(v * v for v in y_rms) / d),
            "y_sum_of_squares": _both(sum(v * v for v in y_rms)),
            "mean_times_r": _both(mean / rms),
        },
        "ln": {
            "sum": _both(sum(xs)), "mean": _both(mean), "centred": _vec(centred), "centred_squares": _vec(csq),
            "sum_of_centred_squares": _both(sum(csq)), "variance": _both(var), "std": _both(std),
            "r": _both(1 / std), "y": _vec(y_ln),
            "y_mean": _both(sum(y_ln) / d), "y_variance": _both(sum(v * v for v in y_ln) / d),
        },
        "eps": {
            "eps": eps,
            "rms_y": y_rms_eps,
            "ln_y": y_ln_eps,
            "rms_max_rel_change": max(abs(a - float(b)) / abs(float(b)) for a, b in zip(y_rms_eps, y_rms) if b),
            "ln_max_rel_change": max(abs(a - float(b)) / abs(float(b)) for a, b in zip(y_ln_eps, y_ln) if b),
        },
    }


def main(argv=None) -> int:
    prov = record(COMMAND, SOURCES, packages=("numpy",))
    payload = {"provenance": finish(prov), **compute()}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    write_json(OUT, payload)
    print(f"wrote {OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
