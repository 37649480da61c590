"""Packaging steps that pyproject.toml cannot express (the metadata lives there).

1. The native sources travel inside the package. They live in ``cuda/`` at the top of the checkout (the docs
   embed them from there, and ``cuda`` must never become an importable package: the CUDA build of torch
   installs NVIDIA's ``cuda``). A wheel gets a copy under ``reference_impl/_native/``, which
   ``reference_impl.ops.build`` compiles on first use into a user cache. An editable install reads ``cuda/``
   in the checkout instead, and builds into the checkout's ignored ``build/native/``.
2. A build writes nothing into the source tree: setuptools' build folder (``build/lib``, ``build/bdist.*``)
   and the metadata folder (``reference_impl.egg-info``) go to temporary folders, removed when the build ends.
"""
from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build import build
from setuptools.command.build_py import build_py
from setuptools.command.egg_info import egg_info

HERE = Path(__file__).resolve().parent
NATIVE_SOURCES = HERE / "cuda"
NATIVE_PACKAGE_DIR = ("reference_impl", "_native")  # where the copy lands inside the wheel
NATIVE_SUFFIXES = {".h", ".cuh", ".cpp", ".cu"}


class build_outside_the_tree(build):
    """``build`` with its folder in a fresh temporary directory instead of ``./build``."""

    def initialize_options(self):
        super().initialize_options()
        self.build_base = _temporary_folder()


def _temporary_folder() -> str:
    tmp = tempfile.mkdtemp(prefix="reference_impl-build-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    return tmp


class egg_info_outside_the_tree(egg_info):
    """``egg_info`` writing ``reference_impl.egg-info`` into a temporary folder, unless a caller (PEP 517's
    metadata step, the editable install) names its own folder."""

    def initialize_options(self):
        super().initialize_options()
        self.egg_base = _temporary_folder()


class build_py_with_native_sources(build_py):
    """``build_py`` that also copies the C++/CUDA sources of ``cuda/`` into ``reference_impl/_native/``."""

    def run(self):
        super().run()
        if self.editable_mode:  # the editable package reads cuda/ in the checkout
            return
        files = sorted(p for p in NATIVE_SOURCES.rglob("*") if p.is_file() and p.suffix in NATIVE_SUFFIXES)
        if not files:
            raise SystemExit(f"no native sources found under {NATIVE_SOURCES}: the package would lack its C++ code")
        target = Path(self.build_lib).joinpath(*NATIVE_PACKAGE_DIR)
        for src in files:
            dst = target / src.relative_to(NATIVE_SOURCES)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)


setup(cmdclass={"build": build_outside_the_tree, "build_py": build_py_with_native_sources,
                "egg_info": egg_info_outside_the_tree})
