"""The "checked by" lists and badges say what happened to each test: how many passed, failed or were
skipped in phase 1, and which are site tests that run after the build (phase 2 of ``make test``), with the
previous phase 2's outcome when one is recorded, instead of "not run yet" for the whole list."""
from __future__ import annotations

import re

import pytest

from site_hooks import guards

pytestmark = pytest.mark.guards("site.machinery")

CORE = "tests/docs/test_ledger.py::test_every_ledger_entry_is_well_formed"
CORE2 = "tests/docs/test_ledger.py::test_canonical_list_has_each_claim_once_in_order"
SITE = "tests/site/test_build.py::test_strict_build"


def _entry(outcome):
    return {"outcome": outcome, "duration": 0.1, "guards": []}


@pytest.fixture
def runs(monkeypatch):
    """Sets the phase-1 and the previous phase-2 outcomes the guards module reads."""
    def set_runs(core: dict, site: dict | None = None):
        monkeypatch.setattr(guards, "results", lambda: {"tests": core})
        monkeypatch.setattr(guards, "site_results",
                            lambda: {} if site is None else {"date": "2026-12-01T10:00:00+00:00", "tests": site})
    return set_runs


def _plain(html_text: str) -> str:
    return re.sub(r"<[^>]+>", "", html_text).strip()


def test_site_tests_are_found_by_their_marker():
    guards.clear_caches()
    assert guards.test_exists(SITE), "pick a site test that exists"
    assert guards.is_site_test(SITE)
    assert not guards.is_site_test(CORE)


def test_list_counts_passed_and_after_build(runs):
    runs({CORE: _entry("passed"), CORE2 + "[a]": _entry("passed")})
    text = guards.summary_text([CORE, CORE2, SITE])
    assert _plain(text) == "\u2713 checked by 3 tests: 2 passed; 1 runs after the build"
    assert "guard-passed" in text
    assert "not run yet" not in text


def test_site_test_shows_the_previous_phase_2(runs):
    runs({CORE: _entry("passed")}, site={SITE: _entry("passed")})
    o = guards.outcome(SITE)
    assert o["status"] == "after-build"
    assert o["text"] == "runs after the build (previous run 2026-12-01: 1 passed)"
    runs({CORE: _entry("passed")}, site=None)            # no phase 2 recorded yet
    assert guards.outcome(SITE)["text"] == "runs after the build"


def test_failures_and_missing_phase_1_results_are_still_said(runs):
    runs({CORE: _entry("failed")})
    text = _plain(guards.summary_text([CORE, CORE2, SITE]))
    assert text == "\u2717 checked by 3 tests: 1 failed; 1 runs after the build; 1 not run yet"


def test_all_passed_and_site_only_badges(runs):
    runs({CORE: _entry("passed"), CORE2: _entry("passed")})
    assert _plain(guards.summary_text([CORE, CORE2])) == "\u2713 checked by 2 tests: all passed"
    assert _plain(guards.badge_text([SITE])) == "\u25cb tested after the build"
    assert "guard-not-run guard-after-build" in guards.badge_text([SITE])
