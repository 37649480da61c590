"""MkDocs hook entry point (see ``hooks:`` in mkdocs.yml)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mkdocs.exceptions import PluginError  # noqa: E402

from site_hooks import adoption, data, guards, ledger, mathsvg, placements, plots, wording  # noqa: E402,F401  (registers macros)
from site_hooks import searchtext  # noqa: E402  (formulas as plain text in the search index)
from site_hooks.macros import MacroError, PageContext, expand  # noqa: E402

from site_hooks import bench, catalog, formulas, tables  # noqa: E402,F401  (benchmark, catalog, formula and table macros)
from site_hooks import census  # noqa: E402,F401  (the "Find your model" page's macros)
from site_hooks import training  # noqa: E402,F401  (the Training page's table of machines)
from site_hooks import distributed  # noqa: E402,F401  (the distributed page's table of machines)
from site_hooks import rsqrt  # noqa: E402,F401  (the rsqrt page's table of machines)
from site_hooks import float_edges  # noqa: E402,F401  (float32 range edges on the numerics page)
from site_hooks import engines  # noqa: E402,F401  (the Engines page's tables)


def on_pre_build(config):
    missing = catalog.missing_cards()
    if missing:
        raise PluginError("catalog norms without their section card {{ norm(...) }}: " + ", ".join(missing))
    # `mkdocs serve` rebuilds in the same process: re-read tests, results, ledger and data every time
    # (any handler module may define clear_caches() to take part)
    data.load.cache_clear()
    for name, module in list(sys.modules.items()):
        if name.startswith("site_hooks.") and callable(getattr(module, "clear_caches", None)):
            module.clear_caches()


def on_page_markdown(markdown, page, config, files):
    ctx = PageContext(page.file.src_path)
    try:
        out = expand(markdown, ctx)
    except MacroError as exc:
        raise PluginError(str(exc)) from exc
    return out + guards.page_footer(ctx)


# Search ranks a notebook below the pages it illustrates: its code and output repeat their words many times
# (a page's own ``search: boost:`` front matter does this for Markdown pages; notebooks have none).
NOTEBOOK_SEARCH_BOOST = 0.5


def on_page_content(html, page, config, files):
    # runs before the search plugin indexes the page (on_page_context)
    if page.file.src_path.endswith(".ipynb"):
        search = page.meta.setdefault("search", {}) if isinstance(page.meta, dict) else {}
        search.setdefault("boost", NOTEBOOK_SEARCH_BOOST)
    return html


def on_post_page(output, page, config):
    try:
        return mathsvg.render_page(output, page.file.src_path)
    except mathsvg.MathError as exc:
        raise PluginError(str(exc)) from exc


def on_post_build(config):
    mathsvg.clear_caches()
    # hooks run after the plugins listed in mkdocs.yml, so the search plugin has written its index by now
    try:
        searchtext.rewrite_index(config["site_dir"])
    except ValueError as exc:
        raise PluginError(str(exc)) from exc
