"""The built site, browsed in a real browser (Debian's Chromium driven by Playwright for Python).

Every page, at a phone (375 px), a portrait tablet (768 px) and a desktop (1280 px) width, in the light and
the dark palette: it loads without console errors or failed requests, requests nothing outside 127.0.0.1
(all assets are self-hosted), never scrolls sideways as a whole (wide formulas, tables and code scroll in
their own boxes), and every formula has a visible size. At desktop width it also leaves no
raw TeX, loads its images and plots, and links only to pages and anchors that exist. Site-wide: search
finds the rsqrt page, a code block's copy button copies the embedded source, and the dark/light toggle
switches the palette. Screenshots of every page at every width, light and dark, go to
``build/screenshots/`` (git-ignored; CI keeps them as an artifact). One browser serves all tests, and one
browser context per width serves all pages.

Without Chromium or Playwright these tests are skipped with a note on how to install them, except under
``CI=true``, where that is a failure.
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
SHOTS = REPO / "build" / "screenshots"
pytestmark = [pytest.mark.site, pytest.mark.guards("site.browser")]
# a LaTeX command or delimiter left in the visible text means a formula was not drawn
RAW_TEX = re.compile(r"\\[()\[\]]|\$\$|\\(?:frac|sqrt|sum|prod|mathrm|mathbf|operatorname|text|begin|end|left|right"
                     r"|cdot|gamma|epsilon|varepsilon|partial|hat|bar|odot|top|le|ge|approx|quad)\b")


class _Tolerant(yaml.SafeLoader):
    """Reads mkdocs.yml even when it holds !!python/name tags (they are irrelevant here)."""


_Tolerant.add_multi_constructor("", lambda loader, suffix, node: None)


def _excluded() -> list[str]:
    cfg = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=_Tolerant) or {}
    return [line.strip().lstrip("/") for line in (cfg.get("exclude_docs") or "").splitlines() if line.strip()]


def _pages() -> list[str]:
    """Site paths ('' for the home page, 'rsqrt/', 'kernels/cpu/') of every page the docs folder builds."""
    excluded = _excluded()
    out = []
    for src in sorted(list(DOCS.rglob("*.md")) + list(DOCS.rglob("*.ipynb"))):
        rel = src.relative_to(DOCS).as_posix()
        if rel in excluded or ".ipynb_checkpoints" in rel or any(part.startswith(".") for part in src.parts):
            continue
        stem = rel.rsplit(".", 1)[0]
        if stem == "index" or stem.endswith("/index") or stem.upper() == "README" or stem.upper().endswith("/README"):
            stem = stem.rsplit("/", 1)[0] if "/" in stem else ""
            out.append(stem + "/" if stem else "")
        else:
            out.append(stem + "/")
    return out


PAGES = _pages()


class Watcher:
    """Records console errors, failed requests and requests that leave 127.0.0.1 for one page."""

    def __init__(self, context, page):
        self.errors: list[str] = []
        self.outside: list[str] = []
        context.route("**/*", self._route)
        page.on("console", lambda m: self.errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        page.on("requestfailed", lambda r: self.errors.append(f"request failed: {r.url} ({r.failure})"))
        page.on("response", lambda r: self.errors.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)

    def _route(self, route):
        url = route.request.url
        if urlparse(url).hostname != "127.0.0.1":
            self.outside.append(url)
            route.abort()
        else:
            route.continue_()


VIEWPORTS = {"phone": {"width": 375, "height": 740}, "tablet": {"width": 768, "height": 1024},
             "desktop": {"width": 1280, "height": 900}}


def _load(page, watcher, url: str, label: str):
    # formulas are SVG in the HTML (drawn at build time): nothing to wait for once the page and its assets loaded
    page.goto(url, wait_until="load")
    page.wait_for_load_state("networkidle")


@pytest.fixture
def open_page(browser, site_url):
    """Opens a page in a fresh light-palette context at desktop width (for the site-wide interaction tests)."""
    contexts = []

    def _open(path: str, **kw):
        context = browser.new_context(color_scheme="light", viewport=VIEWPORTS["desktop"], **kw)
        contexts.append(context)
        page = context.new_page()
        watcher = Watcher(context, page)
        _load(page, watcher, site_url + path, path or "home")
        return page, watcher

    yield _open
    for c in contexts:
        c.close()


@pytest.fixture(scope="module")
def contexts(browser):
    """One light-palette browser context per viewport, shared by every page test of that width."""
    made: dict = {}

    def get(name: str):
        if name not in made:
            made[name] = browser.new_context(color_scheme="light", viewport=VIEWPORTS[name])
        return made[name]

    yield get
    for c in made.values():
        c.close()


# -- layout probes (run in the page) --------------------------------------------------------------------------

# the page as a whole must not scroll sideways
OVERFLOW_JS = """() => {
    const se = document.scrollingElement;
    const out = {scrollWidth: se.scrollWidth, innerWidth: window.innerWidth, culprits: []};
    if (se.scrollWidth > window.innerWidth) {
        const W = document.documentElement.clientWidth;
        for (const e of document.querySelectorAll('body *')) {
            const r = e.getBoundingClientRect();
            if (r.right <= W + 1 || r.width === 0) continue;
            let inBox = false;   // inside a box that scrolls or clips horizontally within the viewport
            for (let p = e.parentElement; p && p !== document.body; p = p.parentElement) {
                const o = getComputedStyle(p).overflowX;
                if ((o === 'auto' || o === 'scroll' || o === 'hidden' || o === 'clip') && p.getBoundingClientRect().right <= W + 1) { inBox = true; break; }
            }
            if (!inBox) out.culprits.push(`${e.tagName.toLowerCase()}.${String(e.className).split(' ')[0]} ends at ${Math.round(r.right)} px`);
            if (out.culprits.length >= 5) break;
        }
    }
    return out;
}"""

# every formula must have a visible size; formulas in collapsed blocks and in other content
# tabs are made visible for the measurement (then the page is reloaded before anything else is checked)
MATH_SIZE_JS = """(minPx) => {
    document.querySelectorAll('details').forEach(d => { d.open = true; });
    const style = document.createElement('style');
    style.textContent = '.tabbed-block { display: block !important; }';
    document.head.appendChild(style);
    const bad = [];
    let count = 0, display = 0;
    // the top-level SVG of each formula (MathJax nests further SVGs inside for stretchy symbols)
    for (const svg of document.querySelectorAll('mjx-container > svg')) {
        if (svg.closest('mjx-assistive-mml')) continue;
        if (!svg.checkVisibility({checkVisibilityCSS: true})) continue;   // e.g. hidden by a media query
        count++;
        if (svg.closest('div.arithmatex')) display++;
        const r = svg.getBoundingClientRect();
        if (r.width < minPx || r.height < minPx) {
            const tex = (svg.closest('.arithmatex') || svg.closest('mjx-container')).textContent;
            const owner = svg.closest('[data-formula-id]');
            bad.push(`${Math.round(r.width * 10) / 10}x${Math.round(r.height * 10) / 10} px` +
                     (owner ? ` (${owner.dataset.formulaId})` : ''));
        }
    }
    style.remove();
    return {count, display, bad};
}"""
MIN_MATH_PX = 4


def set_dark(page, dark: bool) -> None:
    """Switches Material's palette as its toggle does (the stored preference is left alone)."""
    scheme = "slate" if dark else "default"
    page.evaluate("s => document.body.setAttribute('data-md-color-scheme', s)", scheme)
    page.wait_for_function(f"() => document.body.getAttribute('data-md-color-scheme') === {scheme!r}")
    page.wait_for_timeout(50)


