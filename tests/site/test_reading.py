"""What a reader meets on every page, measured in a real browser (Chromium driven by Playwright).

- First screen: at 1280x800 every page shows, within its first screen, a picture (a diagram or a data plot,
  not an icon, a badge or a formula) or a one-screen answer (an admonition of the ``tldr`` type).
- Length: the reading line of a page, at 1280 px with every collapsed block closed, is at most
  ``MAX_SCREENS`` laptop screens (document height / 800 px).
- Phone first (375x812, the screen most readers meet first): every page shows a picture or a one-screen
  answer on its first phone screen, and its reading line with every collapsed block closed is at most
  ``MAX_PHONE_SCREENS`` phone screens. No picture file serves as decoration on more than
  ``MAX_PAGES_PER_PICTURE`` pages: a picture explains one idea, so it belongs to the page of that idea and
  maybe one page that builds on it; beyond two the reader sees the same image as wallpaper.
- Phone and tablet (375 and 768 px), light and dark: nothing in the article reaches past the screen's edge
  unless it sits in a box that scrolls sideways, and every box that does scroll sideways shows a cue (the
  scrolling shadows of extra.css); at phone width a table is drawn as cards and is no wider than the screen.
- Plots: on the Performance page the legend of every plot sits above or beside its data (not under a tall
  figure), and in every dark plot the error bars and other line collections contrast with the dark page.

The site is the one ``site_dir`` gives (built by tests/site/test_build.py in ``make test``); while editing
pages, ``NORMLAB_READING_SITE=/tmp/some_site`` points these tests at a private build instead.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.site.conftest import private_or_built_site
from tests.site.test_browser import PAGES, Watcher, set_dark

pytestmark = [pytest.mark.site]

SCREEN = {"width": 1280, "height": 800}
MAX_SCREENS = 10.0
MIN_VISIBLE_PX = 100      # a picture counts when at least this much of it is on the first screen
NARROW = {"phone": {"width": 375, "height": 740}, "tablet": {"width": 768, "height": 1024}}
PHONE = {"width": 375, "height": 812}
MAX_PHONE_SCREENS = 12.0
MAX_PAGES_PER_PICTURE = 2
# Pages still longer than MAX_PHONE_SCREENS on a phone: (length when listed, why it is still long). Same rule
# as STILL_LONG: the list is to shrink; a listed page that comes under the limit, or grows, fails.
PHONE_STILL_LONG: dict[str, tuple[float, str]] = {}
# Pages whose reading line is still longer than MAX_SCREENS, with the length measured when they were listed.
# The list is to shrink, never to grow: a listed page that has come under the limit fails the test until it
# is taken off.
STILL_LONG: dict[str, float] = {}
# Pages that still show neither a picture nor a marked answer on their first screen (same rule: to shrink).
NO_PICTURE_YET: set[str] = set()


@pytest.fixture(scope="module")
def reading_site(request) -> Path:
    return private_or_built_site(request)


@pytest.fixture(scope="module")
def reading_url(reading_site):
    import functools
    import http.server
    import threading

    from tests.site.conftest import _QuietHandler

    handler = functools.partial(_QuietHandler, directory=str(reading_site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def view(browser):
    """One light-palette context per width, shared by the tests of this module."""
    made: dict = {}

    def get(name: str):
        if name not in made:
            size = {"laptop": SCREEN, "phone-first": PHONE}.get(name) or NARROW[name]
            made[name] = browser.new_context(color_scheme="light", viewport=size)
        return made[name]

    yield get
    for c in made.values():
        c.close()


def _open(context, url: str):
    page = context.new_page()
    watch = Watcher(context, page)
    page.goto(url, wait_until="load")
    page.wait_for_load_state("networkidle")
    return page, watch


def _close(context, page):
    context.unroute("**/*")
    page.close()


# -- probes run in the page ------------------------------------------------------------------------------------

# Pictures and one-screen answers in the article, with their place on the page (scrolled to the top).
FIRST_SCREEN_JS = """() => {
    window.scrollTo(0, 0);
    const art = document.querySelector('article') || document.body;
    const out = [];
    for (const e of art.querySelectorAll('img, svg, .admonition.tldr, details.tldr')) {
        const tag = e.tagName.toLowerCase();
        if (tag === 'svg' && (e.closest('mjx-container') || e.parentElement.closest('svg')
                              || e.closest('.twemoji, .md-icon, button, summary, .headerlink, a.badge'))) continue;
        if (!e.checkVisibility({checkVisibilityCSS: true})) continue;
        const r = e.getBoundingClientRect();
        const answer = e.classList.contains('tldr');
        // icons, badges and inline formulas are small; a diagram or a plot is not
        if (!answer && (r.width < 160 || r.height < 100)) continue;
        out.push({kind: answer ? 'answer' : tag, top: r.top + window.scrollY, height: r.height,
                  what: answer ? (e.querySelector('.admonition-title, summary') || e).textContent.trim().slice(0, 60)
                               : (e.getAttribute('alt') || e.getAttribute('src') || e.id || tag).slice(0, 60)});
    }
    return {items: out, screen: window.innerHeight};
}"""

# height of what a reader scrolls through with every collapsed block closed (as the page opens)
LENGTH_JS = """() => {
    document.querySelectorAll('details[open]').forEach(d => { d.open = false; });
    return document.scrollingElement.scrollHeight;
}"""

# things that reach past the screen's edge outside a scrolling box; boxes that scroll without a cue;
# tables wider than the screen
NARROW_JS = r"""(wantCards) => {
    const W = document.documentElement.clientWidth;
    const art = document.querySelector('article') || document.body;
    const name = e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') +
                      (typeof e.className === 'string' && e.className ? '.' + e.className.split(' ')[0] : '');
    const scrolls = cs => cs.overflowX === 'auto' || cs.overflowX === 'scroll';
    const cue = cs => /gradient/.test(cs.backgroundImage) && /local/.test(cs.backgroundAttachment);
    const outside = [], uncued = [], wideTables = [];
    for (const e of art.querySelectorAll('*')) {
        const r = e.getBoundingClientRect();
        if (r.width === 0 || r.height === 0) continue;
        const cs = getComputedStyle(e);
        if (scrolls(cs) && e.scrollWidth > e.clientWidth + 1 && uncued.length < 5) {
            // the cue is the box's own background: a child that paints an opaque background would hide it
            const hidden = [...e.children].find(k => !/^(transparent|rgba\(.*,\s*0\))$/.test(getComputedStyle(k).backgroundColor));
            if (!cue(cs))
                uncued.push(`${name(e)} (${e.scrollWidth} px of content in ${e.clientWidth} px)`);
            else if (hidden)
                uncued.push(`${name(e)} (its cue is painted over by ${name(hidden)})`);
        }
        if (r.right <= W + 1 && r.left >= -1) continue;
        let boxed = false;   // some box around it scrolls or clips within the screen
        for (let p = e.parentElement; p && p !== art.parentElement; p = p.parentElement) {
            const o = getComputedStyle(p).overflowX;
            const pr = p.getBoundingClientRect();
            if (o !== 'visible' && pr.right <= W + 1 && pr.left >= -1) { boxed = true; break; }
        }
        if (!boxed && outside.length < 5)
            outside.push(`${name(e)} spans ${Math.round(r.left)}..${Math.round(r.right)} px`);
    }
    if (wantCards) {
        for (const t of art.querySelectorAll('table')) {
            const r = t.getBoundingClientRect();
            if (r.width > W + 1 && wideTables.length < 5)
                wideTables.push(`a table ${Math.round(r.width)} px wide (${t.rows.length} rows)`);
        }
    }
    return {outside, uncued, wideTables};
}"""


def _label(path: str) -> str:
    return path or "home"


def first_screen_items(context, url: str) -> tuple[list[dict], list[dict], int]:
    """(items on the first screen, the first item further down if none is, the screen's height)."""
    page, _ = _open(context, url)
    try:
        found = page.evaluate(FIRST_SCREEN_JS)
    finally:
        _close(context, page)
    screen = found["screen"]
    first = [i for i in found["items"] if i["top"] <= screen - min(MIN_VISIBLE_PX, i["height"])
             and (i["kind"] != "answer" or i["height"] <= screen)]
    return first, sorted(found["items"], key=lambda i: i["top"])[:1], screen


@pytest.mark.parametrize("path", PAGES, ids=_label)
def test_first_phone_screen_shows_a_picture_or_an_answer(view, reading_url, path):
    first, later, screen = first_screen_items(view("phone-first"), reading_url + path)
    assert first, (f"{_label(path)}: no picture or one-screen answer on the first phone screen ({PHONE['width']}x"
                   f"{screen} px); the first is " + (f"{later[0]['kind']} {later[0]['what']!r} at "
                                                     f"{later[0]['top'] / screen:.1f} screens" if later else "none on the page"))


@pytest.mark.parametrize("path", PAGES, ids=_label)
def test_first_screen_shows_a_picture_or_an_answer(view, reading_url, path):
    first, later, screen = first_screen_items(view("laptop"), reading_url + path)
    if path in NO_PICTURE_YET:
        assert not first, f"{_label(path)} now shows {first[0]['what']!r} on its first screen: take it off NO_PICTURE_YET"
        return
    assert first, (f"{_label(path)}: no picture or one-screen answer on the first {screen} px; the first is "
                   + (f"{later[0]['kind']} {later[0]['what']!r} at {later[0]['top'] / screen:.1f} screens"
                      if later else "none on the page"))


def page_screens(context, url: str, height: int = SCREEN["height"]) -> float:
    page, _ = _open(context, url)
    try:
        return page.evaluate(LENGTH_JS) / height
    finally:
        _close(context, page)


@pytest.mark.parametrize("path", PAGES, ids=_label)
def test_phone_reading_line_is_at_most_twelve_screens(view, reading_url, path):
    screens = page_screens(view("phone-first"), reading_url + path, PHONE["height"])
    if path in PHONE_STILL_LONG:
        listed, why = PHONE_STILL_LONG[path]
        assert screens > MAX_PHONE_SCREENS, (f"{path} is now {screens:.1f} phone screens, within the limit: take it "
                                             "off PHONE_STILL_LONG")
        assert screens <= listed + 0.5, f"{path} grew from {listed} to {screens:.1f} phone screens ({why})"
        return
    assert screens <= MAX_PHONE_SCREENS, (f"{_label(path)} is {screens:.1f} phone screens long ({PHONE['width']}x"
                                          f"{PHONE['height']}, folds closed; at most {MAX_PHONE_SCREENS}): fold "
                                          "detail into ??? blocks or move it to a page of its own")


def decorative_reuse(site: Path, pages: list[str]) -> dict[str, list[str]]:
    """Picture files (site-relative) shown in the articles of more than ``MAX_PAGES_PER_PICTURE`` pages, with
    those pages. A light/dark pair counts as one picture (the dark twin is the same drawing). The home page is
    not counted: it previews the pages it leads to, and the picture it shows is theirs (the sphere of
    Invariances and the Playground), not a third use of it."""
    seen: dict[str, set[str]] = {}
    for path in pages:
        if not path:  # the home page
            continue
        html_text = (site / path / "index.html").read_text(encoding="utf-8")
        article = html_text.split("<article", 1)[-1].split("</article>", 1)[0]
        here = (site / path / "index.html").parent
        for src in re.findall(r'<img[^>]*\bsrc="([^"#?]+)', article):
            if src.startswith(("http:", "https:", "data:")):
                continue
            target = (here / src).resolve()
            try:
                rel = target.relative_to(site.resolve()).as_posix()
            except ValueError:
                continue
            key = re.sub(r"-dark(\.\w+)$", r"\1", rel)
            seen.setdefault(key, set()).add(path or "home")
    return {k: sorted(v) for k, v in seen.items() if len(v) > MAX_PAGES_PER_PICTURE}


def test_no_picture_is_decoration_on_many_pages(reading_site):
    reused = decorative_reuse(reading_site, PAGES)
    assert not reused, "pictures shown on more than {} pages: {}".format(
        MAX_PAGES_PER_PICTURE, "; ".join(f"{k} on {len(v)} ({', '.join(v)})" for k, v in sorted(reused.items())))


def test_reuse_probe_can_fail(tmp_path):
    for n in range(MAX_PAGES_PER_PICTURE + 1):
        (tmp_path / f"p{n}").mkdir()
        (tmp_path / f"p{n}" / "index.html").write_text(
            '<article><img src="../assets/x.svg#only-light"><img src="../assets/x-dark.svg#only-dark"></article>')
    (tmp_path / "assets").mkdir()
    pages = [f"p{n}/" for n in range(MAX_PAGES_PER_PICTURE + 1)]
    assert decorative_reuse(tmp_path, pages) == {"assets/x.svg": [p for p in pages]}
    assert decorative_reuse(tmp_path, pages[:MAX_PAGES_PER_PICTURE]) == {}


@pytest.mark.parametrize("path", PAGES, ids=_label)
def test_reading_line_is_at_most_ten_screens(view, reading_url, path):
    screens = page_screens(view("laptop"), reading_url + path)
    if path in STILL_LONG:
        assert screens > MAX_SCREENS, (f"{path} is now {screens:.1f} screens, within the limit: take it off "
                                       "STILL_LONG")
        assert screens <= STILL_LONG[path] + 0.5, f"{path} grew from {STILL_LONG[path]} to {screens:.1f} screens"
        return
    assert screens <= MAX_SCREENS, (f"{_label(path)} is {screens:.1f} laptop screens long (at most {MAX_SCREENS}): "
                                    "collapse detail into ??? blocks or move it to a page of its own")


def test_listed_pages_exist():
    assert set(STILL_LONG) <= set(PAGES), sorted(set(STILL_LONG) - set(PAGES))
    assert NO_PICTURE_YET <= set(PAGES), sorted(NO_PICTURE_YET - set(PAGES))
    assert set(PHONE_STILL_LONG) <= set(PAGES), sorted(set(PHONE_STILL_LONG) - set(PAGES))
    assert all(why.strip() for _, why in PHONE_STILL_LONG.values()), "every listed page needs its reason"


def narrow_problems(page, where: str, cards: bool) -> list[str]:
    got = page.evaluate(NARROW_JS, cards)
    return ([f"{where}: {x}, past the screen's edge outside a scrolling box" for x in got["outside"]]
            + [f"{where}: {x} scrolls sideways without a visible cue" for x in got["uncued"]]
            + [f"{where}: {x}; tables are cards on a phone" for x in got["wideTables"]])


@pytest.mark.parametrize("width", list(NARROW))
@pytest.mark.parametrize("path", PAGES, ids=_label)
def test_nothing_wider_than_a_phone_without_a_cue(view, reading_url, path, width):
    context = view(width)
    page, watch = _open(context, reading_url + path)
    problems: list[str] = []
    try:
        for scheme in ("light", "dark"):
            set_dark(page, scheme == "dark")
            problems += narrow_problems(page, f"{scheme} at {NARROW[width]['width']} px", width == "phone")
    finally:
        _close(context, page)
    assert not problems, f"{_label(path)}:\n" + "\n".join(dict.fromkeys(problems))


def test_narrow_probe_can_fail(view, reading_url):
    """A wide block outside any scrolling box, a scrolling box without a cue and a table wider than the phone
    are each reported."""
    context = view("phone")
    page, _ = _open(context, reading_url + "formulas/")
    try:
        assert narrow_problems(page, "as built", True) == []
        page.evaluate("""() => {
            const art = document.querySelector('article');
            const wide = document.createElement('div'); wide.style.width = '900px'; wide.textContent = 'x';
            const box = document.createElement('div'); box.style.overflowX = 'auto';
            const inner = document.createElement('div'); inner.style.width = '900px'; inner.textContent = 'y';
            box.appendChild(inner);
            const t = document.createElement('table'); t.setAttribute('style', 'display: table; width: 900px; max-width: none');
            t.insertRow().insertCell().textContent = 'z';
            art.append(wide, box, t);
        }""")
        found = "\n".join(narrow_problems(page, "probe", True))
        assert "past the screen's edge" in found and "without a visible cue" in found and "tables are cards" in found
    finally:
        _close(context, page)


# -- plots ------------------------------------------------------------------------------------------------------

def _luminance(hex_colour: str) -> float:
    h = hex_colour.lstrip("#")
    if len(h) == 3:
        h = "".join(c * 2 for c in h)
    chans = [int(h[i:i + 2], 16) / 255 for i in (0, 2, 4)]
    lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in chans]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(a: str, b: str) -> float:
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def _rgb_to_hex(css: str) -> str:
    nums = [float(v) for v in re.findall(r"[\d.]+", css)[:3]]
    return "#" + "".join(f"{round(v):02x}" for v in nums)


