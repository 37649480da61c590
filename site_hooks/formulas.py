"""``{{ formula("id") }}``: a display formula rendered from the SymPy registry, and the drift guard.

The macro prints the registry's LaTeX in an arithmatex display block inside a wrapper that carries the id
(visible as an anchor) and lists the tests guarding that id. :func:`check_html` is the drift guard: given
a built page, it reports every display formula that has no id, an id the registry does not know, or
LaTeX that differs from the registry's.
"""
from __future__ import annotations

import html
import re
from html.parser import HTMLParser

from .guards import badge_text, render_tests, scan_tests, summary_text
from .macros import MacroError, macro

WRAPPER_CLASS = "formula"


def registry_latex() -> dict[str, str]:
    from reference_impl.norms import formula_registry

    return {fid: f.latex for fid, f in formula_registry().items()}


def anchor(fid: str) -> str:
    return "formula-" + fid


@macro("formula")
def formula_macro(ctx, fid: str) -> str:
    """One line of HTML (safe inside content tabs and lists): the wrapper, the math, the id and its tests."""
    latex = registry_latex()
    if fid not in latex:
        raise MacroError(f"{ctx.src_path}: formula id {fid!r} is not in reference_impl.symbolic")
    by_id, _ = scan_tests()
    if fid not in by_id:
        raise MacroError(f"{ctx.src_path}: formula {fid!r} is shown but no test is marked @pytest.mark.guards({fid!r})")
    ctx.guard_ids.append(fid)
    tests = by_id[fid]
    return (f'<div class="{WRAPPER_CLASS}" id="{anchor(fid)}" data-formula-id="{html.escape(fid)}">'
            f'<div class="arithmatex">\\[{html.escape(latex[fid], quote=False)}\\]</div>'
            f'<div class="formula-meta"><details class="formula-guards"><summary>{badge_text(tests)}</summary>'
            f'<p>Registry id <a class="formula-id" href="#{anchor(fid)}">{html.escape(fid)}</a>; '
            f'{summary_text(tests)}:</p>{render_tests(tests)}</details></div></div>')


class _Scanner(HTMLParser):
    """Collects display-math blocks with the formula id of the innermost enclosing wrapper, and stray
    display delimiters in running text (outside code, scripts and math blocks)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, str | None, bool]] = []   # (tag, formula id, is math)
        self.blocks: list[tuple[str | None, str]] = []
        self.stray: list[str] = []
        self._math: list[str] | None = None
        self._fixed = False
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        fid = a.get("data-formula-id") if WRAPPER_CLASS in classes else None
        is_math = tag == "div" and "arithmatex" in classes
        if tag in ("pre", "code", "script", "style", "textarea"):
            self._skip += 1
        if tag in ("br", "img", "hr", "input", "meta", "link", "source", "wbr"):
            return
        self.stack.append((tag, fid, is_math))
        if is_math:
            # a block drawn at build time keeps its TeX in data-tex; its SVG and MathML text is not TeX
            self._math = [a["data-tex"]] if a.get("data-tex") is not None else []
            self._fixed = a.get("data-tex") is not None

    def handle_endtag(self, tag):
        while self.stack:
            t, _, is_math = self.stack.pop()
            if t in ("pre", "code", "script", "style", "textarea"):
                self._skip -= 1
            if is_math and self._math is not None:
                owner = next((f for _, f, _ in reversed(self.stack) if f), None)
                self.blocks.append((owner, "".join(self._math)))
                self._math = None
            if t == tag:
                break

    def handle_data(self, data):
        if self._math is not None:
            if not self._fixed:
                self._math.append(data)
        elif not self._skip and ("$$" in data or "\\[" in data or "\\begin{" in data):
            self.stray.append(data.strip()[:80])


def _norm(tex: str) -> str:
    return re.sub(r"\s+", " ", tex).strip()


def check_html(page_html: str, known: dict[str, str], page: str = "page") -> list[str]:
    """Problems with the display formulas of one built page: no id, unknown id, or LaTeX differing from
    the registry's (whitespace-insensitive). An empty list means the page is clean."""
    sc = _Scanner()
    sc.feed(page_html)
    sc.close()
    problems = []
    for fid, body in sc.blocks:
        tex = _norm(body)
        if tex.startswith("\\[") and tex.endswith("\\]"):
            tex = _norm(tex[2:-2])
        if fid is None:
            problems.append(f"{page}: display formula without a registry id: {tex[:80]!r}")
        elif fid not in known:
            problems.append(f"{page}: display formula with unknown id {fid!r}")
        elif tex != _norm(known[fid]):
            problems.append(f"{page}: formula {fid!r} differs from the registry: {tex[:80]!r} != {known[fid][:80]!r}")
    for text in sc.stray:
        problems.append(f"{page}: display-math delimiters outside a formula block: {text!r}")
    return problems
