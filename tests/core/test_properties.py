"""Hypothesis property tests of the reference core over shapes (hidden size 1..8192, 1-D to 4-D) and dtypes."""
from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import reference_impl as ri
from reference_impl import oracle
from reference_impl import tolerances as tol

DTYPES = st.sampled_from([torch.float32, torch.float16, torch.bfloat16, torch.float64])


@st.composite
def cases(draw):
    rank = draw(st.integers(1, 4))
    d = draw(st.one_of(st.integers(1, 64), st.integers(65, 8192)))
    lead = [draw(st.integers(0 if rank > 1 else 1, 3)) for _ in range(rank - 1)]
    # keep the element count modest so the float64 oracle stays quick
    while np.prod(lead + [d]) > 40_000 and any(n > 1 for n in lead):
        lead[lead.index(max(lead))] -= 1
    dtype = draw(DTYPES)
    seed = draw(st.integers(0, 2**31 - 1))
    scale = draw(st.sampled_from([1e-3, 1.0, 50.0]))
    offset = draw(st.sampled_from([0.0, 1.0, -20.0]))
    g = torch.Generator().manual_seed(seed)
    shape = tuple(lead + [d])
    x = (torch.randn(shape, generator=g, dtype=torch.float64) * scale + offset * scale).to(dtype)
    w = (1 + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)).to(dtype)
    b = (0.1 * torch.randn(d, generator=g, dtype=torch.float64)).to(dtype)
    dy = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    return x, w, b, dy


@settings(max_examples=60, deadline=None)
@given(cases())
def test_rms_norm_properties(case):
    x, w, b, dy = case
    y = ri.rms_norm(x, w)
    assert y.shape == x.shape and y.dtype == x.dtype
    xs, ws = x.double().numpy(), w.double().numpy()
    tol.assert_within(y, oracle.rms_norm_forward(xs, ws, 1e-6), tol.rms_forward_bound(x, w, 1e-6, x.dtype), "forward")
    dx, dw = ri.rms_norm_backward(dy, x, w)
    edx, edw = oracle.rms_norm_backward(dy.double().numpy(), xs, ws, 1e-6)
    bdx, bdw = tol.rms_backward_bounds(dy, x, w, 1e-6, x.dtype)
    tol.assert_within(dx, edx, bdx, "dx")
    tol.assert_within(dw, edw, bdw, "dweight")


@settings(max_examples=60, deadline=None)
@given(cases())
def test_layer_norm_properties(case):
    x, w, b, dy = case
    y = ri.layer_norm(x, w, b)
    assert y.shape == x.shape and y.dtype == x.dtype
    xs, ws, bs = x.double().numpy(), w.double().numpy(), b.double().numpy()
    tol.assert_within(y, oracle.layer_norm_forward(xs, ws, bs, 1e-5), tol.ln_forward_bound(x, w, b, 1e-5, x.dtype), "forward")
    dx, dw, db = ri.layer_norm_backward(dy, x, w, b)
    edx, edw, edb = oracle.layer_norm_backward(dy.double().numpy(), xs, ws, bs, 1e-5)
    bdx, bdw, bdb = tol.ln_backward_bounds(dy, x, w, b, 1e-5, x.dtype)
    tol.assert_within(dx, edx, bdx, "dx")
    tol.assert_within(dw, edw, bdw, "dweight")
    tol.assert_within(db, edb, bdb, "dbias")


@settings(max_examples=40, deadline=None)
@given(cases(), st.floats(1e-3, 1e3))
def test_rms_norm_scale_invariance(case, alpha):
    """With eps=0, RMSNorm(alpha * x) == RMSNorm(x) for alpha > 0 (float64, to rounding)."""
    x = case[0].double()
    if x.numel() == 0 or bool((x.pow(2).sum(-1) == 0).any()):
        return
    np.testing.assert_allclose(ri.rms_norm(alpha * x, eps=0.0).numpy(), ri.rms_norm(x, eps=0.0).numpy(),
                               rtol=1e-12 * x.shape[-1], atol=0)
