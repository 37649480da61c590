"""The reference core: oracle == PyTorch reference == autograd == torch.nn.functional, within the policy."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import reference_impl as ri
from reference_impl import oracle
from reference_impl import tolerances as tol

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
SHAPES = [(1,), (7,), (3, 1), (4, 33), (2, 3, 127), (2, 2, 3, 256), (5, 1000), (2, 4097)]


def _data(shape, dtype, seed, offset=0.0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=g, dtype=torch.float64) * 2 + offset).to(dtype)
    d = shape[-1]
    w = (1 + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)).to(dtype)
    b = (0.3 * torch.randn(d, generator=g, dtype=torch.float64)).to(dtype)
    dy = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    return x, w, b, dy


@pytest.mark.guards("rms.forward", "snippet:reference.rms_forward", "snippet:oracle.rms_forward")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_rms_forward_matches_oracle(shape, dtype):
    x, w, _, _ = _data(shape, dtype, 1)
    y = ri.rms_norm(x, w, eps=1e-6)
    assert y.dtype == dtype and y.shape == x.shape
    expected = oracle.rms_norm_forward(x.double().numpy(), w.double().numpy(), 1e-6)
    tol.assert_within(y, expected, tol.rms_forward_bound(x, w, 1e-6, dtype), "rms_norm forward")


@pytest.mark.guards("ln.forward", "snippet:reference.ln_forward", "snippet:oracle.ln_forward")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_ln_forward_matches_oracle(shape, dtype):
    x, w, b, _ = _data(shape, dtype, 2, offset=3.0)
    y = ri.layer_norm(x, w, b, eps=1e-5)
    expected = oracle.layer_norm_forward(x.double().numpy(), w.double().numpy(), b.double().numpy(), 1e-5)
    tol.assert_within(y, expected, tol.ln_forward_bound(x, w, b, 1e-5, dtype), "layer_norm forward")


@pytest.mark.guards("rms.vjp_x", "rms.vjp_weight", "snippet:reference.rms_backward", "snippet:oracle.rms_backward")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_rms_backward_matches_oracle(shape, dtype):
    x, w, _, dy = _data(shape, dtype, 3)
    dx, dw = ri.rms_norm_backward(dy, x, w, 1e-6)
    assert dx.dtype == dtype and dw.dtype == dtype
    edx, edw = oracle.rms_norm_backward(dy.double().numpy(), x.double().numpy(), w.double().numpy(), 1e-6)
    bdx, bdw = tol.rms_backward_bounds(dy, x, w, 1e-6, dtype)
    tol.assert_within(dx, edx, bdx, "rms dx")
    tol.assert_within(dw, edw, bdw, "rms dweight")


@pytest.mark.guards("ln.vjp_x", "ln.vjp_weight", "ln.vjp_bias", "snippet:reference.ln_backward", "snippet:oracle.ln_backward")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_ln_backward_matches_oracle(shape, dtype):
    x, w, b, dy = _data(shape, dtype, 4, offset=-2.0)
    dx, dw, db = ri.layer_norm_backward(dy, x, w, b, 1e-5)
    edx, edw, edb = oracle.layer_norm_backward(
        dy.double().numpy(), x.double().numpy(), w.double().numpy(), b.double().numpy(), 1e-5
    )
    bdx, bdw, bdb = tol.ln_backward_bounds(dy, x, w, b, 1e-5, dtype)
    tol.assert_within(dx, edx, bdx, "ln dx")
    tol.assert_within(dw, edw, bdw, "ln dweight")
    tol.assert_within(db, edb, bdb, "ln dbias")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_autograd_function_equals_explicit_backward(dtype):
    """`.backward()` through the autograd.Function gives exactly the explicit backward's tensors."""
    x, w, b, dy = _data((3, 5, 64), dtype, 5)
    xr, wr, br = (t.clone().requires_grad_() for t in (x, w, b))
    ri.rms_norm(xr, wr).backward(dy)
    dx, dw = ri.rms_norm_backward(dy, x, w, 1e-6)
    assert torch.equal(xr.grad, dx) and torch.equal(wr.grad, dw)
    xr.grad = wr.grad = None
    ri.layer_norm(xr, wr, br).backward(dy)
    dx, dw, db = ri.layer_norm_backward(dy, x, w, b, 1e-5)
    assert torch.equal(xr.grad, dx) and torch.equal(wr.grad, dw) and torch.equal(br.grad, db)


