"""The CPU page's first kernel (cuda/teach/rms_norm_first.cpp, loaded by reference_impl/ops/cpu_first.py)
against the float64 oracle within the tolerance policy's float32 bound: odd and power-of-two widths, 1-D to
3-D inputs, strided views, 0 rows; and bad inputs raise errors that name the problem."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from reference_impl import oracle
from reference_impl import tolerances as tol
from reference_impl.ops.build import NativeBuildError

pytestmark = pytest.mark.guards("snippet:rms_norm_first.first_rows", "snippet:rms_norm_first.first_glue")


@pytest.fixture(scope="module")
def first():
    from reference_impl.ops.cpu_first import rms_norm_first

    try:
        rms_norm_first(torch.ones(1, 1), torch.ones(1))
    except NativeBuildError as exc:  # no compiler: the rest of the native tests say so as well
        pytest.skip(f"the teaching kernel cannot be built here: {exc}")
    return rms_norm_first


def _worst(y: torch.Tensor, x: torch.Tensor, w: torch.Tensor, eps: float) -> float:
    want = oracle.rms_norm_forward(x.double().numpy(), w.double().numpy(), eps)
    bound = tol.rms_forward_bound(x.double().numpy(), w.double().numpy(), eps, torch.float32)
    return float(np.max(np.abs(y.double().numpy() - want) / bound))


@pytest.mark.parametrize("shape", [(3, 1), (2, 7), (2, 3, 33), (4, 128), (5, 1000), (2, 4097), (4096,)])
@pytest.mark.parametrize("scale", [1e-3, 3.0, 1e3])
def test_first_kernel_matches_the_oracle(first, shape, scale):
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(shape, generator=g) * scale
    w = 1 + 0.5 * torch.randn(shape[-1], generator=g)
    y = first(x, w, 1e-6)
    assert y.dtype == torch.float32 and y.shape == x.shape
    assert _worst(y, x, w, 1e-6) <= 1.0


def test_first_kernel_reads_strided_views_and_empty_batches(first):
    g = torch.Generator().manual_seed(1)
    base = torch.randn(33, 6, generator=g)
    x = base.t()  # (6, 33), not contiguous
    w = torch.rand(66, generator=g)[::2]  # a strided gain
    assert not x.is_contiguous() and not w.is_contiguous()
    y = first(x, w, 1e-5)
    assert _worst(y, x, w, 1e-5) <= 1.0
    assert torch.equal(y, first(x.contiguous(), w.contiguous(), 1e-5))
    empty = first(torch.zeros(0, 8), torch.ones(8))
    assert empty.shape == (0, 8) and empty.dtype == torch.float32


def test_the_oracle_comparison_can_fail(first):
    # eps moved outside the root, at a small RMS, is far outside the float32 bound
    x = torch.full((1, 16), 1e-3)
    w = torch.ones(16)
    wrong = x / (x.pow(2).mean(-1, keepdim=True).sqrt() + 1e-3)
    assert _worst(wrong, x, w, 1e-3) > 1.0
    assert _worst(first(x, w, 1e-3), x, w, 1e-3) <= 1.0


@pytest.mark.parametrize("args, exc, message", [
    ((torch.ones(2, 8, dtype=torch.bfloat16), torch.ones(8)), TypeError, "must be float32"),
    ((torch.ones(2, 8), torch.ones(8, dtype=torch.float64)), TypeError, "must be float32"),
    (([1.0, 2.0], torch.ones(2)), TypeError, "must be tensors"),
    ((torch.ones(2, 8), torch.ones(8), "1e-6"), TypeError, "eps must be a number"),
    ((torch.ones(2, 8), torch.ones(7)), ValueError, "weight must have shape (8,)"),
    ((torch.ones(2, 8), torch.ones(2, 8)), ValueError, "weight must have shape (8,)"),
    ((torch.tensor(1.0), torch.ones(1)), ValueError, "non-empty last dimension"),
    ((torch.ones(2, 0), torch.ones(0)), ValueError, "non-empty last dimension"),
    ((torch.ones(2, 8), torch.ones(8), -1e-6), ValueError, "eps must be finite and >= 0"),
    ((torch.ones(2, 8), torch.ones(8), float("nan")), ValueError, "eps must be finite and >= 0"),
    ((torch.ones(2, 8, device="meta"), torch.ones(8, device="meta")), ValueError, "must be CPU tensors"),
])
def test_bad_inputs_name_the_problem(first, args, exc, message):
    with pytest.raises(exc, match=message.replace("(", r"\(").replace(")", r"\)")):
        first(*args)
