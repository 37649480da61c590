"""The built site, browsed in a real browser (Debian's Chromium driven by Playwright for Python).

Every page must load without console errors or failed requests, request nothing outside 127.0.0.1
(all assets are self-hosted), leave no raw TeX (MathJax renders every formula), load its images and plots,
and link only to pages and anchors that exist. Site-wide: search finds the rsqrt page, a code block's copy
button copies the embedded source, and the dark/light toggle switches the palette. A screenshot of every
page goes to ``build/screenshots/`` (git-ignored; CI keeps it as an artifact).

Without Chromium or Playwright these tests are skipped with a note on how to install them, except under
``CI=true``, where that is a failure.
"""
from __future__ import annotations

import os
import re
import shutil
from functools import lru_cache
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
SHOTS = REPO / "build" / "screenshots"
pytestmark = [pytest.mark.site, pytest.mark.guards("site.browser")]
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
# a LaTeX command or delimiter left in the visible text means MathJax did not render it
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


def _missing(what: str):
    msg = (f"{what} is missing, so the browser tests cannot run. Install Debian's Chromium with "
           "`sudo apt-get install chromium` (and the pinned Python packages with `make setup`); "
           "set CHROMIUM to use another Chromium binary.")
    if os.environ.get("CI") == "true":
        pytest.fail(msg + " Under CI=true this is a failure, not a skip.")
    pytest.skip(msg)


@pytest.fixture(scope="session")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("Playwright for Python")
    exe = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(exe).is_file():
        _missing(f"Chromium ({exe})")
    pw = sync_playwright().start()
    try:
        b = pw.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
    except Exception as exc:  # noqa: BLE001 - report why the browser did not start
        pw.stop()
        _missing(f"a working Chromium ({exe}: {exc})")
    yield b
    b.close()
    pw.stop()


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


@pytest.fixture
def open_page(browser, site_url):
    contexts = []

    def _open(path: str, **kw):
        context = browser.new_context(color_scheme="light", viewport={"width": 1280, "height": 900}, **kw)
        contexts.append(context)
        page = context.new_page()
        watcher = Watcher(context, page)
        page.goto(site_url + path, wait_until="load")
        try:
            page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=15000)
        except Exception:  # noqa: BLE001 - turn a timeout into a readable failure
            pytest.fail(f"{path or 'home'}: MathJax did not start within 15 s; problems so far: {watcher.errors}")
        page.evaluate("() => MathJax.startup.promise")
        page.wait_for_load_state("networkidle")
        return page, watcher

    yield _open
    for c in contexts:
        c.close()


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


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p or "home")
def test_page(open_page, site_dir, path):
    page, watch = open_page(path)
    problems: list[str] = []

    # formulas: every arithmatex block holds a MathJax rendering, none failed, no TeX left in the text
    math = page.evaluate(r"""() => {
        const blocks = [...document.querySelectorAll('.arithmatex')];
        const unrendered = blocks.filter(b => !b.querySelector('mjx-container')).map(b => b.textContent.slice(0, 80));
        const errors = [...document.querySelectorAll('mjx-merror')].map(e => e.textContent.slice(0, 80));
        const root = (document.querySelector('article') || document.body).cloneNode(true);
        root.querySelectorAll('pre, code, mjx-container, script, style, textarea, svg').forEach(e => e.remove());
        // notebook markdown is not processed by the site's MathJax config: $...$ there would stay raw
        const nbmath = [...document.querySelectorAll('.jp-RenderedMarkdown, .jp-MarkdownOutput')]
            .map(e => e.textContent).join('\n').match(/\$[^$\s][^$]*\$/g) || [];
        return {count: blocks.length, unrendered, errors, text: root.textContent, nbmath};
    }""")
    problems += [f"raw TeX in a notebook cell: {t[:80]!r}" for t in math["nbmath"]]
    problems += [f"formula not rendered: {t!r}" for t in math["unrendered"]]
    problems += [f"MathJax error: {t!r}" for t in math["errors"]]
    for m in RAW_TEX.finditer(math["text"]):
        problems.append(f"raw TeX in the text: ...{math['text'][max(0, m.start() - 40):m.end() + 40]!r}...")

    # images and plots
    images = page.evaluate("""() => [...document.images].map(i => ({src: i.currentSrc || i.src,
        ok: i.complete && i.naturalWidth > 0}))""")
    problems += [f"image did not load: {i['src']}" for i in images if not i["ok"]]

    # internal links and anchors
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

    page.wait_for_timeout(50)
    problems += watch.errors
    problems += [f"request outside 127.0.0.1: {u}" for u in watch.outside]
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{(path.strip('/') or 'home').replace('/', '__')}.png"), full_page=True)
    problems = list(dict.fromkeys(problems))  # one line per distinct problem
    assert not problems, f"{path or 'home'}:\n" + "\n".join(problems)


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
    block = page.locator("div.highlight", has_text="def _rms_forward").first
    block.hover()
    button = block.locator("button[data-clipboard-target]")  # Material's copy button (md-code__button)
    assert button.count() == 1, "no copy button on the embedded rms_forward code block"
    button.click()
    page.wait_for_function("() => window.__copied.length > 0", timeout=5000)
    copied = page.evaluate("() => window.__copied[window.__copied.length - 1]")
    clipboard = page.evaluate("() => navigator.clipboard.readText()")
    expected = _snippet("reference_impl/reference.py", "rms_forward")
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
