"""Build settings for every native library, and the one function that builds and loads them.

The sources live in ``cuda/`` at the top of the checkout (never an importable package: the CUDA build of
torch installs NVIDIA's ``cuda`` package); an installed wheel carries a copy in ``reference_impl/_native/``
(setup.py puts it there; :mod:`reference_impl.ops.location` points this module at it when
``reference_impl.ops`` is imported). Each library is described once here: its source files, its compiler flags.
Builds use ``torch.utils.cpp_extension`` and are cached, so a second load is instant:

- in a checkout (or an editable install), under ``build/native/<name>`` (git-ignored);
- in an installed package, under ``$XDG_CACHE_HOME/reference_impl/native/<torch version>-py<X.Y>/<name>``
  (``~/.cache`` when ``XDG_CACHE_HOME`` is unset): nothing is written into site-packages.

``REFERENCE_IMPL_BUILD_DIR`` overrides either folder.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
# the checkout's folders; reference_impl/ops/location.py points both elsewhere for an installed package
SOURCES = REPO / "cuda"
BUILD_ROOT = REPO / "build" / "native"

# Every build of the project's own sources turns warnings into errors. torch.utils.cpp_extension passes
# torch's and Python's headers as -isystem, and the CUDA headers are -isystem below, so only our code is
# judged. The CUDA glue's GPU branch is read by these warnings in the CUDA build (and, without nvcc's
# output, by tests/ops/test_cuda_build.py), although no CPU run executes it.
# NORMLAB_NO_WERROR=1 keeps the warnings but not the error, for a foreign toolchain (a lent GPU machine's
# compiler may warn where this project's does not); scripts/gpu_check.sh retries a failed build with it
# and says so in its summary, so that the GPU tests still run.
WARNINGS = ("-Wall", "-Wextra") + (() if os.environ.get("NORMLAB_NO_WERROR") == "1" else ("-Werror",))
# the same for the .cu files: nvcc's own warnings about device code, and the host code's, which nvcc
# hands to the host compiler
NVCC_HOST_WARNINGS = (*(("-Werror=all-warnings",) if "-Werror" in WARNINGS else ()), "-Xcompiler=" + ",".join(WARNINGS))


# --- the normlab CPU library: the op schemas (cuda/ops.cpp) and their CPU kernels ----------------------
CPU_NAME = "normlab_cpu"
CPU_SOURCES = ("ops.cpp", "cpu/rms_norm_cpu.cpp", "cpu/layer_norm_cpu.cpp")
# headers the CPU library is compiled from (ninja tracks them; listed for source hashes and readers)
CPU_HEADERS = ("ops.h", "op_checks.h", "cpu/simd.h", "cpu/isa.h", "cpu/rms_norm_kernels.h", "cpu/rms_bf16.h",
               "cpu/layer_norm_kernels.h", "cpu/cpu_common.h")
# -ffp-contract=off: no silent a*b+c -> fma, so vector lanes and scalar tails round identically.
# -fopenmp: at::parallel_for expands to an OpenMP region in the extension's own code.
# Two warnings are off for this library alone, both about code that is not ours: GCC 12's AVX-512 intrinsics
# (avx512fintrin.h) build their "undefined" vectors as `__Y = __Y`, which -Wmaybe-uninitialized reports
# wherever they are inlined into a kernel; -Wpsabi notes that a vector returned by a function compiled for
# AVX differs in ABI from one without it, which is the point of the per-ISA kernels (cpu/isa.h).
CPU_CFLAGS = ("-O3", "-ffp-contract=off", "-fopenmp", *WARNINGS, "-Wno-maybe-uninitialized", "-Wno-psabi")
CPU_LDFLAGS = ("-fopenmp",)

# --- the normlab CUDA kernels: registered under the CUDA dispatch key of the same ops -----------------
CUDA_NAME = "normlab_cuda"
CUDA_SOURCES = (
    "gpu/ops_cuda.cpp",
    "gpu/rms_forward_steps.cu",
    "gpu/rms_forward.cu",
    "gpu/rms_backward.cu",
    "gpu/layer_norm.cu",
)
CUDA_KERNEL_SOURCES = tuple(s for s in CUDA_SOURCES if s.endswith(".cu"))
CUDA_HEADERS = ("gpu/common.cuh", "gpu/launchers.h", "gpu/device_shim.h", "ops.h", "op_checks.h")
# headers of the torch glue, not of the kernels: they may include torch, and no kernel's code depends on them
CUDA_GLUE_HEADERS = ("device_shim.h",)
# sm_90 machine code plus compute_90 PTX (the same as -gencode arch=compute_90,code=[sm_90,compute_90],
# written as two flags so no shell ever sees the brackets). Naming an arch also stops cpp_extension from
# adding its own list of architectures (it would pick every supported one when no GPU is present).
GENCODE = ("-gencode=arch=compute_90,code=sm_90", "-gencode=arch=compute_90,code=compute_90")
CUDA_FLAGS = ("-O3", "-lineinfo", *GENCODE, *NVCC_HOST_WARNINGS)
CUDA_CXX_FLAGS = ("-O3", *WARNINGS)

# --- the CUDA glue and kernels on the CPU emulation (tests only): library `normlab_emu` ------------------
# Each .cu is compiled by g++ as C++ after emulation/emu.h (a generated two-line wrapper per kernel file);
# ops_emu.cpp is the CUDA glue compiled with NORMLAB_EMULATION. -Bsymbolic: the emulated CUDA runtime
# calls bind to emu_runtime.cpp, never to a libcudart loaded by torch.
EMU_NAME = "normlab_emu"
EMU_SOURCES = ("gpu/emulation/ops_emu.cpp", "gpu/emulation/emu_runtime.cpp")
# -Wno-unknown-pragmas: g++ does not know nvcc's `#pragma unroll`, which the real build reads.
EMU_CFLAGS = ("-O1", "-pthread", *WARNINGS, "-Wno-unknown-pragmas")
EMU_LDFLAGS = ("-pthread", "-Wl,-Bsymbolic")

# --- the rsqrt study's extensions ----------------------------------------------------------------------
# -ffp-contract=off: no silent FMA fusion (the classic step must round as written);
# -fno-math-errno: lets `1.0f / sqrtf(x)` compile to SQRTPS/DIVPS instead of a call guarded for errno.
RSQRT_CPU_CFLAGS = ("-O3", "-ffp-contract=off", "-fno-math-errno")
RSQRT_CPU_SOURCES = ("rsqrt/rsqrt_cpu.cpp",)
RSQRT_GPU_SOURCES = ("rsqrt/rsqrt_gpu.cu", "rsqrt/rsqrt_gpu_bind.cpp")


class NativeBuildError(RuntimeError):
    """Raised when a native extension cannot be built (missing compiler, compile error, ...)."""


_LOADED: dict[str, object] = {}
BUILD_SECONDS: dict[str, float] = {}
"""Seconds each :func:`load_extension` call of this process took (build or cache check, and loading), by
library name: the test session reports them apart from the tests' own durations."""


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
    if name in _LOADED:  # built and loaded by this process already
        return _LOADED[name]
    from torch.utils import cpp_extension  # imported late: it pulls in setuptools

    build_dir = BUILD_ROOT / name
    build_dir.mkdir(parents=True, exist_ok=True)
    srcs = [str(SOURCES / s) for s in sources]  # an absolute path stays as it is
    start = time.perf_counter()
    try:
        _LOADED[name] = cpp_extension.load(
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
        return _LOADED[name]
    except (RuntimeError, OSError, ImportError) as exc:  # compile or link failure
        raise NativeBuildError(f"building native extension {name!r} from {sources} failed: {exc}") from exc
    finally:
        BUILD_SECONDS[name] = BUILD_SECONDS.get(name, 0.0) + time.perf_counter() - start


def load_cpu_library():
    """Compile (or reuse) and load the normlab CPU library; raises :class:`NativeBuildError` without a compiler."""
    return load_extension(CPU_NAME, CPU_SOURCES, extra_cflags=CPU_CFLAGS, extra_ldflags=CPU_LDFLAGS)


def load_cuda_library(verbose: bool = False):
    """Compile (or reuse) and load the normlab CUDA kernels. Needs nvcc (``CUDA_HOME``), not a GPU."""
    _require_compiler(cuda=True)
    from torch.utils import cpp_extension

    # cpp_extension fixes its CUDA_HOME when first imported; if an earlier CPU-only build imported it
    # before CUDA_HOME was set, it guessed from the nvcc on PATH. Use the toolkit CUDA_HOME names.
    home = os.environ["CUDA_HOME"]
    if cpp_extension.CUDA_HOME != home:
        cpp_extension.CUDA_HOME = home
    return load_extension(CUDA_NAME, CUDA_SOURCES, cuda=True, extra_cflags=CUDA_CXX_FLAGS,
                          extra_cuda_cflags=CUDA_FLAGS, verbose=verbose)


def load_emulation_library():
    """Compile (or reuse) and load ``normlab_emu``: the CUDA glue and kernels run on CPU tensors by the
    emulation of ``cuda/gpu/emulation/emu.h``, as ``torch.ops.normlab_emu.*`` (the schemas of ``normlab``).
    Needs the CUDA headers (``CUDA_HOME``), not nvcc's output or a GPU. For the tests."""
    _require_compiler(cuda=True)
    home = Path(os.environ["CUDA_HOME"])
    wrappers = []
    wrap_dir = BUILD_ROOT / EMU_NAME / "kernels"
    wrap_dir.mkdir(parents=True, exist_ok=True)
    for cu in CUDA_KERNEL_SOURCES:
        text = f'#include "emu.h"\n#include "{SOURCES / cu}"\n'
        path = wrap_dir / (Path(cu).stem + "_emu.cpp")
        if not path.exists() or path.read_text() != text:  # rewritten only on change: ninja keeps its cache
            path.write_text(text)
        wrappers.append(path)
    cflags = (*EMU_CFLAGS, "-isystem", str(home / "include"), f"-I{SOURCES / 'gpu' / 'emulation'}")
    return load_extension(EMU_NAME, (*EMU_SOURCES, *wrappers), extra_cflags=cflags, extra_ldflags=EMU_LDFLAGS)


def load_rsqrt_cpu():
    """The rsqrt study's CPU extension (a Python module)."""
    return load_extension("rsqrt_cpu", RSQRT_CPU_SOURCES, extra_cflags=RSQRT_CPU_CFLAGS, is_python_module=True)


def load_rsqrt_gpu(fast_math: bool = False):
    """The rsqrt study's GPU extension: ``rsqrt_gpu`` (default flags) or ``rsqrt_gpu_fast`` (``-use_fast_math``).

    Both compile ``rsqrt_gpu.cu`` for sm_90 with PTX (``TORCH_CUDA_ARCH_LIST`` defaults to "9.0+PTX" here).
    """
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0+PTX")
    variant = ["-DRSQ_FAST=1"] if fast_math else []
    cuda_flags = ["-O3", "-std=c++17"] + (["-use_fast_math"] if fast_math else []) + variant
    name = "rsqrt_gpu_fast" if fast_math else "rsqrt_gpu"
    return load_extension(name, RSQRT_GPU_SOURCES, cuda=True, extra_cflags=["-O3"] + variant,
                          extra_cuda_cflags=cuda_flags, is_python_module=True)


def glue_host_compile_command(source: Path, output: Path, defines=()) -> list[str]:
    """The host compiler's command that compiles one torch-glue source (``source``: an absolute path) to
    ``output`` with the project's warning flags, as the GPU build sees it (no ``NORMLAB_EMULATION``): torch,
    Python and the CUDA toolkit's headers as ``-isystem``. Needs g++ and the CUDA headers, not nvcc or a
    GPU: the CUDA build's branch of the glue is compiled and warned about on every machine."""
    import sysconfig

    import torch
    from torch.utils import cpp_extension

    _require_compiler(cuda=True)
    system = [*cpp_extension.include_paths(), str(Path(os.environ["CUDA_HOME"]) / "include"),
              sysconfig.get_paths()["include"]]
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return [os.environ.get("CXX", "c++"), "-std=c++20", "-fPIC", "-O1", *WARNINGS,
            f"-D_GLIBCXX_USE_CXX11_ABI={abi}", *(f"-D{d}" for d in defines),
            *(a for inc in system for a in ("-isystem", inc)), "-c", str(source), "-o", str(output)]
