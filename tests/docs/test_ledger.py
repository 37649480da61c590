"""The claims ledger is well formed: the canonical list holds C01..C48 once each, every entry follows the
schema of ``site_hooks/ledger.py``, and the machinery rejects what it must reject.

Completeness (every claim judged) and the outcomes of evidence tests are checked in phase 2
(``tests/site/test_ledger_site.py``), after the tests have run.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from site_hooks import guards, ledger

REPO = Path(__file__).resolve().parents[2]
IDS = [f"C{n:02d}" for n in range(1, 49)]
OWNERS = {"symbolic", "conventions", "rsqrt", "cpu", "cuda", "advice", "practice", "training"}


def _canonical():
    ledger.clear_caches()
    return ledger.canonical()


def test_canonical_list_has_each_claim_once_in_order():
    claims = _canonical()
    assert [c["id"] for c in claims] == IDS
    sources = ledger.sources()
    themes = {t["key"] for t in ledger.themes()}
    assert set(sources) == {"000", "002", "004"} and len(themes) >= 4
    for sid, src in sources.items():
        assert {"label", "title_zh", "title_en", "kind"} <= set(src), sid
        assert all(isinstance(src[k], str) and src[k].strip() for k in ("label", "title_zh", "title_en", "kind")), sid
    for c in claims:
        assert set(c) == {"id", "source", "theme", "claim", "owner", "gpu"}, c["id"]
        assert c["theme"] in themes, c["id"]
        assert isinstance(c["claim"], str) and len(c["claim"]) > 20, c["id"]
        assert re.fullmatch(r"\d{3}(,\d{3})*", c["source"]), c["id"]
        assert all(s in sources for s in c["source"].split(",")), c["id"]
        assert c["owner"] in OWNERS, c["id"]
        assert isinstance(c["gpu"], bool), c["id"]
    assert len({c["claim"] for c in claims}) == len(claims), "two claims share a paraphrase"


def test_canonical_list_matches_the_project_brief_when_present():
    """CI keeps a read-only copy of the brief beside the clone; the in-repo list must not drift from it."""
    brief = REPO.parent / "shared" / "CLAIMS.md"
    if not brief.is_file():
        pytest.skip("the project brief (../shared/CLAIMS.md) is not beside this clone")
    rows = dict(re.findall(r"^\| (C\d\d) \| [\d, ]+ \| (.*) \|$", brief.read_text(), re.M))
    assert sorted(rows) == IDS
    assert {c["id"]: c["claim"] for c in _canonical()} == rows


@pytest.mark.guards("ledger.schema")
def test_every_ledger_entry_is_well_formed():
    ledger.clear_caches()
    guards.clear_caches()
    found, problems = ledger.entries()
    assert not problems, "ledger problems:\n" + "\n".join(problems)
    files = {p.stem for p in ledger.ledger_files()}
    assert files <= OWNERS, f"unexpected ledger files: {sorted(files - OWNERS)}"
    for cid, e in found.items():
        assert e["_file"] == f"ledger/{ledger.canonical()[IDS.index(cid)]['owner']}.yaml"


@pytest.mark.guards("ledger.schema")
def test_advice_ledger_is_complete():
    """The claims this module's owner judges (ledger/advice.yaml) are all there, each with a test."""
    ledger.clear_caches()
    found, problems = ledger.entries()
    assert not problems
    mine = [c["id"] for c in ledger.canonical() if c["owner"] == "advice"]
    assert mine == ["C06", "C19", "C23", "C24", "C26", "C27", "C28", "C30", "C31", "C33", "C37"]
    for cid in mine:
        assert cid in found, f"{cid} missing from ledger/advice.yaml"
        assert found[cid]["_file"] == "ledger/advice.yaml"
    with_tests = [cid for cid in mine if ledger.evidence_tests(found[cid])]
    # C06 and C31 are settled by citation; every other advice claim has a test that measures something
    assert set(mine) - set(with_tests) <= {"C06", "C31"}


