"""What the pages say about which model family does what is what the census read from the installed
transformers (docs/data/census.json, written by ``python -m reference_impl.studies.census``).

Each statement below is a sentence (or the part of one that makes the claim) with the page it is on, and a
check of the census that must hold for the sentence to be true. The test asserts both: the sentence is on
the page (whitespace aside), and the census agrees. A sentence that is reworded must be reworded here too;
a census that changes its mind fails the page's claim, naming it."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
CENSUS = REPO / "docs" / "data" / "census.json"
pytestmark = pytest.mark.guards("census.prose")

QK_ROLES = ("q_per_head", "k_per_head", "q_whole", "k_whole")


def _models(c: dict) -> dict:
    return {m["model_type"]: m for m in c["models"]}


def _classes(c: dict) -> dict:
    return {k["name"]: k for k in c["classes"]}


def _row(c: dict, model_type: str) -> dict:
    m = _models(c).get(model_type)
    if m is None:
        raise AssertionError(f"the census has no model type {model_type!r}")
    if m["status"] != "traced":
        raise AssertionError(f"{model_type}: the census could not trace it ({m['error']})")
    return m


def main_class(c: dict, model_type: str) -> dict:
    """The class of the model's norm on the residual stream (the first norm on a sub-layer's input or
    output in the traced layer)."""
    m = _row(c, model_type)
    for e in m["layer"]:
        if e["role"] in ("input", "sublayer_output", "residual_sum"):
            return _classes(c)[e["class"]]
    raise AssertionError(f"{model_type}: no norm on the residual stream in the traced layer")


def _base(entry):
    return entry.split(" (", 1)[0] if entry else entry


# ------------------------------------------------------------------ the checks a statement can make

def qk(kind, *model_types):
    def check(c):
        for t in model_types:
            got = _row(c, t)["qk_norm"]
            assert got == kind, f"{t}: the census says qk_norm {got!r}, the page says {kind!r}"
    return check


def placement(kind, *model_types):
    def check(c):
        for t in model_types:
            got = _row(c, t)["placement"]
            assert got == kind, f"{t}: the census says placement {got!r}, the page says {kind!r}"
    return check


def gain(kind, *model_types):
    def check(c):
        for t in model_types:
            cls = main_class(c, t)
            assert cls["gain"] == kind, f"{t}: {cls['name']} has gain {cls['gain']!r}, the page says {kind!r}"
    return check


def class_catalog(entry, *names):
    def check(c):
        classes = _classes(c)
        for n in names:
            assert n in classes, f"the census found no class {n!r}"
            assert _base(classes[n]["catalog"]) == entry, f"{n} matches {classes[n]['catalog']!r}, the page says {entry!r}"
    return check


def qk_gain(kind, norm_kind, *model_types):
    """The model's QK-norm modules have this gain and divide by this statistic ("rms": the root mean square)."""
    def check(c):
        classes = _classes(c)
        for t in model_types:
            qks = [e for e in _row(c, t)["layer"] if e["role"] in QK_ROLES]
            assert qks, f"{t}: the traced layer has no norm on queries or keys"
            for e in qks:
                cls = classes[e["class"]]
                assert cls["gain"] == kind, f"{t}: {e['module']} ({cls['name']}) has gain {cls['gain']!r}, not {kind!r}"
                assert cls["kind"] == norm_kind and cls["catalog"], \
                    f"{t}: {cls['name']} is a {cls['kind']!r} norm matching {cls['catalog']!r}, not a matched {norm_kind!r} one"
    return check


def latents_not_keys(*model_types, queries_per_head=False):
    """A norm on a latent in the traced layer, and no norm on queries or keys; with ``queries_per_head`` a
    per-head norm on the queries as well (DeepSeek-V4 does both)."""
    def check(c):
        for t in model_types:
            m = _row(c, t)
            roles = {e["role"] for e in m["layer"]}
            assert "latent" in roles, f"{t}: no norm on a latent in the traced layer"
            if queries_per_head:
                assert "q_per_head" in roles and m["qk_norm"] == "per_head", f"{t}: no per-head norm on the queries"
            else:
                assert m["qk_norm"] == "none" and not roles & set(QK_ROLES), f"{t}: a norm on queries or keys"
    return check


def module_catalog(model_type, module, entry):
    """The traced layer holds ``module``, and its class matches catalog entry ``entry``."""
    def check(c):
        found = [e for e in _row(c, model_type)["layer"] if e["module"] == module]
        assert found, f"{model_type}: the traced layer has no module {module!r}"
        for e in found:
            got = _classes(c)[e["class"]]["catalog"]
            assert _base(got) == entry, f"{model_type}.{module} ({e['class']}) matches {got!r}, not {entry!r}"
    return check


