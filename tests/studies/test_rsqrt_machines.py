"""The rsqrt study's archive of machines (docs/data/rsqrt_machines/): one full CPU run per kind of machine,
so that a run on one machine never replaces another machine's timings; each file is checked by the build,
and the study files its full runs there itself."""
from __future__ import annotations

import json
import shutil

import pytest

from reference_impl import provenance as pv
from reference_impl.studies import rsqrt as study
from reference_impl.studies import rsqrt_machines as rm
from reference_impl.studies.machine import key_of

import archive_checks

LATEST = rm.REPO / "docs" / "data" / "rsqrt_cpu.json"
OTHER_KEY = "genuineintel-f6-m143-s8-avx512-2c"


def _as_machine(data: dict, key: str) -> dict:
    """The run as if another machine had made it: its key, and a CPU identity that gives that key (family,
    model, stepping and SIMD level read back from the key), so the file passes the consistency checks."""
    run = json.loads(json.dumps(data))
    machine = run["provenance"]["machine"]
    machine["machine_key"] = key
    if "cpu_identity" in machine:
        ident = machine["cpu_identity"]
        _, fam, mod, step, simd, _ = key.split("-")
        ident.update(family=fam[1:], model=mod[1:], stepping=step[1:])
        ident["flags"] = [f for f in ident["flags"] if f != "avx512_bf16" or simd == "avx512bf16"]
        assert key_of(run) == key, (key_of(run), key)
    return run


def test_every_archived_run_is_checked_and_named_by_its_machine():
    files = rm.archived()
    assert files, "docs/data/rsqrt_machines/ holds no run"
    for path, data in files:
        assert path.stem == key_of(data) and not data["provenance"]["quick"]
        row = rm.machine_row(data)
        assert row["code"] in ("current code", "earlier code")
        timed = data["rmsnorm_time"]
        if timed["available"]:
            scalar = timed["scalar_rsqrt_ns"]
            assert row["exact_ns"] == f"{scalar['exact']:.2f}" and row["rsqrtss_ns"] == f"{scalar['rsqrtss']:.2f}"
        else:
            assert row["exact_ns"] == row["rsqrtss_ns"] == timed["reason"]
        # the table recomputes the speed-up from the two timings: it equals the one the study stored
        stored = data["throughput"]["speedups"].get("sse_rsqrt_vs_sse_div_sqrt", {}).get("cache")
        if stored is None:
            assert rm.speedup_in_cache(data) is None
        else:
            assert rm.speedup_in_cache(data) == pytest.approx(stored, rel=1e-12)
            assert row["speedup_cache"] == f"{stored:.1f}x"


def test_the_latest_full_run_is_filed_under_its_own_machine():
    """rsqrt_cpu.json is one of the archived runs, equal to its machine's file field for field."""
    latest = json.loads(LATEST.read_text())
    if latest["provenance"]["quick"]:
        pytest.fail("docs/data/rsqrt_cpu.json is a --quick run; the committed file must be a full run")
    mine = rm.ARCHIVE / f"{key_of(latest)}.json"
    assert mine.exists(), f"the latest run's machine {key_of(latest)} has no file in {rm.ARCHIVE}"
    assert json.loads(mine.read_text()) == latest


def test_a_run_filed_twice_replaces_only_its_own_machines_file(tmp_path):
    for path, _ in rm.archived():
        shutil.copy(path, tmp_path / path.name)
    before = {p.name: p.read_bytes() for p in tmp_path.glob("*.json")}
    run = _as_machine(json.loads(LATEST.read_text()), OTHER_KEY)
    first = rm.write(run, tmp_path)
    assert first.name == f"{OTHER_KEY}.json"
    assert first.read_text() == json.dumps(run, indent=1) + "\n"  # the bytes every study writes
    run["rmsnorm_time"]["scalar_rsqrt_ns"]["exact"] += 1.0   # the same machine, a later run
    second = rm.write(run, tmp_path)
    assert second == first and json.loads(second.read_text()) == run
    assert {p.name: p.read_bytes() for p in tmp_path.glob("*.json") if p != first} == before
    assert sorted(p.name for p in tmp_path.glob("*")) == sorted([*before, first.name])  # no temp file left
    with pytest.raises(ValueError, match="quick"):
        rm.write({**run, "provenance": {**run["provenance"], "quick": True}}, tmp_path)
    assert json.loads(second.read_text()) == run


