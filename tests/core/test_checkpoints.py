"""The checkpoint list (reference_impl/checkpoints.yaml) is well formed, names every family of
reference_impl/families.py, and its LayerNorm families really build torch.nn.LayerNorm in the installed
transformers, with the eps of the config attribute the list names. Its released checkpoints cite where each
value was read, docs/data/checkpoints.json is the list resolved under the census, two sources are compared,
and a value that contradicts its model type's variants is refused."""
from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest
import torch
import yaml

from reference_impl.families import FAMILIES
from reference_impl.studies import schemas
from reference_impl.studies.census import checkpoints as ck

REPO = Path(__file__).resolve().parents[2]
LIST = yaml.safe_load((REPO / "reference_impl" / "checkpoints.yaml").read_text())
pytestmark = pytest.mark.guards("adoption.checkpoints")
REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
TINY = dict(hidden_size=64, n_embd=64, d_model=64, num_attention_heads=4, n_head=4, num_hidden_layers=1, n_layer=1,
            num_key_value_heads=4, intermediate_size=128, ffn_dim=128, vocab_size=128, max_position_embeddings=64,
            n_positions=64, word_embed_proj_dim=64)


def _all_checkpoints():
    for group in ("rmsnorm_families", "layernorm_families"):
        for fam in LIST[group]:
            for c in fam["checkpoints"]:
                yield fam["family"], c


def test_every_row_is_complete_and_cited():
    rows = list(_all_checkpoints())
    assert len(rows) >= 20
    for family, c in rows:
        assert REPO_ID.match(c["repo"]), (family, c)
        assert isinstance(c["eps"], float) and 0 < c["eps"] < 1e-3, (family, c)
        assert c["release"].strip(), (family, c)
        assert c["key"] is None or re.fullmatch(r"[a-z_]+(\.[a-z_]+)?", c["key"]), (family, c)
        if c["key"] is None:
            assert c.get("note"), f"{family}: a checkpoint without an eps key must say why"
    assert len({c["repo"] for _, c in rows}) == len(rows), "a repository listed twice"


def test_every_family_of_the_family_table_has_a_released_checkpoint():
    listed = [f["family"] for f in LIST["rmsnorm_families"]]
    assert listed == [f[0] for f in FAMILIES], "same families, same order as reference_impl/families.py"


def _tiny_config(cls):
    cfg = cls()
    for k, v in TINY.items():
        if hasattr(cfg, k):
            setattr(cfg, k, v)
    return cfg


@pytest.mark.parametrize("fam", LIST["layernorm_families"], ids=lambda f: f["family"])
def test_layernorm_family_builds_torch_layernorm_with_the_config_eps(fam):
    config_mod = importlib.import_module(f"transformers.models.{fam['folder']}.configuration_{fam['folder']}")
    model_mod = importlib.import_module(f"transformers.models.{fam['folder']}.modeling_{fam['folder']}")
    cfg = _tiny_config(getattr(config_mod, fam["config_class"]))
    marker = 3.25e-5  # a value no default has: the norms must take their eps from this attribute
    if fam["eps_attribute"]:
        setattr(cfg, fam["eps_attribute"], marker)
    model_cls = next(getattr(model_mod, n) for n in dir(model_mod)
                     if n.endswith("Model") and not n.endswith("PreTrainedModel") and isinstance(getattr(model_mod, n), type))
    torch.manual_seed(0)
    model = model_cls(cfg)
    norms = [m for m in model.modules() if "norm" in type(m).__name__.lower()]
    assert norms, f"{fam['family']}: no norm module found"
    assert all(type(m) is torch.nn.LayerNorm for m in norms), {type(m).__name__ for m in norms}
    want = marker if fam["eps_attribute"] else 1e-5  # OPT: nn.LayerNorm's own default
    assert {m.eps for m in norms} == {want}


# ---------------------------------------------------------------- the released checkpoints, resolved
DATA = REPO / "docs" / "data" / "checkpoints.json"
CENSUS = REPO / "docs" / "data" / "census.json"


