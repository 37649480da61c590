"""Diagrams of the kernels: warp reduction, the gain-gradient reduction, the fused residual, and a
Newton step of the reciprocal square root."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .svg import Svg, Theme

# ------------------------------------------------------------------------------------------------
# e. warp-shuffle butterfly reduction
# ------------------------------------------------------------------------------------------------
def warp_reduce(t: Theme) -> Svg:
    lanes, masks = 32, (16, 8, 4, 2, 1)
    s = Svg(600, 550, "Butterfly reduction of 32 lanes with __shfl_xor_sync",
            "Rows are the five steps of a warp reduction, columns the 32 lanes. In the step with mask m every "
            "lane i reads the value of lane i XOR m (lines) and adds it to its own (vertical lines); masks "
            "16, 8, 4, 2, 1. After five steps every lane holds the sum of all 32 values, without shared "
            "memory or a barrier. The highlighted lines are the values that end up in lane 0: its set of "
            "inputs doubles at each step. A shfl_down reduction uses the same offsets but only lane 0 ends "
            "with the full sum.", t)
    left, right = 56, 576
    step = (right - left) / (lanes - 1)
    y0, dy = 86, 70
    xs = [left + i * step for i in range(lanes)]
    s.text(300, 32, "v += __shfl_xor_sync(0xffffffff, v, m)", t.fg, size=21, anchor="middle", mono=True)
    s.text(8, y0 - 14, "m", t.muted, size=21, italic=True)
    # lanes contributing to lane 0's final value, walked back from the last step
    needed = [set() for _ in range(len(masks) + 1)]
    needed[len(masks)] = {0}
    for k in range(len(masks) - 1, -1, -1):
        needed[k] = needed[k + 1] | {i ^ masks[k] for i in needed[k + 1]}
    for k, m in enumerate(masks):
        ya, yb = y0 + k * dy, y0 + (k + 1) * dy
        s.text(8, (ya + yb) / 2 + 8, str(m), t.fg, size=22)
        for i in range(lanes):
            hot = i in needed[k + 1]
            for src in (i, i ^ m):
                if hot:
                    continue
                s.line(xs[src], ya, xs[i], yb, t.muted, 1.0, opacity=0.55)
        for i in range(lanes):
            if i in needed[k + 1]:
                for src in (i, i ^ m):
                    s.line(xs[src], ya, xs[i], yb, t.rms, 2.4)
    for k in range(len(masks) + 1):
        y = y0 + k * dy
        for i in range(lanes):
            s.dot(xs[i], y, t.rms if i in needed[k] else t.muted, 3.6 if i in needed[k] else 2.8)
    yl = y0 + len(masks) * dy + 30
    for i in (0, 8, 16, 24, 31):
        s.text(xs[i], yl, str(i), t.fg, size=21, anchor="middle")
    s.text(300, yl + 36, "lane", t.muted, size=21, anchor="middle")
    s.text(300, yl + 70, "lane 0 gathers 2, 4, 8, 16, 32 values", t.rms, size=21, anchor="middle")
    return s


# ------------------------------------------------------------------------------------------------
# f. two-stage deterministic weight-gradient reduction
# ------------------------------------------------------------------------------------------------
PARTIALS = (1.0e8, 3.0, -1.0e8, 2.0)   # float32 partial sums of one column, one per row block


def _f32_sum(values, order) -> float:
    acc = np.float32(0.0)
    for i in order:
        acc = np.float32(acc + np.float32(values[i]))
    return float(acc)


def _short(v: float) -> str:
    """1e8 instead of 1e+08, a true minus sign, integers without a decimal point."""
    if v == int(v) and abs(v) < 1e6:
        txt = str(int(v))
    else:
        mant, exp = f"{v:.0e}".split("e")
        txt = f"{mant}e{int(exp)}"
    return txt.replace("-", "−")


def dweight_reduction(t: Theme) -> Svg:
    fixed = _f32_sum(PARTIALS, (0, 1, 2, 3))
    other = _f32_sum(PARTIALS, (2, 0, 3, 1))
    exact = float(sum(Fraction(v) for v in PARTIALS))
    if fixed == other:
        raise ValueError("the example partials must show that float32 addition depends on the order")
    vals = ", ".join(_short(v) for v in PARTIALS)
    s = Svg(600, 580, "Deterministic two-stage reduction of the weight gradient",
            "The weight gradient of a norm is a column sum over all rows, dγ_j = Σ_i ȳ_ij x̂_ij. Stage 1: "
            "each thread block sums its own block of rows into one float32 partial row, written to its own "
            "slot of a buffer. Stage 2: one pass adds the partials of each column in the fixed order block "
            "0, 1, 2, 3, so every run gives the same bits. With atomicAdd the blocks add into dγ in whatever "
            "order they finish; float32 addition is not associative, so the result can change from run to "
            f"run. Example: the partials {vals} (exact sum {_short(exact)}) summed in float32 in the order "
            f"0, 1, 2, 3 give {_short(fixed)}, in the order 2, 0, 3, 1 give {_short(other)}. A fixed order makes "
            "the result reproducible, not more accurate.", t)
    blocks, cols = 4, 6
    gx, gy, cw, rh = 24, 96, 26, 12
    rows_per_block = 3
    s.text(300, 34, "dγ = column sums of ȳ ⊙ x̂ over all rows", t.fg, size=22, anchor="middle")
    colors = [t.rms, t.ln, t.good, t.bn]
    block_h = rows_per_block * rh + 10
    for bi in range(blocks):
        for r in range(rows_per_block):
            y = gy + bi * block_h + r * rh
            s.rect(gx, y, cols * cw, rh, t.muted, 0.8, fill=colors[bi], fill_opacity=0.35, rx=0)
        s.text(gx + cols * cw + 8, gy + bi * block_h + 26, f"block {bi}", t.fg, size=21)
    s.text(gx, gy - 14, "rows", t.muted, size=21)
    px, py, ph, pgap = 380, 96, 26, 12
    s.text(px, py - 14, "fp32 partials", t.muted, size=21)
    s.text(300, 76, "stage 1", t.fg, size=21, anchor="middle", weight="bold")
    for bi in range(blocks):
        y = py + bi * (ph + pgap)
        s.rect(px, y, cols * 32, ph, colors[bi], 2, fill=colors[bi], fill_opacity=0.3, rx=3)
        for c in range(1, cols):
            s.line(px + 32 * c, y, px + 32 * c, y + ph, colors[bi], 1)
        src_y = gy + bi * block_h + rows_per_block * rh / 2
        s.arrow(gx + cols * cw + 94, src_y, px - 6, y + ph / 2, t.muted, 1.8, head=10)
    ry = py + blocks * (ph + pgap) + 44
    s.arrow(px + 96, py + blocks * (ph + pgap) - 6, px + 96, ry - 4, t.fg, 2.2)
    s.text(px + 86, ry - 16, "stage 2", t.fg, size=21, anchor="end", weight="bold")
    s.rect(px, ry, cols * 32, ph, t.fg, 2.2, fill=t.tint, fill_opacity=0.25, rx=3)
    for c in range(1, cols):
        s.line(px + 32 * c, ry, px + 32 * c, ry + ph, t.fg, 1)
    s.text(px - 10, ry + 20, "dγ", t.fg, size=22, anchor="end", weight="bold")
    s.text(24, 330, "fixed order 0, 1, 2, 3:", t.fg, size=21)
    s.text(24, 360, "same bits every run", t.good, size=21, weight="bold")
    s.line(20, 384, 580, 384, t.muted, 1, dash="3 6")
    s.text(300, 418, "atomicAdd: blocks add as they finish", t.fg, size=22, anchor="middle", weight="bold")
    s.text(300, 452, f"partials {vals} (exact sum {_short(exact)})", t.fg, size=21, anchor="middle", mono=True)
    s.text(300, 488, f"order 0,1,2,3 → {_short(fixed)}", t.fg, size=21, anchor="middle", mono=True)
    s.text(300, 520, f"order 2,0,3,1 → {_short(other)}", t.fg, size=21, anchor="middle", mono=True)
    s.text(300, 558, "float32 + is not associative", t.bad, size=21, anchor="middle")
    return s


# ------------------------------------------------------------------------------------------------
# g. fused residual add + norm
# ------------------------------------------------------------------------------------------------
FUSE_TOKENS, FUSE_HIDDEN, FUSE_BYTES = 4096, 4096, 2   # bf16 activations


def fused_residual(t: Theme) -> Svg:
    mib = FUSE_TOKENS * FUSE_HIDDEN * FUSE_BYTES / 2**20
    unfused = {"add": (("x", "residual"), ("h",)), "norm": (("h",), ("y",))}
    fused = {"add + norm": (("x", "residual"), ("h", "y"))}
    n_unfused = sum(len(r) + len(w) for r, w in unfused.values())
    n_fused = sum(len(r) + len(w) for r, w in fused.values())
    s = Svg(600, 560, "Fused residual add and norm: fewer bytes through memory",
            "Unfused, one kernel computes h = x + residual and writes h, and a second kernel reads h back to "
            f"compute y = norm(h): {n_unfused} tensor-sized transfers. Fused, one kernel reads x and the residual "
            f"once, keeps h in registers to normalize it, and writes h (the next residual) and y: {n_fused} "
            f"transfers. For {FUSE_TOKENS} tokens of hidden size {FUSE_HIDDEN} in bf16 each tensor is "
            f"{mib:g} MiB: {n_unfused * mib:g} MiB against {n_fused * mib:g} MiB, {n_fused}/{n_unfused} of the "
            "traffic (the gain vector is negligible). For a memory-bound kernel time follows bytes.", t)

    def tensor(x, y, label, color):
        s.rect(x, y, 110, 40, color, 2, fill=color, fill_opacity=0.14, rx=20)
        s.text(x + 55, y + 27, label, t.fg, anchor="middle", size=22)

    def kernel(x, y, w, label):
        s.rect(x, y, w, 48, t.fg, 2.2, fill=t.tint, fill_opacity=0.2, rx=4)
        s.text(x + w / 2, y + 31, label, t.fg, anchor="middle", size=22, weight="bold")

    s.text(20, 36, f"unfused: 2 kernels, {n_unfused} transfers", t.bad, size=22, weight="bold")
    tensor(20, 60, "x", t.rms)
    tensor(20, 120, "residual", t.rms)
    kernel(175, 86, 90, "add")
    tensor(315, 90, "h", t.ln)
    kernel(175, 176, 90, "norm")
    tensor(315, 180, "y", t.good)
    s.arrow(130, 80, 175, 102, t.muted, 2)
    s.arrow(130, 140, 175, 120, t.muted, 2)
    s.arrow(265, 110, 315, 110, t.muted, 2)
    s.path("M370 130 L370 150 L220 150 L220 172", t.muted, 2)
    s.arrow(220, 160, 220, 176, t.muted, 2)
    s.arrow(265, 200, 315, 200, t.muted, 2)
    s.text(440, 146, "h read back", t.bad, size=21, anchor="start")

    s.text(20, 278, f"fused: 1 kernel, {n_fused} transfers", t.good, size=22, weight="bold")
    tensor(20, 300, "x", t.rms)
    tensor(20, 360, "residual", t.rms)
    kernel(175, 326, 150, "add + norm")
    tensor(375, 300, "h", t.ln)
    tensor(375, 360, "y", t.good)
    s.arrow(130, 320, 175, 342, t.muted, 2)
    s.arrow(130, 380, 175, 360, t.muted, 2)
    s.arrow(325, 342, 375, 320, t.muted, 2)
    s.arrow(325, 360, 375, 380, t.muted, 2)
    s.text(250, 404, "h stays in registers", t.muted, size=21, anchor="middle")
    # bytes bars
    scale = 400 / (n_unfused * mib)
    for k, (label, n_t, color) in enumerate([("unfused", n_unfused, t.bad), ("fused", n_fused, t.good)]):
        y = 440 + k * 54
        s.rect(130, y, scale * n_t * mib, 34, color, 2, fill=color, fill_opacity=0.3, rx=3)
        s.text(120, y + 25, label, t.fg, size=21, anchor="end")
        s.text(140, y + 25, f"{n_t * mib:g} MiB", t.fg, size=21)
    s.text(300, 550, f"{FUSE_TOKENS}×{FUSE_HIDDEN} bf16: {mib:g} MiB per tensor", t.muted, size=21,
           anchor="middle")
    return s


# ------------------------------------------------------------------------------------------------
# h. Newton step for rsqrt
# ------------------------------------------------------------------------------------------------
# g2. one row, two passes: what moves between memory, cache and registers
# ------------------------------------------------------------------------------------------------
ROW_D = 4096
ROW_BYTES = 4          # float32


def row_passes(t: Theme) -> Svg:
    kib = ROW_D * ROW_BYTES / 1024
    s = Svg(600, 560, "One RMSNorm row, two passes: what moves where",
            f"Pass 1 loads the row of x from memory, squares and adds it in vector registers, and leaves the row "
            f"in the cache ({ROW_D} float32 values are {kib:g} KiB). The reciprocal square root r is computed once. "
            "Pass 2 loads the row again, now from the cache, multiplies by r and the gain, and stores y to memory. "
            "Memory sees one read and one write of the row; the second read costs no memory traffic.", t)

    def box(x, y, w, h, label, color):
        s.rect(x, y, w, h, color, 2, fill=color, fill_opacity=0.1, rx=8)
        s.text(x + w / 2, y + 28, label, color, anchor="middle", size=22, weight="bold")

    box(15, 60, 170, 390, "memory", t.muted)
    box(215, 60, 170, 390, "cache", t.muted)
    box(415, 60, 170, 390, "registers", t.muted)
    s.text(300, 36, f"d = {ROW_D}, float32: a row is {kib:g} KiB", t.fg, anchor="middle", size=22)

    def chip(x, y, label, color):
        s.rect(x, y, 130, 40, color, 2, fill=color, fill_opacity=0.18, rx=20)
        s.text(x + 65, y + 27, label, t.fg, anchor="middle", size=22)

    chip(35, 110, "row of x", t.rms)
    chip(235, 110, "row of x", t.rms)
    chip(435, 110, "sum of x²", t.ln)
    chip(435, 230, "r", t.ln)
    chip(35, 365, "row of y", t.good)
    s.text(290, 190, "pass 1", t.fg, anchor="middle", size=22, weight="bold")
    s.arrow(165, 130, 235, 130, t.rms, 2.5)
    s.arrow(365, 130, 435, 130, t.rms, 2.5)
    s.arrow(500, 150, 500, 230, t.ln, 2.5)
    s.text(510, 200, "rsqrt", t.fg, size=21)
    s.text(340, 300, "pass 2", t.fg, anchor="end", size=22, weight="bold")
    s.path("M350 150 L350 350", t.rms, 2.5, dash="6 4")
    s.arrow(350, 350, 435, 350, t.rms, 2.5, dash="6 4")
    s.arrow(500, 270, 500, 330, t.ln, 2.5)
    chip(435, 330, "x · r · γ", t.good)
    s.arrow(435, 385, 165, 385, t.good, 2.5)
    s.text(300, 420, "second read", t.muted, anchor="middle", size=21)
    s.text(300, 443, "hits the cache", t.muted, anchor="middle", size=21)
    # memory traffic of the row
    s.text(20, 492, "memory traffic per row", t.fg, size=22, weight="bold")
    scale = 200 / (2 * kib)
    s.rect(20, 506, scale * kib, 34, t.rms, 2, fill=t.rms, fill_opacity=0.3, rx=3)
    s.rect(20 + scale * kib, 506, scale * kib, 34, t.good, 2, fill=t.good, fill_opacity=0.3, rx=3)
    s.text(235, 531, f"{kib:g} KiB in, {kib:g} KiB out", t.fg, size=21)
    return s


# ------------------------------------------------------------------------------------------------
NEWTON_A = 2.0
NEWTON_Y0 = 0.5


def newton_step(y: float, a: float) -> float:
    """One Newton step on f(y) = 1/y^2 - a: y - f/f' = y (1.5 - 0.5 a y^2)."""
    return y * (1.5 - 0.5 * a * y * y)


