"""docs/data/numerics.json (written by ``python -m reference_impl.studies.numerics``) is well formed, comes
from the current sources, and its numbers respect the bounds the Numerics page states."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from reference_impl.provenance import source_hash
from reference_impl.studies import numerics as ns
from reference_impl import tolerances as tol

REPO = Path(__file__).resolve().parents[2]
DATA = json.loads((REPO / "docs" / "data" / "numerics.json").read_text())
pytestmark = pytest.mark.guards("data:numerics.json")


def test_meta_names_machine_versions_and_current_sources():
    prov = DATA["provenance"]
    assert prov["machine"]["cpu"] and prov["machine"]["cores"] >= 1 and prov["versions"]["python"]
    assert prov["versions"]["torch"] == torch.__version__
    assert prov["date"][:4].isdigit() and prov["quick"] is False
    assert prov["sources"] == ns.SOURCES and prov["source_hash"] == source_hash(ns.SOURCES), (
        "sources changed: rerun python -m reference_impl.studies.numerics")
    for name in DATA["plots"]:
        text = (REPO / "docs" / "data" / "plots" / name).read_text()
        assert text.lstrip().startswith("<?xml") and "<svg" in text


@pytest.mark.guards("parity.adoption", "C34")
def test_adoption_matches_the_installed_transformers():
    assert DATA["adoption"] == ns.adoption()


@pytest.mark.guards("numerics.casting_order", "C40")
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_casting_orders_within_their_ulp_bounds(dtype):
    """Cast once: one rounding of a value computed to ~1e-6 relative in float32, so <= 0.5 ulp (plus the
    float32 error, far below an ulp). Cast then gain: the normalized value rounds (0.5 ulp of h, which is
    at most 1 ulp of y = w*h since |w| scales h by at most one binade boundary's factor 2), then the
    product rounds (0.5 ulp): <= 1.5 ulp. The two orders are then at most 2 ulps apart."""
    c = DATA["casting"][dtype]
    assert sum(c["histogram_ulp_between"].values()) <= c["elements"]
    slack = 2 ** -8  # the float32 computation's error, in output ulps, is far below this
    once, twice = c["max_ulp_vs_oracle"].values()
    assert once <= 0.5 + slack and twice <= 1.5 + slack
    assert c["max_ulp_between"] <= 2.0 and 0 < c["fraction_different"] < 1
    g = c["gain_near_one"]
    # storing w - 1 (Gemma) instead of w keeps the gain's error at the spacing near the offset, not near 1
    assert g["max_abs_error_offset"] < g["max_abs_error_direct"] / 8


@pytest.mark.guards("numerics.fp16_overflow", "C17")
def test_fp16_overflow_rows():
    ov = DATA["fp16_overflow"]
    assert ov["overflow_threshold"] == pytest.approx(math.sqrt(torch.finfo(torch.float16).max))
    u16 = tol.unit_roundoff(torch.float16)
    bound = u16 + tol.gamma(ov["d"] // 2 + 6, tol.unit_roundoff(torch.float32))
    for r in ov["rows"]:
        assert r["max_rel_error_fp32_stats"] <= bound
        if r["fraction_of_squares_inf"] > 0:
            assert r["max_rel_error_fp16_stats"] == 1.0  # every output of the row collapsed to 0
        else:
            assert r["max_rel_error_fp16_stats"] <= bound
    assert any(r["fraction_of_squares_inf"] > 0 for r in ov["rows"])


@pytest.mark.guards("numerics.accumulation")
def test_accumulation_errors_respect_the_first_order_bound():
    acc = DATA["accumulation"]
    sizes = acc["sizes"]
    assert sizes == sorted(sizes) and sizes[0] >= 64
    for name in ("float16", "bfloat16", "float32"):
        for err, b in zip(acc["series"][f"sequential {name}"], acc["bounds"][name]):
            if b != "none" and err != "inf":
                assert err <= b
    u32 = tol.unit_roundoff(torch.float32)
    for key in ("torch float32 reduction (bfloat16 input)", "torch float32 reduction (float32 input)"):
        for s, err in zip(sizes, acc["series"][key]):
            assert err <= tol.gamma(s, u32)
    # the sequential low-precision sums are orders of magnitude worse than float32 at every size
    for lo in ("float16", "bfloat16"):
        for a, b in zip(acc["series"][f"sequential {lo}"], acc["series"]["torch float32 reduction (float32 input)"]):
            assert a == "inf" or a > 100 * b


@pytest.mark.guards("numerics.eps_placement", "C21")
def test_eps_placement_gap_matches_closed_form():
    """Measured in float32; the gap is a ratio of two scales, so the closed form holds to float32 accuracy."""
    u32 = tol.unit_roundoff(torch.float32)
    for r in DATA["eps_placement"]["rows"]:
        assert abs(r["relative_gap"] - r["closed_form"]) <= 64 * u32 * (1 + r["closed_form"])


@pytest.mark.guards("numerics.neox_kernel")
def test_neox_kernel_and_two_pass_both_within_policy():
    for name, r in DATA["neox_kernel"].items():
        assert r["max_error_over_bound_kernel"] <= 1.0 and r["max_error_over_bound_two_pass"] <= 1.0
    assert DATA["neox_kernel"]["float32"]["fraction_different"] > 0  # the kernel is not the two-pass formula
