"""The census's config variants and its readings of the modeling source.

- Variants are found by changing config fields and re-tracing, not from a list: a subset is re-run and compared
  with the committed records, and each variant the issue names (BLOOM's Post-LN switch, GPT-NeoX's parallel
  residual, OLMoE's clipping, Falcon-H1's gated-norm order) is among them.
- Each reading the census once got wrong is checked against the modeling source itself: the QK-norm's order
  when RoPE rotates one tensor per call, a final norm reached through a merge, the key norm of a fused
  projection, the value norm's role, an input norm read first by a side block, a model type with no
  causal-LM class, and both branches of a parallel block.
"""
from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")
import torch  # noqa: E402

from reference_impl.studies import schemas  # noqa: E402
from reference_impl.studies.census import variants as var  # noqa: E402
from reference_impl.studies.census.placement import model_types, place  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FILE = REPO / "docs" / "data" / "census.json"
NORMS = (torch.nn.LayerNorm, torch.nn.RMSNorm)
SUBSET = ("bloom", "gpt_neox", "olmoe", "falcon_h1", "llama")


@pytest.fixture(scope="module")
def data():
    return schemas.check_file(FILE)


@pytest.fixture(scope="module")
def models(data):
    return {m["model_type"]: m for m in data["models"]}


@pytest.fixture(scope="module")
def catalog(data):
    return {c["name"]: c["catalog"] for c in data["classes"]}


def _source(module: str, cls: str) -> str:
    import importlib

    return inspect.getsource(getattr(importlib.import_module(f"transformers.models.{module}"), cls))


@pytest.mark.guards("census.variants")
@pytest.mark.parametrize("model_type", SUBSET)
def test_variants_are_reproduced(models, catalog, model_type):
    want = models[model_type]
    got, failed = var.variants(model_type, NORMS, catalog)
    assert got == want["variants"] and failed == want["untoggled"]


@pytest.mark.guards("census.variants")
def test_the_named_flags_are_found_by_toggling(models):
    found = {(t, v["flag"]): v for t, m in models.items() for v in m["variants"]}
    bloom = found[("bloom", "apply_residual_connection_post_layernorm")]
    assert bloom["value"] is True and bloom["placement"] != models["bloom"]["placement"]
    assert found[("gpt_neox", "use_parallel_residual")]["parallel"] is False
    assert found[("olmoe", "clip_qkv")]["clip"] is True and "clamps" in found[("olmoe", "clip_qkv")]["changes"]
    gate = found[("falcon_h1", "mamba_norm_before_gate")]
    assert gate["requires"] == {"mamba_rms_norm": True} and gate["changes"] == ["norm_attrs"]
    assert found[("cohere", "use_qk_norm")]["qk_norm"] == "per_head"
    assert ("llama", "attention_bias") not in found, "a bias changes no norm: not a variant"
    # what decides a candidate is the source: a field the modeling file never names is not tried
    assert "use_parallel_residual" in {f for f, _, _ in var.candidates("gpt_neox")}
    assert not {f for f, _, _ in var.candidates("llama")} & {"use_cache", "hidden_size", "return_dict"}


@pytest.mark.guards("census.variants")
def test_every_variant_differs_from_its_default(models):
    for t, m in models.items():
        for v in m["variants"]:
            assert v["changes"], (t, v["flag"])
            assert v["value"] != v["default"], (t, v["flag"])
        for u in m["untoggled"]:
            assert u["reason"], (t, u["flag"])


@pytest.mark.guards("census.placements")
def test_qk_norm_before_a_rotary_call_that_takes_one_tensor(models, catalog):
    src = _source("gemma3n.modeling_gemma3n", "Gemma3nTextAttention")
    assert re.search(r"apply_rotary_pos_emb\(query_states, cos, sin", src), "RoPE no longer takes one tensor"
    assert src.index("self.q_norm(") < src.index("apply_rotary_pos_emb(query_states")
    assert src.index("self.k_norm(") < src.index("apply_rotary_pos_emb(key_states")
    rec = place("gemma3n_text", NORMS, catalog)
    assert rec["qk_rope"] == "before" == models["gemma3n_text"]["qk_rope"]
    assert models["gemma4_text"]["qk_rope"] == "before"


@pytest.mark.guards("census.placements")
def test_a_final_norm_reached_through_a_merge(models, catalog):
    src = _source("gemma3n.modeling_gemma3n", "Gemma3nTextModel")
    assert re.search(r"hidden_states = self\.norm\(hidden_states\)", src)
    rec = place("gemma3n_text", NORMS, catalog)
    assert rec["final_norm"] is True and not any(e.startswith("after the layers: model.norm ")
                                                 for e in rec["extra_norms"])
    assert models["deepseek_v4"]["final_norm"] is True


@pytest.mark.guards("census.placements")
def test_the_key_norm_of_a_fused_projection_is_a_key_norm(catalog):
    src = _source("persimmon.modeling_persimmon", "PersimmonAttention")
    assert "self.query_key_value(" in src and "self.k_layernorm(key_states)" in src
    rows = {r["module"]: r["role"] for r in place("persimmon", NORMS, catalog)["layer"]}
    assert rows["self_attn.q_layernorm"] == "q_per_head" and rows["self_attn.k_layernorm"] == "k_per_head"


@pytest.mark.guards("census.placements")
def test_value_norm_and_an_input_norm_read_first_by_a_side_block(models):
    src = _source("gemma3n.modeling_gemma3n", "Gemma3nTextDecoderLayer")
    assert "self.input_layernorm(active_prediction)" in src
    assert src.index("self.laurel(") < src.index("self.self_attn(")   # LAUREL reads the normed input first
    attn = _source("gemma3n.modeling_gemma3n", "Gemma3nTextAttention")
    assert "self.v_norm(value_states)" in attn
    rows = {r["module"]: r for r in models["gemma3n_text"]["layer"]}
    assert (rows["input_layernorm"]["role"], rows["input_layernorm"]["sublayer"]) == ("input", "attention")
    assert rows["self_attn.v_norm"]["role"] == "v_per_head"
    assert {r["module"]: r["role"] for r in models["gemma4_text"]["layer"]}["self_attn.v_norm"] == "v_per_head"


@pytest.mark.guards("census.placements")
def test_a_model_type_without_a_causal_lm_class_is_traced(models, catalog):
    from transformers.models.auto import modeling_auto as ma

    assert "chameleon" not in ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and "chameleon" in model_types()
    assert models["chameleon"]["status"] == "traced" and models["chameleon"]["qk_norm"] == "per_head"


@pytest.mark.guards("census.placements")
def test_both_branches_of_a_parallel_block(models):
    src = _source("cohere.modeling_cohere", "CohereDecoderLayer")
    assert re.search(r"self\.mlp\(hidden_states", src) and re.search(r"self\.self_attn\(\s*hidden_states", src)
    rows = models["cohere"]["layer"]
    assert [(r["module"], r["sublayer"]) for r in rows] == [("input_layernorm", "attention+mlp")]
    assert models["cohere"]["parallel"] is True