KNOWN = {"C01": {"id": "C01", "owner": "conventions", "gpu": False},
         "C16": {"id": "C16", "owner": "cuda", "gpu": True}}
GOOD = {"id": "C01", "verdict": "verified", "claim": "a paraphrase of the claim",
        "finding": "what the evidence shows", "evidence": [{"cite": "Ioffe & Szegedy, arXiv:1502.03167, section 3"}]}


@pytest.mark.guards("ledger.schema")
@pytest.mark.parametrize("change, message", [
    ({"verdict": "true"}, "verdict must be one of"),
    ({"verdict": "unverifiable"}, "verdict must be one of"),
    ({"evidence": []}, "non-empty list"),
    ({"evidence": [{"test": "tests/core/test_reference.py::test_that_does_not_exist"}]}, "does not exist"),
    ({"evidence": [{"test": "tests/nowhere.py::test_x"}]}, "does not exist"),
    ({"evidence": [{"data": "no_such_file.json"}]}, "does not exist"),
    ({"evidence": [{"data": "../../README.md"}]}, "does not exist"),
    ({"evidence": [{"cite": "a blog"}]}, "too short"),
    ({"evidence": [{"cite": "Some paper, arXiv:abc, section 2"}]}, "not an arXiv id"),
    ({"evidence": [{"test": "x", "cite": "y"}]}, "must be one of"),
    ({"evidence": [{"url": "https://example.org/a/long/enough/link"}]}, "must be one of"),
    ({"id": "C99"}, "not in ledger/claims.yaml"),
    ({"id": "c1"}, "id must look like"),
    ({"finding": ""}, "finding must be a sentence"),
    ({"source": "x"}, "unknown keys"),
    ({"gpu_data": "cuda.json"}, "only for claims marked gpu"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_schema_rejects(change, message):
    guards.clear_caches()
    entry = dict(GOOD, **change)
    problems = ledger.check_entry(entry, KNOWN, "conventions")
    assert any(message in p for p in problems), problems


@pytest.mark.guards("ledger.schema")
def test_schema_accepts_and_checks_owner():
    guards.clear_caches()
    assert ledger.check_entry(GOOD, KNOWN, "conventions") == []
    assert ledger.check_entry(dict(GOOD, evidence=[{"test": "tests/docs/test_ledger.py::test_schema_accepts_and_checks_owner"}]),
                              KNOWN, "conventions") == []
    missing = dict(GOOD)
    del missing["evidence"]
    assert any("missing keys" in p for p in ledger.check_entry(missing, KNOWN, "conventions"))
    assert any("belongs in ledger/conventions.yaml" in p for p in ledger.check_entry(GOOD, KNOWN, "advice"))
    gpu = dict(GOOD, id="C16", gpu_data="cuda_bench.json")
    assert ledger.check_entry(gpu, KNOWN, "cuda") == []


@pytest.mark.guards("ledger.schema")
def test_duplicates_across_files_are_reported(tmp_path, monkeypatch):
    (tmp_path / "claims.yaml").write_text(yaml.safe_dump([dict(KNOWN["C01"], source="000", claim="c")]))
    (tmp_path / "conventions.yaml").write_text(yaml.safe_dump([GOOD]))
    (tmp_path / "cuda.yaml").write_text(yaml.safe_dump([GOOD]))
    (tmp_path / "cpu.yaml").write_text("- id: [unclosed\n")
    monkeypatch.setattr(ledger, "LEDGER", tmp_path)
    monkeypatch.setattr(ledger, "CANONICAL", tmp_path / "claims.yaml")
    ledger.clear_caches()
    try:
        found, problems = ledger.entries()
        text = "\n".join(problems)
        assert "duplicate" in text and "not valid YAML" in text and "belongs in ledger/conventions.yaml" in text
        assert set(found) == {"C01"}
    finally:
        ledger.clear_caches()
