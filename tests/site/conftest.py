"""Fixtures of the site tests: the built site (built once per session) and a local server for it."""
from __future__ import annotations

import functools
import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "site"


def build_site(site_dir: Path = SITE) -> None:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
        cwd=REPO, capture_output=True, text=True, env=env, timeout=1800,
    )
    if proc.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")


def pytest_collection_modifyitems(session, config, items):
    """Runs the strict build (tests/site/test_build.py) before the other site tests, which browse its output;
    tests without the site marker keep their place in front, so the build shows their fresh outcomes."""
    def rank(item):
        if item.get_closest_marker("site") is None:
            return 0
        return 1 if item.nodeid.startswith("tests/site/test_build.py") else 2

    items.sort(key=rank)  # stable: the order within each group is kept


@pytest.fixture(scope="session")
def site_dir() -> Path:
    """The built site. tests/site/test_build.py builds it first in the session; build only if it did not."""
    if not (SITE / "index.html").is_file():
        build_site()
    return SITE


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest's output clean
        pass


@pytest.fixture(scope="session")
def site_url(site_dir):
    """Serves the built site on 127.0.0.1 on a free port; yields the base URL ending in '/'."""
    handler = functools.partial(_QuietHandler, directory=str(site_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
