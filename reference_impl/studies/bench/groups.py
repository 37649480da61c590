"""The benchmark's two groups beyond the main shapes: short rows (the QK-norm row length) and the fused QK-norm.

**Short rows** (``short_rows``), in the process that measures the forward into a reused buffer (glibc):
the same 8M elements laid out as rows of d = 64, 128 and 256 (``SHORT_SHAPES``: 33.5 MB of input in
float32, 16.8 MB in bfloat16, both dtypes the same shapes). Timed: ``y.copy_(x)`` into a reused ``y`` (the
ceiling), ``fused_rms_norm(x, w, eps, out=y)`` with the tile limit as built (``NORMLAB_CPU_TILE`` unset,
the default of ``cuda/cpu/cpu_common.h``) and with ``NORMLAB_CPU_TILE`` = 0 (row at a time), 256 and 4096
bytes, ``torch.compile`` of the plain RMSNorm writing into ``out``, and ``F.rms_norm`` (which allocates its
output: glibc as it comes). The kernels read ``NORMLAB_CPU_TILE`` on every call, so one process sweeps the
settings: the timed loop sets the variable before an implementation's calls and restores it after
(outside the timing). On a CPU with AVX512-BF16, bfloat16 rows are also timed on the path of a CPU without
those instructions (``fused_rms_norm_avx512``: ``NORMLAB_CPU_ISA=avx512``, set the same way).

**QK-norm** (``qk_forward``, ``qk_forward_backward``), in the process with ``QK_ALLOCATOR`` (glibc with the
tunables that keep freed memory; the allocating calls then pay no page faults): x of shape
``(batch, tokens, heads, head_dim)`` as Qwen3's attention hands it to ``q_norm`` (the projection's output
viewed as heads), ``QK_SHAPES`` = (1, 2048, 32, 128) and (1, 2048, 16, 256), 8M elements each (33.5 MB in
float32, 16.8 MB in bfloat16). Timed: ``fused_qk_norm(x, w, eps)`` (it has no ``out=``: allocating),
``transformers``' ``Qwen3RMSNorm`` called on the 4-d tensor (eager), and ``torch.compile`` of that module;
``y.copy_(x)`` into a reused buffer and ``x.clone()`` give the forward's ceilings in the same process.
Forward+backward: ``y.backward(dy)`` with gradients for x and the gain.

Round budgets: every group runs ``GROUP_ROUNDS`` times ``repeats`` interleaved rounds of k calls per
implementation, k as many as fit in ``ROUND_BUDGET_S`` (1..``MAX_CALLS``). A group's calls take a millisecond
or two, so three rounds of five calls span a few tenths of a second: one burst of another tenant's work then
covers a whole round of one case, and with three rounds its median cannot outvote it (one code path once
measured 0.98 and 1.42 of the copy under two labels). Nine rounds cost a few seconds per group.
"""
from __future__ import annotations

import re

import torch
import torch.nn.functional as F

from ... import oracle
from ... import tolerances as tol
from ...ops import library as fused
from .cases import DTYPES, EPS, REPO, EnvCase, Unavailable, case_env  # noqa: F401 (re-exported)

SHORT_SHAPES = [(131072, 64), (65536, 128), (32768, 256)]
QUICK_SHORT_SHAPES = [(1024, 64)]
QK_SHAPES = [(1, 2048, 32, 128), (1, 2048, 16, 256)]
QUICK_QK_SHAPES = [(1, 16, 4, 64)]
GROUP_ROUNDS = 3  # a group's rounds per round of the main shapes (see the module's note on round budgets)
TILE_SETTINGS = (0, 256, 4096)  # NORMLAB_CPU_TILE values swept besides the built-in default
QK_ALLOCATOR = "glibc_tunables"
GROUP_MODES = ("short_rows", "qk_forward", "qk_forward_backward")

