"""Degenerate sizes across every entry point: 0 rows is an empty result, an empty last dimension (d = 0)
is a ValueError that names the problem (one rule, in reference_impl._checks.check_input, shared by the
reference, the conventions, the variants and the fused ops; the native ops check it too)."""
from __future__ import annotations

import pytest
import torch

import reference_impl as ri
from reference_impl import conventions as cv
from reference_impl import variants as V

ENTRY_POINTS = {
    "reference.rms_norm": lambda x: ri.rms_norm(x, torch.ones(x.shape[-1])),
    "reference.layer_norm": lambda x: ri.layer_norm(x, torch.ones(x.shape[-1]), torch.zeros(x.shape[-1])),
    "conventions.rms_norm": lambda x: cv.rms_norm(x, torch.ones(x.shape[-1]), convention="gemma"),
    "conventions.layer_norm": lambda x: cv.layer_norm(x),
    "variants.partial_rms_norm": lambda x: V.partial_rms_norm(x, p=0.5),
    "variants.grouped_rms_norm": lambda x: V.grouped_rms_norm(x, groups=2 if x.shape[-1] % 2 == 0 else 1),
    "variants.fused_add_rms_norm": lambda x: V.fused_add_rms_norm(x, x.clone())[0],
    "variants.qk_norm": lambda x: V.qk_norm(x, x.clone(), None, None, head_dim=max(1, x.shape[-1] // 2))[0],
    "variants.scale_norm": lambda x: V.scale_norm(x, torch.ones(1)),
    "ops.fused_rms_norm": lambda x: ri.fused_rms_norm(x, torch.ones(x.shape[-1])),
    "ops.fused_layer_norm": lambda x: ri.fused_layer_norm(x, torch.ones(x.shape[-1]), torch.zeros(x.shape[-1])),
}


@pytest.mark.guards("fused.bad_input")
@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("shape", [(3, 0), (0,), (2, 4, 0)], ids=str)
def test_empty_last_dimension_is_a_value_error(name, shape):
    with pytest.raises(ValueError, match="empty last dimension"):
        ENTRY_POINTS[name](torch.randn(shape))


@pytest.mark.guards("fused.bad_input")
@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("shape", [(0, 8), (2, 0, 8)], ids=str)
def test_zero_rows_give_an_empty_result(name, shape):
    x = torch.randn(shape, requires_grad=True)
    y = ENTRY_POINTS[name](x)
    assert y.shape == x.shape and y.numel() == 0
    y.sum().backward()
    assert x.grad.shape == x.shape
