"""docs/data/conformance.json and the Conformance page's statements, checked against the code that made them."""
from __future__ import annotations

import importlib.metadata
import json

import pytest
import torch

from reference_impl.studies import conformance as C
from reference_impl.studies import conformance_decode as CD
from reference_impl.studies import conformance_impls as CI

DATA = json.loads(C.OUT.read_text())
HALF = ("bfloat16", "float16")


def _cases(**match):
    return [c for c in DATA["cases"] if all(c[k] == v for k, v in match.items())]


# ------------------------------------------------------------------------------------------ metrics

def test_ulp_distance_counts_representable_values():
    for dt in (torch.bfloat16, torch.float16, torch.float32):
        one = torch.tensor([1.0], dtype=dt)
        up = torch.nextafter(one.float(), torch.tensor([2.0])).to(dt) if dt == torch.float32 else \
            (one.view(torch.int16) + 1).view(dt)
        assert int(C.ulp_distance(one, up)) == 1
        assert int(C.ulp_distance(torch.tensor([0.0], dtype=dt), torch.tensor([-0.0], dtype=dt))) == 0
        tiny = torch.tensor([torch.finfo(dt).tiny], dtype=dt)
        sub = (tiny.view(torch.int32 if dt == torch.float32 else torch.int16) * 0 + 1).view(dt)  # smallest subnormal
        assert int(C.ulp_distance(sub, -sub)) == 2, "across zero: +sub -> 0 -> -sub"
    with pytest.raises(TypeError, match="one dtype"):
        C.ulp_distance(torch.zeros(1), torch.zeros(1, dtype=torch.float16))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_the_compiled_formulas_are_the_modules_bit_for_bit(dtype):
    """torch.compile's row compiles these formulas: eagerly they must be the transformers modules."""
    for conv, formula in (("llama", CI.llama_formula), ("gemma", CI.gemma_formula)):
        x, _, w = C.inputs({"dtype": str(dtype).split(".")[1], "convention": conv, "residual": False, "d": 257}, 8)
        m = CI.reference_module(257, C.EPS, w, conv)
        with torch.no_grad():
            assert torch.equal(formula(x, w, C.EPS), m(x)), conv


@pytest.mark.guards("conformance.data")
@pytest.mark.parametrize("conv", ["llama", "gemma"])
def test_each_row_is_a_kit_comparison(conv):
    """One mechanism: the study's truth is the kit's truth and its metrics are the kit's comparison."""
    from reference_impl.check import kit, matching

    assert C.ulp_distance is matching.ulp_distance
    case = {"dtype": "bfloat16", "convention": conv, "residual": True, "d": 257, "id": "t"}
    x, r, w = C.inputs(case, 8)
    fam = C.target(conv)
    y, h, what = kit.truth(fam, matching.Probe(x, w, None, C.EPS, "t", fam.gain, r), residual=True)
    y_ci, h_ci = CI.reference_run(conv)(x, w, r, C.EPS, conv)
    assert what.startswith(("LlamaRMSNorm", "GemmaRMSNorm")) and torch.equal(y, y_ci) and torch.equal(h, h_ci)
    got = CI.conventions_run(x, w, r, C.EPS, conv)[0]
    exact = C.exact_output(x, r, w, conv)
    assert C.compare(got, y, exact) == kit.compare(got, y, exact)


# ------------------------------------------------------------------------------------------ the data file

@pytest.mark.guards("conformance.data")
def test_summary_rows_follow_from_the_cases():
    impls = [CI.Impl(r["key"], r["label"], r["engine"], r["where"], None, tuple(r["conventions"].split("/")),
                     r["source"]) for r in DATA["implementations"]]
    assert C.summarize(impls, DATA["cases"]) == DATA["implementations"]
    assert DATA["by_key"] == {r["key"]: r for r in DATA["implementations"]}
    assert C.by_dtype(impls, DATA["cases"]) == DATA["grid"]
    assert [c["id"] for c in DATA["cases"]] == [c["id"] for c in C.case_list()]
    assert DATA["provenance"]["quick"] is False


@pytest.mark.guards("conformance.data")
def test_at_least_seven_implementations_were_measured_here():
    measured = [r for r in DATA["implementations"] if r["measured"] > 0]
    engines = {r["key"] for r in measured if not r["key"].startswith("hf_")}
    assert DATA["measured_here"] == len(measured)
    assert len(engines) + 1 >= 7, engines  # the transformers modules count once


