"""A tiny macro layer: ``{{ name("arg", ...) }}`` in a page is replaced by the registered handler's output.

Handlers live in sibling modules and register with :func:`macro`. An unknown macro or a handler error
fails the (strict) build, naming the page. A backslash before the braces, ``\\{{ name() }}``, leaves the
macro text in the page unexpanded (without the backslash), e.g. to document the macros themselves.
"""
from __future__ import annotations

import ast
import re

MACRO_RE = re.compile(r"(\\?)\{\{\s*([A-Za-z_]\w*)\((.*?)\)\s*\}\}", re.S)
HANDLERS: dict = {}


class MacroError(Exception):
    pass


def macro(name):
    def register(fn):
        HANDLERS[name] = fn
        return fn

    return register


class PageContext:
    """Per-page state handlers may use: the page path and the guard ids it showed."""

    def __init__(self, src_path: str):
        self.src_path = src_path
        self.guard_ids: list[str] = []


def expand(markdown: str, ctx: PageContext) -> str:
    def repl(m: re.Match) -> str:
        escaped, name, raw = m.group(1), m.group(2), m.group(3)
        if escaped:
            return m.group(0)[1:]
        if name not in HANDLERS:
            raise MacroError(f"{ctx.src_path}: unknown macro {name!r} in {m.group(0)!r}")
        try:
            args = ast.literal_eval(f"({raw},)") if raw.strip() else ()
        except (ValueError, SyntaxError) as exc:
            raise MacroError(f"{ctx.src_path}: cannot parse arguments of {m.group(0)!r}: {exc}") from exc
        out = str(HANDLERS[name](ctx, *args))
        # a macro alone on an indented line (inside a collapsed block, a list item) keeps its later lines
        # at that indentation, so a multi-line table stays inside the block
        line_start = markdown.rfind("\n", 0, m.start()) + 1
        prefix = markdown[line_start:m.start()]
        if prefix and not prefix.strip() and "\n" in out:
            out = out.replace("\n", "\n" + prefix)
        return out

    return MACRO_RE.sub(repl, markdown)
