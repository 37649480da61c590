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
