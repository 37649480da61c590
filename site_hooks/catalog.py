"""Page macros fed by the norm catalog (``reference_impl.norms.CATALOG``).

- ``{{ catalog_table("norm", "families", "implementations") }}``: one row per catalog entry, with the
  columns the page names (see :data:`COLUMNS`).
- ``{{ norm("dyt") }}``: a norm's section card: its heading, source, formulas from the registry, the
  model families and implementations its spec declares, and the tests that guard it.

Every catalog entry must have its card on the page its spec names, or the build fails.
"""
from __future__ import annotations

import html
import re
from pathlib import Path

from .formulas import formula_macro
from .guards import guards_macro
from .macros import MacroError, macro

REPO = Path(__file__).resolve().parent.parent
CARD_RE = re.compile(r"\{\{\s*norm\(\s*[\"']([^\"']+)[\"']\s*\)\s*\}\}")


def _catalog():
    from reference_impl.norms import CATALOG

    return CATALOG


def anchor(name: str) -> str:
    return "norm-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _cell(text: str) -> str:
    return html.escape(text).replace("|", "\\|")


COLUMNS = {
    "norm": lambda s: f"[`{s.name}`]({s.page}#{anchor(s.name)})",
    "title": lambda s: _cell(s.title),
    "source": lambda s: _cell(s.source),
    "families": lambda s: _cell(", ".join(s.families)) or "-",
    "conventions": lambda s: _cell(", ".join(s.conventions)) or "-",
    "implementations": lambda s: _cell(", ".join(["reference"] + list(s.implementations))),
    "gradients": lambda s: _cell(", ".join(s.grads)),
    "formulas": lambda s: ", ".join(f"`{f}`" for f in s.formulas) or "-",
}
HEADERS = {"norm": "norm", "title": "what it computes", "source": "source", "families": "used by",
           "conventions": "convention", "implementations": "implementations", "gradients": "gradients of",
           "formulas": "formulas"}


@macro("catalog_table")
def catalog_table_macro(ctx, *columns: str) -> str:
    if not columns:
        raise MacroError(f"{ctx.src_path}: catalog_table needs the names of its columns")
    unknown = [c for c in columns if c not in COLUMNS]
    if unknown:
        raise MacroError(f"{ctx.src_path}: catalog_table has no column {unknown}; known: {sorted(COLUMNS)}")
    cat = _catalog()
    lines = ["| " + " | ".join(HEADERS[c] for c in columns) + " |", "|" + "---|" * len(columns)]
    for name in sorted(cat):
        lines.append("| " + " | ".join(COLUMNS[c](cat[name]) for c in columns) + " |")
    return "\n".join(lines)


@macro("norm")
def norm_macro(ctx, name: str) -> str:
    cat = _catalog()
    if name not in cat:
        raise MacroError(f"{ctx.src_path}: no norm {name!r} in reference_impl.norms.CATALOG")
    spec = cat[name]
    if spec.page != ctx.src_path:
        raise MacroError(f"{ctx.src_path}: norm {name!r} belongs on {spec.page} (its spec's page)")
    parts = [f"### {html.escape(spec.title)} {{ #{anchor(name)} }}", "",
             f"Catalog entry `{name}`. Source: {_cell(spec.source)}."]
    facts = []
    if spec.families:
        facts.append("Used by: " + ", ".join(spec.families) + ".")
    facts.append("Implementations: " + ", ".join(["the PyTorch reference"] + list(spec.implementations)) + ".")
    facts.append("Gradients checked against float64: " + ", ".join(f"`{g}`" for g in spec.grads) + ".")
    parts += ["", " ".join(facts), ""]
    for fid in spec.formulas:
        parts += [formula_macro(ctx, fid), ""]
    parts.append(guards_macro(ctx, f"norm.{name}"))
    return "\n".join(parts)


def missing_cards() -> list[str]:
    """Catalog entries whose page has no ``{{ norm(name) }}`` card."""
    out = []
    for name, spec in _catalog().items():
        page = REPO / "docs" / spec.page
        if not page.exists() or name not in CARD_RE.findall(page.read_text()):
            out.append(f"{name} (expected on docs/{spec.page})")
    return out
