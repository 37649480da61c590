"""Formulas drawn at build time: every TeX formula on a page becomes an inline SVG before the page is written.

``pymdownx.arithmatex`` (generic mode) leaves each formula in the HTML as ``<span class="arithmatex">\\(...\\)</span>``
or ``<div class="arithmatex">\\[...\\]</div>``. :func:`on_post_page` hands the TeX to MathJax running in Node.js
(``site_hooks/node/tex2svg.js``, one process per build) and puts the SVG in its place, with MathML beside it for
screen readers. Pages therefore ship no math JavaScript, and a reader never sees raw TeX while a script loads.

A formula MathJax cannot parse stops the build with the page and the TeX in the message.
"""
from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

NODE_DIR = Path(__file__).resolve().parent / "node"
SCRIPT = NODE_DIR / "tex2svg.js"

# arithmatex's generic output; a display block may also hold a bare \begin{...}...\end{...} environment
_INLINE = re.compile(r'<span class="arithmatex">\\\((.*?)\\\)</span>', re.S)
_BLOCK = re.compile(r'<div class="arithmatex">(.*?)</div>', re.S)
# MathJax gives each formula its own copy of the glyph outlines it uses (<defs><path id="MJX-7-TEX-I-1D465" ...>);
# a page keeps one copy of each glyph in a hidden SVG and every formula refers to it
_DEFS = re.compile(r"<defs>(.*?)</defs>", re.S)
_PATH = re.compile(r'<path id="MJX-\d+-(TEX-[^"]+)" d="([^"]*)"></path>')
_REF = re.compile(r'"#MJX-\d+-(TEX-[^"]+)"')


class MathError(RuntimeError):
    """A formula that could not be drawn, or a renderer that could not start."""


class _Renderer:
    def __init__(self) -> None:
        node = shutil.which("node")
        if node is None:
            raise MathError("formulas are drawn at build time with Node.js, and `node` is not on PATH")
        if not (NODE_DIR / "node_modules" / "mathjax").is_dir():
            raise MathError(f"MathJax for the build is missing: run `npm ci --prefix {NODE_DIR}` (make setup does)")
        self.proc = subprocess.Popen([node, str(SCRIPT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, encoding="utf-8", bufsize=1)
        first = self._read()
        if "css" not in first:
            raise MathError(f"{SCRIPT.name} did not start with its stylesheet: {first}")
        self.css = first["css"]

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise MathError(f"{SCRIPT.name} stopped (exit code {self.proc.poll()})")
        return json.loads(line)

    def render(self, tex: str, display: bool) -> str:
        self.proc.stdin.write(json.dumps({"tex": tex, "display": display}) + "\n")
        self.proc.stdin.flush()
        reply = self._read()
        if "error" in reply:
            raise MathError(reply["error"])
        return reply["svg"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


_renderer: _Renderer | None = None


def _get() -> _Renderer:
    global _renderer
    if _renderer is None or _renderer.proc.poll() is not None:
        _renderer = _Renderer()
    return _renderer


def clear_caches() -> None:
    """Called before each build (see hooks.py): one fresh MathJax process per build."""
    global _renderer
    if _renderer is not None:
        _renderer.close()
    _renderer = None


def _block_tex(inner: str) -> str:
    inner = inner.strip()
    if inner.startswith("\\[") and inner.endswith("\\]"):
        return inner[2:-2]
    return inner  # an environment such as \begin{aligned}...\end{aligned}


def render_page(output: str, where: str) -> str:
    """Replaces every arithmatex formula in a page's HTML by its SVG; adds the stylesheet once if any was found."""
    glyphs: dict[str, str] = {}

    def share_glyphs(svg: str) -> str:
        for defs in _DEFS.findall(svg):
            for key, d in _PATH.findall(defs):
                glyphs.setdefault(key, d)
        svg = _DEFS.sub("", svg)
        return _REF.sub(lambda m: f'"#MJX-{m.group(1)}"', svg)

    def draw(tex: str, display: bool) -> str:
        tex = html.unescape(tex)
        try:
            return share_glyphs(_get().render(tex, display))
        except MathError as exc:
            raise MathError(f"{where}: formula {tex[:120]!r} could not be drawn: {exc}") from None

    # the TeX stays on the block (data-tex) so that the drift guard can compare it with the registry
    output = _BLOCK.sub(lambda m: f'<div class="arithmatex" data-tex="{html.escape(html.unescape(m.group(1)), quote=True)}">'
                                  f'{draw(_block_tex(m.group(1)), True)}</div>', output)
    output = _INLINE.sub(lambda m: f'<span class="arithmatex">{draw(m.group(1), False)}</span>', output)
    if glyphs:
        style = f'<style id="mathjax-svg-styles">{_get().css}</style>'
        output = output.replace("</head>", style + "</head>", 1)
        defs = "".join(f'<path id="MJX-{k}" d="{d}"></path>' for k, d in sorted(glyphs.items()))
        sheet = f'<svg id="mathjax-glyphs" style="display: none" aria-hidden="true"><defs>{defs}</defs></svg>'
        output = re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + sheet, output, count=1)
    return output
