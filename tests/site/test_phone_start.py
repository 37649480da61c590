"""Start answers "why RMSNorm" on a phone's first screen, in one paragraph, with the evidence folded.

At 375x812 the Start page's first one-screen answer (an admonition of the ``tldr`` type) is titled with the
question, holds one paragraph, and ends within the first screen; the long answer under the heading
"So why do LLMs use RMSNorm?" stays on the page (links and search lead there) but its evidence is in a
collapsed block, so a reader who wants only the answer is not handed six screens of it.
"""
from __future__ import annotations

import pytest

from tests.site.test_reading import PHONE, _close, _open, reading_site, reading_url, view  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.site]

START_JS = """() => {
    window.scrollTo(0, 0);
    const art = document.querySelector('article');
    const answer = art.querySelector('.admonition.tldr, details.tldr');
    const out = {answer: null, folded: 0, heading: false};
    if (answer) {
        const r = answer.getBoundingClientRect();
        out.answer = {title: (answer.querySelector('.admonition-title, summary') || answer).textContent.trim(),
                      paragraphs: answer.querySelectorAll(':scope > p:not(.admonition-title)').length,
                      bottom: r.bottom + window.scrollY, words: answer.textContent.trim().split(/\\s+/).length};
    }
    const h = [...art.querySelectorAll('h2')].find(e => /why do LLMs use RMSNorm/i.test(e.textContent));
    if (h) {
        out.heading = true;
        for (let e = h.nextElementSibling; e && e.tagName !== 'H2'; e = e.nextElementSibling)
            if (e.tagName === 'DETAILS' && !e.open) out.folded += e.textContent.trim().split(/\\s+/).length;
    }
    return out;
}"""


def test_start_answers_why_rmsnorm_in_one_paragraph_on_the_first_phone_screen(view, reading_url):
    context = view("phone-first")
    page, _ = _open(context, reading_url + "start/")
    try:
        got = page.evaluate(START_JS)
    finally:
        _close(context, page)
    a = got["answer"]
    assert a, "start/: no one-screen answer (a tldr admonition) on the page"
    assert "why" in a["title"].lower() and "rmsnorm" in a["title"].lower(), f"start/: the answer is titled {a['title']!r}"
    assert a["paragraphs"] == 1, f"start/: the answer has {a['paragraphs']} paragraphs, not one"
    assert a["bottom"] <= PHONE["height"], (f"start/: the answer ends at {a['bottom']:.0f} px, past the first phone "
                                           f"screen ({PHONE['height']} px)")
    assert 40 <= a["words"] <= 200, f"start/: the answer has {a['words']} words"
    assert got["heading"], "start/: the section 'So why do LLMs use RMSNorm?' is gone (links and search lead there)"
    assert got["folded"] >= 200, f"start/: only {got['folded']} words of that section's evidence are folded"