def _plot_images(page, dark: bool) -> list[str]:
    """Site-relative URLs of the data plots the page shows in one palette."""
    suffix = "-dark.svg" if dark else ".svg"
    srcs = page.evaluate("() => [...document.querySelectorAll('article img')].map(i => i.currentSrc || i.src)")
    return [s for s in dict.fromkeys(srcs) if "/data/plots/" in s and s.split("#")[0].endswith(suffix)
            and (dark or not s.split("#")[0].endswith("-dark.svg"))]


# bounding boxes of a matplotlib SVG's legends and axes (ids legend_N, axes_N), in the SVG's own units
SVG_BOXES_JS = """() => {
    const box = g => { const b = g.getBBox(); return {x0: b.x, x1: b.x + b.width, y0: b.y, y1: b.y + b.height}; };
    return {legends: [...document.querySelectorAll('g[id^=legend_]')].map(box),
            axes: [...document.querySelectorAll('g[id^=axes_]')].map(g => {
                const patch = g.querySelector('g[id^=patch_] path');   // the axes' background: its data area
                return box(patch || g); })};
}"""


def legend_problems(page, url: str) -> list[str]:
    page.goto(url, wait_until="load")
    got = page.evaluate(SVG_BOXES_JS)
    if not got["axes"]:
        return []
    top = min(a["y0"] for a in got["axes"])
    right = max(a["x1"] for a in got["axes"])
    bad = []
    for leg in got["legends"]:
        above = leg["y1"] <= top + 2
        beside = leg["x0"] >= right - 2
        inside_first = leg["y0"] >= top - 2 and leg["y1"] <= min(a["y1"] for a in got["axes"]) + 2
        if not (above or beside or inside_first):
            bad.append(f"{url.rsplit('/', 1)[-1]}: a legend at y {leg['y0']:.0f}..{leg['y1']:.0f}, below the "
                       f"first data area (which starts at y {top:.0f})")
    return bad


