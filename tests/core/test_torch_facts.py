"""Facts about PyTorch that the pages state, read from the installed torch's dispatcher and run-time paths.

A new torch that gains a CPU kernel for ``aten::_fused_rms_norm``, or that stops skipping the fused path for
a weight of another dtype, fails these tests, and with them the sentences that cite them.
"""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from reference_impl import conventions as cv

has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key


@pytest.mark.guards("conformance.torch_cpu_composite")
def test_fused_rms_norm_has_a_cuda_kernel_and_no_cpu_kernel():
    """On CPU, ``torch.rms_norm`` runs the composite (decomposed) formula: no CPU kernel is registered."""
    assert has_kernel("aten::_fused_rms_norm", "CUDA")
    assert not has_kernel("aten::_fused_rms_norm", "CPU")
    assert has_kernel("aten::rms_norm", "CompositeImplicitAutograd")
    assert not has_kernel("aten::rms_norm", "CPU"), "rms_norm itself is composite: it decides where to go"


@pytest.mark.guards("conformance.torch_cpu_composite")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_cpu_rms_norm_is_the_decomposition_bit_for_bit(dtype):
    g = torch.Generator().manual_seed(5)
    x = (3 * torch.randn(16, 257, generator=g)).to(dtype)
    w = (1 + 0.1 * torch.randn(257, generator=g)).to(dtype)
    assert torch.equal(F.rms_norm(x, (257,), w, 1e-6), cv.rms_norm(x, w, 1e-6, convention="torch"))


_WEIGHT_DTYPE_PROBE = """
import warnings, torch, torch.nn.functional as F
x = torch.randn(4, 64).to(torch.bfloat16)
w = torch.ones(64, dtype=torch.float32)
with warnings.catch_warnings(record=True) as same:
    warnings.simplefilter("always")
    F.rms_norm(x, (64,), w.to(torch.bfloat16), 1e-6)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    y = F.rms_norm(x, (64,), w, 1e-6)
print(repr(([str(c.message) for c in caught], [str(c.message) for c in same], str(y.dtype))))
"""


@pytest.mark.guards("conformance.torch_weight_dtype")
def test_a_weight_of_another_dtype_skips_the_fused_path_with_a_warning():
    """bfloat16 activations with a float32 weight: torch warns that it cannot take the fused kernel, and
    the output keeps the activations' dtype (the gain is applied in float32, then one cast). torch warns
    once per process, so the probe runs in a fresh interpreter: an earlier call in this one (another test
    in the same worker) would have used the warning up."""
    import ast
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _WEIGHT_DTYPE_PROBE], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    caught, same, dtype = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    assert any("Cannot dispatch to fused implementation" in m for m in caught), caught
    assert dtype == "torch.bfloat16"
    assert not any("fused implementation" in m for m in same), "same dtypes: no warning"


@pytest.mark.guards("conformance.compile_casts")
def test_inductor_drops_the_llama_rounding_unless_told_to_emulate_it():
    """Inductor removes a downcast followed by an upcast (``h.to(bfloat16)`` then the float32 product with the
    weight), so the compiled Llama formula is not LlamaRMSNorm bit for bit;
    ``torch._inductor.config.emulate_precision_casts = True`` keeps the rounding and the bits."""
    import torch._dynamo
    import torch._inductor.config as inductor_config

    from reference_impl.studies.conformance_impls import llama_formula

    g = torch.Generator().manual_seed(11)
    x = (3 * torch.randn(64, 257, generator=g)).to(torch.bfloat16)
    w = (1 + 0.1 * torch.randn(257, generator=g)).to(torch.bfloat16)
    eager = llama_formula(x, w, 1e-6)
    results = {}
    for emulate in (False, True):
        torch._dynamo.reset()
        with inductor_config.patch(emulate_precision_casts=emulate):
            results[emulate] = torch.compile(llama_formula, fullgraph=True)(x, w, 1e-6)
    torch._dynamo.reset()
    assert not torch.equal(results[False], eager), "Inductor kept the intermediate rounding: update the pages"
    assert torch.equal(results[True], eager)


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_one_thread_layer_norm_backward_sums_rows_in_the_inputs_dtype(one_thread, dtype):
    """With one thread, torch's CPU LayerNorm backward adds each row's contribution to a float32 gain's and
    bias's gradients in the input's dtype (one rounding per row), not in float32. The kit's and the tests'
    LayerNorm gradient bound (tolerances.ln_family_backward_bounds, w_low_rows) charges that rounding."""
    from reference_impl import oracle as O
    from reference_impl import tolerances as T

    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 4, 64, generator=g, dtype=torch.float64).to(dtype)
    w = (1 + 0.5 * torch.randn(64, generator=g, dtype=torch.float64)).float().requires_grad_(True)
    b = (0.1 * torch.randn(64, generator=g, dtype=torch.float64)).float().requires_grad_(True)
    xx = x.clone().requires_grad_(True)
    y = F.layer_norm(xx, (64,), w, b, 1e-5)
    dy = torch.randn(y.shape, generator=g, dtype=torch.float64).to(dtype)
    gx, gw, gb = torch.autograd.grad(y, [xx, w, b], dy)
    xf = x.float()
    xhat = (xf - xf.mean(-1, keepdim=True)) * torch.rsqrt(xf.var(-1, unbiased=False, keepdim=True) + 1e-5)
    acc_w, acc_b = torch.zeros(64, dtype=dtype), torch.zeros(64, dtype=dtype)
    for dyr, xr in zip(dy.float().reshape(-1, 64), xhat.reshape(-1, 64)):
        acc_w = (acc_w.float() + dyr * xr).to(dtype)
        acc_b = (acc_b.float() + dyr).to(dtype)
    assert gw.dtype == torch.float32 and torch.equal(gw, acc_w.float()) and torch.equal(gb, acc_b.float())
    assert not torch.equal(gw, (dy.float() * xhat).reshape(-1, 64).sum(0))   # a float32 sum differs
    dx64, dw64, db64 = O.layer_norm_backward(dy.double().numpy(), x.double().numpy(), w.detach().double().numpy(),
                                             b.detach().double().numpy(), 1e-5)
    bdx, bdw, bdb = T.ln_family_backward_bounds(dy, x, w.detach(), b.detach(), 1e-5, extra_low=2, w_low_rows=True)
    for got, want, bound in ((gx, dx64, bdx), (gw, dw64, bdw), (gb, db64, bdb)):
        assert (abs(got.double().numpy() - want) <= bound).all()
