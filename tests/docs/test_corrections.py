"""Statements the pages once got wrong stay corrected: each test checks that the wrong sentence is gone and
that the right one is there with its primary source, or checks the corrected fact itself against the
installed ``transformers`` (Llama 4's eps, OLMo 2's QK-norm extent, OLMo 1's q/k/v clipping) or the
package's own code (the casting order of the reference snippet, the diagram data)."""
from __future__ import annotations

import inspect
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
# the placement table's rows: the census's facts per model type, and the hand-kept notes with their sources
NOTES = yaml.safe_load((REPO / "reference_impl" / "checkpoints.yaml").read_text())["placement_notes"]


def _page(name: str) -> str:
    """The page's text with line breaks folded, so a sentence can be found across wrapped lines."""
    return " ".join((DOCS / name).read_text(encoding="utf-8").split())


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find(" ## ", start + len(heading))
    return text[start:end if end > 0 else None]


# --- Start here: why LLMs use RMSNorm -------------------------------------------------------------------

def test_start_does_not_claim_a_cost_nobody_could_measure():
    why = _section(_page("start.md"), "## So why do LLMs use RMSNorm?")
    assert "costs nothing that anyone has been able to measure" not in why
    # the evidence is given per placement, Post-LN included, and Narang et al. (RMSNorm better) is cited
    assert "pre-rms_vs_pre-ln" in why and "post-rms_vs_post-ln" in why
    assert "arXiv:2102.11972" in why


def test_start_separates_adoption_from_later_justification():
    why = _section(_page("start.md"), "## So why do LLMs use RMSNorm?")
    adopted, since = why.index("Why it was adopted"), why.index("What has been shown since")
    assert adopted < since
    for arxiv in ("1910.10683", "2112.11446", "2302.13971"):       # T5 2019, Gopher 2021, LLaMA 2023
        assert adopted < why.index(arxiv) < since, f"arXiv:{arxiv} belongs to the adoption"
    for arxiv in ("2305.14858", "2401.15024", "2404.00456"):       # Jiang 2023, SliceGPT and QuaRot 2024
        assert why.index(arxiv) > since, f"arXiv:{arxiv} came after the adoption"


def test_slicegpt_is_pruning_and_quarot_starts_from_rmsnorm_models():
    start, training = _page("start.md"), _page("training.md")
    assert "quantisation methods such as QuaRot (arXiv:2404.00456) and SliceGPT" not in start
    assert re.search(r"SliceGPT \(arXiv:2401\.15024\), a structured pruning method", start)
    assert "why QuaRot and SliceGPT first turn LayerNorm into RMSNorm" not in training
    assert "Both first convert LayerNorm models to RMSNorm" not in training
    assert re.search(r"QuaRot \(arXiv:2404\.00456\).{0,200}models that already use RMSNorm", training)
    assert re.search(r"SliceGPT \(arXiv:2401\.15024.{0,200}converts LayerNorm models to RMSNorm", training)


def test_start_does_not_claim_a_pass_fewer():
    start = _page("start.md")
    assert "one pass over the row fewer" not in start
    assert "Welford" in start and "not fewer passes over the row" in start


def test_start_says_which_casting_order_its_snippet_uses():
    what = _section(_page("start.md"), "## What to copy")
    assert "not Llama's order" in what and "torch.nn.RMSNorm" in what and "Olmo2RMSNorm" in what


def test_the_snippet_order_is_olmo2_and_torch_not_llama():
    from reference_impl import conventions
    from reference_impl.norms.rms_norm import rms_forward

    g = torch.Generator().manual_seed(5)
    x = (torch.randn(64, 96, generator=g) * 3).to(torch.bfloat16)
    w = (1 + 0.3 * torch.randn(96, generator=g)).to(torch.bfloat16)
    y, _ = rms_forward(x, w, 1e-6)
    assert torch.equal(y, conventions.rms_norm(x, w, 1e-6, convention="olmo2"))
    assert torch.equal(y, torch.nn.functional.rms_norm(x, (96,), w, 1e-6))
    assert not torch.equal(y, conventions.rms_norm(x, w, 1e-6, convention="llama"))


