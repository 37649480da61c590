"""The training study (reference_impl/studies/training.py) and its model (reference_impl/tiny_lm.py).

A smoke run of the whole pipeline (a few steps, seconds), the pieces it is built from (model, schedule,
corpus split, the rule that names a winner only where the seeds separate), and the committed data files:
well formed, consistent with their own per-seed values, and honest about being a smoke run when they are.
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from reference_impl.provenance import is_current
from reference_impl.studies import training as T
from reference_impl.tiny_lm import TinyLM, TinyLMConfig, without_norms

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "docs" / "data"


# ------------------------------------------------------------------------------------------- the model


def test_config_rejects_bad_values():
    for bad, match in ((dict(d=0), "d must be a positive int"), (dict(d=30, heads=4), "multiple of heads"),
                       (dict(norm="batch"), "norm must be one of"), (dict(placement="middle"), "placement"),
                       (dict(eps=-1.0), "eps"), (dict(gain_init=float("nan")), "gain_init"), (dict(layers=True), "layers")):
        with pytest.raises(ValueError, match=match):
            TinyLMConfig(**bad)
    model = TinyLM(TinyLMConfig(d=16, layers=1, heads=2, ffn=32, context=8))
    with pytest.raises(ValueError, match="longer than the context"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="integer tensor"):
        model(torch.zeros(1, 4))


@pytest.mark.parametrize("placement", ["pre", "post", "out"])
@pytest.mark.parametrize("norm", ["rms", "ln"])
def test_model_shapes_norms_and_initial_loss(norm, placement):
    cfg = TinyLMConfig(d=32, layers=2, heads=2, ffn=64, context=16, norm=norm, placement=placement)
    torch.manual_seed(0)
    model = TinyLM(cfg)
    kind = nn.RMSNorm if norm == "rms" else nn.LayerNorm
    assert len(model.norms()) == 2 * cfg.layers + (0 if placement == "post" else 1)
    assert all(isinstance(m, kind) for m in model.norms())
    x = torch.randint(0, 256, (3, 16))
    assert model(x).shape == (3, 16, 256)
    # small initial weights: the first prediction is close to uniform over 256 bytes
    assert abs(float(model.loss(x, x).detach()) - math.log(256)) < 0.05
    bare = without_norms(model)
    assert bare.norms() == [] and len(model.norms()) > 0
    assert torch.equal(bare.head.weight, model.head.weight)


def test_placements_compute_what_their_names_say():
    torch.manual_seed(0)
    blocks = {p: TinyLM(TinyLMConfig(d=16, layers=1, heads=2, ffn=32, context=8, placement=p)).blocks[0]
              for p in ("pre", "post", "out")}
    base = blocks["pre"]
    for b in blocks.values():
        b.load_state_dict(base.state_dict())
    with torch.no_grad():
        for b in blocks.values():
            b.norm1.weight.copy_(torch.linspace(0.5, 1.5, 16))
        h = torch.randn(2, 8, 16)
        n1, n2, att, mlp = base.norm1, base.norm2, base.attn, base.mlp
        a = h + att(n1(h))
        assert torch.allclose(blocks["pre"](h), a + mlp(n2(a)), atol=1e-6)
        a = n1(h + att(h))
        assert torch.allclose(blocks["post"](h), n2(a + mlp(a)), atol=1e-6)
        a = h + n1(att(h))
        assert torch.allclose(blocks["out"](h), a + n2(mlp(a)), atol=1e-6)


@pytest.mark.guards("C04", "C37")
def test_torch_cpu_rmsnorm_runs_separate_ops_where_layernorm_runs_one_kernel():
    """Why RMSNorm need not be faster in a training step on this stack: torch's CPU RMSNorm module is
    composed of element-wise ops and reductions (several passes over memory, forward and backward),
    while LayerNorm forward and backward are one native kernel each."""
    rms, ln = T.dispatched_ops("rms", 64, 128), T.dispatched_ops("ln", 64, 128)
    assert ln == {"forward": ["native_layer_norm"], "backward": ["native_layer_norm_backward"]}
    assert len(rms["forward"]) >= 3 and "rsqrt" in rms["forward"]
    assert len(rms["backward"]) >= 3


# --------------------------------------------------------------------------------------- the pieces


def test_learning_rate_schedule():
    steps, peak = 100, 1e-2
    lrs = [T.lr_at(s, steps, peak, 10) for s in range(steps)]
    assert lrs[0] == pytest.approx(peak / 10) and lrs[9] == pytest.approx(peak)
    assert all(b > a for a, b in zip(lrs[:10], lrs[1:10]))                  # linear warm-up
    assert all(b <= a + 1e-15 for a, b in zip(lrs[9:], lrs[10:]))          # then decay only
    assert lrs[-1] == pytest.approx(0.1 * peak)
    assert T.lr_at(0, steps, peak, 0) == pytest.approx(peak)               # no warm-up: the peak at once


def test_corpus_is_real_english_text_with_disjoint_splits():
    train, val, info = T.load_corpus()
    assert train.dtype == torch.long and int(train.max()) < 256
    assert info["train_bytes"] == train.numel() > 300_000 and info["val_bytes"] == val.numel() > 20_000
    assert "PSF" in info["licence"] and "pydoc_data/topics.py" in info["source"]
    from pydoc_data import topics

    text = bytes(train.to(torch.uint8).tolist()).decode("utf-8")
    assert " the " in text and text.count(" the ") > 1000                   # English prose
    for key in info["val_topics"]:
        assert topics.topics[key][:2000] not in text, f"validation topic {key!r} leaks into training"
    again = T.load_corpus()
    assert torch.equal(again[0], train) and again[2] == info


@pytest.mark.guards("C06", "C37")
def test_a_winner_is_named_only_where_the_seeds_separate():
    over = T.compare([1.00, 1.10, 1.05], [1.08, 1.20, 1.12], "A", "B", "loss")
    assert over["separated"] is False and over["lower"] is None and "no difference shown" in over["text"]
    assert over["diff_mean"] == pytest.approx(1.05 - 1.1333333333)
    sep = T.compare([1.30, 1.31, 1.32], [1.20, 1.21, 1.25], "A", "B", "loss")
    assert sep["separated"] is True and sep["lower"] == "B" and "B lower, the seeds separate" in sep["text"]
    div = T.compare([None, 1.2, 1.3], [1.5, 1.6, 1.7], "A", "B", "loss")
    assert div["lower"] == "B" and "diverged in 1 of 3" in div["text"]
    both = T.compare([None, 1.2], [None, 1.6], "A", "B", "loss")
    assert both["separated"] is False and both["lower"] is None


def test_loss_at_equal_time_interpolates_between_evaluations():
    run = {"time_s": [0.0, 1.0, 2.0], "val_loss": [5.0, 3.0, 2.0], "diverged": False}
    assert T.at_time(run, 0.5) == pytest.approx(4.0)
    assert T.at_time(run, 2.5) is None and T.at_time(dict(run, diverged=True), 1.0) is None


# ----------------------------------------------------------------------------------------- smoke run


SMOKE = dataclasses.replace(T.QUICK, steps=4, eval_every=2, warmup_steps=2, deep_steps=2, timing_repeats=1,
                            timing_steps=1, eval_windows=4, grad_steps=2, warmup_lrs=[1e-2])


def test_quick_study_runs_end_to_end_and_says_it_is_a_smoke_run(tmp_path):
    res = T.run(SMOKE, tmp_path, tmp_path / "plots", equivalence_report=False)
    written = json.loads((tmp_path / "training.json").read_text())
    assert written["quick"] is True and written["provenance"]["quick"] is True
    assert "smoke run" in written["status_text"]
    assert written["provenance"]["load_avg"] and written["provenance"]["machine"]["torch_threads"] == 2
    for key in SMOKE.configs:
        runs = written["main"][key]["runs"]
        assert len(runs) == len(SMOKE.seeds)
        assert runs[0]["steps"] == [0, 2, 4] and all(r["final_val_loss"] is not None for r in runs)
        assert abs(runs[0]["val_loss"][0] - math.log(256)) < 0.05
    for group in res["comparisons"].values():
        for cmp in group.values():
            assert isinstance(cmp["separated"], bool) and cmp["text"]
    assert set(written["plots"]) == {f"training_{n}{v}.svg" for n in ("curves", "warmup", "step_time", "deep")
                                     for v in ("", "-dark")}
    for name in written["plots"]:
        svg = (tmp_path / "plots" / name).read_text()
        assert svg.lstrip().startswith("<?xml") and "<svg" in svg
        assert "fill: #ffffff" not in svg.split("<g id=\"axes_1\">")[0]       # transparent figure background


def test_equivalence_report_on_one_family():
    import reference_impl.equivalence as E

    rep = E.report(families=("gpt2",), dtypes=(torch.float64,))
    row = rep["families"]["gpt2"]["float64"]
    assert row["converted"]["max_over_bound"] <= 1 and row["rotated"]["max_over_bound"] <= 1
    for broken in ("no_centring", "biases_not_centred", "head_left_tied", "layernorm_rotated"):
        assert row[broken]["max_over_bound"] > 10, broken


# ----------------------------------------------------------------------------------- committed data


def _load(name):
    path = DATA / name
    assert path.is_file(), f"docs/data/{name} missing: run python -m reference_impl.studies.training"
    return json.loads(path.read_text())


@pytest.mark.guards("C04", "C06", "C07", "C23", "C26", "C30", "C37", "C48")
def test_committed_training_data_is_consistent_and_honest():
    data = _load("training.json")
    ok, why = is_current(data)
    assert ok, why
    assert data["quick"] == data["provenance"]["quick"]
    if data["quick"]:
        assert "smoke run" in data["status_text"]
    else:
        assert "smoke" not in data["status_text"]
        assert len(data["settings"]["seeds"]) >= 3 and data["settings"]["steps"] >= 300
    # every stored verdict follows from its stored per-seed values
    groups = list(data["comparisons"].values())
    groups += [{k: v for k, v in lr.items() if k == "comparisons"}["comparisons"] for lr in data["warmup"].values()]
    groups.append({"deep": data["deep"]["comparison"]})
    for group in groups:
        for cmp in group.values():
            again = T.compare(cmp["a_stats"]["values"], cmp["b_stats"]["values"], cmp["a"], cmp["b"], cmp["what"],
                              ".2f" if "ms" in cmp["what"] else ".3f")
            assert (again["separated"], again["lower"], again["text"]) == (cmp["separated"], cmp["lower"], cmp["text"])
    for key, v in data["main"].items():
        finals = [r["final_val_loss"] for r in v["runs"]]
        assert v["final"]["values"] == finals
    for name in data["plots"]:
        assert (DATA / "plots" / name).is_file()


@pytest.mark.guards("equiv.centre_weight", "equiv.rotation", "C07")
def test_committed_equivalence_data_shows_exact_and_broken_conversions():
    data = _load("training_equivalence.json")
    ok, why = is_current(data)
    assert ok, why
    for fam in data["families"].values():
        for dtype in ("float64", "float32"):
            row = fam[dtype]
            for good in ("converted", "folded", "rotated"):
                assert row[good]["max_over_bound"] <= 1, (good, dtype)
            for bad in ("no_centring", "biases_not_centred", "layernorm_rotated", "head_left_tied"):
                if bad in row:
                    assert row[bad]["max_over_bound"] > 10, (bad, dtype)
        assert fam["float64"]["converted"]["max_abs"] < 1e-12 < fam["float64"]["no_centring"]["max_abs"]
        assert fam["float64"]["mean_shift_first_norm"]["max"] - fam["float64"]["mean_shift_first_norm"]["min"] > 0.01
