"""The doc-linking machinery itself: the results recorder (tests/conftest.py), the guard scanner and outcome
aggregation (site_hooks/guards.py), and the macro layer (site_hooks/macros.py)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from site_hooks import data, guards, macros  # noqa: F401  (importing registers the macros)

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.guards("site.machinery")


def _recorder():
    spec = importlib.util.spec_from_file_location("_recorder_under_test", REPO / "tests" / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


META = {"commit": "abc", "date": "2026-01-01T00:00:00+00:00", "machine": {"cpu": "x"}, "markexpr": "not site",
        "exitstatus": 0}


def _entry(outcome):
    return {"outcome": outcome, "duration": 0.1, "guards": []}


def test_full_run_replaces_and_partial_run_merges(tmp_path, monkeypatch):
    rec = _recorder()
    monkeypatch.setattr(rec, "BUILD", tmp_path)
    rec._write("r.json", {"tests/a.py::t[1]": _entry("failed"), "tests/a.py::t[2]": _entry("passed"),
                          "tests/b.py::u": _entry("passed")}, META, full=True)
    # a partial run that re-ran tests/a.py::t (now with one parametrization) replaces all of t's entries
    rec._write("r.json", {"tests/a.py::t[3]": _entry("passed")}, dict(META, date="later"), full=False)
    data = json.loads((tmp_path / "r.json").read_text())
    assert set(data["tests"]) == {"tests/a.py::t[3]", "tests/b.py::u"}
    assert data["date"] == META["date"] and data["partial_runs"][0]["date"] == "later"
    # a full run starts over
    rec._write("r.json", {"tests/c.py::v": _entry("passed")}, META, full=True)
    data = json.loads((tmp_path / "r.json").read_text())
    assert set(data["tests"]) == {"tests/c.py::v"} and data["partial_runs"] == []


@pytest.mark.parametrize("outcomes, status", [
    (["passed", "passed"], "passed"),
    (["passed", "skipped"], "passed"),
    (["passed", "failed"], "failed"),
    (["passed", "xpassed"], "failed"),
    (["passed", "not run"], "not-run"),
    (["skipped", "xfailed"], "skipped"),
    ([], "not-run"),
])
def test_outcome_aggregates_parametrizations(monkeypatch, outcomes, status):
    tests = {f"tests/x.py::test_f[{i}]": _entry(o) for i, o in enumerate(outcomes)}
    tests["tests/x.py::test_f_other"] = _entry("failed")  # a different function with the same prefix
    monkeypatch.setattr(guards, "results", lambda: {"tests": tests})
    assert guards.outcome("tests/x.py::test_f")["status"] == status


def test_scanner_finds_marks_on_functions_classes_and_modules():
    by_id, all_tests = guards.scan_tests()
    assert "tests/docs/test_site_machinery.py::test_scanner_finds_marks_on_functions_classes_and_modules" in all_tests
    # module-level pytestmark reaches every test of this file
    assert "tests/docs/test_site_machinery.py::test_full_run_replaces_and_partial_run_merges" in by_id["site.machinery"]
    assert "tests/studies/test_advice.py::test_torch_grad_scaler_is_dynamic_not_fixed" in by_id["C19"]
    assert guards.test_exists("tests/docs/test_ledger.py::test_every_ledger_entry_is_well_formed")
    assert not guards.test_exists("tests/docs/test_ledger.py::test_that_is_not_there")


def test_macros_expand_escape_and_fail_loudly():
    ctx = macros.PageContext("page.md")
    assert macros.expand('a {{ data("advice.json", "loss_scale.scale_log2") }} b', ctx) == "a 8 b"
    assert macros.expand('\\{{ guards("x") }}', ctx) == '{{ guards("x") }}'  # escaped: left as text
    with pytest.raises(macros.MacroError, match="unknown macro 'nope'"):
        macros.expand("{{ nope() }}", ctx)
    with pytest.raises(macros.MacroError, match="no test is marked"):
        macros.expand('{{ guards("no.such.guard.id") }}', ctx)
    with pytest.raises(macros.MacroError, match="does not exist"):
        macros.expand('{{ test("tests/docs/test_ledger.py::test_missing") }}', ctx)
    with pytest.raises(macros.MacroError, match="cannot parse"):
        macros.expand('{{ data("a.json", ) ) }}', ctx)


def test_guard_marks_inside_parametrize_are_found():
    import ast

    dec = ast.parse('pytest.mark.parametrize("v", [1, pytest.param(2, marks=pytest.mark.guards("p.id"))])',
                    mode="eval").body
    assert guards._guard_args(dec) == ["p.id"]
    assert guards._guard_args(ast.parse("pytest.mark.slow", mode="eval").body) is None
