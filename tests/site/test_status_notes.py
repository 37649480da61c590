"""No built page states in prose what has not been measured, and no count is printed with the wrong plural.

A sentence such as "No GPU has run these kernels yet" is true on the day it is written and false the day the
run lands, and nothing makes it change. What a page lacks is a state of its data: the hooks read the data
files and render a badge ("needs a GPU", "smoke run", "measured") or an empty plot with its reason
(``site_hooks/wording.py``: ``run_record``, ``data_state``, ``count``; ``site_hooks/ledger.py``: a GPU claim
without its data file). This test reads the article of every built page and refuses the phrasings that such
notes take, and counts like "1 threads" that a template with a fixed plural prints.

The site is the one ``site_dir`` gives; ``NORMLAB_READING_SITE=/tmp/some_site`` points it at a private build.
"""
from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from tests.site.conftest import private_or_built_site
from tests.site.test_browser import PAGES

pytestmark = [pytest.mark.site]

# (pattern, why it is refused). Case-insensitive, over the article's text with tags removed.
FORBIDDEN: list[tuple[str, str]] = [
    (r"\bnot yet (?:been )?(?:measured|run|timed|checked)\b", "a 'not yet' status note"),
    # ("not run yet" alone is the outcome state a guard badge reads from the test-results file, a state of the
    # data rendered by site_hooks/guards.py, and stays allowed)
    (r"\bnot (?:measured|timed) yet\b|\bnot been (?:measured|run|timed) yet\b", "a 'not ... yet' status note"),
    (r"\bhas not been run\b", "a status note about a run"),
    (r"\b(?:published|measured|timed) yet\b|\buntil they are[.,;:]", "a 'yet' status note"),
    (r"\bhas none yet\b", "a status note about missing data"),
    (r"\bno GPU has run\b", "a status note about a GPU run"),
    (r"\b(?:this|the) (?:page|site) has no \w+(?: \w+)? yet\b", "a status note about the page"),
    (r"\bfull run of\b", "a run-status box typed as a sentence"),
    (r"\bsmoke-run numbers, to be replaced\b", "a run-status note typed as a sentence"),
    # a count of one with a plural noun: "1 threads", "1 rounds"; decimals ("1.5 rounds") and ranges
    # ("0-1 steps", "1/2 bits") are not counts of one, nor is a 1 that ends one table cell before a path
    # ("n_groups=1" beside "models/falcon_h1/...") 
    (r"(?<![\d.,/\-\u2013])\b1 (?:thread|round|seed|core|step|minute|second|row|claim|warp|block|element|"
     r"byte|time|layer|head|token|machine|configuration|page|screen|kernel|rank|process|sample|test|item|"
     r"entry|value|model|file|repetition|epoch|batch|iteration|norm|checkpoint)(?:s|es)\b(?!/)",
     "a count of one with a plural noun"),
]


def article_text(page_html: str) -> str:
    """The visible words of a page's article: scripts, styles and tags removed, entities decoded."""
    m = re.search(r"<article\b[^>]*>(.*?)</article>", page_html, re.S)
    art = m.group(1) if m else page_html
    art = re.sub(r"<(script|style)\b.*?</\1>", " ", art, flags=re.S | re.I)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", art)).split())


def status_notes(text: str) -> list[str]:
    out = []
    for pattern, why in FORBIDDEN:
        for m in re.finditer(pattern, text, re.I):
            out.append(f"{why}: ...{text[max(0, m.start() - 60):m.end() + 40]}...")
    return out


@pytest.fixture(scope="module")
def built_site(request) -> Path:
    return private_or_built_site(request)


def test_no_page_has_status_notes_or_bad_plurals(built_site):
    problems, read = [], 0
    for path in PAGES:
        f = built_site / path / "index.html"
        assert f.is_file(), f"{f} is missing from the built site"
        text = article_text(f.read_text(encoding="utf-8"))
        read += len(text)
        problems += [f"{path or 'home'}: {p}" for p in status_notes(text)]
    assert read > 10_000 * len(PAGES) // 10, "the built pages hold almost no article text (the probe is broken)"
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("bad", [
    "No GPU has run these kernels yet: the GPU tests show as skipped.",
    "speed needs a GPU run, and this page has none yet.",
    "The device sweep has not been run for this site yet.",
    "C14 partly true, not yet measured on a GPU.",
    "the fallback cost is not measured yet.",
    "No GPU timings of this site's kernels are published yet. Until they are, here is",
    "Measured Full run of python -m x.",
    "Measured on AMD EPYC with 1 threads, load average 2.92.",
    "3 seeds, 1 rounds per configuration.",
])
def test_probe_refuses_each_phrasing(bad):
    assert status_notes(bad), f"not refused: {bad!r}"


@pytest.mark.parametrize("good", [
    "Measured on AMD EPYC with 1 thread and 2 cores.", "1.5 rounds on average", "0-1 steps",
    "needs a GPU", "11 threads", "21 rounds", "6 passed; 1 runs after the build",
    "built with norm_before_gate=False, n_groups=1 models/falcon_h1/modeling_falcon_h1.py",
])
def test_probe_accepts_state_badges_and_correct_counts(good):
    assert not status_notes(good), status_notes(good)


def test_article_text_drops_markup():
    assert article_text('<nav>1 threads</nav><article><p>a <b>b</b></p><script>1 threads</script></article>') == "a b"


# -- the hooks that render states instead of sentences ---------------------------------------------------------

def test_plural_and_count_say_one_thread_and_two_threads():
    from site_hooks.macros import MacroError
    from site_hooks.wording import plural

    assert [plural(1, "thread"), plural(2, "thread"), plural(0, "round")] == ["1 thread", "2 threads", "0 rounds"]
    assert plural(1, "batch", "batches") == "1 batch" and plural(4, "batch", "batches") == "4 batches"
    for bad in ("2", None, True):
        with pytest.raises(MacroError, match="is not a count"):
            plural(bad, "thread")


def test_run_record_is_read_from_the_provenance(monkeypatch):
    from site_hooks import wording
    from site_hooks.macros import PageContext

    prov = {"command": "python -m x", "quick": False, "date": "2026-12-03T19:11:20+00:00", "duration_s": 833.7,
            "load_avg": [2.92], "load_avg_end": [2.95], "machine": {"cpu": "AMD EPYC", "cores": 2, "torch_threads": 1}}
    files = {"full.json": {"provenance": prov}, "quick.json": {"provenance": dict(prov, quick=True)}}
    monkeypatch.setattr("site_hooks.data.load", lambda name: files[name])
    ctx = PageContext("x.md")
    full = wording.run_record(ctx, "full.json")
    assert "measured" in full and "1 PyTorch thread " in full.replace("·", " ") and "2 cores" in full
    assert "13.9 min" in full and "2026-12-03" in full and "load 2.92 to 2.95" in full
    assert "smoke run" in wording.run_record(ctx, "quick.json") and "smoke run" not in full
    assert not status_notes(article_text(f"<article>{full}</article>"))


def test_data_state_shows_a_badge_for_a_missing_file():
    from site_hooks import wording
    from site_hooks.macros import PageContext

    out = wording.data_state(PageContext("x.md"), "no_such_gpu_run.json", "a GPU", "scripts/gpu_check.sh")
    assert "needs a GPU" in out and "docs/data/no_such_gpu_run.json" in out and "scripts/gpu_check.sh" in out
    assert not status_notes(article_text(f"<article>{out}</article>"))
