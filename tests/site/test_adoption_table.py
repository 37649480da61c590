"""The History page's adoption table shows every checkpoint of reference_impl/checkpoints.yaml with its eps,
linked to that checkpoint's config.json, and the macro names the test that checks the list."""
from __future__ import annotations

import html
import re

import pytest
import yaml

from site_hooks import adoption
from site_hooks.macros import PageContext

pytestmark = [pytest.mark.site, pytest.mark.guards("adoption.checkpoints")]


def _checkpoints():
    lst = yaml.safe_load(adoption.CHECKPOINTS.read_text())
    for group in ("rmsnorm_families", "layernorm_families"):
        for fam in lst[group]:
            for c in fam["checkpoints"]:
                yield fam["family"], c


def test_macro_renders_one_row_per_family_and_registers_its_guard():
    adoption.clear_caches()
    ctx = PageContext("history.md")
    table = adoption.adoption_table_macro(ctx)
    lst = adoption.checkpoint_list()
    rows = [r for r in table.splitlines() if r.startswith("| ") and not r.startswith("| family")]
    assert len(rows) == len(lst["rmsnorm_families"]) + len(lst["layernorm_families"])
    assert adoption.GUARD in ctx.guard_ids
    assert all(r.count(" | ") == 3 and "|  |" not in r for r in rows), "four non-empty cells per row"


def test_built_history_page_shows_every_checkpoint_eps(site_dir):
    page = (site_dir / "history" / "index.html").read_text()
    for family, c in _checkpoints():
        url = re.escape(html.escape(adoption.config_url(c["repo"])))
        eps = re.escape(format(c["eps"], "g"))
        pattern = rf"<strong>{eps}</strong>\s*<a href=\"{url}\"[^>]*>{re.escape(html.escape(c['release']))}</a>"
        assert re.search(pattern, page), f"{family}: {c['release']} ({c['repo']}, eps {c['eps']}) is not shown"


def test_a_checkpoint_whose_sources_disagree_says_so():
    """Where docs/data/checkpoints.json finds that another source gives a checkpoint's eps differently, the cell
    shows that source's value next to the one in the table."""
    import json

    rows = json.loads((adoption.REPO / "docs" / "data" / "checkpoints.json").read_text())["checkpoints"]
    split = [c for c in rows if c["family"] and any(not v["agree"] for v in c["values"].values())]
    assert split, "no family checkpoint has two disagreeing sources: nothing to show"
    adoption.clear_caches()
    table = adoption.adoption_table_macro(PageContext("history.md"))
    for c in split:
        row = next(r for r in table.splitlines() if c["repo"] in r)
        others = [r for v in c["values"].values() for r in v["readings"] if r["source"] != "hub"]
        assert "which disagrees" in row and all(format(r["value"], "g") in row for r in others), row
