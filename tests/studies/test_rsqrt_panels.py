"""The rsqrt page's ulp histograms (one panel per method) are drawn from the committed data file alone."""
from __future__ import annotations

import copy
import json

import pytest

from reference_impl.ops import rsqrt as R
from reference_impl.studies import rsqrt_panels as P

DATA = json.loads(P.DATA.read_text())


def test_committed_panels_are_what_the_data_draws(tmp_path):
    written = P.draw(DATA, tmp_path)
    assert written == [f"{P.NAME}.svg", f"{P.NAME}-dark.svg"]
    for name in written:
        assert (tmp_path / name).read_bytes() == (P.PLOTS / name).read_bytes(), \
            f"docs/data/plots/{name} is not what rsqrt_cpu.json draws: run python -m reference_impl.studies.rsqrt_panels"


def test_bins_are_labelled_as_the_native_histogram_counts():
    assert P.bin_labels(len(R.ulp_bin_edges())) == R.ulp_bin_edges()


def test_every_measured_method_gets_a_panel_in_the_pages_order():
    shares = P.shares(DATA)
    measured = [n for n in P.ORDER if (DATA["methods"].get(n) or {}).get("normal")]
    assert list(shares) == measured and len(measured) >= 5
    for h in shares.values():
        assert abs(h.sum() - 1) < 1e-12


@pytest.mark.parametrize("corrupt, words", [
    (lambda d: d.pop("methods"), "no 'methods'"),
    (lambda d: d["methods"]["sse_rsqrt"]["normal"].__setitem__("ulp_hist", [-1, 2, 3]), "not a histogram"),
    (lambda d: [m.pop("normal", None) for m in d["methods"].values()], "none of the methods"),
])
def test_a_broken_file_is_refused_by_name(corrupt, words):
    d = copy.deepcopy(DATA)
    corrupt(d)
    with pytest.raises(ValueError, match=words):
        P.shares(d)
