"""The smallest useful Triton RMSNorm: one program per row, the whole row in one tile.

It is the first kernel the Triton page shows, before the full one in :mod:`reference_impl.ops.triton_norm`
(residual, conventions, chunked rows, backward, argument checks). It computes the default convention:
statistics in float32, gain applied in float32, one rounding to x's dtype at the end; eps inside the root.

``x`` is (..., d) and contiguous in its last dimension, ``weight`` is (d,). The row must fit in one tile, so
``d`` is at most ``MAX_D``. Runs compiled on a GPU, or on CPU tensors under ``TRITON_INTERPRET=1``.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._checks import check_norm_args

MAX_D = 16384


# --8<-- [start:first_kernel]
@triton.jit
def rms_norm_row(x_ptr, w_ptr, y_ptr, row_stride, d, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)                       # one program per row
    cols = tl.arange(0, BLOCK)                   # the whole row as one tile
    mask = cols < d                              # BLOCK is a power of two >= d
    x = tl.load(x_ptr + row * row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean_square = tl.sum(x * x, axis=0) / d      # masked lanes add 0
    rstd = 1.0 / tl.sqrt(mean_square + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = x * rstd * w
    tl.store(y_ptr + row * row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
# --8<-- [end:first_kernel]


# --8<-- [start:first_launch]
def rms_norm_first(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    eps = check_norm_args(x, weight, eps)  # x, the gain and eps, as every norm of the package checks them
    d = x.shape[-1]
    if not 0 < d <= MAX_D:
        raise ValueError(f"rms_norm_first: the row length must be 1..{MAX_D}, got {d}")
    if weight.shape != (d,):
        raise ValueError(f"rms_norm_first: weight must have shape ({d},), got {tuple(weight.shape)}")
    rows = x.reshape(-1, d).contiguous()
    y = torch.empty_like(rows)
    if rows.shape[0]:
        rms_norm_row[(rows.shape[0],)](rows, weight.contiguous(), y, rows.stride(0), d, eps,
                                       BLOCK=triton.next_power_of_2(d))
    return y.reshape(x.shape)
# --8<-- [end:first_launch]
