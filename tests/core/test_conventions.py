"""Model-family conventions and RMSNorm variants: accuracy vs the float64 oracle, explicit backward,
bad-input errors, and the facts the claims ledger relies on."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn as nn

import reference_impl as ri
from reference_impl import conventions as cv
from reference_impl import oracle
from reference_impl import tolerances as tol
from reference_impl import variants as va

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
SHAPES = [(1,), (7,), (3, 1), (4, 33), (2, 3, 127), (5, 1000), (2, 4097)]
RMS = list(cv.RMS_CONVENTIONS)


def _data(shape, dtype, seed, convention="llama", scale=2.0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)
    d = shape[-1]
    centre = 0.0 if convention == "gemma" else 1.0  # gemma stores the gain as an offset from 1
    w = (centre + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)).to(dtype)
    dy = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    return x, w, dy


def _f64(t):
    return t.detach().double().numpy()


# ------------------------------------------------------------------------------------------ forward

@pytest.mark.guards("conventions.forward", "snippet:conventions.conventions_forward", "snippet:conventions.policy_conventions")
@pytest.mark.parametrize("placement", cv.EPS_PLACEMENTS)
@pytest.mark.parametrize("convention", RMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_convention_forward_matches_oracle(shape, dtype, convention, placement):
    x, w, _ = _data(shape, dtype, 11, convention)
    y = cv.rms_norm(x, w, 1e-6, convention=convention, eps_placement=placement)
    assert y.shape == x.shape and y.dtype == cv.output_dtype(dtype, dtype, convention)
    expected = oracle.rms_norm_forward_placed(_f64(x), _f64(cv.effective_gain(w, convention)), 1e-6, placement)
    tol.assert_within(y, expected, tol.convention_forward_bound(x, w, 1e-6, convention, placement), f"{convention} forward")


@pytest.mark.guards("conventions.forward")
def test_oracle_inside_agrees_with_core_oracle():
    x, w, _ = _data((3, 50), torch.float64, 1)
    np.testing.assert_array_equal(oracle.rms_norm_forward_placed(_f64(x), _f64(w), 1e-6, "inside"),
                                  oracle.rms_norm_forward(_f64(x), _f64(w), 1e-6))


@pytest.mark.guards("conventions.forward")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_core_behaviour_unchanged_and_reference_convention_is_the_core(dtype):
    x, w, _ = _data((4, 33), dtype, 12)
    core = ri.rms_norm(x, w, 1e-6)
    assert torch.equal(ri.rms_norm(x, w, 1e-6, convention=None), core)
    assert torch.equal(ri.rms_norm(x, w, 1e-6, convention="reference"), core)
    assert torch.equal(cv.rms_norm(x, w, 1e-6, convention="reference"), core)
    # the reference module delegates every convention to the conventions module, bit for bit
    for c in RMS:
        assert torch.equal(ri.rms_norm(x, w, 1e-6, convention=c), cv.rms_norm(x, w, 1e-6, convention=c))
    out = ri.rms_norm(x, w, 1e-6, eps_placement="outside")
    assert torch.equal(out, cv.rms_norm(x, w, 1e-6, convention="reference", eps_placement="outside"))


@pytest.mark.guards("conventions.casting_order", "C40")
def test_llama_and_core_differ_only_by_the_cast_before_the_gain():
    """In bf16 the cast-then-multiply order of Llama rounds twice; the core rounds once. Both are within
    their bounds, yet they are not the same bits: a kernel must pick the family's order to match it."""
    x, w, _ = _data((64, 4096), torch.bfloat16, 13)
    a = cv.rms_norm(x, w, 1e-6, convention="llama")
    b = cv.rms_norm(x, w, 1e-6, convention="reference")
    differ = (a != b).float().mean().item()
    assert 0.0 < differ < 0.5
    # every difference is at most one unit in the last place of bf16 at that magnitude (two roundings vs one)
    ulp = torch.finfo(torch.bfloat16).eps * b.float().abs().clamp(min=torch.finfo(torch.bfloat16).tiny)
    assert ((a.float() - b.float()).abs() <= ulp * 1.0001).all()


@pytest.mark.guards("snippet:tolerances.policy_rms_forward", "snippet:conventions.policy_conventions")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_convention_bound_reduces_to_the_core_policy(dtype):
    """For the core's own order the conventions' bound is the core bound (float64 charges the oracle twice)."""
    x, w, _ = _data((3, 257), dtype, 18)
    ours = tol.convention_forward_bound(x, w, 1e-6, "reference")
    core = tol.rms_forward_bound(x, w, 1e-6, dtype)
    if dtype == torch.float64:
        assert (ours >= core).all() and (ours <= 2 * core).all()
    else:
        np.testing.assert_allclose(ours, core, rtol=1e-15, atol=0)
    # the llama order's bound is wider by exactly one rounding in the half dtype (relative u |y|, or absolute
    # half a subnormal spacing times |w| where the normalized value lands in the subnormal range)
    if dtype in (torch.float16, torch.bfloat16):
        extra = tol.convention_forward_bound(x, w, 1e-6, "llama") - ours
        y = np.abs(oracle.rms_norm_forward_placed(_f64(x), _f64(w), 1e-6))
        u = tol.unit_roundoff(dtype)
        np.testing.assert_allclose(extra, u * y + float(torch.finfo(dtype).tiny) * u * np.abs(_f64(w)), rtol=1e-12, atol=1e-300)


