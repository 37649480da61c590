"""The bfloat16 RMSNorm forward for processors with AVX512-BF16 (``cuda/cpu/rms_bf16.h``).

That path sums the squares with VDPBF16PS and rounds with VCVTNE2PS2BF16, two instructions that treat
denormal inputs as zero and flush denormal results, so it takes a row only when no value in reach can be
denormal; every other row goes through the generic template. What is checked, for row lengths around
every step of its loops (32 and 128 elements, masked tails), the three gain conventions, tiled and
row-by-row, with and without streaming stores:

- the rows it declines (a denormal element, a nonzero element below 2^-62, a product near the denormal
  range, Inf, NaN, a row of zeros, a sum of squares out of range) get the same bits as the AVX-512 path
  without AVX512-BF16, which never takes it;
- the rows it takes: rstd is the bit-exact float32 result of the documented instruction order (lane k adds
  the square of element 2k+1, then that of 2k; four accumulators over 128 elements; the lanes summed in
  pairs 8, 4, 2, 1 apart), so the hardware does what the kernel's comment says (rows built so that the
  other order inside a pair rounds differently show that the test can tell); and y is exactly the
  convention's formula evaluated by PyTorch from that rstd (round to nearest even, denormals kept);
- both against the float64 oracle within the tolerance policy, including a row built so that flushing
  its tiny squares would move rstd by more than 10 %.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import reference_impl.ops  # noqa: F401  (loads the library)
from reference_impl import oracle
from reference_impl.shared import effective_gain
from reference_impl.studies.bench.cases import has_avx512_bf16
from reference_impl.tolerances import convention_forward_bound

from .env_vars import set_env as _env

OPS = torch.ops.normlab
BF16 = torch.bfloat16
pytestmark = pytest.mark.skipif(not has_avx512_bf16(), reason="the path runs only on a CPU with AVX512-BF16")

DS = [1, 7, 31, 32, 33, 63, 64, 65, 96, 127, 128, 129, 160, 255, 256, 257, 1000, 1024, 4100]
CONVS = [("llama", 0), ("gemma", 1), ("none", 0)]


def _bits(t):
    return t.contiguous().view(torch.int16 if t.element_size() == 2 else torch.int32)


def _rows(d, seed):
    """Ordinary rows, then rows the path must decline, then rows it must take although they look odd."""
    g = torch.Generator().manual_seed(seed)
    base = lambda: torch.randn(d, generator=g, dtype=torch.float64) * 2  # noqa: E731
    rows = [base() for _ in range(5)]
    odd = {
        "denormal element": (0, 1e-39),
        "tiny element 1e-20": (0, 1e-20),
        "element at 2^-62": (0, 2.0 ** -62),
        "nan": (d // 2, float("nan")),
        "inf": (d - 1, float("inf")),
    }
    for j, v in odd.values():
        r = base()
        r[j] = v
        rows.append(r)
    rows.append(torch.zeros(d, dtype=torch.float64))
    rows.append(base() * 1e30)                       # the sum of squares overflows: the wide pass
    rows.append(base() * 1e-30)                      # every square is denormal: declined
    rows.append(torch.where(base() > 0, 0.0, base()))  # exact zeros mixed in: taken
    rows.append(base() * 1e-17)                      # small but every square normal: taken
    if d >= 2:
        r = torch.full((d,), 2.0 ** -66, dtype=torch.float64)  # flushing these squares moves rstd
        r[0] = 2.0 ** -60
        rows.append(r)
    return torch.stack(rows).to(BF16)


def _gains(d, seed):
    g = torch.Generator().manual_seed(seed + 1)
    w = (1 + 0.5 * torch.randn(d, generator=g)).to(BF16).float()
    tiny = w.clone()
    tiny[0] = 1e-38  # products of ordinary rows near the denormal range: declined
    zeros = w.clone()
    zeros[::3] = 0.0
    bad = w.clone()
    bad[-1] = float("nan")
    return {"ordinary": w, "tiny gain": tiny, "zero gains": zeros, "nan gain": bad, "all zero": torch.zeros(d)}


def _emulated_sumsq(x: torch.Tensor, odd_first: bool = True) -> np.ndarray:
    """The float32 sum of squares in the order rms_bf16.h documents (see the module docstring); with
    odd_first=False, the other order within each pair (for the test that shows the order is seen)."""
    n, d = x.shape
    padded = np.zeros((n, -(-d // 32) * 32), dtype=np.float32)
    padded[:, :d] = x.float().numpy()
    with np.errstate(over="ignore"):  # a huge row's squares overflow, as in the kernel
        sq = padded * padded  # exact otherwise: a bfloat16 square fits in float32
    acc = np.zeros((4, n, 16), dtype=np.float32)
    chunks = padded.shape[1] // 32
    full4 = (d // 128) * 4
    for c in range(chunks):
        k = c % 4 if c < full4 else 0
        part = sq[:, 32 * c:32 * c + 32]
        first, second = (part[:, 1::2], part[:, 0::2]) if odd_first else (part[:, 0::2], part[:, 1::2])
        acc[k] = acc[k] + first
        acc[k] = acc[k] + second
    t = (acc[0] + acc[1]) + (acc[2] + acc[3])
    t = t[:, :8] + t[:, 8:]
    t = t[:, :4] + t[:, 4:]
    t = t[:, :2] + t[:, 2:]
    return t[:, 0] + t[:, 1]


def _taken(x, ss, rs, gain):
    """rms_bf16.h's row check, in float32."""
    mag = x.float().abs().masked_fill(x == 0, float("inf")).amin(dim=1).numpy().astype(np.float32)
    f32 = np.finfo(np.float32)
    with np.errstate(all="ignore"):
        in_range = (ss >= f32.tiny) & (ss <= f32.max)
        t = (mag * rs).astype(np.float32)
        return in_range & (mag >= 2.0 ** -62) & (t >= 2.0 ** -124) & ((t * np.float32(gain)) >= 2.0 ** -124)


