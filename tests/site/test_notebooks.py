"""Notebooks are executed during the build, a failing cell fails it, and notebook pages load nothing from a CDN.

The checks build a tiny temporary MkDocs project that uses the ``mkdocs-jupyter`` configuration of this
repository's ``mkdocs.yml`` unchanged, once with a notebook whose cell fails and once with one that runs.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.site, pytest.mark.guards("site.notebooks")]
MARKER = "executed-during-the-build-4217"


class _Tolerant(yaml.SafeLoader):
    pass


_Tolerant.add_multi_constructor("", lambda loader, suffix, node: None)


def _jupyter_config() -> dict:
    cfg = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=_Tolerant)
    for plugin in cfg.get("plugins", []):
        if isinstance(plugin, dict) and "mkdocs-jupyter" in plugin:
            return plugin["mkdocs-jupyter"] or {}
    pytest.fail("mkdocs.yml does not configure the mkdocs-jupyter plugin")


def _notebook(source: str) -> dict:
    return {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["# A notebook\n"]},
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": [source]},
        ],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                     "language_info": {"name": "python"}},
        "nbformat": 4, "nbformat_minor": 5,
    }


def _build(tmp_path: Path, source: str, files: dict | None = None) -> subprocess.CompletedProcess:
    docs = tmp_path / "docs"
    docs.mkdir(exist_ok=True)
    (docs / "index.md").write_text("# Home\n")
    for name, text in (files or {}).items():
        (docs / name).write_text(text)
    (docs / "nb.ipynb").write_text(json.dumps(_notebook(source)))
    config = {
        "site_name": "notebook check",
        "theme": {"name": "material", "font": False},
        "plugins": [{"mkdocs-jupyter": _jupyter_config()}],
        "nav": [{"Home": "index.md"}, {"Notebook": "nb.ipynb"}],
    }
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)


def test_the_repository_config_executes_notebooks_and_forbids_errors():
    cfg = _jupyter_config()
    assert cfg.get("execute") is True
    assert cfg.get("allow_errors") is False
    assert cfg.get("include_requirejs") is False
    assert not cfg.get("execute_ignore"), "every notebook must run during the build"


def test_a_cell_broken_by_the_code_it_imports_fails_the_next_build(tmp_path):
    """mkdocs-jupyter caches executed notebooks by default, keyed on the notebook file alone: a change in
    the package a notebook imports would then not re-run it. The repository's config must not allow that."""
    cell = "import helper_for_check\nprint(helper_for_check.value())\n"
    first = _build(tmp_path, cell, {"helper_for_check.py": "def value():\n    return 42\n"})
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    second = _build(tmp_path, cell, {"helper_for_check.py": "def value():\n    raise ValueError('helper broke')\n"})
    assert second.returncode != 0, (
        "the notebook was not re-executed after the code it imports changed (mkdocs-jupyter served its cache): "
        "set `cache: false` for mkdocs-jupyter in mkdocs.yml")
    assert "helper broke" in second.stdout + second.stderr


def test_a_failing_cell_fails_the_build(tmp_path):
    proc = _build(tmp_path, "raise RuntimeError('deliberate failure in a notebook cell')\n")
    assert proc.returncode != 0, "the build succeeded although a notebook cell raised"
    assert "deliberate failure in a notebook cell" in proc.stdout + proc.stderr


def test_a_passing_notebook_is_executed_and_needs_no_cdn(tmp_path):
    proc = _build(tmp_path, f"print('{MARKER}', 6 * 7)\n")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    page = (tmp_path / "site" / "nb" / "index.html").read_text()
    assert f"{MARKER} 42" in page, "the cell's output is missing: the notebook was not executed"
    # nothing the page loads may come from another host: script/link/img/iframe sources and CSS imports
    loads = re.findall(r"<(?:script|img|iframe|source)\b[^>]*\bsrc=[\"']([^\"']*)", page)
    loads += re.findall(r"<link\b[^>]*\bhref=[\"']([^\"']*)", page)
    loads += re.findall(r"@import\s+(?:url\()?[\"']?([^\"');]+)", page)
    external = [u for u in loads if re.match(r"(?:https?:)?//", u)]
    assert not external, f"the notebook page loads from other hosts: {external}"
