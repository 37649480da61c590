"""The CUDA kernels of the ``normlab`` ops: build, load, and the teaching entry point.

Sources are in ``cuda/gpu/``: the kernels in ``.cu`` files behind raw-pointer launchers (no torch header,
so nvcc is quick), the torch glue in ``ops_cuda.cpp``, which registers the four ops of ``cuda/ops.cpp``
under the CUDA dispatch key and declares one more op, ``normlab::rms_norm_fwd_version``, that runs a
chosen RMSNorm forward version (1 one thread per row, 2 shared-memory tree, 3 warp shuffles, 4 vectorized
with the row in registers; version 5, the fused residual add, is ``rms_norm_fwd`` with a residual).

The library is compiled for Hopper only (``sm_90`` machine code plus ``compute_90`` PTX) with
``torch.utils.cpp_extension`` into ``build/native/normlab_cuda``; compiling needs nvcc but no GPU, and
``make test`` compiles it on every run (``tests/test_cuda_build.py``). Nothing is built at import time.
"""
from __future__ import annotations

import threading

import torch

from .native import load_extension

__all__ = ["ensure_loaded", "build", "rms_norm_fwd_version", "rms_forward_bound", "NATIVE_NAME", "SOURCES",
           "CUDA_FLAGS", "VERSIONS"]

NATIVE_NAME = "normlab_cuda"
# paths relative to cuda/
SOURCES = (
    "gpu/ops_cuda.cpp",
    "gpu/rms_forward_steps.cu",
    "gpu/rms_forward.cu",
    "gpu/rms_backward.cu",
    "gpu/layer_norm.cu",
)
KERNEL_SOURCES = tuple(s for s in SOURCES if s.endswith(".cu"))
HEADERS = ("gpu/common.cuh", "gpu/launchers.h")
# sm_90 machine code plus compute_90 PTX (the same as -gencode arch=compute_90,code=[sm_90,compute_90],
# written as two flags so no shell ever sees the brackets). Naming an arch also stops cpp_extension from
# adding its own list of architectures (it would pick every supported one when no GPU is present).
GENCODE = ("-gencode=arch=compute_90,code=sm_90", "-gencode=arch=compute_90,code=compute_90")
CUDA_FLAGS = ("-O3", "-lineinfo", *GENCODE)
CXX_FLAGS = ("-O3",)
VERSIONS = (1, 2, 3, 4, 5)
CONVENTIONS = {"llama": 0, "gemma": 1}

_lock = threading.Lock()
_loaded = False


def build(verbose: bool = False):
    """Compile (or reuse the cached build of) the CUDA library and load it into the process.

    Needs nvcc (``CUDA_HOME``, default ``/usr/local/cuda``), not a GPU. Raises
    :class:`reference_impl.native.NativeBuildError` when the toolkit is missing or a source fails to compile.
    """
    import os

    home = os.environ.setdefault("CUDA_HOME", "/usr/local/cuda")
    from torch.utils import cpp_extension

    # cpp_extension fixes its CUDA_HOME when first imported; if an earlier CPU-only build imported it
    # before CUDA_HOME was set, it guessed from the nvcc on PATH (here a shim in /usr/local/bin) and
    # include/link paths would point at /usr/local. Use the toolkit CUDA_HOME names.
    if os.path.exists(os.path.join(home, "bin", "nvcc")) and cpp_extension.CUDA_HOME != home:
        cpp_extension.CUDA_HOME = home
    return load_extension(NATIVE_NAME, SOURCES, cuda=True, extra_cflags=CXX_FLAGS, extra_cuda_cflags=CUDA_FLAGS,
                          verbose=verbose)


def ensure_loaded() -> None:
    """Load the CPU library (which declares the schemas), then the CUDA kernels; idempotent, thread-safe.

    :mod:`reference_impl.fused` calls this for CUDA tensors, so ``fused_rms_norm`` and
    ``fused_layer_norm`` run these kernels on the GPU.
    """
    global _loaded
    if _loaded:
        return
    with _lock:
        if _loaded:
            return
        from .fused import load as load_cpu_library  # late: fused imports this module lazily too

        load_cpu_library()
        build()

        @torch.library.register_fake("normlab::rms_norm_fwd_version")
        def _version_fake(x, weight, eps, version, convention, block_size=0):
            return torch.empty_like(x), x.new_empty(x.shape[:-1], dtype=torch.float32)

        _loaded = True


def rms_norm_fwd_version(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6,
                         version: int = 4, convention: str = "llama", block_size: int = 0):
    """Run RMSNorm forward version ``version`` (1-5) on a CUDA tensor; returns ``(y, rstd)``.

    Same numerics and conventions as :func:`reference_impl.fused.fused_rms_norm`. ``block_size`` (threads
    per block) may be given for versions 1-3 (version 2 needs a power of two); 0 picks the default.
    Version 5 is the production op without a residual, i.e. version 4's kernel.
    """
    from ._checks import check_eps, check_input, check_param

    check_input(x)
    check_param(weight, x, "weight")
    eps = check_eps(eps)
    if not x.is_cuda:
        raise ValueError(f"rms_norm_fwd_version runs the CUDA kernels; x is on {x.device}")
    if isinstance(version, bool) or not isinstance(version, int) or version not in VERSIONS:
        raise ValueError(f"version must be one of {VERSIONS}, got {version!r}")
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown convention {convention!r}; expected one of {sorted(CONVENTIONS)}")
    ensure_loaded()
    w = None if weight is None else weight.contiguous()
    if version == 5:
        y, _, rstd = torch.ops.normlab.rms_norm_fwd(x.contiguous(), w, None, eps, CONVENTIONS[convention])
        return y, rstd
    return torch.ops.normlab.rms_norm_fwd_version(x.contiguous(), w, eps, version, CONVENTIONS[convention],
                                                  int(block_size))


def rms_forward_bound(x: torch.Tensor, weight, eps: float, convention: str):
    """Allowed |y - oracle| per element for the ``normlab`` RMSNorm output (any device's kernel).

    :func:`reference_impl.conventions.forward_bound` with one adjustment: the op always returns x's
    dtype, and ``llama`` rounds to x's dtype twice (``x * rstd`` before the gain, the product after it)
    whatever the weight's dtype, so the weight is counted as x's dtype there; an fp32 weight's fp32
    product is one more rounding in ``u_32``, already inside the policy's gamma term for the two
    products. ``gemma`` and no weight round once. The oracle is RMSNorm of x with the effective gain
    (``1 + w`` in float32 for gemma).
    """
    from .conventions import forward_bound

    wd = None if weight is None else x.dtype
    return forward_bound(x.cpu(), None if weight is None else weight.cpu(), eps, convention, x_dtype=x.dtype,
                         w_dtype=wd)
