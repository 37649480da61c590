"""Data plots a reader can read: on a 360-px phone and on a 1280-px laptop, light and dark, every piece of text
in every plot is drawn at 11 px or more, and the variant shown matches the palette.

Plots are SVG images whose text is kept as text (reference_impl/studies/plotstyle.py), so the size on screen
is the font size in the file times the ratio of the image's width on screen to the SVG's own width. The
browser visits the pages whose HTML names a plot (every page, if a script of the site could add one).
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tests.site.test_browser import PAGES, Watcher, set_dark
from tests.site.test_reading import reading_site, reading_url  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.site, pytest.mark.guards("site.plots")]

MIN_PX = 11.0
WIDTHS = {"phone": {"width": 360, "height": 800}, "laptop": {"width": 1280, "height": 800}}
SVG_NS = "{http://www.w3.org/2000/svg}"
FONT = re.compile(r"font(?:-size)?:\s*([\d.]+)px")


def svg_text_sizes(path: Path) -> tuple[float, list[tuple[float, str]]]:
    """(the SVG's own width in user units, [(font size in user units, text)]) for every <text> element."""
    root = ET.parse(path).getroot()
    view = root.get("viewBox")
    width = float(view.split()[2]) if view else float(re.match(r"[\d.]+", root.get("width")).group())
    sizes = []
    for el in root.iter(f"{SVG_NS}text"):
        text = "".join(el.itertext()).strip()
        scale = re.search(r"scale\(([\d.]+)", el.get("transform", ""))
        factor = float(scale.group(1)) if scale else 1.0
        # matplotlib writes a label's size on the <text>, or on each <tspan> of a label set in mathtext
        if el.get("font-size"):  # the site's own SVG writer sets an attribute
            sizes.append((float(re.match(r"[\d.]+", el.get("font-size")).group()) * factor, text))
            continue
        parts = [el] if FONT.search(el.get("style", "")) else list(el.iter(f"{SVG_NS}tspan"))
        found = [FONT.search(p.get("style", "")) for p in parts]
        if not parts or not all(found):
            raise AssertionError(f"{path.name}: the text {text!r} has no font size")
        sizes += [(float(m.group(1)) * factor, text) for m in found]
    return width, sizes


def smallest_text_px(page, site_dir: Path) -> list[tuple[str, float, str]]:
    """For every plot visible on the page: (file, smallest text in CSS px, that text)."""
    shown = page.evaluate("""() => [...document.querySelectorAll('img')]
        .filter(i => i.src.includes('/data/plots/') && i.checkVisibility({checkVisibilityCSS: true}))
        .map(i => ({src: i.currentSrc || i.src, w: i.getBoundingClientRect().width}))""")
    out = []
    for img in shown:
        path = site_dir / urlparse(img["src"]).path.lstrip("/")
        width, sizes = svg_text_sizes(path)
        assert sizes, f"{path.name}: no text elements (text drawn as outlines cannot be measured or read)"
        size, text = min(sizes)
        out.append((path.name, size * img["w"] / width, text))
    return out


PLOT_PAGES = [p for p in PAGES if p not in ("", "api/")]


def pages_with_plots(site_dir: Path) -> list[str]:
    """The pages of PLOT_PAGES whose built HTML names a file under plots/ (in an image, a picture source or an
    inline script's data). A script file of the site that mentions plots could add one to any page: then
    every page counts."""
    if any("plots" in js.read_text(encoding="utf-8", errors="replace") for js in site_dir.rglob("*.js")):
        return PLOT_PAGES
    return [p for p in PLOT_PAGES if "plots/" in (site_dir / p / "index.html").read_text(encoding="utf-8")]


@pytest.mark.parametrize("width", list(WIDTHS))
def test_plot_text_is_at_least_11_px(browser, reading_url, reading_site, width):
    site_url, site_dir = reading_url, reading_site  # NORMLAB_READING_SITE, else the built site
    context = browser.new_context(viewport=WIDTHS[width])
    problems, measured = [], 0
    try:
        for path in pages_with_plots(site_dir):
            page = context.new_page()
            watch = Watcher(context, page)
            page.goto(site_url + path, wait_until="load")
            page.wait_for_load_state("networkidle")
            page.evaluate("() => document.querySelectorAll('details').forEach(d => { d.open = true; })")
            for dark in (False, True):
                set_dark(page, dark)
                for name, px, text in smallest_text_px(page, site_dir):
                    measured += 1
                    if dark != name.endswith("-dark.svg"):
                        problems.append(f"{path}: {name} shown in the {'dark' if dark else 'light'} palette")
                    if px < MIN_PX:
                        problems.append(f"{path} at {WIDTHS[width]['width']} px: {name} draws {text!r} at {px:.1f} px")
            context.unroute("**/*")
            page.close()
            assert not watch.errors, watch.errors
    finally:
        context.close()
    assert measured >= 10, f"only {measured} plots measured (the probe is broken)"
    assert not problems, "\n".join(problems)


def test_the_measure_reads_font_sizes(tmp_path):
    """The parser is not vacuous: a small font in a wide SVG comes out small."""
    svg = tmp_path / "p.svg"
    svg.write_text('<svg xmlns="http://www.w3.org/2000/svg" width="720pt" viewBox="0 0 720 300">'
                   '<text style="font: 8px \'DejaVu Sans\'">tick</text>'
                   '<text style="font: 12px \'DejaVu Sans\'" transform="translate(1 2) scale(0.5 -0.5)">x</text>'
                   '<text font-size="20" x="1" y="2">label</text></svg>')
    width, sizes = svg_text_sizes(svg)
    assert width == 720 and sorted(sizes) == [(6.0, "x"), (8.0, "tick"), (20.0, "label")]
