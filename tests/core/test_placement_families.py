"""What the census (docs/data/census.json) says each named family builds is what the installed transformers
builds: a small model of each family, shrunk here by hand (not by the census's own shrinking), has every
norm module of the census's traced layer, with that class and the normalized size its role implies (the
hidden size on the residual stream, one head for a per-head QK-norm, all heads for a whole-projection one),
and no QK-norm module where the census found none. The config defaults the pages cite are checked too."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from reference_impl import families as fam

REPO = Path(__file__).resolve().parents[2]
CENSUS = json.loads((REPO / "docs" / "data" / "census.json").read_text())
MODELS = {m["model_type"]: m for m in CENSUS["models"]}
pytestmark = pytest.mark.guards("adoption.placements")

HIDDEN, HEADS, KV_HEADS, HEAD = 64, 4, 2, 16
SMALL = dict(hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=2, num_attention_heads=HEADS,
             num_key_value_heads=KV_HEADS, vocab_size=128, head_dim=HEAD)
EXTRA = {
    "llama": {}, "qwen2": {}, "qwen3": {}, "gemma2": {}, "gemma3_text": {}, "olmo2": {},
    "llama4_text": dict(intermediate_size_mlp=128, num_local_experts=2),
    "gpt_oss": dict(num_local_experts=2, intermediate_size=64),
    "qwen3_next": dict(num_hidden_layers=4, num_experts=2, moe_intermediate_size=32, shared_expert_intermediate_size=32,
                       linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=16, linear_value_head_dim=16),
    "deepseek_v3": dict(num_hidden_layers=1, moe_intermediate_size=32, q_lora_rank=32, kv_lora_rank=16,
                        qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, n_routed_experts=4, num_experts_per_tok=2,
                        n_group=1, topk_group=1, first_k_dense_replace=1),
    "olmo": dict(head_dim=None),
}
# config defaults the pages state (history.md: Gemma 2 soft-caps the attention logits, Gemma 3 does not)
CONFIG = {"gemma2": {"attn_logit_softcapping": 50.0}, "gemma3_text": {"attn_logit_softcapping": None}}
SIZE = {"input": HIDDEN, "sublayer_output": HIDDEN, "residual_sum": HIDDEN, "q_per_head": HEAD, "k_per_head": HEAD,
        "q_whole": HEADS * HEAD, "k_whole": KV_HEADS * HEAD}
QK_NAMES = ("self_attn.q_norm", "self_attn.k_norm", "self_attn.qk_norm")


def _build(model_type: str):
    from transformers import AutoConfig, AutoModel

    kw = {**SMALL, **EXTRA.get(model_type, {})}
    kw = {k: v for k, v in kw.items() if v is not None}
    cfg = AutoConfig.for_model(model_type, **kw)
    torch.manual_seed(0)
    return cfg, AutoModel.from_config(cfg)


def _get(module, path: str):
    for part in path.split("."):
        module = getattr(module, part)
    return module


def test_every_named_family_is_traced_by_the_census():
    """Each family the pages name (reference_impl/families.py) is a model type the census built and traced,
    except the ones it cannot (T5, an encoder-decoder), which say so."""
    for model_type, family in fam.NAMES.items():
        if model_type in fam.UNTRACED:
            assert model_type not in MODELS or MODELS[model_type]["status"] != "traced", model_type
            continue
        assert model_type in MODELS, f"{family}: the census has no model type {model_type!r}"
        assert MODELS[model_type]["status"] == "traced", f"{family} ({model_type}): {MODELS[model_type]['error']}"
    for family in ("Llama 4", "GPT-OSS", "Qwen3-Next", "OLMo 1", "OLMo 2", "Gemma 2", "Gemma 3", "Qwen3", "DeepSeek-V3"):
        assert family in fam.NAMES.values(), family


@pytest.mark.parametrize("model_type", sorted(EXTRA))
def test_family_builds_what_the_list_says(model_type):
    """The census's traced layer (its first decoder layer) against a small model built here."""
    m = MODELS[model_type]
    assert m["status"] == "traced", m["error"]
    cfg, model = _build(model_type)
    layer = model.layers[0]
    for key, want in CONFIG.get(model_type, {}).items():
        assert getattr(cfg, key) == want, f"{model_type}: config {key} is {getattr(cfg, key)!r}, the page says {want!r}"
    assert m["layer"], f"{model_type}: the census traced no norm in the layer"
    for e in m["layer"]:
        mod = _get(layer, e["module"])
        assert type(mod).__name__ == e["class"], (model_type, e["module"], type(mod).__name__, e["class"])
        weight = getattr(mod, "weight", None)
        if e["role"] in SIZE and weight is not None:
            assert tuple(weight.shape) == (SIZE[e["role"]],), (model_type, e["module"], e["role"], tuple(weight.shape))
    if m["qk_norm"] == "none":
        for i, lay in enumerate(model.layers):
            for path in QK_NAMES:
                with pytest.raises(AttributeError):
                    _get(lay, path)
    else:
        found = [(i, p) for i, lay in enumerate(model.layers) for p in QK_NAMES if _has(lay, p)]
        assert found, f"{model_type}: the census says qk_norm {m['qk_norm']!r}, the model has no q/k norm module"


def _has(module, path: str) -> bool:
    try:
        _get(module, path)
    except AttributeError:
        return False
    return True


def test_olmo1_norm_has_no_gain_and_is_plain_layer_norm():
    m = MODELS["olmo"]
    classes = {c["name"]: c for c in CENSUS["classes"]}
    assert all(classes[e["class"]]["gain"] == "none" and not classes[e["class"]]["bias"] for e in m["layer"]), m["layer"]
    _, model = _build("olmo")
    norm = model.layers[0].input_layernorm
    assert sum(p.numel() for p in norm.parameters()) == 0
    x = torch.randn(3, HIDDEN) * 5 + 2
    assert torch.allclose(norm(x), torch.nn.functional.layer_norm(x, (HIDDEN,), eps=1e-5), atol=1e-6)


def test_llama4_qk_norm_scales_q_and_k_to_unit_rms_without_a_gain():
    m = MODELS["llama4_text"]
    classes = {c["name"]: c for c in CENSUS["classes"]}
    qk = [e for e in m["layer"] if e["role"] in ("q_per_head", "k_per_head", "q_whole", "k_whole")]
    assert qk and all(classes[e["class"]]["gain"] == "none" for e in qk), m["layer"]
    _, model = _build("llama4_text")
    norm = model.layers[0].self_attn.qk_norm
    assert sum(p.numel() for p in norm.parameters()) == 0
    q = torch.randn(2, 4, 8, HEAD) * 7
    out = norm(q)
    assert torch.allclose(out.pow(2).mean(-1), torch.ones(2, 4, 8), atol=1e-4)
    assert torch.allclose(norm(3 * q), out, atol=1e-5)
