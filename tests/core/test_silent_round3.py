"""Silent wrong answers on the reference paths: each case is right, or raises an error that names it.

Covers eps above the compute dtype's range and unchecked arguments to the explicit-backward Functions,
batch invariance of the core's row statistics, torch.func (vmap, grad, jvp) on every reference path, and
the range thresholds (overflowing squares, underflowing rows with eps=0) that docs/numerics.md states.
"""
from __future__ import annotations

import math

import pytest
import torch

import reference_impl as ri
from reference_impl import conventions as cv
from reference_impl import reference as ref
from reference_impl import variants as va



def _data(shape, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * 2 + 0.5
    w = 1 + 0.3 * torch.randn(shape[-1], generator=g, dtype=torch.float64)
    b = 0.2 * torch.randn(shape[-1], generator=g, dtype=torch.float64)
    return x.to(dtype), w.to(dtype), b.to(dtype)


# ---------------------------------------------------------------- eps and arguments everywhere

# every public reference entry point and explicit-backward Function, called with eps as its only variable
def _entries(x, w, b):
    g = torch.tensor([3.0], dtype=x.dtype)
    res = torch.zeros_like(x)
    return {
        "reference.rms_norm": lambda e: ri.rms_norm(x, w, e),
        "reference.layer_norm": lambda e: ri.layer_norm(x, w, b, e),
        "reference.rms_norm_backward": lambda e: ri.rms_norm_backward(x, x, w, e),
        "reference.layer_norm_backward": lambda e: ri.layer_norm_backward(x, x, w, b, e),
        "RMSNormFunction": lambda e: ref.RMSNormFunction.apply(x, w, e),
        "LayerNormFunction": lambda e: ref.LayerNormFunction.apply(x, w, b, e),
        **{f"conventions.rms_norm[{c}]": (lambda e, c=c: cv.rms_norm(x, w, e, convention=c))
           for c in cv.RMS_CONVENTIONS},
        "conventions.rms_norm[outside]": lambda e: cv.rms_norm(x, w, e, eps_placement="outside"),
        "conventions.layer_norm[cohere]": lambda e: cv.layer_norm(x, w, b, e, convention="cohere"),
        "conventions.layer_norm[neox]": lambda e: cv.layer_norm(x, w, b, e, convention="neox"),
        "ConventionRMSNormFunction": lambda e: cv.ConventionRMSNormFunction.apply(x, w, e, "llama", "inside"),
        "ConventionLayerNormFunction": lambda e: cv.ConventionLayerNormFunction.apply(x, w, b, e, "cohere"),
        "partial_rms_norm": lambda e: va.partial_rms_norm(x, w, 0.5, e),
        "PartialRMSNormFunction": lambda e: va.PartialRMSNormFunction.apply(x, w, e, 2, "inside"),
        "grouped_rms_norm": lambda e: va.grouped_rms_norm(x, w, 2, e),
        "GroupedRMSNormFunction": lambda e: va.GroupedRMSNormFunction.apply(x, None, w, e, 4),
        "fused_add_rms_norm": lambda e: va.fused_add_rms_norm(x, res, w, e),
        "FusedAddRMSNormFunction": lambda e: va.FusedAddRMSNormFunction.apply(x, res, w, e, "llama"),
        "scale_norm": lambda e: va.scale_norm(x, g, e),
        "ScaleNormFunction": lambda e: va.ScaleNormFunction.apply(x, g, e),
    }


ENTRY_NAMES = list(_entries(*_data((2, 8), 0, torch.float32)))


@pytest.mark.parametrize("name", ENTRY_NAMES)
def test_eps_above_float32_max_is_refused(name):
    """float32 computations cannot add an eps above float32's maximum: the result would be zeros."""
    fn = _entries(*_data((2, 8), 1, torch.float32))[name]
    with pytest.raises(ValueError, match="largest value"):
        fn(1e39)
    y = fn(1e-5)  # and an ordinary eps still works
    assert all(torch.isfinite(t).all() for t in (y if isinstance(y, tuple) else (y,)) if t is not None)


FUNCTIONS = {
    "RMSNormFunction": lambda x, w, e: ref.RMSNormFunction.apply(x, w, e),
    "LayerNormFunction": lambda x, w, e: ref.LayerNormFunction.apply(x, w, None, e),
    "ConventionRMSNormFunction": lambda x, w, e: cv.ConventionRMSNormFunction.apply(x, w, e, "gemma", "inside"),
    "ConventionLayerNormFunction": lambda x, w, e: cv.ConventionLayerNormFunction.apply(x, w, None, e, "cohere"),
    "PartialRMSNormFunction": lambda x, w, e: va.PartialRMSNormFunction.apply(x, w, e, 2, "inside"),
    "GroupedRMSNormFunction": lambda x, w, e: va.GroupedRMSNormFunction.apply(x, None, w, e, 4),
    "FusedAddRMSNormFunction": lambda x, w, e: va.FusedAddRMSNormFunction.apply(x, x, w, e, "llama"),
}


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_functions_check_their_arguments(name):
    fn = FUNCTIONS[name]
    x, w, _ = _data((3, 8), 2, torch.float32)
    with pytest.raises(TypeError, match="int32"):
        fn(torch.ones(3, 8, dtype=torch.int32), None, 1e-5)
    with pytest.raises(ValueError, match="non-negative"):
        fn(x, w, -1.0)
    with pytest.raises(ValueError, match=r"weight has shape \(5,\)"):
        fn(x, w[:5], 1e-5)


def test_scale_norm_function_checks_its_arguments():
    x = _data((3, 8), 3, torch.float32)[0]
    with pytest.raises(ValueError, match="exactly one value"):
        va.ScaleNormFunction.apply(x, torch.ones(2), 1e-5)
    with pytest.raises(TypeError, match="int32"):
        va.ScaleNormFunction.apply(x.to(torch.int32), torch.ones(1), 1e-5)


# ---------------------------------------------------------------- batch invariance

@pytest.mark.parametrize("fn", [ri.rms_norm, ri.layer_norm], ids=["rms_norm", "layer_norm"])
@pytest.mark.parametrize("d", [4096, 65536])
def test_reference_rows_do_not_depend_on_the_batch(fn, d):
    """A row's bits are the same alone and in a batch (torch's mean splits long rows by batch size)."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(8, d, generator=g) * 3 + 1
    full = fn(x)
    for i in range(x.shape[0]):
        assert torch.equal(fn(x[i:i + 1])[0], full[i]), f"row {i} differs alone and in the batch"
    assert torch.equal(fn(x[2:6]), full[2:6])


# ---------------------------------------------------------------- torch.func

PATHS = {
    "reference.rms_norm": lambda x, w: ri.rms_norm(x, w, 1e-6),
    "reference.layer_norm": lambda x, w: ri.layer_norm(x, w, None, 1e-5),
    "RMSNormFunction": lambda x, w: ref.RMSNormFunction.apply(x, w, 1e-6),
    "conventions.rms_norm[gemma]": lambda x, w: cv.rms_norm(x, w, 1e-6, convention="gemma"),
    "conventions.rms_norm[outside]": lambda x, w: cv.rms_norm(x, w, 1e-6, convention="olmo2", eps_placement="outside"),
    "conventions.layer_norm[cohere]": lambda x, w: cv.layer_norm(x, w, None, 1e-5, convention="cohere"),
    "conventions.layer_norm[neox]": lambda x, w: cv.layer_norm(x, w, None, 1e-5, convention="neox"),
    "partial_rms_norm": lambda x, w: va.partial_rms_norm(x, w, 0.5, 1e-8),
    "grouped_rms_norm": lambda x, w: va.grouped_rms_norm(x, w, 2, 1e-6, gate=x.flip(-1)),
    "fused_add_rms_norm": lambda x, w: va.fused_add_rms_norm(x, x.flip(-1), w, 1e-6)[0],
    "scale_norm": lambda x, w: va.scale_norm(x, w[:1], 1e-5),
}


# these compute in float32 even for float64 input (as the modules do): compare at float32's precision
FLOAT32_PATHS = {"conventions.rms_norm[gemma]", "conventions.rms_norm[outside]", "conventions.layer_norm[cohere]",
                 "grouped_rms_norm", "fused_add_rms_norm"}


def _autograd_grad(f, x, w):
    xx = x.clone().requires_grad_(True)
    (gx,) = torch.autograd.grad(f(xx, w).pow(2).sum(), xx)
    return gx


@pytest.mark.parametrize("name", list(PATHS))
def test_torch_func_matches_plain_autograd(name):
    f = PATHS[name]
    x, w, _ = _data((3, 8), 5)
    rtol = 2e-5 if name in FLOAT32_PATHS else 1e-10
    # vmap: the batched result equals the row-by-row result
    vm = torch.func.vmap(lambda r: f(r, w))(x)
    torch.testing.assert_close(vm, torch.stack([f(r, w) for r in x]), rtol=rtol, atol=rtol)
    # grad: equals torch.autograd through the explicit backward
    g = torch.func.grad(lambda t: f(t, w).pow(2).sum())(x)
    torch.testing.assert_close(g, _autograd_grad(f, x, w), rtol=rtol, atol=rtol)
    # jvp: equals the directional derivative from the gradient of <f, u> (a vector-Jacobian identity)
    v = torch.randn(x.shape, generator=torch.Generator().manual_seed(6), dtype=x.dtype)
    u = torch.randn(x.shape, generator=torch.Generator().manual_seed(7), dtype=x.dtype)
    _, tangent = torch.func.jvp(lambda t: f(t, w), (x,), (v,))
    xx = x.clone().requires_grad_(True)
    (vjp_u,) = torch.autograd.grad((f(xx, w) * u).sum(), xx)
    torch.testing.assert_close((tangent * u).sum(), (vjp_u * v).sum(), rtol=rtol, atol=rtol)
    # second derivative (grad of grad) equals double backward through the explicit backward
    hv = torch.func.grad(lambda t: (torch.func.grad(lambda s: f(s, w).pow(2).sum())(t) * v).sum())(x)
    xx = x.clone().requires_grad_(True)
    (gx,) = torch.autograd.grad(f(xx, w).pow(2).sum(), xx, create_graph=True)
    (hv_ref,) = torch.autograd.grad((gx * v).sum(), xx)
    torch.testing.assert_close(hv, hv_ref, rtol=10 * rtol, atol=10 * rtol)


# ---------------------------------------------------------------- range thresholds (docs/numerics.md)

EDGES = ref.square_edges(torch.float32)
RANGE_PATHS = {
    "reference.rms_norm": lambda x, e: ri.rms_norm(x, None, e),
    "reference.layer_norm": lambda x, e: ri.layer_norm(x, None, None, e),
}


@pytest.mark.parametrize("name", list(RANGE_PATHS))
def test_range_edges_are_where_the_reference_paths_fail(name):
    """docs/numerics.md prints square_edges(): a row holding the overflow value comes out as zeros (rstd 0),
    one a float32 step below it is normalized; with eps=0 a row at the underflow value is Inf/NaN, one a
    float32 step above it is normalized."""
    fn = RANGE_PATHS[name]
    over, under = EDGES["overflow"], EDGES["underflow"]
    assert 1.8e19 < over < 1.9e19 and 2e-23 < under < 3e-23
    step_down = float(torch.nextafter(torch.tensor(over), torch.tensor(0.0)))
    step_up = float(torch.nextafter(torch.tensor(under), torch.tensor(1.0)))
    # rows of mean 0, so that LayerNorm's deviations are the elements themselves
    big = fn(torch.tensor([[over, -over, 1.0, -1.0]]), 1e-6)
    assert torch.equal(big, torch.zeros_like(big)), big   # rstd 0
    ok = fn(torch.tensor([[step_down, -step_down, 1.0, -1.0]]), 1e-6)
    assert torch.isfinite(ok).all() and ok.abs().max() > 0.5, ok
    tiny = fn(torch.tensor([[under, -under, under, -under]]), 0.0)
    assert torch.isinf(tiny).all(), tiny   # rstd Inf
    fine = fn(torch.tensor([[step_up, -step_up, step_up, -step_up]]), 0.0)
    assert torch.isfinite(fine).all() and fine.abs().max() > 0.5, fine


# ---------------------------------------------------------------- distributed norms on one gloo rank

_DIST_WORKER = r"""
import json, torch, torch.distributed as dist
from reference_impl import distributed as D, oracle
dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
out = {}
g = torch.Generator().manual_seed(8)
fns = {
    "sharded_rms_norm": lambda x, w: D.sharded_rms_norm(x, w, 1e-6),
    "sequence_parallel_rms_norm": lambda x, w: D.sequence_parallel_rms_norm(x, w, 1e-6),
    "sharded_layer_norm": lambda x, w: D.sharded_layer_norm(x, w, None, 1e-5),
    "sequence_parallel_layer_norm": lambda x, w: D.sequence_parallel_layer_norm(x, w, None, 1e-5),
}
for name, fn in fns.items():
    x = torch.randn(3, 8, generator=g, dtype=torch.float64).requires_grad_(True)
    w = (1 + 0.2 * torch.randn(8, generator=g, dtype=torch.float64)).requires_grad_(True)
    try:
        (gx,) = torch.autograd.grad(fn(x, w).pow(2).sum(), x, create_graph=True)
        gx.sum().backward()
        out[name] = None
    except RuntimeError as e:
        out[name] = str(e)
    try:
        big = {"sharded_rms_norm": lambda t: D.sharded_rms_norm(t, None, 1e39),
               "sequence_parallel_rms_norm": lambda t: D.sequence_parallel_rms_norm(t, None, 1e39),
               "sharded_layer_norm": lambda t: D.sharded_layer_norm(t, None, None, 1e39),
               "sequence_parallel_layer_norm": lambda t: D.sequence_parallel_layer_norm(t, None, None, 1e39)}
        big[name](x.detach().float())
        out[name + "/eps"] = None
    except ValueError as e:
        out[name + "/eps"] = str(e)
x = (1e4 + torch.randn(4, 1024, generator=g, dtype=torch.float64)).float()
y = D.sharded_layer_norm(x, None, None, 1e-5)
want = oracle.layer_norm_forward(x.double().numpy(), None, None, 1e-5)
out["large_mean_err"] = float((y.double() - torch.from_numpy(want)).abs().max())
dist.destroy_process_group()
print("RESULT" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def one_rank():
    import json
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", _DIST_WORKER], cwd=repo, capture_output=True, text=True, timeout=300)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert proc.returncode == 0 and line, proc.stderr[-3000:]
    return json.loads(line[0][len("RESULT"):])


DIST_FNS = ["sharded_rms_norm", "sequence_parallel_rms_norm", "sharded_layer_norm", "sequence_parallel_layer_norm"]


@pytest.mark.parametrize("name", DIST_FNS)
def test_distributed_second_derivative_raises_once_differentiable(one_rank, name):
    err = one_rank[name]
    assert err is not None, f"{name}: a second derivative returned a number (its rstd is a constant there)"
    assert "once_differentiable" in err, err


@pytest.mark.parametrize("name", DIST_FNS)
def test_distributed_eps_above_float32_max_is_refused(one_rank, name):
    err = one_rank[name + "/eps"]
    assert err is not None and "largest value" in err, err


def test_sharded_layer_norm_default_is_accurate_at_a_large_mean(one_rank):
    """Rows of mean 1e4 and std 1: the default statistics keep the variance (the sums lose it)."""
    assert one_rank["large_mean_err"] < 1e-3, one_rank["large_mean_err"]
