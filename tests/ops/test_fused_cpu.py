"""The fused CPU ops (library ``normlab``, ``cuda/cpu/``): numerics against the float64 oracle and the
PyTorch reference within the derived bounds, the custom-op machinery (opcheck, torch.compile), determinism,
batch invariance, every instruction-set path, and the errors for bad input.

Bounds come from :mod:`reference_impl.conventions` (``forward_bound`` / ``backward_bounds``: the core
policy of :mod:`reference_impl.tolerances` plus the extra roundings of each convention) and from
:mod:`reference_impl.tolerances` for LayerNorm. Budget: well under 4 minutes with the native build.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import reference_impl as ri
from reference_impl import conventions as conv
from reference_impl import oracle
from reference_impl.ops import library as fused
from reference_impl import tolerances as tol
from reference_impl.ops.build import NativeBuildError, load_cpu_library

REPO = Path(__file__).resolve().parents[2]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# hidden sizes 1..16384, odd ones and vector-width remainders included; 1-D to 4-D
SHAPES = [(1,), (7,), (3, 1), (4, 33), (2, 3, 127), (2, 2, 3, 256), (5, 1000), (2, 4097), (2, 16383), (1, 16384)]
ISAS = ["scalar", "avx2", "avx512", "avx512bf16"]


@pytest.fixture(scope="module", autouse=True)
def _native():
    fused.load()


def _data(shape, dtype, seed, w_dtype=None):
    g = torch.Generator().manual_seed(seed)
    d = shape[-1]
    x = (torch.randn(shape, generator=g, dtype=torch.float64) * 2).to(dtype)
    w = (1 + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)).to(w_dtype or dtype)
    b = (0.3 * torch.randn(d, generator=g, dtype=torch.float64)).to(w_dtype or dtype)
    dy = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    r = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    return x, w, b, dy, r


def _gain(w, convention):
    return None if w is None else conv.effective_gain(w, convention).double().numpy()


def _check_rms(x, w, dy, convention, eps=1e-6, what=""):
    """Forward and backward of fused_rms_norm against the oracle, within the convention's bounds."""
    xr = x.detach().clone().requires_grad_(True)
    wr = None if w is None else w.detach().clone().requires_grad_(True)
    y = fused.fused_rms_norm(xr, wr, eps, convention=convention)
    assert y.dtype == x.dtype and y.shape == x.shape
    yo = oracle.rms_norm_forward(x.double().numpy(), _gain(w, convention), eps)
    # weight in x's dtype or float32: the op rounds to x's dtype before the gain (llama) and at the end
    bound = tol.convention_forward_bound(x, w, eps, convention, w_dtype=None if w is None else x.dtype)
    tol.assert_within(y, yo, bound, f"fused rms forward {what}")
    grads = torch.autograd.grad(y, [t for t in (xr, wr) if t is not None], dy)
    edx, edw = oracle.rms_norm_backward(dy.double().numpy(), x.double().numpy(), _gain(w, convention), eps)
    bdx, bdw = tol.convention_backward_bounds(dy, x, w, eps, convention)
    assert grads[0].dtype == x.dtype
    tol.assert_within(grads[0], edx, bdx, f"fused rms dx {what}")
    if w is not None:
        assert grads[1].dtype == w.dtype and grads[1].shape == w.shape
        tol.assert_within(grads[1], edw, bdw, f"fused rms dweight {what}")
    return y, grads


@pytest.mark.guards("rms.forward", "rms.vjp_x", "rms.vjp_weight", "snippet:rms_norm_kernels.rms_fwd",
                    "snippet:rms_norm_kernels.rms_bwd", "snippet:simd.row_helpers", "snippet:simd.vec512",
                    "snippet:autograd.autograd")
