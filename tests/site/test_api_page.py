"""The built API page: no emphasis spans a formula (a bare `*` in a docstring turns it into italics), and the
tolerance policy's gamma formula shows its `*` as written."""
from __future__ import annotations

import html
import re

import pytest

from tests.docs.test_api_docstrings import KNOWN_SLIPS, WORDS

pytestmark = pytest.mark.site
EMPHASIS = re.compile(r"<(em|strong)>(.*?)</\1>", re.S)
TAGS = re.compile(r"<[^>]+>")


def test_api_page_has_no_emphasis_over_formulas(site_dir):
    page = (site_dir / "api" / "index.html").read_text(encoding="utf-8")
    bad = [m.group(0) for m in EMPHASIS.finditer(page) if not WORDS.fullmatch(html.unescape(m.group(2)))]
    # the slips of KNOWN_SLIPS (modules another change owns) are allowed until they are mended, no others
    assert len(bad) <= len(KNOWN_SLIPS), bad
    text = html.unescape(TAGS.sub("", page))
    assert "gamma_n = n*u / (1 - n*u)" in text
