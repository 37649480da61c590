"""Fixtures of the site tests: the built site (built once per session) and a local server for it."""
from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "site"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


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


def _missing(what: str):
    msg = (f"{what} is missing, so the browser tests cannot run. Install Debian's Chromium with "
           "`sudo apt-get install chromium` (and the pinned Python packages with `make setup`); "
           "set CHROMIUM to use another Chromium binary.")
    if os.environ.get("CI") == "true":
        pytest.fail(msg + " Under CI=true this is a failure, not a skip.")
    pytest.skip(msg)


@pytest.fixture(scope="session")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("Playwright for Python")
    exe = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(exe).is_file():
        _missing(f"Chromium ({exe})")
    pw = sync_playwright().start()
    try:
        b = pw.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
    except Exception as exc:  # noqa: BLE001 - report why the browser did not start
        pw.stop()
        _missing(f"a working Chromium ({exe}: {exc})")
    yield b
    b.close()
    pw.stop()


def private_or_built_site(request) -> Path:
    """The site a reading test measures: ``NORMLAB_READING_SITE`` (a site built elsewhere, for measuring a
    change without the shared build) when set, else the session's built site."""
    private = os.environ.get("NORMLAB_READING_SITE")
    if private:
        site = Path(private)
        if not (site / "index.html").is_file():
            pytest.fail(f"NORMLAB_READING_SITE={private} holds no built site (no index.html)")
        return site
    return request.getfixturevalue("site_dir")
