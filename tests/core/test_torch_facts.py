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


@pytest.mark.guards("conformance.torch_weight_dtype")
def test_a_weight_of_another_dtype_skips_the_fused_path_with_a_warning():
    """bfloat16 activations with a float32 weight: torch warns that it cannot take the fused kernel, and
    the output keeps the activations' dtype (the gain is applied in float32, then one cast)."""
    x = torch.randn(4, 64).to(torch.bfloat16)
    w = torch.ones(64, dtype=torch.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = F.rms_norm(x, (64,), w, 1e-6)
    assert any("Cannot dispatch to fused implementation" in str(c.message) for c in caught), \
        [str(c.message) for c in caught]
    assert y.dtype == torch.bfloat16
    with warnings.catch_warnings(record=True) as same:
        warnings.simplefilter("always")
        F.rms_norm(x, (64,), w.to(torch.bfloat16), 1e-6)
    assert not any("fused implementation" in str(c.message) for c in same), "same dtypes: no warning"


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
