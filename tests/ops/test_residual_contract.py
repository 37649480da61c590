"""The residual contract at the entry points: ``residual_contract="hf"`` (normalize round_x(x + r), the
default) or ``"fp32"`` (normalize the float32 sum, return it rounded), for the CPU op, the CUDA kernels under
the emulation and the Triton kernels (under the interpreter, in a worker process). The op-level contract is in
tests/ops/contract.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from reference_impl import tolerances as tol
from reference_impl.ops import fused_layer_norm, fused_rms_norm
from reference_impl.ops.build import load_emulation_library

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.guards("ops.residual_contract")


def _data(dtype, d=1001, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(6, d, generator=g).to(dtype)
    r = (4 * torch.randn(6, d, generator=g)).to(dtype)
    w = (1 + 0.1 * torch.randn(d, generator=g)).to(dtype)
    return x, r, w


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fp32_contract_normalizes_the_unrounded_sum(dtype):
    x, r, w = _data(dtype)
    y, h = fused_rms_norm(x, w, 1e-6, residual=r, residual_contract="fp32")
    y_hf, h_hf = fused_rms_norm(x, w, 1e-6, residual=r)
    s = x.float() + r.float()
    assert torch.equal(h, h_hf) and torch.equal(h, s.to(dtype))
    assert not torch.equal(y, y_hf), "rounding x + r before the statistic must show in some output bits"
    # the fp32 contract's y is what normalizing the rounded h cannot reproduce: compare with s's own norm
    ref = (s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-6)).to(dtype).float() * w.float()
    assert (y.float() - ref.to(dtype).float()).abs().max() <= 2 * torch.finfo(dtype).eps * ref.abs().max()


def test_fp32_contract_is_differentiable_and_defaults_to_hf():
    x, r, w = _data(torch.float32, d=33)
    x.requires_grad_(True)
    y, h = fused_rms_norm(x, w, 1e-6, residual=r, residual_contract="fp32")
    (y.sum() + h.sum()).backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    assert torch.equal(fused_rms_norm(x.detach(), w, 1e-6, residual=r)[0],
                       fused_rms_norm(x.detach(), w, 1e-6, residual=r, residual_contract="hf")[0])


def test_bad_residual_contract_is_a_clear_error():
    x, r, w = _data(torch.float32, d=8)
    with pytest.raises(TypeError, match="residual_contract must be a string"):
        fused_rms_norm(x, w, residual=r, residual_contract=1)
    with pytest.raises(ValueError, match="unknown residual_contract 'fp16'"):
        fused_rms_norm(x, w, residual=r, residual_contract="fp16")


# widths: version 6 (several rows to a block; odd 7 and 33 take scalar accesses, 128 vectors), version 4/5
# with registers (1000, 1001) and streaming (rows longer than 512 threads x 8 vectors)
_WIDTHS = (7, 33, 128, 1000, 1001, 4104, 32776, 16385)


@pytest.mark.parametrize("convention", ["llama", "gemma"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_emulated_cuda_kernels_implement_the_fp32_contract(dtype, convention):
    """The CUDA kernels (glue, launchers and kernels run on CPU threads by the emulation) against the CPU
    kernels, both under the fp32 contract. The float32 sum of squares is added in another order on the two
    (as under "hf"), so rstd may differ in its last bit; everything else is exact: h bit for bit, y bit for
    bit from s and the kernel's own rstd, and for odd widths (scalar accesses on both) rstd bit for bit
    against the same CUDA kernel fed the float32 sum s as x without a residual."""
    load_emulation_library()
    emu, cpu = torch.ops.normlab_emu, torch.ops.normlab
    code = {"llama": 0, "gemma": 1}[convention]
    for d in _WIDTHS:
        rows = 2 if d > 5000 else 5
        g = torch.Generator().manual_seed(d)
        x = torch.randn(rows, d, generator=g).to(dtype)
        r = (4 * torch.randn(rows, d, generator=g)).to(dtype)
        w = (0.1 * torch.randn(d, generator=g) + (1 if convention == "llama" else 0)).to(dtype)
        s = x.float() + r.float()
        y, h, rstd = emu.rms_norm_fwd(x, w, r, 1e-6, code + 2)
        yc, hc, rc = cpu.rms_norm_fwd(x, w, r, 1e-6, code + 2)
        assert torch.equal(h, s.to(dtype)) and torch.equal(h, hc), d
        t = s * rstd[:, None]
        gain = w.float() if convention == "llama" else 1 + w.float()
        want = (t.to(dtype).float() * gain).to(dtype) if convention == "llama" else (t * gain).to(dtype)
        assert torch.equal(y, want), d
        assert ((rstd.double() - rc.double()).abs() / rc.double()).max() <= 4 * 2.0 ** -24 * (d // 2 + 6), d
        bound = tol.convention_forward_bound(s, w, 1e-6, convention, x_dtype=dtype, w_dtype=dtype)
        tol.assert_within(y, yc.double().numpy(), 2 * bound, f"emulated fp32 contract vs CPU, d={d}")
        if d % 2:
            assert torch.equal(rstd, emu.rms_norm_fwd(s, None, None, 1e-6, code)[2]), d
        y_hf = emu.rms_norm_fwd(x, w, r, 1e-6, code)[0]
        if dtype == torch.float32:
            assert torch.equal(y, y_hf), "round_x(s) = s in float32: the contracts are one computation"
        else:
            assert not torch.equal(y, y_hf), f"the contracts should differ in half precision, d={d}"


_WORKER = r"""
import json, torch
from reference_impl import tolerances as tol
from reference_impl.ops import fused_rms_norm
from reference_impl.ops.build import load_emulation_library
from reference_impl.ops.triton_norm import triton_rms_norm
out = {}
g = torch.Generator().manual_seed(4)
for dname, dt in (("bfloat16", torch.bfloat16), ("float16", torch.float16), ("float32", torch.float32)):
    for conv in ("llama", "gemma"):
        x = torch.randn(4, 1001, generator=g).to(dt); r = (4 * torch.randn(4, 1001, generator=g)).to(dt)
        w = (0.1 * torch.randn(1001, generator=g) + (1 if conv == "llama" else 0)).to(dt)
        yc, hc = fused_rms_norm(x, w, 1e-6, residual=r, convention=conv, residual_contract="fp32")
        res = {}
        for bs in (None, 256):   # one tile, and rows read in chunks
            yt, ht = triton_rms_norm(x, w, 1e-6, residual=r, convention=conv, residual_contract="fp32", block_size=bs)
            yh, _ = triton_rms_norm(x, w, 1e-6, residual=r, convention=conv, block_size=bs)
            res[str(bs)] = {"h_equal": bool(torch.equal(ht, hc)),
                            "y_frac_vs_cpu": float((yt != yc).double().mean()),
                            "y_rel_vs_cpu": float(((yt.double() - yc.double()).abs() / yc.double().abs().max()).max()),
                            "y_frac_vs_hf": float((yt != yh).double().mean())}
        out[f"{dname}-{conv}"] = res
