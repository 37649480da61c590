"""The census probes per-head LayerNorms and classes built from their model's config as the model builds them.

- StableLM's and Chameleon's per-head LayerNorms take ``(rows, heads, head_dim)`` input with a gain per head:
  the probe builds them for two heads (through the head count the constructor takes, or the ``(heads, head_dim)``
  shape a ``torch.nn.LayerNorm`` subclass takes), feeds them the shared probes viewed that way and finds each
  equal, bit for bit, to its catalog entry (``qk_norm.layer_per_head_gain.stablelm`` / ``.chameleon``); they
  are no longer exceptions, and the committed file says so.
- Falcon-H1's gated norm is built with the arguments ``FalconH1Mixer`` passes from the config
  (``norm_before_gate=config.mamba_norm_before_gate``, ``n_groups=self.n_groups``, read from the model's
  source): under the default it equals ``gated_rms_norm.kimi_linear (silu)``, with the gate before the norm
  it equals ``gated_rms_norm.falcon_h1``, and the committed file records both builds.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from reference_impl.studies.census import builds as census_builds, probe  # noqa: E402
from reference_impl.studies.census.discover import found_from  # noqa: E402
from reference_impl.studies.census.exceptions import EXCEPTIONS  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FILE = REPO / "docs" / "data" / "census.json"
PER_HEAD = {
    "StableLmLayerNormPerHead": ("transformers.models.stablelm.modeling_stablelm",
                                 "qk_norm.layer_per_head_gain.stablelm"),
    "ChameleonLayerNorm": ("transformers.models.chameleon.modeling_chameleon",
                           "qk_norm.layer_per_head_gain.chameleon"),
}
FALCON = ("transformers.models.falcon_h1.modeling_falcon_h1", "FalconH1RMSNormGated")


@pytest.fixture(scope="module")
def census():
    return json.loads(FILE.read_text())


def _classes(census):
    return {c["name"]: c for c in census["classes"]}


@pytest.mark.parametrize("name", sorted(PER_HEAD))
def test_per_head_class_is_matched_bit_for_bit_to_its_entry(name):
    module, entry = PER_HEAD[name]
    r = probe.probe_class(found_from(module, name))
    assert r.kind == "layer_per_head" and r.in_scope
    assert r.catalog == entry, r.note
    assert r.max_ulp is None and r.dtypes == ["bfloat16", "float16", "float32"]


@pytest.mark.parametrize("name", sorted(PER_HEAD))
def test_per_head_layout_is_read_from_the_built_class(name):
    module, _ = PER_HEAD[name]
    found = found_from(module, name)
    m = probe.build(found, 7, heads=probe.HEADS)
    lay = probe.per_head_layout(m, 7)
    assert lay is not None and lay.heads == probe.HEADS
    gain = getattr(m, lay.gain_name) if lay.per_module is None else \
        getattr(getattr(m, lay.per_module)[1], lay.gain_name)
    assert gain.shape[-1] == 7


def test_a_per_head_class_built_for_one_head_has_no_per_head_layout():
    module, _ = PER_HEAD["StableLmLayerNormPerHead"]
    m = probe.build(found_from(module, "StableLmLayerNormPerHead"), 7, heads=1)
    assert probe.per_head_layout(m, 7) is None


def test_a_wrong_per_head_gain_changes_the_bits():
    """The probe would catch a gain applied to the wrong head: swapping the heads' gains changes the output."""
    import torch

    module, _ = PER_HEAD["ChameleonLayerNorm"]
    found = found_from(module, "ChameleonLayerNorm")
    m = probe.build(found, 7, heads=probe.HEADS)
    lay = probe.per_head_layout(m, 7)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, probe.HEADS, 7, generator=g)
    w = 1 + 0.1 * torch.randn(probe.HEADS, 7, generator=g)
    lay.set(m, w, None)
    y = m(x)
    lay.set(m, w.flip(0), None)
    assert not torch.equal(y, m(x))


def test_plain_row_norms_are_not_taken_for_per_head_ones():
    found = found_from("transformers.models.llama.modeling_llama", "LlamaRMSNorm")
    assert probe.probe_per_head(found) is None


def test_per_head_classes_are_no_longer_exceptions_and_the_file_matches_them(census):
    classes = _classes(census)
    for name, (_, entry) in PER_HEAD.items():
        assert name not in EXCEPTIONS
        c = classes[name]
        assert c["catalog"] == entry and c["kind"] == "layer_per_head" and c["exception"] is None, c
    # the two per-head classes raised the matched count by two over the file before them (252 of 261)
    counts = census["counts"]
    assert counts["matched"] == sum(1 for c in census["classes"] if c["in_scope"] and c["catalog"])
    assert counts["matched"] >= 254 and counts["unmatched"] == len(EXCEPTIONS)
    assert counts["by_catalog"].get("qk_norm.layer_per_head_gain.stablelm") == 1
    assert counts["by_catalog"].get("qk_norm.layer_per_head_gain.chameleon") == 1


def test_falcon_h1_config_arguments_are_read_from_the_model_source():
    found = found_from(*FALCON)
    given = census_builds.config_arguments(found)
    assert given["norm_before_gate"] == "mamba_norm_before_gate"
    assert given["n_groups"] == "mamba_n_groups"   # through self.n_groups = config.mamba_n_groups


def test_falcon_h1_gated_norm_built_as_the_model_builds_it_matches_its_entry(census):
    found = found_from(*FALCON)
    builds = census_builds.config_builds(found)
    by_value = {b["config"]["mamba_norm_before_gate"]: b for b in builds}
    assert set(by_value) == {True, False}
    assert by_value[False]["catalog"] == "gated_rms_norm.falcon_h1", by_value[False]["note"]
    assert by_value[True]["catalog"] == "gated_rms_norm.kimi_linear (silu)"
    assert by_value[False]["args"]["norm_before_gate"] is False
    # the committed file records the same builds
    c = _classes(census)["FalconH1RMSNormGated"]
    assert c["config_builds"] == builds


def test_a_class_whose_model_passes_no_config_flag_has_no_config_builds(census):
    found = found_from("transformers.models.qwen3_next.modeling_qwen3_next", "Qwen3NextRMSNormGated")
    assert census_builds.config_builds(found) == []
    assert "config_builds" not in _classes(census)["Qwen3NextRMSNormGated"]
