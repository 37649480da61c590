"""What a page costs a reader on a phone: JavaScript bytes, and how soon formulas appear.

Formulas are drawn when the site is built (site_hooks/mathsvg.py), so a page ships no math script at all and
the first paint already shows them. These tests measure that in Chromium rather than trusting it:

- every page loads less than 1 MB of JavaScript, and no page loads a MathJax script;
- with the CPU slowed four-fold (Chrome DevTools' preset for a mid-range phone) and a 375 px window, every
  formula on the formula-heaviest pages is already an SVG when the document has been parsed (raw TeX is never
  visible), and the first paint, which therefore shows the formulas, comes within 1 s. The paint time is the
  fastest of three loads: the two shared cores add noise to a load, never take cost away.
"""
from __future__ import annotations

import pytest

from tests.site.test_browser import PAGES, VIEWPORTS, Watcher

pytestmark = [pytest.mark.site, pytest.mark.guards("site.weight")]

MAX_JS_BYTES = 1_000_000
FIRST_PAINT_S = 1.0
CPU_SLOWDOWN = 4
HEAVY_PAGES = ["gradients/", "formulas/", "start/"]


def _js_bytes(page) -> list[dict]:
    return page.evaluate("""() => performance.getEntriesByType('resource')
        .filter(e => e.initiatorType === 'script' || e.name.endsWith('.js'))
        .map(e => ({url: e.name, bytes: e.encodedBodySize || e.transferSize || 0}))""")


def test_pages_ship_under_1_mb_of_javascript_and_no_math_script(browser, site_url):
    context = browser.new_context(viewport=VIEWPORTS["phone"])
    report = []
    try:
        for path in PAGES:
            page = context.new_page()
            watch = Watcher(context, page)
            page.goto(site_url + path, wait_until="load")
            page.wait_for_load_state("networkidle")
            scripts = _js_bytes(page)
            total = sum(s["bytes"] for s in scripts)
            math = [s["url"] for s in scripts if "mathjax" in s["url"].lower()]
            assert total > 0, f"{path or 'home'}: no script measured (the probe is broken)"
            if total >= MAX_JS_BYTES:
                report.append(f"{path or 'home'}: {total} bytes of JavaScript")
            if math:
                report.append(f"{path or 'home'}: loads a math script {math}")
            assert not watch.errors, watch.errors
            context.unroute("**/*")
            page.close()
    finally:
        context.close()
    assert not report, "\n".join(report)


@pytest.mark.parametrize("path", HEAVY_PAGES)
def test_formulas_are_drawn_at_first_paint_on_a_slow_phone(browser, site_url, path):
    paints = []
    for _ in range(3):
        context = browser.new_context(viewport=VIEWPORTS["phone"], is_mobile=True, has_touch=True)
        page = context.new_page()
        try:
            cdp = context.new_cdp_session(page)
            cdp.send("Emulation.setCPUThrottlingRate", {"rate": CPU_SLOWDOWN})
            page.goto(site_url + path, wait_until="domcontentloaded")
            at_dom = page.evaluate(r"""() => {
                const blocks = [...document.querySelectorAll('.arithmatex')];
                const raw = blocks.filter(b => !b.querySelector('mjx-container > svg'))
                                  .map(b => b.textContent.slice(0, 60));
                return {count: blocks.length, raw};
            }""")
            page.wait_for_load_state("load")
            page.wait_for_function("() => performance.getEntriesByName('first-contentful-paint').length > 0",
                                   timeout=10000)
            paints.append(page.evaluate("() => performance.getEntriesByName('first-contentful-paint')[0].startTime"))
        finally:
            page.close()
            context.close()
    fcp_ms = min(paints)
    assert at_dom["count"] >= 5, f"{path}: only {at_dom['count']} formulas found (the probe is broken)"
    assert at_dom["raw"] == [], f"{path}: formulas still TeX when the document was parsed: {at_dom['raw'][:3]}"
    assert fcp_ms / 1000 <= FIRST_PAINT_S, (
        f"{path}: first paint at {fcp_ms:.0f} ms at best of {[round(p) for p in paints]} with the CPU slowed "
        f"{CPU_SLOWDOWN}x (limit {FIRST_PAINT_S} s)")
