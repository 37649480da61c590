"""RMSNorm and LayerNorm in Triton, forward and backward, with the numerics of the ``normlab`` ops.

Same contract as :func:`reference_impl.ops.fused_rms_norm` / :func:`~reference_impl.ops.fused_layer_norm`:

- normalization over the last dimension, any leading shape (inputs are made contiguous);
- ``x`` float32, bfloat16 or float16, the weight (and bias) in x's dtype or float32, outputs in x's dtype;
- statistics in float32 with eps inside the root: ``rstd = 1 / sqrt_rn(mean(h**2) + eps)``, the mean and
  the reciprocal each correctly rounded;
- ``convention="llama"``: ``y = round_x(round_x(h * rstd) * w)`` (normalize in fp32, cast, then the gain),
  ``convention="gemma"``: ``y = round_x(h * rstd * (1 + w))`` in fp32 with one cast;
- optional fused residual add: ``h = round_x(x + residual)`` (sum in fp32, one rounding) is normalized and
  returned as the new residual stream;
- LayerNorm: ``y = round_x(((h - m) - c) * rstd * w + b)`` with two-pass float32 statistics: the mean
  ``m``, then ``c = mean(h - m)`` (one correction step of the rounded mean) and the centred squares;
- a row whose float32 sum overflows or underflows (elements beyond about 2**64 or, with eps = 0, all below
  about 2**-63) is scaled by a power of two and summed again (``_wide_rows``); other rows pay one test;
- dweight (and dbias) deterministic: per-program float32 partial sums over a fixed block of rows, then a
  second kernel that adds the partials of each column in a fixed order. No atomics, no locks.

Launch shape: the forward runs one program per row, except for rows of at most ``ROWS_MAX_D`` elements
when no ``block_size`` is given: those run several to a program (:mod:`.triton_rows`). A row of at most
``MAX_SINGLE_BLOCK`` elements is held in registers as one tile; a longer row is read in chunks of ``block_size`` elements (``CHUNK`` by default),
once for the statistics and once more for the output (LayerNorm reads it once more, for its centred
variance).

Where the kernels run: CUDA tensors run the compiled kernels. CPU tensors run under Triton's interpreter,
which must be switched on *before* ``triton`` is imported (``TRITON_INTERPRET=1`` in the environment):
Triton decides at import time whether its ``@triton.jit`` functions, its own library included, are
compiled or interpreted. Without it, a CPU tensor gets a ``ValueError`` that says so. The interpreter is
slow (NumPy, one program after another) and is meant for tests and for reading the kernels step by step.

The ``@triton.jit`` kernels are in :mod:`.triton_kernels`; this module holds the host side: argument
checks, launch settings, the launchers and the autograd Functions.
"""
from __future__ import annotations

import os

import torch
import triton

from .._checks import check_eps, check_input, check_param, once_differentiable
# the kernels and their constants live in triton_kernels.py; importable from here as before
from .triton_kernels import (  # noqa: F401
    CHUNK, CONVENTIONS, MAX_SINGLE_BLOCK, PARTIAL_BLOCK_COLS, PARTIAL_BLOCK_ROWS, ROWS_MAX_D, SUPPORTED_DTYPES,
    _FLOAT32_MAX, _bf16_by_bits, _norm_bwd_kernel, _norm_bwd_row_stats_kernel, _norm_fwd_kernel, _round_kernel,
    _sum_partials_kernel, interpreted,
)
from .triton_rows import fwd_rows

__all__ = ["triton_rms_norm", "triton_layer_norm", "rms_norm_fwd", "rms_norm_bwd", "layer_norm_fwd",
           "layer_norm_bwd", "TritonRMSNormFunction", "TritonLayerNormFunction", "interpreted",
           "round_like_kernels", "CONVENTIONS", "SUPPORTED_DTYPES", "MAX_SINGLE_BLOCK", "CHUNK"]


