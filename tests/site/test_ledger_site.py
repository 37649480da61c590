"""Phase 2: the ledger is complete and its evidence holds.

Runs after phase 1 (``pytest -m "not site"``) has written ``build/test-results.json``. Fails when a claim of
``ledger/claims.yaml`` has no verdict or no evidence, when an evidence test does not exist, or when it did
not pass in that run; and checks that the built claims page shows what the ledger says.
"""
from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from site_hooks import guards, ledger

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "build" / "test-results.json"
pytestmark = pytest.mark.site


@pytest.fixture(scope="module")
def loaded():
    guards.clear_caches()
    ledger.clear_caches()
    found, problems = ledger.entries()
    return ledger.canonical(), found, problems


def test_every_claim_has_a_verdict_and_evidence(loaded):
    claims, found, problems = loaded
    assert not problems, "ledger problems:\n" + "\n".join(problems)
    missing = [f"{c['id']} (expected in ledger/{c['owner']}.yaml)" for c in claims if c["id"] not in found]
    assert not missing, "claims without a verdict: " + ", ".join(missing)
    assert [c["id"] for c in claims] == [f"C{n:02d}" for n in range(1, 49)]
    for c in claims:
        e = found[c["id"]]
        assert e["verdict"] in ledger.VERDICTS, c["id"]
        assert e["evidence"], f"{c['id']} has no evidence"


def test_every_evidence_test_exists_and_passed(loaded):
    _, found, _ = loaded
    assert RESULTS.is_file(), "build/test-results.json is missing: run phase 1 (pytest -m 'not site') first"
    bad = []
    for cid, e in sorted(found.items()):
        for t in ledger.evidence_tests(e):
            if not guards.test_exists(t):
                bad.append(f"{cid}: {t} does not exist")
                continue
            o = guards.outcome(t)
            if o["status"] != "passed":
                bad.append(f"{cid}: {t} did not pass in the last run ({o['text']})")
    assert not bad, "\n".join(bad)


def _site_page(site_dir: Path) -> str:
    page = site_dir / "claims" / "index.html"
    assert page.is_file(), "the claims page was not built"
    return page.read_text()


def test_claims_page_shows_every_verdict_once_with_its_finding(loaded, site_dir):
    """Per claim: a summary row with three filled cells (claim, verdict, paraphrase and its article), a
    section with the verdict, the finding shown once (in the section, not in the row), and the GPU note
    where a GPU measurement is missing. The source articles are named by their titles."""
    claims, found, _ = loaded
    page = _site_page(site_dir)
    text = html.unescape(re.sub(r"<[^>]+>", " ", page))
    text = " ".join(text.split())
    for s in ledger.sources().values():
        assert s["title_zh"] in text and s["title_en"] in text, f"source {s['label']} is not named by its title"
    for t in ledger.themes():
        assert html.escape(t["title"], quote=False) in page, f"no section for the theme {t['title']!r}"
    for c in claims:
        cid = c["id"]
        assert f'id="{cid.lower()}"' in page, f"no section for {cid}"
        rows = re.findall(rf'<tr>\s*<td><a href="#{cid.lower()}">{cid}</a><br\s*/?>(.*?)</tr>', page, re.S)
        assert len(rows) == 1, f"{cid}: {len(rows)} summary rows"
        cells = re.split(r"</td>\s*<td>", rows[0].rsplit("</td>", 1)[0])
        assert len(cells) == 2 and all(re.sub(r"<[^>]+>", "", x).strip() for x in cells), f"{cid}: an empty cell"
        assert 'href="#source-' in cells[1], f"{cid}: the row does not name its article"
        e = found.get(cid)
        if e is None:
            continue
        assert f"verdict-{ledger.VERDICT_CLASS[e['verdict']]}" in cells[0]
        section = page.split(f'id="{cid.lower()}"', 1)[1].split("<h3", 1)[0].split("<h2", 1)[0]
        words = lambda t: " ".join(re.findall(r"[A-Za-z]+", t))  # noqa: E731  (markup-free word sequence)
        probe = " ".join(words(re.sub(r"\{\{.*?\}\}", " ", e["finding"])).split()[:8])
        assert probe and probe in words(html.unescape(re.sub(r"<[^>]+>", " ", section))), f"{cid}: finding not in its section"
        assert probe not in words(html.unescape(re.sub(r"<[^>]+>", " ", rows[0]))), f"{cid}: the finding is repeated in the summary row"
        if c["gpu"]:
            gd = e.get("gpu_data")
            if gd and (REPO / "docs" / "data" / gd).is_file():
                assert f"data/{gd}" in page, f"{cid}: the GPU result {gd} is not linked"
            else:
                assert ledger.NOT_MEASURED in section, f"{cid}: must say '{ledger.NOT_MEASURED}'"
    assert "No verdict yet" not in text or any(c["id"] not in found for c in claims)


def test_page_footers_list_the_guards_they_show(site_dir):
    """Every built page that shows a guard list also ends with its 'Guards on this page' section."""
    checked = 0
    for page in sorted(site_dir.rglob("index.html")):
        body = page.read_text()
        if 'class="guard-list"' in body or "guard-passed" in body:
            assert 'id="guards-on-this-page"' in body, f"{page.relative_to(site_dir)}: no guards footer"
            checked += 1
    assert checked >= 1, "no page shows any guard"


def test_results_file_is_well_formed():
    data = json.loads(RESULTS.read_text())
    assert {"commit", "date", "machine", "tests"} <= set(data)
    assert {"cpu", "cores", "python", "torch"} <= set(data["machine"])
    outcomes = {"passed", "failed", "skipped", "xfailed", "xpassed", "not run"}
    for nodeid, e in data["tests"].items():
        assert nodeid.startswith("tests/") and "::" in nodeid, nodeid
        assert e["outcome"] in outcomes, (nodeid, e["outcome"])
        assert isinstance(e["guards"], list) and e["duration"] >= 0
    assert not any(n.startswith("tests/site/") for n in data["tests"]), "site tests belong in test-results-site.json"
