"""The kit's wide probes: widths from 1 to 8192 (primes among them, and the model's own hidden and head
sizes), 64 rows each, every row at its own scale, from far below eps to the edge where the model's float32
sum of squares would overflow (float16: its own largest value), so float16 rows reach its subnormals.

These are added to the small probes of :func:`reference_impl.check.kit.plan` when the caller keeps the
default widths; :func:`coverage` says in one line what a plan covered.
"""
from __future__ import annotations

import math

import torch

from . import matching as M

WIDE_WIDTHS = (1, 7, 4099, 8192)  # one, a small prime, a prime past 4096, the largest power of two probed
ROWS = 64
LAYOUT = "wide"


def model_sizes(target) -> tuple[int, ...]:
    """The hidden size and head size of the model's default config in the installed transformers (empty
    when the target is not a model type it knows)."""
    try:
        from transformers import AutoConfig

        cfg = AutoConfig.for_model(target.name.split(":")[0])
    except Exception:  # no transformers, or not a model type: the fixed widths only
        return ()
    cfg = getattr(cfg, "text_config", None) or cfg
    hidden = getattr(cfg, "hidden_size", None)
    heads = getattr(cfg, "num_attention_heads", None)
    head = getattr(cfg, "head_dim", None) or (hidden // heads if hidden and heads else None)
    return tuple(int(v) for v in (hidden, head) if isinstance(v, int) and 0 < v <= 16384)


def row_scales(dtype: torch.dtype, d: int, eps: float) -> torch.Tensor:
    """64 scales, log-spaced: from 1e-3 sqrt(eps) (the mean square a millionth of eps, so eps decides the
    row; float16 rows land among its subnormals) to an eighth of the edge: x's largest value, or the
    scale where a float32 sum of d squares would overflow."""
    lo = 1e-3 * math.sqrt(max(eps, 1e-12))
    edge = min(torch.finfo(dtype).max, math.sqrt(torch.finfo(torch.float32).max / d))
    return torch.logspace(math.log10(lo), math.log10(edge / 8), ROWS, dtype=torch.float64)


def wide_probes(target, dtype, wdtype, *, residual: bool, gated: bool, seed: int = 0) -> list[M.Probe]:
    """One probe per wide width (and the model's sizes): ``(64, d)`` rows at :func:`row_scales`."""
    out = []
    for d in sorted(set(WIDE_WIDTHS) | set(model_sizes(target))):
        (p,) = M.make_probes([d], [dtype], [wdtype], gain=target.gain, bias=target.bias, eps=target.eps,
                             scales=(1.0,), seed=seed + 3, rows=ROWS, residual=residual, gate=gated)
        s = row_scales(dtype, d, target.eps)
        g = torch.Generator().manual_seed(seed + 17 * d)
        p.x = (torch.randn(ROWS, d, generator=g, dtype=torch.float64) * s[:, None]).to(dtype)
        if p.residual is not None:  # the stream as large as the row, so the sum stays finite and in range
            p.residual = (torch.randn(ROWS, d, generator=g, dtype=torch.float64) * s[:, None] / 4).to(dtype)
        p.scale = float(s[-1])
        p.label = f"{M.dtype_name(dtype)} x, rows scaled {float(s[0]):.0e}..{float(s[-1]):.0e}, ({ROWS}, {d})"
        out.append(p)
    return out


def coverage(cases) -> str:
    """What a plan covered, in one line: dtypes, gain dtypes, widths, rows, scales and layouts."""
    ps = [c.probe for c in cases]
    dts = sorted({M.dtype_name(p.x.dtype) for p in ps})
    wdts = sorted({"none" if p.weight is None else M.dtype_name(p.weight.dtype) for p in ps})
    widths = sorted({p.x.shape[-1] for p in ps})
    rows = sorted({math.prod(p.x.shape[:-1]) for p in ps})
    wide = [c for c in cases if c.layout == LAYOUT]
    small = sorted({c.probe.scale for c in cases if c.layout != LAYOUT})
    scales = ", ".join(f"{s:g}" for s in small)
    if wide:
        lo = min(float(row_scales(c.probe.x.dtype, c.probe.x.shape[-1], c.probe.eps)[0]) for c in wide)
        hi = max(c.probe.scale for c in wide)
        scales += f"; per row {lo:.0e} to {hi:.0e}"
        if any(c.probe.x.dtype == torch.float16 for c in wide):
            scales += " (float16 subnormals included)"
    layouts = sorted({c.layout for c in cases})
    return (f"covered: x {', '.join(dts)}; gains {', '.join(wdts)}; widths {', '.join(map(str, widths))}; rows "
            f"{', '.join(map(str, rows))}; scales {scales}; layouts {', '.join(layouts)}; {len(cases)} cases")
