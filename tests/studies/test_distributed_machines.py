"""The distributed study's archive of machines (docs/data/distributed_machines/): one full run per kind of
machine, so that a run on one machine never replaces another machine's timings; each file is checked by the
build, and the study files its full runs there itself."""
from __future__ import annotations

import json
import shutil

import pytest

from reference_impl.studies import distributed_bench as bench
from reference_impl.studies import distributed_machines as dm
from reference_impl.studies.machine import key_of

import archive_checks

LATEST = dm.REPO / "docs" / "data" / "distributed.json"
OTHER_KEY = "genuineintel-f6-m143-s8-avx512-2c"


def _as_machine(data: dict, key: str) -> dict:
    run = json.loads(json.dumps(data))
    run["provenance"]["machine"]["machine_key"] = key
    return run


def test_every_archived_run_is_checked_and_named_by_its_machine():
    files = dm.archived()
    assert files, "docs/data/distributed_machines/ holds no run"
    for path, data in files:
        assert path.stem == key_of(data) and not data["provenance"]["quick"]
        row = dm.machine_row(data)
        assert row["code"] in ("current code", "earlier code")
        for world in dm.WORLDS:
            t = data["timing"][world]
            assert float(row[f"{world}_ours_us"]) == round(t["methods"]["sharded_rms"]["median_us"])
            assert float(row[f"{world}_dtensor_us"]) == round(t["methods"]["dtensor_f_rms_norm"]["median_us"])


def test_the_latest_full_run_is_filed_under_its_own_machine():
    """distributed.json is one of the archived runs, equal to its machine's file field for field."""
    latest = json.loads(LATEST.read_text())
    if latest["provenance"]["quick"]:
        pytest.fail("docs/data/distributed.json is a --quick smoke run; the committed file must be a full run")
    mine = dm.ARCHIVE / f"{key_of(latest)}.json"
    assert mine.exists(), f"the latest run's machine {key_of(latest)} has no file in {dm.ARCHIVE}"
    assert json.loads(mine.read_text()) == latest


def test_a_run_filed_twice_replaces_only_its_own_machines_file(tmp_path):
    for path, _ in dm.archived():
        shutil.copy(path, tmp_path / path.name)
    before = {p.name: p.read_bytes() for p in tmp_path.glob("*.json")}
    run = _as_machine(json.loads(LATEST.read_text()), OTHER_KEY)
    first = dm.write(run, tmp_path)
    assert first.name == f"{OTHER_KEY}.json"
    run["timing"]["p2"]["methods"]["sharded_rms"]["median_us"] += 1.0   # the same machine, a later run
    second = dm.write(run, tmp_path)
    assert second == first and json.loads(second.read_text()) == run
    assert {p.name: p.read_bytes() for p in tmp_path.glob("*.json") if p != first} == before
    assert sorted(p.name for p in tmp_path.glob("*")) == sorted([*before, first.name])  # no temp file left
    with pytest.raises(ValueError, match="quick"):
        dm.write({**run, "provenance": {**run["provenance"], "quick": True}}, tmp_path)
    assert json.loads(second.read_text()) == run


@pytest.mark.parametrize("break_it, words", [
    (lambda d: d["timing"].pop("p4"), "p4"),
    (lambda d: d["provenance"].__setitem__("date", "2099-01-01T00:00:00+00:00"), "date"),
    (lambda d: d["per_token_bf16_d4096"]["p8"].__setitem__("rms_sharded_bytes", 1.0), "rms_sharded_bytes"),
    (lambda d: d["timing"]["p2"]["methods"]["sharded_rms"].__setitem__("median_us", "fast"), "median_us"),
])
def test_a_corrupt_file_fails_naming_the_file(tmp_path, break_it, words):
    archive_checks.refuses_a_corrupt_file(dm, tmp_path, break_it, words)


def test_a_misnamed_file_a_smoke_run_and_broken_json_are_refused_by_name(tmp_path):
    archive_checks.refuses_misnamed_quick_and_truncated_files(dm, tmp_path)


def test_the_site_macro_shows_every_machine_and_refuses_a_corrupt_archive(tmp_path, monkeypatch):
    from site_hooks.distributed import distributed_machines_macro

    archived = dm.archived()
    table = archive_checks.macro_table_then_refusals(dm, distributed_machines_macro, "distributed.md", tmp_path,
                                                     monkeypatch)
    assert "DTensor (µs)" in table
    for _, data in archived:
        assert dm.machine_row(data)["machine"] in table


@pytest.mark.parametrize("quick, to_committed, filed", [(False, True, True), (True, True, False),
                                                        (False, False, False)])
def test_the_study_files_only_a_full_run_of_the_committed_file(tmp_path, monkeypatch, quick, to_committed, filed):
    """main() without measuring: a full run written to the committed path is filed under its machine, a
    --quick run or a run written elsewhere is not."""
    archive = tmp_path / "archive"
    out = tmp_path / "distributed.json"
    run = _as_machine(json.loads(LATEST.read_text()), OTHER_KEY)
    run["provenance"]["quick"] = quick
    monkeypatch.setattr(bench, "OUT", out if to_committed else tmp_path / "committed.json")
    monkeypatch.setattr(bench, "write_diagrams", lambda plots: [])
    monkeypatch.setattr(bench, "measure", lambda q: run)
    monkeypatch.setattr(dm.write, "__defaults__", (archive,))
    bench.main(["--out", str(out)] + (["--quick"] if quick else []))
    assert json.loads(out.read_text()) == run
    files = sorted(p.name for p in archive.glob("*.json")) if archive.exists() else []
    assert files == ([f"{OTHER_KEY}.json"] if filed else [])
