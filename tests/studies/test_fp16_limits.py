"""The float16 square edges quoted on the Numerics and Start pages, checked with exact rational arithmetic."""
from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest
import torch

from reference_impl.studies import fp16_limits as L

DATA = json.loads(L.OUT.read_text())
pytestmark = pytest.mark.guards("data:fp16_limits.json")
MAX = Fraction(65504)
OVERFLOW_AT = MAX + Fraction(16)          # half an ulp (32) above the largest float16: rounds to Inf from here
UNDERFLOW_AT = Fraction(1, 2 ** 25)       # half the smallest subnormal 2^-24: rounds to 0 up to here (ties to even)


def _next_up(v: float) -> float:
    return float(np.nextafter(np.float16(v), np.float16(np.inf)))


def test_data_file_is_what_the_code_computes():
    assert {k: v for k, v in DATA.items() if k != "provenance"} == L.square_edges()
    assert DATA["provenance"]["command"] == L.COMMAND


def test_overflow_edge_exactly():
    a = Fraction(DATA["overflow"]["largest_finite_square_of"])
    b = Fraction(DATA["overflow"]["smallest_inf_square_of"])
    assert float(b) == _next_up(float(a)), "the two edges must be neighbouring float16 values"
    assert a * a < OVERFLOW_AT <= b * b
    assert (a, b) == (Fraction(255875, 1000), 256)   # not sqrt(65504) = 255.94..., which is no float16


def test_underflow_edge_exactly():
    a = Fraction(DATA["underflow"]["largest_zero_square_of"])
    b = Fraction(DATA["underflow"]["smallest_nonzero_square_of"])
    assert float(b) == _next_up(float(a))
    assert a * a <= UNDERFLOW_AT < b * b
    assert a < Fraction(1, 2 ** 12), "values just below 2^-12 still square to a nonzero subnormal"


def test_float16_arithmetic_agrees_at_the_edges():
    for v, finite in ((DATA["overflow"]["largest_finite_square_of"], True), (DATA["overflow"]["smallest_inf_square_of"], False)):
        t = torch.tensor(v, dtype=torch.float16)
        assert bool(torch.isfinite(t * t)) is finite
        assert bool(torch.isfinite(t.float() * t.float())), "in float32 the square is finite"
    z = torch.tensor(DATA["underflow"]["largest_zero_square_of"], dtype=torch.float16)
    assert float(z * z) == 0.0 and float(z.float() * z.float()) > 0


def test_an_underflowing_row_is_inf_only_without_eps():
    """x / sqrt(0) = Inf needs eps = 0; with eps = 1e-6 the row's tiny mean square hardly matters next to
    eps, so float16 and float32 statistics agree closely (and both scale the row by about 1/sqrt(eps))."""
    r = DATA["underflow_row"]
    assert r["value"] ** 2 < DATA["float16_smallest_subnormal"] / 2, "the row's squares must underflow"
    assert r["eps0_float16_statistics_is_inf"] is True and r["eps0_float32_statistics"] == 1.0
    assert r["relative_difference"] < 1e-2
    assert abs(r["float32_statistics"] - r["value"] / (r["value"] ** 2 + r["eps"]) ** 0.5) < 1e-6