def newton(t: Theme) -> Svg:
    a, y0 = NEWTON_A, NEWTON_Y0
    y1 = newton_step(y0, a)
    y2 = newton_step(y1, a)
    root = 1 / math.sqrt(a)
    # the same step written as Newton's y - f/f', to be sure the closed form is the tangent's zero
    f = lambda y: 1 / y**2 - a          # noqa: E731
    fp = lambda y: -2 / y**3            # noqa: E731
    if abs((y0 - f(y0) / fp(y0)) - y1) > 1e-12:
        raise ValueError("closed form of the Newton step disagrees with y - f/f'")
    rel = lambda y: (y - root) / root    # noqa: E731
    s = Svg(600, 500, "Newton's method for the reciprocal square root",
            f"The curve f(y) = 1/y² − a for a = {a:g}; its zero is y = 1/√a = {root:.4f}. Newton's step "
            "follows the tangent at the current guess down to the axis: y1 = y0 − f(y0)/f'(y0) = "
            f"y0 (1.5 − 0.5 a y0²). From y0 = {y0:g} (relative error {rel(y0):.1%}) it gives y1 = {y1:.4f} "
            f"({rel(y1):.1%}) and y2 = {y2:.4f} ({rel(y2):.2%}): the error roughly squares at every step. "
            "The step needs only multiplications, no division or square root. f is convex, so from below the "
            "root the iterates stay below it and increase towards it.", t)
    # plot area
    X0, X1, Y0, Y1 = 70, 585, 60, 400       # pixel box
    ylo, yhi, flo, fhi = 0.4, 0.86, -0.9, 4.6

    def P(y, fv):
        return X0 + (y - ylo) / (yhi - ylo) * (X1 - X0), Y1 - (fv - flo) / (fhi - flo) * (Y1 - Y0)

    zx, zy = P(ylo, 0)
    s.arrow(X0, zy, X1 + 8, zy, t.muted, 1.6, head=10)      # y axis (horizontal)
    s.arrow(X0, Y1, X0, Y0 - 14, t.muted, 1.6, head=10)     # f axis
    s.text(X1 + 4, zy + 30, "y", t.fg, italic=True, anchor="end")
    s.text(X0 + 10, Y0 - 4, "f(y)", t.fg, italic=True)
    for fv in (0, 2, 4):
        _, py = P(ylo, fv)
        s.line(X0 - 5, py, X0 + 5, py, t.muted, 1.5)
        s.text(X0 - 10, py + 7, str(fv), t.fg, size=21, anchor="end")
    # curve, clipped to the box
    pts = []
    for k in range(241):
        y = ylo + (yhi - ylo) * k / 240
        fv = f(y)
        if flo <= fv <= fhi:
            pts.append(P(y, fv))
    s.poly(pts, t.rms, 3)
    # tangents
    for yk, yn, lab in ((y0, y1, "0"), (y1, y2, "1")):
        px, py = P(yk, f(yk))
        qx, qy = P(yn, 0)
        ext = P(yn + 0.35 * (yn - yk), 0 + fp(yk) * 0.35 * (yn - yk))
        s.line(px, py, *ext, t.ln, 2.2)
        s.line(px, py, px, zy, t.muted, 1.5, dash="4 5")
        s.dot(px, py, t.ln, 5)
    for yk, lab, dyl in ((y0, "y₀", 34), (y1, "y₁", 34), (y2, "y₂", 34)):
        px, _ = P(yk, 0)
        s.dot(px, zy, t.fg, 4.5)
        s.text(px, zy + dyl, lab, t.fg, anchor="middle", size=22)
    rx_, _ = P(root, 0)
    s.dot(rx_, zy, t.good, 5.5)
    s.text(rx_ + 40, zy - 12, "1/√a", t.good, size=22, anchor="start")
    # numbers
    lx, ly = 300, 110
    s.text(lx, ly, f"a = {a:g},  1/√a = {root:.4f}", t.fg, size=21)
    for k, (lab, v, digits) in enumerate((("y₀", y0, 1), ("y₁", y1, 1), ("y₂", y2, 2))):
        err = f"{rel(v):+.{digits}%}".replace("-", "−")
        s.text(lx, ly + 32 * (k + 1), f"{lab} = {v:.4f}  ({err})", t.fg, size=21)
    s.text(300, 452, "f(y) = 1/y² − a", t.rms, size=22, anchor="middle")
    s.text(300, 488, "y₁ = y₀ (1.5 − 0.5 a y₀²)", t.ln, size=22, anchor="middle", weight="bold")
    return s
