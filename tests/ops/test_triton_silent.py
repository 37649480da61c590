"""The Triton ops never return a silently wrong number where a second derivative or an extreme row is asked.

- Their backward runs in a kernel that records no graph, so they are once-differentiable: a second
  derivative raises an error that says so, also when something else keeps the first gradient in the graph
  (a gradient penalty on x plus a regularizer), where a silently dropped term would otherwise be ~100 % off.
- A constant LayerNorm row whose float32 sum overflows (a row of 1e38s) gives the bias, not NaN, on both
  kernels (one row per program, and several short rows per program).

Run under Triton's interpreter on CPU tensors, in one subprocess started with ``TRITON_INTERPRET=1``
(Triton reads it when first imported; see tests/ops/test_triton.py).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_WORKER = r"""
import json
import torch
from reference_impl.ops import triton_library as tlib, triton_norm as tn

out = {}
g = torch.Generator().manual_seed(11)
calls = {
    "triton_rms_norm": lambda x, w: tn.triton_rms_norm(x, w, 1e-6),
    "triton_layer_norm": lambda x, w: tn.triton_layer_norm(x, w, None, 1e-5),
    "triton_library.rms_norm": lambda x, w: tlib.rms_norm(x, w, 1e-6),
}
for name, fn in calls.items():
    x = torch.randn(3, 16, generator=g).requires_grad_(True)
    w = (1 + 0.1 * torch.randn(16, generator=g)).requires_grad_(True)
    errors = []
    # a plain double backward
    try:
        (gx,) = torch.autograd.grad(fn(x, w).pow(2).sum(), x, create_graph=True)
        gx.sum().backward()
        errors.append(None)
    except RuntimeError as e:
        errors.append(str(e))
    # the first gradient kept in the graph by a regularizer on x: the norm's second-order term must not vanish
    try:
        loss = fn(x, w).pow(2).sum() + x.pow(3).sum()
        (gx,) = torch.autograd.grad(loss, x, create_graph=True)
        gx.pow(2).sum().backward()
        errors.append(None)
    except RuntimeError as e:
        errors.append(str(e))
    # first order still works
    x.grad = None
    fn(x, w).pow(2).sum().backward()
    out[name] = {"errors": errors, "first_order_finite": bool(torch.isfinite(x.grad).all())}

const = {}
for d, block_size in ((7, None), (64, 16), (300, None), (1000, 256)):  # rows kernel, chunks, one tile, chunks
    x = torch.tensor([1e38, -3e38, 2.5e38, 1.0])[:, None].expand(4, d).contiguous()
    b = torch.linspace(-1, 1, d)
    w = 1 + torch.arange(d, dtype=torch.float32) / d
    y = tn.triton_layer_norm(x, w, b, 1e-5, block_size=block_size)
    const[f"{d}/{block_size}"] = float((y - b).abs().max()) if torch.isfinite(y).all() else "non-finite"
out["constant_rows"] = const
print("RESULT" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def results():
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-c", _WORKER], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert proc.returncode == 0 and line, proc.stderr[-3000:]
    return json.loads(line[0][len("RESULT"):])


@pytest.mark.parametrize("name", ["triton_rms_norm", "triton_layer_norm", "triton_library.rms_norm"])
def test_second_derivatives_raise_once_differentiable(results, name):
    r = results[name]
    for err in r["errors"]:
        assert err is not None, f"{name}: a second derivative ran and returned a number"
        assert "once_differentiable" in err, f"{name}: unclear error: {err}"
    assert r["first_order_finite"]


def test_constant_layer_norm_rows_whose_sum_overflows_give_the_bias(results):
    for case, err in results["constant_rows"].items():
        assert err == 0.0, f"d/block_size {case}: max |y - bias| = {err}"
