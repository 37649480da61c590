"""Inputs that once crashed the native ops or gave a silently wrong answer, each checked against float64.

- ``out=`` at an odd byte address (a view into a byte buffer, a memory-mapped file with an odd header)
  reached the streaming stores unaligned and killed the process: run in a child process, every
  instruction set, both norms, every dtype.
- Finite rows above about 1.8e19 in magnitude overflowed the float32 sum of squares (outputs all zero);
  rows below about 1e-19 with ``eps = 0`` underflowed it (outputs infinite). The kernels take a second,
  wide pass for exactly those rows: CPU, the CUDA kernels under their CPU emulation, Triton's interpreter.
- LayerNorm of a row whose mean is a million times its spread leaked the rounding of the float32 mean
  into the output (4 % off); one correction step of the mean removes it, forward and (CPU, Triton)
  backward.
- Forward-mode AD and ``torch.func.grad`` over the fused ops raise an error naming the op.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from reference_impl import layer_norm, rms_norm
from reference_impl.ops import fused_layer_norm, fused_rms_norm

REPO = Path(__file__).resolve().parents[2]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _child(script: str, **env) -> subprocess.CompletedProcess:
    full = dict(os.environ, PYTHONPATH=str(REPO), **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=REPO, env=full,
                          capture_output=True, text=True, timeout=600)


# --- out= at an odd address ----------------------------------------------------------------------------

_UNALIGNED = r"""
import torch
from reference_impl.ops import fused_layer_norm, fused_rms_norm

def odd(shape, dtype, offset):
    n = shape[0] * shape[1]
    es = torch.empty((), dtype=dtype).element_size()
    return torch.frombuffer(bytearray(n * es + 64), dtype=dtype, offset=offset, count=n).view(shape)

bad = []
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    for shape in ((1024, 1024), (33, 1027), (5, 7)):
        x = torch.randn(shape).to(dtype)
        r = torch.randn(shape).to(dtype)
        for off in (1, 3):
            out, res_out, xo = odd(shape, dtype, off), odd(shape, dtype, off + 2), odd(shape, dtype, off)
            xo.copy_(x)
            fused_rms_norm(xo, out=out)
            bad += [] if torch.equal(out, fused_rms_norm(x)) else [("rms", dtype, shape, off)]
            fused_rms_norm(x, residual=r, out=out, residual_out=res_out)
            y, h = fused_rms_norm(x, residual=r)
            bad += [] if torch.equal(out, y) and torch.equal(res_out, h) else [("rms+res", dtype, shape, off)]
            fused_layer_norm(xo, out=out)
            bad += [] if torch.equal(out, fused_layer_norm(x)) else [("ln", dtype, shape, off)]
print("MISMATCH", bad) if bad else print("OK")
"""


@pytest.mark.guards("fused.out_unaligned")
@pytest.mark.parametrize("isa", ["avx512bf16", "avx512", "avx2", "scalar"])
@pytest.mark.parametrize("stream", ["0", None], ids=["stream_always", "stream_default"])
def test_out_at_an_odd_address_is_written_not_a_crash(isa, stream):
    """A 4 MiB out= (streaming stores by default) and every size with NORMLAB_STREAM_BYTES=0, at byte
    offsets 1 and 3: the result equals the allocating op's, and the child process exits normally."""
    env = {"NORMLAB_CPU_ISA": isa}
    if stream is not None:
        env["NORMLAB_STREAM_BYTES"] = stream
    done = _child(_UNALIGNED, **env)
    assert done.returncode == 0, f"child died with {done.returncode} (signal {-done.returncode}): {done.stderr[-2000:]}"
    assert done.stdout.strip().endswith("OK"), done.stdout[-2000:]


# --- rows whose float32 sum overflows or underflows -------------------------------------------------------

def _rel_err(got, want) -> float:
    got, want = got.double(), want.double()
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-300))


EXTREME = [(1e20, 1e-6), (3e37, 1e-6), (1e-25, 0.0), (1e-30, 1e-30), (1e-25, 1e-6)]


