"""Builds and loads the native sources in ``cuda/`` with ``torch.utils.cpp_extension``.

Builds are cached under ``build/native/<name>`` in the repository (git-ignored), so a second import is
instant. Nothing is built at import time of :mod:`reference_impl`; callers ask for an extension by name.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCES = REPO / "cuda"
BUILD_ROOT = REPO / "build" / "native"


class NativeBuildError(RuntimeError):
    """Raised when a native extension cannot be built (missing compiler, compile error, ...)."""


def _default_cuda_home() -> None:
    # torch.utils.cpp_extension reads CUDA_HOME once, at import; the nvcc shim on PATH would make it guess
    # /usr/local, where linking fails. Set it before the first import, for CPU builds too.
    if "CUDA_HOME" not in os.environ and Path("/usr/local/cuda/bin/nvcc").exists():
        os.environ["CUDA_HOME"] = "/usr/local/cuda"


def _require_compiler(cuda: bool) -> None:
    _default_cuda_home()
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None:
        raise NativeBuildError(f"no C++ compiler found (looked for {cxx!r} on PATH); install g++ to build the native ops")
    if cuda:
        home = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
        if not (Path(home) / "bin" / "nvcc").exists():
            raise NativeBuildError(
                f"nvcc not found under CUDA_HOME={home!r}; set CUDA_HOME to the CUDA toolkit (e.g. /usr/local/cuda)"
            )
        os.environ["CUDA_HOME"] = home


def load_extension(name: str, sources, *, cuda: bool = False, extra_cflags=(), extra_cuda_cflags=(),
                   extra_ldflags=(), is_python_module: bool = False, verbose: bool = False):
    """Compile (or reuse the cached build of) ``sources`` (paths relative to ``cuda/``) and load it.

    With ``is_python_module=False`` the library is loaded into the process for its ``TORCH_LIBRARY``
    registrations and the path of the shared object is returned.
    """
    _require_compiler(cuda)
    from torch.utils import cpp_extension  # imported late: it pulls in setuptools

    build_dir = BUILD_ROOT / name
    build_dir.mkdir(parents=True, exist_ok=True)
    srcs = [str(SOURCES / s) for s in sources]
    try:
        return cpp_extension.load(
            name=name,
            sources=srcs,
            extra_cflags=list(extra_cflags),
            extra_cuda_cflags=list(extra_cuda_cflags),
            extra_ldflags=list(extra_ldflags),
            build_directory=str(build_dir),
            with_cuda=cuda,
            is_python_module=is_python_module,
            verbose=verbose,
        )
    except (RuntimeError, OSError, ImportError) as exc:  # compile or link failure
        raise NativeBuildError(f"building native extension {name!r} from {sources} failed: {exc}") from exc
