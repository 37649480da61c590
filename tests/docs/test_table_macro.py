"""The ``table`` macro (site_hooks/tables.py): look-up columns, text columns with ``[[path|format]]`` look-ups,
right-aligned columns, and errors that name the page."""
from __future__ import annotations

import pytest

from site_hooks import data, tables  # noqa: F401  (registers the macros)
from site_hooks.macros import MacroError, PageContext, expand

DOC = {"t": {"a": {"median": 12.345, "min": 10.0, "max": 15.5, "ok": True}, "b": {"median": 2.0, "min": 1.0,
                                                                                "max": 3.0, "ok": False}}}


@pytest.fixture
def fake_data(monkeypatch):
    monkeypatch.setattr(data, "load", lambda name: DOC if name == "fake.json" else data.load(name))


def test_text_cells_hold_lookups_and_headers_align(fake_data):
    page = '''{{ table("fake.json", [("first", "a"), ("second", "b")],
        ("name", "={row[0]}"),
        (">median", "t.{row[1]}.median", ".1f"),
        ("range", "=[[t.{row[1]}.min|.0f]] to [[t.{row[1]}.max]] ([[t.{row[1]}.ok]])")) }}'''
    out = expand(page, PageContext("page.md")).split("\n")
    assert out == ["| name | median | range |", "|---|---:|---|",
                   "| first | 12.3 | 10 to 15.5 (True) |", "| second | 2.0 | 1 to 3.0 (False) |"]


def test_a_missing_key_in_a_text_cell_names_it(fake_data):
    with pytest.raises(MacroError, match="t.a.nope"):
        expand('{{ table("fake.json", ["a"], ("x", "=[[t.{row}.nope]]")) }}', PageContext("page.md"))


def test_brackets_around_a_lookup_stay_text(fake_data):
    out = expand('{{ table("fake.json", ["a"], ("x", "=[[[t.{row}.min|.0f]], [[t.{row}.max|.0f]]]")) }}',
                 PageContext("page.md"))
    assert out.split("\n")[2] == "| [10, 16] |"
