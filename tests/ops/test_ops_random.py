"""Random cases and guard pages for the native ops: layouts the hand-picked tests do not list.

- Hypothesis draws the case itself: the row length (vector-width boundaries included), the leading shape
  (0 rows too), the storage offset of every input and of the out= buffers (so loads and the streaming
  stores see every alignment), a padded or transposed layout, the dtypes, the convention, eps, the value
  scale, the instruction-set path of the CPU kernels (``NORMLAB_CPU_ISA``) and whether outputs use
  streaming stores (``NORMLAB_STREAM_BYTES=0``); every result is checked against the float64 oracle within
  the tolerance policy, and the out= results against the allocating op bit for bit.
- Guard pages: inputs are placed right before (and right after) a ``PROT_NONE`` page of an ``mmap``, and
  outputs right before one, so a kernel that reads or writes one element past a row's end (or before its
  start) crashes. That runs in a child process, so a crash is a failed test with its signal, not a lost
  session; the CUDA kernels run there too under their CPU emulation.

Bounded: a few dozen examples and one child process, seconds in all.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference_impl import oracle
from reference_impl import tolerances as tol
from reference_impl.shared import effective_gain
from reference_impl.ops import fused_layer_norm, fused_rms_norm

from .env_vars import set_env as _env

REPO = Path(__file__).resolve().parents[2]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
ISAS = ["scalar", "avx2", "avx512", "avx512bf16"]  # a request above what the CPU has falls back
# row lengths around the vector widths (8 and 16 float lanes, 2 vectors per store step, 4 accumulators)
EDGE_D = [1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 127, 128, 129, 255, 257, 1023, 1025]


@st.composite
def placed(draw, shape, dtype, g, scale):
    """A tensor of `shape` whose data starts `offset` elements into a larger storage, laid out contiguously,
    with padded rows (row stride > d) or transposed (the wrapper copies the last two); values from g."""
    values = (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)
    layout = draw(st.sampled_from(["contiguous", "padded", "transposed"])) if len(shape) > 1 else "contiguous"
    offset = draw(st.integers(0, 17))
    n = values.numel()
    if layout == "padded":  # every row followed by `pad` unused elements
        pad = draw(st.integers(1, 5))
        rows = n // shape[-1]
        base = torch.empty(offset + rows * (shape[-1] + pad), dtype=dtype)
        t = base[offset:].view(rows, shape[-1] + pad)[:, : shape[-1]].view(shape)
    elif layout == "transposed":
        base = torch.empty(offset + n, dtype=dtype)
        t = base[offset:].view(*shape[:-2], shape[-1], shape[-2]).transpose(-1, -2)
    else:
        base = torch.empty(offset + n, dtype=dtype)
        t = base[offset:].view(shape)
    t.copy_(values)
    return t


@st.composite
def cases(draw):
    dtype = draw(st.sampled_from(DTYPES))
    d = draw(st.one_of(st.sampled_from(EDGE_D), st.integers(1, 300)))
    lead = tuple(draw(st.lists(st.integers(0, 5), min_size=0, max_size=2)))
    shape = lead + (d,) if lead or draw(st.booleans()) else (d,)
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    # beyond float16: rows whose float32 sum of squares overflows (1e20) or underflows (1e-22), which
    # the kernels redo in a wide second pass
    extreme = [] if dtype == torch.float16 else [1e20, 1e-22]
    scale = draw(st.sampled_from([1e-3, 1.0, 30.0, *extreme]))
    x = draw(placed(shape, dtype, g, scale))
    dy = draw(placed(shape, dtype, g, 1.0))
    w_dtype = draw(st.sampled_from([None, dtype, torch.float32]))
    w = None if w_dtype is None else draw(placed((d,), w_dtype, g, 0.5)) + 1
    residual = draw(placed(shape, dtype, g, scale)) if draw(st.booleans()) else None
    return dict(x=x, dy=dy, w=w, residual=residual, dtype=dtype,
                convention=draw(st.sampled_from(["llama", "gemma"])),
                eps=draw(st.sampled_from([0.0, 1e-6, 1e-5, 0.25])),
                isa=draw(st.sampled_from(ISAS)), stream=draw(st.booleans()),
                out_offset=draw(st.integers(0, 17)))


def _np(t):
    return None if t is None else t.detach().double().cpu().numpy()


def _out_buffer(like, offset):
    base = torch.full((offset + like.numel(),), float("nan"), dtype=like.dtype)
    return base[offset:].view(like.shape)


@pytest.mark.guards("fused.random_cases", "rms.forward", "rms.vjp_x", "ln.forward")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_random_cases_match_the_oracle(case):
    x, dy, w, res, dtype, conv, eps = (case[k] for k in ("x", "dy", "w", "residual", "dtype", "convention", "eps"))
    hx = x if res is None else (x.float() + res.float()).to(dtype)
    if eps == 0.0 and hx.numel() and bool((hx.double().pow(2).sum(-1) == 0).any()):
        eps = 1e-6  # an all-zero row with eps = 0 is 0/0: NaN by definition, not a case for bounds
    ln_eps = eps or 1e-5  # LayerNorm of a constant row (any row when d = 1) with eps = 0 is 0/0 too
    with _env(NORMLAB_CPU_ISA=case["isa"], NORMLAB_STREAM_BYTES="0" if case["stream"] else None):
        xr = x.clone().requires_grad_(True)
        wr = None if w is None else w.clone().requires_grad_(True)
        out = fused_rms_norm(xr, wr, eps, residual=res, convention=conv)
        y, h = out if res is not None else (out, x)
        gx, *gw = torch.autograd.grad(y, [t for t in (xr, wr) if t is not None], dy)
        with torch.no_grad():
            y_out = _out_buffer(x, case["out_offset"])
            h_out = None if res is None else _out_buffer(x, case["out_offset"] + 3)
            fused_rms_norm(x, w, eps, residual=res, convention=conv, out=y_out, residual_out=h_out)
            ln_out = _out_buffer(x, case["out_offset"])
            fused_layer_norm(x, w, w, ln_eps, out=ln_out)
        ln = fused_layer_norm(x, w, w, ln_eps)
    assert torch.equal(y_out, y.detach()) and (res is None or torch.equal(h_out, h))
    assert torch.equal(ln_out, ln)
    assert torch.equal(h, hx)
    gain = None if w is None else _np(effective_gain(w, conv))
    bound = tol.convention_forward_bound(h, w, eps, conv, w_dtype=None if w is None else dtype)
    tol.assert_within(y.detach(), oracle.rms_norm_forward(_np(h), gain, eps), bound, f"rms {case['isa']}")
    edx, edw = oracle.rms_norm_backward(_np(dy), _np(h), gain, eps)
    bdx, bdw = tol.convention_backward_bounds(dy, h, w, eps, conv)
    if res is None:  # with a residual, dx also carries the residual path; checked elsewhere
        tol.assert_within(gx, edx, bdx, f"rms dx {case['isa']}")
    if w is not None:
        assert gw[0].dtype == w.dtype
        tol.assert_within(gw[0], edw, bdw, f"rms dweight {case['isa']}")
    tol.assert_within(ln, oracle.layer_norm_forward(_np(x), _np(w), _np(w), ln_eps),
                      tol.ln_forward_bound(x, w, w, ln_eps, dtype), f"ln {case['isa']}")


@st.composite
def large_mean_rows(draw):
    d = draw(st.one_of(st.sampled_from(EDGE_D), st.integers(2, 300)))
    lead = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=2)))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    offset = draw(st.sampled_from([1e3, 1e4, 1e5, 1e6, -1e6, 3e6]))
    spread = draw(st.sampled_from([1.0, 0.5, 2.0]))
    x = (offset + spread * torch.randn(lead + (d,), generator=g, dtype=torch.float64)).float()
    return x, draw(st.sampled_from(ISAS))


@pytest.mark.guards("fused.large_mean")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=large_mean_rows())
def test_random_large_mean_layer_norm_rows(case):
    """float32 rows whose mean is 1e3 to 3e6 times their spread: the output matches float64 of the same
    float32 values to a few units of the output's own rounding (the rounded mean does not leak in)."""
    x, isa = case
    if x.shape[-1] > 1 and bool((x.double().std(-1) == 0).any()):
        return  # a row that rounded to a constant: 0/0 (eps aside), not a case for this bound
    with _env(NORMLAB_CPU_ISA=isa):
        y = fused_layer_norm(x, None, None, 1e-5)
    want = oracle.layer_norm_forward(_np(x), None, None, 1e-5)
    err = float((y.double() - torch.from_numpy(want)).abs().max())
    assert err <= 1e-5 * max(1.0, float(abs(want).max())), (isa, err)


