"""The drift guard: every display formula on the built site carries a registry id and the registry's LaTeX."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from site_hooks.formulas import check_html, formula_macro, registry_latex
from site_hooks.macros import PageContext

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "site"
SOURCES = ["docs", "mkdocs.yml", "site_hooks", "reference_impl", "tests"]
pytestmark = pytest.mark.site


def _newest_source() -> float:
    newest = 0.0
    for name in SOURCES:
        p = REPO / name
        files = [p] if p.is_file() else [f for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts]
        newest = max([newest] + [f.stat().st_mtime for f in files])
    return newest


@pytest.fixture(scope="module")
def built_site() -> Path:
    """site/ as tests/site/test_build.py leaves it; rebuilt strictly here when missing or stale."""
    index = SITE / "index.html"
    if not index.exists() or index.stat().st_mtime < _newest_source():
        env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
        proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(SITE)],
                              cwd=REPO, capture_output=True, text=True, env=env, timeout=1800)
        assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stderr[-6000:]}"
    return SITE


def _pages(site: Path):
    return sorted(p for p in site.rglob("*.html") if "assets" not in p.relative_to(site).parts)


@pytest.mark.guards("drift-guard")
def test_every_display_formula_has_a_registry_id_and_latex(built_site):
    known = registry_latex()
    problems, shown = [], 0
    for page in _pages(built_site):
        text = page.read_text(encoding="utf-8")
        shown += text.count('class="formula"')
        problems += check_html(text, known, page.relative_to(built_site).as_posix())
    assert not problems, "drift guard:\n" + "\n".join(problems)
    assert shown >= 20, f"only {shown} registry formulas found on the site: is the macro in use?"


@pytest.mark.guards("drift-guard")
def test_drift_guard_catches_altered_formulas(built_site):
    """Take the built Formulas page, change it in the ways drift happens, and the checker reports each."""
    known = registry_latex()
    page = (built_site / "formulas" / "index.html").read_text(encoding="utf-8")
    assert check_html(page, known) == []
    tex = known["rms.forward"]
    assert tex.replace("&", "&amp;") in page or tex in page
    # 1) a hand edit of the LaTeX: eps moved out of the square root
    edited = page.replace(r"\frac{1}{d} \sum_{j=1}^{d} {x}_{j}^{2} + \epsilon}}", r"\frac{1}{d} \sum_{j=1}^{d} {x}_{j}^{2}} + \epsilon}", 1)
    assert edited != page
    assert any("rms.forward" in p and "differs" in p for p in check_html(edited, known))
    # 2) a display formula pasted without the macro
    pasted = page.replace("</article>", '<div class="arithmatex">\\[y = x / \\sqrt{\\mathrm{ms}}\\]</div></article>', 1)
    assert any("without a registry id" in p for p in check_html(pasted, known))
    # 3) an id the registry does not know
    renamed = page.replace('data-formula-id="rms.forward"', 'data-formula-id="rms.forward_v2"', 1)
    assert any("unknown id 'rms.forward_v2'" in p for p in check_html(renamed, known))
    # 4) raw $$ delimiters left in a paragraph
    raw = page.replace("</article>", "<p>$$ y = x $$</p></article>", 1)
    assert any("delimiters outside" in p for p in check_html(raw, known))
    # 5) the registry changes but the page was not rebuilt
    changed = dict(known, **{"ln.vjp_bias": known["ln.vjp_bias"] + " + 0"})
    assert any("ln.vjp_bias" in p for p in check_html((built_site / "gradients" / "index.html").read_text(), changed))


@pytest.mark.guards("drift-guard")
def test_formula_macro_output_passes_the_checker_and_rejects_unknown_ids():
    ctx = PageContext("probe.md")
    html_block = formula_macro(ctx, "ln.vjp_x")
    assert ctx.guard_ids == ["ln.vjp_x"] and "checked by" in html_block
    assert check_html(f"<article>{html_block}</article>", registry_latex()) == []
    from site_hooks.macros import MacroError
    with pytest.raises(MacroError, match="not in reference_impl.symbolic"):
        formula_macro(ctx, "rms.made_up")
