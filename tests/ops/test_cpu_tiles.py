"""The CPU kernels' multi-row path for short rows and their batched bfloat16 conversions.

- Short rows go through the kernels a tile of rows at a time (``rms_fwd_tiles``,
  ``ln_fwd_tiles``): by default rows of at most ``kTileRowBytes``; ``NORMLAB_CPU_TILE=<bytes>`` sets
  that limit (a large one tiles every row of at most 512 elements) and ``NORMLAB_CPU_TILE=0`` sends
  every row through the row-at-a-time kernels. Both paths must give the same bits for every instruction
  set, dtype, row length (odd ones, vector-width edges), row count (not a multiple of the tile),
  gain/bias presence and convention, with ordinary and streaming stores, and for rows that take the wide
  (double) pass or carry Inf/NaN.
- bfloat16 outputs are packed two vectors at a time (VCVTNE2PS2BF16 with AVX512-BF16, the integer
  rounding of two vectors with one NaN test and one pack otherwise). Without a gain, y is
  ``round_bf16(float(x) * rstd)``: one float32 product per element, which PyTorch computes with the same
  bits from the returned rstd; its own round-to-nearest-even conversion must then match the kernel's
  bits for every path (pairs, single vectors, the scalar tail), ties, subnormals, Inf and NaN included.
"""
from __future__ import annotations

import pytest
import torch

import reference_impl.ops  # noqa: F401  (loads the library)

from .env_vars import set_env as _env

OPS = torch.ops.normlab
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
ISAS = ["scalar", "avx2", "avx512", "avx512bf16"]  # a request above what the CPU has falls back
# vector-width edges, odd lengths, head_dim sizes, the largest tiled length and the first one past it
DS = [1, 3, 7, 8, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 96, 127, 128, 129, 192, 255, 256, 257, 384, 511,
      512, 513]
ROWS = [1, 3, 4, 5, 7, 9, 13]


