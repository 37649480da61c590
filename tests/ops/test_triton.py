"""The Triton RMSNorm and LayerNorm (reference_impl/ops/triton_norm.py) against the float64 oracle.

Two backends run the same checks:

- ``interp``: Triton's interpreter on CPU tensors, in every ``make test``. Triton decides when it is first
  imported whether its ``@triton.jit`` functions are compiled or interpreted (``TRITON_INTERPRET=1``), so
  these checks run in one worker subprocess started with that variable; this process, and every other
  test module, keeps the ordinary compiled Triton. The worker receives inputs and returns outputs; all
  comparisons happen here.
- ``cuda``: the compiled kernels on a GPU (marker ``gpu``; skipped without a CUDA device, run by
  ``scripts/gpu_check.sh`` with larger shapes).

Bounds come from the tolerance policy: ``rms_forward_bound`` of :mod:`reference_impl.ops.cuda` (the
``normlab`` op's bound, which charges llama's double rounding), ``tolerances.convention_backward_bounds`` and
``tolerances.ln_forward_bound`` / ``ln_backward_bounds``. Shapes are small: the interpreter runs each
program one after another in NumPy.
"""
from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from reference_impl import conventions as conv
from reference_impl import oracle
from reference_impl import tolerances as tol

REPO = Path(__file__).resolve().parents[2]
EPS = 1e-6
LN_EPS = 1e-5
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
HAS_CUDA = torch.cuda.is_available()

# (shape, block_size): odd widths, a 3-D input, and rows wider than the tile (read in chunks); rows of at
# most 256 without a block_size run several to a program (triton_rows.py): QK-norm's (37, 128) is one
SHAPES = [((3, 1), None), ((2, 7), None), ((2, 3, 33), None), ((37, 128), None), ((2, 1000), None), ((2, 33), 16),
          ((2, 1000), 256)]
# on a GPU every (dtype, weight, convention, tile) is one more compiled kernel: the parametrized tests use
# three shapes there (a small tile, the largest register tile, a chunked row) and
# test_gpu_widths_and_tiles covers the other widths for two configurations
CUDA_SHAPES = [((2, 3, 33), None), ((300, 128), None), ((8, 8192), None), ((4, 8193), None)]
GPU_SHAPES = [((3, 1), None), ((2, 1000), None), ((64, 4096), None), ((2, 16384), None), ((2, 65536), None),
              ((300, 1000), 128), ((5, 4097), 256)]

# --------------------------------------------------------------------------------------------------------
# backends
# --------------------------------------------------------------------------------------------------------

_WORKER = r"""
import io, struct, sys
import torch
inp, out = sys.stdin.buffer, sys.stdout.buffer
sys.stdout = sys.stderr  # only the protocol goes to the pipe
from reference_impl.ops import triton_norm as tn

def recv():
    head = inp.read(8)
    if len(head) < 8:
        return None
    (n,) = struct.unpack("<Q", head)
    return torch.load(io.BytesIO(inp.read(n)), weights_only=False)

def send(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    out.write(struct.pack("<Q", len(data)) + data)
    out.flush()

def call(name, args, kwargs):
    return getattr(tn, name)(*args, **kwargs)

def autograd(name, args, kwargs, grad_positions, out_grads):
    args = list(args)
    for i in grad_positions:
        args[i] = args[i].detach().clone().requires_grad_(True)
    outs = getattr(tn, name)(*args, **kwargs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    pairs = [(o, g) for o, g in zip(outs, out_grads) if g is not None]
    torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
    return tuple(o.detach() for o in outs), [args[i].grad for i in grad_positions]

def state():
    import os
    return {"interpreted": tn.interpreted(), "env": os.environ.get("TRITON_INTERPRET")}

while (req := recv()) is not None:
    try:
        send(("ok", {"call": call, "autograd": autograd, "state": state}[req[0]](*req[1:])))
    except Exception as exc:  # sent back and re-raised with its type in the test process
        send(("error", type(exc).__name__, str(exc)))
"""


