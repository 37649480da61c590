"""The built pages agree with the data they are drawn from: the finder's cards say in words what the census
found (how the gain is stored, the QK-norm's order with RoPE, the final norm's module), and the catalog's
offset-gain card names the model types the finder shows with that entry.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from site_hooks import census as C
from tests.site.test_models_page import _facts, built, models_url, open_models  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.site]
REPO = Path(__file__).resolve().parents[2]
CENSUS = REPO / "docs" / "data" / "census.json"


@pytest.fixture(scope="module")
def census() -> dict:
    return json.loads(CENSUS.read_text())


@pytest.mark.parametrize("model_type", ["deepseek_v4", "gemma4_text", "gemma3_text", "llama"])
def test_card_words_are_the_census_facts(open_models, census, model_type):
    m = next(m for m in census["models"] if m["model_type"] == model_type)
    classes = {c["name"]: c for c in census["classes"]}
    page = open_models(f"#model={model_type}")
    facts = _facts(page, "a")
    gains = {classes[n]["gain"] for n in m["norm_classes"]} - {"none"}
    assert facts["gain"] == C.gain_words([classes[n] for n in m["norm_classes"]])
    assert ("not 1 + w" in facts["gain"]) == (gains == {"w"}), (model_type, facts["gain"])
    assert ("1 + w (offset)" in facts["gain"]) == ("1+w" in gains), (model_type, facts["gain"])
    if m["qk_norm"] == "none":
        assert facts["QK-norm"] == "none, so no order with RoPE to choose"
    else:
        assert facts["QK-norm"].endswith(f"{m['qk_rope']} RoPE"), facts["QK-norm"]
    assert facts["final norm"] == (f"yes ({m['final_module']})" if m["final_norm"] else "no")
    assert not page.errors, page.errors


def test_gemma_4_and_gemma_3_cards_answer_whether_the_gain_is_offset(open_models, census):
    page = open_models("#model=gemma4_text&compare=gemma3_text")
    page.wait_for_selector('.mf-card[data-slot="b"][data-model="gemma3_text"]')
    assert _facts(page, "a")["gain"] == "stored as w, not 1 + w"
    assert _facts(page, "b")["gain"] == "stored as 1 + w (offset)"
    rows = page.eval_on_selector_all(".mf-diff tbody tr", "rs => rs.map(r => [r.className, r.textContent])")
    assert any(cls == "mf-differs" and text.startswith("gain") for cls, text in rows), rows


def test_offset_gain_card_names_the_models_the_finder_shows_with_it(built, census):  # noqa: F811
    from site_hooks.catalog import anchor

    page = (built / "norms" / "index.html").read_text()
    html = page[page.index(f'id="{anchor("rms_norm.gemma")}"'):]
    said = re.search(r"Used by (\d+) model types? in transformers [^:<]+: (.+?)\.(?: |<)", html)
    assert said, "the rms_norm.gemma card has no census 'used by' sentence"
    listed = {s.strip() for s in said.group(2).split(", ")}
    names = C.display_names()
    finder = {names.get(m["model_type"]) or m["model_type"] for m in census["models"]
              if any(e and e.split(" (")[0] == "rms_norm.gemma" for e in m["catalog"])}
    assert listed == finder and int(said.group(1)) == len(finder)
    assert "Qwen3.5" in listed
