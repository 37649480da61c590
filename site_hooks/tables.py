"""``{{ table(...) }}``: a table of numbers from a data file, as one macro call whose columns are named on
the page (instead of a Markdown table of ``data`` calls, or Markdown prepared inside a data file).

    {{ table("numerics.json", [1, 2, 7],
             ("RMS of the row", "fp16_overflow.rows.{row}.rms", "g"),
             ("squares that overflow", "fp16_overflow.rows.{row}.fraction_of_squares_inf", ".2%")) }}

Arguments: the data file, the row keys (any literals: numbers, strings, tuples), then one
``(header, path, format)`` per column. ``path`` and ``format`` are Python format strings in ``row`` (the
row's key: ``{row}``, ``{row[0]}``); a path that starts with ``=`` is text, not a look-up
(``"={row[0]}"`` prints the first item of the key). Inside such a text, ``[[path|format]]`` is a look-up,
so one cell can hold several values: ``"=[[t.{row}.median|.0f]] ([[t.{row}.min|.0f]] to [[t.{row}.max|.0f]])"``.
Values are formatted as the ``data`` macro does. A header that starts with ``>`` is right-aligned (the
``>`` is not shown), for columns of numbers.
"""
from __future__ import annotations

import re

from .data import data_macro
from .macros import MacroError, macro


LOOKUP = re.compile(r"\[\[([^|\[\]]+)(?:\|([^\]]*))?\]\]")


@macro("table")
def table_macro(ctx, name: str, rows, *columns) -> str:
    if not isinstance(rows, (list, tuple)) or not rows:
        raise MacroError(f"{ctx.src_path}: table({name!r}, ...) needs a non-empty list of row keys")
    if not columns:
        raise MacroError(f"{ctx.src_path}: table({name!r}, ...) names no column")
    for col in columns:
        if not (isinstance(col, tuple) and len(col) in (2, 3) and all(isinstance(c, str) for c in col)):
            raise MacroError(f"{ctx.src_path}: a table column is (header, path[, format]), got {col!r}")
    right = [c[0].startswith(">") for c in columns]
    lines = ["| " + " | ".join(c[0][1:] if r else c[0] for c, r in zip(columns, right)) + " |",
             "|" + "".join("---:|" if r else "---|" for r in right)]
    for row in rows:
        cells = []
        for col in columns:
            path, fmt = col[1], (col[2] if len(col) == 3 else "")
            try:
                path, fmt = path.format(row=row), fmt.format(row=row)
            except (IndexError, KeyError, AttributeError) as exc:
                raise MacroError(f"{ctx.src_path}: column {col[0]!r}: {col[1]!r} does not fit row {row!r}: {exc}") from exc
            if path.startswith("="):  # text, with any [[path|format]] look-ups filled in
                cells.append(LOOKUP.sub(lambda m: data_macro(ctx, name, m.group(1), m.group(2) or ""), path[1:]))
            else:
                cells.append(data_macro(ctx, name, path, fmt))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
