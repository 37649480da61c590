"""The Start page's four-number example: the data file is what the code computes, and the code agrees with
the SymPy registry, the float64 oracle and the PyTorch reference."""
from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest
import torch

import reference_impl as ri
from reference_impl import oracle
from reference_impl import symbolic as S
from reference_impl.studies import worked_example as W

DATA = json.loads(W.OUT.read_text())
pytestmark = pytest.mark.guards("data:worked_example.json")


def test_data_file_is_what_the_code_computes():
    """No number of the example is typed: the committed file equals compute() (the provenance aside)."""
    assert {k: v for k, v in DATA.items() if k != "provenance"} == json.loads(json.dumps(W.compute()))
    assert DATA["provenance"]["command"] == W.COMMAND and DATA["provenance"]["quick"] is False


@pytest.mark.guards("rms.forward", "ln.forward", "rms.mean_square", "ln.mean", "ln.var")
def test_exact_values_match_registry_oracle_and_reference():
    x = np.array([W.X], dtype=np.float64)
    ex = W.compute()
    y_rms = np.array([float(Fraction(v)) for v in ex["rms"]["y"]["exact"]])
    y_ln = np.array([float(Fraction(v)) for v in ex["ln"]["y"]["exact"]])
    # the registry's formulas, evaluated in float64 at eps = 0
    np.testing.assert_allclose(S.get("rms.forward").numeric()(x=x, eps=0.0)[0], y_rms, rtol=1e-15)
    np.testing.assert_allclose(S.get("ln.forward").numeric()(x=x, eps=0.0)[0], y_ln, rtol=1e-15, atol=1e-15)
    assert S.get("rms.mean_square").numeric()(x=x)[0] == float(Fraction(ex["rms"]["mean_square"]["exact"]))
    assert S.get("ln.mean").numeric()(x=x)[0] == float(Fraction(ex["ln"]["mean"]["exact"]))
    assert S.get("ln.var").numeric()(x=x)[0] == float(Fraction(ex["ln"]["variance"]["exact"]))
    # the oracle and the reference with the eps the page quotes
    eps = ex["eps"]["eps"]
    np.testing.assert_allclose(oracle.rms_norm_forward(x, None, eps)[0], ex["eps"]["rms_y"], rtol=1e-14)
    np.testing.assert_allclose(oracle.layer_norm_forward(x, None, None, eps)[0], ex["eps"]["ln_y"], rtol=1e-14)
    xt = torch.tensor(x)
    np.testing.assert_allclose(ri.rms_norm(xt, None, eps).numpy()[0], ex["eps"]["rms_y"], rtol=1e-14)
    np.testing.assert_allclose(ri.layer_norm(xt, None, None, eps).numpy()[0], ex["eps"]["ln_y"], rtol=1e-14)


def test_the_example_shows_what_the_page_says():
    """RMSNorm keeps the mean (mu/RMS = 4/5 here) and lands on the sphere of radius sqrt(d); LayerNorm's
    output has mean 0 and variance 1; eps = 1e-6 changes nothing visible at this scale."""
    ex = W.compute()
    assert Fraction(ex["rms"]["y_mean"]["exact"]) == Fraction(ex["rms"]["mean_times_r"]["exact"]) != 0
    assert Fraction(ex["rms"]["y_sum_of_squares"]["exact"]) == ex["d"]
    assert Fraction(ex["ln"]["y_mean"]["exact"]) == 0 and Fraction(ex["ln"]["y_variance"]["exact"]) == 1
    assert ex["eps"]["rms_max_rel_change"] < 1e-7 and ex["eps"]["ln_max_rel_change"] < 1e-7


def test_bad_rows_are_rejected_with_a_clear_error():
    with pytest.raises(ValueError, match="empty"):
        W.compute(())
    with pytest.raises(ValueError, match="not the square"):
        W.compute((1, 2, 3, 4))
