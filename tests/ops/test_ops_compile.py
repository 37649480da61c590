"""``torch.compile(fullgraph=True)`` over the fused ops in fresh processes: eps changing between calls,
``dynamic=True``, and compiling before anything has loaded the native library.

Each case runs in its own interpreter, so what an earlier test imported or compiled cannot make it pass.
The native library is built already (the session's build step), so each case costs its compile time only.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_COMMON = """
import torch
CASES = [((4, 64), 1e-6), ((4, 64), 1e-5), ((4, 64), 0.5), ((7, 64), 1e-3), ((3, 32), 2e-2)]
def check(compiled, eager, cases):
    for i, (shape, eps) in enumerate(cases):
        g = torch.Generator().manual_seed(i)
        x, w, b = torch.randn(shape, generator=g), torch.rand(shape[-1], generator=g) + 0.5, torch.randn(shape[-1], generator=g)
        got, want = compiled(x, w, b, eps), eager(x, w, b, eps)
        assert all(torch.equal(a, c) for a, c in zip(got, want)), (i, shape, eps)
"""

SCRIPTS = {
    # the first thing that touches the ops is the compiled function: `reference_impl` re-exports the ops
    # lazily, so the library is imported (and loaded) while Dynamo traces
    "compile_before_load": """
import sys
import reference_impl as ri
assert "reference_impl.ops.library" not in sys.modules
def f(x, w, b, eps):
    y, h = ri.fused_rms_norm(x, w, eps, residual=b.expand_as(x).contiguous(), convention="gemma")
    return y, h, ri.fused_layer_norm(x, w, b, eps)
check(torch.compile(f, fullgraph=True), f, CASES[:2])
""",
    # a new eps on each call: recompiles (or turns eps symbolic); never a graph break or a stale eps
    "eps_changes": """
from reference_impl.ops import fused_layer_norm, fused_rms_norm
def f(x, w, b, eps):
    return fused_rms_norm(x, w, eps), fused_layer_norm(x, None, b, eps)
check(torch.compile(f, fullgraph=True), f, CASES[:3] + [((4, 64), 1e-6)])
""",
    # shapes and eps symbolic from the first call
    "dynamic": """
from reference_impl.ops import fused_layer_norm, fused_rms_norm
def f(x, w, b, eps):
    return fused_rms_norm(x, w, eps, convention="llama"), fused_layer_norm(x, w, b, eps)
c = torch.compile(f, fullgraph=True, dynamic=True)
check(c, f, CASES)
x = torch.randn(2, 64)
for bad in (-1.0, float("nan"), 1e39):  # a symbolic eps is checked by the op when it runs
    try:
        c(x, torch.ones(64), torch.zeros(64), bad)
    except ValueError as e:
        assert "eps" in str(e), e
    else:
        raise AssertionError(f"eps={bad} accepted")
""",
}


@pytest.mark.slow
@pytest.mark.guards("fused.torch_compile")
@pytest.mark.parametrize("case", sorted(SCRIPTS))
def test_compile_in_a_fresh_process(case):
    code = textwrap.dedent(_COMMON) + textwrap.dedent(SCRIPTS[case]) + "\nprint('ok')\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), (out.stdout[-2000:] + out.stderr[-4000:])


def test_import_of_the_package_builds_nothing():
    """`import reference_impl` needs no compiler; `import reference_impl.ops` loads the library and
    registers everything, so no later call (traced or not) loads anything."""
    code = ("import sys, reference_impl; assert 'torch.utils.cpp_extension' not in sys.modules; "
            "assert 'reference_impl.ops' not in sys.modules; "
            "import torch, reference_impl.ops as ops; "
            "assert torch._C._dispatch_has_kernel_for_dispatch_key('normlab::rms_norm_fwd', 'CPU'); "
            "from torch._library.simple_registry import singleton; "
            "assert all(singleton.find('normlab::' + n).fake_impl.kernel is not None for n in "
            "('rms_norm_fwd', 'rms_norm_bwd', 'layer_norm_fwd', 'layer_norm_bwd')); print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-3000:]
