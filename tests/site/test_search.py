"""The built site's search, typed into the search box of a real browser: for eleven queries a reader would
type, the first result is the page that answers them, and no result snippet shows raw TeX (formulas reach
the index as plain text, ``site_hooks/searchtext.py``)."""
from __future__ import annotations

import re
from urllib.parse import urlparse

import pytest

from tests.site.test_reading import reading_site, reading_url  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.site, pytest.mark.guards("site.search")]

# query -> the page (site path) its first result must be on
QUERIES = {
    "qk norm": "placements/",
    "gemma eps": "numerics/",
    "rsqrt": "rsqrt/",
    "batchnorm": "history/",
    "centring": "training/",
    "triton": "kernels/triton/",
    "sequence parallel": "distributed/",
    "tensor parallel": "distributed/",
    "claims": "claims/",
    "jacobian": "gradients/",
    "float16 overflow": "numerics/",
}
RAW_TEX = re.compile(r"\\frac|\\sqrt|\$\$|\\\(|\\\)|\\\[|\\\]|\\begin|\\operatorname|\\mathrm")


@pytest.fixture(scope="module")
def search(browser, reading_url):
    """Types a query into the search box of the home page; returns [(result path, snippet text)], best first."""
    site_url = reading_url  # NORMLAB_READING_SITE, else the built site
    context = browser.new_context(color_scheme="light", viewport={"width": 1280, "height": 900})
    page = context.new_page()

    def run(query: str) -> list[tuple[str, str]]:
        page.goto(site_url, wait_until="load")
        page.wait_for_load_state("networkidle")
        page.keyboard.press("s")  # Material's shortcut that opens the search box
        box = page.locator("input.md-search__input")
        box.fill("")
        box.press_sequentially(query, delay=20)  # key by key: the search reacts to key events
        page.wait_for_selector(".md-search-result__item a", timeout=15000)
        page.wait_for_function(
            "q => document.querySelector('.md-search-result__meta') && "
            "document.querySelector('input.md-search__input').value === q", arg=query, timeout=15000)
        page.wait_for_timeout(400)  # the worker answers each key; let the last answer land
        items = page.eval_on_selector_all(
            ".md-search-result__item > a",
            "els => els.map(a => [a.href, a.innerText])")
        base = urlparse(site_url).path
        return [(urlparse(h).path.removeprefix(base), text) for h, text in items]

    yield run
    context.close()


@pytest.mark.parametrize("query, want", QUERIES.items(), ids=list(QUERIES))
def test_first_result_is_the_page_that_answers(search, query, want):
    results = search(query)
    assert results, f"no result for {query!r}"
    first = results[0][0].split("#")[0]
    assert first == want, f"{query!r}: first result on {first!r}, want {want!r}; all: {[r[0] for r in results]}"


@pytest.mark.parametrize("query", ["eps", "variance", "gradient", "rms", "sqrt"])
def test_snippets_show_no_tex(search, query):
    results = search(query)
    assert results, f"no result for {query!r}"
    bad = [(path, text[:160]) for path, text in results if RAW_TEX.search(text)]
    assert not bad, f"raw TeX in the snippets for {query!r}: {bad}"