@pytest.mark.guards("conventions.layernorm", "snippet:conventions.ln_conventions", "snippet:tolerances.policy_ln_forward")
@pytest.mark.parametrize("convention", cv.LN_CONVENTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_layernorm_conventions_match_oracle(shape, dtype, convention):
    x, w, dy = _data(shape, dtype, 19)
    x = x + 3.0 if dtype != torch.float16 else x  # an offset: the centring must work
    b = (0.3 * w.double()).to(dtype)
    y = cv.layer_norm(x, w, b, 1e-5, convention=convention)
    assert y.dtype == dtype
    expected = oracle.layer_norm_forward(_f64(x), _f64(w), _f64(b), 1e-5)
    # cohere computes in float32 even for float64 input: charge float32 (and the rounding of x to it)
    compute = torch.float32 if (convention == "cohere" and dtype == torch.float64) else None
    bound = tol.ln_forward_bound(x, w, b, 1e-5, dtype, compute=compute)
    if compute is not None:  # x rounded to float32 first: u32 |x_i| on x_i, u32 mean|x| on the mean, times |w| r
        xd = _f64(x)
        r = 1 / np.sqrt(np.var(xd, -1, keepdims=True) + 1e-5)
        bound = bound + tol.unit_roundoff(torch.float32) * np.abs(_f64(w)) * r * (np.abs(xd) + np.mean(np.abs(xd), -1, keepdims=True))
    tol.assert_within(y, expected, bound, f"{convention} layer_norm")
    xg, wg, bg = (t.clone().requires_grad_(True) for t in (x, w, b))
    cv.layer_norm(xg, wg, bg, 1e-5, convention=convention).backward(dy)
    edx, edw, edb = oracle.layer_norm_backward(_f64(dy), _f64(x), _f64(w), _f64(b), 1e-5)
    bdx, bdw, bdb = tol.ln_backward_bounds(dy, x, w, b, 1e-5, dtype)
    tol.assert_within(xg.grad, edx, bdx, "ln dx")
    tol.assert_within(wg.grad, edw, bdw, "ln dweight")
    tol.assert_within(bg.grad, edb, bdb, "ln dbias")


# ------------------------------------------------------------------------------------------ backward

@pytest.mark.guards("conventions.backward")
@pytest.mark.parametrize("placement", cv.EPS_PLACEMENTS)
@pytest.mark.parametrize("convention", RMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1,), (3, 1), (4, 33), (2, 3, 127), (3, 1000)], ids=str)
def test_convention_backward_matches_oracle(shape, dtype, convention, placement):
    x, w, dy = _data(shape, dtype, 14, convention)
    dx, dw = cv.rms_norm_backward(dy, x, w, 1e-6, convention=convention, eps_placement=placement)
    assert dx.dtype == dtype and dw.dtype == dtype
    edx, edw = oracle.rms_norm_backward_placed(_f64(dy), _f64(x), _f64(cv.effective_gain(w, convention)), 1e-6, placement)
    bdx, bdw = tol.convention_backward_bounds(dy, x, w, 1e-6, convention, placement)
    tol.assert_within(dx, edx, bdx, f"{convention} dx")
    tol.assert_within(dw, edw, bdw, f"{convention} dweight")