def _least_gain(w, conv):
    if w is None:
        return 1.0
    g = (1 + w if conv == "gemma" else w).abs()
    if not torch.isfinite(g).all():
        return 0.0
    nz = g[g != 0]
    return float(nz.min()) if nz.numel() else float("inf")


def _formula(x, rstd, w, conv):
    """y from the kernel's own rstd, evaluated by PyTorch in float32 with its own bfloat16 rounding."""
    t = x.float() * rstd[:, None]
    if conv == "none":
        return t.to(BF16)
    if conv == "llama":
        return (t.to(BF16).float() * w).to(BF16)
    return (t * (1 + w)).to(BF16)


@pytest.mark.guards("fused.bf16_fast_path")
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("tile", ["0", None])
def test_bf16_path_declines_what_it_cannot_do_and_computes_the_rest_exactly(stream, tile):
    eps = 1e-6
    n_taken = n_declined = 0
    with _env(NORMLAB_STREAM_BYTES="0" if stream else None, NORMLAB_CPU_TILE=tile):
        for d in DS:
            x = _rows(d, seed=d)
            ss = _emulated_sumsq(x)
            for gname, w in _gains(d, seed=d).items():
                for conv, code in CONVS:
                    weight = None if conv == "none" else w
                    y, _, rstd = OPS.rms_norm_fwd(x, weight, None, eps, code)
                    with _env(NORMLAB_CPU_ISA="avx512"):
                        y_ref, _, rstd_ref = OPS.rms_norm_fwd(x, weight, None, eps, code)
                    rs = _rs(ss, d, eps)
                    taken = torch.from_numpy(_taken(x, ss, rs, _least_gain(weight, conv)))
                    where = f"d={d} gain={gname} {conv}"
                    # declined rows: the generic template's bits
                    dec = ~taken
                    assert torch.equal(_bits(y[dec]), _bits(y_ref[dec])), where
                    assert torch.equal(_bits(rstd[dec]), _bits(rstd_ref[dec])), where
                    # taken rows: rstd from the documented order, y from the formula, bit for bit
                    assert torch.equal(_bits(rstd[taken]), _bits(torch.from_numpy(rs)[taken])), where
                    want = _formula(x[taken], rstd[taken], w, conv)
                    assert torch.equal(_bits(y[taken]), _bits(want)), where
                    n_taken += int(taken.sum())
                    n_declined += int(dec.sum())
    # both kinds occur, and every odd row of _rows is declined for some gain
    assert n_taken > 1000 and n_declined > 500, (n_taken, n_declined)


