"""The strict site build is a test: warnings, broken links, missing snippets or unknown guards fail it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.site


def test_strict_build(tmp_path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(REPO / "site")],
        cwd=REPO, capture_output=True, text=True, env=env, timeout=1800,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    assert (REPO / "site" / "index.html").exists()
