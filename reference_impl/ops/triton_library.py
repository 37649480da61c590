"""The Triton RMSNorm forward as a torch custom op that ``torch.compile`` sees through.

``torch.ops.normlab_triton.rms_norm_fwd(x, weight, residual, eps, gemma)`` is registered with
``torch.library.triton_op``, and launches :func:`reference_impl.ops.triton_norm._norm_fwd_kernel` through
``torch.library.wrap_triton``: Inductor then traces into the launch and schedules the user kernel itself,
instead of treating the op as an opaque call. When Inductor launches a user kernel it passes Python float
arguments as float64 scalars; the kernel casts ``eps`` and ``1/d``'s operand ``d`` to float32 on entry, so
the statistic is the same float32 computation eagerly and compiled.

Same contract as :func:`reference_impl.ops.triton_norm.rms_norm_fwd`: returns ``(y, h, rstd)``, where
``h`` is the rounded ``x + residual`` (an empty tensor without a residual) and ``rstd`` is float32 of
shape ``x.shape[:-1]``. CUDA tensors, or CPU tensors under ``TRITON_INTERPRET=1``.
"""
from __future__ import annotations

import torch
from torch.library import triton_op, wrap_triton

from .._checks import check_eps
from . import triton_norm as tn

__all__ = ["rms_norm_fwd"]


# --8<-- [start:triton_op]
@triton_op("normlab_triton::rms_norm_fwd", mutates_args={})
def _rms_norm_fwd_op(x: torch.Tensor, weight: torch.Tensor | None, residual: torch.Tensor | None, eps: float,
                     gemma: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    d = x.shape[-1]
    x2 = x.reshape(-1, d)
    n = x2.shape[0]
    y = torch.empty_like(x2)
    h = torch.empty_like(x2) if residual is not None else x2.new_empty((0,))
    rstd = torch.empty(n, dtype=torch.float32, device=x.device)
    if n > 0:
        block, single, nw, _ = tn._settings(d, None)
        res2 = x2 if residual is None else residual.reshape(-1, d)
        wrap_triton(tn._norm_fwd_kernel)[(n,)](
            x2, res2, x2 if weight is None else weight, x2, y, h if residual is not None else x2, rstd, rstd,
            d, float(d), eps, IS_RMS=True, GEMMA=gemma, HAS_RES=residual is not None,
            HAS_W=weight is not None, HAS_B=False, BLOCK=block, SINGLE=single,
            BF16_BY_BITS=tn._bf16_by_bits(x.dtype), num_warps=nw)
    return y.view(x.shape), (h.view(x.shape) if residual is not None else h), rstd.view(x.shape[:-1])
# --8<-- [end:triton_op]


def rms_norm_fwd(x, weight=None, residual=None, eps=1e-6, convention="llama"):
    """Checked entry point of the op (no autograd: for inference and for tracing)."""
    tn._check_x(x, "rms_norm_fwd")
    tn._check_p(weight, x, "weight")
    eps = check_eps(eps)
    gemma = tn._check_convention(convention)
    if residual is not None:
        residual = tn._check_like(residual, x, "residual")
    tn._check_device(x)
    return torch.ops.normlab_triton.rms_norm_fwd(
        x.contiguous(), None if weight is None else weight.contiguous(), residual, eps, gemma)