def values_normed(*model_types):
    """The attention's ``v_norm`` is in the traced layer, on the output of ``v_proj``, its class matched."""
    def check(c):
        for t in model_types:
            m = _row(c, t)
            found = [e for e in m["layer"] if e["module"] == "self_attn.v_norm"]
            assert found, f"{t}: no self_attn.v_norm in the traced layer"
            # the census names the role (v_per_head), or, before it had that role, says so among the extra norms
            assert any(e["role"] == "v_per_head" for e in found) or any(
                "self_attn.v_norm" in x and "norm on the values" in x for x in m["extra_norms"]), \
                f"{t}: the census does not say v_norm acts on the values"
            for e in found:
                assert _classes(c)[e["class"]]["catalog"], f"{t}: {e['class']} is not matched to a catalog entry"
    return check


def all_of(*checks):
    def check(c):
        for ch in checks:
            ch(c)
    return check


# ------------------------------------------------------------------ the statements
STATEMENTS = [
    ("models.md", "on each sub-layer's input and output (the sandwich of Gemma 2 and 3)",
     placement("sandwich", "gemma2", "gemma3_text")),
    ("models.md", "on each sub-layer's output only, before it is added back (OLMo 2's order)",
     placement("output", "olmo2")),
    ("norms.md", "Qwen3 and Gemma 3 normalize each head over its `head_dim` features with one gain shared by the heads, "
                 "OLMo 2 normalizes the whole projection at once",
     all_of(qk("per_head", "qwen3", "gemma3_text"), qk("whole_projection", "olmo2"))),
    ("norms.md", "only a gain-free QK-norm, such as Llama 4's, gives a fixed bound",
     qk_gain("none", "rms", "llama4_text")),
    ("norms.md", "Gemma, Gemma 2, Gemma 3 and Qwen3-Next store the gain as an offset `w`, initialised to zero, and "
                 "multiply by `1 + w`",
     gain("1+w", "gemma", "gemma2", "gemma3_text", "qwen3_next")),
    ("history.md", "Qwen3 and Gemma 3 normalize each head's `head_dim` features with one shared gain, OLMo 2 "
                   "normalizes the whole projection at once",
     all_of(qk("per_head", "qwen3", "gemma3_text"), qk("whole_projection", "olmo2"))),
    ("checklist.md", "Qwen3 and Gemma 3 normalize each head over its own features, OLMo 2 the whole projection of "
                     "all heads; Llama 4 uses no gain",
     all_of(qk("per_head", "qwen3", "gemma3_text"), qk("whole_projection", "olmo2"),
            qk_gain("none", "rms", "llama4_text"))),
    ("numerics.md", "Per head (Qwen3, Gemma 3) or over the whole projection (OLMo 2)",
     all_of(qk("per_head", "qwen3", "gemma3_text"), qk("whole_projection", "olmo2"))),
    ("numerics.md", "| `GemmaRMSNorm`, `Gemma2RMSNorm`, `Gemma3RMSNorm` |",
     class_catalog("rms_norm.gemma", "GemmaRMSNorm", "Gemma2RMSNorm", "Gemma3RMSNorm")),
    ("numerics.md", "`LlamaRMSNorm` and the Mistral, Mixtral, Qwen2, Qwen3, DeepSeek-V3, Phi-3, Mamba-2 norms",
     class_catalog("rms_norm.llama", "LlamaRMSNorm", "MistralRMSNorm", "MixtralRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm",
                   "DeepseekV3RMSNorm", "Phi3RMSNorm", "Mamba2RMSNorm")),
    ("distributed.md", "OLMo 2 normalizes `q` and `k` over `num_attention_heads * head_dim` at once",
     qk("whole_projection", "olmo2")),
    ("placements.md", "[arXiv:2105.13290](https://arxiv.org/abs/2105.13290); Gemma 2 and 3). What the sub-layer writes "
                      "is normalized before it joins the stream",
     placement("sandwich", "gemma2", "gemma3_text")),
    ("placements.md", "**Reordered norm** of OLMo 2", placement("output", "olmo2")),
    ("placements.md", "Llama 4 normalizes queries and keys to unit root mean square with no learned gain at all",
     qk_gain("none", "rms", "llama4_text")),
    ("placements.md", "DeepSeek-V2 and DeepSeek-V3, with latent attention, normalize the compressed latent vectors, "
                      "not the per-head keys",
     latents_not_keys("deepseek_v2", "deepseek_v3")),
    ("placements.md", "DeepSeek-V4 normalizes both the latent query and, per head and without a gain, the queries "
                      "themselves",
     all_of(latents_not_keys("deepseek_v4", queries_per_head=True), module_catalog("deepseek_v4", "self_attn.q_b_norm", "rms_norm.deepseek_v4"))),
    ("history.md", "DeepSeek-V2 and DeepSeek-V3 normalize the compressed latents instead",
     latents_not_keys("deepseek_v2", "deepseek_v3")),
    ("history.md", "DeepSeek-V4 normalizes both the latent and the per-head queries",
     all_of(latents_not_keys("deepseek_v4", queries_per_head=True), module_catalog("deepseek_v4", "self_attn.q_b_norm", "rms_norm.deepseek_v4"))),
    ("history.md", "the census matches `Qwen3NextRMSNormGated` to `gated_rms_norm.qwen3_next`, `KimiLinearRMSNormGated` "
                   "to `gated_rms_norm.kimi_linear` and `MambaRMSNormGated` to `gated_rms_norm.mamba2`",
     all_of(class_catalog("gated_rms_norm.qwen3_next", "Qwen3NextRMSNormGated"),
            class_catalog("gated_rms_norm.kimi_linear", "KimiLinearRMSNormGated"),
            class_catalog("gated_rms_norm.mamba2", "MambaRMSNormGated"))),
    ("history.md", "the census finds the norm on the values of `gemma3n_text` and `gemma4_text`",
     values_normed("gemma3n_text", "gemma4_text")),
    ("history.md", "Gemma, Gemma 2 and Gemma 3 store an offset and multiply by `1 + w`; Gemma 4 stores the gain itself",
     all_of(gain("1+w", "gemma", "gemma2", "gemma3_text"), gain("w", "gemma4_text"),
            class_catalog("rms_norm.olmo2", "Gemma4RMSNorm"))),
    ("history.md", "the census's `attn_hc.input_norm`, which it matches to `rms_norm.deepseek_v4`",
     module_catalog("deepseek_v4", "attn_hc.input_norm", "rms_norm.deepseek_v4")),
    ("history.md", "The census classifies MiniMax's decoder layer as Post-Norm", placement("post", "minimax")),
    ("history.md", "OLMo 2 ([arXiv:2501.00656](https://arxiv.org/abs/2501.00656)) adopted this \"reordered norm\" "
                      "together with QK-norm",
     all_of(placement("output", "olmo2"), qk("whole_projection", "olmo2"))),
    ("history.md", "normalizes the input and output of each sub-layer with RMSNorm",
     placement("sandwich", "gemma2")),
    ("history.md", "keeps the two norms and replaces the soft-capping with QK-norm",
     all_of(placement("sandwich", "gemma3_text"), qk("per_head", "gemma3_text"))),
    ("history.md", "removed Qwen2's QKV bias and introduced QK-norm",
     all_of(qk("none", "qwen2"), qk("per_head", "qwen3"))),
]


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@pytest.fixture(scope="module")
def census() -> dict:
    assert CENSUS.is_file(), "docs/data/census.json is missing: run python -m reference_impl.studies.census"
    return json.loads(CENSUS.read_text())