def test_start_shows_where_the_norm_goes():
    start = (DOCS / "start.md").read_text(encoding="utf-8")
    assert "assets/diagrams/norm-placement.svg" in start and "](placements.md)" in start


# --- History -----------------------------------------------------------------------------------------

def test_history_latent_attention_keys_exist_in_training():
    history = _page("history.md")
    assert "no per-head key is ever formed" not in history
    assert "Per-head keys are still formed in training and prefill" in history


def test_history_does_not_say_pre_norm_removed_warmup():
    history = _page("history.md")
    assert "trainable without warm-up" not in history
    assert re.search(r"Pre-LN LLMs still warm up.{0,200}arXiv:2309\.14322", history)


def test_history_makes_no_priority_claim_for_the_placement_names():
    history = _page("history.md")
    assert "named the two placements" not in history
    assert "under the names pre-norm and post-norm" in history


def test_history_gives_ngpt_in_steps_and_the_curse_of_depth_remedy():
    history = _page("history.md")
    assert re.search(r"4 to 20 times fewer training steps.{0,150}not of wall-clock time", history)
    curse = history[history.index("**Curse of Depth**"):history.index("**Mix-LN**")]
    assert "2502.05795" in curse and "LayerNorm Scaling" in curse and r"1/\sqrt{l}" in curse


# --- QK-norm and DyT ---------------------------------------------------------------------------------

def test_qk_norm_bound_depends_on_the_gain():
    norms, placements = _page("norms.md"), _page("placements.md")
    assert "which bounds the attention logits" not in norms
    assert "cannot grow with their size" not in placements
    for text in (norms, placements):
        assert "gain-free QK-norm" in text


def test_dyt_alpha_cited_from_dyt_itself():
    norms = _page("norms.md")
    assert "The DyT module in the Derf authors'" not in norms
    dyt = norms[norms.index("DyT (Zhu"):norms.index('{{ norm("dyt") }}')]
    assert "github.com/jiachenzhu/DyT" in dyt and "arXiv:2503.10622" in dyt
    assert "other_tasks/LLaMA/README.md" in dyt and "attention" in dyt


def test_the_unit_rms_cut_checks_the_gain_free_bound():
    # |q.k| / sqrt(d) <= sqrt(d) for unit-RMS q and k, the fixed bound the pages give
    from reference_impl.norms.l2_norm import LLAMA4_DEFAULT_EPS, llama4_l2_norm

    d = 64
    q = llama4_l2_norm(torch.randn(500, d, dtype=torch.float64) * 50, LLAMA4_DEFAULT_EPS)
    # the norm computes in float32 and casts back, so the unit RMS holds to float32 rounding
    assert ((q * q).mean(-1) - 1).abs().max() < 1e-6
    assert (q @ q.T).abs().max() / d ** 0.5 <= d ** 0.5 * (1 + 1e-6)


# --- Llama 4's L2 norm: eps and docstring ------------------------------------------------------------

def test_llama4_l2_norm_takes_the_configs_eps():
    llama4 = pytest.importorskip("transformers.models.llama4.modeling_llama4")
    from transformers import Llama4TextConfig

    from reference_impl.norms import CATALOG
    from reference_impl.norms.l2_norm import LLAMA4_DEFAULT_EPS, llama4_l2_norm

    # the model passes config.rms_norm_eps, not the class's default (1e-6)
    cfg = Llama4TextConfig(hidden_size=64, intermediate_size=128, intermediate_size_mlp=128, num_hidden_layers=1,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=64,
                           num_local_experts=2, rms_norm_eps=3e-5, use_qk_norm=True, no_rope_layers=[1])
    attn = llama4.Llama4TextAttention(cfg, layer_idx=0)
    assert attn.qk_norm.eps == cfg.rms_norm_eps == 3e-5
    assert inspect.signature(llama4_l2_norm).parameters["eps"].default is inspect.Parameter.empty
    assert LLAMA4_DEFAULT_EPS == Llama4TextConfig().rms_norm_eps
    assert CATALOG["llama4_l2_norm"].params["eps"] == LLAMA4_DEFAULT_EPS
    with pytest.raises(TypeError):
        llama4_l2_norm(torch.ones(2, 4))


