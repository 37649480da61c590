"""Formulas reach the search index as plain text, not TeX (``site_hooks/searchtext.py``): the reading of
common formulas, the rewrite of a search index file, and the failure when TeX would be left in it. The
browser test of the built site's search is ``tests/site/test_search.py``."""
from __future__ import annotations

import json

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
