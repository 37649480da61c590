"""Double (and triple) backward through the fused ops: exact, never silently zero.

The fused ops compute in float32; their second derivatives are compared with those of a float64 PyTorch
expression of the same math, whose own second derivatives ``torch.autograd.gradgradcheck`` checks
against finite differences. Each comparison is a Hessian-vector product: ``v`` weights the outputs, ``u``
the first gradients, and the second gradient is taken with respect to every input (x, weight, bias,
residual). Runs on the CPU op, and on the CUDA kernels when a GPU is present.
"""
from __future__ import annotations

import warnings

import pytest
import torch

from reference_impl.ops import fused_layer_norm, fused_rms_norm

DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")])]
EPS_RMS, EPS_LN = 1e-6, 1e-5


def ref_rms(x, w, res, convention):
    """float64 RMSNorm (eps inside the root) with the Llama/Gemma gain and the optional residual add."""
    h = x if res is None else x + res
    y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS_RMS)
    if w is not None:
        y = y * ((1 + w) if convention == "gemma" else w)
    return y if res is None else (y, h)


def ref_ln(x, w, b):
    mu = x.mean(-1, keepdim=True)
    y = (x - mu) * torch.rsqrt((x - mu).pow(2).mean(-1, keepdim=True) + EPS_LN)
    if w is not None:
        y = y * w
    return y if b is None else y + b


def fused_rms(x, w, res, convention):
    return fused_rms_norm(x, w, EPS_RMS, residual=res, convention=convention)


def fused_ln(x, w, b):
    return fused_layer_norm(x, w, b, EPS_LN)


def _second_order(fn, inputs, v, u, create_third=False):
    """grad_inputs of sum(u * grad_inputs(sum(v * fn(inputs)))): a Hessian-vector product."""
    out = fn(*inputs)
    if isinstance(out, tuple):  # (y, h): both outputs carry a cotangent
        outs, vs = out, v
    else:
        outs, vs = (out,), v[:1]
    leaves = [t for t in inputs if t is not None]
    g1 = torch.autograd.grad(outs, leaves, vs, create_graph=True)
    s = sum((g * uu).sum() for g, uu in zip(g1, u))
    g2 = torch.autograd.grad(s, leaves, create_graph=create_third, allow_unused=True)
    # a bias enters linearly: its second derivative is structurally zero (None)
    return g1, tuple(torch.zeros_like(t) if g is None else g for g, t in zip(g2, leaves))


def _inputs(shape, with_w, with_b_or_res, seed, device):
    g = torch.Generator().manual_seed(seed)
    d = shape[-1]
    x = torch.randn(shape, generator=g, dtype=torch.float64) * 2
    w = (torch.rand(d, generator=g, dtype=torch.float64) + 0.5) if with_w else None
    extra = torch.randn(shape if len(shape) and with_b_or_res == "res" else (d,), generator=g,
                        dtype=torch.float64) if with_b_or_res else None
    v = [torch.randn(shape, generator=g, dtype=torch.float64) for _ in range(2)]
    u = [torch.randn(t.shape, generator=g, dtype=torch.float64) for t in (x, w, extra) if t is not None]
    mv = lambda t: None if t is None else t.to(device)  # noqa: E731
    return mv(x), mv(w), mv(extra), [mv(t) for t in v], [mv(t) for t in u]


def _leaf(t, dtype):
    return None if t is None else t.to(dtype).detach().requires_grad_(True)


