"""Where an installed package finds its native sources and caches their builds.

In a checkout (or an editable install) :mod:`reference_impl.ops.build` reads the sources from ``cuda/`` and
caches builds under ``build/native/``. A wheel has no checkout: setup.py copies ``cuda/`` into the package
as ``reference_impl/_native/``, and the builds go to a user cache,
``$XDG_CACHE_HOME/reference_impl/native/torch<version>-py<X.Y>/`` (``~/.cache`` without ``XDG_CACHE_HOME``),
so nothing is written into site-packages. ``REFERENCE_IMPL_BUILD_DIR`` names the build folder in either case.

:func:`configure` runs when ``reference_impl.ops`` is imported, before any library is loaded.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent
INSTALLED_SOURCES = PACKAGE / "_native"


def user_cache() -> Path:
    """The build folder of an installed package (see the module docstring)."""
    import torch

    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    tag = f"torch{torch.__version__}-py{sys.version_info.major}.{sys.version_info.minor}"
    return base / "reference_impl" / "native" / tag


def configure(build) -> None:
    """Points ``build.SOURCES`` and ``build.BUILD_ROOT`` at an installed package's folders; leaves a
    checkout's as they are (apart from ``REFERENCE_IMPL_BUILD_DIR``). Raises when no sources are found."""
    if INSTALLED_SOURCES.is_dir():
        build.SOURCES = INSTALLED_SOURCES
        build.BUILD_ROOT = user_cache()
    elif not (build.SOURCES / "ops.h").is_file():
        raise build.NativeBuildError(
            f"the native sources are missing: looked for {INSTALLED_SOURCES} (an installed wheel) and "
            f"{build.SOURCES} (a checkout); reinstall the package")
    override = os.environ.get("REFERENCE_IMPL_BUILD_DIR")
    if override:
        build.BUILD_ROOT = Path(override)
