"""Short rows in Triton: one program normalizes a block of rows (the forward of :mod:`.triton_norm`).

A row of at most ``ROWS_MAX_D`` elements (QK-norm's heads of 64-256, a small model's hidden size) is a
small tile: with one program per row, as in :mod:`.triton_norm`'s forward, each program moves only a few
hundred bytes and the launch is millions of tiny programs. Here a program holds a ``[ROWS, BLOCK]`` tile,
``ROWS = ROWS_TILE // BLOCK`` rows of ``BLOCK`` columns (the row length rounded up to a power of two), and
reduces each row along the tile's second axis. The numerics are those of the one-row kernel: the same
loads, roundings and output helpers (``_load_h``, ``_store_y``), the statistics in float32 with the mean
and the reciprocal square root correctly rounded. ``ROWS`` depends on the row length only, so a row's
result does not depend on the batch it came in.

:func:`reference_impl.ops.triton_norm.rms_norm_fwd` (and the LayerNorm forward) uses this kernel when no
``block_size`` is given and ``d <= ROWS_MAX_D``; a given ``block_size`` keeps one row per program.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .triton_kernels import ROWS_MAX_D, _bf16_by_bits, _load_h, _out_of_range, _pow2_scale, _store_y

__all__ = ["ROWS_MAX_D", "ROWS_TILE", "ROWS_WARPS", "rows_settings", "fwd_rows"]

ROWS_TILE = 2048    # elements per program's tile (ROWS * BLOCK)
ROWS_WARPS = 4


# --8<-- [start:rows]
@triton.jit
def _norm_fwd_rows_kernel(X, RES, W, B, Y, H, MEAN, RSTD, n_rows, d, d_f, eps,
                          IS_RMS: tl.constexpr, GEMMA: tl.constexpr, HAS_RES: tl.constexpr, HAS_W: tl.constexpr,
                          HAS_B: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr,
                          BF16_BY_BITS: tl.constexpr, RES_FP32: tl.constexpr = False):
    """Program p normalizes rows [p * ROWS, (p + 1) * ROWS): a [ROWS, BLOCK] tile, reduced along axis 1."""
    eps = tl.cast(eps, tl.float32)   # float32 scalars whoever launches (Inductor passes fp64 Python floats)
    d_f = tl.cast(d_f, tl.float32)
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    live = rows < n_rows
    mask = live[:, None] & (cols[None, :] < d)
    offs = rows[:, None] * d + cols[None, :]
    h = _load_h(X, RES, H, offs, mask, HAS_RES, True, BF16_BY_BITS, RES_FP32)
    if IS_RMS:
        mean = tl.zeros([ROWS], dtype=tl.float32)
        c = tl.zeros([ROWS], dtype=tl.float32)
        s = tl.sum(h * h, axis=1)
        ms = tl.math.div_rn(s, d_f)
    else:
        mean = tl.math.div_rn(tl.sum(h, axis=1), d_f)
        xc = tl.where(mask, h - mean[:, None], 0.0)
        c = tl.math.div_rn(tl.sum(xc, axis=1), d_f)     # one correction step of the mean, as one row does
        s = tl.sum(xc * xc, axis=1)
        ms = tl.maximum(tl.math.div_rn(s, d_f) - c * c, 0.0)
    ms = tl.where(live, ms, 1.0)  # rows past the end: a harmless value, never stored
    rstd = tl.math.div_rn(1.0, tl.sqrt_rn(ms + eps))
    # the gain's column index spread over the tile's rows, so that the helper's loads share the tile's mask
    wcols = tl.broadcast_to(cols[None, :], (ROWS, BLOCK))
    _store_y(Y, W, B, offs, wcols, mask, h, mean[:, None], c[:, None], rstd[:, None], IS_RMS, GEMMA, HAS_W, HAS_B,
             BF16_BY_BITS)
    tl.store(RSTD + rows, rstd, mask=live)
    if not IS_RMS:
        tl.store(MEAN + rows, mean + c, mask=live)
    # rare: a row whose float32 sum left the normal range gets the one-row kernel's rescaled second pass
    # (_wide_rows), here on the tile still in registers: z = h * 2^k with max |z| in [0.5, 1), statistics of
    # z, y = z * rstd_z. Rows with Inf or NaN, or of zeros, keep the float32 result stored above. A constant
    # LayerNorm row (a row of 1e38s: its float32 mean is Inf) gets mean = its value, y = the bias.
    wide = _out_of_range(s) & live
    if tl.sum(wide.to(tl.int32), axis=0) > 0:
        amax = tl.max(tl.abs(h), axis=1)
        ok = wide & (amax > 0.0) & (amax <= 3.4028234663852886e38) & (tl.sum(h - h, axis=1) == 0.0)
        s1, s2, sc = _pow2_scale(tl.where(ok, amax, 1.0))
        z = h * s1[:, None] * s2[:, None]
        if IS_RMS:
            mz = tl.zeros([ROWS], dtype=tl.float32)
            cz = tl.zeros([ROWS], dtype=tl.float32)
            vz = tl.sum(z * z, axis=1).to(tl.float64) / d_f
        else:
            mz = tl.sum(z, axis=1) / d_f
            zc = tl.where(mask, z - mz[:, None], 0.0)
            cz = tl.sum(zc, axis=1) / d_f
            vz = tl.maximum(tl.sum(zc * zc, axis=1) / d_f - cz * cz, 0.0).to(tl.float64)
            hi = tl.max(tl.where(mask, h, -float("inf")), axis=1)
            const = ok & (hi == tl.min(tl.where(mask, h, float("inf")), axis=1))
            rc = tl.math.div_rn(1.0, tl.sqrt_rn(eps + tl.zeros([ROWS], dtype=tl.float32)))
            _store_y(Y, W, B, offs, wcols, mask & const[:, None], h, hi[:, None], tl.zeros([ROWS, 1], tl.float32),
                     rc[:, None], IS_RMS, GEMMA, HAS_W, HAS_B, BF16_BY_BITS)
            tl.store(RSTD + rows, rc, mask=const)
            tl.store(MEAN + rows, hi, mask=const)
            ok = ok & ~const
            tl.store(MEAN + rows, ((mz + cz).to(tl.float64) / sc).to(tl.float32), mask=ok)
        rz = 1.0 / tl.sqrt(vz + eps * sc * sc)
        _store_y(Y, W, B, offs, wcols, mask & ok[:, None], z, mz[:, None], cz[:, None], rz.to(tl.float32)[:, None],
                 IS_RMS, GEMMA, HAS_W, HAS_B, BF16_BY_BITS)
        tl.store(RSTD + rows, (rz * sc).to(tl.float32), mask=ok)
# --8<-- [end:rows]


def rows_settings(d: int) -> tuple[int, int]:
    """(BLOCK, ROWS) of the block-row kernel for rows of d <= ROWS_MAX_D elements."""
    if not 1 <= d <= ROWS_MAX_D:
        raise ValueError(f"the block-row kernel takes rows of 1 to {ROWS_MAX_D} elements, got d = {d}")
    block = max(16, triton.next_power_of_2(d))
    return block, ROWS_TILE // block


def fwd_rows(x2, res2, weight, bias, y, h, mean, rstd, eps, is_rms, gemma, res_fp32=False):
    """Launch the block-row forward on the 2-D contiguous x2 (n rows of d); outputs as in ``triton_norm._fwd``."""
    n, d = x2.shape
    block, rows = rows_settings(d)
    dummy = x2
    _norm_fwd_rows_kernel[(triton.cdiv(n, rows),)](
        x2, dummy if res2 is None else res2, dummy if weight is None else weight.contiguous(),
        dummy if bias is None else bias.contiguous(), y, dummy if h is None else h,
        rstd if mean is None else mean, rstd, n, d, float(d), float(eps),
        IS_RMS=is_rms, GEMMA=gemma, HAS_RES=res2 is not None, HAS_W=weight is not None, HAS_B=bias is not None,
        BLOCK=block, ROWS=rows, BF16_BY_BITS=_bf16_by_bits(x2.dtype), RES_FP32=res_fp32, num_warps=ROWS_WARPS)
