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
    users = census_users(name)
    if users:
        facts.append(used_by_sentence(users, spec.families))
    elif spec.families:
        facts.append("Used by: " + ", ".join(spec.families) + ".")
    classes = census_classes(name)
    if classes:
        facts.append(classes_sentence(classes))
    facts.append("Implementations: " + ", ".join(["the PyTorch reference"] + list(spec.implementations)) + ".")
    facts.append("Gradients checked against float64: " + ", ".join(f"`{g}`" for g in spec.grads) + ".")
    parts += ["", " ".join(facts), ""]
    for fid in spec.formulas:
        parts += [formula_macro(ctx, fid), ""]
    parts.append(guards_macro(ctx, f"norm.{name}"))
    return "\n".join(parts)


USERS_LISTED = 30   # a card lists the model types of an entry up to this many, else counts them


def census_users(name: str) -> list[str]:
    """The model types whose traced model the census finds using catalog entry ``name`` (any of its variants),
    as the finder shows them: each type's reader-facing name where the site has one, else the type itself."""
    from . import census as C

    names = C.display_names()
    out = []
    for m in sorted(C.census()["models"], key=lambda m: m["model_type"]):
        if any(e is not None and C.base_entry(e) == name for e in m["catalog"]):
            out.append(names.get(m["model_type"]) or m["model_type"])
    return list(dict.fromkeys(out))


def used_by_sentence(users: list[str], families=()) -> str:
    """The card's "used by" sentence from the census's users: all of them up to :data:`USERS_LISTED`, else
    their count with the families the entry's spec names, saying that the finder lists the rest."""
    from . import census as C

    where = f"in transformers {C._version(C.census())}"
    if len(users) <= USERS_LISTED:
        plural = "s" if len(users) > 1 else ""
        return f"Used by {len(users)} model type{plural} {where}: " + ", ".join(html.escape(u) for u in users) + "."
    among = (", among them " + ", ".join(html.escape(f) for f in families)) if families else ""
    return (f"Used by {len(users)} model types {where}{among}; [the model finder](models.md) lists every "
            f"one.")


def census_classes(name: str) -> list[str]:
    """The norm classes of transformers the census found equal to entry ``name`` bit for bit, each with the
    constructor arguments it needs for that where its model passes them from its config."""
    from . import census as C

    return sorted(f"`{c['name']}`" + (f" (built with {C._args(built)})" if built else "")
                  for c, _, built in C.classes_of([name]))


CLASSES_LISTED = 6   # a card names the classes equal to its entry up to this many, else counts them


def classes_sentence(classes: list[str]) -> str:
    if len(classes) <= CLASSES_LISTED:
        return f"Equal bit for bit to {len(classes)} norm class{'es' if len(classes) > 1 else ''} of transformers: " \
            + ", ".join(classes) + "."
    return f"Equal bit for bit to {len(classes)} norm classes of transformers."


def missing_cards() -> list[str]:
    """Catalog entries whose page has no ``{{ norm(name) }}`` card."""
    out = []
    for name, spec in _catalog().items():
        page = REPO / "docs" / spec.page
        if not page.exists() or name not in CARD_RE.findall(page.read_text()):
            out.append(f"{name} (expected on docs/{spec.page})")
    return out
