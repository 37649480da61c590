"""The Triton kernels of :mod:`reference_impl.ops.triton_norm`: forward, backward and the dweight sum.

Only ``@triton.jit`` functions, the constants that size them, and two helpers the launchers of
:mod:`.triton_norm` and :mod:`.triton_rows` share (whether Triton runs interpreted, and when bfloat16 is
rounded by bits). The numerics, the launch shapes and where the kernels run are described in
:mod:`reference_impl.ops.triton_norm`; the host side (checks, launches, autograd) lives there.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

CONVENTIONS = ("llama", "gemma")
SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MAX_SINGLE_BLOCK = 8192   # longest row kept in registers as one tile (elements)
CHUNK = 4096              # chunk width for longer rows
_FLOAT32_MAX = torch.finfo(torch.float32).max  # eps is added in float32
ROWS_MAX_D = 256          # rows this short run several to a program (triton_rows.py) unless block_size is given
PARTIAL_BLOCK_ROWS = 16   # partial rows the second dweight kernel adds per step
PARTIAL_BLOCK_COLS = 128  # columns per program of the second dweight kernel


# --8<-- [start:forward]
@triton.jit
def _round(v, ty: tl.constexpr, BF16_BY_BITS: tl.constexpr):
    """Round fp32 values to ty, x's dtype. BF16_BY_BITS is set only under Triton's interpreter with
    bfloat16 data: it rounds to nearest even on the bit pattern, because the interpreter's own float32 to
    bfloat16 cast truncates (compiled kernels use the hardware's round-to-nearest-even conversion)."""
    if BF16_BY_BITS:
        bits = v.to(tl.uint32, bitcast=True)
        bits = tl.where(v != v, 0x7FC00000, bits + 0x7FFF + ((bits >> 16) & 1))
        out = (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        out = v.to(ty)
    return out


@triton.jit
def _load_h(X, RES, H, offs, mask, HAS_RES: tl.constexpr, STORE_H: tl.constexpr, BF16_BY_BITS: tl.constexpr,
            RES_FP32: tl.constexpr = False):
    """The row chunk to normalize, in fp32: x, or h = round_x(x + residual) (stored once when asked).
    RES_FP32 (the "fp32" residual contract): the fp32 sum s itself is normalized; h = round_x(s) is stored."""
    hf = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    if HAS_RES:
        s = hf + tl.load(RES + offs, mask=mask, other=0.0).to(tl.float32)
        h = _round(s, X.dtype.element_ty, BF16_BY_BITS)  # one rounding
        if STORE_H:
            tl.store(H + offs, h, mask=mask)
        if RES_FP32:
            hf = s
        else:
            hf = h.to(tl.float32)
    return hf


@triton.jit
def _store_y(Y, W, B, offs, cols, mask, h, mean, c, rstd, IS_RMS: tl.constexpr, GEMMA: tl.constexpr,
             HAS_W: tl.constexpr, HAS_B: tl.constexpr, BF16_BY_BITS: tl.constexpr):
    """Normalize a chunk and apply the gain in the convention's order, then write it in x's dtype.
    LayerNorm subtracts the float32 mean and then its correction c: h - mean is exact for h near the mean,
    so the rounding of the mean never reaches y."""
    out_ty = Y.dtype.element_ty
    if IS_RMS:
        xhat = h * rstd
        if HAS_W:
            w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
            if GEMMA:
                y = xhat * (1.0 + w)                         # gemma: gain 1 + w in fp32, one cast below
            else:
                y = _round(xhat, out_ty, BF16_BY_BITS).to(tl.float32) * w  # llama: cast, gain, cast again
        else:
            y = xhat
    else:
        y = ((h - mean) - c) * rstd
        if HAS_W:
            y = y * tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        if HAS_B:
            y = y + tl.load(B + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + offs, _round(y, out_ty, BF16_BY_BITS), mask=mask)


@triton.jit
def _out_of_range(s):
    """A float32 sum outside the normal range: overflowed (elements above about 1.8e19), underflowed to
    zero or subnormals (elements below about 1e-19), or NaN. Such rows take the rescaled second pass."""
    return (s < 1.1754943508222875e-38) | (s > 3.4028234663852886e38) | (s != s)


@triton.jit
def _pow2_scale(amax):
    """Powers of two s1, s2 (float32) with amax * s1 * s2 in [0.5, 1): h * s1 * s2 is exact (or an element
    under 2^-149 of amax flushes to zero, too small to change a sum or an output); sc = s1 * s2 in float64."""
    k = -(tl.floor(tl.log2(amax.to(tl.float64))) + 1.0)
    k1 = tl.minimum(tl.maximum(k, -126.0), 126.0)
    return tl.exp2(k1).to(tl.float32), tl.exp2(k - k1).to(tl.float32), tl.exp2(k)


@triton.jit
def _norm_fwd_kernel(X, RES, W, B, Y, H, MEAN, RSTD, d, d_f, eps,
                     IS_RMS: tl.constexpr, GEMMA: tl.constexpr, HAS_RES: tl.constexpr, HAS_W: tl.constexpr,
                     HAS_B: tl.constexpr, BLOCK: tl.constexpr, SINGLE: tl.constexpr, BF16_BY_BITS: tl.constexpr,
                     RES_FP32: tl.constexpr = False):
    """One program per row. SINGLE: the whole row is one tile held in registers (read once); otherwise the
    row is read in chunks of BLOCK, once per statistic and once for the output. LayerNorm: the mean m,
    then c = mean(h - m) and q = mean((h - m)^2) in one pass; mean = m + c, var = q - c^2. A row whose
    float32 sum left the normal range (rare) is scaled by a power of two and summed again (_wide_rows)."""
    # --8<-- [start:pin]
    # float32 scalars whoever launches: Inductor passes Python floats as fp64, which would lift the
    # statistic to fp64 (and fail sqrt_rn/div_rn, which take fp32)
    eps = tl.cast(eps, tl.float32)
    d_f = tl.cast(d_f, tl.float32)
    # --8<-- [end:pin]
    row = tl.program_id(0).to(tl.int64)
    base = row * d
    if SINGLE:
        cols = tl.arange(0, BLOCK)
        mask = cols < d
        h = _load_h(X, RES, H, base + cols, mask, HAS_RES, True, BF16_BY_BITS, RES_FP32)
        if IS_RMS:
            mean = 0.0
            c = 0.0
            s = tl.sum(h * h, axis=0)
            ms = tl.math.div_rn(s, d_f)
        else:
            mean = tl.math.div_rn(tl.sum(h, axis=0), d_f)
            xc = tl.where(mask, h - mean, 0.0)
            c = tl.math.div_rn(tl.sum(xc, axis=0), d_f)
            s = tl.sum(xc * xc, axis=0)
            ms = tl.maximum(tl.math.div_rn(s, d_f) - c * c, 0.0)
    else:
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, d, BLOCK):  # pass 1: sum of squares (RMS) or sum (LN); h is stored here
            cols = start + tl.arange(0, BLOCK)
            mask = cols < d
            h = _load_h(X, RES, H, base + cols, mask, HAS_RES, True, BF16_BY_BITS, RES_FP32)
            if IS_RMS:
                acc += h * h
            else:
                acc += h
        if IS_RMS:
            mean = 0.0
            c = 0.0
            s = tl.sum(acc, axis=0)
            ms = tl.math.div_rn(s, d_f)
        else:
            mean = tl.math.div_rn(tl.sum(acc, axis=0), d_f)
            acc1 = tl.zeros([BLOCK], dtype=tl.float32)
            acc2 = tl.zeros([BLOCK], dtype=tl.float32)
            for start in range(0, d, BLOCK):  # LayerNorm pass 2: the mean's correction and the centred squares
                cols = start + tl.arange(0, BLOCK)
                mask = cols < d
                h = _load_h(X, RES, H, base + cols, mask, HAS_RES, False, BF16_BY_BITS, RES_FP32)
                xc = tl.where(mask, h - mean, 0.0)
                acc1 += xc
                acc2 += xc * xc
            c = tl.math.div_rn(tl.sum(acc1, axis=0), d_f)
            s = tl.sum(acc2, axis=0)
            ms = tl.maximum(tl.math.div_rn(s, d_f) - c * c, 0.0)
    rstd = tl.math.div_rn(1.0, tl.sqrt_rn(ms + eps))
    if _out_of_range(s):
        _wide_rows(X, RES, H, W, B, Y, MEAN, RSTD, row, base, d, d_f, eps, mean, c, rstd, IS_RMS, GEMMA, HAS_RES,
                   HAS_W, HAS_B, BLOCK, BF16_BY_BITS, RES_FP32)
    else:
        if SINGLE:
            _store_y(Y, W, B, base + cols, cols, mask, h, mean, c, rstd, IS_RMS, GEMMA, HAS_W, HAS_B, BF16_BY_BITS)
        else:
            for start in range(0, d, BLOCK):  # the output (h recomputed from x and the residual)
                cols = start + tl.arange(0, BLOCK)
                mask = cols < d
                h = _load_h(X, RES, H, base + cols, mask, HAS_RES, False, BF16_BY_BITS, RES_FP32)
                _store_y(Y, W, B, base + cols, cols, mask, h, mean, c, rstd, IS_RMS, GEMMA, HAS_W, HAS_B,
                         BF16_BY_BITS)
        tl.store(RSTD + row, rstd)
        if not IS_RMS:
            tl.store(MEAN + row, mean + c)


@triton.jit
def _wide_rows(X, RES, H, W, B, Y, MEAN, RSTD, row, base, d, d_f, eps, mean, c, rstd,
               IS_RMS: tl.constexpr, GEMMA: tl.constexpr, HAS_RES: tl.constexpr, HAS_W: tl.constexpr,
               HAS_B: tl.constexpr, BLOCK: tl.constexpr, BF16_BY_BITS: tl.constexpr, RES_FP32: tl.constexpr):
    """The rescaled second pass of a row whose float32 sum overflowed or underflowed: z = h * 2^k with
    max |z| in [0.5, 1), statistics of z in float32 (they cannot overflow; eps scaled by 2^2k in float64),
    y = z * rstd_z. A row with Inf or NaN, or of zeros, keeps the float32 result (it is right there).
    A constant LayerNorm row (a row of 1e38s, whose float32 sum overflowed) has mean = its value and
    h - mean = 0 exactly: y is the bias, rstd 1 / sqrt(eps), as for any constant row."""
    amax = tl.zeros([BLOCK], dtype=tl.float32)
    hi = tl.full([BLOCK], -float("inf"), tl.float32)
    lo = tl.full([BLOCK], float("inf"), tl.float32)
    bad = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, d, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        h = _load_h(X, RES, H, base + cols, cols < d, HAS_RES, False, BF16_BY_BITS, RES_FP32)
        amax = tl.maximum(amax, tl.abs(h))
        hi = tl.maximum(hi, tl.where(cols < d, h, -float("inf")))
        lo = tl.minimum(lo, tl.where(cols < d, h, float("inf")))
        bad += h - h  # NaN once an element is Inf or NaN
    amax_row = tl.max(amax, axis=0)
    hi_row = tl.max(hi, axis=0)
    finite = (amax_row <= 3.4028234663852886e38) & (tl.sum(bad, axis=0) == 0.0)
    constant = hi_row != hi_row  # False; a constant row matters to LayerNorm only (its mean)
    if not IS_RMS:
        constant = hi_row == tl.min(lo, axis=0)
    if finite & constant & (amax_row > 0.0):
        rc = tl.math.div_rn(1.0, tl.sqrt_rn(eps))
        for start in range(0, d, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < d
            h = _load_h(X, RES, H, base + cols, mask, HAS_RES, False, BF16_BY_BITS, RES_FP32)
            _store_y(Y, W, B, base + cols, cols, mask, h, hi_row, 0.0, rc, IS_RMS, GEMMA, HAS_W, HAS_B, BF16_BY_BITS)
        tl.store(RSTD + row, rc)
        tl.store(MEAN + row, hi_row)
    elif (amax_row > 0.0) & finite:
        s1, s2, sc = _pow2_scale(amax_row)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, d, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            z = _load_h(X, RES, H, base + cols, cols < d, HAS_RES, False, BF16_BY_BITS, RES_FP32) * s1 * s2
            if IS_RMS:
                acc += z * z
            else:
                acc += z
        if IS_RMS:
            mz = 0.0
            cz = 0.0
            vz = tl.sum(acc, axis=0).to(tl.float64) / d_f
        else:
            mz = tl.sum(acc, axis=0) / d_f
            acc1 = tl.zeros([BLOCK], dtype=tl.float32)
            acc2 = tl.zeros([BLOCK], dtype=tl.float32)
            for start in range(0, d, BLOCK):
                cols = start + tl.arange(0, BLOCK)
                mask = cols < d
                z = _load_h(X, RES, H, base + cols, mask, HAS_RES, False, BF16_BY_BITS, RES_FP32) * s1 * s2
                zc = tl.where(mask, z - mz, 0.0)
                acc1 += zc
                acc2 += zc * zc
            cz = tl.sum(acc1, axis=0) / d_f
            vz = tl.maximum(tl.sum(acc2, axis=0) / d_f - cz * cz, 0.0).to(tl.float64)
            tl.store(MEAN + row, ((mz + cz).to(tl.float64) / sc).to(tl.float32))
        rz = 1.0 / tl.sqrt(vz + eps * sc * sc)
        for start in range(0, d, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < d
            z = _load_h(X, RES, H, base + cols, mask, HAS_RES, False, BF16_BY_BITS, RES_FP32) * s1 * s2
            _store_y(Y, W, B, base + cols, cols, mask, z, mz, cz, rz.to(tl.float32), IS_RMS, GEMMA, HAS_W, HAS_B,
                     BF16_BY_BITS)
        tl.store(RSTD + row, (rz * sc).to(tl.float32))
    else:
        for start in range(0, d, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < d
            h = _load_h(X, RES, H, base + cols, mask, HAS_RES, False, BF16_BY_BITS, RES_FP32)
            _store_y(Y, W, B, base + cols, cols, mask, h, mean, c, rstd, IS_RMS, GEMMA, HAS_W, HAS_B, BF16_BY_BITS)
        tl.store(RSTD + row, rstd)
        if not IS_RMS:
            tl.store(MEAN + row, mean + c)
# --8<-- [end:forward]


# --8<-- [start:backward]
@triton.jit
def _gain(W, cols, mask, GEMMA: tl.constexpr):
    """The gain the math applies, in fp32: 1 + w for gemma, w for llama."""
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    if GEMMA:
        w = 1.0 + w
    return w


@triton.jit
def _grad_terms(DY, H, offs, mask, gw, mean, c, rstd, IS_RMS: tl.constexpr, HAS_W: tl.constexpr):
    """dy, xhat and g = dy * gain for one chunk, in fp32 (zero outside the row). LayerNorm: c = mean(h -
    mean) corrects the float32 rounding of the saved mean, as in the forward."""
    dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
    h = tl.load(H + offs, mask=mask, other=0.0).to(tl.float32)
    if IS_RMS:
        xhat = h * rstd
    else:
        xhat = tl.where(mask, ((h - mean) - c) * rstd, 0.0)
    g = dy
    if HAS_W:
        g = dy * gw
    return dy, xhat, g


@triton.jit
def _norm_bwd_row_stats_kernel(DY, H, W, MEAN, RSTD, C1, C2, C3, d, d_f,
                               IS_RMS: tl.constexpr, GEMMA: tl.constexpr, HAS_W: tl.constexpr,
                               BLOCK: tl.constexpr):
    """Long rows only: per row, c1 = mean(g * xhat) and (LayerNorm) c2 = mean(g) and c3 = mean(h - mean),
    the correction of the saved mean (one more pass first), read in chunks. d_f pinned as in the forward."""
    d_f = tl.cast(d_f, tl.float32)
    row = tl.program_id(0).to(tl.int64)
    base = row * d
    rstd = tl.load(RSTD + row)
    mean = 0.0
    c = 0.0
    if not IS_RMS:
        mean = tl.load(MEAN + row)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, d, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < d
            acc += tl.where(mask, tl.load(H + base + cols, mask=mask, other=0.0).to(tl.float32) - mean, 0.0)
        c = tl.math.div_rn(tl.sum(acc, axis=0), d_f)
        tl.store(C3 + row, c)
    acc1 = tl.zeros([BLOCK], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, d, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < d
        gw = 1.0
        if HAS_W:
            gw = _gain(W, cols, mask, GEMMA)
        dy, xhat, g = _grad_terms(DY, H, base + cols, mask, gw, mean, c, rstd, IS_RMS, HAS_W)
        acc1 += g * xhat
        acc2 += g
    tl.store(C1 + row, tl.math.div_rn(tl.sum(acc1, axis=0), d_f))
    if not IS_RMS:
        tl.store(C2 + row, tl.math.div_rn(tl.sum(acc2, axis=0), d_f))


@triton.jit
def _norm_bwd_kernel(DY, H, W, MEAN, RSTD, C1, C2, C3, DX, DWP, DBP, n_rows, d, d_f, rows_per_prog,
                     IS_RMS: tl.constexpr, GEMMA: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                     BLOCK: tl.constexpr, SINGLE: tl.constexpr, BF16_BY_BITS: tl.constexpr):
    """Program (p, c) owns rows [p * rows_per_prog, (p + 1) * rows_per_prog) and columns chunk c.

    It writes dx for those rows and columns, and one fp32 partial row of dweight (and dbias): the sum of
    dy * xhat (dy) over its rows, added in row order. SINGLE: the whole row is the chunk and the per-row
    means are computed here; otherwise they come from _norm_bwd_row_stats_kernel (C1, C2).
    """
    d_f = tl.cast(d_f, tl.float32)
    pid = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < d
    gw = 1.0
    if HAS_W:
        gw = _gain(W, cols, mask, GEMMA)  # loaded once, used for every row of the block
    dw_acc = tl.zeros([BLOCK], dtype=tl.float32)
    db_acc = tl.zeros([BLOCK], dtype=tl.float32)
    row0 = pid.to(tl.int64) * rows_per_prog
    for i in range(0, rows_per_prog):
        row = row0 + i
        if row < n_rows:
            rstd = tl.load(RSTD + row)
            mean = 0.0
            c = 0.0
            offs = row * d + cols
            if not IS_RMS:
                mean = tl.load(MEAN + row)
                if SINGLE:  # the correction of the saved mean, from the tile
                    hc = tl.load(H + offs, mask=mask, other=0.0).to(tl.float32)
                    c = tl.math.div_rn(tl.sum(tl.where(mask, hc - mean, 0.0), axis=0), d_f)
                else:
                    c = tl.load(C3 + row)
            dy, xhat, g = _grad_terms(DY, H, offs, mask, gw, mean, c, rstd, IS_RMS, HAS_W)
            if SINGLE:
                c1 = tl.math.div_rn(tl.sum(g * xhat, axis=0), d_f)
                if IS_RMS:
                    c2 = 0.0
                else:
                    c2 = tl.math.div_rn(tl.sum(g, axis=0), d_f)
            else:
                c1 = tl.load(C1 + row)
                c2 = 0.0
                if not IS_RMS:
                    c2 = tl.load(C2 + row)
            if IS_RMS:
                dx = rstd * (g - xhat * c1)
            else:
                dx = rstd * (g - c2 - xhat * c1)
            tl.store(DX + offs, _round(dx, DX.dtype.element_ty, BF16_BY_BITS), mask=mask)
            if HAS_W:
                dw_acc += dy * xhat
            if HAS_B:
                db_acc += dy
    if HAS_W:
        tl.store(DWP + pid.to(tl.int64) * d + cols, dw_acc, mask=mask)
    if HAS_B:
        tl.store(DBP + pid.to(tl.int64) * d + cols, db_acc, mask=mask)
# --8<-- [end:backward]


# --8<-- [start:partials]
@triton.jit
def _sum_partials_kernel(PART, OUT, n_part, d, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr,
                         BF16_BY_BITS: tl.constexpr):
    """OUT[c] = sum over p of PART[p, c], for BLOCK_C columns per program.

    The partial rows are added BLOCK_P at a time, element by element in a [BLOCK_P, BLOCK_C] fp32 tile,
    then the tile's BLOCK_P rows are reduced by one tl.sum. Every step is fixed by (n_part, d) and the
    two block sizes, so the result is the same bits on every run.
    """
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < d
    acc = tl.zeros([BLOCK_P, BLOCK_C], dtype=tl.float32)
    for p0 in range(0, n_part, BLOCK_P):
        prow = p0 + tl.arange(0, BLOCK_P)
        offs = prow.to(tl.int64)[:, None] * d + cols[None, :]
        m = (prow[:, None] < n_part) & cmask[None, :]
        acc += tl.load(PART + offs, mask=m, other=0.0)
    tl.store(OUT + cols, _round(tl.sum(acc, axis=0), OUT.dtype.element_ty, BF16_BY_BITS), mask=cmask)
# --8<-- [end:partials]


@triton.jit
def _round_kernel(X, Y, n, BLOCK: tl.constexpr, BF16_BY_BITS: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(Y + offs, _round(tl.load(X + offs, mask=m, other=0.0), Y.dtype.element_ty, BF16_BY_BITS), mask=m)


def interpreted() -> bool:
    """True when Triton was imported with ``TRITON_INTERPRET=1`` (its kernels run on the CPU)."""
    return not isinstance(_norm_fwd_kernel, triton.runtime.jit.JITFunction)


def _bf16_by_bits(dtype: torch.dtype) -> bool:
    """Round to bfloat16 by integer arithmetic: only under the interpreter (see _round)."""
    return dtype == torch.bfloat16 and interpreted()