@pytest.mark.guards("conventions.backward")
@pytest.mark.parametrize("convention", RMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_autograd_equals_explicit_backward(convention, dtype):
    x, w, dy = _data((3, 5, 37), dtype, 15, convention)
    x.requires_grad_(True)
    w.requires_grad_(True)
    y = cv.rms_norm(x, w, 1e-6, convention=convention)
    y.backward(dy.to(y.dtype))
    dx, dw = cv.rms_norm_backward(dy.to(y.dtype), x.detach(), w.detach(), 1e-6, convention=convention)
    assert torch.equal(x.grad, dx) and torch.equal(w.grad, dw)


@pytest.mark.guards("conventions.backward")
@pytest.mark.parametrize("placement", cv.EPS_PLACEMENTS)
def test_gradcheck_float64(placement):
    g = torch.Generator().manual_seed(16)
    x = torch.randn(3, 9, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(9, dtype=torch.float64, generator=g, requires_grad=True)
    for c in ("reference", "torch"):
        assert torch.autograd.gradcheck(lambda a, b: cv.rms_norm(a, b, 1e-3, convention=c, eps_placement=placement), (x, w))
    assert torch.autograd.gradcheck(lambda a, b: cv.layer_norm(a, b, None, 1e-3, convention="neox"), (x, w))


# ------------------------------------------------------------------------------------------ torch eps=None

@pytest.mark.guards("conventions.torch_eps_none")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_torch_eps_none_is_the_compute_dtype_epsilon(dtype):
    """torch 2.14.1: eps=None means finfo(float32).eps for half input (the opmath type), not finfo(x.dtype)."""
    g = torch.Generator().manual_seed(17)
    x = (torch.randn(4, 64, generator=g) * 1e-3).to(dtype)  # small RMS: eps matters
    w = torch.ones(64, dtype=dtype)
    ours = cv.rms_norm(x, w, None, convention="torch")
    theirs = nn.RMSNorm(64, eps=None, dtype=dtype)(x)
    assert torch.equal(ours, theirs)
    cd = torch.float64 if dtype == torch.float64 else torch.float32
    assert torch.equal(theirs, torch.nn.functional.rms_norm(x, (64,), w, torch.finfo(cd).eps))
    if dtype in (torch.float16, torch.bfloat16):
        assert not torch.equal(theirs, torch.nn.functional.rms_norm(x, (64,), w, torch.finfo(dtype).eps))


@pytest.mark.guards("conventions.errors")
def test_eps_none_only_for_torch():
    x = torch.randn(2, 8)
    with pytest.raises(TypeError, match="eps=None"):
        cv.rms_norm(x, None, None, convention="llama")


# ------------------------------------------------------------------------------------------ bad input

_x = torch.randn(3, 8)
BAD = [
    (lambda: cv.rms_norm([1.0, 2.0]), TypeError, "torch.Tensor"),
    (lambda: cv.rms_norm(torch.ones(3, 8, dtype=torch.int32)), TypeError, "integer"),
    (lambda: cv.rms_norm(torch.ones(3, 8, dtype=torch.complex64)), TypeError, "complex"),
    (lambda: cv.rms_norm(torch.tensor(1.0)), ValueError, "0-d"),
    (lambda: cv.rms_norm(_x, torch.ones(7)), ValueError, "shape"),
    (lambda: cv.rms_norm(_x, None, -1.0), ValueError, "non-negative"),
    (lambda: cv.rms_norm(_x, None, float("nan")), ValueError, "finite"),
    (lambda: cv.rms_norm(_x, None, "1e-6"), TypeError, "real number"),
    (lambda: cv.rms_norm(_x, convention="mistral"), ValueError, "unknown RMSNorm convention"),
    (lambda: cv.rms_norm(_x, convention="neox"), ValueError, "LayerNorm convention"),
    (lambda: cv.rms_norm(_x, convention=3), TypeError, "string"),
    (lambda: cv.rms_norm(_x, eps_placement="middle"), ValueError, "eps_placement"),
    (lambda: ri.rms_norm(_x, convention="gpt2"), ValueError, "unknown RMSNorm convention"),
    (lambda: cv.layer_norm(_x, convention="llama"), ValueError, "RMSNorm convention"),
    (lambda: cv.layer_norm(_x, torch.ones(8, dtype=torch.float64)), TypeError, "x's dtype"),
    (lambda: cv.rms_norm_backward(torch.ones(3, 7), _x), ValueError, "shape"),
    (lambda: va.partial_rms_norm(_x, p=0.01), ValueError, "at least one"),
    (lambda: va.partial_rms_norm(_x, p=1.5), ValueError, r"\(0, 1\]"),
    (lambda: va.partial_rms_norm(_x, p="half"), TypeError, "real number"),
    (lambda: va.grouped_rms_norm(_x, groups=3), ValueError, "divisible"),
    (lambda: va.grouped_rms_norm(_x, groups=0), ValueError, ">= 1"),
    (lambda: va.grouped_rms_norm(_x, groups=2.0), TypeError, "int"),
    (lambda: va.grouped_rms_norm(_x, groups=2, gate=torch.ones(3, 4)), ValueError, "gate has shape"),
    (lambda: va.fused_add_rms_norm(_x, torch.ones(3, 4)), ValueError, "residual has shape"),
    (lambda: va.fused_add_rms_norm(_x, torch.ones(3, 8, dtype=torch.int64)), TypeError, "integer"),
    (lambda: va.qk_norm(_x, _x, None, None, 3), ValueError, "multiple of head_dim"),
    (lambda: va.qk_norm(_x, _x, None, None, 4, placement="after"), ValueError, "placement"),
    (lambda: va.scale_norm(_x, torch.ones(2)), ValueError, "one value"),
    (lambda: va.scale_norm(_x, 1.0), TypeError, "torch.Tensor"),
    (lambda: va.scale_norm(_x, torch.ones(1), eps=-1), ValueError, "non-negative"),
]


@pytest.mark.guards("conventions.errors")
@pytest.mark.parametrize("call,exc,words", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_input_raises_clear_error(call, exc, words):
    with pytest.raises(exc, match=words):
        call()


# ------------------------------------------------------------------------------------------ variants

def _env_bound(dx_exact, env, d, dtype, compute):
    """u_o |dx| + (gamma(d+10, u_c) + gamma(d+10, u_64)) * env + floor: the core's dx analysis."""
    u_o = tol.unit_roundoff(dtype)
    gd = tol.gamma(d + 10, tol.unit_roundoff(compute)) + tol.gamma(d + 10, tol.unit_roundoff(torch.float64))
    return u_o * np.abs(dx_exact) + gd * env + float(torch.finfo(dtype).tiny) * u_o


def _prms_f64(x, w, k, eps, placement):
    ms = np.mean(x[..., :k] ** 2, -1, keepdims=True)
    r = 1 / np.sqrt(ms + eps) if placement == "inside" else 1 / (np.sqrt(ms) + eps)
    return x * r * w, r


@pytest.mark.guards("variants.prms", "snippet:variants.prms_forward")
@pytest.mark.parametrize("placement", cv.EPS_PLACEMENTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape,p", [((4, 33), 0.25), ((2, 3, 127), 0.0625), ((3, 1000), 0.5), ((2, 16), 1.0)], ids=str)
def test_partial_rms_norm_forward_backward(shape, p, dtype, placement):
    x, w, dy = _data(shape, dtype, 21)
    d = shape[-1]
    k = int(d * p)
    xr, wr, dyr = (t.detach().double().clone().requires_grad_(True) for t in (x, w, dy))
    y64, r = _prms_f64(_f64(x), _f64(w), k, 1e-8, placement)
    y = va.partial_rms_norm(x, w, p, 1e-8, eps_placement=placement)
    u = tol.unit_roundoff
    cdt = torch.float64 if dtype == torch.float64 else torch.float32
    rel = u(dtype) + tol.gamma(k // 2 + 6, u(cdt)) + tol.gamma(k // 2 + 6, u(torch.float64))
    tol.assert_within(y, y64, rel * np.abs(y64) + float(torch.finfo(dtype).tiny) * u(dtype), "prms forward")
    # backward vs float64 autograd of the plain formula
    ms = (xr[..., :k] ** 2).mean(-1, keepdim=True)
    rr = torch.rsqrt(ms + 1e-8) if placement == "inside" else 1 / (ms.sqrt() + 1e-8)
    (xr * rr * wr * dyr).sum().backward()
    x2, w2 = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    va.partial_rms_norm(x2, w2, p, 1e-8, eps_placement=placement).backward(dy)
    g = _f64(dy) * _f64(w)
    xhat = _f64(x) * r
    env = r * (np.abs(g) + np.abs(xhat) * np.abs(g * xhat).sum(-1, keepdims=True) / k * (d / k))
    tol.assert_within(x2.grad, xr.grad.numpy(), _env_bound(xr.grad.numpy(), env, d, dtype, cdt), "prms dx")
    n = math.prod(shape[:-1])
    s = np.abs(_f64(dy) * xhat).reshape(n, d).sum(0)
    bdw = u(dtype) * np.abs(wr.grad.numpy()) + (tol.gamma(n + k // 2 + 8, u(cdt)) + tol.gamma(n + k, u(torch.float64))) * s
    tol.assert_within(w2.grad, wr.grad.numpy(), bdw + float(torch.finfo(dtype).tiny), "prms dweight")


@pytest.mark.guards("variants.prms")
def test_partial_with_p_one_is_plain_rmsnorm():
    x, w, _ = _data((3, 40), torch.float32, 22)
    assert torch.equal(va.partial_rms_norm(x, w, 1.0, 1e-6), ri.rms_norm(x, w, 1e-6))


@pytest.mark.guards("variants.grouped", "snippet:variants.grouped_forward")
@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_grouped_rms_norm_forward_backward(dtype, gated):
    shape, groups = (2, 3, 96), 8
    x, w, dy = _data(shape, dtype, 23)
    z = _data(shape, dtype, 24)[0] if gated else None
    y = va.grouped_rms_norm(x, w, groups, 1e-6, gate=z)
    # forward = llama-convention RMSNorm of each group of 12 features (after the gate)
    a = x.float() if z is None else x.float() * torch.nn.functional.silu(z.float())
    per_group = torch.cat([cv.rms_norm(a[..., i * 12:(i + 1) * 12].to(dtype) if z is None else a[..., i * 12:(i + 1) * 12],
                                       None, 1e-6, convention="llama").to(dtype) for i in range(groups)], -1)
    if z is None:
        assert torch.equal(y, w * per_group)
    # backward vs float64 autograd
    xr, wr = x.detach().double().clone().requires_grad_(True), w.detach().double().clone().requires_grad_(True)
    zr = None if z is None else z.detach().double().clone().requires_grad_(True)
    ar = xr if zr is None else xr * torch.nn.functional.silu(zr)
    ag = ar.view(2, 3, groups, 12)
    yr = (ag * torch.rsqrt(ag.pow(2).mean(-1, keepdim=True) + 1e-6)).view(shape) * wr
    yr.backward(dy.double())
    x2, w2 = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    z2 = None if z is None else z.clone().requires_grad_(True)
    va.grouped_rms_norm(x2, w2, groups, 1e-6, gate=z2).backward(dy)
    # bound: the group RMSNorm's dx analysis (d = 12), times |silu'| / |silu| factors for the gate chain
    ad = _f64(ar).reshape(2, 3, groups, 12)
    r = 1 / np.sqrt((ad ** 2).mean(-1, keepdims=True) + 1e-6)
    ahat = ad * r
    gg = (_f64(dy) * _f64(w)).reshape(2, 3, groups, 12)
    env = (r * (np.abs(gg) + np.abs(ahat) * np.abs(gg * ahat).mean(-1, keepdims=True))).reshape(shape)
    u32 = tol.unit_roundoff(torch.float32)
    extra = 3 * u32 * env if dtype == torch.float64 else 0.0  # x rounded to float32 first
    if z is None:
        tol.assert_within(x2.grad, xr.grad.numpy(), _env_bound(xr.grad.numpy(), env, 12, dtype, torch.float32) + extra, "grouped dx")
    else:
        zd = _f64(z)
        s = 1 / (1 + np.exp(-zd))
        silu, dsilu = zd * s, s * (1 + zd * (1 - s))
        # silu(z) in float32 adds a few roundings (exp, division, product): charge 8 u32 relative on the gate
        env_g = env + 8 * u32 * env
        bx = _env_bound(xr.grad.numpy(), env_g * np.abs(silu), 12, dtype, torch.float32) + extra * np.abs(silu)
        tol.assert_within(x2.grad, xr.grad.numpy(), bx, "gated dx")
        # silu'(z) = s (1 + z (1 - s)) cancels near z = -1.28: charge its absolute error, 8 u32 s (1 + 2|z|)
        da = (r * (gg - ahat * (gg * ahat).mean(-1, keepdims=True))).reshape(shape)
        dsilu_err = 8 * u32 * s * (1 + 2 * np.abs(zd))
        bz = (_env_bound(zr.grad.numpy(), env_g * np.abs(_f64(x) * dsilu), 12, dtype, torch.float32)
              + extra * np.abs(_f64(x) * dsilu) + np.abs(da * _f64(x)) * dsilu_err)
        tol.assert_within(z2.grad, zr.grad.numpy(), bz, "gated dgate")
    n = 6
    sw = np.abs(_f64(dy) * ahat.reshape(shape)).reshape(n, 96).sum(0)
    bdw = tol.unit_roundoff(dtype) * np.abs(wr.grad.numpy()) + (tol.gamma(n + 16, u32) + (8 * u32 if z is not None else 0)) * sw
    tol.assert_within(w2.grad, wr.grad.numpy(), bdw + float(torch.finfo(dtype).tiny), "grouped dweight")


@pytest.mark.guards("variants.fused_add", "snippet:variants.fused_add")
@pytest.mark.parametrize("convention", RMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_add_equals_unfused_pair_and_backward(dtype, convention):
    x, w, dy = _data((3, 5, 67), dtype, 25, convention)
    res = _data((3, 5, 67), dtype, 26)[0]
    y, s = va.fused_add_rms_norm(x, res, w, 1e-6, convention=convention)
    s_ref = res + x
    assert torch.equal(s, s_ref)
    assert torch.equal(y, cv.rms_norm(s_ref, w, 1e-6, convention=convention))
    # backward: the gradient reaching the sum is the norm's dx plus the residual path's gradient
    x2, r2, w2 = (t.clone().requires_grad_(True) for t in (x, res, w))
    y2, s2 = va.fused_add_rms_norm(x2, r2, w2, 1e-6, convention=convention)
    ds = _data((3, 5, 67), dtype, 27)[0]
    torch.autograd.backward([y2, s2], [dy.to(y2.dtype), ds])
    dsum, dw = cv.rms_norm_backward(dy.to(y2.dtype), s_ref, w, 1e-6, convention=convention)
    expected = (dsum.to(torch.promote_types(dsum.dtype, torch.float32)) + ds.to(torch.promote_types(dsum.dtype, torch.float32))).to(dtype)
    assert torch.equal(x2.grad, expected) and torch.equal(r2.grad, expected) and torch.equal(w2.grad, dw)


@pytest.mark.guards("variants.qk_norm", "snippet:variants.qk_norm")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_qk_norm_placements(dtype):
    g = torch.Generator().manual_seed(28)
    hd, hq, hk = 16, 4, 2
    q = (torch.randn(2, 5, hq * hd, generator=g) * 3).to(dtype)
    k = (torch.randn(2, 5, hk * hd, generator=g) * 3).to(dtype)
    wq, wk = (1 + 0.3 * torch.randn(hd, generator=g)).to(dtype), (1 + 0.3 * torch.randn(hd, generator=g)).to(dtype)
    qn, kn = va.qk_norm(q, k, wq, wk, hd, placement="per_head")
    # per head: every head's slice is normalized on its own
    for h in range(hq):
        sl = slice(h * hd, (h + 1) * hd)
        assert torch.equal(qn[..., sl], cv.rms_norm(q[..., sl], wq, 1e-6, convention="llama"))
    wqf, wkf = wq.repeat(hq), wk.repeat(hk)
    qf, kf = va.qk_norm(q, k, wqf, wkf, hd, placement="full")
    assert torch.equal(qf, cv.rms_norm(q, wqf, 1e-6, convention="llama"))
    # the two placements differ: per-head RMS equalizes the heads' scales, the full one does not
    per_head_rms = qn.float().view(2, 5, hq, hd).div(wq.float()).pow(2).mean(-1).sqrt()
    assert torch.allclose(per_head_rms, torch.ones_like(per_head_rms), atol=4 * tol.unit_roundoff(dtype) * 4)
    assert not torch.equal(qn, qf)
    # backward flows through the explicit RMSNorm backward of each head
    q2 = q.clone().requires_grad_(True)
    va.qk_norm(q2, k, wq, wk, hd)[0].sum().backward()
    dx, _ = cv.rms_norm_backward(torch.ones(2, 5, hq, hd, dtype=dtype), q.view(2, 5, hq, hd), wq, 1e-6, convention="llama")
    assert torch.equal(q2.grad, dx.reshape(q.shape))


@pytest.mark.guards("variants.scale_norm", "snippet:variants.scale_norm")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_scale_norm_forward_backward(dtype):
    x, _, dy = _data((4, 5, 65), dtype, 29)
    x[0, 0] = 0  # a zero row: the clamp at eps is active there (eps 1e-2 keeps g/eps within float16)
    g = torch.tensor([math.sqrt(65)], dtype=dtype)
    eps = 1e-2
    y = va.scale_norm(x, g, eps)
    xd = _f64(x)
    n = np.linalg.norm(xd, axis=-1, keepdims=True)
    nc = np.maximum(n, eps)
    y64 = _f64(g)[0] * xd / nc
    cdt = torch.float64 if dtype == torch.float64 else torch.float32
    u = tol.unit_roundoff
    rel = u(dtype) + tol.gamma(65 // 2 + 6, u(cdt)) + tol.gamma(40, u(torch.float64))
    tol.assert_within(y, y64, rel * np.abs(y64) + float(torch.finfo(dtype).tiny) * u(dtype), "scalenorm forward")
    xr, gr = x.detach().double().clone().requires_grad_(True), g.detach().double().clone().requires_grad_(True)
    (gr * xr / torch.linalg.vector_norm(xr, dim=-1, keepdim=True).clamp(min=eps) * dy.double()).sum().backward()
    x2, g2 = x.clone().requires_grad_(True), g.clone().requires_grad_(True)
    va.scale_norm(x2, g2, eps).backward(dy)
    uu = xd / nc
    env = _f64(g)[0] / nc * (np.abs(_f64(dy)) + np.abs(uu) * np.abs(_f64(dy) * uu).sum(-1, keepdims=True))
    tol.assert_within(x2.grad, xr.grad.numpy(), _env_bound(xr.grad.numpy(), env, 65, dtype, cdt), "scalenorm dx")
    sg = np.abs(_f64(dy) * uu).sum()
    bg = u(dtype) * abs(gr.grad.item()) + (tol.gamma(x.numel() + 40, u(cdt)) + tol.gamma(x.numel() + 40, u(torch.float64))) * sg
    tol.assert_within(g2.grad, gr.grad.numpy(), bg, "scalenorm dg")
    # ScaleNorm is invariant to rescaling its input (away from the clamp)
    assert torch.allclose(va.scale_norm(x[1:].double() * 7.0, g.double()), va.scale_norm(x[1:].double(), g.double()), rtol=1e-13, atol=0)


# ------------------------------------------------------------------------------------------ claims

class _ArticleGroupRMSNorm(nn.Module):
    """C32: the source article's grouped module, reconstructed from its description to test the claim:
    its __init__ never calls nn.Module.__init__, forward unpacks x.shape into exactly (batch, dim), views
    it as (batch, groups, -1), uses eps 1e-6 inside the root in x's own dtype, and multiplies by a (dim,)
    gain."""

    def __init__(self, dim, groups=8, call_super=False):
        if call_super:
            super().__init__()
        self.groups = groups
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        b, d = x.shape
        xg = x.view(b, self.groups, -1)
        return (xg * torch.rsqrt(xg.pow(2).mean(-1, keepdim=True) + 1e-6)).view(b, d) * self.weight


@pytest.mark.guards("C32", "variants.grouped")
def test_article_group_rmsnorm_fails_as_written():
    # 1. construction fails: a Parameter cannot be assigned before nn.Module.__init__ ran
    with pytest.raises(AttributeError, match="before Module.__init__"):
        _ArticleGroupRMSNorm(64)
    m = _ArticleGroupRMSNorm(64, call_super=True)  # with the missing call added ...
    x = torch.randn(3, 64)
    # ... it computes grouped RMSNorm for a 2-D float32 input (groups of 8 features, as Mamba-2's layout)
    assert torch.allclose(m(x), va.grouped_rms_norm(x, m.weight.detach(), 8, 1e-6), rtol=4e-7, atol=0)
    # 2. the (batch, sequence, dim) activations of a transformer cannot be unpacked into (b, d)
    with pytest.raises(ValueError, match="too many values to unpack"):
        m(torch.randn(2, 5, 64))
    # 3. a width not divisible by the group count fails in view
    with pytest.raises(RuntimeError):
        _ArticleGroupRMSNorm(60, call_super=True)(torch.randn(3, 60))
    # 4. no float32 statistics: in float16 the squares overflow above 256 and the output collapses to 0
    xh = torch.full((1, 64), 300.0, dtype=torch.float16)
    mh = _ArticleGroupRMSNorm(64, call_super=True).half()
    assert (mh(xh) == 0).all()
    assert torch.allclose(va.grouped_rms_norm(xh, None, 8).float(), torch.ones(1, 64))


@pytest.mark.guards("C17", "numerics.fp16_overflow")
def test_fp16_statistics_overflow_and_underflow_fp32_statistics_do_not():
    big = torch.full((1, 128), 300.0, dtype=torch.float16)  # 300**2 = 90000 > 65504
    assert torch.isinf(big.pow(2)).all()
    naive = big * torch.rsqrt(big.pow(2).mean(-1, keepdim=True) + 1e-6)  # statistics in float16
    assert (naive == 0).all()
    for c in RMS:
        assert torch.equal(cv.rms_norm(big, None, 1e-6, convention=c).float(), torch.ones(1, 128))
    small = torch.full((1, 128), 2.0 ** -13, dtype=torch.float16)  # squares 2**-26 underflow to 0 in fp16
    assert (small.pow(2) == 0).all()
    naive_small = small * torch.rsqrt(small.pow(2).mean(-1, keepdim=True) + 0.0)
    assert torch.isinf(naive_small).all()  # x * rsqrt(0) = x * inf
    assert torch.equal(cv.rms_norm(small, None, 0.0, convention="llama").float(), torch.ones(1, 128))
    # bfloat16 has float32's exponent range: no overflow at 300, only a coarse (8-bit) accumulation
    assert torch.isfinite(big.bfloat16().pow(2)).all()


@pytest.mark.guards("C18")
def test_gain_dtype_changes_the_llama_output_dtype():
    """An fp32 gain with bf16 activations in Llama's order returns fp32 (type promotion), Gemma's bf16."""
    x, w, _ = _data((2, 64), torch.bfloat16, 31)
    assert cv.rms_norm(x, w.float(), 1e-6, convention="llama").dtype == torch.float32
    assert cv.rms_norm(x, w.float(), 1e-6, convention="gemma").dtype == torch.bfloat16
    assert cv.rms_norm(x, w.float(), 1e-6, convention="t5").dtype == torch.float32
    # the value of the product does not need the fp32 gain: bf16(w) * h and w * h differ by < one bf16 ulp
    a = cv.rms_norm(x, w, 1e-6, convention="llama").float()
    b = cv.rms_norm(x, w.bfloat16().float(), 1e-6, convention="llama").bfloat16().float()
    assert torch.equal(a, b)


@pytest.mark.guards("C21", "numerics.eps_placement")
def test_eps_outside_differs_from_inside_for_small_rms():
    g = torch.Generator().manual_seed(32)
    base = torch.randn(1, 256, dtype=torch.float64, generator=g)
    base = base / base.pow(2).mean().sqrt()
    for rms, eps in [(1.0, 1e-6), (1e-3, 1e-6), (1e-6, 1e-6)]:
        x = base * rms
        inside = cv.rms_norm(x, None, eps, convention="reference")
        outside = cv.rms_norm(x, None, eps, convention="reference", eps_placement="outside")
        gap = (inside - outside).abs().max().item() / inside.abs().max().item()
        # exact relative gap of the scales: sqrt(r^2+eps)/(r+eps) - 1
        exact = abs(math.sqrt(rms ** 2 + eps) / (rms + eps) - 1)
        assert gap == pytest.approx(exact, rel=1e-6, abs=1e-15)
    # at rms = eps the two differ by a factor sqrt(1+1/eps)*eps/(2eps) ~ 500: not a rounding question
    x = base * 1e-6
    ratio = (cv.rms_norm(x, None, 1e-6, convention="reference", eps_placement="outside") /
             cv.rms_norm(x, None, 1e-6, convention="reference")).mean().item()
    assert ratio == pytest.approx(math.sqrt(1e-12 + 1e-6) / 2e-6, rel=1e-9)


@pytest.mark.guards("C22")
def test_zero_gain_zeroes_outputs_and_dx_but_not_the_gain_gradient():
    x, _, dy = _data((4, 32), torch.float32, 33)
    w = torch.zeros(32, requires_grad=True)
    x = x.clone().requires_grad_(True)
    y = cv.rms_norm(x, w, 1e-6, convention="llama")
    assert (y == 0).all()
    y.backward(dy)
    assert (x.grad == 0).all()
    assert (w.grad != 0).all()  # dL/dw = sum dy * xhat: the gain can grow back
    # Gemma stores w = 0 at initialisation and applies 1 + w: a zero-initialised Gemma gain is the identity
    assert torch.equal(cv.rms_norm(x.detach(), torch.zeros(32), 1e-6, convention="gemma"),
                       cv.rms_norm(x.detach(), None, 1e-6, convention="gemma"))


@pytest.mark.guards("C07")
def test_rmsnorm_is_scale_invariant_not_shift_invariant():
    x = torch.randn(3, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(34))
    y = cv.rms_norm(x, None, 0.0, convention="reference")
    assert torch.allclose(cv.rms_norm(x * 5.0, None, 0.0, convention="reference"), y, rtol=1e-14, atol=0)
    assert not torch.allclose(cv.rms_norm(x + 3.0, None, 0.0, convention="reference"), y, atol=1e-3)
    ln = ri.layer_norm(x, None, None, 0.0)
    assert torch.allclose(ri.layer_norm(x + 3.0, None, None, 0.0), ln, rtol=0, atol=1e-12)
    assert torch.allclose(ri.layer_norm(x * 5.0, None, None, 0.0), ln, rtol=0, atol=1e-12)


@pytest.mark.guards("C01")
def test_batchnorm_uses_batch_statistics():
    g = torch.Generator().manual_seed(35)
    x = torch.randn(8, 6, dtype=torch.float64, generator=g)
    bn = nn.BatchNorm1d(6, affine=False, dtype=torch.float64).train()
    y = bn(x)
    expected = (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + bn.eps)
    assert torch.allclose(y, expected, rtol=1e-12, atol=1e-12)
    # one sample's output changes when the rest of the batch changes
    x2 = x.clone()
    x2[1:] *= 3
    assert not torch.allclose(bn(x2)[0], y[0])


@pytest.mark.guards("C02")
def test_layernorm_is_per_sample_independent_of_batch_and_length():
    g = torch.Generator().manual_seed(36)
    x = torch.randn(4, 9, 32, generator=g)
    w, b = torch.randn(32, generator=g), torch.randn(32, generator=g)
    full = cv.layer_norm(x, w, b, 1e-5, convention="neox")
    assert torch.equal(cv.layer_norm(x[2:3, 4:7], w, b, 1e-5, convention="neox"), full[2:3, 4:7])
    # a LayerNorm row depends on that row only: changing other rows leaves it as it was
    x2 = x.clone()
    x2[0] = 100.0
    assert torch.equal(cv.layer_norm(x2, w, b, 1e-5, convention="neox")[1:], full[1:])


@pytest.mark.guards("conventions.forward", "conventions.backward")
@pytest.mark.parametrize("convention", RMS)
@pytest.mark.parametrize("shape", [(0, 8), (2, 0, 8)], ids=str)
def test_empty_inputs_give_empty_results(shape, convention):
    x = torch.zeros(shape, requires_grad=True)
    w = torch.ones(shape[-1], requires_grad=True)
    y = cv.rms_norm(x, w, 1e-6, convention=convention)
    assert y.shape == x.shape and y.numel() == 0
    y.sum().backward()
    assert x.grad.shape == x.shape and w.grad.shape == (shape[-1],) and torch.all(w.grad == 0)


@pytest.mark.parametrize("convention", RMS)
def test_empty_last_dimension_is_a_value_error(convention):
    """A row of no features has no RMS: d = 0 is refused with a message, not normalized to NaN or empty."""
    with pytest.raises(ValueError, match="empty last dimension"):
        cv.rms_norm(torch.zeros(3, 0), torch.ones(0), 1e-6, convention=convention)
