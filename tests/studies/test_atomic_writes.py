"""Data files are written atomically, through one helper, and a study refuses a bad output path before it works.

- :func:`reference_impl.provenance.write_json` writes a temporary file in the target's directory and moves it
  over the target: a failure at any step (a value JSON cannot hold, a crash before the move) leaves the old
  file byte for byte and no temporary file behind.
- A study's ``--out`` in a missing directory is an argument error (exit 2) before any measuring starts.
- ``--out`` elsewhere moves what else the study writes (the census's index, the plots) next to it, so that a
  smoke run leaves every committed file alone.
- No study module writes JSON any other way.
"""
from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest

from reference_impl import provenance as pv

REPO = Path(__file__).resolve().parents[2]
STUDIES = REPO / "reference_impl" / "studies"


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_write_json_writes_the_text_every_study_wrote_before(tmp_path):
    data = {"b": [1, 2.5, None], "a": "x"}
    out = pv.write_json(tmp_path / "f.json", data)
    assert out.read_text() == json.dumps(data, indent=1) + "\n"
    pv.write_json(out, data, sort_keys=True)
    assert out.read_text() == json.dumps(data, indent=1, sort_keys=True) + "\n"
    assert _leftovers(tmp_path) == []
    assert oct(out.stat().st_mode & 0o777) == oct(0o644)


def test_a_value_json_cannot_hold_leaves_the_old_file(tmp_path):
    out = pv.write_json(tmp_path / "f.json", {"old": 1})
    before = out.read_bytes()
    with pytest.raises(TypeError):
        pv.write_json(out, {"new": object()})
    with pytest.raises(ValueError):
        pv.write_json(out, {"new": float("nan")}, allow_nan=False)
    assert out.read_bytes() == before and _leftovers(tmp_path) == []


def test_a_crash_before_the_move_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    out = pv.write_json(tmp_path / "f.json", {"old": 1})
    before = out.read_bytes()
    seen = []

    def crash(src, dst):
        seen.append(Path(src))
        assert Path(src).parent == tmp_path and Path(src).read_text().startswith('{\n "new"')  # written in full first
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        pv.write_json(out, {"new": 2})
    assert seen and out.read_bytes() == before and _leftovers(tmp_path) == []


def test_a_missing_directory_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        pv.write_json(tmp_path / "nowhere" / "f.json", {})


# ------------------------------------------------------------------------------ argument errors first

def _forbid(monkeypatch, module, *names):
    def work(*a, **k):
        raise AssertionError("the study started its work before checking --out")

    for n in names:
        monkeypatch.setattr(module, n, work)


def _commands(monkeypatch):
    from reference_impl.studies import rsqrt
    from reference_impl.studies import conformance, cuda_resources, distributed_bench, numerics, placements, training
    from reference_impl.studies.bench import cli as bench_cli
    from reference_impl.studies.census import __main__ as census_main

    _forbid(monkeypatch, numerics, "measure", "record")
    _forbid(monkeypatch, conformance, "measure", "record")
    _forbid(monkeypatch, cuda_resources, "run")
    _forbid(monkeypatch, census_main, "run_census")
    _forbid(monkeypatch, bench_cli, "run", "reanalyse")
    _forbid(monkeypatch, distributed_bench, "measure", "write_diagrams")
    _forbid(monkeypatch, rsqrt, "run_cpu", "run_gpu", "render_plots")
    _forbid(monkeypatch, training, "run")
    _forbid(monkeypatch, placements, "run")
    return {"distributed_bench": distributed_bench.main, "rsqrt": rsqrt.main, "numerics": numerics.main, "conformance": conformance.main, "cuda_resources": cuda_resources.main,
            "census": census_main.main, "bench": bench_cli.main, "training": training.main,
            "placements": placements.main}


@pytest.mark.parametrize("name", ["numerics", "conformance", "cuda_resources", "census", "bench", "distributed_bench",
                                  "rsqrt"])