@pytest.mark.guards("conformance.data")
@pytest.mark.parametrize("case_id", ["float16-llama-res-4095", "bfloat16-gemma-res-4096", "float32-llama-nores-4096"])
def test_a_committed_case_reproduces(case_id):
    """The implementations that run in this process, on one case: the same results as the committed file."""
    keys = ("conventions", "torch_module", "torch_functional_f32", "ort_simplified", "ort_skip_simplified",
            "fused_hf", "fused_fp32") + tuple(k for k in DATA["by_key"] if k.startswith("hf_"))
    impls = [i for i in CI.implementations() if i.key in keys]
    case = next(c for c in C.case_list() if c["id"] == case_id)
    fresh = C.measure_case(case, impls)
    stored = next(c for c in DATA["cases"] if c["id"] == case_id)
    assert fresh["reference"] == stored["reference"]
    # the fused CPU op sums in the order of the instruction set it runs on (AVX-512 or AVX2): its bits
    # reproduce only on a machine with the same SIMD flags as the one that wrote the file
    same_isa = _simd_flags() == DATA["provenance"]["machine"]["simd_flags"]
    compared = 0
    for key, res in fresh["results"].items():
        if key.startswith("fused_") and not same_isa:
            assert res["max_ulp"] <= 2 * max(1, stored["results"][key]["max_ulp"]), (case_id, key)
            continue
        assert res == stored["results"][key], (case_id, key)
        compared += 1
    assert compared >= 4, (case_id, compared)


def _simd_flags():
    from reference_impl.provenance import machine

    return machine()["simd_flags"] if "simd_flags" in machine() else None


# ------------------------------------------------------------------------------------------ the page's advice

@pytest.mark.guards("conformance.advice")
def test_the_modules_are_bit_identical_and_the_replaying_kernels_nearly():
    for key, row in DATA["by_key"].items():
        if key.startswith("hf_") and key != "hf_olmo_2":  # OLMo 2 has its own order (gain, then one cast)
            assert row["identical"] == row["measured"] == row["cases"], key
    assert DATA["by_key"]["conventions"]["identical"] == len(DATA["cases"])
    for key in ("fused_hf", "triton_hf"):  # same casting order, another summation order: rare last bits
        for c in DATA["cases"]:
            if c["dtype"] in HALF:
                r, cast_once = c["results"][key], c["results"]["torch_module"]
                assert r["fraction_different"] <= 1e-3 and r["max_ulp"] <= 2, (key, c["id"])
                assert r["fraction_different"] < cast_once["fraction_different"] / 100, (key, c["id"])


@pytest.mark.guards("conformance.advice")
def test_the_cast_once_implementations_differ_from_llama_in_half_precision():
    for key in ("torch_module", "torch_functional_f32", "ort_simplified"):
        for c in _cases(convention="llama"):
            if c["dtype"] in HALF and "unavailable" not in c["results"][key]:
                assert not c["results"][key]["identical"], (key, c["id"])


@pytest.mark.guards("conformance.advice", "ops.residual_contract")
def test_the_fp32_residual_contract_changes_outputs_not_the_residual_stream():
    for key in ("fused_fp32", "triton_fp32"):
        for c in _cases(residual=True):
            r = c["results"][key]
            assert r["residual_identical"], (key, c["id"])
            if c["dtype"] in HALF:
                assert not r["identical"], (key, c["id"])
        for c in _cases(dtype="float32"):
            assert c["results"][key] == c["results"][key.replace("fp32", "hf")], (key, c["id"])


@pytest.mark.guards("conformance.decoding")
def test_decoding_counts_are_consistent_and_bit_identical_norms_change_nothing():
    dec = DATA["decoding"]
    assert dec["steps"] == CD.STEPS and dec["prompts"] == CD.PROMPTS
    for dname, rows in dec["results"].items():
        assert set(rows) == set(CD.DECODERS)
        for key, r in rows.items():
            if "unavailable" in r:
                continue
            assert r["tokens"] == CD.PROMPTS * CD.STEPS
            assert r["prompts_diverged"] == sum(f is not None for f in r["first_divergence"])
            llama = [c["results"].get(key) for c in _cases(dtype=dname, convention="llama")]
            if llama and all(x and x.get("identical") and x.get("residual_identical", True) for x in llama):
                assert r["max_logit_difference"] == 0.0 and r["tokens_different"] == 0, (dname, key)


def test_the_page_shows_both_decoding_tables():
    page = (C.REPO / "docs" / "conformance.md").read_text()
    for dname in CD.DECODE_DTYPES:
        assert f'data_table("conformance.json", "decoding.results.{dname}"' in page, dname


def test_liger_is_pinned_in_requirements():
    version = importlib.metadata.version("liger-kernel")
    assert f"liger-kernel=={version}" in (C.REPO / "requirements.txt").read_text()


@pytest.mark.guards("conformance.advice")
def test_compiled_llama_formula_differs_in_half_precision():
    for c in _cases(convention="llama"):
        if c["dtype"] in HALF:
            assert not c["results"]["torch_compile"]["identical"], c["id"]