def round_like_kernels(v: torch.Tensor, dtype: torch.dtype, by_bits: bool | None = None) -> torch.Tensor:
    """Round float32 values to ``dtype`` with the kernels' own rounding step (``_round``).

    ``by_bits`` forces the integer round-to-nearest-even path on or off (default: on exactly where the
    kernels use it, i.e. bfloat16 under the interpreter). Lets the tests compare both paths with torch.
    """
    if not isinstance(v, torch.Tensor) or v.dtype != torch.float32:
        raise TypeError(f"v must be a float32 tensor, got {getattr(v, 'dtype', type(v).__name__)}")
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"dtype must be one of float32, bfloat16, float16, got {dtype}")
    _check_device(v)
    bits = _bf16_by_bits(dtype) if by_bits is None else bool(by_bits) and dtype == torch.bfloat16
    v = v.contiguous().view(-1)
    out = torch.empty(v.shape, dtype=dtype, device=v.device)
    if v.numel():
        _round_kernel[(triton.cdiv(v.numel(), 1024),)](v, out, v.numel(), BLOCK=1024, BF16_BY_BITS=bits)
    return out


def _check_device(x: torch.Tensor) -> None:
    if x.is_cuda:
        return
    if x.device.type != "cpu":
        raise ValueError(f"the Triton ops run on CUDA tensors (or CPU tensors under the interpreter); x is on {x.device}")
    if not interpreted():
        raise ValueError(
            "x is a CPU tensor: the compiled Triton kernels need a CUDA tensor. To run them on the CPU, set "
            "TRITON_INTERPRET=1 in the environment before triton is first imported (Triton reads it then); "
            f"this process imported triton without it (TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET')!r})")


def _check_x(x, fn: str) -> None:
    check_input(x)
    if x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{fn} supports float32, bfloat16 and float16; x has dtype {x.dtype} "
                        "(use reference_impl.rms_norm / layer_norm for float64)")
    if x.shape[-1] == 0:
        raise ValueError("x has an empty last dimension; there is nothing to normalize over")


def _check_p(p, x, name: str) -> None:
    check_param(p, x, name)
    if p is not None and p.dtype not in (x.dtype, torch.float32):
        raise TypeError(f"{name} has dtype {p.dtype}; the Triton op needs x's dtype ({x.dtype}) or float32")


def _check_contract(residual_contract) -> bool:
    """True for the "fp32" residual contract (normalize the fp32 sum), False for "hf" (the rounded h)."""
    if not isinstance(residual_contract, str):
        raise TypeError(f"residual_contract must be a string, got {type(residual_contract).__name__}")
    if residual_contract not in ("hf", "fp32"):
        raise ValueError(f"unknown residual_contract {residual_contract!r}; expected 'hf' or 'fp32'")
    return residual_contract == "fp32"


def _check_convention(convention) -> bool:
    if not isinstance(convention, str):
        raise TypeError(f"convention must be a string, got {type(convention).__name__}")
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown convention {convention!r}; expected one of {sorted(CONVENTIONS)}")
    return convention == "gemma"


def _check_like(t, x, name: str):
    """A tensor that must match x in shape, dtype and device (residual, dy)."""
    check_input(t, name)
    if t.shape != x.shape:
        raise ValueError(f"{name} has shape {tuple(t.shape)} but x has shape {tuple(x.shape)}; they must match")
    if t.dtype != x.dtype:
        raise TypeError(f"{name} has dtype {t.dtype} but x has dtype {x.dtype}; they must match")
    if t.device != x.device:
        raise ValueError(f"{name} is on {t.device} but x is on {x.device}")
    return t.contiguous()


