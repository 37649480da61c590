"""The Engines page's macros (site_hooks/engines.py) drawn from the committed docs/data/engines.json: every
row has its block, every model type its anchor (the Find-your-model cards link to it), and each cell says
what its row says. Runs the macros directly, without a site build."""
from __future__ import annotations

import re

import pytest

from reference_impl.provenance import REPO
from site_hooks import engines as E
from site_hooks.macros import MacroError, PageContext

CTX = PageContext("engines.md")


@pytest.fixture(scope="module")
def doc():
    """The committed file, schema-checked, given to the macros (its provenance hash is tested with every
    data file in tests/studies/test_data_files.py; the build checks both)."""
    import json

    from reference_impl.studies.schemas import check_data
    from site_hooks import data

    raw = json.loads((REPO / "docs" / "data" / E.FILE).read_text(encoding="utf-8"))
    check_data(raw, E.FILE, "docs/data/engines.json")
    mp = pytest.MonkeyPatch()
    real = data.load
    mp.setattr(data, "load", lambda name: raw if name == E.FILE else real(name))
    E.clear_caches()
    yield E.engines()
    mp.undo()
    E.clear_caches()


def test_every_row_has_its_block_and_every_difference_its_advice(doc):
    text = E.differences(CTX)
    for r in doc["rows"]:
        assert f'<a id="{E.anchor(r)}"></a>' in text, r["id"]
    at = sorted((text.index(f'<a id="{E.anchor(r)}"></a>'), r) for r in doc["rows"])
    assert len({i for i, _ in at}) == len(doc["rows"])  # one block per row
    for (i, r), (j, _) in zip(at, at[1:] + [(len(text), None)]):
        block = text[i:j]
        assert (r["verdict"] != "identical") == ("What to do:" in block), r["id"]
        assert r["sha256"][:E.SHORT] in block and f"line {r['line']}" in block


def test_matrix_has_a_column_per_model_type_and_cells_that_link_to_their_rows(doc):
    for residual in (False, True):
        table = E.matrix_table(CTX, residual)
        head = table.splitlines()[0]
        assert head.count("|") == len(doc["model_types"]) + 2
        rows = [r for r in doc["rows"] if r["residual"] == residual]
        for r in rows:
            assert f"(#{E.anchor(r)})" in table
        cells = re.findall(r"\[([^\]]+)\]\(#e-", table)
        assert len(cells) == len(rows)
        assert sum(c == "identical" for c in cells) == sum(r["verdict"] == "identical" for r in rows)


def test_each_model_type_has_the_anchor_the_model_cards_link_to(doc):
    text = E.by_model(CTX)
    for m in doc["model_types"]:
        assert f'<span id="model-{m}"></span>' in text
    js = (REPO / "docs" / "assets" / "javascripts" / "models.js").read_text()
    assert '"../engines/#model-" + (m.base ? m.base.t : m.t)' in js


def test_counts_come_from_the_file(doc):
    assert E.count(CTX, "rows") == str(len(doc["rows"]))
    assert E.count(CTX, "pairs") == str(len(doc["matrix"]))
    with pytest.raises(MacroError, match="engines_count knows"):
        E.count(CTX, "nonsense")
    pairs = E.pairs_table(CTX).splitlines()
    assert len(pairs) == 2 + len(doc["matrix"])


def test_read_kernels_show_each_step_with_its_line(doc):
    text = E.read_table(CTX)
    for k in doc["read"]:
        assert f"`{k['function']}`" in text
        for s in k["steps"]:
            assert f"| {s['aspect']} | {s['line']} |" in text
