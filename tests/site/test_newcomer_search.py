"""What newcomers type into the site's search box, and where the first result must take them.

The same real search as ``tests/site/test_search.py`` (Material's lunr search in Chromium, typed key by key
into the home page's search box). Each result of Material's search is a page with its best sections under
it: the first result's page must be the expected page, and where a section is expected, the first section
under it must be that section (its link is what a reader clicks).

What a newcomer wants, decided here:

- "check my kernel", "check": the kit's page, which checks a kernel, a module or an engine's op against a
  model; the kernels pages explain how kernels are written, not how to check one.
- "1 + w", "1 + weight": the section of the catalog that explains the offset gain (Gemma's and Qwen3-Next's
  ``1 + w``), not a function signature that happens to hold a 1 and a weight.
- "gemma 4", "qwen3 next": a model's name asks what that model does, so the first result is that model's
  card on "Find your model" (its address opens the card). For Qwen3-Next the card lists both its norm
  classes (the ``1 + w`` RMSNorm of its layers and the gated norm inside its linear attention) and links
  each to its catalog entry; the gated-norm page shows one of them, so it comes after the card.
- "install", "pip install": an Install section (the same commands on Home, the kit's page and the API page).
"""
from __future__ import annotations

from urllib.parse import urlparse

import pytest

from tests.site.test_reading import reading_site, reading_url  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.site, pytest.mark.guards("site.search")]

# query -> (page of the first result, its first section or None, the sections that count when several do)
NEWCOMER_QUERIES = {
    "check my kernel": ("check/", None),
    "check": ("check/", None),
    "1 + weight": ("norms/", ("norms/#the-1-w-gain",)),
    "1 + w": ("norms/", ("norms/#the-1-w-gain",)),
    # gemma4 is Gemma 4 as released (the multimodal checkpoints); gemma4_text is its text decoder: both cards
    "gemma 4": ("models/", ("models/#model=gemma4", "models/#model=gemma4_text")),
    "qwen3 next": ("models/", ("models/#model=qwen3_next",)),
    "install": (None, ("#install", "check/#install", "api/#install")),
    "pip install": (None, ("#install", "check/#install", "api/#install")),
}


@pytest.fixture(scope="module")
def search(browser, reading_url):
    """Types a query into the home page's search box; returns the links of the results, best first, as site
    paths with their section (``norms/#the-1-w-gain``; Material's ``?h=`` highlight left out)."""
    context = browser.new_context(color_scheme="light", viewport={"width": 1280, "height": 900})
    page = context.new_page()
    base = urlparse(reading_url).path

    def run(query: str) -> list[str]:
        page.goto(reading_url, wait_until="load")
        page.wait_for_load_state("networkidle")
        page.keyboard.press("s")  # Material's shortcut that opens the search box
        box = page.locator("input.md-search__input")
        box.fill("")
        box.press_sequentially(query, delay=20)
        page.wait_for_selector(".md-search-result__item a", timeout=15000)
        page.wait_for_function(
            "q => document.querySelector('.md-search-result__meta') && "
            "document.querySelector('input.md-search__input').value === q", arg=query, timeout=15000)
        page.wait_for_timeout(400)  # the worker answers each key; let the last answer land
        hrefs = page.eval_on_selector_all(".md-search-result__item > a", "els => els.map(a => a.href)")
        out = []
        for h in hrefs:
            u = urlparse(h)
            out.append(u.path.removeprefix(base) + (f"#{u.fragment}" if u.fragment else ""))
        return out

    yield run
    context.close()


@pytest.mark.parametrize("query", list(NEWCOMER_QUERIES))
def test_a_newcomer_query_lands_on_its_page(search, query):
    page, sections = NEWCOMER_QUERIES[query]
    links = search(query)
    assert links, f"no result for {query!r}"
    first_page = links[0].split("#")[0]
    if page is not None:
        assert first_page == page, f"{query!r}: first result on {first_page!r}, want {page!r}; all: {links}"
    if sections is not None:
        # the first result's links: the page itself, then its sections, best first
        own = [p for p in links if p.split("#")[0] == first_page]
        best = next((p for p in own if "#" in p), None)
        assert best in sections, f"{query!r}: first section {best!r}, want one of {sections}; all: {links}"


def test_a_card_entry_opens_its_card(search, browser, reading_url):
    """The entry the search offers for "qwen3 next" is an address that opens the Qwen3-Next card."""
    links = search("qwen3 next")
    target = next(p for p in links if p.startswith("models/#model="))
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        page.goto(reading_url + target)
        page.wait_for_selector('.mf-card[data-slot="a"][data-model="qwen3_next"]', timeout=15000)
        assert page.locator('.mf-card[data-slot="a"]').is_visible()
    finally:
        context.close()
