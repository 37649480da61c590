"""The smallest useful CPU RMSNorm: plain C++ loops over float32 rows, one row at a time.

It is the first kernel the CPU kernels page shows (``cuda/teach/rms_norm_first.cpp``), before the production
kernels of ``cuda/cpu/`` (vectors, bfloat16 and float16, the Llama and Gemma casting orders, a fused
residual, tiles of short rows, threads, a backward). It computes the default convention in float32: the
sum of squares in float32, eps inside the root, the gain applied in float32.

``x`` is (..., d) float32 on the CPU, ``weight`` is (d,) float32; the result has x's shape. It is compiled
on first use (a few seconds) and cached in ``build/native/normlab_cpu_first``; it has no autograd.
"""
from __future__ import annotations

import torch

from .build import WARNINGS, load_extension

NAME = "normlab_cpu_first"
SOURCES = ("teach/rms_norm_first.cpp",)
# the flags of the production CPU library that change results (-ffp-contract=off: no a*b+c fused into one
# rounding), without its OpenMP and instruction-set machinery
CFLAGS = ("-O3", "-ffp-contract=off", *WARNINGS)


def rms_norm_first(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dimension of a float32 CPU tensor: ``x * rsqrt(mean(x**2) + eps) * weight``.

    Raises ``TypeError`` for a non-tensor or a dtype other than float32, ``ValueError`` for a bad shape,
    device or eps; the messages name the argument.
    """
    if not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor):
        raise TypeError(f"rms_norm_first: x and weight must be tensors, got {type(x).__name__} and "
                        f"{type(weight).__name__}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"rms_norm_first: eps must be a number, got {type(eps).__name__}")
    for t, name in ((x, "x"), (weight, "weight")):  # the kernel checks the rest (shapes, dtype, eps)
        if t.device.type != "cpu":
            raise ValueError(f"rms_norm_first: x and weight must be CPU tensors; {name} is on device {t.device}")
    return load_extension(NAME, SOURCES, extra_cflags=CFLAGS, is_python_module=True).rms_norm_first(x, weight, float(eps))
