"""One reading order: the site's navigation, the Home page's reading list and the Start page's "Where next"
list name the pages in the same order (the footer's previous/next links follow the navigation)."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
LINK = re.compile(r"\]\(([\w/.-]+\.md)(?:#[\w-]*)?\)")


class _Tolerant(yaml.SafeLoader):
    pass


_Tolerant.add_multi_constructor("", lambda loader, suffix, node: None)


def nav_order() -> list[str]:
    nav = (yaml.load((REPO / "mkdocs.yml").read_text(), Loader=_Tolerant) or {})["nav"]
    out: list[str] = []

    def walk(items):
        for item in items:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            if isinstance(value, list):
                walk(value)
            elif isinstance(value, str):
                out.append(value)

    walk(nav)
    return out


def links_in(page: str, start: str, stop: str | None) -> list[str]:
    text = (DOCS / page).read_text()
    i = text.index(start)
    j = text.index(stop, i) if stop else len(text)
    return list(dict.fromkeys(LINK.findall(text[i:j])))


def _assert_in_nav_order(links: list[str], where: str) -> None:
    order = nav_order()
    missing = [link for link in links if link not in order]
    assert not missing, f"{where} links to pages that are not in the navigation: {missing}"
    positions = [order.index(link) for link in links]
    assert positions == sorted(positions), f"{where} lists {links}, the navigation has {order}"
    assert len(links) >= 5, f"{where}: only {links} found (the probe is broken)"


def test_every_page_is_in_the_navigation():
    pages = sorted(p.relative_to(DOCS).as_posix() for p in list(DOCS.rglob("*.md")) + list(DOCS.rglob("*.ipynb"))
                   if ".ipynb_checkpoints" not in p.parts and not p.name.upper().startswith("README"))
    assert sorted(nav_order()) == pages


def test_home_reading_list_follows_the_navigation():
    _assert_in_nav_order(links_in("index.md", "1. **Read**", "2. **Copy.**"), "index.md's reading list")


def test_start_where_next_follows_the_navigation():
    _assert_in_nav_order(links_in("start.md", "## Where next", None), "start.md's 'Where next'")


def test_the_order_check_can_fail():
    order = nav_order()
    try:
        _assert_in_nav_order(list(reversed(order[:6])), "reversed")
    except AssertionError as exc:
        assert "the navigation has" in str(exc)
    else:
        raise AssertionError("a reversed list passed the order check")
