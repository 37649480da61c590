"""Evidence for the ledger's verdicts on practical advice (``ledger/advice.yaml``), measured on the CPU.

Each test carries the claim id it gives evidence for. The facts are computed by ``reference_impl.studies.advice``;
one test checks that the committed ``docs/data/advice.json`` is what the current code measures.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

import reference_impl as ri
from reference_impl.provenance import source_hash
from reference_impl.studies import advice
from reference_impl import tolerances as tol

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "docs" / "data" / "advice.json"
FP16 = torch.finfo(torch.float16)


def _close(a, b, path="") -> list[str]:
    """Differences between two JSON trees: ints, bools and strings exact, floats to 1e-9 relative."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{path}: keys {sorted(set(a) ^ set(b))} differ"]
        return [d for k in a for d in _close(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, float) or isinstance(b, float):
        ok = isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-9, abs_tol=0)
        return [] if ok else [f"{path}: {a!r} != {b!r}"]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


@pytest.mark.guards("C19", "C23", "C27", "C28", "C30", "C33", "C37")
def test_advice_data_file_is_current():
    """The committed file holds what the current code measures, and records machine, versions and source."""
    stored = json.loads(DATA.read_text())
    prov = stored["provenance"]
    assert {"cpu", "cores"} <= set(prov["machine"]) and {"torch", "python"} <= set(prov["versions"])
    assert prov["sources"] == advice.SOURCES and prov["source_hash"] == source_hash(advice.SOURCES), (
        "reference_impl/studies/advice.py changed: rerun python -m reference_impl.studies.advice")
    fresh = advice.measure()
    diffs = _close({k: stored[k] for k in fresh}, json.loads(json.dumps(fresh)))
    assert not diffs, "docs/data/advice.json is stale:\n" + "\n".join(diffs)


# --- C19: a fixed loss scale of 2**8 ----------------------------------------------------------------


@pytest.mark.guards("C19", "snippet:advice.loss_scale")
def test_fixed_loss_scale_shifts_the_fp16_window_by_its_exponent():
    w = advice.fp16_loss_scale_window(2.0**8)
    # float16: 10 fraction bits, smallest normal 2**-14, so the smallest subnormal is 2**-24; max 65504 < 2**16
    assert w["plain_min_log2"] == round(math.log2(FP16.tiny)) - 10 == -24
    assert w["plain_max_log2"] == math.floor(math.log2(FP16.max)) == 15
    # scaling by 2**8 moves the whole window down by 8 binades: small gradients survive, large ones overflow
    assert w["scaled_min_log2"] == -24 - 8 and w["scaled_max_log2"] == 15 - 8
    assert w["scaled_recovered_exactly"]
    assert w["largest_unscaled_gradient_without_overflow"] == FP16.max / 256
    g = torch.tensor([2.0**-30, 300.0], dtype=torch.float32)
    assert torch.equal(g.half().float(), torch.tensor([0.0, 300.0]))          # unscaled: the small one is lost
    assert (g * 256).half().float().tolist() == [2.0**-22, math.inf]           # scaled: the large one overflows
    # bfloat16 has float32's exponent range: nothing to rescue there
    assert w["bf16_smallest_normal_log2"] == -126


@pytest.mark.guards("C19")
def test_torch_grad_scaler_is_dynamic_not_fixed():
    """PyTorch's scaler starts at 2**16 and halves the scale (skipping the step) when gradients overflow."""
    scaler = torch.amp.GradScaler("cpu")
    assert scaler.get_scale() == 2.0**16
    w = torch.nn.Parameter(torch.ones(4))
    opt = torch.optim.SGD([w], lr=0.1)
    loss = (w * 1e35).sum()  # times 2**16 overflows float32
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    assert torch.equal(w.detach(), torch.ones(4)), "the step with overflowing gradients must be skipped"
    assert scaler.get_scale() == 2.0**15


# --- C23: gain 0.1 for deep models ----------------------------------------------------------------


@pytest.mark.guards("C23")
def test_deep_prenorm_stack_gradients_do_not_explode_at_init():
    g12 = advice.prenorm_gradient_norms(12, gamma=1.0)
    g48 = advice.prenorm_gradient_norms(48, gamma=1.0)
    # the first layer's gradient does not grow with depth (no explosion), and layers stay within one order
    assert 0.5 < g48[0] / g12[0] < 2.0
    assert max(g48) / min(g48) < 10.0
    # a gain of 0.1 shrinks every layer's gradient (and evens them out): a smaller step, not a rescue
    s48 = advice.prenorm_gradient_norms(48, gamma=0.1)
    assert all(a / b < 0.5 for a, b in zip(s48, g48))
    assert max(s48) / min(s48) < max(g48) / min(g48)


