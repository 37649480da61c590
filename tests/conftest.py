"""Shared fixtures and the results recorder.

Every run records, per test, its outcome, duration and the ids it guards (``@pytest.mark.guards``), plus
the commit, date and machine, in two files under ``build/``:

- ``test-results.json``: tests without the ``site`` marker (phase 1 of ``make test``);
- ``test-results-site.json``: tests with the ``site`` marker (phase 2: the build and the browser tests).

The site build reads the first one to show each guard's last outcome. A full run (no file, ``-k`` or
``--lf`` selection) replaces a file; a partial run (``pytest tests/test_x.py``) merges into it, replacing
every entry of the test functions it ran and leaving the others as they were, so a quick local check does
not wipe the outcomes of the rest. Each merge is listed under ``"partial_runs"``.

Outcomes: ``passed``, ``failed``, ``skipped``, ``xfailed``, ``xpassed``, or ``not run`` (collected, but the
session ended before it ran, e.g. after ``-x``). Deselected tests are not recorded.

Phase 1 runs in two pytest-xdist workers (``make test``; ``--dist loadfile``: a test file's tests share one
worker, in their order). The workers collect; the controller writes the files. Each test carries its guard
ids and its phase to the controller in its report (``user_properties``), so the files are the same as from
one process, except that a test a crashed worker never ran is missing instead of ``not run``.

Native libraries are built before the first test runs, so no test's duration includes a compiler run:
collecting a module that imports ``reference_impl.ops`` builds (or loads) the CPU library, and after
collection :func:`pytest_collection_finish` builds whatever else the selected tests use (the CUDA library,
its CPU emulation, the rsqrt study's extension). Their times go to ``"setup"`` -> ``"native builds"``.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from reference_impl.provenance import cpu_model

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "build"
CORE_FILE = "test-results.json"
SITE_FILE = "test-results-site.json"
_results: dict[str, dict] = {}
_site_items: set[str] = set()
_GUARDS_KEY, _SITE_KEY = "normlab_guards", "normlab_site"


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    # trylast: runs after the -m / -k deselection, so only the tests that will run are recorded
    for item in items:
        guards = []
        for mark in item.iter_markers("guards"):
            guards.extend(mark.args)
        _results[item.nodeid] = {"outcome": "not run", "duration": 0.0, "guards": sorted(set(guards))}
        site = item.get_closest_marker("site") is not None
        if site:
            _site_items.add(item.nodeid)
        # under xdist the controller collects nothing: what it records travels in each report
        item.user_properties.append((_GUARDS_KEY, sorted(set(guards))))
        item.user_properties.append((_SITE_KEY, site))


# test files -> the native libraries (loader names in reference_impl.ops.build) their tests need
_NATIVE_NEEDS = {
    "tests/ops/test_cuda_build.py": ("load_cuda_library", "load_emulation_library"),
    "tests/ops/test_cuda_kernels.py": ("load_cuda_library",),
    "tests/ops/test_contract_emulation.py": ("load_emulation_library",),
    "tests/ops/test_contract_cuda.py": ("load_cuda_library",),
    "tests/ops/test_rsqrt.py": ("load_rsqrt_cpu",),
}


def pytest_collection_finish(session):
    """Build the native libraries the selected tests need, before any of them runs (timed apart). Under
    xdist each worker does this after its collection; the build folder's lock makes the second one wait
    for the first and load its result."""
    files = {item.nodeid.split("::", 1)[0] for item in session.items}
    loaders = sorted({name for f in files for name in _NATIVE_NEEDS.get(f, ())})
    if not loaders:
        return
    from reference_impl.ops import build, library

    for name in loaders:
        if name == "load_cuda_library" and not _cuda_toolkit():
            continue  # the tests themselves report the missing toolkit
        try:  # the CUDA kernels through the ops package, which registers their Python parts too
            library.load_cuda() if name == "load_cuda_library" else getattr(build, name)()
        except build.NativeBuildError:
            pass  # the test that needs the library fails with the compiler's message


def _cuda_toolkit() -> bool:
    home = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    return (Path(home) / "bin" / "nvcc").exists()


def _native_build_times() -> dict:
    build = sys.modules.get("reference_impl.ops.build")
    seconds = dict(getattr(build, "BUILD_SECONDS", {}) or {})
    return {"seconds": round(sum(seconds.values()), 2), "libraries": {k: round(v, 2) for k, v in sorted(seconds.items())}}


def pytest_deselected(items):
    for item in items:
        _results.pop(item.nodeid, None)
        _site_items.discard(item.nodeid)


def pytest_runtest_logreport(report):
    props = dict(getattr(report, "user_properties", ()) or ())
    if report.nodeid not in _results and _GUARDS_KEY in props:
        # the xdist controller: the test was collected by a worker
        _results[report.nodeid] = {"outcome": "not run", "duration": 0.0, "guards": list(props[_GUARDS_KEY])}
        if props.get(_SITE_KEY):
            _site_items.add(report.nodeid)
    entry = _results.setdefault(report.nodeid, {"outcome": "not run", "duration": 0.0, "guards": []})
    entry["duration"] = round(entry["duration"] + report.duration, 4)
    if report.when == "call" or report.outcome != "passed":
        # a failure or skip in setup/teardown decides the outcome; otherwise the call phase does
        if entry["outcome"] in ("not run", "passed"):
            if hasattr(report, "wasxfail"):
                entry["outcome"] = "xfailed" if report.skipped else "xpassed"
            else:
                entry["outcome"] = "skipped" if report.skipped else report.outcome
            if report.skipped and isinstance(report.longrepr, tuple):
                entry["skip_reason"] = str(report.longrepr[2])


def _function_id(nodeid: str) -> str:
    """``tests/t.py::test_f[a-b]`` -> ``tests/t.py::test_f``: the unit a partial run replaces."""
    return nodeid.split("[", 1)[0]


def _is_full_run(config) -> bool:
    """True when the run selected tests only by the phase marker: it then replaces the results file."""
    explicit_args = config.args_source == pytest.Config.ArgsSource.ARGS
    narrowed = bool(config.getoption("keyword", "")) or bool(config.getoption("lf", False)) \
        or bool(config.getoption("deselect", None))
    markexpr = (config.getoption("markexpr", "") or "").strip()
    return not explicit_args and not narrowed and markexpr in ("", "site", "not site")


def _write(name: str, entries: dict, meta: dict, full: bool) -> None:
    path = BUILD / name
    old = {}
    if not full and path.exists():
        try:
            old = json.loads(path.read_text())
        except (OSError, ValueError):
            old = {}
    if full or not old:
        payload = dict(meta, tests=dict(sorted(entries.items())), partial_runs=[])
        if not full:
            payload["partial_runs"] = [{k: meta[k] for k in ("date", "commit", "markexpr", "exitstatus")}
                                       | {"tests": len(entries)}]
    else:
        rerun = {_function_id(n) for n in entries}
        tests = {n: e for n, e in old.get("tests", {}).items() if _function_id(n) not in rerun}
        tests.update(entries)
        payload = dict(old, tests=dict(sorted(tests.items())), setup=meta.get("setup", old.get("setup", {})))
        payload.setdefault("partial_runs", []).append(
            {k: meta[k] for k in ("date", "commit", "markexpr", "exitstatus")} | {"tests": len(entries)})
        if int(meta["exitstatus"]) not in (0, 5):
            payload["exitstatus"] = meta["exitstatus"]
    BUILD.mkdir(exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=1))
    tmp.replace(path)  # atomic: a concurrent site build never reads half a file


def pytest_sessionfinish(session, exitstatus):
    if not _results or hasattr(session.config, "workerinput"):
        return
    import torch

    meta = {
        "commit": _git("rev-parse", "--short", "HEAD"),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "ci": os.environ.get("CI", "") == "true",
        },
        "markexpr": session.config.getoption("markexpr", "") or "",
        "exitstatus": int(exitstatus),
        # compiling or loading the native libraries, before the first test: not in any test's duration
        "setup": {"native builds": _native_build_times()},
    }
    full = _is_full_run(session.config)
    core = {n: e for n, e in _results.items() if n not in _site_items}
    site = {n: e for n, e in _results.items() if n in _site_items}
    if core:
        _write(CORE_FILE, core, meta, full)
    if site:
        _write(SITE_FILE, site, meta, full)


@pytest.fixture(autouse=True)
def _torch_threads_restored():
    """A test that sets torch's thread count (a study's quick run sets one thread) or its default dtype leaves
    them as it found them, so that what runs after it does not depend on the order the xdist workers picked."""
    import torch

    before, dtype = torch.get_num_threads(), torch.get_default_dtype()
    yield
    if torch.get_num_threads() != before:
        torch.set_num_threads(before)
    if torch.get_default_dtype() != dtype:
        torch.set_default_dtype(dtype)


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(20261130)
