"""The install commands the site shows, run as shown, and the kit's five-line example after them.

Home, the kit's page ("Check your implementation") and the API reference each have an Install section with
the same commands. This test reads them from the built pages (the text of their ``bash`` blocks), checks the
three pages agree, and runs them in fresh virtual environments, from a copy of the checkout's package files
(what a clone holds), with no network:

- ``python -m venv --without-pip`` makes each environment; a ``.pth`` file gives it the already installed
  third-party packages: a folder of symlinks to the distributions that torch, NumPy, SymPy, transformers (the
  ``hf`` extra), pytest (the example is a pytest test), pip and setuptools (to build the wheel without build
  isolation) need, found from their metadata, so ``reference_impl`` itself is not among them;
- ``pip`` on the page is that environment's pip with ``--no-index`` (nothing is downloaded) and
  ``--no-build-isolation`` (setuptools from the environment instead of a download);
- the editable install must import the package from the clone; the wheel install from the environment's
  own site-packages, and pytest must find the kit's plugin there;
- the page's five-line example (the block of "In pytest") runs with pytest in the wheel's environment and
  passes, and the same five lines with a function that rounds before the gain (on bfloat16 probes of width
  33 only, to keep it quick) fail with a table and the diagnosis that docs/data/check_example.json records
  for that function, so the pass is not vacuous;
- the kit compiles nothing: the native build cache (``XDG_CACHE_HOME``) stays empty.
"""
from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.package.test_wheel import _run  # a command run for its output; its failure shows both streams
from tests.site.test_reading import reading_site  # noqa: F401  (fixture: the built site)

pytestmark = [pytest.mark.site, pytest.mark.guards("check.kit")]

REPO = Path(__file__).resolve().parents[2]
PAGES = {"home": "index.html", "check": "check/index.html", "api": "api/index.html"}
# what a clone holds that building the package reads
CLONE_PATHS = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "reference_impl", "reference_impl_pytest",
               "cuda")
ROOTS = ("torch", "numpy", "sympy", "transformers", "pytest", "pip", "setuptools")
CHECK_EXAMPLE = REPO / "docs" / "data" / "check_example.json"


def _code_text(block: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", block))


def section_blocks(page_html: str, section_id: str, lang: str) -> list[tuple[str, str]]:
    """(title, code) of every ``lang`` code block in the h2 section ``section_id`` of a built page."""
    start = re.search(rf'<h2 id="{re.escape(section_id)}"', page_html)
    assert start, f"no section #{section_id} on the page"
    end = page_html.find("<h2", start.end())
    part = page_html[start.end():end if end >= 0 else None]
    out = []
    for m in re.finditer(rf'<div class="language-{lang} highlight">(.*?)</code></pre></div>', part, re.S):
        title = re.search(r'<span class="filename">(.*?)</span>', m.group(1), re.S)
        code = re.search(r"<code[^>]*>(.*)", m.group(1), re.S)
        out.append((_code_text(title.group(1)) if title else "", _code_text(code.group(1)).strip("\n")))
    return out


def _closure(roots) -> list[metadata.Distribution]:
    """The installed distributions ``roots`` need (their requirements for this interpreter, recursively)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = [(r, ()) for r in roots]
    while todo:
        name, extras = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            if name in roots:
                raise
            continue  # an optional requirement not installed here
        seen[key] = dist
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in ("",) + tuple(extras)):
                todo.append((req.name, tuple(req.extras)))
    return list(seen.values())


def _view(target: Path) -> Path:
    """A folder of symlinks to the top-level entries of the distributions in ``_closure(ROOTS)``."""
    purelib = Path(sysconfig.get_paths()["purelib"]).resolve()
    target.mkdir()
    for dist in _closure(ROOTS):
        for f in dist.files or []:
            parts = Path(f).parts
            if not parts or parts[0] == ".." or parts[0].endswith(".pth"):
                continue
            src = (Path(dist.locate_file(parts[0]))).resolve()
            if src.parent != purelib or not src.exists():
                continue
            link = target / parts[0]
            if not link.exists():
                link.symlink_to(src)
    assert not any(p.name.startswith(("reference_impl", "__editable__")) for p in target.iterdir())
    return target


@pytest.fixture(scope="module")
def install_blocks(reading_site) -> list[tuple[str, str]]:  # noqa: F811
    found = {name: section_blocks((reading_site / path).read_text(encoding="utf-8"), "install", "bash")
             for name, path in PAGES.items()}
    for name, blocks in found.items():
        assert len(blocks) == 2, f"{PAGES[name]}: #install has {len(blocks)} bash blocks, expected 2 (editable, wheel)"
        assert blocks == found["check"], f"{PAGES[name]}'s install commands differ from the kit page's:\n{blocks}"
    return found["check"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A copy of the checkout's package files (the clone), the shared packages' view and a clean environment."""
    tmp = tmp_path_factory.mktemp("install")
    clone = tmp / "clone"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.o")
    for rel in CLONE_PATHS:
        src = REPO / rel
        (shutil.copytree(src, clone / rel, ignore=ignore) if src.is_dir() else
         (clone.mkdir(exist_ok=True), shutil.copy2(src, clone / rel)))
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "REFERENCE_IMPL_BUILD_DIR", "VIRTUAL_ENV", "PIP_INDEX_URL")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", XDG_CACHE_HOME=str(tmp / "cache"))
    return {"tmp": tmp, "clone": clone, "view": _view(tmp / "shared-site-packages"), "env": env}


