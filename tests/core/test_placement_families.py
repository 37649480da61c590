"""What each model family ships (``placement_families`` of reference_impl/checkpoints.yaml) is what the
installed transformers builds: a small model of each family has every listed norm module with the listed
class, parameter count, normalized size and initial gain, the listed config defaults, and none of the
modules listed as absent."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

REPO = Path(__file__).resolve().parents[2]
FAMILIES = yaml.safe_load((REPO / "reference_impl" / "checkpoints.yaml").read_text())["placement_families"]
pytestmark = pytest.mark.guards("adoption.placements")

HIDDEN, HEADS, KV_HEADS, HEAD = 64, 4, 2, 16
SMALL = dict(hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=2, num_attention_heads=HEADS,
             num_key_value_heads=KV_HEADS, vocab_size=128, head_dim=HEAD)
EXTRA = {
    "llama4_text": dict(intermediate_size_mlp=128, num_local_experts=2),
    "gpt_oss": dict(num_local_experts=2, intermediate_size=64),
    "qwen3_next": dict(num_hidden_layers=4, num_experts=2, moe_intermediate_size=32, shared_expert_intermediate_size=32,
                       linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=16, linear_value_head_dim=16),
    "deepseek_v3": dict(num_hidden_layers=1, moe_intermediate_size=32, q_lora_rank=32, kv_lora_rank=16,
                        qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, n_routed_experts=4, num_experts_per_tok=2,
                        n_group=1, topk_group=1, first_k_dense_replace=1),
    "olmo": dict(head_dim=None),
}
SIZES = {"hidden": HIDDEN, "head": HEAD, "all_heads": HEADS * HEAD, "q_lora_rank": 32, "kv_lora_rank": 16}


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


def test_list_names_the_families_the_pages_need():
    names = " ".join(f["family"] for f in FAMILIES)
    for family in ("Llama 4", "GPT-OSS", "Qwen3-Next", "Kimi K2", "OLMo 1", "OLMo 2", "Gemma 2", "Gemma 3", "Qwen3"):
        assert family in names


@pytest.mark.parametrize("fam", FAMILIES, ids=lambda f: f["model_type"])
def test_family_builds_what_the_list_says(fam):
    cfg, model = _build(fam["model_type"])
    layer = model.layers[fam["layer"]]
    for key, want in fam.get("config", {}).items():
        assert getattr(cfg, key) == want, f"{fam['family']}: config {key} is {getattr(cfg, key)!r}, list says {want!r}"
    for m in fam["modules"]:
        mod = _get(layer, m["path"])
        params = list(mod.parameters()) if isinstance(mod, torch.nn.Module) else [mod]
        if "class" in m:
            assert type(mod).__name__ == m["class"], (fam["family"], m["path"], type(mod).__name__)
        if "parameters" in m:
            assert sum(p.numel() for p in params) == m["parameters"], (fam["family"], m["path"])
        if "size" in m:
            assert tuple(mod.weight.shape) == (SIZES[m["size"]],), (fam["family"], m["path"], tuple(mod.weight.shape))
        if "init" in m:
            assert torch.all(mod.weight == m["init"]), (fam["family"], m["path"], "initial gain")
    for path in fam.get("absent", []):
        with pytest.raises(AttributeError):
            _get(layer, path)


def test_olmo1_norm_has_no_gain_and_is_plain_layer_norm():
    _, model = _build("olmo")
    norm = model.layers[0].input_layernorm
    x = torch.randn(3, HIDDEN) * 5 + 2
    assert torch.allclose(norm(x), torch.nn.functional.layer_norm(x, (HIDDEN,), eps=1e-5), atol=1e-6)


def test_llama4_qk_norm_scales_q_and_k_to_unit_rms_without_a_gain():
    _, model = _build("llama4_text")
    qk = model.layers[0].self_attn.qk_norm
    q = torch.randn(2, 4, 8, HEAD) * 7
    out = qk(q)
    assert torch.allclose(out.pow(2).mean(-1), torch.ones(2, 4, 8), atol=1e-4)
    assert torch.allclose(qk(3 * q), out, atol=1e-5)
