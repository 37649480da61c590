"""Second derivatives through every autograd Function of the package: right, or a clear error, never zeros.

The Functions are found in the package's source (every class deriving from ``torch.autograd.Function``), so a
new one fails :func:`test_every_autograd_function_has_a_case` until it gets a row in :data:`EXACT` or
:data:`RAISES` below.

- Functions whose backward is itself differentiable (the reference and catalog Functions): a Hessian-vector
  product by ``torch.autograd.functional.hvp`` (the "saved detached leaf" pattern) of the loss
  ``sum(norm(x) * c) + sum(x**3)`` equals central differences of the float64 gradient, and is far from the
  answer with the norm's part dropped (only ``6 x v``); ``gradgradcheck`` passes.
- Functions whose backward records no graph (the Triton kernels, the distributed collectives): that same
  product, and ``gradgradcheck``, raise a RuntimeError naming the function, while a first derivative still
  works. torch's own ``once_differentiable`` returned zeros here (its error is attached only when an
  incoming gradient requires grad, which in this pattern none does).
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "reference_impl"
D = 8


def discovered() -> set[str]:
    """``module:Class`` for every class of the package that derives from ``torch.autograd.Function``."""
    out = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        torch_bases = {"torch.autograd.Function", "autograd.Function"} | ({"Function"} if _imports_torch_function(path)
                                                                          else set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(ast.unparse(b) in torch_bases for b in node.bases):
                out.add(f"{module}:{node.name}")
    return out


def _imports_torch_function(path: Path) -> bool:
    """A bare ``Function`` base is torch's only where the module imports it from torch.autograd."""
    return any(isinstance(n, ast.ImportFrom) and (n.module or "").startswith("torch.autograd")
               and any(a.name == "Function" for a in n.names) for n in ast.walk(ast.parse(path.read_text())))


def _data(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, D, generator=g, dtype=torch.float64) * 1.5 + 0.3
    w = 1 + 0.3 * torch.randn(D, generator=g, dtype=torch.float64)
    b = 0.2 * torch.randn(D, generator=g, dtype=torch.float64)
    v = torch.randn(3, D, generator=g, dtype=torch.float64)
    return x, w, b, v


def _mods():
    from reference_impl.norms import (fused_add_rms_norm, grouped_rms_norm, layer_norm, prms_norm, rms_norm,
                                      scale_norm)
    return rms_norm, layer_norm, prms_norm, grouped_rms_norm, fused_add_rms_norm, scale_norm


# name -> (f(x, w, b) in float64, whether it computes in float32 even for float64 input, as the modules do)
def _exact():
    rn, ln, pn, gn, fn, sn = _mods()
    return {
        "reference_impl.norms.rms_norm:RMSNormFunction": (lambda x, w, b: rn.RMSNormFunction.apply(x, w, 1e-6), False),
        "reference_impl.norms.rms_norm:ConventionRMSNormFunction":
            (lambda x, w, b: rn.ConventionRMSNormFunction.apply(x, w, 1e-6, "gemma", "inside"), True),
        "reference_impl.norms.layer_norm:LayerNormFunction":
            (lambda x, w, b: ln.LayerNormFunction.apply(x, w, b, 1e-5), False),
        "reference_impl.norms.layer_norm:ConventionLayerNormFunction":
            (lambda x, w, b: ln.ConventionLayerNormFunction.apply(x, w, None, 1e-5, "cohere"), False),
        "reference_impl.norms.prms_norm:PartialRMSNormFunction":
            (lambda x, w, b: pn.PartialRMSNormFunction.apply(x, w, 1e-6, 3, "inside"), False),
        "reference_impl.norms.grouped_rms_norm:GroupedRMSNormFunction":
            (lambda x, w, b: gn.GroupedRMSNormFunction.apply(x, None, w, 1e-6, 4), True),
        "reference_impl.norms.fused_add_rms_norm:FusedAddRMSNormFunction":
            (lambda x, w, b: fn.FusedAddRMSNormFunction.apply(x, x.flip(-1), w, 1e-6, "llama")[0], True),
        "reference_impl.norms.scale_norm:ScaleNormFunction":
            (lambda x, w, b: sn.ScaleNormFunction.apply(x, w[:1], 1e-5), False),
    }


EXACT = ["reference_impl.norms.rms_norm:RMSNormFunction", "reference_impl.norms.rms_norm:ConventionRMSNormFunction",
         "reference_impl.norms.layer_norm:LayerNormFunction",
         "reference_impl.norms.layer_norm:ConventionLayerNormFunction",
         "reference_impl.norms.prms_norm:PartialRMSNormFunction",
         "reference_impl.norms.grouped_rms_norm:GroupedRMSNormFunction",
         "reference_impl.norms.fused_add_rms_norm:FusedAddRMSNormFunction",
         "reference_impl.norms.scale_norm:ScaleNormFunction"]

