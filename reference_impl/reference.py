"""PyTorch reference for RMSNorm and LayerNorm with the backward written out (no autograd inside).

The code lives in each norm's catalog module: RMSNorm's in :mod:`reference_impl.norms.rms_norm`, LayerNorm's
in :mod:`reference_impl.norms.layer_norm`, and the batch-invariant row mean both use in
:mod:`reference_impl.shared`. This module keeps their public names (``reference.rms_norm``,
``reference.RMSNormFunction``, ...) and :func:`square_edges`.

Conventions of this core reference:

- Normalization over the last dimension; any leading shape, including empty ones.
- Statistics and the whole computation run in float32 (float64 for float64 input); the result is cast
  once to the input dtype at the end. The gain and bias are used in that compute dtype.
- eps sits inside the square root: ``x * rsqrt(mean(x**2) + eps)``.
- Row statistics (means) are summed in float64 in a fixed, sequential order per row and then rounded to
  the compute dtype, so a row's result does not depend on the other rows or the batch layout (torch's
  own reductions split long rows differently depending on how many rows there are, which moves the last
  bit). Squares are formed in the compute dtype, as the modules this mirrors do.
- Range: in float32, a square overflows for ``|x|`` above ``sqrt(float32 max)`` (about 1.8e19), which makes
  the row's mean square Inf and its rstd 0, so the row comes out as zeros (RMSNorm) or NaN/zeros
  (LayerNorm), as ``torch.nn.functional.rms_norm`` does. With ``eps=0``, a row whose squares all underflow
  (``|x|`` below about 2.6e-23, the square root of float32's smallest subnormal) has mean square 0 and
  rstd Inf: Inf or NaN. docs/numerics.md states both thresholds as a test measures them.
- Non-finite values stay in their row; other rows are unaffected. A NaN makes its whole row NaN. An Inf
  makes the row's mean square Inf, so RMSNorm's rstd is 0: the row's finite entries become 0 and the Inf
  entry NaN (0 * Inf), exactly as ``torch.nn.functional.rms_norm`` does; LayerNorm's row becomes all NaN
  (Inf - Inf in the centring). With ``eps=0`` an all-zero row gives NaN (0 * Inf).
- Gradients come back in the dtype of the tensor they belong to.
"""
from __future__ import annotations

import math

import torch

from .norms.layer_norm import (LayerNormFunction, check_ln_args, layer_norm, layer_norm_backward, ln_backward,
                               ln_forward, ln_rstd)
from .norms.rms_norm import (RMSNormFunction, check_rms_args, rms_backward, rms_forward, rms_norm, rms_norm_backward,
                             rms_rstd)
from .shared import row_mean

_BITS = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
         torch.float64: torch.int64}

__all__ = [
    "rms_norm", "layer_norm", "rms_norm_backward", "layer_norm_backward", "RMSNormFunction", "LayerNormFunction",
    "rms_forward", "rms_backward", "ln_forward", "ln_backward", "rms_rstd", "ln_rstd", "check_rms_args",
    "check_ln_args", "row_mean", "square_edges",
]


def square_edges(dtype: torch.dtype = torch.float32) -> dict:
    """Where squares formed in ``dtype`` leave its range: ``overflow``, the smallest positive value whose
    square is Inf (a row holding one gets rstd 0 and comes out as zeros); ``underflow``, the largest value
    whose square is 0 (with ``eps=0`` a row with every ``|x|`` at or below it has mean square 0 and rstd
    Inf). docs/numerics.md prints both. Found by bisection over the dtype's positive values in bit order
    (squaring is monotone there), each square computed in ``dtype`` itself."""
    if dtype not in _BITS:
        raise TypeError(f"square_edges takes float16, bfloat16, float32 or float64, got {dtype}")
    ity = _BITS[dtype]
    top = int(torch.tensor(torch.finfo(dtype).max, dtype=dtype).view(ity))

    def square(i: int) -> torch.Tensor:
        v = torch.tensor(i, dtype=ity).view(dtype)
        return v * v

    def first(pred) -> int:  # the smallest bit pattern in [0, top] where pred holds (pred(top) holds)
        lo, hi = 0, top
        while lo < hi:
            mid = (lo + hi) // 2
            if pred(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo

    over = first(lambda i: not bool(torch.isfinite(square(i))))
    under = first(lambda i: bool(square(i) != 0)) - 1
    return {"overflow": float(torch.tensor(over, dtype=ity).view(dtype)),
            "underflow": float(torch.tensor(under, dtype=ity).view(dtype))}
