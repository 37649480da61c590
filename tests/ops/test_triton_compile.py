"""The Triton RMSNorm under torch.compile: a triton_op that Inductor traces, with float32 scalars pinned.

- ``interp``: in a worker started with ``TRITON_INTERPRET=1`` (Triton decides at import), the forward kernel
  is launched once with Python floats and once with float64 scalars for ``eps`` and ``d``, which is how
  Inductor passes Python floats to a user kernel. The kernel casts both to float32 on entry, so the two
  launches give the same bits, and rstd is the float32 statistic. The triton_op gives the same bits as the
  plain launcher.
- ``gpu``: ``torch.compile(fullgraph=True)`` of the op on CUDA: the generated code launches the user kernel
  (no graph break, no opaque call), and the output is bit-identical to the eager op.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]

_WORKER = r"""
import json
import numpy as np
import torch
import triton.language as tl
from triton.runtime.interpreter import TensorHandle
from reference_impl.ops import triton_library as tlib, triton_norm as tn

def f64(v):
    return tl.tensor(TensorHandle(np.array([v], dtype=np.float64), tl.float64), tl.float64)

out = {}
g = torch.Generator().manual_seed(3)
for dname, dt in (("float32", torch.float32), ("bfloat16", torch.bfloat16), ("float16", torch.float16)):
    for d in (7, 1000):
        x = (torch.randn(5, d, generator=g) * 1e-3).to(dt)   # a small mean square, so eps matters
        w = (1 + 0.1 * torch.randn(d, generator=g)).to(dt)
        runs = []
        for scalar in (float, f64):
            y = torch.empty_like(x); rstd = torch.empty(5, dtype=torch.float32)
            block, single, nw, _ = tn._settings(d, None)
            tn._norm_fwd_kernel[(5,)](x, x, w, x, y, x, rstd, rstd, d, scalar(float(d)), scalar(1e-6), IS_RMS=True,
                                      GEMMA=False, HAS_RES=False, HAS_W=True, HAS_B=False, BLOCK=block,
                                      SINGLE=single, BF16_BY_BITS=tn._bf16_by_bits(dt), num_warps=nw)
            runs.append((y, rstd))
        ms = (x.float() * x.float()).sum(-1).div(d)            # float32 sums of float32 squares
        f32 = torch.tensor(1.0) / torch.sqrt(ms + torch.tensor(1e-6, dtype=torch.float32))
        f64r = 1.0 / torch.sqrt(x.double().pow(2).sum(-1).div(d) + 1e-6)
        r = torch.randn(5, d, generator=g).to(dt)
        op = tlib.rms_norm_fwd(x, w, r, 1e-6)
        plain = tn.rms_norm_fwd(x, w, r, 1e-6)
        out[f"{dname}-{d}"] = {
            "same_y": bool(torch.equal(runs[0][0], runs[1][0])), "same_rstd": bool(torch.equal(runs[0][1], runs[1][1])),
            "rstd_rel_to_f32": float(((runs[1][1].double() - f32.double()) / f32.double()).abs().max()),
            "rstd_rel_to_f64": float(((runs[1][1].double() - f64r) / f64r).abs().max()),
            "op_equals_launcher": all(torch.equal(a, b) for a, b in zip(op, plain)),
        }
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def interp_results():
    env = dict(os.environ, TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", _WORKER], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


@pytest.mark.guards("conformance.triton_fp32_scalars")
def test_float64_scalars_give_the_float32_statistic(interp_results):
    """Launched with fp64 eps and d (as Inductor passes Python floats) the kernel computes what it computes
    with Python floats: the cast on entry keeps the statistic in float32 (without it the fp64 scalars reach
    sqrt_rn/div_rn, which take float32 only)."""
    assert len(interp_results) == 6
    for case, r in interp_results.items():
        assert r["same_y"] and r["same_rstd"], case
        # rstd is float32 arithmetic: within a few float32 ulps of the float32 formula, not float64-exact
        assert r["rstd_rel_to_f32"] < 4 * 2.0 ** -24 * 4, case
        assert r["rstd_rel_to_f64"] < 1e-5, case


@pytest.mark.guards("conformance.triton_fp32_scalars")
def test_triton_op_matches_the_plain_launcher(interp_results):
    assert all(r["op_equals_launcher"] for r in interp_results.values())


def test_the_kernel_casts_its_scalars_on_entry():
    """The pin is in the kernel's own source (so every launcher, Inductor's included, goes through it)."""
    src = (REPO / "reference_impl" / "ops" / "triton_kernels.py").read_text()
    body = src[src.index("def _norm_fwd_kernel"):src.index("row = tl.program_id(0)", src.index("def _norm_fwd_kernel"))]
    assert "eps = tl.cast(eps, tl.float32)" in body and "d_f = tl.cast(d_f, tl.float32)" in body


@pytest.mark.gpu
@pytest.mark.guards("conformance.triton_compile")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_compile_traces_into_the_triton_op(dtype):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from torch._inductor.utils import run_and_get_code

    from reference_impl.ops import triton_library as tlib

    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(64, 4096, device="cuda", generator=g).to(dtype)
    r = torch.randn(64, 4096, device="cuda", generator=g).to(dtype)
    w = (1 + 0.1 * torch.randn(4096, device="cuda", generator=g)).to(dtype)

    def f(x, r, w):
        y, h, rstd = tlib.rms_norm_fwd(x, w, r, 1e-6)
        return y * 2, h, rstd

    eager = f(x, r, w)
    torch._dynamo.reset()
    compiled, code = run_and_get_code(torch.compile(f, fullgraph=True), x, r, w)
    assert any("_norm_fwd_kernel" in c for c in code), "Inductor did not launch the user kernel itself"
    for a, b in zip(eager, compiled):
        assert torch.equal(a, b)


_BWD_WORKER = r"""
import json
import numpy as np
import torch
import triton.language as tl
from triton.runtime.interpreter import TensorHandle
from reference_impl import oracle, tolerances as tol
from reference_impl.shared import effective_gain
from reference_impl.ops import triton_library as tlib, triton_norm as tn

def f64(v):
    return tl.tensor(TensorHandle(np.array([v], dtype=np.float64), tl.float64), tl.float64)

out = {}
g = torch.Generator().manual_seed(5)
for dname, dt in (("float32", torch.float32), ("bfloat16", torch.bfloat16), ("float16", torch.float16)):
    for d in (7, 1000, 9000):   # a short row, one tile, and a row read in chunks (row statistics kernel)
        for conv, contract in (("llama", "hf"), ("gemma", "fp32")):
            x = torch.randn(3, d, generator=g).to(dt)
            r = (4 * torch.randn(3, d, generator=g)).to(dt)
            w = (0.1 * torch.randn(d, generator=g) + (1 if conv == "llama" else 0)).to(dt)
            dy = torch.randn(3, d, generator=g).to(dt)
            leaves = [t.clone().requires_grad_(True) for t in (x, r, w)]
            y, h = tlib.rms_norm(leaves[0], leaves[2], 1e-6, residual=leaves[1], convention=conv,
                                 residual_contract=contract)
            grads = torch.autograd.grad((y.float() * dy.float()).sum() + h.float().sum(), leaves)
            ref = [t.clone().requires_grad_(True) for t in (x, r, w)]
            y2, h2 = tn.triton_rms_norm(ref[0], ref[2], 1e-6, residual=ref[1], convention=conv,
                                        residual_contract=contract)
            grads2 = torch.autograd.grad((y2.float() * dy.float()).sum() + h2.float().sum(), ref)
            # the backward op alone (dy only), against the float64 oracle at the rounded h
            _, _, rstd = tlib.rms_norm_fwd(x, w, r, 1e-6, conv)
            dh, dw = torch.ops.normlab_triton.rms_norm_bwd(dy, h.detach(), w, rstd, conv == "gemma")
            gain = effective_gain(w, conv).double().numpy()
            edx, edw = oracle.rms_norm_backward(dy.double().numpy(), h.detach().double().numpy(), gain, 1e-6)
            bdx, bdw = tol.convention_backward_bounds(dy, h.detach(), w, 1e-6, conv)
            ok_dx = bool(np.all(np.abs(dh.double().numpy() - edx) <= bdx))
            ok_dw = bool(np.all(np.abs(dw.double().numpy() - edw) <= bdw))
            # the chunked backward's statistics kernel with d as a float64 scalar, as Inductor passes it
            c1 = [torch.empty(3) for _ in range(2)]
            for scalar, c in zip((float, f64), c1):
                block, single, _, nw = tn._settings(d, 256)
                tn._norm_bwd_row_stats_kernel[(3,)](dy, h.detach(), w, rstd, rstd, c, c, c, d, scalar(float(d)),
                                                    IS_RMS=True, GEMMA=conv == "gemma", HAS_W=True, BLOCK=block,
                                                    num_warps=nw)
            out[f"{dname}-{d}-{conv}-{contract}"] = {
                "y_equal": bool(torch.equal(y, y2)), "h_equal": bool(torch.equal(h, h2)),
                "grads_equal": [bool(torch.equal(a, b)) for a, b in zip(grads, grads2)],
                "dx_within_bound": ok_dx, "dw_within_bound": ok_dw,
                "stats_f64_same": bool(torch.equal(c1[0], c1[1])),
            }
print("RESULT " + json.dumps(out))
"""


@pytest.mark.guards("conformance.triton_fp32_scalars", "conformance.triton_compile")
def test_backward_op_matches_the_eager_kernels_and_the_oracle():
    """Under the interpreter: the triton ops' forward and backward (through register_autograd) give the bits
    of the eager autograd.Function for every dtype, both conventions and both residual contracts, on a short
    row, one tile and a chunked row; the backward op alone is within the float64 oracle's bounds; and the
    backward's statistics kernel gives the same bits with d passed as a float64 scalar."""
    env = dict(os.environ, TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", _BWD_WORKER], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1][len("RESULT "):])
    assert len(res) == 18
    for case, r in res.items():
        assert r["y_equal"] and r["h_equal"] and all(r["grads_equal"]), (case, r)
        assert r["dx_within_bound"] and r["dw_within_bound"], (case, r)
        assert r["stats_f64_same"], case


def test_every_triton_kernel_pins_its_float_scalars():
    """Each kernel that takes d_f (or eps) casts it to float32 before use."""
    src = (REPO / "reference_impl" / "ops" / "triton_kernels.py").read_text()
    for name in ("_norm_fwd_kernel", "_norm_bwd_row_stats_kernel", "_norm_bwd_kernel"):
        start = src.index(f"def {name}")
        body = src[start:src.index("row", src.index('"""', src.index('"""', start) + 3))]
        assert "d_f = tl.cast(d_f, tl.float32)" in body, name


@pytest.mark.gpu
@pytest.mark.guards("conformance.triton_compile")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compile_traces_forward_and_backward_of_the_triton_ops(dtype):
    """A compiled training step (forward and backward): Inductor launches the user kernels of both ops
    itself, and the outputs and gradients are the eager bits."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from torch._inductor.utils import run_and_get_code

    from reference_impl.ops import triton_library as tlib

    g = torch.Generator(device="cuda").manual_seed(2)
    x = torch.randn(64, 4096, device="cuda", generator=g).to(dtype)
    r = torch.randn(64, 4096, device="cuda", generator=g).to(dtype)
    w = (1 + 0.1 * torch.randn(4096, device="cuda", generator=g)).to(dtype)

    def f(x, r, w):
        y, h = tlib.rms_norm(x, w, 1e-6, residual=r)
        return (y.float() * 2).sum() + h.float().sum(), y, h

    def step(fn):
        leaves = [t.detach().requires_grad_(True) for t in (x, r, w)]
        loss, y, h = fn(*leaves)
        loss.backward()  # the backward graph Inductor compiled from the op's autograd formula
        return y, h, *(t.grad for t in leaves)

    eager = step(f)
    torch._dynamo.reset()
    compiled, code = run_and_get_code(step, torch.compile(f, fullgraph=True))
    assert any("_norm_fwd_kernel" in c for c in code) and any("_norm_bwd_kernel" in c for c in code)
    for a, b in zip(eager, compiled):
        assert torch.equal(a, b)