def test_a_machine_without_the_timed_paths_gets_a_row_that_says_so(tmp_path):
    """A CPU without AVX2 and FMA has no row-loop timings, and one without a timed pair no speed-up: the
    file still passes the checks and its row names what is missing instead of a figure."""
    run = _as_machine(json.loads(LATEST.read_text()), OTHER_KEY)
    run["rmsnorm_time"] = {"available": False, "reason": "the row loop needs AVX2 and FMA"}
    del run["throughput"]["methods"]["sse_div_sqrt"]
    data = rm.check_archived(rm.write(run, tmp_path))
    row = rm.machine_row(data)
    assert row["exact_ns"] == row["rsqrtss_ns"] == "the row loop needs AVX2 and FMA"
    assert rm.speedup_in_cache(data) is None and row["speedup_cache"].startswith("not timed")


@pytest.mark.parametrize("break_it, words", [
    (lambda d: d.pop("throughput"), "throughput"),
    (lambda d: d["provenance"].__setitem__("date", "2099-01-01T00:00:00+00:00"), "date"),
    (lambda d: d["methods"]["sse_rsqrt"]["normal"]["ulp_hist"].__setitem__(1, 0), "ulp_hist"),
    (lambda d: d["throughput"]["methods"]["sse_rsqrt"].__setitem__("cache_ns", "fast"), "cache_ns"),
    (lambda d: d["provenance"]["machine"].__setitem__("machine_key", "Not A Key"), "machine_key"),
])
def test_a_corrupt_file_fails_naming_the_file(tmp_path, break_it, words):
    archive_checks.refuses_a_corrupt_file(rm, tmp_path, break_it, words)


def test_a_misnamed_file_a_quick_run_and_broken_json_are_refused_by_name(tmp_path):
    archive_checks.refuses_misnamed_quick_and_truncated_files(rm, tmp_path)


def test_the_site_macro_shows_every_machine_and_refuses_a_corrupt_archive(tmp_path, monkeypatch):
    from site_hooks.rsqrt import rsqrt_machines_macro

    archived = rm.archived()
    table = archive_checks.macro_table_then_refusals(rm, rsqrt_machines_macro, "rsqrt.md", tmp_path, monkeypatch)
    assert "one RSQRTSS (ns)" in table
    for _, data in archived:
        row = rm.machine_row(data)
        assert f"| {row['machine']} |" in table and f"| {row['exact_ns']} |" in table


@pytest.mark.parametrize("quick, to_committed, filed", [(False, True, True), (True, True, False),
                                                        (False, False, False)])
def test_the_study_files_only_a_full_run_of_the_committed_file(tmp_path, monkeypatch, quick, to_committed, filed):
    """main() without measuring: a full run written to the committed path is filed under its machine, a
    --quick run or a run written elsewhere is not; with --out, the plots go beside the data file."""
    archive = tmp_path / "archive"
    out = tmp_path / "rsqrt_cpu.json"
    run = _as_machine(json.loads(LATEST.read_text()), OTHER_KEY)
    run["provenance"]["quick"] = quick
    seen = {}

    def run_cpu(stride, threads, quick_, quiet, out_, plots):
        seen.update(out=out_, plots=plots, quick=quick_)
        pv.write_json(out_, run)
        return run

    monkeypatch.setattr(study, "CPU_JSON", out if to_committed else tmp_path / "committed.json")
    monkeypatch.setattr(study, "run_cpu", run_cpu)
    monkeypatch.setattr(rm.write, "__defaults__", (archive,))
    assert study.main(["--out", str(out), "--quiet"] + (["--quick"] if quick else [])) == 0
    assert seen == {"out": out, "plots": tmp_path / "plots", "quick": quick}
    assert json.loads(out.read_text()) == run
    files = sorted(p.name for p in archive.glob("*.json")) if archive.exists() else []
    assert files == ([f"{OTHER_KEY}.json"] if filed else [])
    if filed:
        assert (archive / f"{OTHER_KEY}.json").read_bytes() == out.read_bytes()


def test_without_out_the_study_writes_the_committed_file_and_plots(tmp_path, monkeypatch):
    """The default run (no --out) writes the committed data file and plots and files the run: here both
    paths are moved into tmp_path so nothing committed is touched."""
    seen = {}
    run = _as_machine(json.loads(LATEST.read_text()), OTHER_KEY)

    def run_cpu(stride, threads, quick_, quiet, out_, plots):
        seen.update(out=out_, plots=plots)
        pv.write_json(out_, run)
        return run

    monkeypatch.setattr(study, "CPU_JSON", tmp_path / "rsqrt_cpu.json")
    monkeypatch.setattr(study, "PLOTS", tmp_path / "committed-plots")
    monkeypatch.setattr(study, "run_cpu", run_cpu)
    monkeypatch.setattr(rm.write, "__defaults__", (tmp_path / "archive",))
    assert study.main(["--quiet"]) == 0
    assert seen == {"out": tmp_path / "rsqrt_cpu.json", "plots": tmp_path / "committed-plots"}
    assert json.loads((tmp_path / "archive" / f"{OTHER_KEY}.json").read_text()) == run
