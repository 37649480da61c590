"""Shared fixtures and the results recorder.

Every run writes ``build/test-results.json`` (or ``build/test-results-site.json`` for the ``-m site``
phase): one entry per test with its outcome, duration and the ids it guards (``@pytest.mark.guards``),
plus the commit, date and machine. The site build reads the file to show each guard's last outcome.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_results: dict[str, dict] = {}


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def pytest_collection_modifyitems(session, config, items):
    for item in items:
        guards = []
        for mark in item.iter_markers("guards"):
            guards.extend(mark.args)
        _results[item.nodeid] = {"outcome": "not run", "duration": 0.0, "guards": sorted(set(guards))}


def pytest_runtest_logreport(report):
    entry = _results.setdefault(report.nodeid, {"outcome": "not run", "duration": 0.0, "guards": []})
    entry["duration"] = round(entry["duration"] + report.duration, 4)
    if report.when == "call" or report.outcome != "passed":
        # a failure or skip in setup/teardown decides the outcome; otherwise the call phase does
        if entry["outcome"] in ("not run", "passed"):
            entry["outcome"] = "skipped" if report.skipped else report.outcome
            if report.skipped and isinstance(report.longrepr, tuple):
                entry["skip_reason"] = str(report.longrepr[2])


def pytest_sessionfinish(session, exitstatus):
    if not _results or hasattr(session.config, "workerinput"):
        return
    markexpr = session.config.getoption("markexpr", "") or ""
    name = "test-results-site.json" if markexpr.strip() == "site" else "test-results.json"
    import torch

    payload = {
        "commit": _git("rev-parse", "--short", "HEAD"),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "cpu": _cpu_model(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "ci": os.environ.get("CI", "") == "true",
        },
        "markexpr": markexpr,
        "exitstatus": int(exitstatus),
        "tests": dict(sorted(_results.items())),
    }
    out = REPO / "build"
    out.mkdir(exist_ok=True)
    (out / name).write_text(json.dumps(payload, indent=1))


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(20261130)
