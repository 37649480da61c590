"""The norm placements of the tiny decoder (reference_impl/tiny_lm.py) and the placements study
(reference_impl/studies/placements.py): each placement computes the formula its name stands for, the rules
that turn per-seed numbers into verdicts, a smoke run of the whole pipeline, and the committed data file
(well formed, current, full-size, with verdicts that follow from its own numbers and legible plots).
"""
from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch
from torch import nn

from reference_impl.norms.derf import Derf
from reference_impl.norms.dyt import DyT
from reference_impl.provenance import is_current
from reference_impl.studies import placements as P
from reference_impl.studies import schemas
from reference_impl.tiny_lm import TinyLM, TinyLMConfig

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "docs" / "data"
SMALL = dict(d=16, layers=4, heads=2, ffn=32, context=8)


def _model(**kw) -> TinyLM:
    torch.manual_seed(0)
    return TinyLM(TinyLMConfig(**{**SMALL, **kw}))


# ------------------------------------------------------------------------------------------- the model


def test_config_rejects_bad_new_options():
    for bad, match in ((dict(qk_norm="l2"), "qk_norm must be one of"), (dict(placement="peri-ln"), "placement"),
                       (dict(mix_post_fraction=1.5), "mix_post_fraction"), (dict(mix_post_fraction=True), "mix_post"),
                       (dict(norm="tanh"), "norm must be one of")):
        with pytest.raises(ValueError, match=match):
            TinyLMConfig(**bad)


def _random_gains(model):
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.LayerNorm, nn.RMSNorm)):
                m.weight.uniform_(0.5, 1.5)


@pytest.mark.parametrize("placement", ["sandwich", "peri", "deepnorm", "mixln"])
def test_new_placements_compute_their_formulas(placement):
    model = _model(placement=placement, norm="ln")
    _random_gains(model)
    x = torch.randint(0, 256, (2, 8))
    with torch.no_grad():
        e = model.tok(x) + model.pos(torch.arange(8))
        h = model.embed_norm(e)
        if placement == "peri":
            assert isinstance(model.embed_norm, nn.LayerNorm)
            assert torch.allclose(h, nn.functional.layer_norm(e, (16,), model.embed_norm.weight, model.embed_norm.bias))
        else:
            assert isinstance(model.embed_norm, nn.Identity)
        alpha = (2 * 4) ** 0.25
        for i, b in enumerate(model.blocks):
            if placement in ("sandwich", "peri"):
                h = h + b.norm1_out(b.attn(b.norm1(h)))
                h = h + b.norm2_out(b.mlp(b.norm2(h)))
            elif placement == "deepnorm":
                h = b.norm1(alpha * h + b.attn(h))
                h = b.norm2(alpha * h + b.mlp(h))
            elif i == 0:                                     # Mix-LN: a quarter of 4 blocks are Post-LN
                h = b.norm1(h + b.attn(h))
                h = b.norm2(h + b.mlp(h))
            else:
                h = h + b.attn(b.norm1(h))
                h = h + b.mlp(b.norm2(h))
        want = model.head(model.final_norm(h))
        assert torch.allclose(model(x), want, atol=1e-5)
    assert isinstance(model.final_norm, nn.Identity) == (placement == "deepnorm")
    if placement == "mixln":
        assert [b.placement for b in model.blocks] == ["post", "pre", "pre", "pre"]


def test_deepnorm_constants_and_initialisation():
    cfg = TinyLMConfig(d=64, layers=6, heads=4, ffn=128, context=8, placement="deepnorm", norm="ln")
    alpha, beta = cfg.deepnorm_constants()
    assert alpha == pytest.approx(12 ** 0.25) and beta == pytest.approx(48 ** -0.25)
    torch.manual_seed(0)
    model = TinyLM(cfg)
    blk = model.blocks[0]
    xavier = lambda w, gain: gain * math.sqrt(2 / sum(w.shape))   # noqa: E731
    q, v = blk.attn.qkv.weight[:64].detach(), blk.attn.qkv.weight[128:].detach()
    assert float(q.std()) == pytest.approx(xavier(q, 1.0), rel=0.1)
    assert float(v.std()) == pytest.approx(xavier(v, beta), rel=0.1)
    assert float(blk.mlp.down.weight.detach().std()) == pytest.approx(xavier(blk.mlp.down.weight, beta), rel=0.1)


def test_qk_norm_makes_attention_blind_to_the_scale_of_queries_and_keys():
    model = _model(qk_norm="ln")
    assert isinstance(model.blocks[0].attn.q_norm, nn.LayerNorm) and model.blocks[0].attn.q_norm.normalized_shape == (8,)
    x = torch.randint(0, 256, (2, 8))
    with torch.no_grad():
        before = model(x)
        for b in model.blocks:
            b.attn.qkv.weight[:32] *= 50.0                  # queries and keys, not values
        assert torch.allclose(model(x), before, atol=1e-4)
        plain = _model()
        before = plain(x)
        for b in plain.blocks:
            b.attn.qkv.weight[:32] *= 50.0
        assert not torch.allclose(plain(x), before, atol=1e-3)