def test_performance_legends_are_above_or_beside_the_plot(view, reading_url):
    context = view("laptop")
    page, _ = _open(context, reading_url + "performance/")
    try:
        plots = _plot_images(page, dark=False)
        assert plots, "no data plot found on the Performance page"
        problems = [p for url in plots for p in legend_problems(page, url)]
    finally:
        _close(context, page)
    assert not problems, "\n".join(problems)


def _stroke_colours(svg_text: str) -> list[tuple[str, str]]:
    """(group id, stroke colour) of every line collection (error bars, whiskers, segments) in a matplotlib SVG."""
    out = []
    for m in re.finditer(r'<g id="(LineCollection_\d+)">(.*?)</g>', svg_text, re.S):
        for colour in re.findall(r"stroke:\s*(#[0-9a-fA-F]{6}|#[0-9a-fA-F]{3})", m.group(2)):
            out.append((m.group(1), colour))
    return out


MIN_LINE_CONTRAST = 3.0   # WCAG 2.1's non-text contrast for the parts of a graphic a reader needs


def test_dark_plots_lines_contrast_with_the_dark_page(view, reading_url, reading_site):
    context = view("laptop")
    page, _ = _open(context, reading_url + "performance/")
    try:
        set_dark(page, True)
        bg = _rgb_to_hex(page.evaluate("() => getComputedStyle(document.body).backgroundColor"))
    finally:
        _close(context, page)
    plots = sorted((reading_site / "data" / "plots").glob("*-dark.svg"))
    assert plots, "no dark plots in the built site"
    problems, lines = [], 0
    for svg in plots:
        for group, colour in _stroke_colours(svg.read_text()):
            lines += 1
            c = contrast(colour, bg)
            if c < MIN_LINE_CONTRAST:
                problems.append(f"{svg.name} {group}: stroke {colour} on {bg}, contrast {c:.2f} < {MIN_LINE_CONTRAST}")
    assert lines > 0, "no line collections found in the dark plots (the probe is broken)"
    assert not problems, "\n".join(dict.fromkeys(problems))


def test_contrast_probe_can_fail():
    assert contrast("#000000", "#1e2129") < MIN_LINE_CONTRAST < contrast("#e8eaed", "#1e2129")
    assert _stroke_colours('<g id="LineCollection_1">\n <path style="stroke: #000000"/>\n</g>') == [
        ("LineCollection_1", "#000000")]
