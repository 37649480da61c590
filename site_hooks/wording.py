"""Signed figures in words: "7% less time" or "4% more time", never "-4% less time" or "-0%"."""
from __future__ import annotations

from .data import lookup
from .macros import MacroError, macro


def signed_words(value: float, fmt: str, down: str, up: str, same: str) -> str:
    """``value`` > 0 is read with ``down`` ("less time"), < 0 with ``up`` ("more time"); a value that rounds to
    zero in ``fmt`` is ``same`` ("about the same time"), so no page prints a minus zero."""
    shown = format(abs(value), fmt)
    if format(0.0, fmt) == shown:
        return same
    return f"{shown} {down if value > 0 else up}"


@macro("signed")
def signed_macro(ctx, name: str, dotted: str, fmt: str, down: str, up: str, same: str = "about the same") -> str:
    """``{{ signed("bench_cpu.json", "a.b", ".0%", "less time", "more time") }}``: the size of a signed figure
    with the word for its direction."""
    value = lookup(name, dotted)
    if value is None:
        return "n/a"
    if not isinstance(value, (int, float)):
        raise MacroError(f"{ctx.src_path}: docs/data/{name} {dotted!r} = {value!r} is not a number")
    return signed_words(float(value), fmt, down, up, same)