def _rs(ss, d, eps):
    with np.errstate(all="ignore"):
        return (np.float32(1) / np.sqrt(ss / np.float32(d) + np.float32(eps))).astype(np.float32)


@pytest.mark.guards("fused.bf16_fast_path")
def test_bf16_path_sums_in_the_documented_order():
    """4000 rows of 1024 elements (half random, half built so that the order inside a pair decides the
    rounding): rstd equals the documented order's bits in every row, while the other order within each
    pair would give other bits in dozens of rows, so this check can tell the two apart."""
    d, eps = 1024, 1e-6
    g = torch.Generator().manual_seed(11)
    rand = torch.randn(2000, d, generator=g) * 2
    built = torch.zeros(2000, d)
    built[:, 1:32:2] = 1.0  # every lane's accumulator starts at 1 ...
    built[:, 32:] = 2.0 ** -12 * (1 + 0.05 * torch.rand(2000, d - 32, generator=g))  # ... then gets half-ulp squares
    x = torch.cat([rand, built]).to(BF16)
    rstd = OPS.rms_norm_fwd(x, None, None, eps, 0)[2]
    want = _rs(_emulated_sumsq(x), d, eps)
    other = _rs(_emulated_sumsq(x, odd_first=False), d, eps)
    assert torch.equal(_bits(rstd), _bits(torch.from_numpy(want)))
    assert int((want != other).sum()) > 20


@pytest.mark.guards("fused.bf16_fast_path")
def test_bf16_path_rows_that_look_odd_are_right_against_the_oracle():
    """Exact zeros, small rows whose squares are all normal, and a row whose tiny squares a flushing sum
    would drop (more than 10 % of its rstd): every finite row is within the tolerance policy's bound."""
    for d in (64, 128, 1024, 4100):
        x = _rows(d, seed=7 * d)
        w = _gains(d, seed=d)["ordinary"]
        for conv, code in (("llama", 0), ("gemma", 1)):
            y = OPS.rms_norm_fwd(x, w, None, 1e-6, code)[0]
            finite = torch.isfinite(x.float()).all(dim=1) & (x.float().abs().amax(dim=1) < 1e20)
            xs, ys = x[finite], y[finite]
            gain = effective_gain(w, conv).double().numpy()
            want = torch.from_numpy(oracle.rms_norm_forward(xs.double().numpy(), gain, 1e-6))
            bound = torch.as_tensor(convention_forward_bound(xs, w, 1e-6, conv, w_dtype=BF16))
            err = (ys.double() - want).abs()
            assert bool((err <= bound).all()), (d, conv, float((err - bound).max()))


def test_the_flushed_row_really_needs_the_check():
    """The last row of _rows: its 2^-66 elements square to denormals. Dropping them (what a flushing sum
    would do) changes rstd by far more than the bound, so the oracle test above can see a missing check."""
    d = 1024
    r = torch.full((d,), 2.0 ** -66, dtype=torch.float64)
    r[0] = 2.0 ** -60
    full = 1 / torch.sqrt((r * r).mean())
    flushed = 1 / torch.sqrt((r[:1] * r[:1]).sum() / d)
    assert abs(float(flushed / full) - 1) > 0.1
    x = r.to(BF16)[None]
    rstd = OPS.rms_norm_fwd(x, None, None, 0.0, 0)[2]
    assert abs(float(rstd[0]) / float(full) - 1) < 1e-5