@pytest.mark.guards("C23")
def test_gain_before_a_linear_layer_is_the_same_as_scaling_that_layer():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(5, 32, generator=g, dtype=torch.float64)
    w = torch.randn(32, 48, generator=g, dtype=torch.float64)
    gain = torch.full((32,), 0.1, dtype=torch.float64)
    a = ri.rms_norm(x, gain) @ w
    b = ri.rms_norm(x) @ (0.1 * w)
    # equal in exact arithmetic; in float64 they differ by a few roundings per term of the dot product
    bound = tol.gamma(32 + 4, tol.unit_roundoff(torch.float64)) * (ri.rms_norm(x).abs() @ (0.1 * w).abs())
    assert ((a - b).abs() <= bound).all()


# --- C24: gain 1.0 for language models ----------------------------------------------------------------


@pytest.mark.guards("C24")
def test_shipped_models_initialise_the_effective_gain_to_one():
    from transformers import GemmaConfig, GemmaForCausalLM, LlamaConfig, LlamaForCausalLM, ViTConfig, ViTModel

    small = dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1, head_dim=8)
    torch.manual_seed(0)
    llama = LlamaForCausalLM(LlamaConfig(**small))
    gemma = GemmaForCausalLM(GemmaConfig(**small))
    vit = ViTModel(ViTConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                             image_size=8, patch_size=4))
    x = torch.randn(3, 16)
    checked = 0
    for model in (llama, gemma):
        for name, mod in model.named_modules():
            if type(mod).__name__.endswith("RMSNorm"):
                plain = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + mod.eps if hasattr(mod, "eps")
                                        else x.pow(2).mean(-1, keepdim=True) + mod.variance_epsilon)
                torch.testing.assert_close(mod(x), plain, rtol=1e-6, atol=1e-6, msg=f"{name} gain is not 1")
                checked += 1
    lns = [m for m in vit.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert lns and all(torch.equal(m.weight, torch.ones_like(m.weight)) for m in lns)  # images: ViT starts at 1 too
    assert checked >= 10


# --- C26: where the norm sits around the MLP ------------------------------------------------------------


def _call_order(layer, x, **kw) -> list[str]:
    names = {m: n for n, m in layer.named_children()}
    order: list[str] = []
    hooks = [m.register_forward_hook(lambda m, i, o: order.append(names[m])) for m in names]
    try:
        with torch.no_grad():
            layer(x, **kw)
    finally:
        for h in hooks:
            h.remove()
    return order


@pytest.mark.guards("C26")
def test_llama_normalises_before_the_mlp_and_gemma2_before_and_after():
    from transformers import Gemma2Config, LlamaConfig
    from transformers.models.gemma2.modeling_gemma2 import Gemma2DecoderLayer, Gemma2RotaryEmbedding
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    small = dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                 num_key_value_heads=1, head_dim=8)
    x = torch.randn(1, 4, 16)
    pos = torch.arange(4)[None]
    orders = {}
    for name, cfg, layer_cls, rope_cls in (("llama", LlamaConfig(**small), LlamaDecoderLayer, LlamaRotaryEmbedding),
                                           ("gemma2", Gemma2Config(**small), Gemma2DecoderLayer, Gemma2RotaryEmbedding)):
        cfg._attn_implementation = "eager"
        layer = layer_cls(cfg, 0).eval()
        rope = rope_cls(cfg)
        orders[name] = _call_order(layer, x, position_embeddings=rope(x, pos), attention_mask=None)
    assert orders["llama"] == ["input_layernorm", "self_attn", "post_attention_layernorm", "mlp"]
    assert orders["gemma2"] == ["input_layernorm", "self_attn", "post_attention_layernorm",
                                "pre_feedforward_layernorm", "mlp", "post_feedforward_layernorm"]


# --- C27, C28: float16 statistics, eps and large inputs -------------------------------------------------------


