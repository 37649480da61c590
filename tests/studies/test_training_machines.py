"""The training study's archive of machines (docs/data/training_machines/): one full run per kind of machine,
so that one machine's step times never replace another's, each file checked by the build."""
from __future__ import annotations

import json
import shutil

import pytest

from reference_impl.studies import training_machines as tm
from reference_impl.studies.machine import key_of
from reference_impl.studies.schemas import DataFileError

import archive_checks

TRAINING = tm.REPO / "docs" / "data" / "training.json"


def test_every_archived_run_is_checked_and_named_by_its_machine():
    files = tm.archived()
    assert files, "docs/data/training_machines/ holds no run"
    for path, data in files:
        assert path.stem == key_of(data) and not data["provenance"]["quick"]
        row = tm.machine_row(data)
        assert float(row["pre-rms_step_ms"]) > 0 and row["code"] in ("current code", "earlier code")


def test_the_latest_full_run_is_filed_under_its_own_machine():
    """training.json is one of the archived runs, equal to its machine's file field for field."""
    latest = json.loads(TRAINING.read_text())
    mine = tm.ARCHIVE / f"{key_of(latest)}.json"
    assert mine.exists(), f"the latest run's machine {key_of(latest)} has no file in {tm.ARCHIVE}"
    assert json.loads(mine.read_text()) == latest


def test_a_new_run_replaces_only_its_own_machines_file(tmp_path):
    for path, _ in tm.archived():
        shutil.copy(path, tmp_path / path.name)
    before = {p.name: p.read_bytes() for p in tmp_path.glob("*.json")}
    run = json.loads(TRAINING.read_text())
    run["provenance"]["machine"] = {**run["provenance"]["machine"], "machine_key": "genuineintel-f6-m143-s8-avx512-2c"}
    written = tm.write(run, tmp_path)
    assert written.name == "genuineintel-f6-m143-s8-avx512-2c.json"
    assert {p.name: p.read_bytes() for p in tmp_path.glob("*.json") if p != written} == before
    with pytest.raises(ValueError, match="quick"):
        tm.write({**run, "provenance": {**run["provenance"], "quick": True}}, tmp_path)


@pytest.mark.parametrize("break_it, words", [
    (lambda d: d["main"]["pre-rms"]["runs"][0]["val_loss"].__setitem__(-1, -0.5), "loss"),
    (lambda d: d["provenance"].__setitem__("date", "2099-01-01T00:00:00+00:00"), "date"),
    (lambda d: d["timing"].pop("pre-ln"), "timing"),
])
def test_a_corrupt_or_misnamed_file_fails_naming_the_file(tmp_path, break_it, words):
    archive_checks.refuses_a_corrupt_file(tm, tmp_path, break_it, words)
    path, data = tm.archived()[0]
    misnamed = tmp_path / "someone-else-2c.json"
    misnamed.write_text(json.dumps(data))
    with pytest.raises(DataFileError, match=r"must be named"):
        tm.check_archived(misnamed)


def test_the_site_macro_refuses_a_corrupt_archive(tmp_path, monkeypatch):
    from site_hooks.macros import MacroError
    from site_hooks.training import training_machines_macro

    class Ctx:
        src_path = "training.md"

    table = training_machines_macro(Ctx())
    assert table.count("\n") == len(tm.archived()) + 1 and "Pre-RMSNorm step (ms)" in table
    (tmp_path / "x.json").write_text("{ not json")
    monkeypatch.setattr(tm, "ARCHIVE", tmp_path)
    monkeypatch.setattr(tm.archived, "__defaults__", (tmp_path,))
    with pytest.raises(MacroError, match="x.json"):
        training_machines_macro(Ctx())
