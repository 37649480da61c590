"""The API page's docstrings read as written: no `*` or `_` in a formula turns into italics.

docs/api.md renders docstrings with mkdocstrings, which reads them as Markdown, so ``n*u / (1 - n*u)``
written bare shows as "n" followed by an italic "u / (1 - n" and a lost `*`. Every docstring the page
shows (the modules of its ``:::`` lines and their members) is rendered here with Python-Markdown; any
emphasis must span words only. Formulas belong in backticks.
"""
from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import markdown
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
API = REPO / "docs" / "api.md"
EMPHASIS = re.compile(r"<(em|strong)>(.*?)</\1>", re.S)
WORDS = re.compile(r"[A-Za-z][A-Za-z'\s,-]*")
# docstrings of modules another change owns, with a slip that is known and not yet mended there: the test
# is expected to fail for them (strict, so it says when the slip is gone and the entry can go)
KNOWN_SLIPS: dict[str, str] = {}


def _directives() -> list[tuple[str, list[str] | None]]:
    """(module, members or None) for every ``::: module`` line of the API page."""
    out, lines = [], API.read_text().splitlines()
    for i, raw in enumerate(lines):
        line = raw.lstrip()
        indent = len(raw) - len(line)  # a directive may sit inside a folded block
        if line.startswith("::: "):
            members = None
            block = []
            for nxt in lines[i + 1:]:
                if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent:
                    break
                block.append(nxt[indent:])
            if block:
                opts = yaml.safe_load("\n".join(block)) or {}
                members = (opts.get("options") or {}).get("members")
            out.append((line[4:].strip(), members))
    return out


def _docstrings() -> dict[str, str]:
    docs = {}
    for name, members in _directives():
        module = importlib.import_module(name)
        docs[name] = inspect.getdoc(module) or ""
        public = getattr(module, "__all__", None)  # a module that re-exports names lists them in __all__
        names = members or [n for n, v in vars(module).items() if not n.startswith("_")
                            and (inspect.isfunction(v) or inspect.isclass(v))
                            and (v.__module__ == name or (public is not None and n in public))]
        for n in names:
            obj = getattr(module, n)
            docs[f"{name}.{n}"] = inspect.getdoc(obj) or ""
            if inspect.isclass(obj):
                for m, v in vars(obj).items():
                    if not m.startswith("_") and callable(v) and inspect.getdoc(v):
                        docs[f"{name}.{n}.{m}"] = inspect.getdoc(v)
    return docs


def _code_like_emphasis(doc: str) -> list[str]:
    html = markdown.markdown(doc)
    return [m.group(0) for m in EMPHASIS.finditer(html) if not WORDS.fullmatch(m.group(2))]


def test_the_api_page_shows_docstrings():
    docs = _docstrings()
    assert "reference_impl.tolerances.gamma" in docs and len(docs) > 30, sorted(docs)


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=KNOWN_SLIPS[n])) if n in KNOWN_SLIPS else n
    for n in sorted(_docstrings())])
def test_no_formula_in_a_docstring_turns_into_italics(name):
    bad = _code_like_emphasis(_docstrings()[name])
    assert not bad, f"{name}: Markdown emphasis over code-like text {bad}; put the formula in backticks"


def test_the_check_can_fail():
    assert _code_like_emphasis("Higham's gamma_n = n*u / (1 - n*u); requires n*u < 1.")
    assert not _code_like_emphasis("Higham's ``gamma_n = n*u / (1 - n*u)``; the *uncast* value.")
