"""``python -m reference_impl.check --describe NAME [--json]`` and ``--list``: a model type's default-config
structure (said to be one), a released checkpoint's (its eps and variant, each value with its source), a
family, a norm class; unknown names fail with the names that contain them. The kit takes a checkpoint id."""
from __future__ import annotations

import json

import pytest

from reference_impl.check import cli, describe
from reference_impl.check.models import load_index, resolve

KEYS = {"model_type", "placement", "qk_norm", "qk_rope", "final_norm", "eps", "norms", "variants"}


def _run(capsys, *argv):
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_describe_a_model_type_says_it_is_the_default_config(capsys):
    code, out, _ = _run(capsys, "--describe", "llama", "--json")
    d = json.loads(out)
    assert code == 0 and KEYS <= set(d) and d["default_config"] is True
    row = load_index()["models"]["llama"]
    assert (d["placement"], d["eps"], d["norm_class"]) == (row["placement"], row["eps"], row["norm_class"])
    assert all({"class", "module", "role", "eps", "catalog"} <= set(n) for n in d["norms"])
    assert "meta-llama/Meta-Llama-3.1-8B" in d["checkpoints"]
    code, text, _ = _run(capsys, "--describe", "llama")
    assert code == 0 and "(default config)" in text and "LlamaRMSNorm" in text


def test_describe_a_checkpoint_gives_its_values_and_sources(capsys):
    code, out, _ = _run(capsys, "--describe", "meta-llama/Llama-3.1-8B", "--json")
    d = json.loads(out)
    assert code == 0 and KEYS <= set(d) and d["default_config"] is False
    assert d["model_type"] == "llama" and d["eps"] == 1e-5 and d["eps_default"] == 1e-6
    readings = d["checkpoint"]["values"]["rms_norm_eps"]["readings"]
    assert readings and all(r["source"] and r["where"] for r in readings)
    assert all(n["eps"] == 1e-5 for n in d["norms"])


def test_describe_a_checkpoint_that_sets_a_variant(capsys):
    d = describe.describe("facebook/opt-350m")
    base = describe.describe("opt")
    assert d["placement"] != base["placement"] and d["checkpoint"]["variants_set"] == ["do_layer_norm_before"]
    variants = {v["flag"]: v for v in base["variants"]}
    assert d["placement"] == variants["do_layer_norm_before"]["placement"]


def test_describe_a_family_and_a_norm_class():
    assert describe.describe("Gemma 2")["model_type"] == "gemma2"
    d = describe.describe("Qwen3RMSNorm")
    assert d["kind"] == "norm_class" and "qwen3" in d["model_types"]


def test_an_unknown_name_fails_naming_what_contains_it(capsys):
    code, _, err = _run(capsys, "--describe", "lama")
    assert code == 2 and "unknown" in err and "llama" in err


def test_list(capsys):
    code, out, _ = _run(capsys, "--list", "--json")
    d = json.loads(out)
    assert code == 0 and len(d["checkpoints"]) >= 60 and {"llama", "qwen3"} <= {m["model_type"] for m in d["model_types"]}
    code, text, _ = _run(capsys, "--list")
    assert code == 0 and "released checkpoints" in text


def test_the_function_is_required_without_describe_or_list(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([])
    assert exc.value.code == 2 and "--describe" in capsys.readouterr().err


def test_the_kit_resolves_a_checkpoint_id_with_its_eps_and_sources():
    t = resolve("meta-llama/Llama-3.1-8B")
    assert t.eps == 1e-5 and t.entry == resolve("llama").entry and resolve("llama").eps == 1e-6
    assert "meta-llama/Meta-Llama-3.1-8B" in t.source and "litgpt" in t.source
    assert resolve("META-LLAMA/llama-3.1-8b").eps == 1e-5   # repo ids are case-insensitive on the Hub