TILE_IMPLS = {f"fused_rms_norm_tile{t}": t for t in TILE_SETTINGS}
GROUP_IMPLS = {
    "short_rows": ("copy", "fused_rms_norm", "fused_rms_norm_avx512", *TILE_IMPLS, "compiled_rms_norm", "F.rms_norm"),
    "qk_forward": ("copy", "clone", "fused_qk_norm", "hf_qwen3_rms_norm", "compiled_qwen3_rms_norm"),
    "qk_forward_backward": ("fused_qk_norm", "hf_qwen3_rms_norm", "compiled_qwen3_rms_norm"),
}


def default_tile_bytes() -> int:
    """The longest tiled row in bytes as built (``kTileRowBytes`` in cuda/cpu/cpu_common.h)."""
    text = (REPO / "cuda" / "cpu" / "cpu_common.h").read_text()
    m = re.search(r"constexpr\s+int64_t\s+kTileRowBytes\s*=\s*(\d+)\s*;", text)
    if not m:
        raise RuntimeError("cuda/cpu/cpu_common.h: kTileRowBytes not found (the benchmark labels its default)")
    return int(m.group(1))


GROUP_LABELS = {
    "fused_rms_norm_tile0": "this op, tile 0 (row at a time)",
    "fused_rms_norm_tile256": "this op, tile 256 B",
    "fused_rms_norm_tile4096": "this op, tile 4096 B",
    "fused_qk_norm": "fused_qk_norm (this op)",
    "hf_qwen3_rms_norm": "Qwen3RMSNorm per head (eager)",
    "compiled_qwen3_rms_norm": "torch.compile(Qwen3RMSNorm)",
}
GROUP_COLORS = {"fused_rms_norm_tile0": "#c5b0d5", "fused_rms_norm_tile256": "tab:purple",
                "fused_rms_norm_tile4096": "#54278f", "fused_qk_norm": "tab:blue",
                "hf_qwen3_rms_norm": "tab:red", "compiled_qwen3_rms_norm": "tab:green"}


# ------------------------------------------------------------------------------------------ implementations



def _qwen3(d: int, w: torch.Tensor):
    try:
        from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm
    except ImportError as exc:
        raise Unavailable(f"transformers has no Qwen3RMSNorm: {exc}") from exc
    m = Qwen3RMSNorm(d, eps=EPS).to(w.dtype)
    with torch.no_grad():
        m.weight.copy_(w)
    return m


def make_group_case(impl: str, mode: str, x: torch.Tensor, w: torch.Tensor, dy, y):
    """A callable for one call of ``impl`` in a group mode on these tensors (x 2-d for short rows, 4-d for QK)."""
    d = x.shape[-1]
    if mode == "short_rows":
        if impl == "copy":
            return lambda: y.copy_(x)
        if impl == "fused_rms_norm":
            return lambda: fused.fused_rms_norm(x, w, EPS, out=y)
        if impl in TILE_IMPLS:
            return EnvCase(lambda: fused.fused_rms_norm(x, w, EPS, out=y), {"NORMLAB_CPU_TILE": TILE_IMPLS[impl]})
        if impl == "fused_rms_norm_avx512":  # the bfloat16 path of a CPU without AVX512-BF16, as the main shapes
            from .cases import has_avx512_bf16
            if x.dtype != torch.bfloat16:
                raise Unavailable("the AVX-512 path differs from the default only in its bfloat16 conversions")
            if not has_avx512_bf16():
                raise Unavailable("this CPU has no AVX512-BF16: its default line is already the AVX-512 path")
            return EnvCase(lambda: fused.fused_rms_norm(x, w, EPS, out=y), {"NORMLAB_CPU_ISA": "avx512"})
        if impl == "compiled_rms_norm":
            from .cases import _compiled_out
            return lambda: _compiled_out(x, w, y, EPS)
        if impl == "F.rms_norm":
            def alloc():
                with torch.no_grad():
                    F.rms_norm(x, (d,), w, EPS)
            return alloc
        raise ValueError(f"no short_rows case for {impl}")
    if impl == "copy":
        return lambda: y.copy_(x)
    if impl == "clone":
        return lambda: x.clone()
    if impl == "fused_qk_norm":
        fn = lambda xx, ww: fused.fused_qk_norm(xx, ww, EPS)  # noqa: E731
        params = None
    else:
        mod = _qwen3(d, w)
        if impl == "compiled_qwen3_rms_norm":
            mod = torch.compile(mod, dynamic=False)
        fn = lambda xx, ww, m=mod: m(xx)  # noqa: E731
        params = mod
    if mode == "qk_forward":
        def fwd():
            with torch.no_grad():
                fn(x, w)
        return fwd
    xg = x.detach().requires_grad_(True)
    wg = w.detach().requires_grad_(True)
    grads = [xg, wg] if params is None else [xg, *params.parameters()]

    def fwd_bwd():
        fn(xg, wg).backward(dy)
        for p in grads:
            p.grad = None
    return fwd_bwd