def test_l2_norm_docstrings_say_unit_rms_for_llama4():
    from reference_impl.norms import l2_norm

    assert "unit sphere" not in l2_norm.__doc__.splitlines()[0]
    assert "unit RMS" in l2_norm.llama4_l2_norm.__doc__
    assert "unit length" in l2_norm.l2_norm.__doc__


# --- Diagram and placement table ---------------------------------------------------------------------

def test_qk_diagram_groups_follow_the_installed_modules():
    from reference_impl.studies import placement_diagrams as PD

    import json

    from reference_impl.families import NAMES

    census = {m["model_type"]: m for m in json.loads((DOCS / "data" / "census.json").read_text())["models"]}
    model_type = {family: t for t, family in NAMES.items()}
    extent = {"per_head": "per head", "whole_projection": "whole projection"}
    seen = set()
    for where, families in PD.QK_GROUPS:
        for fam in families:
            qk = census[model_type[fam]]["qk_norm"]
            assert qk in extent, f"{fam}: the census finds QK-norm {qk!r}"
            assert extent[qk] == where, f"{fam} is drawn under {where!r}"
            seen.add(fam)
    assert {"Qwen3", "Gemma 3", "OLMo 2"} <= seen
    svg = ET.fromstring(PD.render_all()["qk-norm.svg"])
    lines = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert "whole projection: OLMo 2" in lines
    assert not any("per head" in s and "OLMo 2" in s for s in lines)


def test_olmo1_row_names_the_qkv_clipping():
    olmo = pytest.importorskip("transformers.models.olmo.modeling_olmo")
    src = inspect.getsource(olmo.OlmoAttention.forward)
    for name in ("query_states", "key_states", "value_states"):
        assert f"{name}.clamp_(min=-self.config.clip_qkv, max=self.config.clip_qkv)" in src
    row = NOTES["olmo"]
    assert "clip_qkv" in row and "0424" in row and "OLMo-1.7-7B.yaml" in row
    assert "clip_qkv" in _page("placements.md")


def test_llama4_row_says_rms_not_l2():
    assert "L2-normalization" not in NOTES["llama4_text"]
    assert "RMS normalization" in NOTES["llama4_text"]


# --- Claims ledger: sources linked and named ---------------------------------------------------------

def test_ledger_links_arxiv_ids_and_names_articles():
    from site_hooks import ledger

    assert ledger.link_arxiv("Narang et al., arXiv:2102.11972, Table 1") == \
        "Narang et al., [arXiv:2102.11972](https://arxiv.org/abs/2102.11972), Table 1"
    linked = "[arXiv:1910.07467](https://arxiv.org/abs/1910.07467) and `arXiv:1910.07467`"
    assert ledger.link_arxiv(linked) == linked               # links and code spans are left alone
    ledger.clear_caches()
    first = next(iter(ledger.sources().values()))
    named = ledger.source_labels(next(iter(ledger.sources())), named=True)
    assert f"[{first['label']}](#source-{first['label'].lower()})" in named and "article" in named
    assert "*" in named and first["title_en"].split(":")[0] in named


# --- The 2025-2026 corrections: each statement pinned to the source that decides it ------------------------

def test_gated_norm_page_counts_four_orders_and_the_fourth_is_falcon_h1s():
    """norms-gated.md once said transformers writes three casting orders for the gated RMSNorm; Falcon-H1's
    class with ``norm_before_gate=False`` is a fourth (gate before the norm, one rounding at the end)."""
    falcon = pytest.importorskip("transformers.models.falcon_h1.modeling_falcon_h1")
    from reference_impl.norms import CATALOG

    page = _page("norms-gated.md")
    assert "writes three casting orders" not in page and "writes four casting orders" in page
    assert "| `gated_rms_norm.falcon_h1` | before, `silu` |" in page
    assert "if not self.norm_before_gate and gate is not None:" in inspect.getsource(falcon.FalconH1RMSNormGated)
    g = torch.Generator().manual_seed(1)
    x, z = torch.randn(2, 3, 8, generator=g).bfloat16(), torch.randn(2, 3, 8, generator=g).bfloat16()
    m = falcon.FalconH1RMSNormGated(8, eps=1e-6, n_groups=1, norm_before_gate=False)
    with torch.no_grad():
        m.weight.copy_(torch.rand(8, generator=g) + 0.5)
        want = m(x, gate=z)
    entry = CATALOG["gated_rms_norm.falcon_h1"].reference(x, m.weight.detach(), z, 1e-6, 1)
    assert torch.equal(entry, want)
    # and none of the three other orders gives these bits
    others = [CATALOG["gated_rms_norm.mamba2"].reference(x, m.weight.detach(), z, 1e-6, 1).to(want.dtype)]
    others += [CATALOG[n].reference(x, m.weight.detach(), z, 1e-6, "silu")
               for n in ("gated_rms_norm.qwen3_next", "gated_rms_norm.kimi_linear")]
    assert not any(torch.equal(o, want) for o in others)


