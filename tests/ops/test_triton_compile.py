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
    src = (REPO / "reference_impl" / "ops" / "triton_norm.py").read_text()
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