# Function -> the public entry point that applies it (its error names that entry point)
DISTRIBUTED = {
    "reference_impl.distributed:_ShardedRMSNorm": "sharded_rms_norm",
    "reference_impl.distributed:_SequenceParallelRMSNorm": "sequence_parallel_rms_norm",
    "reference_impl.distributed:_ShardedLayerNorm": "sharded_layer_norm",
    "reference_impl.distributed:_SequenceParallelLayerNorm": "sequence_parallel_layer_norm",
}
TRITON = {"reference_impl.ops.triton_norm:TritonRMSNormFunction": "TritonRMSNormFunction",
          "reference_impl.ops.triton_norm:TritonLayerNormFunction": "TritonLayerNormFunction"}
# the node that once_differentiable ties a no-graph backward's gradients to: differentiating through it raises
GUARD = "reference_impl._checks:_NoSecondDerivative"
RAISES = {**DISTRIBUTED, **TRITON, GUARD: "_NoSecondDerivative"}


def test_every_autograd_function_has_a_case():
    found = discovered()
    assert len(found) >= len(EXACT) + len(RAISES) - 2, "the discovery found too few Functions to be working"
    missing = sorted(found - set(EXACT) - set(RAISES))
    assert not missing, f"autograd Functions without a second-derivative case (add one to this file): {missing}"
    gone = sorted((set(EXACT) | set(RAISES)) - found)
    assert not gone, f"cases for Functions that no longer exist: {gone}"
    assert set(_exact()) == set(EXACT)


def test_the_guard_node_passes_values_on_and_raises_when_differentiated():
    from reference_impl._checks import _NoSecondDerivative

    anchor = torch.ones(3, requires_grad=True)
    g = torch.arange(3.0)
    (t,) = _NoSecondDerivative.apply("no second derivative here", 1, g, anchor)
    assert torch.equal(t, g) and t.requires_grad
    with pytest.raises(RuntimeError, match="no second derivative here"):
        torch.autograd.grad(t.sum(), anchor)


def _loss(f, c):
    return lambda x: (f(x) * c).sum() + x.pow(3).sum()


def _grad(loss, x):
    x = x.detach().clone().requires_grad_(True)
    return torch.autograd.grad(loss(x), x)[0]


@pytest.mark.parametrize("name", EXACT)
def test_hessian_vector_product_matches_float64_differences(name):
    f, float32_compute = _exact()[name]
    x, w, b, v = _data()
    c = torch.linspace(0.5, 1.5, D, dtype=torch.float64)
    loss = _loss(lambda t: f(t, w, b), c)
    _, hv = torch.autograd.functional.hvp(loss, x, v)
    h = 1e-3 if float32_compute else 1e-5
    fd = (_grad(loss, x + h * v) - _grad(loss, x - h * v)) / (2 * h)
    cube = 6 * x * v  # the cube's part, exact: what is left when the norm's part is dropped
    norm_fd, norm_hv = fd - cube, hv - cube
    scale = norm_fd.abs().max()
    assert scale > 0.1, "the norm's part of this loss's hvp is too small to test"
    tol = 2e-2 if float32_compute else 1e-6
    assert (norm_hv - norm_fd).abs().max() <= tol * scale, \
        f"{name}: the norm's part of the hvp differs from float64 central differences (zeros: it was dropped)"


@pytest.mark.parametrize("name", EXACT)
def test_gradgradcheck(name):
    f, float32_compute = _exact()[name]
    x, w, b, _ = _data(1)
    x.requires_grad_(True)
    # float32 statistics: perturb by 1e-3 (a float32 rounding is then ~1e-4 of the difference quotient)
    tol = dict(eps=1e-3, atol=2e-2, rtol=2e-2) if float32_compute else {}
    assert torch.autograd.gradgradcheck(lambda t: f(t, w, b), (x,), **tol)


# ------------------------------------------------------------------------------ distributed: raises