def test_an_out_in_a_missing_directory_fails_before_the_work(name, tmp_path, monkeypatch, capsys):
    main = _commands(monkeypatch)[name]
    with pytest.raises(SystemExit) as exc:
        main(["--out", str(tmp_path / "missing" / "x.json")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--out" in err and "missing does not exist" in err
    with pytest.raises(SystemExit) as exc:
        main(["--out", str(tmp_path)])  # a directory, not a file
    assert exc.value.code == 2
    assert "is a directory" in capsys.readouterr().err


@pytest.mark.parametrize("name, data_file", [("training", "training.json"), ("placements", "placements.json")])
def test_an_out_folder_that_is_missing_or_a_file_fails_before_the_work(name, data_file, tmp_path, monkeypatch,
                                                                       capsys):
    """The training and placements studies take a folder for --out (they write a data file and plots
    there): a missing folder, or a file where the folder should be, is an argument error before the
    minutes of training start."""
    main = _commands(monkeypatch)[name]
    with pytest.raises(SystemExit) as exc:
        main(["--quick", "--out", str(tmp_path / "missing")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--out" in err and "missing does not exist" in err
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / data_file).mkdir()  # the data file's name is taken by a directory
    with pytest.raises(SystemExit) as exc:
        main(["--quick", "--out", str(tmp_path / "folder")])
    assert exc.value.code == 2 and "is a directory" in capsys.readouterr().err


def test_the_census_written_elsewhere_puts_its_index_next_to_it(tmp_path, monkeypatch):
    from reference_impl.studies.census import __main__ as census_main

    seen = {}
    monkeypatch.setattr(census_main, "run_census", lambda **k: {"provenance": {"quick": True}, "counts": dict.fromkeys(
        ("classes", "in_scope", "matched", "unmatched", "out_of_scope", "model_types", "traced", "failed"), 0)})
    monkeypatch.setattr(census_main, "write", lambda data, out, index: seen.update(out=out, index=index))
    assert census_main.main(["--out", str(tmp_path / "c.json"), "--classes", "0", "--models", "0"]) == 0
    assert seen == {"out": tmp_path / "c.json", "index": tmp_path / census_main.INDEX_FILE.name}
    assert census_main.main(["--models", "0", "--classes", "0"]) == 0  # the committed pair stays together
    assert seen == {"out": census_main.DATA_FILE, "index": census_main.INDEX_FILE}


def test_the_distributed_diagrams_follow_an_out_elsewhere(tmp_path, monkeypatch):
    """A run with --out elsewhere draws its layout diagrams next to that file (atomically) and writes the
    data file there through write_json; the committed diagrams and data file are left alone."""
    from reference_impl.studies import distributed_bench as db

    committed = {p: p.read_bytes() for p in [db.OUT, *sorted(db.PLOTS.glob("distributed-layouts*.svg"))]}
    assert len(committed) >= 2, "the committed distributed diagrams are missing"
    monkeypatch.setattr(db, "measure", lambda quick: {"provenance": {"quick": quick}, "worlds": {}})
    db.main(["--quick", "--out", str(tmp_path / "d.json")])
    assert json.loads((tmp_path / "d.json").read_text()) == {"provenance": {"quick": True}, "worlds": {}}
    drawn = sorted(p.name for p in tmp_path.glob("distributed-layouts*.svg"))
    assert drawn == sorted(p.name for p in committed if p.suffix == ".svg") and _leftovers(tmp_path) == []
    assert all(p.read_bytes() == b for p, b in committed.items())


@pytest.mark.parametrize("name", ["numerics", "conformance"])
def test_plots_follow_an_out_elsewhere(name, tmp_path, monkeypatch):
    import importlib

    mod = importlib.import_module(f"reference_impl.studies.{name}")
    seen = {}

    def stop(*a, **k):
        raise SystemExit(0)

    monkeypatch.setattr(mod, "record", stop)
    monkeypatch.setattr(mod.argparse.ArgumentParser, "parse_args",
                        lambda self, argv=None, _orig=mod.argparse.ArgumentParser.parse_args:
                        seen.setdefault("args", _orig(self, argv)))
    with pytest.raises(SystemExit):
        mod.main(["--out", str(tmp_path / "x.json")])
    assert seen["args"].plots == tmp_path


# ------------------------------------------------------------------------------ one way to write

# modules allowed to write JSON without the helper: none (the list may only stay empty)
DIRECT_WRITERS: set[str] = set()


def _direct_json_writes(path: Path) -> int:
    """``x.write_text(json.dumps(...))`` and ``json.dump(obj, file)`` calls in one module."""
    n = 0
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        f = node.func
        if f.attr == "dump" and isinstance(f.value, ast.Name) and f.value.id == "json":
            n += 1
        elif f.attr == "write_text" and node.args and isinstance(node.args[0], ast.BinOp | ast.Call) \
                and "json.dumps" in ast.unparse(node.args[0]):
            n += 1
    return n


def test_every_study_writes_its_data_through_the_atomic_helper():
    direct = {p.relative_to(STUDIES).as_posix() for p in sorted(STUDIES.rglob("*.py")) if _direct_json_writes(p)}
    assert direct - DIRECT_WRITERS == set(), "write data files with reference_impl.provenance.write_json"
    assert DIRECT_WRITERS - direct == set(), "these modules use the helper now: take them off DIRECT_WRITERS"