@pytest.mark.parametrize("page, sentence, check", STATEMENTS, ids=[f"{p}:{s[:40]}" for p, s, _ in STATEMENTS])
def test_statement_is_on_its_page_and_the_census_agrees(census, page, sentence, check):
    text = _flat((DOCS / page).read_text())
    assert _flat(sentence) in text, f"docs/{page} no longer says: {sentence!r} (update the statement here)"
    check(census)


def _scrambled(census: dict) -> dict:
    """The census with every fact a statement relies on changed."""
    c = copy.deepcopy(census)
    for m in c["models"]:
        m["placement"], m["qk_norm"] = "other", "other"
        for e in m["layer"]:
            e["role"] = "other"
    for k in c["classes"]:
        k["gain"], k["catalog"] = "other", None
    return c


@pytest.mark.parametrize("page, sentence, check", STATEMENTS, ids=[f"{p}:{s[:40]}" for p, s, _ in STATEMENTS])
def test_each_check_fails_on_a_census_that_disagrees(census, page, sentence, check):
    with pytest.raises(AssertionError):
        check(_scrambled(census))


def test_search_names_name_model_types_of_the_census(census):
    """The finder's extra names (site_hooks/census.py ALIASES) and the pages' family names
    (reference_impl/families.py NAMES) each name a model type the census lists."""
    from reference_impl.families import NAMES, UNTRACED
    from site_hooks.census import ALIASES

    types = {m["model_type"] for m in census["models"]}
    unknown = sorted((set(ALIASES) | set(NAMES)) - types - set(UNTRACED))
    assert not unknown, f"names for model types the census does not list: {unknown}"