def validate_group(impl: str, mode: str, dname: str) -> None:
    """Before timing, against the float64 oracle: the forward (every tile setting, the peers) or, for
    forward+backward, the gradient of x."""
    if impl in ("copy", "clone"):
        return
    dtype = DTYPES[dname]
    g = torch.Generator().manual_seed(11)
    shape = (37, 128) if mode == "short_rows" else (2, 3, 5, 64)
    d = shape[-1]
    x = torch.randn(*shape, generator=g).to(dtype)
    w = (1 + 0.1 * torch.randn(d, generator=g)).to(dtype)
    if mode == "qk_forward_backward":
        dy = torch.randn(*shape, generator=g).to(dtype)
        xr = x.detach().double().requires_grad_(True)
        (xr * torch.rsqrt(xr.pow(2).mean(-1, keepdim=True) + EPS) * w.double()).backward(dy.double())
        xt = x.detach().requires_grad_(True)
        if impl == "fused_qk_norm":
            out = fused.fused_qk_norm(xt, w, EPS)
        else:
            m = _qwen3(d, w)
            out = (torch.compile(m, dynamic=False) if impl.startswith("compiled") else m)(xt)
        out.backward(dy)
        err = (xt.grad.double() - xr.grad).abs().max().item()
        scale = xr.grad.abs().max().item()
        if not err <= 16 * tol.unit_roundoff(dtype) * scale:
            raise AssertionError(f"{impl} {dname}: gradient of x off by {err:.3g} (scale {scale:.3g})")
        return
    y = torch.empty_like(x)
    case = make_group_case(impl, mode, x, w, None, y)
    with torch.no_grad(), case_env(case):
        if mode == "short_rows" and impl == "F.rms_norm":
            got = F.rms_norm(x, (d,), w, EPS)
        elif mode == "short_rows":
            case()
            got = y
        elif impl == "fused_qk_norm":
            got = fused.fused_qk_norm(x, w, EPS)
        else:
            m = _qwen3(d, w)
            got = (torch.compile(m, dynamic=False) if impl.startswith("compiled") else m)(x)
    u = tol.unit_roundoff(dtype)
    x2 = x.reshape(-1, d)
    ref = oracle.rms_norm_forward(x2.double().numpy(), w.double().numpy(), EPS)
    bound = tol.rms_forward_bound(x2, w, EPS, dtype) * (1 + u) + u * abs(ref)
    tol.assert_within(got.reshape(-1, d), ref, bound, f"{impl} {mode} {dname}")


def group_inputs(mode: str, shape, dname: str):
    dtype = DTYPES[dname]
    g = torch.Generator().manual_seed(sum(shape) * 7 + len(shape))
    x = torch.randn(*shape, generator=g).to(dtype)
    w = (1 + 0.1 * torch.randn(shape[-1], generator=g)).to(dtype)
    dy = torch.randn(*shape, generator=g).to(dtype) if mode == "qk_forward_backward" else None
    y = torch.empty_like(x) if mode != "qk_forward_backward" else None
    if y is not None:
        y.zero_()  # the reused buffer, touched once outside any timing
    return x, w, dy, y