@pytest.mark.parametrize("convention", ["llama", "gemma"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_rms_matches_oracle(shape, dtype, convention):
    x, w, _, dy, _ = _data(shape, dtype, 1)
    _check_rms(x, w, dy, convention, what=f"{shape} {dtype} {convention}")
    _check_rms(x, None, dy, convention, what=f"{shape} {dtype} {convention} no weight")


@pytest.mark.guards("rms.forward")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_rms_float32_weight_with_half_input(dtype):
    x, w, _, dy, _ = _data((6, 515), dtype, 2, w_dtype=torch.float32)
    y, (dx, dw) = _check_rms(x, w, dy, "llama", what="fp32 weight")
    assert y.dtype == dtype and dw.dtype == torch.float32


@pytest.mark.guards("fused.param_grad_fp32", "ln.vjp_bias", "ln.vjp_weight", "rms.vjp_weight")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_parameter_gradients_are_exact_in_float32(dtype):
    """70000 rows of 16-bit x with float32 parameters: the gradients are the float32 sums over rows, rounded
    once to the parameter's dtype, never through x's (70000 overflows float16; bfloat16 would lose 2**-9).
    Compared with float64: exactly for sums of integers, within the float32 policy bound otherwise."""
    rows, d = 70000, 8
    x = torch.tensor([1.0, -1.0] * 4, dtype=dtype).repeat(rows, 1)  # eps = 0: xhat = +-1 exactly
    w, b = torch.full((d,), 0.5, requires_grad=True), torch.zeros(d, requires_grad=True)
    fused.fused_layer_norm(x, w, b, eps=0.0).backward(torch.ones(rows, d, dtype=dtype))
    assert b.grad.dtype == torch.float32 and torch.equal(b.grad, torch.full((d,), float(rows)))
    assert torch.equal(w.grad, torch.tensor([1.0, -1.0] * 4) * rows)
    wr = torch.full((d,), 0.5, requires_grad=True)
    fused.fused_rms_norm(x, wr, eps=0.0).backward(torch.ones(rows, d, dtype=dtype))
    assert torch.equal(wr.grad, torch.tensor([1.0, -1.0] * 4) * rows)
    # random data: within the float32 bound of the tolerance policy, far below one x-dtype rounding
    xr, w2, b2, dy, _ = _data((rows, d), dtype, 15, w_dtype=torch.float32)
    w2.requires_grad_(True)
    b2.requires_grad_(True)
    fused.fused_layer_norm(xr, w2, b2).backward(dy)
    _, edw, edb = oracle.layer_norm_backward(dy.double().numpy(), xr.double().numpy(), w2.detach().double().numpy(),
                                             b2.detach().double().numpy(), 1e-5)
    _, bdw, bdb = tol.ln_backward_bounds(dy, xr, w2.detach(), b2.detach(), 1e-5, dtype, torch.float32)
    tol.assert_within(b2.grad, edb, bdb, "dbias in float32")
    tol.assert_within(w2.grad, edw, bdw, "dweight in float32")
    u_x = torch.finfo(dtype).eps / 2
    assert (b2.grad.double() - torch.from_numpy(edb)).abs().max() < u_x * abs(edb).max() / 8


@pytest.mark.guards("rms.forward")
@pytest.mark.parametrize("convention", ["llama", "gemma"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(4, 33), (2, 3, 1031), (3, 4096)], ids=str)
def test_rms_matches_pytorch_reference(shape, dtype, convention):
    """The PyTorch reference of the same convention and the fused op agree within the sum of their bounds."""
    x, w, _, _, _ = _data(shape, dtype, 3)
    y = fused.fused_rms_norm(x, w, 1e-6, convention=convention)
    y_ref = conv.rms_norm(x, w, 1e-6, convention=convention)
    bound = tol.convention_forward_bound(x, w, 1e-6, convention)
    tol.assert_within(y, y_ref.double().numpy(), 2 * bound, f"fused vs conventions.{convention}")
    if dtype == torch.float32 and convention == "llama":
        tol.assert_within(y, ri.rms_norm(x, w, 1e-6).double().numpy(), 2 * bound, "fused vs reference")


@pytest.mark.guards("rms.forward", "rms.vjp_x")
@pytest.mark.parametrize("convention", ["llama", "gemma"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1,), (3, 17), (2, 2, 1025)], ids=str)
def test_rms_with_residual(shape, dtype, convention):
    """h = round_x(x + residual) is returned bit-exactly and normalized; gradients flow to both inputs."""
    x, w, _, dy, r = _data(shape, dtype, 4)
    xr, rr, wr = (t.clone().requires_grad_(True) for t in (x, r, w))
    y, h = fused.fused_rms_norm(xr, wr, 1e-6, residual=rr, convention=convention)
    h_expected = (x.float() + r.float()).to(dtype)
    assert torch.equal(h, h_expected)
    y_plain = fused.fused_rms_norm(h_expected, w, 1e-6, convention=convention)
    assert torch.equal(y, y_plain)
    dh = torch.randn(shape, generator=torch.Generator().manual_seed(5)).to(dtype)
    gx, gr, gw = torch.autograd.grad([y, h], [xr, rr, wr], [dy, dh])
    assert torch.equal(gx, gr)
    h2 = h_expected.clone().requires_grad_(True)
    gx_plain = torch.autograd.grad(fused.fused_rms_norm(h2, w, 1e-6, convention=convention), h2, dy)[0]
    assert torch.equal(gx, gx_plain + dh)
    edx, _ = oracle.rms_norm_backward(dy.double().numpy(), h_expected.double().numpy(), _gain(w, convention), 1e-6)
    bdx, _ = tol.convention_backward_bounds(dy, h_expected, w, 1e-6, convention)
    tol.assert_within(gx_plain, edx, bdx, "residual dx")


@pytest.mark.guards("ln.forward", "ln.vjp_x", "ln.vjp_weight", "ln.vjp_bias", "snippet:layer_norm_kernels.ln_fwd",
                    "snippet:layer_norm_kernels.ln_bwd")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_layer_norm_matches_oracle(shape, dtype):
    x, w, b, dy, _ = _data(shape, dtype, 6)
    x = x + 3  # an offset makes the centring matter
    for ww, bb in ((w, b), (None, None)):
        xr = x.clone().requires_grad_(True)
        params = [t.clone().requires_grad_(True) for t in (ww, bb) if t is not None]
        y = fused.fused_layer_norm(xr, *(params or [None, None]), eps=1e-5)
        wn, bn = (None, None) if ww is None else (ww.double().numpy(), bb.double().numpy())
        tol.assert_within(y, oracle.layer_norm_forward(x.double().numpy(), wn, bn, 1e-5),
                          tol.ln_forward_bound(x, ww, bb, 1e-5, dtype), f"fused ln forward {shape}")
        grads = torch.autograd.grad(y, [xr, *params], dy)
        edx, edw, edb = oracle.layer_norm_backward(dy.double().numpy(), x.double().numpy(), wn, bn, 1e-5)
        bdx, bdw, bdb = tol.ln_backward_bounds(dy, x, ww, bb, 1e-5, dtype)
        tol.assert_within(grads[0], edx, bdx, "fused ln dx")
        if ww is not None:
            tol.assert_within(grads[1], edw, bdw, "fused ln dweight")
            tol.assert_within(grads[2], edb, bdb, "fused ln dbias")
        ref = F.layer_norm(x.float(), (x.shape[-1],), None if ww is None else ww.float(),
                           None if bb is None else bb.float(), 1e-5)
        tol.assert_within(y, ref.double().numpy(), 2 * tol.ln_forward_bound(x, ww, bb, 1e-5, dtype), "vs F.layer_norm")


@pytest.mark.guards("rms.forward", "ln.forward", "snippet:isa.dispatch")
@pytest.mark.parametrize("isa", ISAS)
def test_every_instruction_set_path(isa, monkeypatch):
    """NORMLAB_CPU_ISA selects each compiled path (a request above what the CPU has falls back)."""
    monkeypatch.setenv("NORMLAB_CPU_ISA", isa)
    for dtype in DTYPES:
        for shape in [(3, 1), (5, 37), (2, 1000), (2, 4099)]:
            x, w, b, dy, _ = _data(shape, dtype, 7)
            for convention in ("llama", "gemma"):
                _check_rms(x, w, dy, convention, what=f"{isa}")
            y = fused.fused_layer_norm(x, w, b)
            tol.assert_within(y, oracle.layer_norm_forward(x.double().numpy(), w.double().numpy(), b.double().numpy(), 1e-5),
                              tol.ln_forward_bound(x, w, b, 1e-5, dtype), f"ln {isa}")


@pytest.mark.guards("fused.rounding")
@pytest.mark.parametrize("isa", ISAS)
def test_output_rounding_matches_torch_bit_for_bit(isa, monkeypatch):
    """Vector lanes, row tails and torch's own cast round to bf16/fp16 identically (ties, Inf, overflow,
    denormals). A row of ones with eps=0 has rstd exactly 1, so llama with a float32 weight gives
    y = round_x(1 * w): the op's conversion of w, compared with ``w.to(dtype)``."""
    monkeypatch.setenv("NORMLAB_CPU_ISA", isa)
    special = [1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 1 + 2**-11, 1 + 3 * 2**-11, 2**-130, -(2**-133), 1e-40,
               3e38, 3.4e38, float("inf"), -float("inf"), 0.0, -0.0, 65504.0, 65520.0, 6e-8, 2**-25, 2**-149,
               float("nan")]
    d = 37  # two AVX-512 vectors (four AVX2 vectors) and a tail of five
    g = torch.Generator().manual_seed(14)
    base = torch.randn(d, generator=g) * 100
    for start in range(0, d, 7):  # specials at vector positions and in the tail
        w = base.clone()
        for k, v in enumerate(special):
            w[(start + k) % d] = v
        for dtype in (torch.bfloat16, torch.float16):
            x = torch.ones(3, d, dtype=dtype)
            y = fused.fused_rms_norm(x, w, 0.0)
            expected = w.to(dtype).expand(3, d)
            assert torch.equal(torch.isnan(y), torch.isnan(expected))
            ok = ~torch.isnan(expected)
            assert torch.equal(y[ok].view(torch.int16), expected[ok].view(torch.int16)), (isa, dtype, start)


@pytest.mark.guards("fused.deterministic", "snippet:cpu_common.reduce")
def test_bit_identical_repeats_and_thread_counts():
    x, w, _, dy, _ = _data((1000, 777), torch.bfloat16, 8)
    runs = []
    threads = torch.get_num_threads()
    try:
        for nt in (threads, 1, threads):
            torch.set_num_threads(nt)
            xr, wr = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
            y = fused.fused_rms_norm(xr, wr)
            y.backward(dy)
            ln = fused.fused_layer_norm(xr.detach(), wr.detach(), wr.detach())
            runs.append((y, xr.grad, wr.grad, ln))
    finally:
        torch.set_num_threads(threads)
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            assert torch.equal(a, b)


@pytest.mark.guards("fused.batch_invariant")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_row_results_do_not_depend_on_the_batch(dtype):
    x, w, _, dy, _ = _data((257, 1029), dtype, 9)
    big_x = x.clone().requires_grad_(True)
    fused.fused_rms_norm(big_x, w).backward(dy)
    big_y = fused.fused_rms_norm(x, w)
    big_ln = fused.fused_layer_norm(x, w, w)
    for i in (0, 5, 200, 256):
        xi = x[i : i + 1].clone().requires_grad_(True)
        yi = fused.fused_rms_norm(xi, w)
        yi.backward(dy[i : i + 1])
        assert torch.equal(yi, big_y[i : i + 1])
        assert torch.equal(xi.grad, big_x.grad[i : i + 1])
        assert torch.equal(fused.fused_layer_norm(x[i : i + 1], w, w), big_ln[i : i + 1])


@pytest.mark.guards("rms.forward")
def test_non_contiguous_inputs():
    x, w, b, dy, _ = _data((6, 8, 130), torch.float32, 10)
    xt = x.transpose(0, 1)  # strided view
    assert not xt.is_contiguous()
    assert torch.equal(fused.fused_rms_norm(xt, w), fused.fused_rms_norm(xt.contiguous(), w))
    assert torch.equal(fused.fused_layer_norm(xt, w, b), fused.fused_layer_norm(xt.contiguous(), w, b))
    ws = torch.randn(260)[::2]
    assert torch.equal(fused.fused_rms_norm(x, ws), fused.fused_rms_norm(x, ws.contiguous()))
    xr = xt.clone().requires_grad_(True)
    fused.fused_rms_norm(xr, w).backward(dy.transpose(0, 1))
    xc = xt.contiguous().requires_grad_(True)
    fused.fused_rms_norm(xc, w).backward(dy.transpose(0, 1).contiguous())
    assert torch.equal(xr.grad, xc.grad)


@pytest.mark.guards("rms.forward")
def test_empty_and_non_finite_rows_match_the_reference():
    for fn in (fused.fused_rms_norm, ri.rms_norm, fused.fused_layer_norm, ri.layer_norm):
        with pytest.raises(ValueError, match="empty last dimension"):  # d = 0: nothing to normalize over
            fn(torch.randn(3, 0))
    for shape in [(0, 8), (2, 0, 5)]:
        x = torch.randn(shape)
        w = torch.ones(shape[-1])
        y, ref = fused.fused_rms_norm(x, w), ri.rms_norm(x, w)
        assert y.shape == ref.shape
        assert torch.equal(torch.isnan(y), torch.isnan(ref))
        xr, wr = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
        fused.fused_rms_norm(xr, wr).sum().backward()
        assert xr.grad.shape == x.shape and torch.equal(wr.grad, torch.zeros_like(w))
    x = torch.randn(4, 37)
    x[1, 3], x[2, 5] = float("nan"), float("inf")
    y, ref = fused.fused_rms_norm(x), ri.rms_norm(x)
    assert torch.equal(torch.isnan(y), torch.isnan(ref))  # NaN row all NaN; Inf row: the Inf entry NaN
    assert torch.equal(y[2][~torch.isnan(y[2])], torch.zeros(36))  # rstd = 0 for the Inf row
    tol.assert_within(y[[0, 3]], oracle.rms_norm_forward(x[[0, 3]].double().numpy(), None, 1e-6),
                      tol.rms_forward_bound(x[[0, 3]], None, 1e-6, torch.float32), "finite rows")


# --- the custom-op machinery ---------------------------------------------------------------------------

def _opcheck_cases():
    x, w, b, dy, r = _data((3, 5, 67), torch.float32, 11)
    xb, wb, bb, dyb, rb = _data((4, 130), torch.bfloat16, 12)
    rstd = torch.rand(3, 5) + 0.5
    mean = torch.randn(3, 5)
    rg = lambda t: t.clone().requires_grad_(True)  # noqa: E731
    return [
        ("rms_norm_fwd", (rg(x), rg(w), None, 1e-6, 0)),
        ("rms_norm_fwd", (rg(x), rg(w), rg(r), 1e-6, 1)),
        ("rms_norm_fwd", (rg(x), None, None, 1e-5, 0)),
        ("rms_norm_fwd", (xb, wb.float(), rb, 1e-6, 0)),
        ("rms_norm_bwd", (dy, x, w, rstd, 0)),
        ("rms_norm_bwd", (dy, x, None, rstd, 1)),
        ("layer_norm_fwd", (rg(x), rg(w), rg(b), 1e-5)),
        ("layer_norm_fwd", (rg(xb), None, None, 1e-5)),
        ("layer_norm_fwd", (rg(x), rg(w), rg(b), 1e-5, rg(r), 0)),  # the fused residual, both contracts
        ("layer_norm_fwd", (xb, wb.float(), bb, 1e-5, rb, 2)),
        ("layer_norm_bwd", (dy, x, w, mean, rstd)),
        ("layer_norm_bwd", (dyb, xb, None, torch.zeros(4), torch.ones(4))),
        # the backward ops are differentiable (double backward): autograd registration checked too
        ("rms_norm_bwd", (rg(dy), rg(x), rg(w), rg(rstd), 1)),
        ("layer_norm_bwd", (rg(dy), rg(x), rg(w), rg(mean), rg(rstd))),
    ]


@pytest.mark.guards("fused.custom_op", "snippet:ops.schema", "snippet:library.fakes")
@pytest.mark.parametrize("case", range(14))
def test_opcheck(case):
    name, args = _opcheck_cases()[case]
    torch.library.opcheck(getattr(torch.ops.normlab, name).default, args)


@pytest.mark.guards("fused.torch_compile")
def test_torch_compile_fullgraph_matches_eager():
    class Block(torch.nn.Module):
        def __init__(self, d):
            super().__init__()
            self.w = torch.nn.Parameter(torch.linspace(0.5, 1.5, d))
            self.b = torch.nn.Parameter(torch.zeros(d))

        def forward(self, x, res):
            y, h = fused.fused_rms_norm(x, self.w, 1e-6, residual=res, convention="gemma")
            return fused.fused_layer_norm(y, self.w, self.b) + h

    m = Block(64)
    x, _, _, _, r = _data((4, 64), torch.float32, 13)
    compiled = torch.compile(m, fullgraph=True)
    out_c = compiled(x.clone().requires_grad_(True), r)
    out_e = m(x.clone().requires_grad_(True), r)
    torch.testing.assert_close(out_c, out_e, rtol=0, atol=0)
    xc, xe = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    gc = torch.autograd.grad(compiled(xc, r).sum(), [xc, m.w])
    ge = torch.autograd.grad(m(xe, r).sum(), [xe, m.w])
    for a, b in zip(gc, ge):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


# --- bad input --------------------------------------------------------------------------------------------

def _err(fn, *args, **kw):
    with pytest.raises((TypeError, ValueError)) as info:
        fn(*args, **kw)
    return type(info.value), str(info.value)


@pytest.mark.guards("fused.bad_input")
def test_bad_input_errors_match_the_core():
    x = torch.randn(3, 8)
    cases = [
        ((x.tolist(),), {}),
        ((x.to(torch.int32),), {}),
        ((x.to(torch.complex64),), {}),
        ((torch.tensor(1.0),), {}),
        ((x, torch.ones(7)), {}),
        ((x, torch.ones(8, 1)), {}),
        ((x, [1.0] * 8), {}),
        ((x, None), {"eps": -1.0}),
        ((x, None), {"eps": float("nan")}),
        ((x, None), {"eps": True}),
        ((x, None), {"eps": "1e-6"}),
    ]
    for args, kw in cases:
        assert _err(fused.fused_rms_norm, *args, **kw) == _err(ri.rms_norm, *args, **kw)
    for args, kw in cases[:7]:
        assert _err(fused.fused_layer_norm, *args, **kw) == _err(ri.layer_norm, *args, **kw)
    assert _err(fused.fused_layer_norm, x, None, torch.ones(9)) == _err(ri.layer_norm, x, None, torch.ones(9))


@pytest.mark.guards("fused.bad_input")
def test_bad_input_specific_to_the_fused_op():
    x = torch.randn(3, 8)
    with pytest.raises(TypeError, match="float64"):
        fused.fused_rms_norm(x.double())
    with pytest.raises(TypeError, match="weight has dtype torch.float16"):
        fused.fused_rms_norm(x.bfloat16(), torch.ones(8, dtype=torch.float16))
    with pytest.raises(ValueError, match="unknown convention 't5'"):
        fused.fused_rms_norm(x, convention="t5")
    with pytest.raises(TypeError, match="convention must be a string"):
        fused.fused_rms_norm(x, convention=0)
    with pytest.raises(ValueError, match="residual has shape"):
        fused.fused_rms_norm(x, residual=torch.randn(3, 7))
    with pytest.raises(TypeError, match="residual has dtype"):
        fused.fused_rms_norm(x, residual=torch.randn(3, 8).bfloat16())
    with pytest.raises(ValueError, match="meta"):
        fused.fused_rms_norm(torch.empty(3, 8, device="meta"))
    # the op itself rejects what the wrapper would never pass, with the same exception types
    # (cuda/op_checks.h; tests/ops/contract.py checks every bad argument on every backend)
    with pytest.raises(ValueError, match="contiguous"):
        torch.ops.normlab.rms_norm_fwd(x.t(), None, None, 1e-6, 0)
    with pytest.raises(ValueError, match="convention must be 0"):
        torch.ops.normlab.rms_norm_fwd(x, None, None, 1e-6, 4)  # 2 and 3: the fp32 residual contract
    with pytest.raises(TypeError, match="weight has dtype"):
        torch.ops.normlab.rms_norm_fwd(x.half(), torch.ones(8, dtype=torch.bfloat16), None, 1e-6, 0)
    for eps in (10**400, -1e-6, float("nan"), float("inf"), 1e39):  # 1e39: beyond float32
        with pytest.raises(ValueError, match="eps"):
            fused.fused_rms_norm(x, eps=eps)
    for eps in (True, "1e-6", None, torch.tensor(1e-6)):
        with pytest.raises(TypeError, match="eps must be a real number"):
            fused.fused_layer_norm(x, eps=eps)


@pytest.mark.guards("fused.build_error")
def test_missing_compiler_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-c++-compiler")
    with pytest.raises(NativeBuildError, match="no C\\+\\+ compiler"):
        load_cpu_library()


# --- claims and the committed benchmark data --------------------------------------------------------------

@pytest.mark.guards("C05", "snippet:bench.flops")
def test_flop_counts_rms_vs_layer_norm():
    """C05: counted from the traced graphs, RMSNorm's forward needs 4 operations per element, LayerNorm's 7."""
    from reference_impl.studies import bench

    for d in (64, 4096):
        r, l = bench.count_flops(bench.rms_flops_fn, d), bench.count_flops(bench.ln_flops_fn, d)
        # per row: RMS = d (square) + d (mean) + 1 (eps) + 1 (rsqrt) + d + d (two products)
        assert r["total"] == 4 * d + 2
        # LN = d (mean) + d (centre) + d (square) + d (mean) + 1 + 1 + d + d + d (bias)
        assert l["total"] == 7 * d + 2
    assert 1 - (4 * 4096 + 2) / (7 * 4096 + 2) > 0.42  # 43% fewer, not "about 20%"


@pytest.mark.guards("snippet:bench.plain_rms", "fused.bench_validation")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_benchmarked_implementations_are_validated(dtype):
    """Every implementation the benchmark times passes its pre-timing check against the oracle, or is
    unavailable for a stated reason (no out= yet, no ONNX Runtime kernel for the dtype)."""
    from reference_impl.studies import bench

    for mode, impls in bench.IMPLS.items():
        for impl in impls:
            try:
                bench.validate(impl, mode, dtype)
            except bench.Unavailable as exc:
                assert str(exc), (mode, impl)


@pytest.mark.guards("snippet:bench.block", "C38")
def test_block_used_for_the_norm_share_runs_each_norm():
    """The decoder layer of the C38 measurement gives the same output with LlamaRMSNorm and the fused op."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    from reference_impl.studies import bench

    cfg = LlamaConfig(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=4,
                      num_hidden_layers=1)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    layer = LlamaDecoderLayer(cfg, layer_idx=0).eval()
    with torch.no_grad():
        layer.input_layernorm.weight.uniform_(0.5, 1.5)
    x = torch.randn(2, 16, 64)
    pos = torch.arange(16).unsqueeze(0)
    rope = LlamaRotaryEmbedding(cfg)(x, pos)
    with torch.no_grad():
        want = layer(x, position_embeddings=rope, position_ids=pos)
        layer.input_layernorm = bench.FusedRMSNorm(layer.input_layernorm)
        layer.post_attention_layernorm = bench.FusedRMSNorm(layer.post_attention_layernorm)
        got = layer(x, position_embeddings=rope, position_ids=pos)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.guards("C04", "C05", "C38", "fused.bench_data")
def test_committed_benchmark_data_is_well_formed():
    """The committed file matches its schema; its operation counts are the closed forms (the rest of its
    checks, physical plausibility and labels re-derived from the timings, are in tests/studies/test_data_files.py)."""
    from reference_impl.studies import schemas

    data = schemas.check_file(REPO / "docs" / "data" / "bench_cpu.json")
    for d, f in data["flops"].items():
        assert f["rms"]["total"] == 4 * int(d) + 2 and f["layer_norm"]["total"] == 7 * int(d) + 2
    for name in data["plots"]:
        assert (REPO / "docs" / "data" / "plots" / name).exists(), name