@pytest.mark.guards("rms.vjp_x", "rms.vjp_weight", "ln.vjp_x", "ln.vjp_weight", "ln.vjp_bias")
@pytest.mark.parametrize("shape", [(1,), (5,), (3, 7), (2, 2, 16)], ids=str)
def test_gradcheck_float64(shape):
    x, w, b, _ = _data(shape, torch.float64, 6, offset=0.5)
    args = [t.clone().requires_grad_() for t in (x, w, b)]
    assert torch.autograd.gradcheck(lambda a, c: ri.rms_norm(a, c, 1e-6), args[:2])
    assert torch.autograd.gradcheck(lambda a, c, e: ri.layer_norm(a, c, e, 1e-5), args)


def test_oracle_backward_matches_finite_differences(rng):
    """The oracle's closed-form VJPs against central differences of the oracle's own forward."""
    d = 9
    x = rng.standard_normal((2, d)) + 0.7
    w = 1 + 0.3 * rng.standard_normal(d)
    b = 0.2 * rng.standard_normal(d)
    dy = rng.standard_normal((2, d))
    h = 1e-6

    def fd(f, a):
        g = np.zeros_like(a)
        it = np.nditer(a, flags=["multi_index"])
        for _ in it:
            i = it.multi_index
            ap, am = a.copy(), a.copy()
            ap[i] += h
            am[i] -= h
            g[i] = np.sum(dy * (f(ap) - f(am))) / (2 * h)
        return g

    dx, dw = oracle.rms_norm_backward(dy, x, w, 1e-6)
    np.testing.assert_allclose(dx, fd(lambda a: oracle.rms_norm_forward(a, w, 1e-6), x), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(dw, fd(lambda a: oracle.rms_norm_forward(x, a, 1e-6), w), rtol=1e-6, atol=1e-8)
    dx, dw, db = oracle.layer_norm_backward(dy, x, w, b, 1e-5)
    np.testing.assert_allclose(dx, fd(lambda a: oracle.layer_norm_forward(a, w, b, 1e-5), x), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(dw, fd(lambda a: oracle.layer_norm_forward(x, a, b, 1e-5), w), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(db, fd(lambda a: oracle.layer_norm_forward(x, w, a, 1e-5), b), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("shape", [(7,), (4, 33), (2, 3, 1000)], ids=str)
def test_agrees_with_torch_functional(shape, dtype):
    """torch.nn.functional.rms_norm / layer_norm land within the same policy bound of the oracle."""
    x, w, b, dy = _data(shape, dtype, 7)
    d = shape[-1]
    y = F.rms_norm(x, (d,), w, eps=1e-6)
    tol.assert_within(y, oracle.rms_norm_forward(x.double().numpy(), w.double().numpy(), 1e-6),
                      tol.rms_forward_bound(x, w, 1e-6, dtype), "F.rms_norm")
    y = F.layer_norm(x, (d,), w, b, eps=1e-5)
    tol.assert_within(y, oracle.layer_norm_forward(x.double().numpy(), w.double().numpy(), b.double().numpy(), 1e-5),
                      tol.ln_forward_bound(x, w, b, 1e-5, dtype), "F.layer_norm")
    # and their autograd gradients against our explicit backward
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    F.rms_norm(xr, (d,), wr, eps=1e-6).backward(dy)
    edx, edw = oracle.rms_norm_backward(dy.double().numpy(), x.double().numpy(), w.double().numpy(), 1e-6)
    bdx, bdw = tol.rms_backward_bounds(dy, x, w, 1e-6, dtype)
    tol.assert_within(xr.grad, edx, bdx, "F.rms_norm dx")
    tol.assert_within(wr.grad, edw, bdw, "F.rms_norm dweight")


# ---------------------------------------------------------------- edge cases and bad input


def test_no_weight_and_no_bias():
    x, _, _, dy = _data((3, 10), torch.float32, 8)
    tol.assert_within(ri.rms_norm(x), oracle.rms_norm_forward(x.numpy()), tol.rms_forward_bound(x, None, 1e-6, torch.float32))
    dx, dw = ri.rms_norm_backward(dy, x)
    assert dw is None
    dx, dw, db = ri.layer_norm_backward(dy, x)
    assert dw is None and db is None


@pytest.mark.parametrize("shape", [(0, 8), (2, 0, 8)], ids=str)
def test_empty_inputs_give_empty_results(shape):
    x = torch.zeros(shape)
    d = shape[-1]
    w = torch.ones(d, requires_grad=True)
    y = ri.rms_norm(x, w)
    assert y.shape == x.shape and y.numel() == 0
    dx, dw = ri.rms_norm_backward(torch.zeros(shape), x, w.detach())
    assert dx.shape == x.shape and dw.shape == (d,) and torch.all(dw == 0)
    assert ri.layer_norm(x, w).shape == x.shape


@pytest.mark.parametrize("fn", [ri.rms_norm, ri.layer_norm], ids=["rms_norm", "layer_norm"])
def test_empty_last_dimension_is_a_value_error(fn):
    with pytest.raises(ValueError, match="empty last dimension"):
        fn(torch.zeros(0))


def test_nan_and_inf_propagate_row_wise():
    x = torch.randn(4, 16)
    x[1, 3] = float("nan")
    x[2, 5] = float("inf")
    y = ri.rms_norm(x)
    assert torch.isnan(y[1]).all()
    # Inf: rstd = rsqrt(inf) = 0, so finite entries become 0 and the Inf entry 0 * inf = NaN
    assert torch.isnan(y[2, 5]) and (y[2, torch.arange(16) != 5] == 0).all()
    assert torch.isfinite(y[0]).all() and torch.isfinite(y[3]).all()
    assert torch.equal(torch.isnan(y), torch.isnan(F.rms_norm(x, (16,), eps=1e-6)))
    y = ri.layer_norm(x)
    assert torch.isnan(y[1]).all() and torch.isnan(y[2]).all()
    assert torch.isfinite(y[0]).all() and torch.isfinite(y[3]).all()


def test_zero_row_with_and_without_eps():
    x = torch.zeros(2, 8)
    assert torch.equal(ri.rms_norm(x, eps=1e-6), torch.zeros(2, 8))
    assert torch.isnan(ri.rms_norm(x, eps=0.0)).all()


@pytest.mark.parametrize(
    "call, exc, words",
    [
        (lambda: ri.rms_norm(torch.arange(6).reshape(2, 3)), TypeError, "integer"),
        (lambda: ri.rms_norm(torch.ones(2, 3, dtype=torch.complex64)), TypeError, "complex"),
        (lambda: ri.rms_norm(torch.ones(2, 3, dtype=torch.bool)), TypeError, "dtype"),
        (lambda: ri.rms_norm([1.0, 2.0]), TypeError, "torch.Tensor"),
        (lambda: ri.rms_norm(torch.tensor(1.0)), ValueError, "0-d"),
        (lambda: ri.rms_norm(torch.ones(2, 3), torch.ones(4)), ValueError, "shape"),
        (lambda: ri.rms_norm(torch.ones(2, 3), torch.ones(1, 3)), ValueError, "shape"),
        (lambda: ri.rms_norm(torch.ones(2, 3), torch.ones(3, dtype=torch.int32)), TypeError, "weight"),
        (lambda: ri.rms_norm(torch.ones(2, 3), eps=-1e-6), ValueError, "non-negative"),
        (lambda: ri.rms_norm(torch.ones(2, 3), eps=float("nan")), ValueError, "finite"),
        (lambda: ri.rms_norm(torch.ones(2, 3), eps="1e-6"), TypeError, "eps"),
        (lambda: ri.layer_norm(torch.ones(2, 3), None, torch.ones(2)), ValueError, "bias"),
        (lambda: ri.layer_norm(torch.ones(2, 3, dtype=torch.int8)), TypeError, "integer"),
        (lambda: ri.rms_norm_backward(torch.ones(2, 4), torch.ones(2, 3)), ValueError, "dy"),
        (lambda: ri.layer_norm_backward(torch.ones(2, 3), torch.ones(2, 3), torch.ones(5)), ValueError, "weight"),
    ],
)
def test_bad_input_raises_clear_error(call, exc, words):
    with pytest.raises(exc, match=words):
        call()


def test_policy_bound_is_tight_enough_to_catch_a_wrong_eps():
    """The policy must fail a real bug: eps outside the root (x / (rms + eps)) on small-RMS rows."""
    x = torch.randn(4, 64) * 1e-3
    wrong = (x.double() / (x.double().pow(2).mean(-1, keepdim=True).sqrt() + 1e-6)).float()
    with pytest.raises(AssertionError):
        tol.assert_within(wrong, oracle.rms_norm_forward(x.numpy(), None, 1e-6),
                          tol.rms_forward_bound(x, None, 1e-6, torch.float32))
    assert math.isclose(tol.gamma(10, 2.0**-24), 10 * 2.0**-24, rel_tol=1e-5)


def test_double_backward_of_the_explicit_backward_is_exact():
    """The explicit-backward Functions recompute their saved statistic inside a recorded backward, so the
    second derivative sees how rstd depends on x (it once treated rstd as a constant, silently)."""
    x = torch.randn(2, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda x: ri.rms_norm(x), (x,))
    assert torch.autograd.gradgradcheck(lambda x, w: ri.rms_norm(x, w), (x, w))
    assert torch.autograd.gradgradcheck(lambda x, w, b: ri.layer_norm(x, w, b), (x, w, b))
