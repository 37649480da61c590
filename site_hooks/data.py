"""Numbers on pages come from data files under docs/data/, never typed by hand.

Each file is parsed and validated against its schema (``reference_impl/studies/schemas/``) and its
physical and consistency checks (``schemas/invariants.py`` and ``schemas/consistency.py``: a provenance
that matches the sources, figures that agree with each other and with physical limits, summaries recomputed
from their rows, names resolved against the catalog, the census and the installed sources; the kit's
``census_index.json`` too) when the build first reads data: a corrupt,
truncated, ill-typed or implausible file, or one without a schema, fails the build with the file's path and
the field named.
"""
from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path

from .macros import MacroError, macro

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "docs" / "data"
#: the kit's look-up, written with the census: validated like a data file (a view of the census)
INDEX = REPO / "reference_impl" / "check" / "census_index.json"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from reference_impl.studies.schemas import DataFileError, check_file, check_yaml_file, data_files  # noqa: E402,F401


@lru_cache(maxsize=None)
def validated() -> dict:
    """Every data file and the kit's census index, parsed and checked against its schema and its
    consistency checks (once per build)."""
    out = {}
    for path in [*data_files(DATA), INDEX]:
        try:
            out[path.name] = check_file(path)
        except DataFileError as exc:
            raise MacroError(str(exc)) from exc
    return out


@lru_cache(maxsize=None)
def load(name: str):
    files = validated()
    if name not in files:
        raise MacroError(f"data file docs/data/{name} does not exist")
    return files[name]


def clear_caches() -> None:
    validated.cache_clear()
    load.cache_clear()


def lookup(name: str, dotted: str):
    node = load(name)
    for key in dotted.split("."):
        if isinstance(node, list):
            try:
                node = node[int(key)]
            except (ValueError, IndexError):
                raise MacroError(f"docs/data/{name} has no item {key!r} in {dotted!r}") from None
        elif isinstance(node, dict) and key in node:
            node = node[key]
        else:
            raise MacroError(f"docs/data/{name} has no key {dotted!r} (stopped at {key!r})")
    return node


@macro("data")
def data_macro(ctx, name: str, dotted: str, fmt: str = "") -> str:
    """``{{ data("file.json", "a.b.0.c", ".3g") }}``: a value from a data file, formatted; a null value
    (not measured in that run) renders as "n/a"; a list renders as its items, each formatted, separated by
    commas."""
    value = lookup(name, dotted)
    if value is None:
        return "n/a"
    try:
        if isinstance(value, list):  # a list of values: each formatted, separated by commas
            return ", ".join("n/a" if v is None else (format(v, fmt) if fmt else str(v)) for v in value)
        return format(value, fmt) if fmt else str(value)
    except (TypeError, ValueError) as exc:
        raise MacroError(f"{ctx.src_path}: docs/data/{name} {dotted!r} = {value!r} cannot be formatted "
                         f"with {fmt!r}: {exc}") from exc


@macro("data_table")
def data_table_macro(ctx, name: str, dotted: str, *columns: str) -> str:
    """``{{ data_table("file.json", "rows", "key|Header|fmt", ...) }}``: a Markdown table with one row per item
    of the list (or mapping, whose keys are the column ``@key``) at ``dotted`` and the columns named on the
    page (an item's key, ``key?`` for one that may be missing, its header, an optional format). A null, or a
    missing key of a record marked
    ``unavailable``, renders as "n/a", a list as its items separated by semicolons, a boolean as yes / no."""
    items = lookup(name, dotted)
    if isinstance(items, dict):  # a mapping of records: one row each, its key available as "@key"
        items = [{"@key": k, **v} for k, v in items.items() if isinstance(v, dict)]
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise MacroError(f"{ctx.src_path}: docs/data/{name} {dotted!r} is not a list or mapping of records")
    if not columns:
        raise MacroError(f"{ctx.src_path}: data_table needs at least one column")
    specs = []
    for col in columns:
        key, _, rest = col.partition("|")
        header, _, fmt = rest.partition("|")
        specs.append((key, header or key, fmt))

    def cell(item, key, fmt):
        if key.endswith("?"):  # an optional key: empty where the record has none
            key = key[:-1]
            if key not in item:
                return ""
        if key not in item and "unavailable" in item:  # a record of something that did not run
            return "n/a"
        if key not in item:
            raise MacroError(f"{ctx.src_path}: docs/data/{name} {dotted!r} has an item without {key!r}")
        v = item[key]
        if v is None:
            return "n/a"
        if isinstance(v, bool):
            return "yes" if v else "no"
        if isinstance(v, list):
            return "; ".join(str(e) for e in v) or "-"
        try:
            return format(v, fmt) if fmt else str(v)
        except (TypeError, ValueError) as exc:
            raise MacroError(f"{ctx.src_path}: {key}={v!r} cannot be formatted with {fmt!r}: {exc}") from exc

    lines = ["| " + " | ".join(h for _, h, _ in specs) + " |", "|" + "---|" * len(specs)]
    for item in items:
        lines.append("| " + " | ".join(cell(item, k, f).replace("|", "\\|") for k, _, f in specs) + " |")
    return "\n".join(lines)
