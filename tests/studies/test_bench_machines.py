"""The CPU benchmark's short-row and QK-norm groups, the targets of one machine, and the archive of machines.

- A tile setting (``NORMLAB_CPU_TILE``) is set only around its own calls, never leaking into the default line.
- The targets of a machine follow its instruction set (bfloat16: 0.9 with AVX512-BF16, 0.75 without), say
  how far a missed one is short, and flag shapes whose bytes fit in the last-level cache.
- Each machine has its own file under docs/data/bench_cpu_machines/; a run replaces its own machine's file
  only; every file matches the benchmark's schema and is named by its machine key (a corrupt one fails,
  naming the file); a file measured with earlier kernels is shown as such, not as current.
- The committed run holds the short rows, the QK-norm op and the targets of its machine.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from reference_impl import provenance as pv
from reference_impl.studies import bench, schemas
from reference_impl.studies.bench import archive, groups, limits

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "docs" / "data"
BENCH = json.loads((DATA / "bench_cpu.json").read_text())


# ------------------------------------------------------------------------------------------ tile settings

def test_a_tile_setting_is_set_around_its_own_calls_only(monkeypatch):
    monkeypatch.setenv("NORMLAB_CPU_TILE", "99")
    seen = []
    tiled = groups.EnvCase(lambda: seen.append(os.environ.get("NORMLAB_CPU_TILE")), {"NORMLAB_CPU_TILE": 512})
    plain = lambda: seen.append(os.environ.get("NORMLAB_CPU_TILE"))  # noqa: E731
    stats = bench.time_cases({"tiled": tiled, "plain": plain}, repeats=3, quick=True)
    assert set(stats) == {"tiled", "plain"}
    assert "512" in seen and None in seen and "99" not in seen  # the default line runs with the variable unset
    assert os.environ["NORMLAB_CPU_TILE"] == "99"  # restored after


def test_each_case_block_starts_with_an_untimed_call():
    """Per case: a warm-up and a sizing call, then in each round one untimed call before the timed ones, so
    that no case is timed straight after another case's buffers and cache lines."""
    calls = {"a": 0, "b": 0}
    stamps = []

    def case(name):
        def run():
            calls[name] += 1
            stamps.append(name)
        return run

    stats = bench.time_cases({"a": case("a"), "b": case("b")}, repeats=3, quick=True)
    assert calls == {"a": 2 + 3 * 2, "b": 2 + 3 * 2}
    assert stats["a"]["calls"] == stats["b"]["calls"] == 3
    blocks = stamps[4:]  # after the warm-up and sizing calls: pairs of (untimed, timed) calls of one case
    assert all(blocks[i] == blocks[i + 1] for i in range(0, len(blocks), 2))


def test_the_default_tile_is_read_from_the_kernels_header():
    text = (REPO / "cuda" / "cpu" / "cpu_common.h").read_text()
    assert f"kTileRowBytes = {groups.default_tile_bytes()};" in text


@pytest.mark.parametrize("impl", ["fused_rms_norm", *groups.TILE_IMPLS])
@pytest.mark.parametrize("dname", ["float32", "bfloat16"])
def test_short_row_lines_pass_the_oracle_check(impl, dname):
    groups.validate_group(impl, "short_rows", dname)


def test_the_short_row_line_without_bf16_instructions_forces_its_path_only_around_its_calls():
    """The bfloat16 line of a CPU without AVX512-BF16 passes the oracle check with NORMLAB_CPU_ISA=avx512 set
    for its own calls and nowhere else; float32 has no such line (its path is the same either way)."""
    import os

    x, w, _, y = groups.group_inputs("short_rows", (64, 128), "bfloat16")
    from reference_impl.studies.bench.cases import has_avx512_bf16

    if not has_avx512_bf16():
        with pytest.raises(groups.Unavailable, match="no AVX512-BF16"):
            groups.make_group_case("fused_rms_norm_avx512", "short_rows", x, w, None, y)
        return
    case = groups.make_group_case("fused_rms_norm_avx512", "short_rows", x, w, None, y)
    assert case.env == {"NORMLAB_CPU_ISA": "avx512"} and "NORMLAB_CPU_ISA" not in os.environ
    groups.validate_group("fused_rms_norm_avx512", "short_rows", "bfloat16")
    assert "NORMLAB_CPU_ISA" not in os.environ
    xf, wf, _, yf = groups.group_inputs("short_rows", (64, 128), "float32")
    with pytest.raises(groups.Unavailable, match="only in its bfloat16"):
        groups.make_group_case("fused_rms_norm_avx512", "short_rows", xf, wf, None, yf)


