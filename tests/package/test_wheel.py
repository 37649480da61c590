"""The package as a user installs it: a wheel built from the checkout, in a fresh virtual environment.

One test, about two minutes (most of it the native build, which an installed package does on first use):

1. ``pip wheel`` builds the wheel from the checkout (no build isolation, no index: nothing is downloaded);
2. a temporary virtual environment gets the already installed third-party packages (torch, transformers,
   ...) through a ``.pth`` file pointing at a view of this environment's site-packages that leaves out
   ``reference_impl`` itself, and ``pip install --no-deps --no-index`` installs the wheel into it;
3. from a folder outside the checkout, with ``PYTHONPATH`` cleared, that environment's Python imports the
   installed package, checks where its native sources and build cache are, builds and runs
   ``fused_rms_norm`` (its build cache pointed at a temporary ``XDG_CACHE_HOME``) and runs the kit
   (``reference_impl.check.check_norm``) on a correct function;
4. the checkout's files are listed before and after (all but its native build cache and built site):
   building, installing and running write nothing there.
"""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SKIP_DIRS = {".git", ".venv", "node_modules", "__pycache__", ".pytest_cache", ".hypothesis"}
# the checkout's own native build cache and built site: other commands (and, on a shared machine, other
# sessions) write there while this test runs; the installed package is shown to build elsewhere by the
# script's own check that its build folder lies under the temporary cache
# The test session's own results files are written by tests that run pytest inside them (the GPU script's
# dry run), possibly at the same time in the other xdist worker: they are the session's, not the wheel's.
SKIP_PATHS = {"build/native", "site"}
SESSION_FILES = ("build/test-results",)         # test-results.json, -site.json and their .tmp while written

# Runs inside the fresh environment, from a folder outside the checkout. Prints one line per check.
SCRIPT = textwrap.dedent('''
    import os, sys
    from pathlib import Path

    import torch

    import reference_impl
    from reference_impl import tolerances as tol
    from reference_impl.ops import build

    site = Path(sys.argv[1]).resolve()
    repo = Path(sys.argv[2]).resolve()
    cache = Path(sys.argv[3]).resolve()
    pkg = Path(reference_impl.__file__).resolve().parent
    assert pkg == site / "reference_impl", f"reference_impl imported from {pkg}, not from {site}"
    assert repo not in pkg.parents, f"the package came from the checkout: {pkg}"
    assert build.SOURCES == pkg / "_native", build.SOURCES
    assert (build.SOURCES / "ops.h").is_file() and (build.SOURCES / "cpu" / "rms_norm_cpu.cpp").is_file()
    assert cache in build.BUILD_ROOT.parents, f"build cache {build.BUILD_ROOT} is not under {cache}"
    print("installed package at", pkg, "native sources", build.SOURCES, "cache", build.BUILD_ROOT)

    # the fused op: builds the native CPU library into the cache on first use
    torch.manual_seed(0)
    x = torch.randn(4, 33)
    w = 1.0 + 0.1 * torch.randn(33)
    y = reference_impl.fused_rms_norm(x, w, 1e-6)
    bound = tol.convention_forward_bound(x, w, 1e-6, "llama")
    tol.assert_within(y, reference_impl.rms_norm(x, w, 1e-6).double().numpy(), 2 * bound, "installed fused_rms_norm")
    built = sorted(p.name for p in (build.BUILD_ROOT / build.CPU_NAME).glob("*.so"))
    assert built, f"no shared object under {build.BUILD_ROOT / build.CPU_NAME}"
    print("fused_rms_norm ok; built", built)

    # the kit, on a correct RMSNorm in Llama's order
    from reference_impl.check import check_norm

    def my_rms_norm(x, weight, eps):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        return weight * h.to(x.dtype)

    report = check_norm(my_rms_norm, model="llama")
    print("check_norm ok:", type(report).__name__)
''')


def _tree_listing() -> set[str]:
    """Every path under the checkout, except version control, the environment and caches."""
    found = set()
    for root, dirs, files in os.walk(REPO):
        rel = Path(root).relative_to(REPO)
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and (rel / d).as_posix() not in SKIP_PATHS]
        found.update(p for p in (str(rel / name) for name in dirs + files) if not p.startswith(SESSION_FILES))
    return found


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} exited {proc.returncode}\n--- stdout\n{proc.stdout[-6000:]}\n"
                    f"--- stderr\n{proc.stderr[-6000:]}")
    return proc


def _view_of_site_packages(target: Path) -> Path:
    """A folder of symlinks to this environment's site-packages entries, without reference_impl's own."""
    here = Path(sysconfig.get_paths()["purelib"])
    target.mkdir()
    for entry in here.iterdir():
        name = entry.name.lower()
        if name.startswith(("reference_impl", "__editable__", "_reference_impl")) or entry.suffix == ".pth":
            continue
        (target / entry.name).symlink_to(entry)
    return target


@pytest.mark.slow
def test_wheel_installs_and_runs_in_a_fresh_environment(tmp_path):
    before = _tree_listing()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "REFERENCE_IMPL_BUILD_DIR", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"

    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
          "-w", str(wheels), str(REPO)], env=env, cwd=tmp_path)
    (wheel,) = wheels.glob("reference_impl-*.whl")

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], env=env, cwd=tmp_path)
    py = venv / "bin" / "python"
    site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     env=env, cwd=tmp_path).stdout.strip())
    view = _view_of_site_packages(tmp_path / "shared-site-packages")
    (site / "_shared_packages.pth").write_text(f"{view}\n")
    _run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index", "-q", str(wheel)],
         env=env, cwd=tmp_path)

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    cache = tmp_path / "cache"
    script = outside / "use_the_package.py"
    script.write_text(SCRIPT)
    run_env = dict(env, XDG_CACHE_HOME=str(cache),
                   PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}{os.pathsep}{Path(sys.executable).parent}")
    proc = _run([str(py), str(script), str(site), str(REPO), str(cache)], env=run_env, cwd=outside, timeout=1800)
    print(proc.stdout)
    assert "fused_rms_norm ok" in proc.stdout and "check_norm ok" in proc.stdout

    new = sorted(_tree_listing() - before)
    assert not new, f"building, installing or using the wheel wrote into the checkout: {new[:20]}"