def test_recorded_attention_logit_is_the_largest_causal_logit():
    model = _model(qk_norm="rms")
    attn = model.blocks[0].attn
    h = torch.randn(2, 8, 16)
    attn.record_logits, attn.max_logit = True, 0.0
    with torch.no_grad():
        out = attn(h)
        q, k, _ = attn.qkv(h).view(2, 8, 3, 2, 8).permute(2, 0, 3, 1, 4)
        q, k = attn.q_norm(q), attn.k_norm(k)
        logits = (q @ k.transpose(-1, -2)) / math.sqrt(8)
        causal = torch.ones(8, 8, dtype=torch.bool).tril()
        assert attn.max_logit == pytest.approx(float(logits[..., causal].abs().max()), rel=1e-6)
        attn.record_logits = False
        assert torch.equal(attn(h), out)                    # recording does not change the output


@pytest.mark.parametrize("norm, kind", [("dyt", DyT), ("derf", Derf)])
def test_point_wise_norms_take_every_norm_place(norm, kind):
    model = _model(norm=norm)
    found = [m for m in model.modules() if isinstance(m, kind)]
    assert len(found) == 2 * 4 + 1 and not any(isinstance(m, (nn.LayerNorm, nn.RMSNorm)) for m in model.modules())
    x = torch.randint(0, 256, (2, 8))
    assert abs(float(model.loss(x, x).detach()) - math.log(256)) < 0.05


# ----------------------------------------------------------------------------------------- verdict rules


def test_a_side_is_lower_only_where_every_seed_is():
    assert P.separated_lower([1.0, 1.1], [1.2, 1.3]) == "a"
    assert P.separated_lower([1.0, 1.25], [1.2, 1.3]) is None
    assert P.separated_lower([2.0, None], [1.0, 1.1]) == "b"        # a diverged seed is worse than any number
    assert P.separated_lower([None], [None]) is None
    c = P.compare([1.0, 1.1], [1.2, 1.3], "A", "B", "loss")
    assert c["lower"] == "A" and c["separated"] and "A lower in every seed" in c["text"]
    assert P.compare([1.0, 1.25], [1.2, 1.3], "A", "B", "loss")["lower"] is None
    assert [P.verdict(p) for p in ([True, True], [True, False], [False, False])] == \
        ["reproduced", "partly reproduced", "not reproduced"]


def test_learning_rate_sensitivity_follows_its_definition():
    # two seeds, three learning rates; initial loss 5; seed 0: 3, 2, diverged -> min(.,5) = 3, 2, 5; best 2
    losses = [[3.0, 3.0], [2.0, 2.5], [None, 2.5]]
    got = P.sensitivity(losses, [5.0, 5.0])
    assert got[0] == pytest.approx((3 + 2 + 5) / 3 - 2) and got[1] == pytest.approx((3 + 2.5 + 2.5) / 3 - 2.5)


# ------------------------------------------------------------------------------------------ smoke run


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("placements")
    res = P.run(P.QUICK, out, out / "plots")
    return out, res


def test_quick_run_writes_a_valid_file_with_every_part(quick):
    out, res = quick
    schemas.check_file(out / "placements.json")
    assert res["quick"] and "smoke run" in res["status_text"]
    assert len(res["placements"]) == 2 * len(P.VARIANTS)
    assert {r["id"] for r in res["reproductions"]} >= {"xiong_init_gradients", "depth_variance", "wortsman_qk_norm",
                                                       "warmup", "dyt_matches_norm", "derf_vs_dyt"}
    for name in res["plots"]:
        assert (out / "plots" / name).exists()
    assert res["provenance"]["sources"] == P.SOURCES


# ------------------------------------------------------------------------------------- committed file


@pytest.fixture(scope="module")
def data():
    path = DATA / "placements.json"
    assert path.exists(), "docs/data/placements.json missing: run python -m reference_impl.studies.placements"
    return json.loads(path.read_text())


def test_committed_file_is_a_current_full_run(data):
    schemas.check_file(DATA / "placements.json")
    ok, why = is_current(data)
    assert ok, why
    assert not data["quick"], "the committed file is a smoke run"
    assert data["provenance"]["sources"] == P.SOURCES
    variants = {v["variant"] for v in data["placements"].values()}
    assert len(variants) >= 6
    for v in data["placements"].values():
        assert len(v["runs"]) >= 3 and all(r["lr"] > 0 for r in v["runs"])
    sw = data["lr_sweep"]
    assert len(sw["lrs"]) >= 5
    for side in sw["sides"].values():
        assert len(side["by_lr"]) == len(sw["lrs"])
        for v in side["by_lr"].values():
            assert len(v["runs"]) >= 3 and all(r["lr"] == v["lr"] for r in v["runs"])


def test_committed_verdicts_follow_from_the_committed_numbers(data):
    st = P.Settings(**data["settings"])
    again = P.reproductions(data, st)
    assert len(again) >= 5
    assert [(r["id"], r["parts"], r["verdict"]) for r in again] == \
        [(r["id"], r["parts"], r["verdict"]) for r in data["reproductions"]]
    for r in data["reproductions"]:
        assert r["verdict_text"].endswith("at this scale")


def test_committed_plots_exist_in_both_palettes_and_are_legible_at_360_px(data):
    names = data["plots"]
    light = {n for n in names if not n.endswith("-dark.svg")}
    assert {n.replace(".svg", "-dark.svg") for n in light} == set(names) - light
    for name in names:
        root = ET.parse(DATA / "plots" / name).getroot()
        width = float(root.get("viewBox").split()[2])
        sizes = [float(m) for m in re.findall(r"font-size: ([0-9.]+)px", (DATA / "plots" / name).read_text())]
        assert sizes, f"{name}: no text"
        assert min(sizes) * 360 / width >= 11, f"{name}: text below 11 px when shown 360 px wide"