# --- guard pages -------------------------------------------------------------------------------------------

_GUARD_SCRIPT = r"""
import ctypes, mmap, os, sys
import torch
import reference_impl.ops  # noqa: F401
from reference_impl.ops import build

PAGE = mmap.PAGESIZE
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
keep = []

def guarded(n, dtype, where):
    # n elements ending at a PROT_NONE page ("before") or starting right after one ("after")
    size = n * torch.empty((), dtype=dtype).element_size()
    pages = (size + PAGE - 1) // PAGE + 2
    m = mmap.mmap(-1, pages * PAGE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    keep.append(m)
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))
    if where == "before":
        guard, start = base + (pages - 1) * PAGE, (pages - 1) * PAGE - size
    else:
        guard, start = base, PAGE
    assert libc.mprotect(guard, PAGE, 0) == 0, ctypes.get_errno()
    t = torch.frombuffer(m, dtype=torch.uint8, count=size, offset=start).view(dtype)
    return t

def place(src, where):
    t = guarded(src.numel(), src.dtype, where).view(src.shape)
    t.copy_(src)
    return t

backends = [("cpu", torch.ops.normlab)]
if len(sys.argv) > 1 and sys.argv[1] == "emu":
    build.load_emulation_library()
    backends.append(("emulation", torch.ops.normlab_emu))
isas = ["scalar", "avx2", "avx512", "avx512bf16"]
for name, ops in backends:
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for d in (1, 7, 15, 17, 33, 63, 65, 129, 1001):
            rows = 5  # a whole tile of the short-row kernels (4 or 2 rows) and rows after it
            g = torch.Generator().manual_seed(d)
            src = [torch.randn(rows, d, generator=g).to(dtype) for _ in range(3)]
            wsrc = (torch.rand(d, generator=g) + 0.5).to(dtype)
            for where in ("before", "after"):
                x, r, dy = (place(s, where) for s in src)
                w = place(wsrc, where)
                for isa in isas if name == "cpu" else isas[-1:]:
                    os.environ["NORMLAB_CPU_ISA"] = isa
                    for stream in ("0", None):  # streaming stores into the guarded out= buffers too
                        if stream is None:
                            os.environ.pop("NORMLAB_STREAM_BYTES", None)
                        else:
                            os.environ["NORMLAB_STREAM_BYTES"] = stream
                        y, h, rstd = ops.rms_norm_fwd(x, w, r, 1e-6, 0)
                        ops.rms_norm_fwd(x, w, None, 1e-6, 1)  # no residual: the multi-row path
                        ops.rms_norm_fwd_out(x, w, None, 1e-6, 0, y=guarded(rows * d, dtype, "before").view(rows, d),
                                             residual_out=None)
                        yo, ho = guarded(rows * d, dtype, "before").view(rows, d), guarded(rows * d, dtype, "before").view(rows, d)
                        ops.rms_norm_fwd_out(x, w, r, 1e-6, 1, y=yo, residual_out=ho)
                        ops.rms_norm_bwd(dy, x, w, rstd, 1)
                        yl, mean, rs = ops.layer_norm_fwd(x, w, w, 1e-5)[:3]
                        ops.layer_norm_fwd_out(x, w, w, 1e-5, y=guarded(rows * d, dtype, "before").view(rows, d))
                        ops.layer_norm_bwd(dy, x, w, mean, rs)
print("ok")
"""


@pytest.mark.guards("fused.guard_pages")
def test_no_read_or_write_outside_the_rows():
    """Every op, dtype, odd row length and instruction set, with each input ending right before a
    PROT_NONE page or starting right after one, and out= buffers ending right before one: a read or write
    of one element too many kills the child process (SIGSEGV) and fails here. The CUDA kernels run the
    same placements under their CPU emulation, with their real addresses."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(_GUARD_SCRIPT), "emu"], capture_output=True,
                         text=True, cwd=REPO, timeout=600)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), (
        f"exit {out.returncode} (negative: killed by that signal, -11 = SIGSEGV)\n{out.stderr[-3000:]}")