class Interp:
    """Triton's interpreter in a worker subprocess (TRITON_INTERPRET=1 only there)."""
    name = "interp"

    def __init__(self):
        env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join(
            p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
        self.proc = subprocess.Popen([sys.executable, "-c", _WORKER], cwd=REPO, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def _request(self, *req):
        buf = io.BytesIO()
        torch.save(req, buf)
        data = buf.getvalue()
        try:
            self.proc.stdin.write(struct.pack("<Q", len(data)) + data)
            self.proc.stdin.flush()
            head = self.proc.stdout.read(8)
        except BrokenPipeError:
            head = b""
        if len(head) < 8:
            raise RuntimeError(f"the interpreter worker died (exit code {self.proc.poll()})")
        (n,) = struct.unpack("<Q", head)
        reply = torch.load(io.BytesIO(self.proc.stdout.read(n)), weights_only=False)
        if reply[0] == "error":
            exc = {"TypeError": TypeError, "ValueError": ValueError}.get(reply[1], RuntimeError)
            raise exc(f"{reply[1]} in the interpreter worker: {reply[2]}" if exc is RuntimeError else reply[2])
        return reply[1]

    def call(self, name, *args, **kwargs):
        return self._request("call", name, args, kwargs)

    def autograd(self, name, args, kwargs, grad_positions, out_grads):
        return self._request("autograd", name, args, kwargs, grad_positions, out_grads)

    def state(self):
        return self._request("state")

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def _to(obj, device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_to(o, device) for o in obj)
    if isinstance(obj, dict):
        return {k: _to(v, device) for k, v in obj.items()}
    return obj


class Cuda:
    """The compiled kernels on the GPU, in this process; results come back to the CPU."""
    name = "cuda"

    def call(self, name, *args, **kwargs):
        from reference_impl.ops import triton_norm as tn

        return _to(getattr(tn, name)(*_to(args, "cuda"), **_to(kwargs, "cuda")), "cpu")

    def autograd(self, name, args, kwargs, grad_positions, out_grads):
        from reference_impl.ops import triton_norm as tn

        args = list(_to(args, "cuda"))
        for i in grad_positions:
            args[i] = args[i].detach().clone().requires_grad_(True)
        outs = getattr(tn, name)(*args, **_to(kwargs, "cuda"))
        outs = outs if isinstance(outs, tuple) else (outs,)
        pairs = [(o, g.cuda()) for o, g in zip(outs, out_grads) if g is not None]
        torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
        return _to(tuple(o.detach() for o in outs), "cpu"), [_to(args[i].grad, "cpu") for i in grad_positions]


@pytest.fixture(scope="module")
def interp_worker():
    worker = Interp()
    yield worker
    worker.close()


GPU = [pytest.mark.gpu, pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device here: run scripts/gpu_check.sh on a GPU")]


@pytest.fixture(params=["interp", pytest.param("cuda", marks=GPU)])
def be(request):
    return request.getfixturevalue("interp_worker") if request.param == "interp" else Cuda()


def _shapes(be):
    return CUDA_SHAPES if be.name == "cuda" else SHAPES


# --------------------------------------------------------------------------------------------------------
# data, oracles, bounds
# --------------------------------------------------------------------------------------------------------

def _data(shape, dtype, seed, wmode="same"):
    g = torch.Generator().manual_seed(seed)
    x = (2.0 * torch.randn(shape, generator=g, dtype=torch.float64)).to(dtype)
    d = shape[-1]
    wd = {"none": None, "same": dtype, "f32": torch.float32}[wmode]
    w = None if wd is None else (1 + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)).to(wd)
    b = None if wd is None else (0.3 * torch.randn(d, generator=g, dtype=torch.float64)).to(wd)
    dy = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    res = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    return x, w, b, dy, res


def _gain(w, convention):
    return None if w is None else conv.effective_gain(w, convention).double().numpy()


def _rms_bound(h, w, convention):
    from reference_impl.ops.cuda import rms_forward_bound

    return rms_forward_bound(h, w, EPS, convention)


def _rstd_ok(rstd, h, eps, centred=False):
    hd = h.double().numpy()
    if centred:
        hd = hd - hd.mean(-1, keepdims=True)
    want = 1.0 / np.sqrt(np.mean(hd * hd, -1) + eps)
    d = h.shape[-1]
    rel = tol.gamma(d // 2 + 6, tol.unit_roundoff(torch.float32)) + tol.gamma(d // 2 + 6, tol.unit_roundoff(torch.float64))
    if centred:  # the mean's error shifts the centred values: LayerNorm's e**2 term, relative to the variance
        e = tol.gamma(d + 1, tol.unit_roundoff(torch.float32)) * np.mean(np.abs(h.double().numpy()), -1)
        rel = rel + e * e * want * want + tol.gamma(d + 1, tol.unit_roundoff(torch.float32))
    tol.assert_within(rstd, want, rel * want, "rstd")


WMODES = [(torch.float32, "none"), (torch.float32, "same"), (torch.bfloat16, "none"), (torch.bfloat16, "same"),
          (torch.bfloat16, "f32"), (torch.float16, "same"), (torch.float16, "f32")]


# --------------------------------------------------------------------------------------------------------
# RMSNorm
# --------------------------------------------------------------------------------------------------------

@pytest.mark.guards("triton.rms_forward", "snippet:triton_kernels.forward", "snippet:triton_norm.host")
@pytest.mark.parametrize("convention", ["llama", "gemma"])
@pytest.mark.parametrize("dtype,wmode", WMODES, ids=lambda v: str(v).replace("torch.", ""))
def test_rms_forward_matches_oracle(be, dtype, wmode, convention):
    for i, (shape, block) in enumerate(_shapes(be)):
        x, w, _, _, _ = _data(shape, dtype, 10 + i, wmode)
        y, h, rstd = be.call("rms_norm_fwd", x, w, None, EPS, convention, block)
        assert h is None and y.dtype == dtype and y.shape == x.shape and rstd.shape == x.shape[:-1]
        want = oracle.rms_norm_forward(x.double().numpy(), _gain(w, convention), EPS)
        tol.assert_within(y, want, _rms_bound(x, w, convention), f"{be.name} {shape} block {block}")
        _rstd_ok(rstd, x, EPS)


def _replay(h, rstd, w, convention):
    """The kernel's elementwise steps in torch, from its own rstd: float32 products, casts to x's dtype."""
    xhat = h.float() * rstd.unsqueeze(-1)
    if w is None:
        return xhat.to(h.dtype)
    if convention == "gemma":
        return (xhat * (1.0 + w.float())).to(h.dtype)
    return (xhat.to(h.dtype).float() * w.float()).to(h.dtype)


@pytest.mark.guards("triton.rms_forward", "triton.casting")
@pytest.mark.parametrize("convention", ["llama", "gemma"])
@pytest.mark.parametrize("dtype,wmode", WMODES, ids=lambda v: str(v).replace("torch.", ""))
def test_casting_order_replays_bit_for_bit(be, dtype, wmode, convention):
    """Given the kernel's rstd, its output is exactly llama's round_x(round_x(h * rstd) * w) or gemma's
    round_x(h * rstd * (1 + w)), bit for bit (a bound alone could not tell one rounding from two)."""
    for i, (shape, block) in enumerate([((4, 33), None), ((2, 150), 64)]):
        x, w, _, _, res = _data(shape, dtype, 15 + i, wmode)
        y, _, rstd = be.call("rms_norm_fwd", x, w, None, EPS, convention, block)
        assert torch.equal(y, _replay(x, rstd, w, convention)), f"{shape} block {block}"
        y, h, rstd = be.call("rms_norm_fwd", x, w, res, EPS, convention, block)
        assert torch.equal(y, _replay(h, rstd, w, convention)), f"{shape} block {block} with residual"


@pytest.mark.guards("triton.rms_forward", "triton.residual")
@pytest.mark.parametrize("convention", ["llama", "gemma"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_residual_add(be, dtype, convention):
    for i, (shape, block) in enumerate(_shapes(be)):
        x, w, _, _, res = _data(shape, dtype, 20 + i)
        y, h, rstd = be.call("rms_norm_fwd", x, w, res, EPS, convention, block)
        h_want = (x.float() + res.float()).to(dtype)  # one fp32 add, one rounding: bit-exact
        assert torch.equal(h, h_want), f"{shape} block {block}"
        want = oracle.rms_norm_forward(h_want.double().numpy(), _gain(w, convention), EPS)
        tol.assert_within(y, want, _rms_bound(h_want, w, convention), f"{be.name} {shape} block {block}")
        _rstd_ok(rstd, h_want, EPS)


def _rms_backward_case(be, shape, block, dtype, wmode, convention, residual, seed):
    x, w, _, dy, res = _data(shape, dtype, seed, wmode)
    args = [x, w, EPS, res if residual else None, convention]
    grads = [0] + ([1] if w is not None else []) + ([3] if residual else [])
    outs, g = be.autograd("triton_rms_norm", args, {"block_size": block}, grads, [dy] + ([None] if residual else []))
    h = (x.float() + res.float()).to(dtype) if residual else x
    dx_want, dw_want = oracle.rms_norm_backward(dy.double().numpy(), h.double().numpy(), _gain(w, convention), EPS)
    bdx, bdw = tol.convention_backward_bounds(dy, h, w, EPS, convention)
    what = f"{be.name} {shape} block {block} {wmode} residual={residual}"
    assert g[0].dtype == dtype
    tol.assert_within(g[0], dx_want, bdx, f"dx {what}")
    if w is not None:
        assert g[1].dtype == w.dtype
        tol.assert_within(g[1], dw_want, bdw, f"dweight {what}")
    if residual:
        assert torch.equal(g[-1], g[0]), "d residual must equal dx: h = x + residual"
    return outs, g


@pytest.mark.guards("triton.backward", "snippet:triton_kernels.backward", "snippet:triton_kernels.partials",
                    "snippet:triton_norm.autograd")
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("convention", ["llama", "gemma"])
@pytest.mark.parametrize("dtype,wmode", [WMODES[i] for i in (0, 1, 3, 4, 5)], ids=lambda v: str(v).replace("torch.", ""))
def test_rms_backward_matches_oracle(be, dtype, wmode, convention, residual):
    shapes = [((3, 1), None), ((2, 3, 33), None), ((3, 1000), None), ((3, 300), 64)]
    for i, (shape, block) in enumerate(CUDA_SHAPES if be.name == "cuda" else shapes):
        _rms_backward_case(be, shape, block, dtype, wmode, convention, residual, 30 + i)


@pytest.mark.guards("triton.residual", "triton.backward")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_residual_stream_gradient_adds_once(be, dtype):
    """With a gradient for the returned h as well, dx = round_x(dh + dh_out), the same for the residual."""
    x, w, _, dy, res = _data((3, 40), dtype, 40)
    dh_out = torch.randn(3, 40, generator=torch.Generator().manual_seed(41)).to(dtype)
    args = [x, w, EPS, res, "llama"]
    _, g0 = be.autograd("triton_rms_norm", args, {}, [0, 3], [dy, None])
    _, g1 = be.autograd("triton_rms_norm", args, {}, [0, 3], [dy, dh_out])
    want = (g0[0].float() + dh_out.float()).to(dtype)
    assert torch.equal(g1[0], want) and torch.equal(g1[1], want)
    _, g2 = be.autograd("triton_rms_norm", args, {}, [0, 3], [None, dh_out])  # only h used downstream
    assert torch.equal(g2[0], dh_out) and torch.equal(g2[1], dh_out)


@pytest.mark.guards("triton.dweight", "snippet:triton_kernels.partials")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_dweight_is_bit_identical_across_runs_and_within_bound_for_any_row_split(be, dtype):
    """Two-stage dweight: repeated runs give the same bits; splitting the rows into 1, 3, 5 or 24 blocks
    changes only the order of the fp32 sums (each result within the policy bound), never dx."""
    n, d = (16, 40) if be.name == "interp" else (8192, 1024)
    x, w, _, dy, _ = _data((n, d), dtype, 50)
    _, _, rstd = be.call("rms_norm_fwd", x, w, None, EPS, "llama", None)
    dx_want, dw_want = oracle.rms_norm_backward(dy.double().numpy(), x.double().numpy(), w.double().numpy(), EPS)
    bdx, bdw = tol.convention_backward_bounds(dy, x, w, EPS, "llama")
    dx0 = None
    splits = [None, 1, 5, n] if be.name == "interp" else [None, 1, 7, 500]
    for parts in splits:
        runs = [be.call("rms_norm_bwd", dy, x, w, rstd, "llama", None, parts) for _ in range(2)]
        (dx_a, dw_a), (dx_b, dw_b) = runs
        assert torch.equal(dw_a, dw_b) and torch.equal(dx_a, dx_b), f"repeat differs with num_partials={parts}"
        tol.assert_within(dw_a, dw_want, bdw, f"dweight num_partials={parts}")
        tol.assert_within(dx_a, dx_want, bdx, f"dx num_partials={parts}")
        if dx0 is None:
            dx0 = dx_a
        assert torch.equal(dx_a, dx0), "dx of a row must not depend on how the rows are split"


@pytest.mark.guards("triton.dweight")
def test_rows_do_not_depend_on_the_batch(be):
    """A row's y and dx are the same bits alone or among other rows (no cross-row state)."""
    x, w, _, dy, _ = _data((6, 50), torch.bfloat16, 60)
    y_all, _, r_all = be.call("rms_norm_fwd", x, w, None, EPS, "llama", None)
    dx_all, _ = be.call("rms_norm_bwd", dy, x, w, r_all, "llama", None, None)
    y_one, _, r_one = be.call("rms_norm_fwd", x[4:5], w, None, EPS, "llama", None)
    dx_one, _ = be.call("rms_norm_bwd", dy[4:5], x[4:5], w, r_one, "llama", None, None)
    assert torch.equal(y_all[4:5], y_one) and torch.equal(dx_all[4:5], dx_one)


# rows that fit the block-row kernel, with row counts that leave its last program partly empty
SHORT_ROWS = [(37, 64), (19, 128), (9, 256), (5, 1), (3, 2, 33)]


@pytest.mark.guards("triton.short_rows", "snippet:triton_rows.rows")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_block_rows_match_one_row_per_program(be, dtype):
    """The block-row forward (several rows per program) against the one-row kernel (a given block_size)
    and the oracle, RMSNorm with and without residual and LayerNorm. Under the interpreter, whose sums are
    NumPy's, the two give the same bits; compiled, the reduction's order may differ, so the bound decides."""
    for i, shape in enumerate(SHORT_ROWS):
        d = shape[-1]
        tile = max(16, 1 << (d - 1).bit_length())
        x, w, b, _, res = _data(shape, dtype, 70 + i, ("same", "f32")[i % 2] if dtype != torch.float32 else "same")
        conv = ("llama", "gemma")[i % 2]
        for r in (None, res):
            rows = be.call("rms_norm_fwd", x, w, r, EPS, conv, None)
            one = be.call("rms_norm_fwd", x, w, r, EPS, conv, tile)
            h = x if r is None else (x.float() + r.float()).to(dtype)
            want = oracle.rms_norm_forward(h.double().numpy(), _gain(w, conv), EPS)
            tol.assert_within(rows[0], want, _rms_bound(h, w, conv), f"{be.name} rows {shape}")
            _rstd_ok(rows[2], h, EPS)
            if r is not None:
                assert torch.equal(rows[1], h)
            if be.name == "interp":
                assert all(torch.equal(a, c) for a, c in zip(rows, one) if a is not None), shape
        y, mean, rstd = be.call("layer_norm_fwd", x, w, b, LN_EPS, None)
        want = oracle.layer_norm_forward(x.double().numpy(), w.double().numpy(), b.double().numpy(), LN_EPS)
        tol.assert_within(y, want, tol.ln_forward_bound(x, w, b, LN_EPS, dtype), f"{be.name} LN rows {shape}")
        if be.name == "interp":
            one = be.call("layer_norm_fwd", x, w, b, LN_EPS, tile)
            assert torch.equal(y, one[0]) and torch.equal(mean, one[1]) and torch.equal(rstd, one[2]), shape


@pytest.mark.guards("triton.short_rows", "triton.dweight")
def test_block_rows_do_not_depend_on_the_batch(be):
    """A short row's output is the same bits alone, at another place in its program's tile, or batched."""
    x, w, _, _, _ = _data((37, 128), torch.bfloat16, 75)
    y_all = be.call("rms_norm_fwd", x, w, None, EPS, "llama", None)[0]
    for lo, hi in ((0, 1), (13, 14), (5, 37)):
        assert torch.equal(be.call("rms_norm_fwd", x[lo:hi], w, None, EPS, "llama", None)[0], y_all[lo:hi]), (lo, hi)


# --------------------------------------------------------------------------------------------------------
# LayerNorm (the same kernels with IS_RMS=False)
# --------------------------------------------------------------------------------------------------------

@pytest.mark.guards("triton.layer_norm")
@pytest.mark.parametrize("dtype,wmode", [(torch.float32, "same"), (torch.float32, "none"), (torch.bfloat16, "same"),
                                         (torch.float16, "f32")],
                         ids=lambda v: str(v).replace("torch.", ""))
def test_layer_norm_matches_oracle(be, dtype, wmode):
    shapes = [((3, 1), None), ((2, 7), None), ((2, 3, 33), None), ((2, 1000), None), ((2, 300), 64)]
    for i, (shape, block) in enumerate(CUDA_SHAPES if be.name == "cuda" else shapes):
        x, w, b, dy, _ = _data(shape, dtype, 70 + i, wmode)
        x = x + 3.0  # an offset, so the centring matters
        x = x.to(dtype)
        outs, g = be.autograd("triton_layer_norm", [x, w, b, LN_EPS], {"block_size": block},
                              [0] + ([1, 2] if w is not None else []), [dy])
        xd = x.double().numpy()
        wd = None if w is None else w.double().numpy()
        bd = None if b is None else b.double().numpy()
        what = f"{be.name} {shape} block {block} {wmode}"
        tol.assert_within(outs[0], oracle.layer_norm_forward(xd, wd, bd, LN_EPS),
                          tol.ln_forward_bound(x, w, b, LN_EPS, dtype), f"forward {what}")
        dx_w, dw_w, db_w = oracle.layer_norm_backward(dy.double().numpy(), xd, wd, bd, LN_EPS)
        bdx, bdw, bdb = tol.ln_backward_bounds(dy, x, w, b, LN_EPS, dtype, None if w is None else w.dtype)
        tol.assert_within(g[0], dx_w, bdx, f"dx {what}")
        if w is not None:
            assert g[1].dtype == w.dtype and g[2].dtype == b.dtype
            tol.assert_within(g[1], dw_w, bdw, f"dweight {what}")
            tol.assert_within(g[2], db_w, bdb, f"dbias {what}")
        _, mean, rstd = be.call("layer_norm_fwd", x, w, b, LN_EPS, block)
        tol.assert_within(mean, xd.mean(-1), tol.gamma(shape[-1] + 1, tol.unit_roundoff(torch.float32))
                          * np.abs(xd).mean(-1), f"mean {what}")
        _rstd_ok(rstd, x, LN_EPS, centred=True)


# --------------------------------------------------------------------------------------------------------
# the interpreter, the environment, bad input
# --------------------------------------------------------------------------------------------------------

@pytest.mark.guards("triton.interpreter")
def test_interpreter_runs_only_in_the_worker(interp_worker):
    """TRITON_INTERPRET=1 is set in the worker alone: this process keeps compiled Triton."""
    from reference_impl.ops import triton_norm as tn

    assert interp_worker.state() == {"interpreted": True, "env": "1"}
    if os.environ.get("TRITON_INTERPRET") in (None, "", "0"):  # unless the whole run was started with it
        assert not tn.interpreted()
        with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
            tn.triton_rms_norm(torch.ones(2, 4))


def _bf16_edges():
    g = torch.Generator().manual_seed(80)
    edges = torch.tensor([1.0 + 2**-8, 1.0 + 3 * 2**-8, 1.0 + 2**-8 + 2**-20, 2.0 - 2**-10, 1.0 - 2**-12, -1.7, 0.1,
                          1e-40, -3e-39, 3.4e38, float("inf"), -float("inf"), -0.0, 0.0, float("nan")])
    return torch.cat([edges, torch.randn(4000, generator=g) * 10.0 ** torch.randint(-40, 38, (4000,), generator=g)])


def _same_bits(a, b):
    nan = torch.isnan(a.float())
    return torch.equal(nan, torch.isnan(b.float())) and torch.equal(a[~nan].view(torch.int16), b[~nan].view(torch.int16))


@pytest.mark.guards("triton.interpreter")
def test_kernel_rounding_matches_torch_and_the_interpreter_cast_does_not(be):
    """The kernels' rounding to bfloat16/float16 gives torch's round-to-nearest-even bits, ties,
    subnormals, overflow and infinities included. Under the interpreter this needs the integer path:
    the interpreter's own float32 -> bfloat16 cast truncates (if a Triton release fixes that, the last
    assertion fails and the integer path can go)."""
    v = _bf16_edges()
    assert _same_bits(be.call("round_like_kernels", v, torch.bfloat16), v.to(torch.bfloat16))
    assert _same_bits(be.call("round_like_kernels", v, torch.float16), v.to(torch.float16))
    native = be.call("round_like_kernels", v, torch.bfloat16, False)
    if be.name == "cuda":
        assert _same_bits(native, v.to(torch.bfloat16))
    else:
        finite = torch.isfinite(v) & (v.abs() > 1e-30) & (v.abs() < 1e38)
        assert not _same_bits(native, v.to(torch.bfloat16))
        assert torch.all(native[finite].float().abs() <= v[finite].abs()), "expected truncation toward zero"


@pytest.mark.guards("triton.errors")
def test_bad_input_is_a_clear_error():
    from reference_impl.ops import triton_norm as tn

    x = torch.ones(2, 4)
    cases = [
        (TypeError, "torch.Tensor", lambda: tn.triton_rms_norm([1.0, 2.0])),
        (TypeError, "float64", lambda: tn.triton_rms_norm(x.double())),
        (TypeError, "integer", lambda: tn.triton_rms_norm(torch.ones(2, 4, dtype=torch.int32))),
        (ValueError, "0-d", lambda: tn.triton_rms_norm(torch.tensor(1.0))),
        (ValueError, "empty last dimension", lambda: tn.triton_rms_norm(torch.ones(2, 0))),
        (ValueError, r"expected shape \(4,\)", lambda: tn.triton_rms_norm(x, torch.ones(5))),
        (TypeError, "x's dtype", lambda: tn.triton_rms_norm(x.half(), torch.ones(4, dtype=torch.bfloat16))),
        (ValueError, "non-negative", lambda: tn.triton_rms_norm(x, None, -1.0)),
        (TypeError, "real number", lambda: tn.triton_rms_norm(x, None, "1e-6")),
        (ValueError, "unknown convention", lambda: tn.triton_rms_norm(x, convention="t5")),
        (TypeError, "convention must be a string", lambda: tn.triton_rms_norm(x, convention=0)),
        (ValueError, "residual has shape", lambda: tn.triton_rms_norm(x, residual=torch.ones(2, 5))),
        (TypeError, "residual has dtype", lambda: tn.triton_rms_norm(x, residual=torch.ones(2, 4).half())),
        (ValueError, "power of two", lambda: tn.triton_rms_norm(x, block_size=24)),
        (ValueError, "power of two", lambda: tn.triton_rms_norm(x, block_size=8)),
        (TypeError, "block_size must be an int", lambda: tn.triton_rms_norm(x, block_size=16.0)),
        (ValueError, r"expected shape \(4,\)", lambda: tn.triton_layer_norm(x, None, torch.ones(3))),
        (TypeError, "bias has dtype", lambda: tn.triton_layer_norm(x, None, torch.ones(4, dtype=torch.int64))),
        (ValueError, "dy has shape", lambda: tn.rms_norm_bwd(torch.ones(2, 5), x, None, torch.ones(2))),
        (ValueError, "num_partials", lambda: tn.rms_norm_bwd(x, x, None, torch.ones(2), num_partials=0)),
        (ValueError, "meta", lambda: tn.triton_rms_norm(torch.ones(2, 4, device="meta"))),
    ]
    for exc, pattern, fn in cases:
        with pytest.raises(exc, match=pattern):
            fn()


@pytest.mark.guards("triton.errors")
def test_bad_input_raises_the_same_error_in_the_interpreter(interp_worker):
    """The checks run before any kernel, so the interpreter worker reports them the same way."""
    x = torch.ones(2, 4)
    with pytest.raises(ValueError, match="unknown convention"):
        interp_worker.call("triton_rms_norm", x, None, 1e-6, None, "t5")
    with pytest.raises(TypeError, match="float64"):
        interp_worker.call("triton_layer_norm", x.double())
    y, h, rstd = interp_worker.call("rms_norm_fwd", torch.ones(0, 4), None, None, EPS, "llama", None)
    assert y.shape == (0, 4) and rstd.shape == (0,)  # no rows: nothing to launch, empty results


@pytest.mark.guards("triton.rms_forward", "triton.residual", "triton.backward", "triton.layer_norm")
@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device here: run scripts/gpu_check.sh on a GPU")
@pytest.mark.parametrize("dtype,wmode,convention", [(torch.bfloat16, "same", "llama"), (torch.float32, "f32", "gemma")],
                         ids=["bf16-llama", "fp32-gemma"])
def test_gpu_widths_and_tiles(dtype, wmode, convention):
    """The other widths on the GPU: one element, 1000, 4096, 16384 and 65536 (chunked), forced small
    tiles; forward with a residual and backward through autograd, RMSNorm and LayerNorm."""
    be = Cuda()
    for i, (shape, block) in enumerate(GPU_SHAPES):
        _rms_backward_case(be, shape, block, dtype, wmode, convention, True, 100 + i)
        x, w, b, dy, _ = _data(shape, dtype, 120 + i, wmode)
        outs, g = be.autograd("triton_layer_norm", [x, w, b, LN_EPS], {"block_size": block}, [0, 1, 2], [dy])
        xd, wd, bd = x.double().numpy(), w.double().numpy(), b.double().numpy()
        tol.assert_within(outs[0], oracle.layer_norm_forward(xd, wd, bd, LN_EPS),
                          tol.ln_forward_bound(x, w, b, LN_EPS, dtype), f"LayerNorm {shape} block {block}")
        bdx, bdw, bdb = tol.ln_backward_bounds(dy, x, w, b, LN_EPS, dtype, w.dtype)
        for got, want, bound, name in zip(g, oracle.layer_norm_backward(dy.double().numpy(), xd, wd, bd, LN_EPS),
                                          (bdx, bdw, bdb), ("dx", "dweight", "dbias")):
            tol.assert_within(got, want, bound, f"LayerNorm {name} {shape} block {block}")


@pytest.mark.guards("triton.rms_forward")
@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device here: run scripts/gpu_check.sh on a GPU")
def test_matches_the_cuda_op_on_the_gpu():
    """The Triton forward and the normlab CUDA op agree within twice the policy bound (two roundings
    of the same math), on the benchmark's bf16 shapes."""
    from reference_impl.ops import fused_rms_norm
    from reference_impl.ops import triton_norm as tn

    for shape in [(4096, 1024), (512, 8192)]:
        for convention in ("llama", "gemma"):
            x, w, _, _, _ = _data(shape, torch.bfloat16, 90)
            y_t = tn.triton_rms_norm(x.cuda(), w.cuda(), EPS, convention=convention).cpu()
            y_c = fused_rms_norm(x.cuda(), w.cuda(), EPS, convention=convention).cpu()
            tol.assert_within(y_t, y_c.double().numpy(), 2 * _rms_bound(x, w, convention), f"{shape} {convention}")


# --------------------------------------------------------------------------------------------------------
# the compiled kernels, without a GPU: Triton compiles for sm_90 on any machine
# --------------------------------------------------------------------------------------------------------

def _sig(kernel, dtype, **const):
    """A compile signature: pointers to dtype for the data, fp32 for statistics and partials."""
    f32 = {"MEAN", "RSTD", "C1", "C2", "C3", "DWP", "DBP", "PART"}
    ints = {"d", "n", "n_rows", "n_part", "rows_per_prog"}
    sig = {}
    for name in kernel.arg_names:
        if name in const:
            sig[name] = "constexpr"
        elif name in ints:
            sig[name] = "i32"
        elif name in ("d_f", "eps"):
            sig[name] = "fp32"
        elif name in f32 or (kernel.fn.__name__ == "_round_kernel" and name == "X"):
            sig[name] = "*fp32"
        else:
            sig[name] = "*" + dtype
    return sig


@pytest.mark.guards("triton.compiled", "triton.short_rows")
def test_kernels_compile_for_hopper_without_spills():
    """Each kernel compiles for sm_90 at the launch settings the host code picks; ptxas places no value
    on the stack (no register spills), and the compiled casts to bfloat16 round to nearest (cvt.rn)."""
    import re

    import triton
    import triton.backends.nvidia as nv
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from reference_impl.ops import triton_norm as tn

    if tn.interpreted():
        pytest.skip("this run imported triton with TRITON_INTERPRET=1: nothing is compiled")
    cuobjdump = Path(nv.__file__).parent / "bin" / "cuobjdump"
    assert cuobjdump.exists(), f"Triton's CUDA backend ships cuobjdump at {cuobjdump}"
    base = dict(IS_RMS=True, GEMMA=False, HAS_W=True, HAS_B=False, BF16_BY_BITS=False)
    cases = []
    for dtype, d in (("bf16", 8192), ("fp32", 8192), ("bf16", 1000), ("fp32", 16384)):
        block, single, fwd_warps, bwd_warps = tn._settings(d, None)
        c = dict(base, BLOCK=block, SINGLE=single)
        cases.append((tn._norm_fwd_kernel, dtype, fwd_warps, dict(c, HAS_RES=True)))
        if dtype == "bf16":  # the "fp32" residual contract: the float32 sum is normalized
            cases.append((tn._norm_fwd_kernel, dtype, fwd_warps, dict(c, HAS_RES=True, RES_FP32=True)))
        cases.append((tn._norm_bwd_kernel, dtype, bwd_warps, c))
        if not single:
            cases.append((tn._norm_bwd_row_stats_kernel, dtype, fwd_warps,
                          dict(IS_RMS=True, GEMMA=False, HAS_W=True, BLOCK=block)))
    block, single, fwd_warps, bwd_warps = tn._settings(4096, None)  # LayerNorm
    ln = dict(base, IS_RMS=False, HAS_B=True, BLOCK=block, SINGLE=single)
    cases += [(tn._norm_fwd_kernel, "bf16", fwd_warps, dict(ln, HAS_RES=False)), (tn._norm_bwd_kernel, "bf16", bwd_warps, ln)]
    from reference_impl.ops import triton_rows

    for dtype, d in (("bf16", 64), ("bf16", 128), ("fp32", 256)):  # the block-row forward of short rows
        block, rows = triton_rows.rows_settings(d)
        cases.append((triton_rows._norm_fwd_rows_kernel, dtype, triton_rows.ROWS_WARPS,
                      dict(base, HAS_RES=True, BLOCK=block, ROWS=rows)))
    cases.append((tn._sum_partials_kernel, "bf16", 4, dict(BLOCK_P=tn.PARTIAL_BLOCK_ROWS, BLOCK_C=tn.PARTIAL_BLOCK_COLS,
                                                           BF16_BY_BITS=False)))
    for kernel, dtype, warps, const in cases:
        k = triton.compile(ASTSource(kernel, _sig(kernel, dtype, **const), const), target=GPUTarget("cuda", 90, 32),
                           options={"num_warps": warps})
        cubin = Path(os.environ.get("TMPDIR", "/tmp")) / f"normlab_triton_{os.getpid()}.cubin"
        cubin.write_bytes(k.asm["cubin"])
        try:
            usage = subprocess.run([str(cuobjdump), "--dump-resource-usage", str(cubin)], capture_output=True,
                                   text=True, check=True).stdout
        finally:
            cubin.unlink()
        stack = [int(s) for s in re.findall(r"STACK:(\d+)", usage)]
        what = f"{kernel.fn.__name__} {dtype} {const} num_warps={warps}"
        assert stack and max(stack) == 0, f"{what}: stack frame {stack} bytes (spills)\n{usage}"
        if dtype == "bf16":
            casts = re.findall(r"cvt\.(\w+)\.bf16\.f32", k.asm["ptx"]) + re.findall(r"cvt\.(\w+)\.bf16x2\.f32", k.asm["ptx"])
            assert casts and set(casts) == {"rn"}, f"{what}: bf16 conversions {sorted(set(casts))}"
