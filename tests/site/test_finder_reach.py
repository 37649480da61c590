"""The model finder from everywhere, in a real browser at a phone's and a laptop's size.

- Home links to "Find your model" on its first screen, on a laptop (1280x800) and on a phone (375x812).
- The finder's input box is on the first screen of its page at both sizes, so a reader can type at once.
- It takes what a reader types: a model type, a family name, a norm class, a checkpoint's repository id or
  its name alone, and parts of them, whatever the case and the separators ("qwen3-8b", "Qwen3 8B",
  "gemma 4"), at both sizes, and the first result opens that card.

Expected names are checked against docs/data/census.json and docs/data/checkpoints.json, never assumed.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.site.test_reading import reading_site, reading_url  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.site, pytest.mark.guards("census.models_page")]

REPO = Path(__file__).resolve().parents[2]
SIZES = {"phone": {"width": 375, "height": 812}, "laptop": {"width": 1280, "height": 800}}

# what a reader types -> the card the first result must be
QUERIES = {
    "Qwen3-8B": "Qwen/Qwen3-8B",              # the checkpoint's name without its organisation
    "qwen3-8b": "Qwen/Qwen3-8B",
    "Qwen3 8B": "Qwen/Qwen3-8B",              # a space where the name has a hyphen
    "Qwen/Qwen3-8B": "Qwen/Qwen3-8B",
    "gemma 4": "gemma4_text",                 # the family name "Gemma 4" (the multimodal one is gemma4)
    "Gemma 3": "gemma3_text",
    "qwen3_next": "qwen3_next",               # a model type
    "qwen3 next": "qwen3_next",
    "Qwen3NextRMSNormGated": "qwen3_next",    # a norm class
    "qwen3-next-80b": "Qwen/Qwen3-Next-80B-A3B-Instruct",  # part of a checkpoint's name
    "llama 3.1 8b": "meta-llama/Meta-Llama-3.1-8B",        # part of a name, with a dot, any case
}


@pytest.fixture(scope="module")
def known() -> set[str]:
    census = json.loads((REPO / "docs" / "data" / "census.json").read_text())
    ckpts = json.loads((REPO / "docs" / "data" / "checkpoints.json").read_text())
    return {m["model_type"] for m in census["models"]} | {c["repo"] for c in ckpts["checkpoints"]}


@pytest.fixture(scope="module", params=list(SIZES))
def at_size(request, browser):
    context = browser.new_context(viewport=SIZES[request.param], color_scheme="light")
    yield request.param, context
    context.close()


def _visible_on_first_screen(page, selector: str) -> dict:
    return page.eval_on_selector(selector, """e => { window.scrollTo(0, 0); const r = e.getBoundingClientRect();
        return {top: r.top, bottom: r.bottom, height: window.innerHeight, shown: e.checkVisibility()}; }""")


def test_home_links_to_the_finder_on_its_first_screen(at_size, reading_url):
    size, context = at_size
    page = context.new_page()
    page.goto(reading_url, wait_until="load")
    links = page.eval_on_selector_all(
        "article a[href]", """as => as.filter(a => a.getAttribute('href').replace(/^\\.\\//, '').startsWith('models/'))
            .map(a => { const r = a.getBoundingClientRect();
                        return {text: a.textContent.trim(), top: r.top, bottom: r.bottom, shown: a.checkVisibility()}; })""")
    height = page.evaluate("window.innerHeight")
    first = [a for a in links if a["shown"] and a["bottom"] <= height]
    assert first, f"{size}: no link to Find your model on Home's first screen ({height} px): {links}"
    page.close()


def test_the_finder_input_is_on_the_first_screen_of_its_page(at_size, reading_url):
    size, context = at_size
    page = context.new_page()
    page.goto(reading_url + "models/")
    page.wait_for_selector('#model-finder[data-ready="true"]', timeout=15000)
    box = _visible_on_first_screen(page, "#mf-q-a")
    assert box["shown"] and box["bottom"] <= box["height"], f"{size}: the finder's input box is at {box}"
    page.close()


@pytest.mark.parametrize("query", list(QUERIES))
def test_the_finder_takes_what_a_reader_types(at_size, reading_url, known, query):
    size, context = at_size
    want = QUERIES[query]
    assert want in known, f"{want!r} is neither a model type of the census nor a recorded checkpoint"
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(reading_url + "models/")
    page.wait_for_selector('#model-finder[data-ready="true"]', timeout=15000)
    box = page.locator("#mf-q-a")
    box.press_sequentially(query, delay=10)
    page.wait_for_selector('.mf-picker[data-slot="a"] .mf-result, .mf-picker[data-slot="a"] .mf-none', timeout=5000)
    found = page.eval_on_selector_all('.mf-picker[data-slot="a"] .mf-result', "bs => bs.map(b => b.dataset.model)")
    assert found, f"{size}: {query!r} finds nothing"
    assert found[0] == want, f"{size}: {query!r} finds {found[0]!r} first, want {want!r} (all: {found})"
    box.press("Enter")
    page.wait_for_selector(f'.mf-card[data-slot="a"][data-model="{want}"]', timeout=5000)
    assert not errors, errors
    page.close()