def _environment(world, name: str) -> tuple[Path, Path]:
    venv = world["tmp"] / name
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], env=world["env"])
    py = venv / "bin" / "python"
    site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     env=world["env"]).stdout.strip())
    (site / "_shared_packages.pth").write_text(f"{world['view']}\n")
    return py, site


def _run_block(world, py: Path, code: str) -> str:
    """Runs a page's bash block in the clone, with ``pip`` as the environment's pip, offline."""
    script = (f'pip() {{ "{py}" -m pip "$@" --no-index --no-build-isolation --quiet; }}\n'
              f"set -euo pipefail\n{code}\n")
    return _run(["bash", "-c", script], cwd=world["clone"], env=world["env"], timeout=300).stdout


def _where(world, py: Path) -> Path:
    out = _run([str(py), "-I", "-c", "import reference_impl; print(reference_impl.__file__)"],
               cwd=world["tmp"], env=world["env"]).stdout.strip()
    return Path(out).resolve().parent


def test_the_three_pages_show_the_same_commands_with_the_hf_extra(install_blocks):
    editable, wheel = (code for _, code in install_blocks)
    assert re.search(r'^pip install -e "\.\[hf\]"$', editable, re.M), editable
    assert re.search(r"^pip wheel .*\.$", wheel, re.M) and "[hf]" in wheel, wheel
    # the extra the pages name is one the package declares
    import tomllib
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "hf" in extras and any(r.startswith("transformers") for r in extras["hf"]), extras


def test_editable_install_from_a_clone(install_blocks, world):
    py, _ = _environment(world, "venv-editable")
    _run_block(world, py, install_blocks[0][1])
    assert _where(world, py) == (world["clone"] / "reference_impl").resolve()


def test_wheel_install_then_the_five_line_example(install_blocks, world, reading_site):  # noqa: F811
    py, site = _environment(world, "venv-wheel")
    _run_block(world, py, install_blocks[1][1])
    assert _where(world, py) == (site / "reference_impl").resolve(), "the wheel's package is not the one imported"

    # the page's five lines, as the built page shows them
    page = (reading_site / PAGES["check"]).read_text(encoding="utf-8")
    ((_, five),) = section_blocks(page, "in-pytest", "python")[:1]
    assert "check_norm(" in five and five.count("\n") <= 6, five
    assert "gemma_rms_norm as my_rms_norm" in five, "the page's example no longer imports the function this test swaps"
    recorded = json.loads(CHECK_EXAMPLE.read_text())["runs"]["rounds_before_gain"]
    # the diagnosis recorded for that function, up to its details (which depend on the probes)
    said = recorded["diagnosis"].split(" (")[0]
    assert "rounded to" in said and "before the gain" in said, said
    control = (five.replace("gemma_rms_norm as my_rms_norm", "rounds_before_gain as my_rms_norm")
               .replace("def test_my_rms_norm_matches_gemma3", "def test_control_that_must_fail")
               .replace('model="gemma3_text")', 'model="gemma3_text", dtypes=("bf16",), widths=(33,))'))
    assert control.count("rounds_before_gain") == 1 and "widths=(33,)" in control, control
    work = world["tmp"] / "user-tests"
    work.mkdir()
    (work / "test_norm.py").write_text(five + "\n")
    (work / "test_control.py").write_text(control + "\n")
    proc = subprocess.run([str(py), "-I", "-m", "pytest", "-p", "no:cacheprovider", "-q", "--tb=short",
                           "test_norm.py", "test_control.py"],
                          cwd=work, env=world["env"], capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, f"pytest exited {proc.returncode}, expected 1 (one pass, one failure):\n{out[-6000:]}"
    assert re.search(r"\b1 failed, 1 passed\b", out), out[-6000:]
    assert "FAILED test_control.py::test_control_that_must_fail" in out and "NormCheckFailed" in out, out[-6000:]
    assert re.search(r"\b\d+ of \d+ cases FAIL\b", out), out[-6000:]
    assert said in out, f"the recorded diagnosis {said!r} is not in the output:\n{out[-6000:]}"
    plugins = _run([str(py), "-I", "-c", "from importlib.metadata import entry_points; "
                    "print([e.value for e in entry_points(group='pytest11')])"], env=world["env"]).stdout
    assert "reference_impl_pytest" in plugins, plugins
    cache = Path(world["env"]["XDG_CACHE_HOME"])
    assert not cache.exists() or not any(cache.rglob("*.so")), f"the kit compiled something: {list(cache.rglob('*.so'))}"
