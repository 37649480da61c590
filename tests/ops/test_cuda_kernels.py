"""The CUDA kernels on a GPU: every RMSNorm forward version, the fused residual add, the backward, and
LayerNorm, against the float64 oracle (reference_impl.tolerances / conventions bounds) and against the
CPU op of the same library; misaligned inputs, block sizes, determinism, batch invariance, opcheck and
torch.compile. Skipped (and reported as skipped) when no CUDA device is present: scripts/gpu_check.sh
runs this module on a lent GPU machine.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from reference_impl import conventions as conv_tol
from reference_impl import oracle
from reference_impl import tolerances as tol

from .cases import layer_norm_case

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="no CUDA device here: run scripts/gpu_check.sh on a machine with a GPU"),
]

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
CONV = {"llama": 0, "gemma": 1}
# odd widths, 3-D input, the vector/scalar boundary, the register/streaming boundary of each dtype
# (16384 fp32 and 32768 half-precision still fit registers; 32768 fp32 and 65536 stream)
SHAPES = [(1, 1), (3, 7), (2, 3, 33), (4, 127), (5, 256), (3, 1000), (2, 4096), (2, 4097), (2, 8192),
          (1, 16384), (1, 16392), (1, 32768), (1, 65536)]
EPS = 1e-6


@pytest.fixture(scope="module", autouse=True)
def _loaded():
    from reference_impl.ops import cuda as cuda_ops

    cuda_ops.ensure_loaded()


def _data(shape, dtype, seed, wmode="same", scale=2.0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)
    d = shape[-1]
    wd = {"none": None, "same": dtype, "f32": torch.float32}[wmode]
    w = None if wd is None else (1 + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)).to(wd)
    dy = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    res = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    return x, w, dy, res


def _rms_bound(x, w, convention):
    from reference_impl.ops.cuda import rms_forward_bound

    return rms_forward_bound(x, w, EPS, convention)


def _oracle_rms(x, w, convention):
    wd = None if w is None else conv_tol.effective_gain(w, convention).double().numpy()
    return oracle.rms_norm_forward(x.double().numpy(), wd, EPS)


def _rstd_check(rstd, x):
    xd = x.double().numpy()
    want = 1.0 / np.sqrt(np.mean(xd * xd, -1) + EPS)
    d = x.shape[-1]
    rel = tol.gamma(d // 2 + 6, tol.unit_roundoff(torch.float32)) + tol.gamma(d // 2 + 6, tol.unit_roundoff(torch.float64))
    tol.assert_within(rstd.cpu(), want, rel * want, "rstd")


def _cpu_rms(x, w, res, convention):
    return torch.ops.normlab.rms_norm_fwd(x, w, res, EPS, CONV[convention])


# ------------------------------------------------------------------------------------------------------
# forward versions
# ------------------------------------------------------------------------------------------------------

@pytest.mark.guards("cuda.rms_forward", "snippet:rms_forward_steps.v1", "snippet:rms_forward_steps.v2",
                    "snippet:rms_forward_steps.v3", "snippet:rms_forward.v45", "snippet:common.row_rstd")
@pytest.mark.parametrize("convention", ["llama", "gemma"])
@pytest.mark.parametrize("wmode", ["none", "same", "f32"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("version", [1, 2, 3, 4, 5])
def test_forward_version_matches_oracle_and_cpu_op(version, dtype, wmode, convention):
    from reference_impl.ops.cuda import rms_norm_fwd_version

    if dtype == torch.float32 and wmode == "f32":
        pytest.skip("same case as wmode='same' for float32 input")
    for i, shape in enumerate(SHAPES):
        x, w, _, _ = _data(shape, dtype, 100 + i, wmode)
        y, rstd = rms_norm_fwd_version(x.cuda(), None if w is None else w.cuda(), EPS, version, convention)
        assert y.dtype == dtype and y.shape == x.shape and rstd.shape == x.shape[:-1]
        bound = _rms_bound(x, w, convention)
        tol.assert_within(y.cpu(), _oracle_rms(x, w, convention), bound, f"v{version} {shape}")
        _rstd_check(rstd, x)
        y_cpu = _cpu_rms(x, w, None, convention)[0]
        tol.assert_within(y.cpu(), y_cpu.double().numpy(), 2 * bound, f"v{version} {shape} vs CPU op")


@pytest.mark.guards("cuda.short_rows", "snippet:rms_forward.rows", "snippet:common.group_sum")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_version6_gives_version4s_bits_on_short_rows(dtype):
    """Several rows per block (version 6) against one row per block (version 4) on QK-norm's head sizes
    and every other row that fits one warp: the same bits, as under the emulation; the op takes
    version 6 for them, with and without a residual."""
    from reference_impl.ops.cuda import rms_norm_fwd_version

    for i, (rows, d) in enumerate([(4097, 64), (1000, 128), (333, 256), (65, 1), (77, 33), (9, 1000), (5, 1024)]):
        x, w, _, res = (t if t is None else t.cuda() for t in _data((rows, d), dtype, 300 + i, ("same", "none")[i % 2]))
        conv = ("llama", "gemma")[i % 2]
        y4, r4 = rms_norm_fwd_version(x, w, EPS, 4, conv)
        y6, r6 = rms_norm_fwd_version(x, w, EPS, 6, conv)
        assert torch.equal(y6, y4) and torch.equal(r6, r4), (rows, d)
        y, _, rstd = torch.ops.normlab.rms_norm_fwd(x, w, None, EPS, CONV[conv])
        assert torch.equal(y, y6) and torch.equal(rstd, r6), (rows, d)
        tol.assert_within(y6.cpu(), _oracle_rms(x.cpu(), None if w is None else w.cpu(), conv),
                          _rms_bound(x.cpu(), None if w is None else w.cpu(), conv), f"v6 {rows}x{d}")
        y, h, _ = torch.ops.normlab.rms_norm_fwd(x, w, res, EPS, CONV[conv])
        h_want = (x.float() + res.float()).to(dtype)
        assert torch.equal(h, h_want)
        tol.assert_within(y.cpu(), _oracle_rms(h_want.cpu(), None if w is None else w.cpu(), conv),
                          _rms_bound(h_want.cpu(), None if w is None else w.cpu(), conv), f"v6 residual {rows}x{d}")


@pytest.mark.guards("cuda.rms_forward", "cuda.residual")
@pytest.mark.parametrize("convention", ["llama", "gemma"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_residual_add_matches_unfused(dtype, convention):
    for i, shape in enumerate(SHAPES):
        x, w, _, res = _data(shape, dtype, 200 + i)
        y, h, rstd = torch.ops.normlab.rms_norm_fwd(x.cuda(), w.cuda(), res.cuda(), EPS, CONV[convention])
        h_want = (x.float() + res.float()).to(dtype)  # one fp32 add, one rounding: bit-exact
        assert torch.equal(h.cpu(), h_want), shape
        tol.assert_within(y.cpu(), _oracle_rms(h_want, w, convention), _rms_bound(h_want, w, convention), f"{shape}")
        _rstd_check(rstd, h_want)
        y_cpu, h_cpu, _ = _cpu_rms(x, w, res, convention)
        assert torch.equal(h.cpu(), h_cpu)
        tol.assert_within(y.cpu(), y_cpu.double().numpy(), 2 * _rms_bound(h_want, w, convention), f"{shape} vs CPU")


@pytest.mark.guards("cuda.misaligned")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("version", [1, 2, 3, 4, 5])
def test_misaligned_offset_views_take_the_scalar_path_correctly(version, dtype):
    """x, the weight and the residual start 1 element past a 16-byte boundary (offset views)."""
    from reference_impl.ops.cuda import rms_norm_fwd_version

    for i, (rows, d) in enumerate([(3, 8), (4, 1024), (2, 4096), (2, 5000), (1, 40000)]):
        x, w, _, res = _data((rows, d), dtype, 300 + i)
        xb = torch.empty(rows * d + 1, dtype=dtype, device="cuda")
        xb[1:] = x.reshape(-1).cuda()
        xm = xb[1:].view(rows, d)
        wb = torch.empty(d + 1, dtype=dtype, device="cuda")
        wb[1:] = w.cuda()
        wm = wb[1:]
        assert xm.data_ptr() % 16 != 0 and wm.data_ptr() % 16 != 0 and xm.is_contiguous()
        y, _ = rms_norm_fwd_version(xm, wm, EPS, version, "llama")
        tol.assert_within(y.cpu(), _oracle_rms(x, w, "llama"), _rms_bound(x, w, "llama"), f"v{version} {rows}x{d}")
        if version == 5:
            rb = torch.empty(rows * d + 1, dtype=dtype, device="cuda")
            rb[1:] = res.reshape(-1).cuda()
            y2, h, _ = torch.ops.normlab.rms_norm_fwd(xm, wm, rb[1:].view(rows, d), EPS, 0)
            h_want = (x.float() + res.float()).to(dtype)
            assert torch.equal(h.cpu(), h_want)
            tol.assert_within(y2.cpu(), _oracle_rms(h_want, w, "llama"), _rms_bound(h_want, w, "llama"), "v5 misaligned")


@pytest.mark.guards("cuda.block_sum", "C39")
@pytest.mark.parametrize("block", [1, 31, 32, 33, 96, 100, 256, 1000, 1024])
def test_v3_is_correct_for_any_block_size(block):
    from reference_impl.ops.cuda import rms_norm_fwd_version

    for i, shape in enumerate([(3, 1), (3, 50), (2, 4097), (1, 65536)]):
        x, w, _, _ = _data(shape, torch.float32, 400 + i)
        y, rstd = rms_norm_fwd_version(x.cuda(), w.cuda(), EPS, 3, "llama", block_size=block)
        tol.assert_within(y.cpu(), _oracle_rms(x, w, "llama"), _rms_bound(x, w, "llama"), f"block {block} {shape}")
        _rstd_check(rstd, x)


@pytest.mark.guards("cuda.tree_sum")
def test_v2_accepts_powers_of_two_and_refuses_other_block_sizes():
    from reference_impl.ops.cuda import rms_norm_fwd_version

    x, w, _, _ = _data((3, 777), torch.float32, 500)
    for block in (1, 2, 64, 1024):
        y, _ = rms_norm_fwd_version(x.cuda(), w.cuda(), EPS, 2, "llama", block_size=block)
        tol.assert_within(y.cpu(), _oracle_rms(x, w, "llama"), _rms_bound(x, w, "llama"), f"block {block}")
    with pytest.raises(ValueError, match="power-of-two"):
        rms_norm_fwd_version(x.cuda(), w.cuda(), EPS, 2, "llama", block_size=96)


@pytest.mark.guards("cuda.rms_forward")
def test_non_finite_rows_stay_in_their_row_as_on_cpu():
    x, w, _, _ = _data((4, 300), torch.float32, 600)
    x[1, 7] = float("inf")
    x[2, 3] = float("nan")
    y = torch.ops.normlab.rms_norm_fwd(x.cuda(), w.cuda(), None, EPS, 0)[0].cpu()
    y_cpu = _cpu_rms(x, w, None, "llama")[0]
    assert torch.equal(torch.isnan(y), torch.isnan(y_cpu))
    assert torch.isnan(y[2]).all() and torch.isnan(y[1, 7]) and (y[1, :7] == 0).all()
    tol.assert_within(y[[0, 3]], _oracle_rms(x[[0, 3]], w, "llama"), _rms_bound(x[[0, 3]], w, "llama"), "finite rows")


@pytest.mark.guards("cuda.rms_forward", "cuda.rms_backward", "cuda.layer_norm")
def test_empty_inputs():
    with pytest.raises(ValueError, match="empty last dimension"):  # d = 0: nothing to normalize over
        torch.ops.normlab.rms_norm_fwd(torch.randn(3, 0, device="cuda"), None, None, EPS, 0)
    for shape in [(0, 16), (2, 0, 8)]:
        x = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
        w = torch.ones(shape[-1], device="cuda", dtype=torch.bfloat16)
        y, _, rstd = torch.ops.normlab.rms_norm_fwd(x, w, None, EPS, 0)
        assert y.shape == x.shape and rstd.shape == x.shape[:-1]
        dx, dw = torch.ops.normlab.rms_norm_bwd(torch.ones_like(x), x, w, rstd, 0)
        assert dx.shape == x.shape and dw.shape == w.shape
        assert (dw == 0).all() and dw.dtype == torch.float32  # a sum over no rows
        yl, mean, rs = torch.ops.normlab.layer_norm_fwd(x, w, w, 1e-5)[:3]
        dxl, dwl, dbl = torch.ops.normlab.layer_norm_bwd(torch.ones_like(x), x, w, mean, rs)
        assert dxl.shape == x.shape and dwl.shape == w.shape and dbl.shape == w.shape


@pytest.mark.guards("cuda.rms_forward")
def test_unsupported_dtype_is_a_type_error():
    x = torch.randn(2, 8, device="cuda", dtype=torch.float64)
    with pytest.raises(TypeError):
        torch.ops.normlab.rms_norm_fwd(x, None, None, EPS, 0)
    with pytest.raises(TypeError):
        torch.ops.normlab.rms_norm_fwd(x.float(), torch.ones(8, device="cuda", dtype=torch.float16), None, EPS, 0)


# ------------------------------------------------------------------------------------------------------
# backward
# ------------------------------------------------------------------------------------------------------

@pytest.mark.guards("cuda.rms_backward", "snippet:rms_backward.rms_bwd", "snippet:common.column_sum")
@pytest.mark.parametrize("convention", ["llama", "gemma"])
@pytest.mark.parametrize("wmode", ["none", "same", "f32"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rms_backward_matches_oracle_and_cpu_op(dtype, wmode, convention):
    if dtype == torch.float32 and wmode == "f32":
        pytest.skip("same case as wmode='same' for float32 input")
    for i, shape in enumerate(SHAPES + [(257, 64), (3000, 40)]):
        x, w, dy, _ = _data(shape, dtype, 700 + i, wmode)
        xc, wc = x.cuda(), (None if w is None else w.cuda())
        _, _, rstd = torch.ops.normlab.rms_norm_fwd(xc, wc, None, EPS, CONV[convention])
        dx, dw = torch.ops.normlab.rms_norm_bwd(dy.cuda(), xc, wc, rstd, CONV[convention])
        assert dx.dtype == dtype and (dw.numel() == 0 if w is None else dw.dtype == torch.float32)
        edx, edw = oracle.rms_norm_backward_placed(dy.double().numpy(), x.double().numpy(),
                                            None if w is None else conv_tol.effective_gain(w, convention).double().numpy(), EPS)
        bdx, bdw = tol.convention_backward_bounds(dy, x, w, EPS, convention)
        tol.assert_within(dx.cpu(), edx, bdx, f"dx {shape}")
        _, _, rstd_cpu = _cpu_rms(x, w, None, convention)
        dx_cpu, dw_cpu = torch.ops.normlab.rms_norm_bwd(dy, x, w, rstd_cpu, CONV[convention])
        tol.assert_within(dx.cpu(), dx_cpu.double().numpy(), 2 * bdx, f"dx {shape} vs CPU op")
        if w is not None:
            tol.assert_within(dw.cpu(), edw, bdw, f"dweight {shape}")
            tol.assert_within(dw.cpu(), dw_cpu.double().numpy(), 2 * bdw, f"dweight {shape} vs CPU op")


@pytest.mark.guards("cuda.deterministic", "snippet:common.column_sum")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_repeated_runs_are_bit_identical(dtype):
    for shape in [(4096, 4096), (333, 40000)]:
        x, w, dy, res = (t.cuda() for t in _data(shape, dtype, 800))
        first = None
        for _ in range(3):
            y, h, rstd = torch.ops.normlab.rms_norm_fwd(x, w, res, EPS, 0)
            dx, dw = torch.ops.normlab.rms_norm_bwd(dy, h, w, rstd, 0)
            yl, mean, rs = torch.ops.normlab.layer_norm_fwd(x, w, w, 1e-5)[:3]
            dxl, dwl, dbl = torch.ops.normlab.layer_norm_bwd(dy, x, w, mean, rs)
            out = [y, h, rstd, dx, dw, yl, mean, rs, dxl, dwl, dbl]
            if first is None:
                first = [t.clone() for t in out]
            else:
                assert all(torch.equal(a, b) for a, b in zip(first, out)), shape


@pytest.mark.guards("cuda.batch_invariant")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_a_rows_result_does_not_depend_on_the_batch(dtype):
    from reference_impl.ops.cuda import rms_norm_fwd_version

    for d in (1000, 4096, 40000):
        x, w, dy, _ = (t.cuda() for t in _data((64, d), dtype, 900))
        for k in (1, 7, 33):
            for version in (1, 2, 3, 4) if d > 1000 else (1, 2, 3, 4, 6):
                full = rms_norm_fwd_version(x, w, EPS, version, "llama")[0]
                part = rms_norm_fwd_version(x[:k], w, EPS, version, "llama")[0]
                assert torch.equal(full[:k], part), (d, k, version)
            _, _, rstd = torch.ops.normlab.rms_norm_fwd(x, w, None, EPS, 0)
            dx_full = torch.ops.normlab.rms_norm_bwd(dy, x, w, rstd, 0)[0]
            dx_part = torch.ops.normlab.rms_norm_bwd(dy[:k], x[:k], w, rstd[:k].contiguous(), 0)[0]
            assert torch.equal(dx_full[:k], dx_part), (d, k)
            yl = torch.ops.normlab.layer_norm_fwd(x, w, w, 1e-5)[0]
            assert torch.equal(yl[:k], torch.ops.normlab.layer_norm_fwd(x[:k], w, w, 1e-5)[0])


# ------------------------------------------------------------------------------------------------------
# LayerNorm
# ------------------------------------------------------------------------------------------------------

@pytest.mark.guards("cuda.layer_norm", "snippet:layer_norm.ln_fwd", "snippet:layer_norm.ln_bwd")
@pytest.mark.parametrize("pmode", ["none", "same", "f32", "mixed"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_layer_norm_matches_oracle_and_cpu_op(dtype, pmode):
    if dtype == torch.float32 and pmode in ("f32", "mixed"):
        pytest.skip("same case as pmode='same' for float32 input")
    eps = 1e-5
    for i, shape in enumerate(SHAPES + [(257, 64)]):
        x, dy, w, b = layer_norm_case(shape, dtype, pmode, seed=1000 + i)
        d = shape[-1]
        cu = lambda t: None if t is None else t.cuda()  # noqa: E731
        y, mean, rstd = torch.ops.normlab.layer_norm_fwd(x.cuda(), cu(w), cu(b), eps)[:3]
        ey = oracle.layer_norm_forward(x.double().numpy(), None if w is None else w.double().numpy(),
                                       None if b is None else b.double().numpy(), eps)
        by = tol.ln_forward_bound(x, w, b, eps, dtype)
        tol.assert_within(y.cpu(), ey, by, f"LN y {shape}")
        y_cpu, mean_cpu, rstd_cpu = torch.ops.normlab.layer_norm_fwd(x, w, b, eps)[:3]
        tol.assert_within(y.cpu(), y_cpu.double().numpy(), 2 * by, f"LN y {shape} vs CPU op")
        dx, dw, db = torch.ops.normlab.layer_norm_bwd(dy.cuda(), x.cuda(), cu(w), mean, rstd)
        assert db.dtype == torch.float32 and db.shape == (d,)  # the float32 sum over rows
        edx, edw, edb = oracle.layer_norm_backward(dy.double().numpy(), x.double().numpy(),
                                                   None if w is None else w.double().numpy(), np.zeros(d), eps)
        bdx, bdw, _ = tol.ln_backward_bounds(dy, x, w, None, eps, dtype, torch.float32)
        _, _, bdb = tol.ln_backward_bounds(dy, x, None, torch.zeros(d), eps, dtype, torch.float32)
        tol.assert_within(dx.cpu(), edx, bdx, f"LN dx {shape}")
        tol.assert_within(db.cpu(), edb, bdb, f"LN dbias {shape}")
        dx_cpu, dw_cpu, db_cpu = torch.ops.normlab.layer_norm_bwd(dy, x, w, mean_cpu, rstd_cpu)
        tol.assert_within(dx.cpu(), dx_cpu.double().numpy(), 2 * bdx, f"LN dx {shape} vs CPU op")
        tol.assert_within(db.cpu(), db_cpu.double().numpy(), 2 * bdb, f"LN dbias {shape} vs CPU op")
        if w is not None:
            assert dw.dtype == torch.float32
            tol.assert_within(dw.cpu(), edw, bdw, f"LN dweight {shape}")
            tol.assert_within(dw.cpu(), dw_cpu.double().numpy(), 2 * bdw, f"LN dweight {shape} vs CPU op")


# ------------------------------------------------------------------------------------------------------
# the op as PyTorch sees it
# ------------------------------------------------------------------------------------------------------

@pytest.mark.guards("cuda.opcheck")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_opcheck(dtype):
    x, w, dy, res = (t.cuda() for t in _data((5, 96), dtype, 1100))
    wf = w.float()
    cases = [
        (torch.ops.normlab.rms_norm_fwd.default, (x, w, None, EPS, 0)),
        (torch.ops.normlab.rms_norm_fwd.default, (x, wf, res, EPS, 1)),
        (torch.ops.normlab.rms_norm_fwd.default, (x, None, None, EPS, 0)),
        (torch.ops.normlab.layer_norm_fwd.default, (x, w, w, 1e-5)),
        (torch.ops.normlab.layer_norm_fwd.default, (x, None, None, 1e-5)),
    ]
    for op, args in cases:
        grad_args = tuple(a.detach().clone().requires_grad_(True) if isinstance(a, torch.Tensor) else a for a in args)
        torch.library.opcheck(op, grad_args)
    # the backward ops are differentiable too (double backward); the out= ops and the teaching op record
    # no gradient: inputs without grad, so the autograd-registration check is left out for them
    no_grad_utils = ("test_schema", "test_faketensor", "test_aot_dispatch_static", "test_aot_dispatch_dynamic")
    rg = lambda t: t.detach().clone().requires_grad_(True)  # noqa: E731
    _, _, rstd = torch.ops.normlab.rms_norm_fwd(x, w, None, EPS, 0)
    torch.library.opcheck(torch.ops.normlab.rms_norm_bwd.default, (rg(dy), rg(x), rg(w), rg(rstd), 0))
    _, mean, rs = torch.ops.normlab.layer_norm_fwd(x, w, w, 1e-5)[:3]
    torch.library.opcheck(torch.ops.normlab.layer_norm_bwd.default, (rg(dy), rg(x), rg(w), rg(mean), rg(rs)))
    torch.library.opcheck(torch.ops.normlab.rms_norm_fwd_out.default, (x, w, res, EPS, 0),
                          {"y": torch.empty_like(x), "residual_out": torch.empty_like(x)}, test_utils=no_grad_utils)
    torch.library.opcheck(torch.ops.normlab.layer_norm_fwd_out.default, (x, w, w, 1e-5),
                          {"y": torch.empty_like(x)}, test_utils=no_grad_utils)
    for version in (1, 2, 3, 4):
        torch.library.opcheck(torch.ops.normlab.rms_norm_fwd_version.default, (x, w, EPS, version, 0, 0),
                              test_utils=no_grad_utils)


@pytest.mark.guards("cuda.compile")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_torch_compile_fullgraph_matches_eager(dtype):
    from reference_impl.ops.library import fused_layer_norm, fused_rms_norm

    def block(x, res, w, b):
        # only our ops: an elementwise op here could round differently once inductor fuses it
        y, h = fused_rms_norm(x, w, 1e-6, residual=res, convention="llama")
        return fused_layer_norm(y, w, b), h

    x, w, dy, res = (t.cuda() for t in _data((8, 33, 512), dtype, 1200))
    dy2 = torch.randn_like(dy)
    b = (0.1 * torch.randn(512, device="cuda")).to(dtype)
    compiled = torch.compile(block, fullgraph=True)
    outs = []
    for fn in (block, compiled):
        leaves = [t.detach().clone().requires_grad_(True) for t in (x, res, w, b)]
        out, h = fn(*leaves)
        torch.autograd.backward([out, h], [dy, dy2])
        outs.append([out.detach(), h.detach()] + [t.grad for t in leaves])
    for a, c in zip(*outs):
        assert torch.equal(a, c)


@pytest.mark.guards("cuda.dispatch")
def test_fused_entry_points_run_the_cuda_kernels():
    """reference_impl.fused_rms_norm on a CUDA tensor launches rms_fwd_v45 (the best version)."""
    from torch.profiler import ProfilerActivity, profile

    from reference_impl.ops.library import fused_rms_norm

    x, w, _, res = (t.cuda() for t in _data((16, 4096), torch.bfloat16, 1300))
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        y, h = fused_rms_norm(x, w, 1e-6, residual=res)
        torch.cuda.synchronize()
    names = [e.key for e in prof.key_averages()]
    assert any("rms_fwd_v45" in n for n in names), names
    y2, h2, _ = torch.ops.normlab.rms_norm_fwd(x, w, res, 1e-6, 0)
    assert torch.equal(y, y2) and torch.equal(h, h2)