@pytest.mark.parametrize("mode", ["qk_forward", "qk_forward_backward"])
@pytest.mark.parametrize("impl", ["fused_qk_norm", "hf_qwen3_rms_norm"])
def test_qk_lines_pass_the_oracle_check(mode, impl):
    for dname in ("float32", "bfloat16"):
        groups.validate_group(impl, mode, dname)


def test_group_shapes_hold_at_least_8_mb_in_each_dtype():
    for shape in groups.SHORT_SHAPES + [(s[0] * s[1] * s[2], s[3]) for s in groups.QK_SHAPES]:
        n = shape[0] * shape[1]
        assert n * 2 >= 8e6, f"{shape}: {n * 2 / 1e6:.1f} MB in bfloat16"
    assert {d for _, d in groups.SHORT_SHAPES} == set(limits.SHORT_DS)


def test_qk_records_count_their_bytes_like_the_others():
    assert bench.min_bytes(8, 64, bench.DTYPES["float32"], "qk_forward_backward", "fused_qk_norm") == 5 * 8 * 64 * 4 + 2 * 64 * 4
    assert bench.min_bytes(8, 64, bench.DTYPES["bfloat16"], "short_rows", "copy") == 2 * 8 * 64 * 2


# ------------------------------------------------------------------------------------------ targets per machine

def _rec(mode, dn, rows, d, impl, gbps, alloc="glibc", bytes_=None):
    b = 4 if dn == "float32" else 2
    return {"allocator": alloc, "mode": mode, "dtype": dn, "rows": rows, "hidden": d, "impl": impl,
            "bytes": bytes_ or (5 if mode == "forward_backward" else 2) * rows * d * b, "gbps": gbps,
            "gbps_min": gbps, "gbps_max": gbps, "median_s": 1.0, "round_median_s": [1.0]}


def _identity(bf16: bool, l3: str | None = "32768K") -> dict:
    return {"vendor": "X", "family": "1", "model": "2", "stepping": "3", "model_name": "x",
            "flags": ["avx512f", "avx512bw", "avx512vl", "avx512dq"] + (["avx512_bf16"] if bf16 else []),
            "caches": {"L3": l3} if l3 else {}, "cores": 2}


def _targets(identity):
    recs = []
    for dn in ("float32", "bfloat16"):
        recs += [_rec("forward_out", dn, 4096, 4096, "copy", 10.0), _rec("forward_out", dn, 4096, 4096, "fused_rms_norm", 8.0),
                 _rec("forward_out", dn, 1024, 1024, "copy", 40.0), _rec("forward_out", dn, 1024, 1024, "fused_rms_norm", 40.0),
                 _rec("short_rows", dn, 65536, 128, "copy", 10.0), _rec("short_rows", dn, 65536, 128, "fused_rms_norm", 7.0),
                 _rec("forward_backward", dn, 4096, 4096, "fused_rms_norm", 9.0, alloc="glibc_tunables")]
    copies = {limits.ceiling_key(r): r["gbps"] for r in recs if r["impl"] == "copy"}
    for r in recs:
        if r["mode"] != "forward_backward":
            r["ratio_copy"] = r["gbps"] / copies[limits.ceiling_key(r)]
    idx = bench.index_results(recs)
    return limits.machine_targets(idx, identity, ["glibc", "glibc_tunables"], ["float32", "bfloat16"])