@pytest.mark.guards("C27", "C28")
def test_fp16_sum_of_squares_stagnates_then_overflows():
    d = 4096
    limit = advice.fp16_sum_of_squares_limit(d)
    assert limit == pytest.approx(math.sqrt(65504 / 4096))
    assert math.isinf(advice.fp16_accumulate_squares(np.full(d, 4.1)))        # RMS 4.1 > limit: inf
    below = advice.fp16_accumulate_squares(np.full(d, 3.9))                    # RMS 3.9: finite, but wrong
    true = d * 3.9**2
    assert abs(below - true) / true > 0.4, "fp16 accumulation should stall once 3.9**2 < half an ulp of the sum"
    # float32 accumulation (what the reference and torch do) is fine at both
    for v in (3.9, 4.1):
        y = ri.rms_norm(torch.full((d,), v, dtype=torch.float16))
        assert torch.isfinite(y).all() and torch.allclose(y.float(), torch.ones(d), atol=2**-10)


@pytest.mark.guards("C27")
def test_storing_a_float32_statistic_in_fp16_costs_half_an_ulp():
    r = torch.exp(torch.linspace(-9, 11, 10001, dtype=torch.float32))  # within fp16's normal range
    rel = ((r.half().float() - r).abs() / r).max().item()
    assert rel <= 2.0**-11


@pytest.mark.guards("C28")
def test_eps_and_input_size_thresholds():
    zero = torch.zeros(2, 8)
    assert torch.isnan(ri.rms_norm(zero, eps=0.0)).all()                      # 0 * rsqrt(0) = 0 * inf
    assert torch.equal(ri.rms_norm(zero, eps=1e-12), zero)                     # any eps > 0 in float32 is enough
    # in float16 arithmetic 1e-8 rounds to 0 and the zero row turns to NaN again; 1e-6 survives as a subnormal
    assert float(torch.tensor(1e-8).half()) == 0.0 and float(torch.tensor(1e-6).half()) > 0
    assert torch.isnan(advice.fp16_naive_rmsnorm(zero, 1e-8)).all()
    assert torch.equal(advice.fp16_naive_rmsnorm(zero, 1e-6).float(), zero)
    # fp16 squares overflow above 255.9, far below 1e4, and the naive norm then silently returns zeros
    x = torch.ones(8)
    x[3] = 300.0
    naive = advice.fp16_naive_rmsnorm(x, 1e-6)
    assert torch.equal(naive.float(), torch.zeros(8)), "expected the silent collapse to 0, not NaN"
    ref = ri.rms_norm(x.half(), eps=1e-6).float()                              # float32 statistics: correct
    expected = x / x.pow(2).mean().add(1e-6).sqrt()
    torch.testing.assert_close(ref, expected, rtol=2**-10, atol=0)
    # in float32 an input of 1e4 is harmless: its square is 1e8
    big = torch.full((8,), 1e4)
    assert torch.isfinite(ri.rms_norm(big)).all()


# --- C30: small hidden sizes -------------------------------------------------------------------------------


@pytest.mark.guards("C30")
@pytest.mark.parametrize("d", [3, 8, 64, 127])
def test_layernorm_discards_one_more_direction_than_rmsnorm(d):
    ranks = advice.jacobian_ranks(d)
    assert ranks == {"rmsnorm": d - 1, "layernorm": d - 2}


@pytest.mark.guards("C30")
def test_layernorm_at_width_two_keeps_only_a_sign():
    x = torch.randn(1000, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    y = ri.layer_norm(x, eps=0.0)
    assert torch.allclose(y.abs(), torch.ones_like(y)) and torch.allclose(y.sum(-1), torch.zeros(1000, dtype=y.dtype))
    assert advice.jacobian_ranks(2)["layernorm"] == 0
    r = ri.rms_norm(x, eps=0.0)
    assert len(torch.unique(r.round(decimals=6), dim=0)) > 900  # RMSNorm keeps the direction on the circle


# --- C33, C37: the normalization's share of a layer's compute ---------------------------------------------


@pytest.mark.guards("C33", "C37")
def test_norm_is_a_tiny_share_of_decoder_layer_flops():
    cfgs = advice.model_configs()
    assert cfgs["llama"]["hidden"] == 4096 and cfgs["mixtral"]["experts_per_token"] == 2
    for name, cfg in cfgs.items():
        share = advice.norm_flop_share(**cfg)["share"]
        # removing the norms entirely would save under 0.01% of a layer's FLOPs, so no change to the norm
        # can cut a model's compute by 30%
        assert share < 1e-4, (name, share)
