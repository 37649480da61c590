"""The Triton page's first kernel (reference_impl/ops/triton_first.py) under Triton's interpreter, against the
float64 oracle within the tolerance policy's bound, for every dtype, odd and power-of-two widths, 0 rows.
The interpreter truncates when it casts float32 to bfloat16, where a GPU rounds to nearest even, so the
bfloat16 bound allows one more unit roundoff of the output (the full kernels round by bits instead)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.guards("snippet:triton_first.kernel")

# runs in a child started with TRITON_INTERPRET=1 (Triton reads it when first imported)
_CHILD = r"""
import json, torch
from reference_impl import oracle, tolerances as tol
from reference_impl.ops.triton_first import rms_norm_first
out = []
g = torch.Generator().manual_seed(0)
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    for shape in ((3, 1), (2, 7), (2, 3, 33), (4, 128), (2, 1000)):
        x = (torch.randn(shape, generator=g) * 3).to(dtype)
        w = (1 + 0.5 * torch.randn(shape[-1], generator=g)).to(dtype)
        y = rms_norm_first(x, w, 1e-6)
        want = torch.as_tensor(oracle.rms_norm_forward(x.double().numpy(), w.double().numpy(), 1e-6))
        bound = torch.as_tensor(tol.rms_forward_bound(x.double().numpy(), w.double().numpy(), 1e-6, dtype))
        if dtype == torch.bfloat16:
            # the interpreter's float32 -> bfloat16 cast truncates (a GPU rounds to nearest even): one more u_o
            bound = bound + tol.unit_roundoff(dtype) * want.abs()
        err = (y.double() - want).abs()
        out.append({"case": f"{dtype} {shape}", "dtype_kept": y.dtype == dtype, "shape_kept": y.shape == x.shape,
                    "worst": float((err / bound).max())})
empty = rms_norm_first(torch.zeros(0, 8), torch.ones(8))
out.append({"case": "0 rows", "dtype_kept": True, "shape_kept": tuple(empty.shape) == (0, 8), "worst": 0.0})
try:
    rms_norm_first(torch.zeros(2, 8), torch.ones(7))
    out.append({"case": "bad weight", "raised": False})
except ValueError as e:
    out.append({"case": "bad weight", "raised": "weight has shape (7,)" in str(e) and "(8,)" in str(e)})
print(json.dumps(out))
"""


def test_first_kernel_matches_the_oracle_under_the_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", _CHILD], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == 17
    for r in results:
        if r["case"] == "bad weight":
            assert r["raised"], "a weight of the wrong length was accepted"
            continue
        assert r["dtype_kept"] and r["shape_kept"], r
        assert r["worst"] <= 1.0, f"{r['case']}: error {r['worst']:.3g} times the bound"