def layout_problems(page, where: str) -> list[str]:
    problems = []
    o = page.evaluate(OVERFLOW_JS)
    if o["scrollWidth"] > o["innerWidth"]:
        problems.append(f"{where}: the page scrolls sideways ({o['scrollWidth']} px content in a {o['innerWidth']} px "
                        f"window): {'; '.join(o['culprits']) or 'no single element found'}")
    return problems


def math_problems(page, where: str) -> tuple[int, list[str]]:
    """(number of display formulas measured, problems)."""
    m = page.evaluate(MATH_SIZE_JS, MIN_MATH_PX)
    return m["display"], [f"{where}: formula drawn at {b}" for b in m["bad"]]


@lru_cache(maxsize=None)
def _ids(html_file: Path) -> frozenset:
    text = html_file.read_text(errors="replace")
    return frozenset(re.findall(r'\bid="([^"]+)"', text)) | frozenset(re.findall(r'\bname="([^"]+)"', text))


def _target_file(site_dir: Path, path: str) -> Path | None:
    rel = unquote(path).lstrip("/")
    f = site_dir / rel
    if rel == "" or rel.endswith("/"):
        f = f / "index.html"
    return f if f.is_file() else None


def test_every_built_page_is_checked(site_dir):
    built = sorted(p.parent.relative_to(site_dir).as_posix() for p in site_dir.rglob("index.html")
                   if not p.relative_to(site_dir).as_posix().startswith(("assets/", "search/")))
    built = ["" if b == "." else b + "/" for b in built]
    assert sorted(built) == sorted(PAGES), "pages built but not browsed (or browsed but not built)"