def test_machine_targets_follow_the_instruction_set_and_say_how_far_short():
    with_bf16 = {(e["target"], e["dtype"], e["impl"]): e for e in _targets(_identity(True))["entries"]}
    without = {(e["target"], e["dtype"], e["impl"]): e for e in _targets(_identity(False))["entries"]}
    long_bf16 = with_bf16[("forward_out_long", "bfloat16", "fused_rms_norm")]
    assert long_bf16["threshold"] == 0.9 and long_bf16["met"] == 1 and long_bf16["count"] == 2
    assert long_bf16["worst"] == pytest.approx(0.8) and long_bf16["short_by"] == pytest.approx(0.1)
    assert without[("forward_out_long", "bfloat16", "fused_rms_norm")]["threshold"] == 0.75
    assert without[("forward_out_long", "bfloat16", "fused_rms_norm")]["met"] == 2
    assert without[("forward_out_long", "float32", "fused_rms_norm")]["threshold"] == 0.9
    short = with_bf16[("forward_out_short", "float32", "fused_rms_norm")]
    assert short["threshold"] == 0.8 and short["worst"] == pytest.approx(0.7) and short["short_by"] == pytest.approx(0.1)
    fb = with_bf16[("forward_backward", "float32", "fused_rms_norm")]
    assert fb["worst"] == pytest.approx(0.9) and fb["met"] == 1  # 9 GB/s over 5 N b against the copy's 10
    assert with_bf16[("forward_backward", "float32", "fused_layer_norm")]["count"] == 0


def test_cache_resident_shapes_are_flagged_from_the_machines_cache():
    entries = _targets(_identity(True, "32768K"))["entries"]
    long32 = next(e for e in entries if e["target"] == "forward_out_long" and e["dtype"] == "float32")
    assert long32["cache_resident_shapes"] == ["1024x1024"]  # 8 MiB in and out fit in 32 MiB; 4096x4096 does not
    unknown = _targets(_identity(True, None))["entries"]
    assert all(s["cache_resident"] is None for e in unknown for s in e["shapes"])
    assert limits.cache_bytes({"caches": {"L3": "32768K"}}) == 32 << 20
    assert limits.cache_bytes({"caches": {"L3": "1M"}}) == 1 << 20
    assert limits.cache_bytes({"caches": {}}) is None


def test_each_miss_is_set_against_the_memorys_copy():
    """A shape whose own copy ran from the cache is held against the copy at the largest shape of its dtype
    as well: a miss that reaches the threshold there is the cache's; one that does not is the op's."""
    recs = []
    for dn in ("float32", "bfloat16"):
        recs += [_rec("forward_out", dn, 1024, 1024, "copy", 40.0), _rec("forward_out", dn, 1024, 1024, "fused_rms_norm", 20.0),
                 _rec("forward_out", dn, 8192, 8192, "copy", 10.0), _rec("forward_out", dn, 8192, 8192, "fused_rms_norm", 9.5),
                 _rec("forward_out", dn, 2048, 2048, "copy", 20.0), _rec("forward_out", dn, 2048, 2048, "fused_rms_norm", 8.0)]
    copies = {limits.ceiling_key(r): r["gbps"] for r in recs if r["impl"] == "copy"}
    for r in recs:
        r["ratio_copy"] = r["gbps"] / copies[limits.ceiling_key(r)]
    entries = limits.machine_targets(bench.index_results(recs), _identity(True), ["glibc"], ["float32", "bfloat16"])["entries"]
    e = next(e for e in entries if e["target"] == "forward_out_long" and e["dtype"] == "float32")
    assert e["memory_copy_shape"] == "8192x8192" and e["memory_copy_gbps"] == 10.0  # the most bytes
    by = {s["shape"]: s for s in e["shapes"]}
    assert by["1024x1024"]["ratio"] == pytest.approx(0.5) and by["1024x1024"]["vs_memory_copy"] == pytest.approx(2.0)
    assert by["1024x1024"]["copy_vs_memory"] == pytest.approx(4.0)
    assert by["2048x2048"]["vs_memory_copy"] == pytest.approx(0.8)
    # 1024x1024 misses 0.9 against its own copy and reaches it against the memory's: the cache's ceiling;
    # 2048x2048 misses both ways: the op's own; 8192x8192 meets it and is in neither list
    assert e["cache_bound"] == ["1024x1024"] and e["not_cache_bound"] == ["2048x2048"]
    assert e["memory_worst"] == pytest.approx(0.8)
    assert limits.memory_copies({}) == {}