try:
    triton_rms_norm(x, w, residual=r, residual_contract="x")
    out["error"] = None
except ValueError as e:
    out["error"] = str(e)
print("RESULT " + json.dumps(out))
"""


def test_triton_fp32_contract_matches_the_cpu_op():
    env = dict(os.environ, TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", _WORKER], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1][7:])
    assert "unknown residual_contract" in res.pop("error")
    for case, by_block in res.items():
        for bs, r in by_block.items():
            assert r["h_equal"], (case, bs)
            # same math; the float32 sum of squares is added in another order, so rstd can differ in its last
            # bit: in half precision that rarely shows after the rounding, in float32 it shows everywhere
            eps = {"bfloat16": 2.0 ** -7, "float16": 2.0 ** -10, "float32": 2.0 ** -23}[case.split("-")[0]]
            assert r["y_rel_vs_cpu"] <= 4 * eps, (case, bs, r)
            if case.startswith(("bfloat16", "float16")):
                assert r["y_frac_vs_cpu"] <= 0.01, (case, bs, r)
                assert r["y_frac_vs_hf"] > 0, (case, bs, "the contracts should differ in half precision")
            else:
                assert r["y_frac_vs_hf"] == 0, (case, bs, "in float32 round(s) = s: the contracts agree")


# --- LayerNorm: the same two contracts --------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_layer_norm_fp32_contract_normalizes_the_unrounded_sum(dtype):
    x, r, w = _data(dtype)
    b = 0.1 * w
    y, h = fused_layer_norm(x, w, b, 1e-5, residual=r, residual_contract="fp32")
    y_hf, h_hf = fused_layer_norm(x, w, b, 1e-5, residual=r)
    s = x.float() + r.float()
    assert torch.equal(h, h_hf) and torch.equal(h, s.to(dtype))
    assert not torch.equal(y, y_hf), "rounding x + r before the statistics must show in some output bits"
    assert torch.equal(y_hf, fused_layer_norm(h, w, b, 1e-5)), "hf normalizes the rounded h"
    ref = torch.nn.functional.layer_norm(s.double(), (s.shape[-1],), w.double(), b.double(), 1e-5)
    tol.assert_within(y, ref.numpy(), tol.ln_forward_bound(s, w, b, 1e-5, dtype), "ln fp32 contract vs s")


@pytest.mark.parametrize("contract", ["hf", "fp32"])
def test_layer_norm_residual_gradient_is_the_x_gradient_plus_the_h_gradient(contract):
    """y and h both feed the loss: the gradient wrt the residual equals the gradient wrt x, which is the
    LayerNorm backward at h plus the gradient that flows into h (compared with float64 autograd)."""
    g = torch.Generator().manual_seed(3)
    x, r = torch.randn(4, 40, generator=g), torch.randn(4, 40, generator=g)
    w, b = 1 + 0.2 * torch.randn(40, generator=g), 0.1 * torch.randn(40, generator=g)
    gy, gh = torch.randn(4, 40, generator=g), torch.randn(4, 40, generator=g)
    xs, rs, ws, bs = (t.clone().requires_grad_(True) for t in (x, r, w, b))
    y, h = fused_layer_norm(xs, ws, bs, 1e-5, residual=rs, residual_contract=contract)
    ((y * gy).sum() + (h * gh).sum()).backward()
    assert torch.equal(xs.grad, rs.grad)
    xd, rd, wd, bd = (t.double().requires_grad_(True) for t in (x, r, w, b))
    hd = xd + rd
    yd = torch.nn.functional.layer_norm(hd, (40,), wd, bd, 1e-5)
    ((yd * gy.double()).sum() + (hd * gh.double()).sum()).backward()
    for got, want in ((xs.grad, xd.grad), (ws.grad, wd.grad), (bs.grad, bd.grad)):
        assert torch.allclose(got.double(), want, rtol=1e-4, atol=1e-4)
    # second order reaches the residual too
    xs.grad = rs.grad = None
    y, h = fused_layer_norm(xs, ws, bs, 1e-5, residual=rs, residual_contract=contract)
    (gx,) = torch.autograd.grad((y * gy).sum(), rs, create_graph=True)
    (gx.pow(2).sum()).backward()
    assert rs.grad is not None and torch.isfinite(rs.grad).all() and torch.equal(rs.grad, xs.grad)


def test_layer_norm_bad_residual_arguments_are_clear_errors():
    x, r, w = _data(torch.float32, d=8)
    with pytest.raises(TypeError, match="residual_contract must be a string"):
        fused_layer_norm(x, w, residual=r, residual_contract=1)
    with pytest.raises(ValueError, match="unknown residual_contract 'fp16'"):
        fused_layer_norm(x, w, residual=r, residual_contract="fp16")
    with pytest.raises(TypeError, match="residual has dtype torch.float16"):
        fused_layer_norm(x, w, residual=r.half())
    with pytest.raises(ValueError, match="residual has shape"):
        fused_layer_norm(x, w, residual=r[:2])
    with pytest.raises(ValueError, match="residual_out is given without a residual"):
        fused_layer_norm(x, w, residual_out=torch.empty_like(x))
    with torch.no_grad():
        y, h = fused_layer_norm(x, w, residual=r, out=torch.empty_like(x), residual_out=torch.empty_like(x))
        with pytest.raises(ValueError, match="residual_out shares memory with residual"):
            fused_layer_norm(x, w, residual=r, residual_out=r)
    assert torch.equal(h, x + r) and torch.equal(y, fused_layer_norm(x, w, residual=r)[0])


@pytest.mark.parametrize("contract", ["hf", "fp32"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_emulated_cuda_layer_norm_implements_both_contracts(dtype, contract):
    """The CUDA LayerNorm kernel under the emulation, register and streaming rows, vector and scalar
    accesses: h bit for bit (and equal to the CPU op's); under "hf" y is bit for bit the same kernel's
    LayerNorm of h; under "fp32" y is within the LayerNorm bound of the float64 oracle applied to s (bit for
    bit the kernel's LayerNorm of s in float32), and differs from "hf" in half precision."""
    load_emulation_library()
    emu, cpu = torch.ops.normlab_emu, torch.ops.normlab
    code = {"hf": 0, "fp32": 2}[contract]
    for d in _WIDTHS:
        rows = 2 if d > 5000 else 5
        g = torch.Generator().manual_seed(d)
        x = (torch.randn(rows, d, generator=g) + 2).to(dtype)
        r = (4 * torch.randn(rows, d, generator=g)).to(dtype)
        w = (1 + 0.1 * torch.randn(d, generator=g)).to(dtype)
        b = (0.1 * torch.randn(d, generator=g)).to(dtype)
        s = x.float() + r.float()
        y, mean, rstd, h = emu.layer_norm_fwd(x, w, b, 1e-5, r, code)
        hc = cpu.layer_norm_fwd(x, w, b, 1e-5, r, code)[3]
        assert torch.equal(h, s.to(dtype)) and torch.equal(h, hc), d
        n = h if contract == "hf" else s
        ref = torch.nn.functional.layer_norm(n.double(), (d,), w.double(), b.double(), 1e-5)
        tol.assert_within(y, ref.numpy(), tol.ln_forward_bound(n, w, b, 1e-5, dtype), f"emulated ln {contract}, d={d}")
        if contract == "hf" or dtype == torch.float32:
            assert torch.equal(y, emu.layer_norm_fwd(n.to(dtype), w, b, 1e-5)[0]), d
        y_other = emu.layer_norm_fwd(x, w, b, 1e-5, r, 2 - code)[0]
        if dtype == torch.float32:
            assert torch.equal(y, y_other), "round_x(s) = s in float32: the contracts are one computation"
        else:
            assert not torch.equal(y, y_other), f"the contracts should differ in half precision, d={d}"


_LN_WORKER = r"""
import json, torch
from reference_impl.ops import fused_layer_norm
from reference_impl.ops.triton_norm import triton_layer_norm
out = {}
g = torch.Generator().manual_seed(5)
for dname, dt in (("bfloat16", torch.bfloat16), ("float16", torch.float16), ("float32", torch.float32)):
    for d in (96, 1001):  # several rows to a program, and one row to a program
        x = (torch.randn(4, d, generator=g) + 2).to(dt); r = (4 * torch.randn(4, d, generator=g)).to(dt)
        w = (1 + 0.1 * torch.randn(d, generator=g)).to(dt); b = (0.1 * torch.randn(d, generator=g)).to(dt)
        for contract in ("hf", "fp32"):
            yc, hc = fused_layer_norm(x, w, b, 1e-5, residual=r, residual_contract=contract)
            for bs in ((None,) if d == 96 else (None, 256)):  # one tile, and rows read in chunks
                yt, ht = triton_layer_norm(x, w, b, 1e-5, residual=r, residual_contract=contract, block_size=bs)
                yo = triton_layer_norm(x, w, b, 1e-5, residual=r, residual_contract=("fp32" if contract == "hf" else "hf"),
                                       block_size=bs)[0]
                xs, rs = x.clone().requires_grad_(True), r.clone().requires_grad_(True)
                yg, hg = triton_layer_norm(xs, w, b, 1e-5, residual=rs, residual_contract=contract, block_size=bs)
                (yg.float().sum() + 2 * hg.float().sum()).backward()
                xc, rc = x.clone().requires_grad_(True), r.clone().requires_grad_(True)
                yf, hf = fused_layer_norm(xc, w, b, 1e-5, residual=rc, residual_contract=contract)
                (yf.float().sum() + 2 * hf.float().sum()).backward()
                out[f"{dname}-{d}-{contract}-{bs}"] = {
                    "h_equal": bool(torch.equal(ht, hc)),
                    "y_frac_vs_cpu": float((yt != yc).double().mean()),
                    "y_rel_vs_cpu": float(((yt.double() - yc.double()).abs() / yc.double().abs().max()).max()),
                    "y_frac_vs_other": float((yt != yo).double().mean()),
                    "grad_r_is_grad_x": bool(torch.equal(xs.grad, rs.grad)),
                    "grad_rel_vs_cpu": float(((xs.grad.double() - xc.grad.double()).abs()).max()
                                             / xc.grad.double().abs().max())}
try:
    triton_layer_norm(x, w, residual=r, residual_contract="x")
    out["error"] = None
except ValueError as e:
    out["error"] = str(e)
print("RESULT " + json.dumps(out))
"""


def test_triton_layer_norm_implements_both_contracts():
    """triton_layer_norm with a residual (under the interpreter) against the CPU op: h bit for bit, y within
    a few units of x's dtype (the float32 sums are added in another order), the two contracts differing in
    half precision only, and the residual's gradient equal to x's."""
    env = dict(os.environ, TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", _LN_WORKER], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1][7:])
    assert "unknown residual_contract" in res.pop("error")
    assert len(res) == 18
    for case, r in res.items():
        dname = case.split("-")[0]
        eps = {"bfloat16": 2.0 ** -7, "float16": 2.0 ** -10, "float32": 2.0 ** -23}[dname]
        assert r["h_equal"] and r["grad_r_is_grad_x"], (case, r)
        assert r["y_rel_vs_cpu"] <= 4 * eps, (case, r)
        assert r["grad_rel_vs_cpu"] <= max(16 * eps, 1e-5), (case, r)
        if dname == "float32":
            assert r["y_frac_vs_other"] == 0, (case, "in float32 round(s) = s: the contracts agree")
        else:
            assert r["y_frac_vs_cpu"] <= 0.02, (case, r)
            assert r["y_frac_vs_other"] > 0, (case, "the contracts should differ in half precision")


def test_layer_norm_residual_traces_under_torch_compile():
    """The fake implementation and the autograd formula of the residual outputs: fullgraph tracing (aot_eager
    runs the fakes and the joint graph) gives the eager values and gradients."""
    x, r, w = _data(torch.bfloat16, d=64)
    b = 0.1 * w

    def f(x, r):
        y, h = fused_layer_norm(x, w, b, 1e-5, residual=r, residual_contract="fp32")
        return (y.float() * 2).sum() + h.float().pow(2).sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    xe, re_ = x.clone().requires_grad_(True), r.clone().requires_grad_(True)
    xc, rc = x.clone().requires_grad_(True), r.clone().requires_grad_(True)
    f(xe, re_).backward()
    compiled(xc, rc).backward()
    assert torch.equal(xe.grad, xc.grad) and torch.equal(re_.grad, rc.grad) and torch.equal(xc.grad, rc.grad)


def test_emulated_cuda_layer_norm_wide_rows_match_the_cpu_kernel_under_both_contracts():
    """Rows whose float32 sums leave the normal range take the pass in double on both devices (from the
    stored h under "hf", from x + r under "fp32"): the emulated CUDA kernel and the CPU kernel agree bit for
    bit on h, mean, rstd and y, in the register and the streaming branch."""
    load_emulation_library()
    g = torch.Generator().manual_seed(1)
    for d in (33, 1000, 40000):
        for dt in (torch.bfloat16, torch.float32):
            x = (torch.randn(3, d, generator=g) * 2.0 ** 70).to(dt)
            r = (torch.randn(3, d, generator=g) * 2.0 ** 72).to(dt)
            for code in (0, 2):
                a = torch.ops.normlab_emu.layer_norm_fwd(x, None, None, 0.0, r, code)
                b = torch.ops.normlab.layer_norm_fwd(x, None, None, 0.0, r, code)
                assert torch.isfinite(a[0]).all(), (d, dt, code)
                assert all(torch.equal(u, v) for u, v in zip(a, b)), (d, dt, code)
