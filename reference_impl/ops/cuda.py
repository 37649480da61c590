"""The CUDA kernels of the ``normlab`` ops: build, load, and the teaching entry point.

Sources are in ``cuda/gpu/``: the kernels in ``.cu`` files behind raw-pointer launchers (no torch header,
so nvcc is quick), the torch glue in ``ops_cuda.cpp``, which registers the four ops of ``cuda/ops.cpp``
under the CUDA dispatch key and declares one more op, ``normlab::rms_norm_fwd_version``, that runs a
chosen RMSNorm forward version (1 one thread per row, 2 shared-memory tree, 3 warp shuffles, 4 vectorized
with the row in registers, 6 several short rows per block; version 5, the fused residual add, is
``rms_norm_fwd`` with a residual). ``rms_norm_fwd`` itself runs version 6 for rows that fit one warp's
registers (at most 256 vectors of 16 bytes) and version 4 or 5 for longer rows.

The library is compiled for Hopper only (``sm_90`` machine code plus ``compute_90`` PTX) with
``torch.utils.cpp_extension`` into ``build/native/normlab_cuda``; compiling needs nvcc but no GPU, and
``make test`` compiles it on every run (``tests/ops/test_cuda_build.py``). Nothing is built at import time.
"""
from __future__ import annotations

import torch

from .build import load_cuda_library
from .library import CONVENTIONS, load_cuda

__all__ = ["ensure_loaded", "build", "rms_norm_fwd_version", "rms_forward_bound", "VERSIONS"]

VERSIONS = (1, 2, 3, 4, 5, 6)


def build(verbose: bool = False):
    """Compile (or reuse the cached build of) the CUDA library and load it into the process.

    Needs nvcc (``CUDA_HOME``, default ``/usr/local/cuda``), not a GPU. Raises
    :class:`reference_impl.ops.build.NativeBuildError` when the toolkit is missing or a source fails to compile.
    """
    return load_cuda_library(verbose=verbose)


def ensure_loaded() -> None:
    """Load the CPU library (which declares the schemas), then the CUDA kernels; idempotent, thread-safe."""
    load_cuda()


def rms_norm_fwd_version(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6,
                         version: int = 4, convention: str = "llama", block_size: int = 0):
    """Run RMSNorm forward version ``version`` (1-6) on a CUDA tensor; returns ``(y, rstd)``.

    Same numerics and conventions as :func:`reference_impl.ops.fused_rms_norm`. ``block_size`` (threads
    per block) may be given for versions 1-3 (version 2 needs a power of two); 0 picks the default.
    Version 4 always runs one row per block; version 6 runs several rows per block and takes rows of at
    most 256 vectors (a ValueError otherwise). Version 5 is the production op without a residual: version
    6's kernel for rows that fit it, version 4's for longer rows.
    """
    from .._checks import check_eps, check_input, check_param

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

    :func:`reference_impl.tolerances.convention_forward_bound` with one adjustment: the op always returns x's
    dtype, and ``llama`` rounds to x's dtype twice (``x * rstd`` before the gain, the product after it)
    whatever the weight's dtype, so the weight is counted as x's dtype there; an fp32 weight's fp32
    product is one more rounding in ``u_32``, already inside the policy's gamma term for the two
    products. ``gemma`` and no weight round once. The oracle is RMSNorm of x with the effective gain
    (``1 + w`` in float32 for gemma).
    """
    from .. import shared
    from ..tolerances import convention_forward_bound

    eps = shared.check_norm_args(x, weight, eps, extra=lambda: shared.check_convention(convention),
                                 resolve_eps=lambda e: shared.resolve_eps(e, x, convention))
    wd = None if weight is None else x.dtype
    return convention_forward_bound(x.cpu(), None if weight is None else weight.cpu(), eps, convention, x_dtype=x.dtype,
                         w_dtype=wd)