def test_the_fixed_cost_per_call_is_measured_and_set_against_each_step():
    from reference_impl.studies.bench import overhead

    oh = overhead.measure(quick=True)
    assert (oh["rows"], oh["hidden"]) == (overhead.ROWS, overhead.HIDDEN) and set(oh["dtypes"]) == set(bench.DTYPES)
    for cases in oh["dtypes"].values():
        assert set(cases) == set(overhead.CASES)
        assert all(0 < c["min_us"] <= c["median_us"] <= c["max_us"] for c in cases.values())
    # a made-up step of 2 ms against a made-up fixed cost of 100 us: 5%
    oh["dtypes"]["float32"]["fused_rms_norm"]["median_us"] = 100.0
    rec = _rec("forward_backward", "float32", 64, 1024, "fused_rms_norm", 1.0, alloc="glibc_tunables")
    rec["median_s"] = 2e-3
    rows = overhead.fixed_shares(oh, bench.index_results([rec]), "glibc_tunables", [(64, 1024)], ["float32"])
    assert rows == [{"dtype": "float32", "shape": "64x1024", "impl": "fused_rms_norm", "step_ms": pytest.approx(2.0),
                     "fixed_us": 100.0, "fixed_share": pytest.approx(0.05)}]
    assert overhead.share_table(rows).startswith("| dtype |") and "5.0%" in overhead.share_table(rows)
    assert overhead.table(oh).count("\n") == 1 + len(oh["dtypes"])
    assert overhead.fixed_shares(None, {}, "glibc", [(64, 1024)], ["float32"]) == []
    assert "not measured" in overhead.table(None) and "not measured" in overhead.share_table([])


# ------------------------------------------------------------------------------------------ the archive

def _fake_run(key: str, quick=False) -> dict:
    data = json.loads(json.dumps(BENCH))
    data["provenance"]["machine"]["machine_key"] = key
    data["provenance"]["quick"] = quick
    data.pop("archive", None)
    return data


