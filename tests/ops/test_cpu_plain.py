"""The LayerNorm forward of rows without a fused residual (``ln_fwd_plain`` in cuda/cpu/layer_norm_kernels.h)
gives the bits of the general row kernel (``ln_fwd_rows``).

The plain path knows at compile time whether there is a gain and a bias, and for 16-bit rows widens each
element once into a float32 copy of the row that its second and third passes read. Its operations and
their order are the general kernel's, so ``NORMLAB_CPU_PLAIN=0`` (read on every call: every row through
``ln_fwd_rows``) and the default must agree bit for bit on ``y``, the mean and rstd: in float32, bfloat16 and
float16, on every instruction set this CPU has, with streaming stores on and off, for each of the four
gain/bias combinations, and for rows that leave the float32 range (redone in double), rows holding Inf or
NaN, constant rows, and subnormal rows. Row lengths that do not fill a vector exercise the tails.
"""
from __future__ import annotations

import pytest
import torch

import reference_impl.ops  # noqa: F401  (loads the library)

from .env_vars import set_env

ISAS = ("scalar", "avx2", "avx512", None)  # None: the best this CPU has
SHAPES = ((1, 4096), (5, 1000), (9, 2048), (3, 1537))  # all longer than the tiles' rows (512 elements)
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _rows(rows: int, d: int, dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    """Ordinary rows, and after them the rows every path must handle the same way."""
    x = torch.randn(rows, d, generator=g) * 3 + 1
    big = torch.finfo(dtype).max / 4
    odd = torch.stack([
        torch.full((d,), 2.5),                                   # constant: variance 0
        torch.randn(d, generator=g) * big,                       # squares overflow float32 for wide dtypes
        torch.randn(d, generator=g) * torch.finfo(dtype).tiny,   # tiny, subnormal after the centring
        torch.randn(d, generator=g).index_fill(0, torch.tensor([3]), float("inf")),
        torch.randn(d, generator=g).index_fill(0, torch.tensor([d - 1]), float("nan")),
        torch.randn(d, generator=g) * 1e-3 + 1e4,                # mean far above the spread
    ])
    return torch.cat([x, odd]).to(dtype)


def _ln(x, w, b):
    y, mean, rstd, _ = torch.ops.normlab.layer_norm_fwd(x, w, b, 1e-5)
    return [y, mean, rstd]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("isa", ISAS, ids=lambda v: v or "best")
@pytest.mark.parametrize("stream", ("0", None), ids=("streaming", "default"))
def test_plain_rows_give_the_general_kernels_bits(dtype, isa, stream):
    g = torch.Generator().manual_seed(5)
    compared = 0
    for rows, d in SHAPES:
        x = _rows(rows, d, dtype, g)
        w = (1 + 0.1 * torch.randn(d, generator=g)).to(dtype)
        b = (0.1 * torch.randn(d, generator=g)).to(dtype)
        for wi, bi in ((w, b), (w, None), (None, b), (None, None)):
            with set_env(NORMLAB_CPU_ISA=isa, NORMLAB_STREAM_BYTES=stream, NORMLAB_CPU_PLAIN="0"):
                general = _ln(x, wi, bi)
            with set_env(NORMLAB_CPU_ISA=isa, NORMLAB_STREAM_BYTES=stream, NORMLAB_CPU_PLAIN=None):
                plain = _ln(x, wi, bi)
            for k, (a, c) in enumerate(zip(general, plain)):
                assert a.dtype == c.dtype and a.shape == c.shape
                assert torch.equal(a.view(torch.uint8), c.view(torch.uint8)), (
                    f"output {k} of {x.shape[0]}x{d} ({dtype}, isa {isa or 'best'}, gain {wi is not None}, "
                    f"bias {bi is not None}) differs between the plain and the general row kernel")
                compared += 1
    assert compared == len(SHAPES) * 4 * 3


def test_the_plain_rows_are_the_default_and_only_0_turns_them_off():
    from reference_impl.ops import build

    text = (build.SOURCES / "cpu" / "cpu_common.h").read_text()
    body = text[text.index("inline bool plain_rows()"):]
    body = body[: body.index("}\n") + 2]
    assert "NORMLAB_CPU_PLAIN" in body
    assert "env[0] == '0' && env[1] == 0" in body and "return !(" in body


def test_a_fused_residual_still_takes_the_general_kernel():
    """A residual never reaches the plain path (it has no residual input): with and without the setting the
    residual forward gives the same bits, and its outputs match the unfused sum normalized by the plain path
    under the "hf" contract (the sum rounded to x's dtype, then normalized)."""
    g = torch.Generator().manual_seed(9)
    x = torch.randn(6, 1536, generator=g).bfloat16()
    r = torch.randn(6, 1536, generator=g).bfloat16()
    w = (1 + 0.1 * torch.randn(1536, generator=g)).bfloat16()
    b = (0.1 * torch.randn(1536, generator=g)).bfloat16()
    with set_env(NORMLAB_CPU_PLAIN="0"):
        off = torch.ops.normlab.layer_norm_fwd(x, w, b, 1e-5, r, 0)
    on = torch.ops.normlab.layer_norm_fwd(x, w, b, 1e-5, r, 0)
    for a, c in zip(off, on):
        assert torch.equal(a.view(torch.uint8), c.view(torch.uint8))
    h = (x.float() + r.float()).bfloat16()
    y, mean, rstd, _ = torch.ops.normlab.layer_norm_fwd(h, w, b, 1e-5)
    assert torch.equal(on[3], h)
    for a, c in zip((y, mean, rstd), on[:3]):
        assert torch.equal(a.view(torch.uint8), c.view(torch.uint8))
