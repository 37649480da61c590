"""docs/data/check_example.json (the "Check your implementation" page's real run) against a fresh run."""
from __future__ import annotations

import json

import pytest

from reference_impl.studies import check_example as E

DATA = json.loads(E.OUT.read_text())


@pytest.mark.guards("check.example")
@pytest.mark.parametrize("name", ["rounds_before_gain", "eps_outside", "gemma_rms_norm"])
def test_the_committed_run_reproduces(name):
    fresh = E.run_one(E.FUNCTIONS[name])
    stored = DATA["runs"][name]
    for key in ("ok", "cases", "failed", "verdict", "table", "diagnosis", "matched", "closest", "closest_max_ulp",
                "max_ulp_vs_module", "failed_by_dtype", "failing_scales_by_dtype", "worst_err_scale", "closest_equal_in"):
        assert fresh[key] == stored[key], (name, key)
    assert fresh["worst_err_ulp"] == pytest.approx(stored["worst_err_ulp"], rel=1e-12)


@pytest.mark.guards("check.example")
def test_the_page_shows_what_the_kit_says_about_the_wrong_variants():
    runs = DATA["runs"]
    assert runs["gemma_rms_norm"]["ok"] and runs["gemma_rms_norm"]["matched"] == "rms_norm.gemma"
    assert not runs["rounds_before_gain"]["ok"] and runs["rounds_before_gain"]["matched"] == "rms_norm.llama"
    assert "rounds before the gain: Llama's order" in runs["rounds_before_gain"]["diagnosis"]
    assert not runs["eps_outside"]["ok"] and runs["eps_outside"]["closest"] == "rms_norm.gemma (eps outside)"
    # what the page says in words: in bfloat16 only the tiny rows fail; rounding before the gain fails every
    # bfloat16 case by at most one ulp and no float32 case
    assert runs["eps_outside"]["failing_scales_by_dtype"]["bf16"] == [1e-4]
    assert runs["eps_outside"]["worst_err_scale"] == 1e-4
    assert runs["rounds_before_gain"]["failed_by_dtype"] == {"bf16": runs["rounds_before_gain"]["failed"], "fp32": 0}
    assert runs["rounds_before_gain"]["max_ulp_vs_module"] == 1
    assert DATA["cli_exit_status"] == 1 and runs["rounds_before_gain"]["table"] in DATA["cli_output"]
    rc, out = E.run_cli()
    assert rc == DATA["cli_exit_status"] and out.rstrip("\n") == DATA["cli_output"]


@pytest.mark.guards("check.example", "check.diagnosis")
@pytest.mark.parametrize("name", ["sum_in_half", "blocked_sum"])
def test_each_feature_on_the_page_reproduces(name):
    fresh = E.run_feature(*E.FEATURES[name])
    assert fresh == DATA["features"][name]


def test_the_page_shows_what_each_feature_says():
    f = DATA["features"]
    assert f["sum_in_half"]["findings"] == ["acc_in_x"]
    assert f["sum_in_half"]["diagnosis"].startswith("the sum of squares is accumulated in bfloat16")
    assert f["blocked_sum"]["findings"] == ["bits_within_bound"] and "bits=False" in f["blocked_sum"]["diagnosis"]
    assert f["blocked_sum_no_bits"]["ok"] and not f["blocked_sum"]["ok"]
    assert f["split_by_batch"]["findings"][0] == "batch_variant"
    assert f["gated_norm"]["ok"] and "gated_rms_norm.qwen3_next (silu) bit for bit" in f["gated_norm"]["diagnosis"]
    assert f["detached_weight"]["findings"] == ["missing_grad"]
    assert f["detached_weight_forward_only"]["ok"]
    assert f["detached_weight_forward_only"]["notes"] == ["forward-only: gradients not checked"]
    for u in DATA["usage"]:
        assert u["exit_status"] == 2 and u["stderr"].startswith("error: ") and "\n" not in u["stderr"]
    assert [E.run_usage(a) for a in E.USAGE] == DATA["usage"]
