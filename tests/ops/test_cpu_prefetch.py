"""The next-row software prefetch of the CPU row kernels (``prefetch_l2`` in cuda/cpu/simd.h) moves no bit.

The kernels ask for the next row's lines during a row's last pass; ``NORMLAB_CPU_PREFETCH=0`` (read on every
call) turns that off. A prefetch loads nothing into a register, so both settings must give the same bits for
every output of every op that prefetches: the RMSNorm and LayerNorm forward (with and without a fused
residual, both residual contracts), their backward (dx and the gain and bias gradients), in float32, bfloat16
and float16, on every instruction set this CPU has, and with streaming stores on and off. A last row, a
single row and rows too short for the tiles are all covered: the prefetch of a next row that does not exist
must not be issued (nothing to compare there but a crash, which would fail the test too).
"""
from __future__ import annotations

import pytest
import torch

import reference_impl.ops  # noqa: F401  (loads the library)
from reference_impl.ops import library as lib

from .env_vars import set_env

ISAS = ("scalar", "avx2", "avx512", None)  # None: the best this CPU has (AVX512-BF16 here, if present)
SHAPES = ((1, 4096), (3, 1000), (9, 2048), (4, 520))
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _ops(x, w, b, r, dy):
    out = []
    y, res, rstd = torch.ops.normlab.rms_norm_fwd(x, w, None, 1e-6, 0)
    out += [y, rstd]
    y, res, rstd2 = torch.ops.normlab.rms_norm_fwd(x, w, r, 1e-6, 1)
    out += [y, res, rstd2]
    y, res, rstd3 = torch.ops.normlab.rms_norm_fwd(x, w, r, 1e-6, 2)
    out += [y, res, rstd3]
    out += list(torch.ops.normlab.rms_norm_bwd(dy, x, w, rstd, 0))
    out += list(torch.ops.normlab.rms_norm_bwd(dy, x, w, rstd, 1))
    y, mean, lrstd, _ = torch.ops.normlab.layer_norm_fwd(x, w, b, 1e-5)
    out += [y, mean, lrstd]
    out += list(torch.ops.normlab.layer_norm_fwd(x, w, b, 1e-5, r, 0))
    out += list(torch.ops.normlab.layer_norm_fwd(x, w, b, 1e-5, r, 2))
    out += list(torch.ops.normlab.layer_norm_bwd(dy, x, w, mean, lrstd))
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("isa", ISAS, ids=lambda v: v or "best")
@pytest.mark.parametrize("stream", ("0", None), ids=("streaming", "default"))
def test_prefetch_moves_no_bit(dtype, isa, stream):
    g = torch.Generator().manual_seed(11)
    for rows, d in SHAPES:
        x = (torch.randn(rows, d, generator=g) * 3).to(dtype)
        r = torch.randn(rows, d, generator=g).to(dtype)
        dy = torch.randn(rows, d, generator=g).to(dtype)
        w = (1 + 0.1 * torch.randn(d, generator=g)).to(dtype)
        b = (0.1 * torch.randn(d, generator=g)).to(dtype)
        with set_env(NORMLAB_CPU_ISA=isa, NORMLAB_STREAM_BYTES=stream, NORMLAB_CPU_PREFETCH="0"):
            off = _ops(x, w, b, r, dy)
        with set_env(NORMLAB_CPU_ISA=isa, NORMLAB_STREAM_BYTES=stream, NORMLAB_CPU_PREFETCH="1"):
            on = _ops(x, w, b, r, dy)
        assert len(on) == len(off) == 26
        for k, (a, c) in enumerate(zip(off, on)):
            assert a.dtype == c.dtype and a.shape == c.shape, (rows, d, k)
            assert torch.equal(a.view(torch.uint8) if a.numel() else a, c.view(torch.uint8) if c.numel() else c), \
                f"output {k} of shape {rows}x{d} differs with the prefetch on ({dtype}, isa {isa or 'best'})"


def test_prefetch_is_on_by_default_and_only_0_turns_it_off():
    from reference_impl.ops import build

    text = (build.SOURCES / "cpu" / "cpu_common.h").read_text()
    body = text[text.index("inline bool prefetch_rows()"):]
    body = body[: body.index("}\n") + 2]
    # the only value that turns it off is the string "0"; anything else (unset, "1", "yes") leaves it on
    assert "env[0] == '0' && env[1] == 0" in body and "return !(" in body