def test_every_checkpoint_value_names_where_it_was_read():
    sources = LIST["sources"]
    rows = LIST["checkpoints"]
    read = {}   # (repo, field) -> the sources that gave it
    for r in rows:
        assert REPO_ID.match(r["repo"]) and r["model_type"], r
        for field, (value, where) in r["values"].items():
            source, _, detail = where.partition(": ")
            assert source in sources and len(detail) > 8, (r["repo"], field, where)
            assert isinstance(value, (bool, float)) or value is None, (r["repo"], field, value)
            if source == "litgpt":
                assert re.search(r"line \d+", detail), (r["repo"], field, "a LitGPT value names its line")
            if source == "github":   # owner/name@commit:path, line N
                assert re.match(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}:\S+, line \d+ \(", detail), (r["repo"], field, detail)
            read.setdefault((r["repo"], field), []).append(source)
    # a repository comes back only with another document's reading: never the same source twice for a field
    assert all(len(s) == len(set(s)) for s in read.values()), [k for k, s in read.items() if len(s) != len(set(s))]


def test_the_data_file_is_the_table_resolved_under_the_census():
    data = schemas.check_file(DATA)
    census = json.loads(CENSUS.read_text())
    fresh = ck.build(census)
    assert {k: v for k, v in data.items() if k != "provenance"} == json.loads(json.dumps(fresh))
    c = data["counts"]
    assert c["checkpoints"] >= 60 and c["model_types"] >= 25, c


def test_two_sources_are_compared_and_a_disagreement_is_shown():
    rows = {r["repo"]: r for r in json.loads(DATA.read_text())["checkpoints"]}
    gemma = rows["google/gemma-7b"]["values"]["rms_norm_eps"]
    assert {(x["source"], x["value"]) for x in gemma["readings"]} == {("hub", 1e-6), ("litgpt", 1e-5)}
    assert gemma["agree"] is False and gemma["value"] == 1e-6   # the Hub's config.json is listed first
    qwen = rows["Qwen/Qwen3-8B"]["values"]["rms_norm_eps"]
    assert [x["source"] for x in qwen["readings"]] == ["hub", "litgpt", "github"] and qwen["agree"] is True
    # LitGPT leaves Gemma 3 1B's norm_eps at its Config default; a copy of the config.json says 1e-6
    g1 = rows["google/gemma-3-1b-it"]["values"]["rms_norm_eps"]
    assert [(x["source"], x["value"]) for x in g1["readings"]] == [("github", 1e-6), ("litgpt", 1e-5)]
    assert g1["agree"] is False and rows["google/gemma-3-1b-it"]["eps"] == 1e-6


def test_a_checkpoint_setting_a_variant_gets_that_variants_structure():
    data = json.loads(DATA.read_text())
    rows = {r["repo"]: r for r in data["checkpoints"]}
    opt = rows["facebook/opt-350m"]
    assert opt["variants_set"] == ["do_layer_norm_before"] and opt["structure"]["placement"] != "pre"
    assert rows["facebook/opt-6.7b"]["structure"]["placement"] == "pre"
    assert rows["tiiuae/falcon-40b"]["variants_set"] == ["new_decoder_architecture"]
    olmo17 = rows["allenai/OLMo-1.7-7B-hf"]   # clip_qkv 8.0 in its training configuration
    assert olmo17["variants_set"] == ["clip_qkv"] and olmo17["structure"]["clip"] is True
    assert rows["allenai/OLMo-7B-hf"]["structure"]["clip"] is False
    glm, air = rows["zai-org/GLM-4.5"], rows["zai-org/GLM-4.5-Air"]   # use_qk_norm true in one, false in the other
    assert glm["variants_set"] == ["use_qk_norm"] and air["variants_set"] == []
    assert glm["structure"]["qk_norm"] != air["structure"]["qk_norm"] == "none"
    census = {m["model_type"]: m for m in json.loads(CENSUS.read_text())["models"]}
    flags = {(m, v["flag"]) for m, r in census.items() for v in r["variants"]}
    assert {(c["model_type"], c["flag"]) for c in data["variant_coverage"]} == flags


def test_a_value_that_contradicts_the_model_types_variants_is_refused(tmp_path):
    census = json.loads(CENSUS.read_text())
    bad = {"sources": {"hub": "x" * 12}, "checkpoints": [
        {"repo": "org/model", "model_type": "llama", "values": {"use_parallel_residual": [True, "hub: config.json"]}}]}
    with pytest.raises(ck.CheckpointError, match=r"org/model: field 'use_parallel_residual' is neither"):
        ck.build(census, bad)
    data = json.loads(DATA.read_text())
    row = next(r for r in data["checkpoints"] if r["repo"] == "facebook/opt-350m")
    row["structure"]["placement"] = "pre"   # what the census says its do_layer_norm_before=False is not
    path = tmp_path / "checkpoints.json"
    path.write_text(json.dumps(data))
    with pytest.raises(schemas.DataFileError, match=r"(?s)checkpoints\.json.*facebook/opt-350m"):
        schemas.check_file(path)
