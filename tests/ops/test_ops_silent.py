"""eps = 0 and rows below float32's reciprocal range: the fused ops' backward is right, not Inf or NaN.

Such a row (every element about 1e-40) has an RMS whose reciprocal passes float32's maximum. The forward
computes it in double and is right; the saved float32 rstd is Inf, so the backward runs from the saved input
in float64 when eps = 0 (reference_impl/ops/autograd.py). dweight and dbias must match the float64
reference, and dx must be the float64 gradient rounded to float32 (Inf exactly where that passes the range).
"""
from __future__ import annotations

import pytest
import torch

import reference_impl as ri

F32_MAX = torch.finfo(torch.float32).max


def _case(kind):
    g = torch.Generator().manual_seed(21)
    x = (torch.randn(4, 16, generator=g, dtype=torch.float64) * 1e-40).float()
    x[0] = torch.randn(16, generator=g)          # an ordinary row next to the tiny ones
    x[3] = (torch.randn(16, generator=g, dtype=torch.float64) * 1e-36).float()  # tiny, reciprocal in range
    w = 1 + 0.3 * torch.randn(16, generator=g)
    b = 0.1 * torch.randn(16, generator=g)
    dy = torch.randn(4, 16, generator=g)
    return x, w, b, dy


@pytest.mark.parametrize("kind", ["rms", "ln"])
def test_eps0_backward_on_rows_whose_rstd_overflows_float32(kind):
    x, w, b, dy = _case(kind)
    xs, ws, bs = (t.clone().requires_grad_(True) for t in (x, w, b))
    y = ri.fused_rms_norm(xs, ws, 0.0) if kind == "rms" else ri.fused_layer_norm(xs, ws, bs, 0.0)
    y.backward(dy)
    x64, w64, b64 = (t.double().requires_grad_(True) for t in (x, w, b))
    y64 = ri.rms_norm(x64, w64, 0.0) if kind == "rms" else ri.layer_norm(x64, w64, b64, 0.0)
    y64.backward(dy.double())
    torch.testing.assert_close(y.double(), y64, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ws.grad.double(), w64.grad, rtol=1e-5, atol=1e-6)
    if kind == "ln":
        torch.testing.assert_close(bs.grad.double(), b64.grad, rtol=1e-6, atol=1e-6)
    want = x64.grad.float()  # rounded once: Inf where the true value passes float32's range
    assert not torch.isnan(xs.grad).any()
    assert torch.equal(torch.isinf(xs.grad), torch.isinf(want))
    fin = torch.isfinite(want)
    torch.testing.assert_close(xs.grad[fin].double(), x64.grad[fin], rtol=1e-5, atol=0)