def _check_stat(s, x, name: str):
    """A per-row statistic of the forward (rstd, LayerNorm's mean): float32 of shape x.shape[:-1] on x's
    device. The kernels read one value per row through a raw pointer, so a shorter tensor would be read
    past its end and another dtype reinterpreted."""
    if not isinstance(s, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor (the forward's float32 per-row {name}), got {type(s).__name__}")
    if s.dtype != torch.float32:
        raise TypeError(f"{name} has dtype {s.dtype}; it must be float32, as the forward returns it")
    if tuple(s.shape) != tuple(x.shape[:-1]):
        raise ValueError(f"{name} has shape {tuple(s.shape)}; it must be x.shape[:-1] = {tuple(x.shape[:-1])}")
    if s.device != x.device:
        raise ValueError(f"{name} is on {s.device} but x is on {x.device}")


def _settings(d: int, block_size):
    """(BLOCK, SINGLE, forward num_warps, backward num_warps) for rows of d elements. block_size forces the
    tile width (a power of two of at least 16); a row longer than the tile is processed in chunks.

    The backward holds more per element (dy, h, the gain and the dweight accumulator), so it spreads a tile
    over more threads: 8 elements per thread keeps an 8192-wide tile within 64 registers per thread at
    1024 threads (sm_90, ptxas), where 16 elements per thread spilled to the stack."""
    if block_size is None:
        single_block = max(16, triton.next_power_of_2(d))
        block = single_block if single_block <= MAX_SINGLE_BLOCK else CHUNK
    else:
        if isinstance(block_size, bool) or not isinstance(block_size, int):
            raise TypeError(f"block_size must be an int or None, got {type(block_size).__name__}")
        if block_size < 16 or block_size & (block_size - 1):
            raise ValueError(f"block_size must be a power of two of at least 16, got {block_size}")
        block = block_size
    num_warps = 4 if block < 2048 else 8 if block < 8192 else 16
    bwd_warps = min(32, max(4, block // 256))
    return block, d <= block, num_warps, bwd_warps


def _num_partials(n_rows: int, device: torch.device, num_partials) -> int:
    """How many row blocks the backward splits the rows into (one fp32 partial dweight row each)."""
    if num_partials is not None:
        if isinstance(num_partials, bool) or not isinstance(num_partials, int) or num_partials < 1:
            raise ValueError(f"num_partials must be a positive int, got {num_partials!r}")
        return min(num_partials, n_rows)
    if device.type == "cuda":
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        return min(n_rows, 4 * sms)
    return min(n_rows, 4)


def _sum_partials(part: torch.Tensor, d: int, dtype: torch.dtype) -> torch.Tensor:
    out = torch.empty(d, dtype=dtype, device=part.device)
    grid = (triton.cdiv(d, PARTIAL_BLOCK_COLS),)
    _sum_partials_kernel[grid](part, out, part.shape[0], d, BLOCK_P=PARTIAL_BLOCK_ROWS,
                               BLOCK_C=PARTIAL_BLOCK_COLS, BF16_BY_BITS=_bf16_by_bits(dtype), num_warps=4)
    return out


def _fwd(x, weight, bias, residual, eps, is_rms, gemma, block_size, res_fp32=False):
    d = x.shape[-1]
    x2 = x.contiguous().view(-1, d)
    n = x2.shape[0]
    res2 = None if residual is None else residual.contiguous().view(-1, d)
    y = torch.empty_like(x2)
    h = torch.empty_like(x2) if res2 is not None else None
    rstd = torch.empty(n, dtype=torch.float32, device=x.device)
    mean = None if is_rms else torch.empty(n, dtype=torch.float32, device=x.device)
    if n > 0 and block_size is None and d <= ROWS_MAX_D:  # short rows: several per program
        fwd_rows(x2, res2, weight, bias, y, h, mean, rstd, eps, is_rms, gemma, res_fp32=res_fp32 and res2 is not None)
    elif n > 0:
        block, single, nw, _ = _settings(d, block_size)
        dummy = x2
        _norm_fwd_kernel[(n,)](
            x2, dummy if res2 is None else res2, dummy if weight is None else weight.contiguous(),
            dummy if bias is None else bias.contiguous(), y, dummy if h is None else h,
            rstd if mean is None else mean, rstd, d, float(d), float(eps),
            IS_RMS=is_rms, GEMMA=gemma, HAS_RES=res2 is not None, HAS_W=weight is not None,
            HAS_B=bias is not None, BLOCK=block, SINGLE=single, BF16_BY_BITS=_bf16_by_bits(x.dtype),
            RES_FP32=res_fp32 and res2 is not None, num_warps=nw)
    lead = x.shape[:-1]
    return (y.view(x.shape), None if h is None else h.view(x.shape), rstd.view(lead),
            None if mean is None else mean.view(lead))


def _bwd(dy, h, weight, has_bias, bias_dtype, mean, rstd, is_rms, gemma, block_size, num_partials):
    d = h.shape[-1]
    h2 = h.contiguous().view(-1, d)
    dy2 = dy.contiguous().view(-1, d)
    n = h2.shape[0]
    dx = torch.empty_like(h2)
    dw = db = None
    if n == 0:
        if weight is not None:
            dw = torch.zeros(d, dtype=weight.dtype, device=h.device)
        if has_bias:
            db = torch.zeros(d, dtype=bias_dtype, device=h.device)
        return dx.view(h.shape), dw, db
    block, single, _, nw = _settings(d, block_size)
    p = _num_partials(n, h.device, num_partials)
    rows_per_prog = triton.cdiv(n, p)
    p = triton.cdiv(n, rows_per_prog)  # no program without rows
    rstd2 = rstd.contiguous().view(-1)
    mean2 = rstd2 if mean is None else mean.contiguous().view(-1)
    w = h2 if weight is None else weight.contiguous()
    f32 = dict(dtype=torch.float32, device=h.device)
    dwp = torch.empty((p, d), **f32) if weight is not None else rstd2
    dbp = torch.empty((p, d), **f32) if has_bias else rstd2
    if single:
        c1 = c2 = c3 = rstd2
    else:
        c1 = torch.empty(n, **f32)
        c2 = torch.empty(n, **f32) if not is_rms else c1
        c3 = torch.empty(n, **f32) if not is_rms else c1
        _norm_bwd_row_stats_kernel[(n,)](dy2, h2, w, mean2, rstd2, c1, c2, c3, d, float(d), IS_RMS=is_rms,
                                         GEMMA=gemma, HAS_W=weight is not None, BLOCK=block, num_warps=nw)
    grid = (p, triton.cdiv(d, block))
    _norm_bwd_kernel[grid](dy2, h2, w, mean2, rstd2, c1, c2, c3, dx, dwp, dbp, n, d, float(d), rows_per_prog,
                           IS_RMS=is_rms, GEMMA=gemma, HAS_W=weight is not None, HAS_B=has_bias,
                           BLOCK=block, SINGLE=single, BF16_BY_BITS=_bf16_by_bits(h.dtype), num_warps=nw)
    if weight is not None:
        dw = _sum_partials(dwp, d, weight.dtype)
    if has_bias:
        db = _sum_partials(dbp, d, bias_dtype)
    return dx.view(h.shape), dw, db


# --8<-- [start:host]
def rms_norm_fwd(x, weight=None, residual=None, eps=1e-6, convention="llama", block_size=None, residual_contract="hf"):
    """Forward kernel only: returns ``(y, h, rstd)``; ``h`` (the rounded ``x + residual``) is None
    without a residual, ``rstd`` float32 of shape ``x.shape[:-1]``."""
    _check_x(x, "rms_norm_fwd")
    _check_p(weight, x, "weight")
    eps = check_eps(eps, max_value=_FLOAT32_MAX)
    gemma = _check_convention(convention)
    if residual is not None:
        residual = _check_like(residual, x, "residual")
    res_fp32 = _check_contract(residual_contract)
    _settings(x.shape[-1], block_size)
    _check_device(x)
    y, h, rstd, _ = _fwd(x, weight, None, residual, eps, True, gemma, block_size, res_fp32)
    return y, h, rstd


def rms_norm_bwd(dy, h, weight, rstd, convention="llama", block_size=None, num_partials=None):
    """Backward kernels only: ``(dh, dweight)`` for the normalized input ``h`` (x, or x + residual).

    ``num_partials`` sets how many row blocks (fp32 partial dweight rows) the rows are split into; by
    default four per multiprocessor on a GPU, four on the CPU, never more than the rows.
    """
    _check_x(h, "rms_norm_bwd")
    dy = _check_like(dy, h, "dy")
    _check_p(weight, h, "weight")
    _check_stat(rstd, h, "rstd")
    gemma = _check_convention(convention)
    _settings(h.shape[-1], block_size)
    _num_partials(1, h.device, num_partials)
    _check_device(h)
    dx, dw, _ = _bwd(dy, h, weight, False, None, None, rstd, True, gemma, block_size, num_partials)
    return dx, dw
# --8<-- [end:host]


def layer_norm_fwd(x, weight=None, bias=None, eps=1e-5, block_size=None):
    """LayerNorm forward kernel only: returns ``(y, mean, rstd)`` (float32 statistics per row)."""
    _check_x(x, "layer_norm_fwd")
    _check_p(weight, x, "weight")
    _check_p(bias, x, "bias")
    eps = check_eps(eps, max_value=_FLOAT32_MAX)
    _settings(x.shape[-1], block_size)
    _check_device(x)
    y, _, rstd, mean = _fwd(x, weight, bias, None, eps, False, False, block_size)
    return y, mean, rstd


def layer_norm_bwd(dy, x, weight, bias, mean, rstd, block_size=None, num_partials=None):
    """LayerNorm backward kernels only: ``(dx, dweight, dbias)``."""
    _check_x(x, "layer_norm_bwd")
    dy = _check_like(dy, x, "dy")
    _check_p(weight, x, "weight")
    _check_p(bias, x, "bias")
    _check_stat(mean, x, "mean")
    _check_stat(rstd, x, "rstd")
    _settings(x.shape[-1], block_size)
    _num_partials(1, x.device, num_partials)
    _check_device(x)
    return _bwd(dy, x, weight, bias is not None, None if bias is None else bias.dtype, mean, rstd, False,
                False, block_size, num_partials)


def _rms_args(x, weight, eps, residual, convention, block_size, fn: str = "triton_rms_norm"):
    """Every check of an RMSNorm call, in signature order; returns (eps as a float, the residual made contiguous)."""
    _check_x(x, fn)
    _check_p(weight, x, "weight")
    eps = check_eps(eps, max_value=_FLOAT32_MAX)
    _check_convention(convention)
    if residual is not None:
        residual = _check_like(residual, x, "residual")
    _settings(x.shape[-1], block_size)
    _check_device(x)
    return eps, residual


def _ln_args(x, weight, bias, eps, block_size, residual, fn: str = "triton_layer_norm"):
    """Every check of a LayerNorm call, in signature order; returns (eps as a float, the residual)."""
    _check_x(x, fn)
    _check_p(weight, x, "weight")
    _check_p(bias, x, "bias")
    eps = check_eps(eps, max_value=_FLOAT32_MAX)
    if residual is not None:
        residual = _check_like(residual, x, "residual")
    _settings(x.shape[-1], block_size)
    _check_device(x)
    return eps, residual


def _check_flag(v, name: str) -> bool:
    if not isinstance(v, bool):
        raise TypeError(f"{name} must be a bool, got {type(v).__name__}")
    return v


# --8<-- [start:autograd]
class TritonRMSNormFunction(torch.autograd.Function):
    """``apply(x, weight, eps, residual, convention, block_size, res_fp32=False)`` -> ``y``, or ``(y, h)``
    with a residual. The backward uses the rounded h with the forward's rstd. It runs in a kernel, so it is
    once-differentiable: differentiating it again raises an error that says so (use the reference
    ``reference_impl.rms_norm`` for second derivatives). ``apply`` checks its arguments as
    :func:`triton_rms_norm` does."""

    @staticmethod
    def forward(ctx, x, weight, eps, residual, convention, block_size, res_fp32=False):
        eps, residual = _rms_args(x, weight, eps, residual, convention, block_size, "TritonRMSNormFunction")
        res_fp32 = _check_flag(res_fp32, "res_fp32")
        gemma = convention == "gemma"
        y, h, rstd, _ = _fwd(x, weight, None, residual, eps, True, gemma, block_size, res_fp32)
        ctx.save_for_backward(x if h is None else h, weight, rstd)  # backward needs the normalized h
        ctx.gemma, ctx.block_size, ctx.has_residual = gemma, block_size, residual is not None
        return y if h is None else (y, h)

    @staticmethod
    @once_differentiable("TritonRMSNormFunction: the Triton kernels record no graph, so it has no second "
                         "derivative; use reference_impl.rms_norm")
    def backward(ctx, dy, dh_out=None):
        h, weight, rstd = ctx.saved_tensors
        if dy is None:  # only the new residual stream was used
            dy = torch.zeros_like(h)
        dh, dw, _ = _bwd(dy, h, weight, False, None, None, rstd, True, ctx.gemma, ctx.block_size, None)
        if ctx.has_residual and dh_out is not None:
            dh = dh + dh_out  # h is an output too: its own gradient joins the normalization's
        need = ctx.needs_input_grad
        return (dh if need[0] else None), (dw if need[1] else None), None, \
            (dh if ctx.has_residual and need[3] else None), None, None, None
# --8<-- [end:autograd]


class TritonLayerNormFunction(torch.autograd.Function):
    """``apply(x, weight, bias, eps, block_size, residual=None, res_fp32=False)`` -> ``y``, or ``(y, h)``
    with a residual (as :class:`TritonRMSNormFunction`: the backward uses the rounded h, ``apply`` checks its
    arguments, a second derivative raises)."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps, block_size, residual=None, res_fp32=False):
        eps, residual = _ln_args(x, weight, bias, eps, block_size, residual, "TritonLayerNormFunction")
        res_fp32 = _check_flag(res_fp32, "res_fp32")
        y, h, rstd, mean = _fwd(x, weight, bias, residual, eps, False, False, block_size, res_fp32)
        ctx.save_for_backward(x if h is None else h, weight, mean, rstd)
        ctx.bias_dtype, ctx.block_size = None if bias is None else bias.dtype, block_size
        ctx.has_residual = residual is not None
        return y if h is None else (y, h)

    @staticmethod
    @once_differentiable("TritonLayerNormFunction: the Triton kernels record no graph, so it has no second "
                         "derivative; use reference_impl.layer_norm")
    def backward(ctx, dy, dh_out=None):
        x, weight, mean, rstd = ctx.saved_tensors
        if dy is None:  # only the new residual stream was used
            dy = torch.zeros_like(x)
        dx, dw, db = _bwd(dy, x, weight, ctx.bias_dtype is not None, ctx.bias_dtype, mean, rstd, False, False,
                          ctx.block_size, None)
        if ctx.has_residual and dh_out is not None:
            dx = dx + dh_out
        need = ctx.needs_input_grad
        return (dx if need[0] else None), (dw if need[1] else None), (db if need[2] else None), None, None, \
            (dx if ctx.has_residual and need[5] else None), None


def triton_rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6,
                    residual: torch.Tensor | None = None, convention: str = "llama", *, block_size: int | None = None,
                    residual_contract: str = "hf"):
    """RMSNorm over the last dimension in Triton, optionally fused with the residual add.

    Same arguments and numerics as :func:`reference_impl.ops.fused_rms_norm`.

    Args:
        x: ``(..., d)`` tensor, float32, bfloat16 or float16; CUDA (compiled kernels), or CPU under
            ``TRITON_INTERPRET=1``.
        weight: gain of shape ``(d,)`` in x's dtype or float32, or ``None``.
        eps: non-negative number added to the mean square inside the square root.
        residual: ``None``, or a tensor of x's shape and dtype: ``h = round_x(x + residual)`` is normalized
            and returned as the new residual stream.
        convention: ``"llama"`` (``round_x(round_x(h * rstd) * weight)``) or ``"gemma"``
            (``round_x(h * rstd * (1 + weight))``).
        block_size: tile width (power of two, at least 16); rows longer than it are read in chunks.
            ``None`` picks the row length rounded up to a power of two, or ``CHUNK`` past ``MAX_SINGLE_BLOCK``.
        residual_contract: ``"hf"`` (normalize the rounded ``h``) or ``"fp32"`` (normalize the float32 sum
            of x and the residual; ``h`` is still returned rounded), as :func:`~reference_impl.ops.fused_rms_norm`.

    Returns:
        ``y`` of x's shape and dtype, or ``(y, h)`` with a residual; differentiable in ``x``, ``weight``
        and ``residual``, with a deterministic ``weight`` gradient.

    Raises:
        TypeError: non-tensor input; a dtype other than float32/bfloat16/float16 for x (residual: x's);
            weight dtype other than x's or float32; a non-string convention; a bad ``block_size`` type.
        ValueError: 0-d x or an empty last dimension; weight or residual of the wrong shape or device; bad
            ``eps``; unknown convention; ``block_size`` not a power of two >= 16; a CPU tensor without the
            interpreter, or a device other than CPU and CUDA.
    """
    eps, residual = _rms_args(x, weight, eps, residual, convention, block_size)
    res_fp32 = _check_contract(residual_contract)
    return TritonRMSNormFunction.apply(x, weight, eps, residual, convention, block_size, res_fp32)


def triton_layer_norm(x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                      eps: float = 1e-5, *, block_size: int | None = None, residual: torch.Tensor | None = None,
                      residual_contract: str = "hf"):
    """LayerNorm over the last dimension in Triton: ``round_x((h - mean) * rstd * weight + bias)``.

    Same arguments and numerics as :func:`reference_impl.ops.fused_layer_norm` (two-pass float32
    statistics, biased variance); ``block_size`` and the devices as :func:`triton_rms_norm`. Differentiable
    in ``x``, ``weight`` and ``bias``; the weight and bias gradients are deterministic. ``residual`` and
    ``residual_contract`` (keyword-only) fuse the residual add as in ``fused_layer_norm``: returns
    ``(y, h)``, differentiable in the residual too.
    """
    eps, residual = _ln_args(x, weight, bias, eps, block_size, residual)
    res_fp32 = _check_contract(residual_contract)
    return TritonLayerNormFunction.apply(x, weight, bias, eps, block_size, residual, res_fp32)
