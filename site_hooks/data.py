"""Numbers on pages come from data files under docs/data/, never typed by hand."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from .macros import MacroError, macro

DATA = Path(__file__).resolve().parent.parent / "docs" / "data"


@lru_cache(maxsize=None)
def load(name: str):
    path = DATA / name
    if not path.exists():
        raise MacroError(f"data file docs/data/{name} does not exist")
    return json.loads(path.read_text())


def lookup(name: str, dotted: str):
    node = load(name)
    for key in dotted.split("."):
        if isinstance(node, list):
            node = node[int(key)]
        elif isinstance(node, dict) and key in node:
            node = node[key]
        else:
            raise MacroError(f"docs/data/{name} has no key {dotted!r} (stopped at {key!r})")
    return node


@macro("data")
def data_macro(ctx, name: str, dotted: str, fmt: str = "") -> str:
    """``{{ data("file.json", "a.b.0.c", ".3g") }}``: a value from a data file, formatted."""
    value = lookup(name, dotted)
    return format(value, fmt) if fmt else str(value)