def test_a_run_replaces_its_own_machines_file_only(tmp_path):
    a = archive.write(_fake_run("vendor-a-2c"), tmp_path)
    b = archive.write(_fake_run("vendor-b-2c"), tmp_path)
    before = b.read_text()
    again = _fake_run("vendor-a-2c")
    again["provenance"]["date"] = "2030-01-01T00:00:00+00:00"
    assert archive.write(again, tmp_path) == a
    assert json.loads(a.read_text())["provenance"]["date"].startswith("2030") and b.read_text() == before
    with pytest.raises(ValueError, match="smoke run"):
        archive.write(_fake_run("vendor-c-2c", quick=True), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vendor-a-2c.json", "vendor-b-2c.json"]


def test_a_corrupt_or_misnamed_machine_file_fails_naming_it(tmp_path):
    # the committed run's own key: a made-up key would contradict the CPU identity beside it, which the
    # consistency checks refuse before the file name is looked at
    key = BENCH["provenance"]["machine"]["machine_key"]
    good = json.dumps(_fake_run(key))
    (tmp_path / f"{key}.json").write_text(good[: len(good) // 2])
    with pytest.raises(schemas.DataFileError, match=re.escape(f"{key}.json is not valid JSON")):
        archive.archived(tmp_path)
    (tmp_path / f"{key}.json").write_text(good)
    (tmp_path / "other.json").write_text(good)
    with pytest.raises(schemas.DataFileError, match=re.escape(f"other.json: holds the run of machine '{key}'")):
        archive.archived(tmp_path)
    (tmp_path / "other.json").unlink()
    bad = json.loads(good)
    bad["results"][0]["gbps"] = "fast"
    (tmp_path / f"{key}.json").write_text(json.dumps(bad))
    with pytest.raises(schemas.DataFileError, match=r"(?s)" + re.escape(f"{key}.json does not match") + r".*results\.0"):
        archive.archived(tmp_path)


@pytest.mark.guards("bench.data")
def test_every_archived_machine_file_is_valid_and_the_latest_run_is_archived():
    files = archive.archived()  # schema and name of every file (errors name the file)
    assert len(files) >= 2, "the archive lost a machine"
    keys = [archive.key_of(d) for _, d in files]
    assert len(set(keys)) == len(keys)
    if not BENCH["provenance"]["quick"]:
        mine = archive.ARCHIVE / f"{archive.key_of(BENCH)}.json"
        assert mine.exists(), f"docs/data/bench_cpu.json has no copy in the archive: {mine.name}"
        assert json.loads(mine.read_text()) == BENCH, f"{mine.name} is not the latest run of its machine"


def test_a_machine_file_from_earlier_kernels_is_shown_as_such():
    rows = {archive.key_of(d): archive.machine_row(d) for _, d in archive.archived()}
    intel = rows["genuineintel-fx-mx-sx-avx512-2c"]
    assert intel["source_state"] == "earlier kernels" and intel["bf16_instructions"] == "no"
    assert intel["kernel_path"] == "avx512 (from the flags)"
    current = _fake_run("vendor-a-2c")
    current["provenance"]["sources"] = list(bench.SOURCES)
    current["provenance"]["source_hash"] = pv.source_hash(bench.SOURCES)
    current["provenance"].pop("hashed_settings", None)
    assert archive.machine_row(current)["source_state"] == "current kernels"


def test_quick_runs_write_outside_the_committed_data():
    assert bench.QUICK_OUT != bench.OUT and DATA not in bench.QUICK_OUT.parents
    assert DATA not in bench.QUICK_PLOTS.parents


# ------------------------------------------------------------------------------------------ the committed run

@pytest.mark.guards("bench.data")
def test_the_committed_run_holds_short_rows_qk_norm_and_its_machines_targets():
    """Fails until the benchmark is re-run with the short-row and QK-norm groups."""
    missing = [k for k in ("short_rows", "qk_norm", "machine_targets") if k not in BENCH]
    assert not missing, f"docs/data/bench_cpu.json lacks {missing}: rerun python -m reference_impl.studies.bench"
    short = {(r["dtype"], r["shape"]) for r in BENCH["short_rows"]["rows"]}
    assert short == {(dn, f"{r}x{d}") for dn in BENCH["settings"]["dtypes"] for r, d in groups.SHORT_SHAPES}
    qk = {(r["dtype"], r["pass"], r["shape"]) for r in BENCH["qk_norm"]["rows"]}
    assert qk == {(dn, p, "x".join(map(str, s))) for dn in BENCH["settings"]["dtypes"]
                  for p in ("forward", "forward+backward") for s in groups.QK_SHAPES}
    targets = {(e["target"], e["dtype"]) for e in BENCH["machine_targets"]["entries"] if e["count"]}
    assert {(t, dn) for t in ("forward_out_long", "forward_out_short", "forward_backward")
            for dn in BENCH["settings"]["dtypes"]} <= targets
    for e in BENCH["machine_targets"]["entries"]:  # every miss is sorted: the cache's ceiling or the op's own
        missed = [s["shape"] for s in e["shapes"] if not s["met"]]
        assert sorted(e["cache_bound"] + e["not_cache_bound"]) == sorted(missed), (e["target"], e["impl"], e["dtype"])
        assert e["memory_copy_shape"] and all("vs_memory_copy" in s for s in e["shapes"]), e["target"]
    oh = BENCH.get("call_overhead")
    assert oh and oh["allocator"] == BENCH["machine_targets"]["forward_backward_allocator"], "no fixed cost per call"
    fixed = {(e["dtype"], e["shape"], e["impl"]) for e in BENCH["fixed_shares"]}
    assert fixed == {(dn, f"{r}x{d}", impl) for dn in BENCH["settings"]["dtypes"] for r, d in BENCH["settings"]["shapes"]
                     for impl in ("fused_rms_norm", "fused_layer_norm")}
    kinds = {r["mode"] for r in BENCH["results"]}
    assert {"short_rows", "qk_forward", "qk_forward_backward"} <= kinds
    tiles = {r["tile_bytes"] for r in BENCH["results"] if "tile_bytes" in r}
    assert tiles == set(groups.TILE_SETTINGS)


def test_the_plots_draw_every_group_with_legends_inside(tmp_path):
    """The short-row plot and the opening plot from a file holding every group (records made up from the
    committed ones: this checks the drawing, legends and widths, not figures)."""
    data = json.loads(json.dumps(BENCH))
    data["settings"]["short_shapes"] = [list(s) for s in groups.SHORT_SHAPES]
    data["settings"]["tile_default_bytes"] = groups.default_tile_bytes()
    template = next(r for r in data["results"] if "gbps" in r)
    for dn in data["settings"]["dtypes"]:
        for rows, d in groups.SHORT_SHAPES:
            for i, impl in enumerate(groups.GROUP_IMPLS["short_rows"]):
                g = 10.0 + i
                data["results"].append({**template, "allocator": "glibc", "mode": "short_rows", "dtype": dn, "rows": rows,
                                        "hidden": d, "impl": impl, "gbps": g, "gbps_min": g - 1, "gbps_max": g + 1,
                                        "ratio_copy": g / 10.0})
    written = bench.plot(data, tmp_path)
    for name in ("cpu_short_rows", "cpu_answer", "cpu_forward_out_glibc"):
        assert {f"{name}.svg", f"{name}-dark.svg"} <= set(written), name


def _expand(text: str) -> str:
    import sys

    sys.path.insert(0, str(REPO))
    from site_hooks import hooks  # noqa: F401  (registers every macro)
    from site_hooks.macros import PageContext, expand

    return expand(text, PageContext("performance.md"))


@pytest.mark.guards("bench.page")
def test_the_page_lists_every_machine_and_says_when_a_section_predates_the_run(monkeypatch):
    table = _expand('{{ bench_machines() }}').split("\n")
    assert len(table) == 2 + len(archive.archived())
    assert any("earlier kernels" in line and "Intel" in line for line in table)
    from site_hooks import bench as site_bench

    fake = {**BENCH, "short_rows": {"rows": [{"dtype": "float32", "shape": "65536x128", "fused_rms_norm_ratio": 0.85}]}}
    fake.pop("qk_norm", None)
    monkeypatch.setattr(site_bench, "load", lambda name: fake)
    monkeypatch.setattr("site_hooks.data.load", lambda name: fake)
    got = _expand('{{ bench_rows("short_rows.rows", "shape|rows x d", "fused_rms_norm_ratio|/ copy|.2f") }}')
    assert got.split("\n")[2] == "| 65536x128 | 0.85 |"
    assert "predates this part of the benchmark (`qk_norm`)" in _expand('{{ bench_rows("qk_norm.rows", "dtype|dtype") }}')


def test_a_macro_alone_on_an_indented_line_keeps_its_table_in_the_block():
    got = _expand('??? note "x"\n    {{ bench_table([("a",), ("b",)], ("k", "={row[0]}")) }}\n')
    assert got.split("\n")[1:5] == ["    | k |", "    |---|", "    | a |", "    | b |"]


# ------------------------------------------------------------------------------------------ the forced AVX-512 line

def test_the_forced_avx512_line_sets_the_isa_around_its_own_calls_only(monkeypatch):
    from reference_impl.studies.bench import cases

    monkeypatch.setenv("NORMLAB_CPU_ISA", "scalar")
    seen = []
    forced = cases.EnvCase(lambda: seen.append(os.environ.get("NORMLAB_CPU_ISA")), {"NORMLAB_CPU_ISA": "avx512"})
    plain = lambda: seen.append(os.environ.get("NORMLAB_CPU_ISA"))  # noqa: E731
    bench.time_cases({"forced": forced, "plain": plain}, repeats=2, quick=True)
    assert "avx512" in seen and None in seen and "scalar" not in seen
    assert os.environ["NORMLAB_CPU_ISA"] == "scalar"


def test_the_forced_avx512_line_runs_in_bfloat16_on_a_bf16_cpu_only():
    import torch

    from reference_impl.studies.bench import cases

    x = torch.randn(4, 64)
    with pytest.raises(cases.Unavailable, match="only in its bfloat16 conversions"):
        cases.make_case("fused_rms_norm_avx512", "forward_out", x, torch.ones(64), None, None, torch.empty_like(x))
    xb = x.bfloat16()
    if not cases.has_avx512_bf16():
        with pytest.raises(cases.Unavailable, match="no AVX512-BF16"):
            cases.make_case("fused_rms_norm_avx512", "forward_out", xb, torch.ones(64).bfloat16(), None, None,
                            torch.empty_like(xb))
        return
    case = cases.make_case("fused_rms_norm_avx512", "forward_out", xb, torch.ones(64).bfloat16(), None, None,
                           torch.empty_like(xb))
    assert case.env == {"NORMLAB_CPU_ISA": "avx512"}
    cases.validate("fused_rms_norm_avx512", "forward_out", "bfloat16")  # against the float64 oracle
