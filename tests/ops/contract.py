"""The op contract of ``cuda/ops.h``, written once and run against every backend that is present.

A backend is a namespace of the ``normlab`` schemas and the device its tensors live on:

- ``cpu``: ``torch.ops.normlab`` on CPU tensors (the CPU kernels);
- ``emulation``: ``torch.ops.normlab_emu`` on CPU tensors: the CUDA glue (``cuda/gpu/ops_cuda.cpp``),
  launchers and kernels, run on host threads by the CPU emulation (``cuda/gpu/emulation/emu.h``);
- ``cuda``: ``torch.ops.normlab`` on CUDA tensors (needs a GPU).

Each thin module ``tests/ops/test_contract_<backend>.py`` binds :class:`ContractTests` (and, where the
Python entry points dispatch to the backend, :class:`PythonLayerContractTests`) to one backend;
the checks: shapes and dtypes of every output, values against the float64 oracle within the bounds of
:mod:`reference_impl.tolerances` for both RMSNorm conventions, with and without gain and residual, both
residual contracts of the RMSNorm and LayerNorm forwards ("hf": normalize round_x(x + r); "fp32", code + 2:
normalize the float32 sum, including rows that take the pass in double), LayerNorm
with any parameters, float32 parameter gradients, the out= ops (equal to the allocating ops, and their
errors), the exception type of every bad argument, empty batches, and bit-identical repeats.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch

from reference_impl import oracle
from reference_impl import tolerances as tol
from reference_impl.shared import effective_gain

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
EPS = 1e-6
LN_EPS = 1e-5
CONV = {"llama": 0, "gemma": 1}


@dataclass
class Backend:
    name: str
    device: str
    namespace: str  # "normlab" or "normlab_emu"
    shapes: tuple  # shapes small enough for this backend

    @property
    def ops(self):
        return getattr(torch.ops, self.namespace)

    def to(self, t):
        return None if t is None else t.to(self.device)


def _data(shape, dtype, seed, w_dtype="same"):
    g = torch.Generator().manual_seed(seed)
    d = shape[-1]
    x = (torch.randn(shape, generator=g, dtype=torch.float64) * 2).to(dtype)
    wd = {"same": dtype, "f32": torch.float32}[w_dtype]
    w = (1 + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)).to(wd)
    b = (0.3 * torch.randn(d, generator=g, dtype=torch.float64)).to(wd)
    dy = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    r = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    return x, w, b, dy, r


def _np(t):
    return None if t is None else t.detach().double().cpu().numpy()


def _seq_sum_sq(row) -> float:
    """Sum of squares in double, in element order (the kernels' pass for rows out of the float32 range)."""
    acc = 0.0
    for v in row.tolist():
        acc += v * v
    return acc


def _rms_output(s, rstd, w, convention, dtype):
    """y from the normalized row s (float32) and rstd with the convention's casts, in float32 torch ops."""
    t = s * rstd[..., None]
    if w is None:
        return t.to(dtype)
    if convention == "llama":
        return (t.to(dtype).float() * w.float()).to(dtype)
    return (t * (1 + w.float())).to(dtype)


def _rms_bound(x, w, convention):
    # the op rounds to x's dtype before the gain (llama) whatever the weight's dtype: count it as x's
    return tol.convention_forward_bound(x, w, EPS, convention, w_dtype=None if w is None else x.dtype)


def _err(fn, what: str):
    """The exception type fn() raises (TypeError/ValueError expected; anything else fails the test)."""
    try:
        fn()
    except (TypeError, ValueError) as e:
        return type(e)
    except Exception as e:  # noqa: BLE001 - a RuntimeError here is the defect under test
        pytest.fail(f"{what}: {type(e).__name__} instead of TypeError/ValueError: {e}")
    pytest.fail(f"{what}: the bad argument was accepted")


def _DTYPE_AND_PARAMS(modes, ids):  # noqa: N802 - reads as a constant in the decorators
    """Every (dtype, parameter mode) pair, leaving out the float32 parameters of float32 x: that is the same
    case as parameters of x's dtype, so it is not generated at all (rather than generated and skipped)."""
    return [pytest.param(dt, m, id=f"{dt}-{i}") for dt in DTYPES for m, i in zip(modes, ids)
            if not (dt == torch.float32 and str(i).endswith("f32"))]


class ContractTests:
    """Bind ``backend`` in a subclass named ``Test...``."""

    backend: Backend

    # --- forward / backward against the oracle --------------------------------------------------------

    @pytest.mark.parametrize("convention", ["llama", "gemma"])
    @pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
    @pytest.mark.parametrize("dtype,with_weight", _DTYPE_AND_PARAMS(["same", "f32", None], ["w", "w_f32", "no_w"]))
    def test_rms_forward_and_backward(self, dtype, residual, with_weight, convention):
        be = self.backend
        for i, shape in enumerate(be.shapes):
            x, w, _, dy, r = _data(shape, dtype, 10 + i, with_weight or "same")
            w = w if with_weight else None
            res = r if residual else None
            y, h, rstd = be.ops.rms_norm_fwd(be.to(x), be.to(w), be.to(res), EPS, CONV[convention])
            assert y.dtype == dtype and y.shape == x.shape and y.device.type == be.device
            assert rstd.dtype == torch.float32 and rstd.shape == x.shape[:-1]
            if residual:
                hx = (x.float() + r.float()).to(dtype)  # one fp32 add, one rounding: bit-exact
                assert torch.equal(h.cpu(), hx)
            else:
                hx = x
                assert h.shape == (0,) and h.dtype == dtype
            gain = None if w is None else _np(effective_gain(w, convention))
            tol.assert_within(y.cpu(), oracle.rms_norm_forward(_np(hx), gain, EPS), _rms_bound(hx, w, convention),
                              f"{be.name} rms y {shape}")
            dx, dw = be.ops.rms_norm_bwd(be.to(dy), be.to(hx), be.to(w), rstd, CONV[convention])
            assert dx.dtype == dtype and dx.shape == x.shape
            edx, edw = oracle.rms_norm_backward(_np(dy), _np(hx), gain, EPS)
            bdx, bdw = tol.convention_backward_bounds(dy, hx, w, EPS, convention)
            tol.assert_within(dx.cpu(), edx, bdx, f"{be.name} rms dx {shape}")
            if w is None:
                assert dw.shape == (0,)
            else:  # the float32 sum over rows, whatever the weight's dtype
                assert dw.dtype == torch.float32 and dw.shape == w.shape
                tol.assert_within(dw.cpu(), edw, bdw, f"{be.name} rms dweight {shape}")

    @pytest.mark.parametrize("dtype,params", _DTYPE_AND_PARAMS(["wb", "wb_f32", "w", "b", "none"],
                                                             ["wb", "wb_f32", "w", "b", "none"]))
    def test_layer_norm_forward_and_backward(self, dtype, params):
        be = self.backend
        for i, shape in enumerate(be.shapes):
            x, w, b, dy, _ = _data(shape, dtype, 30 + i, "f32" if params == "wb_f32" else "same")
            x = x + 3  # an offset makes the centring matter
            w = w if "w" in params else None
            b = b if "b" in params else None
            y, mean, rstd = be.ops.layer_norm_fwd(be.to(x), be.to(w), be.to(b), LN_EPS)[:3]
            assert y.dtype == dtype and mean.dtype == rstd.dtype == torch.float32
            assert mean.shape == rstd.shape == x.shape[:-1]
            tol.assert_within(y.cpu(), oracle.layer_norm_forward(_np(x), _np(w), _np(b), LN_EPS),
                              tol.ln_forward_bound(x, w, b, LN_EPS, dtype), f"{be.name} ln y {shape}")
            dx, dw, db = be.ops.layer_norm_bwd(be.to(dy), be.to(x), be.to(w), mean, rstd)
            d = x.shape[-1]
            assert dx.dtype == dtype and db.dtype == torch.float32 and db.shape == (d,)
            edx, edw, edb = oracle.layer_norm_backward(_np(dy), _np(x), _np(w), None, LN_EPS)
            bdx, bdw, bdb = tol.ln_backward_bounds(dy, x, w, torch.zeros(d), LN_EPS, dtype, torch.float32)
            tol.assert_within(dx.cpu(), edx, bdx, f"{be.name} ln dx {shape}")
            tol.assert_within(db.cpu(), dy.double().reshape(-1, d).sum(0).numpy(), bdb, f"{be.name} ln dbias")
            if w is None:
                assert dw.shape == (0,)
            else:
                assert dw.dtype == torch.float32 and dw.shape == (d,)
                tol.assert_within(dw.cpu(), edw, bdw, f"{be.name} ln dweight {shape}")

    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
    def test_parameter_gradients_are_float32_sums(self, dtype):
        """Many rows of 16-bit x: the weight and bias gradients are float32 sums, never rounded through
        x's dtype (70000 does not even fit float16). Rows of +-1 with eps = 0 make xhat = +-1 exactly, so
        every partial sum is an integer below 2**24: exact in float32 in any summation order."""
        be = self.backend
        rows = 256 if be.name == "emulation" else 70000  # the emulation runs blocks one by one
        x = torch.tensor([1.0, -1.0] * 4, dtype=dtype).repeat(rows, 1)
        w, b = torch.full((8,), 0.5), torch.zeros(8)
        dy = torch.ones(rows, 8, dtype=dtype)
        _, mean, rstd = be.ops.layer_norm_fwd(be.to(x), be.to(w), be.to(b), 0.0)[:3]
        _, dw, db = be.ops.layer_norm_bwd(be.to(dy), be.to(x), be.to(w), mean, rstd)
        assert torch.equal(db.cpu(), torch.full((8,), float(rows)))
        assert torch.equal(dw.cpu(), torch.tensor([1.0, -1.0] * 4) * rows)
        _, _, rs = be.ops.rms_norm_fwd(be.to(x), be.to(w), None, 0.0, 0)
        _, dw = be.ops.rms_norm_bwd(be.to(dy), be.to(x), be.to(w), rs, 0)
        assert torch.equal(dw.cpu(), torch.tensor([1.0, -1.0] * 4) * rows)

    # --- out= ---------------------------------------------------------------------------------------------

    @pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
    @pytest.mark.parametrize("dtype", DTYPES, ids=str)
    def test_out_ops_equal_the_allocating_ops(self, dtype, residual):
        be = self.backend
        for i, shape in enumerate(be.shapes):
            x, w, b, _, r = (be.to(t) for t in _data(shape, dtype, 50 + i))
            res = r if residual else None
            y, h, rstd = be.ops.rms_norm_fwd(x, w, res, EPS, 1)
            yo, ho = torch.full_like(x, float("nan")), (torch.full_like(x, float("nan")) if residual else None)
            rstd_o = be.ops.rms_norm_fwd_out(x, w, res, EPS, 1, y=yo, residual_out=ho)
            assert torch.equal(yo, y) and torch.equal(rstd_o, rstd) and (not residual or torch.equal(ho, h))
            yl, mean, rs = be.ops.layer_norm_fwd(x, w, b, LN_EPS)[:3]
            ylo = torch.full_like(x, float("nan"))
            mean_o, rs_o = be.ops.layer_norm_fwd_out(x, w, b, LN_EPS, y=ylo)
            assert torch.equal(ylo, yl) and torch.equal(mean_o, mean) and torch.equal(rs_o, rs)
            for code in (0, 2):  # LayerNorm with the residual add, both contracts
                yl, mean, rs, hl = be.ops.layer_norm_fwd(x, w, b, LN_EPS, res, code)
                ylo, hlo = torch.full_like(x, float("nan")), (torch.full_like(x, float("nan")) if residual else None)
                mean_o, rs_o = be.ops.layer_norm_fwd_out(x, w, b, LN_EPS, res, code, y=ylo, residual_out=hlo)
                assert torch.equal(ylo, yl) and torch.equal(mean_o, mean) and torch.equal(rs_o, rs)
                assert (torch.equal(hlo, hl) if residual else hl.shape == (0,))

    def test_out_op_errors(self):
        be = self.backend
        x, w, b, _, r = (be.to(t) for t in _data((4, 24), torch.float32, 60))
        ok = torch.empty_like(x)
        rms = lambda **kw: be.ops.rms_norm_fwd_out(x, w, kw.pop("res", None), EPS, 0, **kw)  # noqa: E731
        cases = {
            "wrong dtype": (TypeError, lambda: rms(y=ok.half(), residual_out=None)),
            "wrong shape": (ValueError, lambda: rms(y=torch.empty_like(x[:, :5]), residual_out=None)),
            "non-contiguous": (ValueError, lambda: rms(y=x.new_empty(x.shape[::-1]).t(), residual_out=None)),
            "y is x": (ValueError, lambda: rms(y=x, residual_out=None)),
            "y is the residual": (ValueError, lambda: rms(res=r, y=r, residual_out=ok)),
            "residual_out is y": (ValueError, lambda: rms(res=r, y=ok, residual_out=ok)),
            "residual_out missing": (ValueError, lambda: rms(res=r, y=ok, residual_out=None)),
            "residual_out without residual": (ValueError, lambda: rms(y=ok, residual_out=torch.empty_like(x))),
            "ln y is x": (ValueError, lambda: be.ops.layer_norm_fwd_out(x, w, b, LN_EPS, y=x)),
            "ln wrong dtype": (TypeError, lambda: be.ops.layer_norm_fwd_out(x, w, b, LN_EPS, y=ok.bfloat16())),
            "ln y is the residual": (ValueError, lambda: be.ops.layer_norm_fwd_out(x, w, b, LN_EPS, r, 0, y=r,
                                                                                   residual_out=ok)),
            "ln residual_out is y": (ValueError, lambda: be.ops.layer_norm_fwd_out(x, w, b, LN_EPS, r, 0, y=ok,
                                                                                   residual_out=ok)),
            "ln residual_out missing": (ValueError, lambda: be.ops.layer_norm_fwd_out(x, w, b, LN_EPS, r, 2, y=ok)),
            "ln residual_out without residual": (ValueError, lambda: be.ops.layer_norm_fwd_out(
                x, w, b, LN_EPS, None, 0, y=ok, residual_out=torch.empty_like(x))),
        }
        # x and y in one storage: overlapping by 5 elements, then side by side (no overlap)
        buf = torch.empty(2 * x.numel(), device=be.device)
        xs = buf[: x.numel()].view_as(x)
        xs.copy_(x)
        cases["y overlaps x"] = (ValueError, lambda: be.ops.rms_norm_fwd_out(
            xs, w, None, EPS, 0, y=buf[x.numel() - 5: 2 * x.numel() - 5].view_as(x), residual_out=None))
        for what, (etype, fn) in cases.items():
            assert _err(fn, what) is etype, what
        ys = buf[x.numel():].view_as(x)
        be.ops.rms_norm_fwd_out(xs, w, None, EPS, 0, y=ys, residual_out=None)
        assert torch.equal(ys, be.ops.rms_norm_fwd(x, w, None, EPS, 0)[0])

    # --- bad arguments: one exception type per problem, on every device --------------------------------

    def _bad_calls(self):
        be = self.backend
        x, w, _, dy, r = (be.to(t) for t in _data((3, 8), torch.float32, 70))
        rstd = be.ops.rms_norm_fwd(x, w, None, EPS, 0)[2]
        _, mean, rs = be.ops.layer_norm_fwd(x, w, None, LN_EPS)[:3]
        ops = be.ops
        return {
            "x int": (TypeError, lambda: ops.rms_norm_fwd(x.int(), None, None, EPS, 0)),
            "x float64": (TypeError, lambda: ops.rms_norm_fwd(x.double(), None, None, EPS, 0)),
            "x 0-d": (ValueError, lambda: ops.rms_norm_fwd(x[0, 0], None, None, EPS, 0)),
            "x empty last dim": (ValueError, lambda: ops.rms_norm_fwd(x[:, :0], None, None, EPS, 0)),
            "x non-contiguous": (ValueError, lambda: ops.rms_norm_fwd(x.t(), None, None, EPS, 0)),
            "weight dtype": (TypeError, lambda: ops.rms_norm_fwd(x.bfloat16(), w.half(), None, EPS, 0)),
            "weight float64": (TypeError, lambda: ops.rms_norm_fwd(x, w.double(), None, EPS, 0)),
            "weight shape": (ValueError, lambda: ops.rms_norm_fwd(x, w[:7], None, EPS, 0)),
            "weight 2-d": (ValueError, lambda: ops.rms_norm_fwd(x, w[None], None, EPS, 0)),
            "residual dtype": (TypeError, lambda: ops.rms_norm_fwd(x, w, r.half(), EPS, 0)),
            "residual shape": (ValueError, lambda: ops.rms_norm_fwd(x, w, r[:2], EPS, 0)),
            "eps negative": (ValueError, lambda: ops.rms_norm_fwd(x, w, None, -1.0, 0)),
            "eps NaN": (ValueError, lambda: ops.rms_norm_fwd(x, w, None, math.nan, 0)),
            "eps inf": (ValueError, lambda: ops.rms_norm_fwd(x, w, None, math.inf, 0)),
            "eps beyond float32": (ValueError, lambda: ops.rms_norm_fwd(x, w, None, 1e39, 0)),
            "convention": (ValueError, lambda: ops.rms_norm_fwd(x, w, None, EPS, 4)),
            "convention negative": (ValueError, lambda: ops.rms_norm_fwd(x, w, None, EPS, -1)),
            "bwd dy dtype": (TypeError, lambda: ops.rms_norm_bwd(dy.half(), x, w, rstd, 0)),
            "bwd dy shape": (ValueError, lambda: ops.rms_norm_bwd(dy[:2], x, w, rstd, 0)),
            "bwd rstd dtype": (TypeError, lambda: ops.rms_norm_bwd(dy, x, w, rstd.double(), 0)),
            "bwd rstd shape": (ValueError, lambda: ops.rms_norm_bwd(dy, x, w, rstd[:2], 0)),
            "bwd convention": (ValueError, lambda: ops.rms_norm_bwd(dy, x, w, rstd, -1)),
            "ln bias dtype": (TypeError, lambda: ops.layer_norm_fwd(x.half(), None, w.bfloat16(), LN_EPS)),
            "ln bias shape": (ValueError, lambda: ops.layer_norm_fwd(x, None, w[:3], LN_EPS)),
            "ln eps": (ValueError, lambda: ops.layer_norm_fwd(x, w, None, -1e-5)),
            "ln x empty last dim": (ValueError, lambda: ops.layer_norm_fwd(x[:, :0], None, None, LN_EPS)),
            "ln bwd mean shape": (ValueError, lambda: ops.layer_norm_bwd(dy, x, w, mean[:1], rs)),
            "ln bwd rstd dtype": (TypeError, lambda: ops.layer_norm_bwd(dy, x, w, mean, rs.half())),
            "ln residual dtype": (TypeError, lambda: ops.layer_norm_fwd(x, w, None, LN_EPS, r.half(), 0)),
            "ln residual shape": (ValueError, lambda: ops.layer_norm_fwd(x, w, None, LN_EPS, r[:2], 0)),
            "ln residual contract 1": (ValueError, lambda: ops.layer_norm_fwd(x, w, None, LN_EPS, r, 1)),
            "ln residual contract 4": (ValueError, lambda: ops.layer_norm_fwd(x, w, None, LN_EPS, None, 4)),
        }

    # --- the residual contract ------------------------------------------------------------------------------

    @pytest.mark.guards("ops.residual_contract")
    @pytest.mark.parametrize("convention", ["llama", "gemma"])
    @pytest.mark.parametrize("dtype", DTYPES)
    def test_fp32_residual_contract(self, dtype, convention):
        """convention + 2: rstd and y from the float32 sum s = x + r, residual_out still round_x(s). Every
        backend implements it (CPU kernels, CUDA kernels, the CUDA kernels under the emulation)."""
        be = self.backend
        code = CONV[convention] + 2
        for i, shape in enumerate(be.shapes):
            x, w, _, _, r = _data(shape, dtype, 90 + i)
            r = r * 4  # a residual stream larger than the update, so that rounding x + r matters
            y, h, rstd = be.ops.rms_norm_fwd(be.to(x), be.to(w), be.to(r), EPS, code)
            s = x.float() + r.float()
            assert torch.equal(h.cpu(), s.to(dtype)), "the residual output is the rounded sum either way"
            # the output stage, bit for bit: the convention's casts applied to s and the op's own rstd
            assert torch.equal(y.cpu(), _rms_output(s, rstd.cpu(), w, convention, dtype)), f"{be.name} y from s {shape}"
            es = oracle.rms_norm_forward(s.double().numpy(), None, EPS)
            ers = 1.0 / (s.double().pow(2).mean(-1).add(EPS).sqrt())
            assert ((rstd.cpu().double() - ers).abs() / ers).max() <= 4 * 2.0 ** -24 * (shape[-1] // 2 + 6)
            gain = _np(effective_gain(w, convention))
            bound = tol.convention_forward_bound(s, w, EPS, convention, x_dtype=dtype, w_dtype=dtype)
            tol.assert_within(y.cpu(), es * gain, bound, f"{be.name} fp32 contract {shape}")
            y_hf, h_hf, _ = be.ops.rms_norm_fwd(be.to(x), be.to(w), be.to(r), EPS, CONV[convention])
            assert torch.equal(h_hf, h)
            if dtype == torch.float32:  # round_x(s) = s: the two contracts are the same computation
                assert torch.equal(y_hf, y)
            # without a residual the contract changes nothing
            y0 = be.ops.rms_norm_fwd(be.to(x), be.to(w), None, EPS, code)[0]
            assert torch.equal(y0, be.ops.rms_norm_fwd(be.to(x), be.to(w), None, EPS, CONV[convention])[0])

    @pytest.mark.guards("ops.residual_contract")
    @pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
    def test_fp32_residual_contract_on_rows_that_leave_the_float32_range(self, dtype):
        """Rows whose float32 sum of squares overflows take the pass in double: under the fp32 contract it
        too reads s = x + r (not the rounded h), summed in element order, so every backend gives the same
        bits, and s's own RMS sets the scale."""
        be = self.backend
        x, w, _, _, r = _data((3, 33), dtype, 95)
        x, r = (x * 2.0 ** 70).to(dtype), (r * 2.0 ** 72).to(dtype)  # squares above the float32 range
        for conv in CONV.values():
            y, h, rstd = be.ops.rms_norm_fwd(be.to(x), be.to(w), be.to(r), 0.0, conv + 2)
            s = x.float() + r.float()
            ers = torch.tensor([1.0 / math.sqrt(_seq_sum_sq(row) / row.numel()) for row in s.double()],
                               dtype=torch.float64)
            assert torch.equal(rstd.cpu(), ers.float()), "the double pass rounds rstd once"
            assert torch.equal(h.cpu(), s.to(dtype))
            t = (s.double() * ers[:, None]).float()  # each product rounded once from double
            gain = w.float() if conv == 0 else 1 + w.float()
            want = (t.to(dtype).float() * gain).to(dtype) if conv == 0 else (t * gain).to(dtype)
            assert torch.equal(y.cpu(), want), (be.name, conv)

    @pytest.mark.guards("ops.residual_contract")
    @pytest.mark.parametrize("params", ["wb", "none"])
    @pytest.mark.parametrize("contract", ["hf", "fp32"])
    @pytest.mark.parametrize("dtype", DTYPES, ids=str)
    def test_layer_norm_residual_contracts(self, dtype, contract, params):
        """LayerNorm with the residual add: residual_out is round_x(x + r) bit for bit under both contracts;
        y is within the LayerNorm bound of the float64 oracle applied to what the contract normalizes: the
        rounded h ("hf", code 0) or the float32 sum s ("fp32", code 2)."""
        be = self.backend
        code = {"hf": 0, "fp32": 2}[contract]
        for i, shape in enumerate(be.shapes):
            x, w, b, _, r = _data(shape, dtype, 110 + i)
            x, r = x + 3, r * 4  # an offset for the centring, a residual stream larger than the update
            w, b = (w, b) if params == "wb" else (None, None)
            y, mean, rstd, h = be.ops.layer_norm_fwd(be.to(x), be.to(w), be.to(b), LN_EPS, be.to(r), code)
            assert y.dtype == h.dtype == dtype and y.shape == h.shape == x.shape
            assert mean.dtype == rstd.dtype == torch.float32 and mean.shape == rstd.shape == x.shape[:-1]
            s = x.float() + r.float()
            assert torch.equal(h.cpu(), s.to(dtype)), "the residual output is the rounded sum either way"
            n = h.cpu() if contract == "hf" else s
            tol.assert_within(y.cpu(), oracle.layer_norm_forward(_np(n), _np(w), _np(b), LN_EPS),
                              tol.ln_forward_bound(n, w, b, LN_EPS, dtype), f"{be.name} ln {contract} y {shape}")
            emean = n.double().mean(-1)
            assert (mean.cpu().double() - emean).abs().max() <= 2.0 ** -20 * n.double().abs().mean(-1).max()
            # the same as normalizing n without a residual: h exactly ("hf"); s when it is representable
            if contract == "hf" or dtype == torch.float32:
                y0 = be.ops.layer_norm_fwd(be.to(n.to(dtype)), be.to(w), be.to(b), LN_EPS)[0]
                assert torch.equal(y, y0), f"{be.name} ln {contract}: not the plain LayerNorm of {contract}'s row"
            # the other contract: same residual output; the same y in float32 (round_x(s) = s)
            y2, _, _, h2 = be.ops.layer_norm_fwd(be.to(x), be.to(w), be.to(b), LN_EPS, be.to(r), 2 - code)
            assert torch.equal(h2, h)
            if dtype == torch.float32:
                assert torch.equal(y2, y)
            # without a residual the contract changes nothing
            y0 = be.ops.layer_norm_fwd(be.to(x), be.to(w), be.to(b), LN_EPS, None, code)
            assert torch.equal(y0[0], be.ops.layer_norm_fwd(be.to(x), be.to(w), be.to(b), LN_EPS)[0])
            assert y0[3].shape == (0,)

    @pytest.mark.guards("ops.residual_contract")
    @pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
    def test_layer_norm_fp32_contract_on_rows_that_leave_the_float32_range(self, dtype):
        """LayerNorm rows whose float32 sum of squared deviations overflows take the pass in double; under
        the fp32 contract it reads s = x + r, summed in element order: mean and rstd are the double values
        rounded once, on every backend."""
        be = self.backend
        x, w, b, _, r = _data((3, 33), dtype, 115)
        x, r = (x * 2.0 ** 70).to(dtype), (r * 2.0 ** 72).to(dtype)
        y, mean, rstd, h = be.ops.layer_norm_fwd(be.to(x), be.to(w), be.to(b), 0.0, be.to(r), 2)
        s = x.float() + r.float()
        assert torch.equal(h.cpu(), s.to(dtype))
        for k, row in enumerate(s.double()):
            acc = 0.0
            for v in row.tolist():
                acc += v
            mu = acc / row.numel()
            q = 0.0
            for v in row.tolist():
                q += (v - mu) * (v - mu)
            assert mean[k].item() == float(torch.tensor(mu).float()), (be.name, k)
            assert rstd[k].item() == float(torch.tensor(1.0 / math.sqrt(q / row.numel())).float()), (be.name, k)
        tol.assert_within(y.cpu(), oracle.layer_norm_forward(_np(s), _np(w), _np(b), 0.0),
                          tol.ln_forward_bound(s, w, b, 0.0, dtype), f"{be.name} ln fp32 contract, wide rows")

    @pytest.mark.parametrize("residual", [False, True], ids=["plain", "fp32_residual"])
    def test_layer_norm_constant_rows_whose_sum_overflows(self, residual):
        """A constant row of 1e38s: its float32 sum overflows, but the row has mean 1e38 and variance 0, so
        y is the bias and rstd 1 / sqrt(eps), as for any constant row (not NaN from an Inf mean)."""
        be = self.backend
        for d in sorted({s[-1] for s in be.shapes} | {4}):
            x = torch.tensor([1e38, -3e38, 2.5e38, 1.0], dtype=torch.float32)[:, None].expand(4, d).contiguous()
            b = torch.linspace(-1, 1, d)
            w = 1 + torch.arange(d, dtype=torch.float32) / d
            r = torch.zeros_like(x) if residual else None
            y, mean, rstd, _ = be.ops.layer_norm_fwd(be.to(x), be.to(w), be.to(b), LN_EPS, be.to(r), 2 if residual else 0)
            y, mean, rstd = y.cpu(), mean.cpu(), rstd.cpu()
            assert torch.equal(y, b.expand(4, d)), (be.name, d, y[:, :4])
            assert torch.equal(mean, x[:, 0]), (be.name, d, mean)
            want = torch.full((4,), 1.0 / math.sqrt(float(torch.tensor(LN_EPS, dtype=torch.float32))), dtype=torch.float64)
            torch.testing.assert_close(rstd.double(), want, rtol=2.0 ** -23, atol=0)  # float or double rsqrt

    def test_bad_arguments_raise_type_or_value_errors(self):
        for what, (etype, fn) in self._bad_calls().items():
            assert _err(fn, what) is etype, what

    # --- edge shapes and determinism ----------------------------------------------------------------------

    @pytest.mark.parametrize("dtype", DTYPES, ids=str)
    def test_zero_rows_give_empty_results(self, dtype):
        be = self.backend
        for shape in [(0, 8), (2, 0, 5)]:
            x, w, b, dy, r = (be.to(t) for t in _data(shape, dtype, 80))
            y, h, rstd = be.ops.rms_norm_fwd(x, w, r, EPS, 0)
            assert y.shape == h.shape == x.shape and rstd.shape == x.shape[:-1]
            dx, dw = be.ops.rms_norm_bwd(dy, x, w, rstd, 0)
            assert dx.shape == x.shape and torch.equal(dw.cpu(), torch.zeros(shape[-1]))
            yl, mean, rs = be.ops.layer_norm_fwd(x, w, b, LN_EPS)[:3]
            dxl, dwl, dbl = be.ops.layer_norm_bwd(dy, x, w, mean, rs)
            assert yl.shape == dxl.shape == x.shape
            assert torch.equal(dwl.cpu(), torch.zeros(shape[-1])) and torch.equal(dbl.cpu(), torch.zeros(shape[-1]))

    @pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
    def test_repeated_calls_are_bit_identical(self, dtype):
        be = self.backend
        shape = be.shapes[-1]
        x, w, b, dy, r = (be.to(t) for t in _data(shape, dtype, 90))
        first = None
        for _ in range(3):
            y, h, rstd = be.ops.rms_norm_fwd(x, w, r, EPS, 0)
            dx, dw = be.ops.rms_norm_bwd(dy, h, w, rstd, 0)
            yl, mean, rs = be.ops.layer_norm_fwd(x, w, b, LN_EPS)[:3]
            dxl, dwl, dbl = be.ops.layer_norm_bwd(dy, x, w, mean, rs)
            out = [y, h, rstd, dx, dw, yl, mean, rs, dxl, dwl, dbl]
            if first is None:
                first = [t.clone() for t in out]
            assert all(torch.equal(a, c) for a, c in zip(first, out))


class PythonLayerContractTests:
    """For the backends the Python entry points dispatch to (CPU, CUDA): they raise what the op raises."""

    backend: Backend

    def test_python_layer_raises_the_same_exception_types(self):
        be = self.backend
        from reference_impl.ops import fused_layer_norm, fused_rms_norm

        x, w, _, _, r = (be.to(t) for t in _data((3, 8), torch.float32, 70))
        pairs = {  # (Python layer call, op call) with the same bad argument
            "x int": (lambda: fused_rms_norm(x.int()), lambda: be.ops.rms_norm_fwd(x.int(), None, None, EPS, 0)),
            "x float64": (lambda: fused_rms_norm(x.double()),
                          lambda: be.ops.rms_norm_fwd(x.double(), None, None, EPS, 0)),
            "x 0-d": (lambda: fused_rms_norm(x[0, 0]), lambda: be.ops.rms_norm_fwd(x[0, 0], None, None, EPS, 0)),
            "x empty last dim": (lambda: fused_rms_norm(x[:, :0]),
                                 lambda: be.ops.rms_norm_fwd(x[:, :0], None, None, EPS, 0)),
            "weight dtype": (lambda: fused_rms_norm(x.bfloat16(), w.half()),
                             lambda: be.ops.rms_norm_fwd(x.bfloat16(), w.half(), None, EPS, 0)),
            "weight shape": (lambda: fused_rms_norm(x, w[:7]), lambda: be.ops.rms_norm_fwd(x, w[:7], None, EPS, 0)),
            "residual dtype": (lambda: fused_rms_norm(x, w, residual=r.half()),
                               lambda: be.ops.rms_norm_fwd(x, w, r.half(), EPS, 0)),
            "residual shape": (lambda: fused_rms_norm(x, w, residual=r[:2]),
                               lambda: be.ops.rms_norm_fwd(x, w, r[:2], EPS, 0)),
            "eps negative": (lambda: fused_rms_norm(x, w, -1.0), lambda: be.ops.rms_norm_fwd(x, w, None, -1.0, 0)),
            "eps NaN": (lambda: fused_rms_norm(x, w, math.nan), lambda: be.ops.rms_norm_fwd(x, w, None, math.nan, 0)),
            "eps inf": (lambda: fused_rms_norm(x, w, math.inf), lambda: be.ops.rms_norm_fwd(x, w, None, math.inf, 0)),
            "eps beyond float32": (lambda: fused_rms_norm(x, w, 1e39),
                                   lambda: be.ops.rms_norm_fwd(x, w, None, 1e39, 0)),
            "convention": (lambda: fused_rms_norm(x, w, convention="t5"),
                           lambda: be.ops.rms_norm_fwd(x, w, None, EPS, 4)),
            "residual contract": (lambda: fused_rms_norm(x, w, residual=r, residual_contract="fp16"),
                                  lambda: be.ops.rms_norm_fwd(x, w, r, EPS, 4)),
            "ln bias dtype": (lambda: fused_layer_norm(x.half(), None, w.bfloat16()),
                              lambda: be.ops.layer_norm_fwd(x.half(), None, w.bfloat16(), LN_EPS)),
            "ln eps": (lambda: fused_layer_norm(x, w, None, -1e-5),
                       lambda: be.ops.layer_norm_fwd(x, w, None, -1e-5)),
            "ln residual dtype": (lambda: fused_layer_norm(x, w, residual=r.half()),
                                  lambda: be.ops.layer_norm_fwd(x, w, None, LN_EPS, r.half(), 0)),
            "ln residual shape": (lambda: fused_layer_norm(x, w, residual=r[:2]),
                                  lambda: be.ops.layer_norm_fwd(x, w, None, LN_EPS, r[:2], 0)),
            "ln residual contract": (lambda: fused_layer_norm(x, w, residual=r, residual_contract="fp16"),
                                     lambda: be.ops.layer_norm_fwd(x, w, None, LN_EPS, r, 1)),
            "ln residual_out without residual": (
                lambda: fused_layer_norm(x, w, residual_out=torch.empty_like(x)),
                lambda: be.ops.layer_norm_fwd_out(x, w, None, LN_EPS, None, 0, y=torch.empty_like(x),
                                                  residual_out=torch.empty_like(x))),
            "out dtype": (lambda: fused_rms_norm(x, w, out=torch.empty_like(x).half()),
                          lambda: be.ops.rms_norm_fwd_out(x, w, None, EPS, 0, y=torch.empty_like(x).half(),
                                                          residual_out=None)),
            "out overlaps x": (lambda: fused_rms_norm(x, w, out=x),
                               lambda: be.ops.rms_norm_fwd_out(x, w, None, EPS, 0, y=x, residual_out=None)),
            "out requires grad": (
                lambda: fused_rms_norm(x.clone().requires_grad_(True), w, out=torch.empty_like(x)),
                lambda: be.ops.rms_norm_fwd_out(x.clone().requires_grad_(True), w, None, EPS, 0,
                                                y=torch.empty_like(x), residual_out=None)),
        }
        for what, (py, op) in pairs.items():
            assert _err(py, f"python {what}") is _err(op, f"op {what}"), what