def _compare(fused_fn, ref_fn, x, w, extra, v, u, what, dtype=torch.float32):
    """The fused op's first and second gradients in ``dtype`` against float64; never all zero."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "an autograd kernel was not registered" would be a silent zero
        f1, f2 = _second_order(fused_fn, [_leaf(t, dtype) for t in (x, w, extra)], [t.to(dtype) for t in v],
                               [t.to(dtype) for t in u])
    r1, r2 = _second_order(ref_fn, [_leaf(t, torch.float64) for t in (x, w, extra)], v, u)
    rel = {torch.float32: 2e-4, torch.bfloat16: 6e-2, torch.float16: 1e-2}[dtype]
    for k, (a, b) in enumerate(zip(f1 + f2, r1 + r2)):
        a, b = a.detach(), b.detach()
        scale = float(b.abs().max())
        if scale == 0:  # only the bias's second derivative: zero for the fused op too
            assert float(a.abs().max()) == 0, f"{what}: gradient {k} should be exactly zero"
            continue
        assert scale > 1e-3, f"{what}: reference gradient {k} is ~0; the case tests nothing"
        err = float((a.double() - b).abs().max())
        assert err <= rel * scale, f"{what}: gradient {k} off by {err:.3g} (scale {scale:.3g})"


@pytest.mark.guards("fused.double_backward", "snippet:autograd.autograd")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("with_w", [True, False], ids=["weight", "no_weight"])
@pytest.mark.parametrize("convention", ["llama", "gemma"])
def test_rms_double_backward_matches_float64(convention, with_w, residual, device):
    for seed, shape in enumerate([(4, 16), (2, 3, 37)]):
        x, w, res, v, u = _inputs(shape, with_w, "res" if residual else None, seed, device)
        _compare(lambda a, b, c: fused_rms(a, b, c, convention), lambda a, b, c: ref_rms(a, b, c, convention),
                 x, w, res, v, u, f"rms {convention} {shape}")


@pytest.mark.guards("fused.double_backward")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("params", ["weight_bias", "weight", "bias", "none"])
def test_layer_norm_double_backward_matches_float64(params, device):
    for seed, shape in enumerate([(4, 16), (2, 3, 37)]):
        x, w, b, v, u = _inputs(shape, "weight" in params, "bias" in params, 10 + seed, device)
        _compare(fused_ln, ref_ln, x + 3, w, b, v, u, f"ln {params} {shape}")


@pytest.mark.guards("fused.double_backward")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_double_backward_in_16_bit(dtype):
    x, w, res, v, u = _inputs((3, 64), True, "res", 20, "cpu")
    _compare(lambda a, b, c: fused_rms(a, b, c, "llama"), lambda a, b, c: ref_rms(a, b, c, "llama"),
             x, w, res, v, u, f"rms {dtype}", dtype)
    x, w, b, v, u = _inputs((3, 64), True, True, 21, "cpu")
    _compare(fused_ln, ref_ln, x, w, b, v, u, f"ln {dtype}", dtype)


@pytest.mark.guards("fused.double_backward")
def test_the_reference_second_derivatives_pass_gradgradcheck():
    """The float64 expressions the fused ops are compared with are right (finite differences)."""
    g = torch.Generator().manual_seed(30)
    x, r = (torch.randn(3, 7, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    w = (torch.rand(7, generator=g, dtype=torch.float64) + 0.5).requires_grad_(True)
    b = torch.randn(7, generator=g, dtype=torch.float64, requires_grad=True)
    for conv in ("llama", "gemma"):
        assert torch.autograd.gradgradcheck(lambda a, c, e: ref_rms(a, c, e, conv), (x, w, r))
        assert torch.autograd.gradgradcheck(lambda a, c: ref_rms(a, c, None, conv), (x, w))
    assert torch.autograd.gradgradcheck(ref_ln, (x, w, b))
    assert torch.autograd.gradgradcheck(lambda a: ref_ln(a, None, None), (x,))


@pytest.mark.guards("fused.double_backward")
def test_the_reported_case_is_no_longer_zero():
    """The case that once returned zeros with only a warning."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 16, generator=g)
    w = torch.rand(16, generator=g) + 0.5
    v = torch.randn(4, 16, generator=g)
    got = []
    for dt, fn in ((torch.float32, lambda a: fused_rms_norm(a, w)),
                   (torch.float64, lambda a: ref_rms(a, w.double(), None, "llama"))):
        xa = x.to(dt).requires_grad_(True)
        y = fn(xa)
        gx, = torch.autograd.grad((y * y).sum(), xa, create_graph=True)
        got.append(torch.autograd.grad((gx * v.to(dt)).sum(), xa)[0])
    assert got[1].abs().max() > 1
    torch.testing.assert_close(got[0].double(), got[1], rtol=1e-4, atol=1e-4 * float(got[1].abs().max()))


@pytest.mark.guards("fused.double_backward")
def test_third_order_matches_float64():
    """The backward ops' own backward is a differentiable expression, so a third derivative works too."""
    g = torch.Generator().manual_seed(40)
    x64 = torch.randn(3, 12, generator=g, dtype=torch.float64)
    w64 = torch.rand(12, generator=g, dtype=torch.float64) + 0.5
    res = []
    for dt, fn in ((torch.float32, lambda a, c: fused_rms_norm(a, c)),
                   (torch.float64, lambda a, c: ref_rms(a, c, None, "llama"))):
        x, w = x64.to(dt).requires_grad_(True), w64.to(dt).requires_grad_(True)
        y = fn(x, w)
        gx, = torch.autograd.grad(y.pow(3).sum(), x, create_graph=True)
        hx, = torch.autograd.grad(gx.pow(2).sum(), x, create_graph=True)
        res.append(torch.autograd.grad(hx.sum(), [x, w]))
    for a, b in zip(*res):
        torch.testing.assert_close(a.double(), b, rtol=2e-3, atol=2e-3 * float(b.abs().max()))