@pytest.fixture(scope="module")
def one_rank():
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.fail("a process group is already initialised in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _distributed_call(entry):
    from reference_impl import distributed as dd

    fn = getattr(dd, entry)
    if "layer" in entry:
        return lambda x, w, b: fn(x, w, b, 1e-5)
    return lambda x, w, b: fn(x, w, 1e-6)


@pytest.mark.parametrize("name", list(DISTRIBUTED))
def test_distributed_second_derivatives_raise_and_first_ones_work(name, one_rank):
    entry = DISTRIBUTED[name]
    f = _distributed_call(entry)
    x, w, b, v = _data(2)
    c = torch.linspace(0.5, 1.5, D, dtype=torch.float64)
    loss = _loss(lambda t: f(t, w, b), c)
    ref = _exact()["reference_impl.norms.rms_norm:RMSNormFunction" if "rms" in entry
                   else "reference_impl.norms.layer_norm:LayerNormFunction"][0]
    torch.testing.assert_close(_grad(loss, x), _grad(_loss(lambda t: ref(t, w, b), c), x))
    with pytest.raises(RuntimeError, match=f"{entry}: its backward all-reduces without a graph"):
        torch.autograd.functional.hvp(loss, x, v)
    with pytest.raises(RuntimeError, match=entry):
        torch.autograd.gradgradcheck(lambda t: f(t, w, b), (x.clone().requires_grad_(True),))


# ------------------------------------------------------------------------------ Triton: raises, checks

_TRITON_SCRIPT = textwrap.dedent("""
    import torch
    from reference_impl.ops import triton_library as tl
    from reference_impl.ops import triton_norm as tn

    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 8, generator=g) * 1.5 + 0.3
    w = 1 + 0.3 * torch.randn(8, generator=g)
    v = torch.randn(3, 8, generator=g)
    c = torch.linspace(0.5, 1.5, 8)
    calls = {
        "TritonRMSNormFunction": lambda t, w=w: tn.TritonRMSNormFunction.apply(t, w, 1e-6, None, "llama", None),
        "TritonLayerNormFunction": lambda t, w=w: tn.TritonLayerNormFunction.apply(t, w, None, 1e-5, None),
        "normlab_triton::rms_norm_fwd": lambda t, w=w: tl.rms_norm(t, w, 1e-6),
    }
    for name, f in calls.items():
        loss = lambda t: (f(t) * c).sum() + t.pow(3).sum()
        t = x.clone().requires_grad_(True)
        torch.autograd.grad(loss(t), t)              # a first derivative works
        try:
            torch.autograd.functional.hvp(loss, x, v)
            print("HVP", name, "no error")
        except RuntimeError as e:
            print("HVP", name, "raised", str(e).splitlines()[0])
    bad = {
        "short weight": lambda F: F(x, w[:5], 1e-6),
        "eps -1": lambda F: F(x, w, -1.0),
        "eps nan": lambda F: F(x, w, float("nan")),
        "eps inf": lambda F: F(x, w, float("inf")),
        "int32 x": lambda F: F(x.to(torch.int32), None, 1e-6),
        "float64 x": lambda F: F(x.double(), None, 1e-6),
        "weight on meta": lambda F: F(x, w.to("meta"), 1e-6),
    }
    functions = {
        "TritonRMSNormFunction": lambda a, b, e, conv="llama": tn.TritonRMSNormFunction.apply(a, b, e, None, conv, None),
        "TritonLayerNormFunction": lambda a, b, e: tn.TritonLayerNormFunction.apply(a, b, None, e, None),
    }
    for fname, F in functions.items():
        cases = dict(bad)
        if fname == "TritonRMSNormFunction":
            cases["convention banana"] = lambda F: F(x, w, 1e-6, "banana")
        for case, call in cases.items():
            try:
                call(F)
                print("BAD", fname, case, "accepted")
            except (TypeError, ValueError) as e:
                print("BAD", fname, case, type(e).__name__, str(e).splitlines()[0])
""")

BAD_EXPECTED = {"short weight": r"weight has shape \(5,\)", "eps -1": "non-negative", "eps nan": "finite",
                "eps inf": "finite", "int32 x": "int32", "float64 x": "float64", "weight on meta": "meta",
                "convention banana": "banana"}


@pytest.fixture(scope="module")
def triton_report():
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    proc = subprocess.run([sys.executable, "-c", _TRITON_SCRIPT], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.splitlines()


@pytest.mark.parametrize("name", [*TRITON.values(), "normlab_triton::rms_norm_fwd"])
def test_triton_second_derivatives_raise_and_first_ones_work(name, triton_report):
    line = next(ln for ln in triton_report if ln.startswith(f"HVP {name} "))
    assert " raised " in line and f"{name}: the Triton kernels record no graph" in line, line


@pytest.mark.parametrize("fname,case", [(f, c) for f in TRITON.values() for c in BAD_EXPECTED
                                        if c != "convention banana" or f == "TritonRMSNormFunction"])
def test_triton_functions_check_what_they_are_given(fname, case, triton_report):
    line = next(ln for ln in triton_report if ln.startswith(f"BAD {fname} {case} "))
    import re

    assert not line.endswith("accepted"), line
    assert re.search(BAD_EXPECTED[case], line), line
