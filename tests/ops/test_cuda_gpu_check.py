"""scripts/gpu_check.sh, the one script a lent GPU machine runs, run here in full with ``--dry-run``.

No GPU run can be repeated cheaply, so every step of the script runs on every ``make test`` with the CPU
stand-ins: the CUDA library compiles (nvcc, no GPU), the GPU tests are collected by the same pytest
commands (they skip without a device), the rsqrt sweep's entry point is checked, and the benchmark runs
every group on tiny shapes with the CUDA emulation and the Triton interpreter in place of the device
(reference_impl/studies/gpu_device.py). A typo, a missing file or a broken benchmark group fails here.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess

import pytest

from reference_impl.ops.build import REPO

SCRIPT = REPO / "scripts" / "gpu_check.sh"
STEPS = ("rsqrt-gpu-sweep", "build", "cuda-tests", "triton-tests", "bench")

pytestmark = pytest.mark.guards("cuda.dry_run")


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check_dry")
    committed = REPO / "docs" / "data" / "bench_gpu.json"
    before = _digest(committed)
    env = {**os.environ, "OUT": str(out), "CUDA_HOME": os.environ.get("CUDA_HOME", "/usr/local/cuda")}
    env.pop("TRITON_INTERPRET", None)  # the script sets it where it needs it
    proc = subprocess.run(["bash", str(SCRIPT), "--dry-run"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=3000)
    assert _digest(committed) == before, "the dry run changed docs/data/bench_gpu.json"
    return proc, out


def test_dry_run_runs_every_step_and_succeeds(dry_run):
    proc, out = dry_run
    summary = (out / "summary.txt").read_text() if (out / "summary.txt").exists() else ""
    assert proc.returncode == 0, f"gpu_check.sh --dry-run failed:\n{summary}\n{proc.stderr[-3000:]}"
    assert "DRY RUN" in summary
    for name in STEPS:
        assert re.search(rf"\] {re.escape(name)}: exit 0 after", summary), f"step {name} did not pass:\n{summary}"


def test_dry_run_collects_the_gpu_tests_and_writes_the_files_a_device_run_writes(dry_run):
    _, out = dry_run
    for f in ("summary.txt", "build_and_tests.log", "bench.log", "bench_gpu.json", "gpu_test_results.json"):
        assert (out / f).is_file(), f
    log = (out / "build_and_tests.log").read_text()
    assert "normlab CUDA library loaded" in log
    # both pytest steps collected GPU tests (skipped here); "no tests ran" would mean a wrong path or marker
    skipped = [int(n) for n in re.findall(r"(\d+) skipped", log)]
    assert len(skipped) >= 2 and min(skipped) > 0, log[-2000:]
    results = json.loads((out / "gpu_test_results.json").read_text())
    assert results["tests"] if "tests" in results else results


def test_dry_run_benchmark_covers_every_group_with_our_kernels_validated(dry_run):
    """The benchmark file of the dry run has the layout of a device run: every mode, the short rows, the
    block sweep, the vector-path cases and the summary; each of our implementations passed its check."""
    from reference_impl.studies import bench_gpu

    from reference_impl.studies import schemas

    _, out = dry_run
    schemas.check_file(out / "bench_gpu.json")  # the schema docs/data/bench_gpu.json will be held to
    data = json.loads((out / "bench_gpu.json").read_text())
    assert data["complete"] is True and "dry run" in data["device"]["name"]
    assert data["provenance"]["quick"] is True  # never mistaken for a measurement
    for dn, rows_d in ((dn, s) for dn in bench_gpu.DTYPES for s in bench_gpu.DRY_SHAPES):
        group = data["results"][dn][f"{rows_d[0]}x{rows_d[1]}"]
        for mode, impls in bench_gpu.MODES:
            ours = [i for i in impls if i not in bench_gpu.PEERS]
            assert set(ours) <= set(group[mode]), (dn, mode)
    for rows, d in bench_gpu.DRY_SHORT_SHAPES:
        assert set(bench_gpu.SHORT) - set(bench_gpu.PEERS) <= set(data["results"]["bfloat16"][f"{rows}x{d}"]["short_rows"])
    ours = {k: v for k, v in data["validation_rel_l2"].items() if k.split("|")[0] not in bench_gpu.PEERS}
    assert ours and all(v["ok"] for v in ours.values()), {k: v for k, v in ours.items() if not v["ok"]}
    assert set(data["v3_block_sweep_bf16"]["blocks"]) == {str(b) for b in bench_gpu.BLOCK_SWEEP}
    assert len(data["v4_vector_path_bf16"]) == 5 and "short_rows_bf16" in data["summary"]


def test_the_script_refuses_an_unknown_argument():
    proc = subprocess.run(["bash", str(SCRIPT), "--dryrun"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown argument --dryrun" in proc.stderr