def _shot(page, path: str, viewport: str, scheme: str) -> None:
    """Whole page in the light palette at every width and in the dark one at phone width; the first screen
    otherwise (a full-page capture of a long page takes seconds)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    name = (path.strip("/") or "home").replace("/", "__")
    page.screenshot(path=str(SHOTS / f"{name}-{viewport}-{scheme}.png"),
                    full_page=scheme == "light" or viewport == "phone")


def _content_problems(page, site_dir) -> list[str]:
    """Raw TeX, failed MathJax, images that did not load, broken links and anchors (desktop width)."""
    problems: list[str] = []
    math = page.evaluate(r"""() => {
        const blocks = [...document.querySelectorAll('.arithmatex')];
        const unrendered = blocks.filter(b => !b.querySelector('mjx-container')).map(b => b.textContent.slice(0, 80));
        const errors = [...document.querySelectorAll('mjx-merror')].map(e => e.textContent.slice(0, 80));
        const root = (document.querySelector('article') || document.body).cloneNode(true);
        root.querySelectorAll('pre, code, mjx-container, script, style, textarea, svg').forEach(e => e.remove());
        // notebook markdown is not processed by the site's MathJax config: $...$ there would stay raw
        const nbmath = [...document.querySelectorAll('.jp-RenderedMarkdown, .jp-MarkdownOutput')]
            .map(e => e.textContent).join('\n').match(/\$[^$\s][^$]*\$/g) || [];
        // markdown that did not become HTML: an image or link left as literal text
        const literal = (root.textContent.match(/!\[[^\]\n]{0,200}\]\([^)\s]+\)/g) || []);
        return {unrendered, errors, text: root.textContent, nbmath, literal};
    }""")
    problems += [f"raw TeX in a notebook cell: {t[:80]!r}" for t in math["nbmath"]]
    problems += [f"formula not rendered: {t!r}" for t in math["unrendered"]]
    problems += [f"MathJax error: {t!r}" for t in math["errors"]]
    problems += [f"markdown left as text: {t[:80]!r}" for t in math["literal"]]
    for m in RAW_TEX.finditer(math["text"]):
        problems.append(f"raw TeX in the text: ...{math['text'][max(0, m.start() - 40):m.end() + 40]!r}...")

    images = page.evaluate("""() => [...document.images].map(i => ({src: i.currentSrc || i.src,
        ok: i.complete && i.naturalWidth > 0, alt: i.getAttribute('alt')}))""")
    problems += [f"image did not load: {i['src']}" for i in images if not i["ok"]]
    problems += [f"image without alt text: {i['src']}" for i in images
                 if "/assets/diagrams/" in i["src"] and not (i["alt"] or "").strip()]

    links = page.evaluate("() => [...document.querySelectorAll('a[href]')].map(a => a.href)")
    here = urlparse(page.url)
    for href in sorted(set(links)):
        u = urlparse(href)
        if u.scheme not in ("http", "https") or u.hostname != "127.0.0.1":
            continue
        target = _target_file(site_dir, u.path)
        if target is None:
            problems.append(f"broken link: {href}")
            continue
        if u.fragment and target.suffix == ".html":
            frag = unquote(u.fragment)
            in_dom = u.path == here.path and page.evaluate("id => !!document.getElementById(id)", frag)
            if not in_dom and frag not in _ids(target):
                problems.append(f"missing anchor: {href}")
    return problems


@pytest.mark.parametrize("viewport", list(VIEWPORTS))
@pytest.mark.parametrize("path", PAGES, ids=lambda p: p or "home")
def test_page(contexts, site_url, site_dir, path, viewport):
    """One page at one width, light then dark: layout, formulas, console; at desktop width also content."""
    context = contexts(viewport)
    page = context.new_page()
    watch = Watcher(context, page)
    label = f"{path or 'home'} at {VIEWPORTS[viewport]['width']} px"
    try:
        _load(page, watch, site_url + path, label)
        problems: list[str] = []
        if viewport == "desktop":
            problems += _content_problems(page, site_dir)
        for scheme in ("light", "dark"):  # as a reader first sees it
            set_dark(page, scheme == "dark")
            problems += layout_problems(page, scheme)
            _shot(page, path, viewport, scheme)
        for scheme in ("dark", "light"):  # with every collapsed block and content tab opened
            set_dark(page, scheme == "dark")
            problems += math_problems(page, scheme)[1]
            problems += layout_problems(page, f"{scheme}, every block open")
        page.wait_for_timeout(50)
        problems += watch.errors
        problems += [f"request outside 127.0.0.1: {u}" for u in watch.outside]
    finally:
        context.unroute("**/*")
        page.close()
    problems = list(dict.fromkeys(problems))  # one line per distinct problem
    assert not problems, f"{label}:\n" + "\n".join(problems)


def test_layout_checks_can_fail(contexts, site_url):
    """The probes are not vacuous: with Material's mobile rule for display math and the site's own
    stylesheet removed, formulas collapse to 1 px at phone width and are reported; a block wider than the
    window is reported as sideways scrolling."""
    context = contexts("phone")
    page = context.new_page()
    watch = Watcher(context, page)
    try:
        _load(page, watch, site_url + "formulas/", "formulas at 375 px")
        assert math_problems(page, "fixed")[1] == []
        page.evaluate("""() => document.querySelectorAll('link[rel=stylesheet]').forEach(l => {
            if (l.href.includes('extra.css')) l.remove(); })""")
        page.wait_for_timeout(100)
        shown, bad = math_problems(page, "without the fix")
        assert shown > 10 and len(bad) == shown, f"{len(bad)} of {shown} collapsed display formulas reported"
        assert layout_problems(page, "before") == []
        page.evaluate("""() => { const d = document.createElement('div'); d.style.width = '2000px';
            d.style.height = '10px'; document.querySelector('article').appendChild(d); }""")
        assert any("scrolls sideways" in p for p in layout_problems(page, "after"))
    finally:
        context.unroute("**/*")
        page.close()


def test_search_finds_the_rsqrt_page(open_page):
    page, watch = open_page("")
    page.keyboard.press("s")  # Material's shortcut that opens the search box
    box = page.locator("input.md-search__input")
    box.press_sequentially("rsqrt", delay=20)  # typed key by key: the search reacts to key events
    page.wait_for_selector(".md-search-result__item a", timeout=15000)
    page.wait_for_timeout(300)
    hrefs = page.eval_on_selector_all(".md-search-result__item a", "els => els.map(a => a.href)")
    assert any(urlparse(h).path.endswith("/rsqrt/") for h in hrefs), f"no result on the rsqrt page: {hrefs}"
    assert not watch.errors and not watch.outside, watch.errors + watch.outside


def _snippet(path: str, name: str) -> str:
    lines = (REPO / path).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if f"--8<-- [start:{name}]" in line)
    end = next(i for i, line in enumerate(lines) if f"--8<-- [end:{name}]" in line)
    return "\n".join(lines[start + 1:end])


def test_copy_button_copies_the_embedded_code(open_page, site_url):
    page, watch = open_page("", permissions=["clipboard-read", "clipboard-write"])
    # every copy event: what was selected for copying (clipboard.js copies through a selection)
    page.evaluate("""() => { window.__copied = [];
        document.addEventListener('copy', () => window.__copied.push(String(document.getSelection())), true); }""")
    block = page.locator("div.highlight", has_text="def reference_rms_norm").first
    block.hover()
    button = block.locator("button[data-clipboard-target]")  # Material's copy button (md-code__button)
    assert button.count() == 1, "no copy button on the embedded reference_rms_norm code block"
    button.click()
    page.wait_for_function("() => window.__copied.length > 0", timeout=5000)
    copied = page.evaluate("() => window.__copied[window.__copied.length - 1]")
    clipboard = page.evaluate("() => navigator.clipboard.readText()")
    expected = _snippet("reference_impl/standalone/reference.py", "reference_rms_norm")
    norm = lambda s: "\n".join(line.rstrip() for line in s.strip("\n").splitlines())  # noqa: E731
    assert norm(copied) == norm(expected)
    assert norm(clipboard) == norm(expected)
    assert not watch.errors and not watch.outside, watch.errors + watch.outside


def test_dark_light_toggle(open_page):
    page, watch = open_page("")
    scheme = "() => document.body.getAttribute('data-md-color-scheme')"
    background = "() => getComputedStyle(document.body).backgroundColor"
    assert page.evaluate(scheme) == "default"
    light_bg = page.evaluate(background)
    page.locator("label[for='__palette_1']").click()
    page.wait_for_function(f"() => ({scheme})() === 'slate'")
    page.wait_for_function(f"() => ({background})() !== {light_bg!r}")
    dark_bg = page.evaluate(background)
    page.locator("label[for='__palette_0']").click()
    page.wait_for_function(f"() => ({scheme})() === 'default'")
    assert page.evaluate(background) == light_bg != dark_bg
    assert not watch.errors and not watch.outside, watch.errors + watch.outside