def test_llama4_qk_norm_is_conditional_on_the_config():
    """placements.md said Llama 4 normalizes queries and keys without saying that only a config with
    ``use_qk_norm`` builds the norm, only in layers with RoPE, and that the 128-expert model does not."""
    llama4 = pytest.importorskip("transformers.models.llama4.modeling_llama4")
    from transformers import Llama4TextConfig

    page = _page("placements.md")
    assert "where its config sets `use_qk_norm` (the default) and only in the layers with rotary embeddings" in page
    assert "the 128-expert model does not use it" in page
    src = inspect.getsource(llama4.Llama4TextAttention)
    assert "if self.config.use_qk_norm and self.use_rope:" in src
    assert "# the 128E model does not use qk_norm" in src
    assert Llama4TextConfig().use_qk_norm is True
    kw = dict(hidden_size=64, intermediate_size=128, intermediate_size_mlp=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=64, num_local_experts=2,
              no_rope_layers=[1, 0])
    assert hasattr(llama4.Llama4TextAttention(Llama4TextConfig(**kw, use_qk_norm=True), layer_idx=0), "qk_norm")
    assert not hasattr(llama4.Llama4TextAttention(Llama4TextConfig(**kw, use_qk_norm=False), layer_idx=0), "qk_norm")
    assert not hasattr(llama4.Llama4TextAttention(Llama4TextConfig(**kw, use_qk_norm=True), layer_idx=1), "qk_norm")


def test_latent_attention_models_are_named_and_deepseek_v4_normalizes_both():
    """history.md and placements.md said models with DeepSeek's latent attention normalize the latents and not
    the per-head keys or queries; DeepSeek-V4 normalizes the latent query and then each head's query."""
    ds4 = pytest.importorskip("transformers.models.deepseek_v4.modeling_deepseek_v4")
    history, placements = _page("history.md"), _page("placements.md")
    assert "Models with DeepSeek's latent attention normalize the compressed latent vectors" not in placements
    assert "these models normalize the compressed latents instead" not in history
    assert "DeepSeek-V4 normalizes both" in history and "DeepSeek-V4 normalizes both" in placements
    init = inspect.getsource(ds4.DeepseekV4Attention.__init__)
    forward = inspect.getsource(ds4.DeepseekV4Attention.forward)
    assert "self.q_a_norm = DeepseekV4RMSNorm(" in init
    assert "self.q_b_norm = DeepseekV4UnweightedRMSNorm(" in init
    assert forward.index("self.q_a_norm(") < forward.index("q = self.q_b_norm(q)") < forward.index(
        "apply_rotary_pos_emb(q")


def test_placements_say_why_gates_sinks_and_value_norms_have_no_verdict():
    """The small decoder has no output gate, sink logit or value norm: the page says so instead of a verdict."""
    from reference_impl.tiny_lm import TinyLM, TinyLMConfig

    page = _page("placements.md")
    assert "Gated attention, attention sinks and the value norm have no verdict on this page" in page
    model = TinyLM(TinyLMConfig(d=16, layers=1, heads=2, ffn=32, context=8, norm="rms", placement="pre"))
    attn = model.blocks[0].attn   # the MLP's "gate" is SwiGLU's, not an attention gate
    names = [n.lower() for n, _ in attn.named_modules()] + [n.lower() for n, _ in attn.named_parameters()]
    assert names and not [n for n in names if any(w in n for w in ("gate", "sink", "v_norm"))], names
    assert "sigmoid" not in inspect.getsource(type(attn))
