"""What machine a measurement ran on: one helper for every command and the test-results file."""
from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name as /proc/cpuinfo gives it (``platform.processor()`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def basic_info() -> dict:
    """CPU model, logical cores and Python version."""
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version()}
