"""Train-inference consistency: the properties that decide whether a trainer's norm and a server's norm
agree on a row.

- **Batch invariance**: a row's output (and its gradient) is the same bits whatever the batch it is in:
  alone, at the first, a middle or the last position of batches of other sizes, and between rows of zeros
  (padding). A kernel that picks its reduction split by batch size, or reads neighbouring rows, fails it.
- **Determinism**: repeated calls on one input give the same bits.

:func:`batch_invariance` runs both on one case of a check and returns what broke, in words (None: held).
"""
from __future__ import annotations

import torch

from . import matching as M

BATCH_SIZES = (1, 3, 64)  # the row alone, a small batch, and a batch wide enough for a kernel to split its work
REPEATS = 4


def _probe(p: M.Probe, x, r=None) -> M.Probe:
    return M.Probe(x, p.weight, p.bias, p.eps, p.label, p.gain, r, p.scale, p.gate)


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def layouts(x: torch.Tensor, i: int, others: torch.Tensor):
    """``(name, batch, position)``: row ``i`` of ``x`` alone, in the middle of a small batch, first and
    last in a large one (the other rows drawn from ``others``), and between rows of zeros."""
    row = x[i:i + 1]
    yield "alone", row, 0
    for n in BATCH_SIZES[1:]:
        fill = others.repeat((n + others.shape[0] - 1) // others.shape[0], 1)[: n - 1]
        places = (("middle", (n - 1) // 2),) if n < 8 else (("first", 0), ("last", n - 1))
        for where, pos in places:
            yield f"at the {where} position of a batch of {n}", torch.cat([fill[:pos], row, fill[pos:]]), pos
    pad = torch.zeros((3,) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device)
    yield "between rows of zeros (padding)", torch.cat([pad, row, pad]), 3


def batch_invariance(fn, target, case, residual: bool, grads: bool) -> str | None:
    """What broke batch invariance or determinism on a contiguous 2-d case (None: both held). Runs the
    function through :func:`reference_impl.check.kit.call`, so any kind of norm the kit checks works."""
    from .calling import call

    p = case.probe
    if p.x.dim() != 2 or not p.x.is_contiguous():
        return None
    x, rows = p.x, p.x.shape[0]
    with torch.no_grad():
        full = _first(call(fn, p, target, residual))
        for k in range(REPEATS):
            again = _first(call(fn, p, target, residual))
            d = M.ulp_distance(again, full)
            if bool(d.any()):
                return (f"not deterministic: call {k + 3} on the same input differs from the first in "
                        f"{int((d > 0).sum())} of {d.numel()} elements")
    for i in sorted({0, rows - 1}):
        want = full[i:i + 1]
        for name, batch, pos in layouts(x, i, x):
            r = None
            if residual:
                r = next(b for n, b, _ in layouts(p.residual, i, p.residual) if n == name)
            with torch.no_grad():
                got = _first(call(fn, _probe(p, batch, r), target, residual))[pos:pos + 1]
            d = M.ulp_distance(got, want)
            if bool(d.any()):
                return (f"not batch-invariant: row {i} {name} differs from the same row in the case's batch of "
                        f"{rows} in {int((d > 0).sum())} of {d.numel()} elements (up to {int(d.max())} ulp)")
        if grads and not residual and i == rows - 1:
            broke = _grad_invariance(fn, target, p, i, call)
            if broke:
                return broke
    return None


def _row_grad(fn, target, p, batch, pos, dy_row, call):
    xb = batch.detach().clone().requires_grad_(True)
    y = _first(call(fn, _probe(p, batch), target, False, x=xb))
    if not isinstance(y, torch.Tensor) or not y.requires_grad:
        return None
    dy = torch.zeros_like(y)
    dy[pos:pos + 1] = dy_row
    (g,) = torch.autograd.grad(y, [xb], dy, allow_unused=True)
    return None if g is None else g[pos:pos + 1]


def _grad_invariance(fn, target, p, i, call) -> str | None:
    """The gradient of row ``i`` (dx, for the same upstream gradient of that row) in each batch layout."""
    gen = torch.Generator().manual_seed(5)
    dy_row = torch.randn((1,) + tuple(p.x.shape[1:]), generator=gen, dtype=torch.float64)
    want = None
    for name, batch, pos in layouts(p.x, i, p.x):
        try:
            g = _row_grad(fn, target, p, batch, pos, dy_row.to(p.x.dtype), call)
        except Exception:  # the gradient checks of the case report a backward that raises
            return None
        if g is None:
            return None
        if want is None:
            want, first = g, name
            continue
        d = M.ulp_distance(g, want)
        if bool(d.any()):
            return (f"not batch-invariant in its gradient: dx of row {i} {name} differs from dx of the row "
                    f"{first} in {int((d > 0).sum())} of {d.numel()} elements (up to {int(d.max())} ulp)")
    return None
