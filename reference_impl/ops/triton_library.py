"""The Triton RMSNorm, forward and backward, as torch custom ops that ``torch.compile`` sees through.

``torch.ops.normlab_triton.rms_norm_fwd(x, weight, residual, eps, gemma, res_fp32)`` and
``torch.ops.normlab_triton.rms_norm_bwd(dy, h, weight, rstd, gemma)`` are registered with
``torch.library.triton_op``, and launch the kernels of :mod:`reference_impl.ops.triton_norm` through
``torch.library.wrap_triton``: Inductor then traces into each launch and schedules the user kernel itself,
instead of treating the op as an opaque call. The backward is the forward op's autograd formula
(``register_autograd``), so a compiled training step traces forward and backward alike. When Inductor
launches a user kernel it passes Python float arguments as float64 scalars; every kernel casts ``eps`` and
the operand ``d`` of ``1/d`` to float32 on entry, so the statistics are the same float32 computation
eagerly and compiled.

Same contract as :func:`reference_impl.ops.triton_norm.rms_norm_fwd`: the forward returns ``(y, h, rstd)``,
where ``h`` is the rounded ``x + residual`` (an empty tensor without a residual) and ``rstd`` is float32 of
shape ``x.shape[:-1]``; ``res_fp32`` selects the "fp32" residual contract (statistic and output from the
float32 sum). The backward returns ``(dh, dweight)`` for the normalized ``h`` (x without a residual), the
weight gradient a deterministic float32 sum rounded once to the weight's dtype (an empty tensor without a
weight). CUDA tensors, or CPU tensors under ``TRITON_INTERPRET=1``.
"""
from __future__ import annotations

import torch
import triton
from torch.library import triton_op, wrap_triton

from .._checks import check_eps, once_differentiable
from . import triton_norm as tn

__all__ = ["rms_norm_fwd", "rms_norm"]


# --8<-- [start:triton_op]
@triton_op("normlab_triton::rms_norm_fwd", mutates_args={})
def _rms_norm_fwd_op(x: torch.Tensor, weight: torch.Tensor | None, residual: torch.Tensor | None, eps: float,
                     gemma: bool, res_fp32: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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
            BF16_BY_BITS=tn._bf16_by_bits(x.dtype), RES_FP32=res_fp32 and residual is not None, num_warps=nw)
    return y.view(x.shape), (h.view(x.shape) if residual is not None else h), rstd.view(x.shape[:-1])
# --8<-- [end:triton_op]


# --8<-- [start:triton_bwd_op]
@triton_op("normlab_triton::rms_norm_bwd", mutates_args={})
def _rms_norm_bwd_op(dy: torch.Tensor, h: torch.Tensor, weight: torch.Tensor | None, rstd: torch.Tensor,
                     gemma: bool) -> tuple[torch.Tensor, torch.Tensor]:
    d = h.shape[-1]
    h2, dy2 = h.contiguous().view(-1, d), dy.contiguous().view(-1, d)  # autograd may pass an expanded dy
    n = h2.shape[0]
    dx = torch.empty_like(h2)
    no_w = h2.new_empty((0,))
    if n == 0:
        return dx.view(h.shape), (no_w if weight is None else torch.zeros_like(weight))
    block, single, _, nw = tn._settings(d, None)
    rows_per_prog = triton.cdiv(n, tn._num_partials(n, h.device, None))
    p = triton.cdiv(n, rows_per_prog)  # no program without rows
    rstd2 = rstd.reshape(-1)
    w = h2 if weight is None else weight
    dwp = torch.empty((p, d), dtype=torch.float32, device=h.device) if weight is not None else rstd2
    c1 = rstd2
    if not single:  # long rows: the per-row mean(g * xhat) first, read in chunks
        c1 = torch.empty(n, dtype=torch.float32, device=h.device)
        wrap_triton(tn._norm_bwd_row_stats_kernel)[(n,)](
            dy2, h2, w, rstd2, rstd2, c1, c1, c1, d, float(d), IS_RMS=True, GEMMA=gemma,
            HAS_W=weight is not None, BLOCK=block, num_warps=nw)
    wrap_triton(tn._norm_bwd_kernel)[(p, triton.cdiv(d, block))](
        dy2, h2, w, rstd2, rstd2, c1, c1, c1, dx, dwp, rstd2, n, d, float(d), rows_per_prog, IS_RMS=True,
        GEMMA=gemma, HAS_W=weight is not None, HAS_B=False, BLOCK=block, SINGLE=single,
        BF16_BY_BITS=tn._bf16_by_bits(h.dtype), num_warps=nw)
    if weight is None:
        return dx.view(h.shape), no_w
    dw = torch.empty(d, dtype=weight.dtype, device=h.device)
    wrap_triton(tn._sum_partials_kernel)[(triton.cdiv(d, tn.PARTIAL_BLOCK_COLS),)](
        dwp, dw, p, d, BLOCK_P=tn.PARTIAL_BLOCK_ROWS, BLOCK_C=tn.PARTIAL_BLOCK_COLS,
        BF16_BY_BITS=tn._bf16_by_bits(weight.dtype), num_warps=4)
    return dx.view(h.shape), dw


def _setup(ctx, inputs, output):
    x, weight, residual, _, gemma, _ = inputs
    _, h, rstd = output
    ctx.save_for_backward(x if residual is None else h, weight, rstd)  # the normalized (rounded) h
    ctx.gemma, ctx.has_residual = gemma, residual is not None


@once_differentiable("normlab_triton::rms_norm_fwd: the Triton kernels record no graph, so it has no second "
                     "derivative; use reference_impl.rms_norm")
def _backward(ctx, dy, dh_out, _drstd):
    h, weight, rstd = ctx.saved_tensors
    dh, dw = torch.ops.normlab_triton.rms_norm_bwd(dy, h, weight, rstd, ctx.gemma)
    if ctx.has_residual:
        dh = dh + dh_out  # h is an output too: its own gradient joins the normalization's
    return dh, (dw if weight is not None else None), (dh if ctx.has_residual else None), None, None, None


_rms_norm_fwd_op.register_autograd(_backward, setup_context=_setup)
# --8<-- [end:triton_bwd_op]


def _checked(x, weight, residual, eps, convention, residual_contract):
    tn._check_x(x, "rms_norm_fwd")
    tn._check_p(weight, x, "weight")
    eps = check_eps(eps, max_value=tn._FLOAT32_MAX)
    gemma = tn._check_convention(convention)
    res_fp32 = tn._check_contract(residual_contract)
    if residual is not None:
        residual = tn._check_like(residual, x, "residual").contiguous()
    tn._check_device(x)
    return (x.contiguous(), None if weight is None else weight.contiguous(), residual, eps, gemma, res_fp32)


def rms_norm_fwd(x, weight=None, residual=None, eps=1e-6, convention="llama", residual_contract="hf"):
    """Checked entry point of the forward op: ``(y, h, rstd)``, differentiable in x, weight and residual."""
    return torch.ops.normlab_triton.rms_norm_fwd(*_checked(x, weight, residual, eps, convention, residual_contract))


def rms_norm(x, weight=None, eps=1e-6, residual=None, convention="llama", *, residual_contract="hf"):
    """As :func:`reference_impl.ops.triton_norm.triton_rms_norm` (rows of any length, one program per row):
    ``y``, or ``(y, h)`` with a residual; forward and backward are the triton ops above."""
    y, h, _ = rms_norm_fwd(x, weight, residual, eps, convention, residual_contract)
    return y if residual is None else (y, h)
