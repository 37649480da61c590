"""Formulas reach the search index as plain text, not TeX (``site_hooks/searchtext.py``): the reading of
common formulas, the rewrite of a search index file, and the failure when TeX would be left in it. Then what
the rewrite adds for newcomers: the separator that splits at brackets, one entry per named model type that
opens its card on the "Find your model" page, and the tags of a few sections (a tagged section that is gone
fails the build). The browser tests of the built site's search are ``tests/site/test_search.py`` and
``tests/site/test_newcomer_search.py``."""
from __future__ import annotations

import json
import re

import pytest

from site_hooks import searchtext

pytestmark = pytest.mark.guards("site.machinery")


@pytest.mark.parametrize("tex, text", [
    (r"\sqrt{\sigma^2 + \epsilon}", "√(sigma² + epsilon)"),
    (r"\frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}}", "(x - mu)/√(sigma² + epsilon)"),
    (r"\operatorname{ms} + \epsilon", "ms + epsilon"),
    (r"\mu / \mathrm{RMS}", "mu / RMS"),
    (r"\alpha = (2L)^{1/4}", "alpha = (2L)^(1/4)"),
    (r"|q \cdot k| / \sqrt{d} \le \sqrt{d}", "|q · k| / √(d) ≤ √(d)"),
    (r"\lVert x \rVert", "‖ x ‖"),
    (r"\begin{aligned} y &= 1 \\ z &= 2 \end{aligned}", "y = 1; z = 2"),
    (r"x_{l+1} = x_l + F(\operatorname{Norm}(x_l))", "x_(l+1) = x_l + F(Norm(x_l))"),
])
def test_formula_readings(tex, text):
    assert searchtext.tex_to_text(tex) == text


def test_text_keeps_its_words_and_loses_its_delimiters():
    s = r"keeps \(\epsilon\) small; \[\frac{1}{d}\] and $$\sqrt{2}$$ end"
    out = searchtext.strip_formulas(s)
    assert out == "keeps epsilon small; 1/d and √(2) end"
    assert not searchtext.LEFTOVER_TEX.search(out)


def test_rewrite_index_file(tmp_path):
    index = {"config": {"lang": ["en"]}, "docs": [
        {"location": "start/", "title": r"The mean \(\mu\)", "text": r"divide by \(\sqrt{\sigma^2+\epsilon}\)"},
        {"location": "api/", "title": "API", "text": "no formula here"}]}
    (tmp_path / "search").mkdir()
    path = tmp_path / "search" / "search_index.json"
    path.write_text(json.dumps(index))
    assert searchtext.rewrite_index(tmp_path) == 2
    docs = json.loads(path.read_text(encoding="utf-8"))["docs"]
    assert docs[0] == {"location": "start/", "title": "The mean mu", "text": "divide by √(sigma²+ epsilon)"}
    assert docs[1]["text"] == "no formula here"
    assert searchtext.rewrite_index(tmp_path / "nowhere") == 0  # no index: nothing to do


def test_tex_the_reader_cannot_read_fails_the_build(tmp_path):
    (tmp_path / "search").mkdir()
    # a stray command outside any formula delimiters cannot be read and must not reach a snippet
    (tmp_path / "search" / "search_index.json").write_text(json.dumps(
        {"docs": [{"location": "x/", "title": "x", "text": r"a \frac{1}{2} outside a formula"}]}))
    with pytest.raises(ValueError, match="TeX left in the search index"):
        searchtext.rewrite_index(tmp_path)


# -- what newcomers type: the separator, the finder's cards as entries, the tags ------------------------------