def _rows(rows, d, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, d, generator=g, dtype=torch.float64) * 3
    if rows >= 3:  # a row for the wide pass (huge), one with a NaN, and with more rows a tiny one
        x[1] *= 1e25 if dtype == torch.float32 else 1.0
        x[2, d // 2] = float("nan")
    if rows >= 7:
        x[6] *= 1e-25 if dtype == torch.float32 else 1.0
    return x.to(dtype)


def _same(a, b):
    """Bit-identical tensors (NaN equal to NaN of the same bits)."""
    assert a.shape == b.shape and a.dtype == b.dtype
    ia = a.contiguous().view(torch.int16 if a.element_size() == 2 else torch.int32)
    ib = b.contiguous().view(torch.int16 if b.element_size() == 2 else torch.int32)
    return torch.equal(ia, ib)


def _both(fn):
    with _env(NORMLAB_CPU_TILE="0"):
        rowwise = fn()
    with _env(NORMLAB_CPU_TILE="1000000"):  # every row of at most 512 elements, whatever its byte length
        tiled = fn()
    return rowwise, tiled


@pytest.mark.guards("fused.short_row_tiles")
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("stream", [False, True])
def test_tiled_rms_forward_is_bit_identical_to_row_by_row(isa, stream):
    """RMSNorm forward, both conventions, no gain / gain of x's dtype / float32 gain: y and rstd of the
    tiled path equal the row-by-row path bit for bit."""
    with _env(NORMLAB_CPU_ISA=isa, NORMLAB_STREAM_BYTES="0" if stream else None):
        for dtype in DTYPES:
            for d in DS:
                for rows in ROWS:
                    x = _rows(rows, d, dtype, seed=d * 31 + rows)
                    g = torch.Generator().manual_seed(d)
                    w = 1 + 0.5 * torch.randn(d, generator=g)
                    for weight in (None, w.to(dtype), w):
                        for conv in (0, 1):
                            a, b = _both(lambda: OPS.rms_norm_fwd(x, weight, None, 1e-6, conv))
                            assert _same(a[0], b[0]) and _same(a[2], b[2]), (dtype, d, rows, conv, weight is None)


@pytest.mark.guards("fused.short_row_tiles")
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("stream", [False, True])
def test_tiled_layer_norm_forward_is_bit_identical_to_row_by_row(isa, stream):
    """LayerNorm forward with and without weight and bias: y, mean and rstd equal bit for bit."""
    with _env(NORMLAB_CPU_ISA=isa, NORMLAB_STREAM_BYTES="0" if stream else None):
        for dtype in DTYPES:
            for d in DS:
                for rows in ROWS:
                    x = _rows(rows, d, dtype, seed=d * 17 + rows) + 5  # a mean away from zero
                    g = torch.Generator().manual_seed(d)
                    w, bias = 1 + 0.5 * torch.randn(d, generator=g), 0.3 * torch.randn(d, generator=g)
                    for weight, b in ((None, None), (w.to(dtype), None), (None, bias), (w, bias.to(dtype))):
                        a, c = _both(lambda: OPS.layer_norm_fwd(x, weight, b, 1e-5))
                        assert all(_same(p, q) for p, q in zip(a, c)), (dtype, d, rows)


@pytest.mark.guards("fused.short_row_tiles")
def test_tiled_out_variants_and_offsets_match():
    """The out= ops into buffers at every element offset within a 64-byte line (rows whose outputs sit at
    different offsets from a line boundary take the per-row fallback inside a tile) match the allocating
    op bit for bit, with streaming stores."""
    with _env(NORMLAB_STREAM_BYTES="0"):
        for dtype in DTYPES:
            for d in (16, 24, 33, 64, 100):
                x = _rows(9, d, dtype, seed=d)
                w = torch.rand(d) + 0.5
                want = OPS.rms_norm_fwd(x, w, None, 1e-6, 0)[0]
                want_ln = OPS.layer_norm_fwd(x, w, w, 1e-5)[0]
                esz = x.element_size()
                for off in range(64 // esz):
                    buf = torch.empty(9 * d + 64, dtype=dtype)
                    y = buf[off:off + 9 * d].view(9, d)
                    OPS.rms_norm_fwd_out(x, w, None, 1e-6, 0, y=y, residual_out=None)
                    assert _same(y, want), (dtype, d, off)
                    OPS.layer_norm_fwd_out(x, w, w, 1e-5, y=y)
                    assert _same(y, want_ln), (dtype, d, off)


def _bf16_bits_reference(f32):
    """PyTorch's float32 -> bfloat16 (round to nearest even), NaN mapped to the canonical 0x7FC0."""
    out = f32.to(torch.bfloat16).view(torch.int16).clone()
    out[torch.isnan(f32)] = 0x7FC0
    return out


@pytest.mark.guards("fused.bf16_pairs")
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("stream", [False, True])
def test_bf16_conversions_round_to_nearest_even_on_every_path(isa, stream):
    """y = round_bf16(float(x) * rstd) with no gain: the kernel's bits equal PyTorch's conversion of the
    same float32 products, for rows whose lengths exercise the pair, single-vector and scalar steps. The
    rows mix subnormal products, Inf and NaN; ties come from a float32 gain whose low 16 bits are 0x8000."""
    g = torch.Generator().manual_seed(7)
    with _env(NORMLAB_CPU_ISA=isa, NORMLAB_STREAM_BYTES="0" if stream else None):
        for d in (16, 31, 32, 33, 48, 64, 95, 96, 128, 200, 512, 1000, 4096 + 40):
            x = torch.randn(6, d, generator=g).to(torch.bfloat16)
            x[1] = torch.ldexp(torch.ones(d), torch.randint(-140, -120, (d,), generator=g)).to(torch.bfloat16)
            x[1, 0] = 1.0  # rstd near 1: the other products stay subnormal or tiny
            x[2, d // 3] = float("inf")
            x[3, d // 2] = float("nan")
            for rows_eps in (1e-6, 0.0):
                y, _, rstd = OPS.rms_norm_fwd(x, None, None, rows_eps, 0)
                prod = x.float() * rstd.unsqueeze(-1)
                assert torch.equal(y.view(torch.int16), _bf16_bits_reference(prod)), (d, rows_eps)
                # the Llama path rounds h * rstd to bf16 before the gain: with a gain of ones the same bits
                yw = OPS.rms_norm_fwd(x, torch.ones(d), None, rows_eps, 0)[0]
                assert torch.equal(yw.view(torch.int16), _bf16_bits_reference(prod)), (d, rows_eps)
        # ties: a row of ones has rstd = 1 with eps = 0, so the Llama path's second rounding sees
        # round_bf16(1 * w) with the float32 gain itself; gains whose low 16 bits are exactly 0x8000 (half
        # way between two bf16 values, either neighbour even) and their neighbours
        d = 200
        bits = torch.randint(0x3F000000, 0x40800000, (d,), generator=g, dtype=torch.int32) & ~0xFFFF
        bits = bits | torch.tensor([0x8000, 0x7FFF, 0x8001, 0x18000], dtype=torch.int32).repeat(d // 4)
        w = bits.view(torch.float32)
        x = torch.ones(5, d, dtype=torch.bfloat16)
        y, _, rstd = OPS.rms_norm_fwd(x, w, None, 0.0, 0)
        assert torch.equal(rstd, torch.ones(5))
        assert torch.equal(y.view(torch.int16), _bf16_bits_reference(w.expand(5, d)))