def _extreme_rows(scale, dtype, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, d, generator=g, dtype=torch.float64) * scale
    x[1] *= 1e-3  # rows of several magnitudes side by side
    x[2, : d // 2] = 0.0
    return x.to(dtype)


def _bound(dtype) -> float:
    return 4 * torch.finfo(dtype).eps  # a few roundings of the output dtype, as for an ordinary row


@pytest.mark.guards("fused.extreme_rows")
# float16 is not among them: its values (6e-8 to 65504) square to float32's normal range
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("scale,eps", EXTREME)
@pytest.mark.parametrize("d", [7, 1000, 4104])
def test_rows_beyond_the_float32_sum_of_squares_are_normalized_right(dtype, scale, eps, d):
    x = _extreme_rows(scale, torch.float32, d).to(dtype)
    assert torch.isfinite(x).all() and not (x == 0).all(-1).any()
    w = torch.linspace(0.5, 1.5, d).to(dtype)
    for conv in ("llama", "gemma"):
        y = fused_rms_norm(x, w, eps, convention=conv)
        gain = w.double() if conv == "llama" else 1 + w.double()
        want = rms_norm(x.double(), gain, eps)
        assert torch.isfinite(y).all(), (conv, y)
        assert _rel_err(y, want) <= 2 * _bound(dtype), (conv, _rel_err(y, want))
    y = fused_layer_norm(x, w, w, eps)
    want = layer_norm(x.double(), w.double(), w.double(), eps)
    assert torch.isfinite(y).all()
    assert _rel_err(y, want) <= 2 * _bound(dtype), _rel_err(y, want)


@pytest.mark.guards("fused.extreme_rows")
def test_huge_rows_with_a_fused_residual_and_the_saved_statistics():
    """h = x + residual of magnitude 1e25 is normalized from h; rstd and mean are the float64 values,
    rounded to float32; the backward of such a row is finite and matches float64."""
    g = torch.Generator().manual_seed(5)
    x, r = (torch.randn(3, 64, generator=g) * 1e25 for _ in range(2))
    y, h = fused_rms_norm(x, None, 1e-6, residual=r)
    assert _rel_err(y, rms_norm(h.double(), None, 1e-6)) <= 8 * torch.finfo(torch.float32).eps
    _, _, rstd = torch.ops.normlab.rms_norm_fwd(x, None, None, 1e-6, 0)
    want = 1 / (x.double() ** 2).mean(-1).add(1e-6).sqrt()
    assert _rel_err(rstd, want) <= 4 * torch.finfo(torch.float32).eps
    _, mean, rstd = torch.ops.normlab.layer_norm_fwd(x, None, None, 1e-5)[:3]
    assert _rel_err(mean, x.double().mean(-1)) <= 4 * torch.finfo(torch.float32).eps
    xr, xd = x.clone().requires_grad_(), x.double().requires_grad_()
    dy = torch.randn(3, 64, generator=g)
    fused_rms_norm(xr, None, 1e-6).backward(dy)
    rms_norm(xd, None, 1e-6).backward(dy.double())
    assert torch.isfinite(xr.grad).all() and _rel_err(xr.grad, xd.grad) <= 1e-5


@pytest.mark.guards("fused.extreme_rows")
def test_non_finite_rows_still_propagate():
    """Inf and NaN rows take the float32 result as before: NaN where the float64 reference has NaN."""
    x = torch.randn(3, 40)
    x[0, 3], x[1, 5] = float("inf"), float("nan")
    for got, want in ((fused_rms_norm(x), rms_norm(x.double())), (fused_layer_norm(x), layer_norm(x.double()))):
        assert torch.equal(torch.isnan(got[:2]), torch.isnan(want[:2]))
        assert torch.isfinite(got[2]).all()


# --- LayerNorm of a row with a large mean ----------------------------------------------------------------

@pytest.mark.guards("fused.large_mean")
@pytest.mark.parametrize("offset", [1e3, 1e5, 1e6, -3e6])
@pytest.mark.parametrize("d", [64, 1024, 4104])
def test_layer_norm_of_a_row_with_a_large_mean(offset, d):
    """x = offset + N(0, 1) in float32: the output and dx match float64 of the same float32 values to
    1e-5 (the rounded mean alone would be 4 % off at 1e6)."""
    g = torch.Generator().manual_seed(int(abs(offset)) % 1000 + d)
    x = (offset + torch.randn(6, d, generator=g, dtype=torch.float64)).float()
    w = torch.linspace(0.5, 1.5, d)
    y = fused_layer_norm(x, w, None)
    want = layer_norm(x.double(), w.double(), None)
    assert (y.double() - want).abs().max() <= 1e-5 * max(1.0, float(want.abs().max()))
    xr, xd = x.clone().requires_grad_(), x.double().requires_grad_()
    dy = torch.randn(6, d, generator=g)
    fused_layer_norm(xr, w, None).backward(dy)
    layer_norm(xd, w.double(), None).backward(dy.double())
    assert (xr.grad.double() - xd.grad).abs().max() <= 1e-4 * float(xd.grad.abs().max())


# --- the CUDA kernels under their CPU emulation ----------------------------------------------------------

@pytest.fixture(scope="module")
def emu():
    from reference_impl.ops.build import NativeBuildError, load_emulation_library

    try:
        load_emulation_library()
    except NativeBuildError as exc:
        pytest.fail(f"the CUDA emulation must build here (CUDA headers at CUDA_HOME): {exc}")
    return torch.ops.normlab_emu


@pytest.mark.guards("fused.extreme_rows", "fused.large_mean")
@pytest.mark.parametrize("d", [7, 1000, 4104, 8200])
def test_cuda_kernels_extreme_rows_and_large_mean_under_emulation(emu, d):
    """The register path (short rows) and the streaming path (8200 float32 > 512 threads x 8 vectors x 4)."""
    for scale, eps in EXTREME:
        for dtype in (torch.float32, torch.bfloat16):
            x = _extreme_rows(scale, torch.float32, d).to(dtype)
            if not torch.isfinite(x).all() or (x == 0).all(-1).any():
                continue
            y, _, _ = emu.rms_norm_fwd(x, None, None, eps, 0)
            assert _rel_err(y, rms_norm(x.double(), None, eps)) <= 2 * _bound(dtype), (scale, eps, dtype)
            res = torch.zeros_like(x)
            y, h, _ = emu.rms_norm_fwd(x, torch.ones(d, dtype=dtype), res, eps, 1)
            assert _rel_err(y, rms_norm(h.double(), 2 * torch.ones(d, dtype=torch.float64), eps)) <= 2 * _bound(dtype)
            y, mean, _ = emu.layer_norm_fwd(x, None, None, eps)[:3]
            assert _rel_err(y, layer_norm(x.double(), None, None, eps)) <= 2 * _bound(dtype), (scale, eps, dtype)
    x = (1e6 + torch.randn(3, d, dtype=torch.float64)).float()
    y, mean, _ = emu.layer_norm_fwd(x, None, None, 1e-5)[:3]
    assert (y.double() - layer_norm(x.double())).abs().max() <= 1e-5 * 5
    assert (mean.double() - x.double().mean(-1)).abs().max() <= 0.07  # the mean itself: half an ulp of 1e6


# --- Triton, under its interpreter ----------------------------------------------------------------------

_TRITON = r"""
import torch
from reference_impl import layer_norm, rms_norm
from reference_impl.ops import triton_norm as tn
assert tn.interpreted()
def rel(a, b):
    return float((a.double() - b.double()).abs().max() / b.double().abs().max())
worst = 0.0
for d, block in ((300, None), (300, 64)):  # one tile, and chunks of 64
    for scale, eps in ((1e20, 1e-6), (3e37, 1e-6), (1e-25, 0.0), (1e-25, 1e-6)):
        x = torch.randn(3, d, dtype=torch.float64) * scale
        x[1] *= 1e-3
        x = x.float()
        worst = max(worst, rel(tn.rms_norm_fwd(x, None, None, eps, block_size=block)[0], rms_norm(x.double(), None, eps)))
        worst = max(worst, rel(tn.layer_norm_fwd(x, None, None, eps, block_size=block)[0], layer_norm(x.double(), None, None, eps)))
    x = (1e6 + torch.randn(3, d, dtype=torch.float64)).float()
    y = tn.layer_norm_fwd(x, None, None, 1e-5, block_size=block)[0]
    big_mean = float((y.double() - layer_norm(x.double())).abs().max())
    assert big_mean <= 5e-5, big_mean
    xr, xd, dy = x.clone().requires_grad_(), x.double().requires_grad_(), torch.randn(3, d)
    tn.triton_layer_norm(xr, block_size=block).backward(dy)
    layer_norm(xd).backward(dy.double())
    big_mean_dx = float((xr.grad.double() - xd.grad).abs().max() / xd.grad.abs().max())
    assert big_mean_dx <= 1e-4, big_mean_dx
x = torch.randn(2, 64)
x[0, 3], x[1, 5] = float("inf"), float("nan")
assert torch.isnan(tn.rms_norm_fwd(x)[0][1]).all() and torch.isnan(tn.rms_norm_fwd(x)[0][0, 3])
print("WORST", worst)
"""


@pytest.mark.guards("fused.extreme_rows", "fused.large_mean")
def test_triton_kernels_extreme_rows_and_large_mean_in_the_interpreter():
    done = _child(_TRITON, TRITON_INTERPRET="1")
    assert done.returncode == 0, done.stderr[-3000:]
    worst = float(done.stdout.split("WORST")[-1])
    assert worst <= 2 * torch.finfo(torch.float32).eps, worst


# --- transforms --------------------------------------------------------------------------------------------

@pytest.mark.guards("fused.transforms")
@pytest.mark.parametrize("fn", [fused_rms_norm, fused_layer_norm], ids=["rms", "ln"])
def test_forward_mode_ad_and_func_grad_raise_naming_the_op(fn):
    import torch.autograd.forward_ad as fwad

    x, t = torch.randn(3, 8), torch.randn(3, 8)
    name = fn.__name__
    with pytest.raises(NotImplementedError, match=f"{name} does not support forward-mode AD"):
        torch.func.jvp(fn, (x,), (t,))
    with fwad.dual_level(), pytest.raises(NotImplementedError, match=f"{name} does not support forward-mode AD"):
        fn(fwad.make_dual(x, t))
    w = torch.ones(8)
    with fwad.dual_level(), pytest.raises(NotImplementedError, match=name):
        fn(x, fwad.make_dual(w, torch.ones(8)))
    with pytest.raises(NotImplementedError, match=f"{name} does not support torch.func.grad"):
        torch.func.grad(lambda a: fn(a).sum())(x)
    with pytest.raises(NotImplementedError, match=name):
        torch.func.vmap(torch.func.grad(lambda a: fn(a).sum()))(x)
    # vmap alone is fine: the op runs per batch entry, the same rows
    assert torch.equal(torch.func.vmap(fn)(x.view(3, 1, 8)).view(3, 8), fn(x))
    # and reverse mode is unaffected
    xr = x.clone().requires_grad_()
    fn(xr).sum().backward()
    assert xr.grad is not None and torch.isfinite(xr.grad).all()