RECORD = {"models": [
    {"t": "gemma4", "name": "Gemma 4 (multimodal)", "cls": "Gemma4ForConditionalGeneration", "cfg": "Gemma4Config",
     "norms": ["Gemma4RMSNorm"], "cat": ["rms_norm.gemma"], "status": "traced"},
    {"t": "qwen3_next", "name": "Qwen3-Next", "cls": "Qwen3NextForCausalLM", "cfg": "Qwen3NextConfig",
     "norms": ["Qwen3NextRMSNorm", "Qwen3NextRMSNormGated"], "cat": ["rms_norm.gemma"], "status": "traced"},
    {"t": "gemma4_unified_text", "name": "", "cls": "X", "cfg": "XConfig", "norms": [], "cat": [], "status": "traced"},
]}


def _site_index(tmp_path, docs, separator=None):
    (tmp_path / "search").mkdir()
    config = {"lang": ["en"], **({"separator": separator} if separator else {})}
    path = tmp_path / "search" / "search_index.json"
    path.write_text(json.dumps({"config": config, "docs": docs}))
    return path


def _whole_site_docs():
    return [{"location": "", "title": "Home", "text": ""},
            {"location": "check/", "title": "Check your implementation", "text": ""},
            {"location": "models/", "title": "Find your model", "text": ""},
            {"location": "norms/", "title": "The catalog of norms", "text": ""},
            {"location": "norms/#the-1-w-gain", "title": "The (1 + w) gain", "text": "an offset"}]


def test_finder_entries_open_a_card_and_carry_the_family_name():
    entries = searchtext.finder_entries(RECORD)
    assert [e["location"] for e in entries] == ["models/#model=gemma4", "models/#model=qwen3_next"]
    assert entries[0]["title"] == "Gemma 4 (multimodal)" and "gemma4" in entries[0]["text"]
    assert "Qwen3NextRMSNormGated" in entries[1]["text"] and "rms_norm.gemma" in entries[1]["text"]
    # a model type without a family name gets no entry: its rare word would outrank real pages
    assert not any("unified" in e["location"] for e in entries)


def test_whole_site_gets_the_separator_the_cards_and_the_tags(tmp_path):
    path = _site_index(tmp_path, _whole_site_docs(), separator=searchtext.DEFAULT_SEPARATOR)
    searchtext.rewrite_index(tmp_path, finder_record=RECORD)
    index = json.loads(path.read_text(encoding="utf-8"))
    assert index["config"]["separator"] == searchtext.SEPARATOR
    docs = {d["location"]: d for d in index["docs"]}
    assert docs["check/"]["tags"] == ["check"] and docs["norms/#the-1-w-gain"]["tags"] == ["1 + w"]
    assert "models/#model=qwen3_next" in docs and "tags" not in docs["models/"]
    # entries of a page come after the page itself (Material's search finds a section's page that way)
    order = [d["location"] for d in index["docs"]]
    assert order.index("models/") < order.index("models/#model=gemma4")
    # the separator splits "(1 + w)" into words a search for "1 + w" matches
    words = [w for w in re.split(searchtext.SEPARATOR, "The (1 + w) gain, (rsqrt)") if w]
    assert words == ["The", "1", "+", "w", "gain,", "rsqrt"]
    # rewriting again changes nothing: the cards are not added twice
    before = path.read_text(encoding="utf-8")
    searchtext.rewrite_index(tmp_path, finder_record=RECORD)
    assert json.loads(path.read_text(encoding="utf-8")) == json.loads(before)


def test_a_tagged_section_that_is_gone_fails_the_build(tmp_path):
    docs = [d for d in _whole_site_docs() if d["location"] != "norms/#the-1-w-gain"]
    _site_index(tmp_path, docs)
    with pytest.raises(ValueError, match=r"no search entry at \['norms/#the-1-w-gain'\]"):
        searchtext.rewrite_index(tmp_path, finder_record=RECORD)


def test_a_separator_set_in_mkdocs_yml_is_refused(tmp_path):
    _site_index(tmp_path, _whole_site_docs(), separator=r"[\s]+")
    with pytest.raises(ValueError, match="mkdocs.yml sets the search separator"):
        searchtext.rewrite_index(tmp_path, finder_record=RECORD)
