"""CPU benchmark of the normalization ops against the copy ceiling and the peers: ``python -m reference_impl.studies.bench``.

What one run measures, for float32 and bfloat16 and every shape of ``SHAPES`` (inputs of 8 MB and more):

- ``forward_out``: the forward into a reused, preallocated output buffer (nothing is allocated in the
  timed call). The ceiling is ``y.copy_(x)`` into the same reused buffer (same bytes: read x, write y),
  and, where the small extension below builds, a copy with non-temporal (streaming) stores, which skip
  reading the destination's cache lines before writing them. Against it: ``fused_rms_norm(..., out=y)``
  and ``fused_layer_norm(..., out=y)`` (when the op has ``out=``), ``torch.compile`` of the plain RMSNorm
  writing into ``out``, and ONNX Runtime's ``RMSNormalization`` (opset 23), ``SimplifiedLayerNormalization``
  and ``LayerNormalization`` with input and output bound to the same buffers (IOBinding), ORT at its best.
- ``forward_alloc``: the forward that allocates its output, as most code calls it: ``x.clone()`` (an
  allocating copy), the fused ops, ``F.rms_norm``, ``F.layer_norm``, ``torch.compile(plain RMSNorm)``, and
  ORT with outputs allocated by ORT itself (its arena keeps them for reuse).
- ``forward_backward``: ``y.backward(dy)`` after the forward, gradients for x and the gain (and bias).

``forward_alloc`` and ``forward_backward`` run once per allocator setting (glibc's malloc as it comes, glibc
with tunables that keep freed memory, jemalloc and tcmalloc from Debian packages via ``LD_PRELOAD``, and
jemalloc configured to keep freed memory): the command re-launches itself in one worker process per
setting, so every implementation in a comparison ran under the same allocator. A freshly allocated
buffer costs one page fault per 4 KiB page the first time it is written; the ``first_touch`` experiment
times that directly, and every record carries the minor page faults per call (``getrusage``).

Noise discipline: before timing, every implementation is checked against the float64 oracle. Then per
configuration there are ``repeats`` (>= 3) rounds; in each round every implementation runs ``k`` calls,
in an order rotated from round to round (interleaved, so a burst of load hits them alike). A record keeps
each round's median, the median and quartiles of all calls, and the spread. A comparison says "faster"
only where the slower implementation's fastest round is slower than the faster one's slowest round;
otherwise "within noise". The command waits (up to ``--wait`` seconds) until the 1-minute load average is
at most ``--max-load`` and refuses to measure a busy machine unless ``--force`` (which it records).

GB/s counts the bytes that must move at minimum: forward ``2 N b`` (read x, write y), forward+backward
``5 N b`` (forward, then read dy and x, write dx), plus the gain (and bias), for ``N`` elements of ``b``
bytes. Writes ``docs/data/bench_cpu.json`` and SVG plots under ``docs/data/plots/``.
"""
from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from .. import oracle
from .. import tolerances as tol
from ..ops import library as fused
from ..provenance import finish, python_closure, record
from ..provenance import source_hash as pv_source_hash

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "docs" / "data"
OUT = DATA / "bench_cpu.json"
PLOTS = DATA / "plots"
COMMAND = "python -m reference_impl.studies.bench"
# what changes the numbers: the CPU kernels and op schemas (comments stripped), this command and its imports
SOURCES = (sorted(p.relative_to(REPO).as_posix() for p in (REPO / "cuda" / "cpu").glob("*") if p.suffix in (".cpp", ".h"))
           + ["cuda/op_checks.h", "cuda/ops.cpp", "cuda/ops.h"] + python_closure("reference_impl/studies/bench.py"))

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
SHAPES = [(4096, 1024), (4096, 4096), (4096, 8192), (16384, 4096)]
QUICK_SHAPES = [(512, 1024)]
FIRST_TOUCH_SHAPE = (16384, 4096)
MODES = ("forward_out", "forward_alloc", "forward_backward")
EPS = 1e-6
LN_EPS = 1e-5
DEFAULT_REPEATS = 3
ROUND_BUDGET_S = 0.15          # per implementation and round: k calls, as many as fit, 1..MAX_CALLS
MAX_CALLS = 5
MAX_LOAD = 0.5                 # 1-minute load average above which the machine counts as busy (2 cores)
WAIT_S = 600

IMPLS = {
    "forward_out": ("copy", "stream_copy", "fused_rms_norm", "fused_layer_norm", "compiled_rms_norm",
                    "ort_rms_normalization", "ort_simplified_layer_norm", "ort_layer_normalization"),
    "forward_alloc": ("clone", "fused_rms_norm", "fused_layer_norm", "F.rms_norm", "F.layer_norm",
                      "compiled_rms_norm", "ort_rms_normalization", "ort_simplified_layer_norm",
                      "ort_layer_normalization"),
    "forward_backward": ("fused_rms_norm", "fused_layer_norm", "F.rms_norm", "F.layer_norm", "compiled_rms_norm"),
}
LABELS = {
    "copy": "y.copy_(x), reused y (ceiling)",
    "stream_copy": "copy with streaming stores, reused y",
    "clone": "x.clone() (allocating copy)",
    "fused_rms_norm": "fused_rms_norm (this op)",
    "fused_layer_norm": "fused_layer_norm (this op)",
    "F.rms_norm": "F.rms_norm (eager)",
    "F.layer_norm": "F.layer_norm (eager)",
    "compiled_rms_norm": "torch.compile(plain RMSNorm)",
    "ort_rms_normalization": "ONNX Runtime RMSNormalization",
    "ort_simplified_layer_norm": "ONNX Runtime SimplifiedLayerNormalization",
    "ort_layer_normalization": "ONNX Runtime LayerNormalization",
}
CEILINGS = ("copy", "stream_copy", "clone")
COLORS = {"copy": "#bbbbbb", "stream_copy": "#888888", "clone": "#dddddd", "fused_rms_norm": "tab:blue",
          "fused_layer_norm": "tab:cyan", "F.rms_norm": "tab:red", "F.layer_norm": "tab:pink",
          "compiled_rms_norm": "tab:green", "ort_rms_normalization": "tab:orange",
          "ort_simplified_layer_norm": "tab:brown", "ort_layer_normalization": "tab:olive"}
RMS_NORMS = ("fused_rms_norm", "F.rms_norm", "compiled_rms_norm", "ort_rms_normalization", "ort_simplified_layer_norm")
LAYER_NORMS = ("fused_layer_norm", "F.layer_norm", "ort_layer_normalization")  # gain and bias; the rest: gain only
LIBDIR = Path("/usr/lib/x86_64-linux-gnu")
# glibc: a chunk above the mmap threshold is returned to the kernel on free, so the next allocation of
# that size faults on every page again. The threshold cannot be raised above 32 MiB on 64-bit glibc, so
# larger tensors keep their memory only with mmap switched off (mmap_max=0) and trimming pushed out of reach.
ALLOCATORS = {
    "glibc": {"label": "glibc malloc, default settings", "env": {}},
    "glibc_tunables": {"label": "glibc malloc with GLIBC_TUNABLES (mmap off, no trim)",
                       "env": {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=33554432:glibc.malloc.mmap_max=0:"
                                                 "glibc.malloc.trim_threshold=17179869184"}},
    "jemalloc": {"label": "jemalloc (Debian libjemalloc2), default settings",
                 "env": {"LD_PRELOAD": str(LIBDIR / "libjemalloc.so.2")}, "package": "libjemalloc2"},
    "jemalloc_retain": {"label": "jemalloc, MALLOC_CONF keeping freed memory",
                        "env": {"LD_PRELOAD": str(LIBDIR / "libjemalloc.so.2"),
                                "MALLOC_CONF": "oversize_threshold:0,dirty_decay_ms:-1,muzzy_decay_ms:-1"},
                        "package": "libjemalloc2"},
    "tcmalloc": {"label": "tcmalloc (Debian libtcmalloc-minimal4), default settings",
                 "env": {"LD_PRELOAD": str(LIBDIR / "libtcmalloc_minimal.so.4"),
                         "TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": str(1 << 40)},
                 "package": "libtcmalloc-minimal4"},
}
OUT_MODE_ALLOCATOR = "glibc"  # forward_out allocates nothing in its timed calls: measured once, here
BLOCK_ALLOCATOR = "glibc_tunables"


# --8<-- [start:plain_rms]
def plain_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """The RMSNorm a user would write and hand to torch.compile (Hugging Face LlamaRMSNorm's order)."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def plain_rms_norm_out(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """The same, written into a preallocated ``out`` (compiled, the store goes straight into ``out``)."""
    return out.copy_(plain_rms_norm(x, weight, eps))
# --8<-- [end:plain_rms]


# Static shapes, one compiled kernel per (dtype, shape, mode): torch.compile at its best.
_compiled = torch.compile(plain_rms_norm, dynamic=False)
_compiled_out = torch.compile(plain_rms_norm_out, dynamic=False)


def has_out_parameter(fn) -> bool:
    """Whether a fused entry point takes a keyword ``out=`` (the reused-buffer forward)."""
    try:
        return "out" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


# ------------------------------------------------------------------------------------------ streaming copy

_STREAM_COPY_SRC = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <cstring>

// Copy with non-temporal stores: the destination's lines are written without being read first.
__attribute__((target("avx512f"))) static void copy_nt512(char* dst, const char* src, int64_t n) {
  int64_t head = (64 - (reinterpret_cast<uintptr_t>(dst) & 63)) & 63;
  if (head > n) head = n;
  std::memcpy(dst, src, head);
  int64_t i = head;
  for (; i + 64 <= n; i += 64)
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), _mm512_loadu_si512(src + i));
  std::memcpy(dst + i, src + i, n - i);
  _mm_sfence();
}

__attribute__((target("avx2"))) static void copy_nt256(char* dst, const char* src, int64_t n) {
  int64_t head = (32 - (reinterpret_cast<uintptr_t>(dst) & 31)) & 31;
  if (head > n) head = n;
  std::memcpy(dst, src, head);
  int64_t i = head;
  for (; i + 32 <= n; i += 32)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
  std::memcpy(dst + i, src + i, n - i);
  _mm_sfence();
}

torch::Tensor stream_copy(torch::Tensor dst, torch::Tensor src) {
  TORCH_CHECK(dst.is_contiguous() && src.is_contiguous() && dst.nbytes() == src.nbytes(), "same-size contiguous");
  char* d = static_cast<char*>(dst.data_ptr());
  const char* s = static_cast<const char*>(src.data_ptr());
  const int64_t n = src.nbytes(), chunk = 1 << 21;
  const bool wide = __builtin_cpu_supports("avx512f");
  at::parallel_for(0, (n + chunk - 1) / chunk, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      int64_t off = c * chunk, len = std::min(chunk, n - off);
      if (wide) copy_nt512(d + off, s + off, len); else copy_nt256(d + off, s + off, len);
    }
  });
  return dst;
}
"""


def load_stream_copy():
    """Builds (once, cached under build/native/) the streaming-store copy; returns its function or raises."""
    from torch.utils.cpp_extension import load_inline

    build = REPO / "build" / "native" / "bench_stream_copy"
    build.mkdir(parents=True, exist_ok=True)
    mod = load_inline(name="bench_stream_copy", cpp_sources=[_STREAM_COPY_SRC], functions=["stream_copy"],
                      extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], build_directory=str(build))
    return mod.stream_copy


# ------------------------------------------------------------------------------------------ ONNX Runtime

ORT_OPS = {  # impl -> (op type, domain, opset of the default domain, has bias)
    "ort_rms_normalization": ("RMSNormalization", "", 23, False),
    "ort_simplified_layer_norm": ("SimplifiedLayerNormalization", "", 23, False),
    "ort_layer_normalization": ("LayerNormalization", "", 23, True),
}


def _ort_model(impl: str, dname: str, d: int):
    import ml_dtypes
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    op, domain, opset, bias = ORT_OPS[impl]
    tp = {"float32": TensorProto.FLOAT, "bfloat16": TensorProto.BFLOAT16}[dname]
    npdt = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16}[dname]
    g = np.random.default_rng(d)
    inits = [numpy_helper.from_array((1 + 0.1 * g.standard_normal(d)).astype(np.float32).astype(npdt), "w")]
    inputs = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array((0.1 * g.standard_normal(d)).astype(np.float32).astype(npdt), "b"))
        inputs.append("b")
    eps = LN_EPS if bias else EPS
    node = helper.make_node(op, inputs, ["y"], axis=-1, epsilon=eps, **({"stash_type": 1} if op != "RMSNormalization" else {}))
    graph = helper.make_graph([node], impl, [helper.make_tensor_value_info("x", tp, ["n", d])],
                              [helper.make_tensor_value_info("y", tp, ["n", d])], initializer=inits)
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    w = torch.from_numpy(numpy_helper.to_array(inits[0]).astype(np.float32)).to(DTYPES[dname])
    b = torch.from_numpy(numpy_helper.to_array(inits[1]).astype(np.float32)).to(DTYPES[dname]) if bias else None
    return model.SerializeToString(), w, b, eps, tp


class OrtNorm:
    """One ORT session for an op, dtype and hidden size, run through IOBinding on torch tensors' memory."""

    def __init__(self, impl: str, dname: str, d: int, threads: int):
        import onnxruntime as ort

        blob, self.w, self.b, self.eps, self.tp = _ort_model(impl, dname, d)
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        # idle ORT threads must not spin: they would steal the cores from the implementations timed next
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        so.log_severity_level = 3
        self.sess = ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"])
        self.io = self.sess.io_binding()

    def bind(self, x: torch.Tensor, y: torch.Tensor | None):
        """Input bound to x's memory; output to y's (reused) or, with y None, allocated by ORT per run."""
        self.io.clear_binding_inputs()
        self.io.clear_binding_outputs()
        self.io.bind_input("x", "cpu", 0, self.tp, list(x.shape), x.data_ptr())
        if y is None:
            self.io.bind_output("y", "cpu")
        else:
            self.io.bind_output("y", "cpu", 0, self.tp, list(y.shape), y.data_ptr())

    def run(self):
        self.sess.run_with_iobinding(self.io)


# ------------------------------------------------------------------------------------------ implementations

def min_bytes(rows: int, d: int, dtype: torch.dtype, mode: str, impl: str) -> int:
    """Bytes that must move at minimum (see the module docstring)."""
    b = torch.empty((), dtype=dtype).element_size()
    n = rows * d
    params = 0 if impl in CEILINGS else (2 if impl in LAYER_NORMS else 1) * d * b
    if mode == "forward_backward":
        return 5 * n * b + 2 * params  # parameters read in both passes, their gradients written
    return 2 * n * b + params


class Unavailable(Exception):
    """An implementation that cannot run here (no out= yet, ORT lacks the dtype, the extension did not build)."""


_stream_copy_fn = None
_stream_copy_error = None


def _stream_copy():
    global _stream_copy_fn, _stream_copy_error
    if _stream_copy_fn is None and _stream_copy_error is None:
        try:
            _stream_copy_fn = load_stream_copy()
        except Exception as exc:  # noqa: BLE001 - any build failure makes the line unavailable, recorded
            _stream_copy_error = f"the streaming-copy extension did not build: {str(exc).splitlines()[0][:200]}"
    if _stream_copy_fn is None:
        raise Unavailable(_stream_copy_error)
    return _stream_copy_fn


def make_case(impl: str, mode: str, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, dy, y: torch.Tensor | None):
    """A callable running one call of ``impl`` in ``mode`` on these tensors; raises Unavailable."""
    d = x.shape[-1]
    dname = {v: k for k, v in DTYPES.items()}[x.dtype]
    if impl.startswith("ort_"):
        if mode == "forward_backward":
            raise Unavailable("ONNX Runtime inference sessions have no backward")
        try:
            ort = OrtNorm(impl, dname, d, torch.get_num_threads())
        except Exception as exc:  # noqa: BLE001 - ORT reports unsupported types as generic errors
            raise Unavailable(f"ONNX Runtime: {str(exc).splitlines()[0][:200]}") from exc
        ort.bind(x, y if mode == "forward_out" else None)
        return ort.run
    if mode == "forward_out":
        if impl == "copy":
            return lambda: y.copy_(x)
        if impl == "stream_copy":
            fn = _stream_copy()
            return lambda: fn(y, x)
        if impl == "compiled_rms_norm":
            return lambda: _compiled_out(x, w, y, EPS)
        if impl in ("fused_rms_norm", "fused_layer_norm"):
            f = getattr(fused, impl)
            if not has_out_parameter(f):
                raise Unavailable(f"{impl} has no out= parameter in this checkout")
            if impl == "fused_rms_norm":
                return lambda: f(x, w, EPS, out=y)
            return lambda: f(x, w, b, LN_EPS, out=y)
        raise ValueError(f"no forward_out case for {impl}")
    fns = {
        "clone": lambda x, w, b: x.clone(),
        "fused_rms_norm": lambda x, w, b: fused.fused_rms_norm(x, w, EPS),
        "fused_layer_norm": lambda x, w, b: fused.fused_layer_norm(x, w, b, LN_EPS),
        "F.rms_norm": lambda x, w, b: F.rms_norm(x, (d,), w, EPS),
        "F.layer_norm": lambda x, w, b: F.layer_norm(x, (d,), w, b, LN_EPS),
        "compiled_rms_norm": lambda x, w, b: _compiled(x, w, EPS),
    }
    f = fns[impl]
    if mode == "forward_alloc":
        def run():
            with torch.no_grad():
                f(x, w, b)  # the result is dropped inside the timed call: freeing is part of allocating
        return run
    xg = x.detach().requires_grad_(True)
    wg = w.detach().requires_grad_(True)
    bg = b.detach().requires_grad_(True) if impl in LAYER_NORMS else None
    params = [p for p in (xg, wg, bg) if p is not None]

    def run_bwd():
        f(xg, wg, bg).backward(dy)
        for p in params:
            p.grad = None
    return run_bwd


def validate(impl: str, mode: str, dname: str) -> None:
    """Before timing: the forward (or the gradient, for forward_backward) against the float64 oracle."""
    if impl in CEILINGS:
        x = torch.randn(8, 257).to(DTYPES[dname])
        y = torch.empty_like(x)
        if impl == "stream_copy":
            make_case(impl, "forward_out", x, None, None, None, y)()
            if not torch.equal(x, y):
                raise AssertionError("stream_copy did not copy exactly")
        return
    dtype = DTYPES[dname]
    g = torch.Generator().manual_seed(7)
    x = torch.randn(8, 257, generator=g).to(dtype)
    w = (1 + 0.1 * torch.randn(257, generator=g)).to(dtype)
    b = (0.1 * torch.randn(257, generator=g)).to(dtype)
    ort_params = None
    if impl.startswith("ort_"):
        _, w, b, _, _ = _ort_model(impl, dname, 257)  # ORT's model carries its own gain and bias
        ort_params = True
    if mode == "forward_backward":
        # gradient of x against the reference formula in float64
        dy = torch.randn(8, 257, generator=g).to(dtype)
        xg = x.detach().double().requires_grad_(True)
        ln = impl in LAYER_NORMS
        ref = (F.layer_norm(xg, (257,), w.double(), b.double(), LN_EPS) if ln
               else xg * torch.rsqrt(xg.pow(2).mean(-1, keepdim=True) + EPS) * w.double())
        ref.backward(dy.double())
        xt = x.detach().requires_grad_(True)
        f = {"fused_rms_norm": lambda: fused.fused_rms_norm(xt, w, EPS),
             "fused_layer_norm": lambda: fused.fused_layer_norm(xt, w, b, LN_EPS),
             "F.rms_norm": lambda: F.rms_norm(xt, (257,), w, EPS),
             "F.layer_norm": lambda: F.layer_norm(xt, (257,), w, b, LN_EPS),
             "compiled_rms_norm": lambda: _compiled(xt, w, EPS)}[impl]
        f().backward(dy)
        err = (xt.grad.double() - xg.grad).abs().max().item()
        scale = xg.grad.abs().max().item()
        if not err <= 16 * tol.unit_roundoff(dtype) * scale:
            raise AssertionError(f"{impl} {dname}: gradient of x off by {err:.3g} (scale {scale:.3g})")
        return
    y = torch.empty_like(x)
    out = make_case(impl, mode, x, w, b, None, y if mode == "forward_out" else None)
    if mode == "forward_out":
        out()
        got = y
    elif impl.startswith("ort_"):
        got = torch.empty_like(x)
        ort = OrtNorm(impl, dname, 257, 1)
        ort.bind(x, got)
        ort.run()
    else:
        with torch.no_grad():
            got = {"clone": lambda: x.clone(), "fused_rms_norm": lambda: fused.fused_rms_norm(x, w, EPS),
                   "fused_layer_norm": lambda: fused.fused_layer_norm(x, w, b, LN_EPS),
                   "F.rms_norm": lambda: F.rms_norm(x, (257,), w, EPS),
                   "F.layer_norm": lambda: F.layer_norm(x, (257,), w, b, LN_EPS),
                   "compiled_rms_norm": lambda: _compiled(x, w, EPS)}[impl]()
    u = tol.unit_roundoff(dtype)
    if impl in LAYER_NORMS:
        ref = oracle.layer_norm_forward(x.double().numpy(), w.double().numpy(), b.double().numpy(), LN_EPS)
        bound = tol.ln_forward_bound(x, w, b, LN_EPS, dtype) * (1 + u) + u * abs(ref)
    else:
        ref = oracle.rms_norm_forward(x.double().numpy(), w.double().numpy(), EPS)
        # Llama order (compiled, fused): one more rounding to x's dtype before the gain
        bound = tol.rms_forward_bound(x, w, EPS, dtype) * (1 + u) + u * abs(ref)
    del ort_params
    tol.assert_within(got, ref, bound, f"{impl} {mode} {dname}")


# ------------------------------------------------------------------------------------------ timing

def _minflt() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _quantiles(v: list[float]) -> tuple[float, float]:
    if len(v) < 2:
        return v[0], v[0]
    q = statistics.quantiles(v, n=4, method="inclusive")
    return q[0], q[2]


def time_cases(cases: dict, repeats: int, quick: bool) -> dict:
    """Rounds of interleaved calls (order rotated per round); per implementation the statistics."""
    names = list(cases)
    est = {}
    for name in names:  # warm-up (and compile), then one timed call to size k
        cases[name]()
        t0 = time.perf_counter()
        cases[name]()
        est[name] = time.perf_counter() - t0
    k = {n: 1 if quick else max(1, min(MAX_CALLS, int(ROUND_BUDGET_S / max(est[n], 1e-9)))) for n in names}
    samples = {n: [] for n in names}
    rounds = {n: [] for n in names}
    faults = {n: 0 for n in names}
    for r in range(repeats):
        order = names[r % len(names):] + names[: r % len(names)]
        for n in order:
            ts = []
            f0 = _minflt()
            for _ in range(k[n]):
                t0 = time.perf_counter()
                cases[n]()
                ts.append(time.perf_counter() - t0)
            faults[n] += _minflt() - f0
            samples[n] += ts
            rounds[n].append(statistics.median(ts))
    out = {}
    for n in names:
        s = samples[n]
        q1, q3 = _quantiles(s)
        out[n] = {"median_s": statistics.median(s), "min_s": min(s), "max_s": max(s), "q1_s": q1, "q3_s": q3,
                  "round_median_s": rounds[n], "calls": len(s), "calls_per_round": k[n],
                  "minflt_per_call": faults[n] / len(s)}
    return out


def _inputs(rows: int, d: int, dname: str, grad: bool):
    dtype = DTYPES[dname]
    g = torch.Generator().manual_seed(rows * 31 + d)
    x = torch.randn(rows, d, generator=g).to(dtype)
    w = (1 + 0.1 * torch.randn(d, generator=g)).to(dtype)
    b = (0.1 * torch.randn(d, generator=g)).to(dtype)
    dy = torch.randn(rows, d, generator=g).to(dtype) if grad else None
    return x, w, b, dy


def measure_config(mode: str, dname: str, rows: int, d: int, repeats: int, quick: bool, allocator: str) -> list[dict]:
    x, w, b, dy = _inputs(rows, d, dname, mode == "forward_backward")
    y = torch.empty_like(x) if mode == "forward_out" else None
    if y is not None:
        y.zero_()  # touch the reused buffer once, outside any timing
    cases, recs = {}, []
    for impl in IMPLS[mode]:
        rec = {"allocator": allocator, "mode": mode, "dtype": dname, "rows": rows, "hidden": d, "impl": impl,
               "bytes": min_bytes(rows, d, DTYPES[dname], mode, impl)}
        try:
            cases[impl] = make_case(impl, mode, x, w, b, dy, y)
        except Unavailable as exc:
            rec["skipped"] = str(exc)
        recs.append(rec)
    stats = time_cases(cases, repeats, quick)
    for rec in recs:
        st = stats.get(rec["impl"])
        if st is None:
            continue
        rec.update(st)
        rec["gbps"] = rec["bytes"] / st["median_s"] / 1e9
        rec["gbps_min"] = rec["bytes"] / st["max_s"] / 1e9
        rec["gbps_max"] = rec["bytes"] / st["min_s"] / 1e9
    return recs


def first_touch(rows: int, d: int, repeats: int, quick: bool) -> dict:
    """What a fresh buffer costs: the same copy into a reused buffer, into a fresh buffer that was already
    written once (outside the timing), allocating (clone), and just writing a fresh buffer once."""
    x = torch.randn(rows, d)
    y = torch.empty_like(x)
    y.zero_()
    state = {}

    def prepare_fresh():
        state["z"] = torch.empty_like(x)
        state["z"].zero_()

    def copy_fresh_pretouched():
        state["z"].copy_(x)

    cases = {"copy_reused": lambda: y.copy_(x), "clone": lambda: x.clone(),
             "empty_then_write": lambda: torch.empty_like(x).fill_(1.0)}
    stats = time_cases(cases, repeats, quick)
    # the pre-touched case needs untimed preparation before each call
    ts, faults = [], 0
    for _ in range(max(3, repeats) if not quick else 1):
        prepare_fresh()
        f0 = _minflt()
        t0 = time.perf_counter()
        copy_fresh_pretouched()
        ts.append(time.perf_counter() - t0)
        faults += _minflt() - f0
        state.clear()
    q1, q3 = _quantiles(ts)
    stats["copy_fresh_pretouched"] = {"median_s": statistics.median(ts), "min_s": min(ts), "max_s": max(ts),
                                      "q1_s": q1, "q3_s": q3, "round_median_s": ts, "calls": len(ts),
                                      "calls_per_round": 1, "minflt_per_call": faults / len(ts)}
    nbytes = x.numel() * x.element_size()
    for name, st in stats.items():
        moved = nbytes if name == "empty_then_write" else 2 * nbytes
        st["bytes"] = moved
        st["gbps"] = moved / st["median_s"] / 1e9
    return {"rows": rows, "hidden": d, "dtype": "float32", "input_bytes": nbytes, "pages_4k": nbytes // 4096,
            "cases": stats}


# ------------------------------------------------------------------------------------------ the decoder block

BLOCK = {"hidden_size": 512, "intermediate_size": 1408, "num_attention_heads": 8, "num_key_value_heads": 8,
         "tokens": 256, "batch": 1, "dtype": "float32"}


# --8<-- [start:block]
class FusedRMSNorm(torch.nn.Module):
    """Drop-in for LlamaRMSNorm (same weight, eps and casting order) backed by fused_rms_norm."""

    def __init__(self, hf_norm):
        super().__init__()
        self.weight = hf_norm.weight
        self.eps = hf_norm.variance_epsilon

    def forward(self, x):
        return fused.fused_rms_norm(x, self.weight, self.eps)
# --8<-- [end:block]


def block_share(steps: int, quick: bool) -> dict:
    """A Llama decoder layer (transformers' LlamaDecoderLayer, random weights) timed over many steps with
    its two norms as Hugging Face's LlamaRMSNorm, as fused_rms_norm, and replaced by identity, interleaved.
    share = (t_norm - t_identity) / t_norm, reported only where the gap exceeds the rounds' spread."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    cfg = LlamaConfig(hidden_size=BLOCK["hidden_size"], intermediate_size=BLOCK["intermediate_size"],
                      num_attention_heads=BLOCK["num_attention_heads"],
                      num_key_value_heads=BLOCK["num_key_value_heads"], num_hidden_layers=1)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    layer = LlamaDecoderLayer(cfg, layer_idx=0).eval()
    hf = (layer.input_layernorm, layer.post_attention_layernorm)
    variants = {"hf_llama_rms_norm": hf, "fused_rms_norm": tuple(FusedRMSNorm(n) for n in hf),
                "identity": (torch.nn.Identity(), torch.nn.Identity())}
    x = torch.randn(BLOCK["batch"], BLOCK["tokens"], BLOCK["hidden_size"])
    pos = torch.arange(BLOCK["tokens"]).unsqueeze(0)
    rope = LlamaRotaryEmbedding(cfg)(x, pos)

    def step(mode, norms):
        layer.input_layernorm, layer.post_attention_layernorm = norms
        if mode == "forward":
            with torch.no_grad():
                layer(x, position_embeddings=rope, position_ids=pos)
        else:
            layer.zero_grad(set_to_none=True)
            layer(x, position_embeddings=rope, position_ids=pos).sum().backward()

    out: dict = {"config": BLOCK, "steps_per_round": 1 if quick else steps, "source": "transformers LlamaDecoderLayer"}
    for mode in ("forward", "forward_backward"):
        cases = {k: (lambda n=n, m=mode: step(m, n)) for k, n in variants.items()}
        rounds = 1 if quick else 5
        per = {k: [] for k in cases}
        for k in cases:
            cases[k]()
        names = list(cases)
        for r in range(rounds):
            for k in names[r % 3:] + names[: r % 3]:
                t0 = time.perf_counter()
                for _ in range(out["steps_per_round"]):
                    cases[k]()
                per[k].append((time.perf_counter() - t0) / out["steps_per_round"])
        med = {k: statistics.median(v) for k, v in per.items()}
        res = {"round_s": per, "median_s": med}
        for k in ("hf_llama_rms_norm", "fused_rms_norm"):
            label = verdict(per["identity"], per[k])  # identity faster than the block with norms?
            sep = label == "faster"
            share = (med[k] - med["identity"]) / med[k]
            upper = max(0.0, (max(per[k]) - min(per["identity"])) / med[k])
            res[k] = {"separated": sep, "share": share if sep else None, "share_upper_bound": upper,
                      "label": "measured" if sep else label}
        layer.input_layernorm, layer.post_attention_layernorm = hf
        out[mode] = res
    out["rounds"] = 1 if quick else 5
    return out


# ------------------------------------------------------------------------------------------ flops (claim C05)

# --8<-- [start:flops]
def count_flops(fn, d: int) -> dict:
    """Floating-point operations of one row of length d, counted from the traced graph of ``fn(x)``.

    Each element-wise aten op costs one operation per output element; a mean over d elements costs d-1
    additions and one division; casts and views cost nothing. Returns total and per-element counts.
    """
    from torch.fx.experimental.proxy_tensor import make_fx

    x = torch.randn(1, d)
    gm = make_fx(fn)(x)
    ew = {"mul", "add", "sub", "div", "rsqrt", "pow", "sqrt"}
    total = 0
    ops: dict[str, int] = {}
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        name = node.target.__name__.split(".")[0]
        if name in ew:
            cost = math.prod(node.meta["val"].shape) if hasattr(node.meta.get("val"), "shape") else 1
        elif name == "mean":
            cost = math.prod(node.args[0].meta["val"].shape)  # (d-1) adds and 1 division per output
        elif name == "sum":
            cost = math.prod(node.args[0].meta["val"].shape) - math.prod(node.meta["val"].shape)
        else:
            continue
        ops[name] = ops.get(name, 0) + cost
        total += cost
    return {"d": d, "total": total, "per_element": total / d, "ops": ops}


def rms_flops_fn(x):
    """RMSNorm forward as the reference computes it, with a gain (Llama's and the paper's form)."""
    w = torch.ones(x.shape[-1])
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def ln_flops_fn(x):
    """LayerNorm forward with gain and bias, two-pass variance (the reference's form)."""
    w, b = torch.ones(x.shape[-1]), torch.zeros(x.shape[-1])
    xc = x - x.mean(-1, keepdim=True)
    return xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + 1e-5) * w + b
# --8<-- [end:flops]


def flop_summary(d_values=(1024, 4096, 8192)) -> dict:
    out = {}
    for d in d_values:
        r, l = count_flops(rms_flops_fn, d), count_flops(ln_flops_fn, d)
        out[str(d)] = {"rms": r, "layer_norm": l, "reduction": 1 - r["total"] / l["total"]}
    return out


# ------------------------------------------------------------------------------------------ the worker

def _prepare_process() -> None:
    fused.load()
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    torch._dynamo.config.accumulated_recompile_limit = max(torch._dynamo.config.accumulated_recompile_limit, 1024)


def worker(job: dict) -> dict:
    """One allocator setting in this process: validation, then every configuration of its modes."""
    _prepare_process()
    allocator, modes, quick = job["allocator"], job["modes"], job["quick"]
    out: dict = {"allocator": allocator, "validation": {}, "results": [], "load_avg_start": list(os.getloadavg())}
    for mode in modes:
        for dname in job["dtypes"]:
            for impl in IMPLS[mode]:
                key = f"{mode}/{dname}/{impl}"
                try:
                    validate(impl, mode, dname)
                    out["validation"][key] = "passed"
                except Unavailable as exc:
                    out["validation"][key] = f"unavailable: {exc}"
    for mode in modes:
        for dname in job["dtypes"]:
            for rows, d in job["shapes"]:
                out["results"] += measure_config(mode, dname, rows, d, job["repeats"], quick, allocator)
                print(f"PROGRESS {allocator} {mode} {dname} {rows}x{d}", file=sys.stderr, flush=True)
    if job.get("first_touch"):
        rows, d = job["first_touch"]
        out["first_touch"] = first_touch(rows, d, job["repeats"], quick)
    if job.get("block"):
        out["block"] = block_share(job["block_steps"], quick)
    out["load_avg_end"] = list(os.getloadavg())
    out["torch_threads"] = torch.get_num_threads()
    return out


# ------------------------------------------------------------------------------------------ the coordinator

def allocator_available(name: str) -> tuple[bool, str]:
    spec = ALLOCATORS[name]
    lib = spec["env"].get("LD_PRELOAD")
    if lib and not Path(lib).exists():
        return False, f"{lib} is missing: install Debian's {spec['package']} (apt-get install {spec['package']})"
    return True, "available"


def wait_for_quiet(max_load: float, wait_s: float, force: bool, quick: bool) -> dict:
    """Waits until the 1-minute load average is at most max_load; refuses (SystemExit 3) past wait_s."""
    t0 = time.monotonic()
    first = os.getloadavg()[0]
    while os.getloadavg()[0] > max_load and not (force or quick):
        if time.monotonic() - t0 > wait_s:
            raise SystemExit(f"bench: the machine is busy (1-minute load {os.getloadavg()[0]:.2f} > {max_load}) after "
                             f"waiting {wait_s:.0f} s; measure in a quiet window, or pass --force (recorded)")
        print(f"bench: waiting for a quiet machine (1-minute load {os.getloadavg()[0]:.2f} > {max_load})",
              file=sys.stderr, flush=True)
        time.sleep(15)
    now = os.getloadavg()[0]
    return {"max_load": max_load, "load_when_called": first, "load_at_start": now,
            "waited_s": round(time.monotonic() - t0, 1), "busy_at_start": now > max_load,
            "forced": bool(force and now > max_load), "quick": quick}


def run_worker(allocator: str, job: dict) -> dict:
    env = {**os.environ, **ALLOCATORS[allocator]["env"]}
    proc = subprocess.Popen([sys.executable, "-m", "reference_impl.studies.bench", "--worker", json.dumps(job)],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate()
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"benchmark worker for allocator {allocator} failed (exit {proc.returncode}):\n{err[-4000:]}")
    return json.loads(lines[-1][len("RESULT "):])


MIN_ROUNDS_FOR_VERDICT = 3


def verdict(a_rounds: list[float], b_rounds: list[float]) -> str:
    """'faster' when every round of a beat every round of b, 'slower' the other way round, else 'within
    noise'; 'not repeated' with fewer than MIN_ROUNDS_FOR_VERDICT rounds (a smoke run)."""
    if min(len(a_rounds), len(b_rounds)) < MIN_ROUNDS_FOR_VERDICT:
        return "not repeated"
    if max(a_rounds) < min(b_rounds):
        return "faster"
    if max(b_rounds) < min(a_rounds):
        return "slower"
    return "within noise"


def _ratio_stats(a: dict, b: dict) -> dict:
    """Speed of a relative to b (t_b / t_a), with the separation verdict from the rounds' spread."""
    return {"ratio": b["median_s"] / a["median_s"],
            "ratio_low": min(b["round_median_s"]) / max(a["round_median_s"]),
            "ratio_high": max(b["round_median_s"]) / min(a["round_median_s"]),
            "label": verdict(a["round_median_s"], b["round_median_s"])}


def _index(results: list[dict]) -> dict:
    return {(r["allocator"], r["mode"], r["dtype"], r["rows"], r["hidden"], r["impl"]): r
            for r in results if "median_s" in r}


def analyse(results: list[dict], allocators: list[str], shapes, dtypes) -> dict:
    """Ratios against the ceilings, comparisons with separation labels, and the targets, from one run."""
    idx = _index(results)
    ceiling = {}
    for r in results:
        if r["mode"] == "forward_out" and r["impl"] in ("copy", "stream_copy") and "gbps" in r:
            ceiling.setdefault((r["dtype"], r["rows"], r["hidden"]), {})[r["impl"]] = r["gbps"]
    for r in results:
        c = ceiling.get((r["dtype"], r["rows"], r["hidden"]), {})
        if "gbps" in r and "copy" in c:
            r["ratio_copy"] = r["gbps"] / c["copy"]
            r["ratio_best_ceiling"] = r["gbps"] / max(c.values())
    comparisons = []
    pairs = {"forward_out": [("fused_rms_norm", "copy"), ("fused_rms_norm", "compiled_rms_norm"),
                             ("fused_rms_norm", "ort_rms_normalization"), ("fused_rms_norm", "ort_simplified_layer_norm"),
                             ("fused_layer_norm", "ort_layer_normalization"), ("fused_rms_norm", "fused_layer_norm")],
             "forward_alloc": [("fused_rms_norm", "compiled_rms_norm"), ("fused_rms_norm", "F.rms_norm"),
                               ("fused_rms_norm", "ort_rms_normalization"), ("fused_rms_norm", "ort_simplified_layer_norm"),
                               ("fused_layer_norm", "F.layer_norm"), ("fused_layer_norm", "ort_layer_normalization"),
                               ("fused_rms_norm", "clone")],
             "forward_backward": [("fused_rms_norm", "compiled_rms_norm"), ("fused_rms_norm", "F.rms_norm"),
                                  ("fused_layer_norm", "F.layer_norm"), ("fused_rms_norm", "fused_layer_norm")]}
    for (alloc, mode, dname, rows, d, impl), a in idx.items():
        for x, y in pairs.get(mode, ()):
            if impl == x and (alloc, mode, dname, rows, d, y) in idx:
                comparisons.append({"allocator": alloc, "mode": mode, "dtype": dname, "rows": rows, "hidden": d,
                                    "a": x, "b": y, **_ratio_stats(a, idx[(alloc, mode, dname, rows, d, y)])})
    out = {"comparisons": comparisons, "targets": targets(idx, comparisons, allocators, shapes, dtypes),
           "advice": advice(idx, allocators, shapes, dtypes)}
    out["tables"] = tables(idx, comparisons, out["targets"], allocators, shapes, dtypes)
    out["ln_vs_rms"] = ln_vs_rms(idx, comparisons, allocators, shapes, dtypes)
    return out


def ln_vs_rms(idx, comparisons, allocators, shapes, dtypes) -> dict:
    """Time saved by the fused RMSNorm against the fused LayerNorm (1 - t_rms / t_ln) over the shapes, per
    mode and dtype: forward into a reused buffer, and forward+backward under BLOCK_ALLOCATOR (or glibc)."""
    out: dict = {}
    alloc_bwd = BLOCK_ALLOCATOR if BLOCK_ALLOCATOR in allocators else OUT_MODE_ALLOCATOR
    for mode, alloc in (("forward_out", OUT_MODE_ALLOCATOR), ("forward_alloc", alloc_bwd), ("forward_backward", alloc_bwd)):
        for dn in dtypes:
            red, labels = [], []
            for r, d in shapes:
                a, b = idx.get((alloc, mode, dn, r, d, "fused_rms_norm")), idx.get((alloc, mode, dn, r, d, "fused_layer_norm"))
                if a and b:
                    red.append(1 - a["median_s"] / b["median_s"])
                    labels.append(verdict(a["round_median_s"], b["round_median_s"]))
            out.setdefault(mode, {})[dn] = {
                "allocator": alloc, "shapes": len(red),
                "time_reduction_min": min(red) if red else None,
                "time_reduction_median": statistics.median(red) if red else None,
                "time_reduction_max": max(red) if red else None,
                "separated_shapes": sum(v == "faster" for v in labels)}
    return out


def _gb(rec) -> str:
    if rec is None:
        return "n/a"
    return f"{rec['gbps']:.1f} ({rec['gbps_min']:.1f}-{rec['gbps_max']:.1f})"


def _cmp(comparisons, **key) -> str:
    for c in comparisons:
        if all(c[k] == v for k, v in key.items()):
            return f"{c['label']}, {c['ratio']:.2f}x ({c['ratio_low']:.2f}-{c['ratio_high']:.2f})"
    return "n/a"


def _md(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def tables(idx, comparisons, tg, allocators, shapes, dtypes) -> dict:
    """The Performance page's tables, rendered from the records (GB/s: median (min-max) over all calls;
    comparisons: label, speed ratio t_other / t_ours (lowest-highest over the rounds))."""
    o = OUT_MODE_ALLOCATOR
    rows = []
    for dn in dtypes:
        for r, d in shapes:
            g = lambda impl, mode="forward_out", a=o: idx.get((a, mode, dn, r, d, impl))  # noqa: E731
            fr = g("fused_rms_norm")
            rows.append([dn, f"{r}x{d}", _gb(g("copy")), _gb(g("stream_copy")), _gb(fr),
                         f"{fr['ratio_copy']:.2f}" if fr and "ratio_copy" in fr else "n/a",
                         _gb(g("compiled_rms_norm")), _gb(g("ort_rms_normalization")),
                         _gb(g("ort_simplified_layer_norm")),
                         _cmp(comparisons, allocator=o, mode="forward_out", dtype=dn, rows=r, hidden=d,
                              a="fused_rms_norm", b="ort_rms_normalization"),
                         _cmp(comparisons, allocator=o, mode="forward_out", dtype=dn, rows=r, hidden=d,
                              a="fused_rms_norm", b="compiled_rms_norm")])
    out = {"forward_out": _md(["dtype", "rows x d", "copy_ (ceiling)", "streaming copy", "fused_rms_norm(out=)",
                               "/ copy", "torch.compile (out)", "ORT RMSNormalization", "ORT SimplifiedLayerNorm",
                               "fused vs ORT RMSNormalization", "fused vs torch.compile"], rows)}
    rows = []
    for dn in dtypes:
        for r, d in shapes:
            g = lambda impl, mode="forward_out", a=o: idx.get((a, mode, dn, r, d, impl))  # noqa: E731
            rows.append([dn, f"{r}x{d}", _gb(g("fused_layer_norm")), _gb(g("ort_layer_normalization")),
                         _cmp(comparisons, allocator=o, mode="forward_out", dtype=dn, rows=r, hidden=d,
                              a="fused_layer_norm", b="ort_layer_normalization"),
                         _cmp(comparisons, allocator=o, mode="forward_out", dtype=dn, rows=r, hidden=d,
                              a="fused_rms_norm", b="fused_layer_norm")])
    out["forward_out_layer_norm"] = _md(["dtype", "rows x d", "fused_layer_norm(out=)", "ORT LayerNormalization",
                                         "fused vs ORT", "fused RMSNorm vs fused LayerNorm"], rows)
    for mode, impls in (("forward_alloc", ("clone", "fused_rms_norm", "F.rms_norm", "compiled_rms_norm",
                                           "ort_rms_normalization")),
                        ("forward_backward", ("fused_rms_norm", "F.rms_norm", "compiled_rms_norm", "fused_layer_norm",
                                              "F.layer_norm"))):
        rows = []
        for a in allocators:
            for dn in dtypes:
                for r, d in shapes:
                    recs = [idx.get((a, mode, dn, r, d, i)) for i in impls]
                    flt = recs[0]["minflt_per_call"] if recs[0] else None
                    rows.append([a, dn, f"{r}x{d}", *[_gb(x) for x in recs],
                                 _cmp(comparisons, allocator=a, mode=mode, dtype=dn, rows=r, hidden=d,
                                      a="fused_rms_norm", b="compiled_rms_norm")]
                                + ([f"{flt:.0f}" if flt is not None else "n/a"] if mode == "forward_alloc" else []))
        head = ["allocator", "dtype", "rows x d", *[LABELS[i] for i in impls], "fused vs torch.compile"]
        out[mode] = _md(head + (["page faults per clone()"] if mode == "forward_alloc" else []), rows)
    rows = []
    for dn in dtypes:
        t = tg[dn]
        for name, label in (("forward_out_vs_copy", "forward into a reused buffer >= 0.9x the reused-buffer copy"),
                            ("forward_out_vs_ort_rms_normalization", "forward (reused buffer) vs ORT RMSNormalization"),
                            ("forward_out_vs_ort_simplified_layer_norm", "forward (reused buffer) vs ORT SimplifiedLayerNormalization"),
                            ("forward_out_ln_vs_ort_layer_normalization", "LayerNorm forward (reused buffer) vs ORT LayerNormalization")):
            rows.append([label, dn, *_target_cells(t[name])])
        for mode, label in (("forward_alloc", "allocating forward vs torch.compile"),
                            ("forward_backward", "forward+backward vs torch.compile")):
            for a in allocators:
                rows.append([f"{label} ({a})", dn, *_target_cells(t[f"{mode}_vs_compile"][a])])
    out["targets"] = _md(["target", "dtype", "shapes meeting it", "worst ratio (shape)", "short by",
                          "separated from noise"], rows)
    return out


def _target_cells(t: dict) -> list[str]:
    if not t["shapes"]:
        return ["not measured", "n/a", "n/a", "n/a"]
    return [f"{t['met']} of {t['shapes']} (threshold {t['threshold']:g})", f"{t['worst']:.2f} ({t['worst_shape']})",
            f"{t['missed_by']:.2f}", f"{t['separated_faster']} of {t['shapes']} shapes"]


def _worst(entries: list[dict], key: str, threshold: float) -> dict:
    vals = [e for e in entries if e.get(key) is not None]
    if not vals:
        return {"shapes": 0, "met": 0, "all_met": None, "worst": None, "worst_shape": None, "missed_by": None,
                "separated_faster": 0}
    w = min(vals, key=lambda e: e[key])
    met = sum(e[key] >= threshold for e in vals)
    return {"shapes": len(vals), "met": met, "all_met": met == len(vals), "worst": w[key],
            "worst_shape": f"{w['rows']}x{w['hidden']}", "missed_by": max(0.0, threshold - w[key]),
            "best": max(e[key] for e in vals), "separated_faster": sum(e.get("label") == "faster" for e in vals)}


def targets(idx: dict, comparisons: list[dict], allocators, shapes, dtypes) -> dict:
    out: dict = {}
    for dname in dtypes:
        t: dict = {}
        rows = [r for k, r in idx.items() if k[1] == "forward_out" and k[2] == dname and k[5] == "fused_rms_norm"
                and "ratio_copy" in r]
        t["forward_out_vs_copy"] = {"threshold": 0.9, **_worst(rows, "ratio_copy", 0.9)}
        for peer in ("ort_rms_normalization", "ort_simplified_layer_norm"):
            cs = [c for c in comparisons if c["mode"] == "forward_out" and c["dtype"] == dname
                  and c["a"] == "fused_rms_norm" and c["b"] == peer]
            t[f"forward_out_vs_{peer}"] = {"threshold": 1.0, **_worst(cs, "ratio", 1.0)}
        cs = [c for c in comparisons if c["mode"] == "forward_out" and c["dtype"] == dname
              and c["a"] == "fused_layer_norm" and c["b"] == "ort_layer_normalization"]
        t["forward_out_ln_vs_ort_layer_normalization"] = {"threshold": 1.0, **_worst(cs, "ratio", 1.0)}
        for mode in ("forward_alloc", "forward_backward"):
            per = {}
            for alloc in allocators:
                cs = [c for c in comparisons if c["mode"] == mode and c["dtype"] == dname and c["allocator"] == alloc
                      and c["a"] == "fused_rms_norm" and c["b"] == "compiled_rms_norm"]
                per[alloc] = {"threshold": 1.0, **_worst(cs, "ratio", 1.0)}
            t[f"{mode}_vs_compile"] = per
        out[dname] = t
    return out


def _geomean(v):
    v = [x for x in v if x]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else None


def advice(idx: dict, allocators, shapes, dtypes) -> dict:
    """Which RMSNorm implementation takes the least time per (mode, dtype, allocator), and which allocator
    suits whom."""
    out: dict = {"fastest": {}, "allocators": {}}
    for mode in MODES:
        for dname in dtypes:
            for alloc in allocators:
                per = {}
                for impl in IMPLS[mode]:
                    if impl not in RMS_NORMS:
                        continue
                    ts = [idx[(alloc, mode, dname, r, d, impl)]["median_s"] for r, d in shapes
                          if (alloc, mode, dname, r, d, impl) in idx]
                    if len(ts) == len(shapes):
                        per[impl] = _geomean(ts)
                if not per:
                    continue
                ranked = sorted(per, key=per.get)
                best = ranked[0]
                second = ranked[1] if len(ranked) > 1 else None
                sep = 0
                if second:
                    for r, d in shapes:
                        a, b = idx[(alloc, mode, dname, r, d, best)], idx[(alloc, mode, dname, r, d, second)]
                        sep += _ratio_stats(a, b)["label"] == "faster"
                out["fastest"].setdefault(mode, {}).setdefault(dname, {})[alloc] = {
                    "impl": best, "label": LABELS[best], "runner_up": second,
                    "runner_up_label": LABELS[second] if second else None,
                    "margin": per[second] / per[best] if second else None,
                    "separated_shapes": sep, "shapes": len(shapes)}
    base = "glibc"
    for who, impls in (("this_op", ("fused_rms_norm",)), ("plain_pytorch", ("F.rms_norm", "compiled_rms_norm"))):
        for mode in ("forward_alloc", "forward_backward"):
            for dname in dtypes:
                gain = {}
                for alloc in allocators:
                    rs = []
                    for impl in impls:
                        for r, d in shapes:
                            a, b = (alloc, mode, dname, r, d, impl), (base, mode, dname, r, d, impl)
                            if a in idx and b in idx:
                                rs.append(idx[b]["median_s"] / idx[a]["median_s"])
                    gain[alloc] = _geomean(rs)
                known = {k: v for k, v in gain.items() if v is not None}
                best = max(known, key=known.get) if known else None
                out["allocators"].setdefault(who, {}).setdefault(mode, {})[dname] = {
                    "speedup_over_glibc": gain, "best": best,
                    "best_label": ALLOCATORS[best]["label"] if best else None,
                    "best_speedup": known.get(best) if best else None}
    faults = {}
    for alloc in allocators:
        v = [r["minflt_per_call"] / (r["bytes"] / 2 / 4096) for k, r in idx.items()
             if k[0] == alloc and k[1] == "forward_alloc" and k[5] == "clone"]
        faults[alloc] = statistics.median(v) if v else None
    out["clone_faults_per_output_page"] = faults
    return out


def run(args) -> dict:
    from tqdm import tqdm

    quick = args.quick
    shapes = QUICK_SHAPES if quick else [tuple(s) for s in args.shapes]
    dtypes = list(DTYPES)
    repeats = 1 if quick else args.repeats
    load = wait_for_quiet(args.max_load, args.wait, args.force, quick)
    prov = record(COMMAND, SOURCES, quick=quick, packages=("torch", "numpy", "onnxruntime", "onnx", "transformers"),
                  machine_extra={"torch_threads": torch.get_num_threads(),
                                 "torch_cpu_capability": torch.backends.cpu.get_cpu_capability()})
    allocs, status = [], {}
    for name in args.allocators:
        ok, why = allocator_available(name)
        status[name] = {"label": ALLOCATORS[name]["label"], "env": ALLOCATORS[name]["env"], "available": ok,
                        "reason": why}
        if ok:
            allocs.append(name)
        else:
            print(f"\n*** bench: ALLOCATOR {name!r} SKIPPED: {why} ***\n", file=sys.stderr, flush=True)
    if OUT_MODE_ALLOCATOR not in allocs:
        raise SystemExit(f"bench: the {OUT_MODE_ALLOCATOR!r} setting must be measured (it holds the ceilings)")
    results, workers = [], {}
    bar = tqdm(allocs, desc="bench (one worker per allocator)", unit="allocator", file=sys.stderr)
    for alloc in bar:
        modes = [m for m in MODES if m != "forward_out" or alloc == OUT_MODE_ALLOCATOR]
        job = {"allocator": alloc, "modes": modes, "dtypes": dtypes, "shapes": [list(s) for s in shapes],
               "repeats": repeats, "quick": quick,
               "first_touch": list(QUICK_SHAPES[0] if quick else FIRST_TOUCH_SHAPE),
               "block": (alloc == BLOCK_ALLOCATOR or (quick and alloc == allocs[-1])) and not args.no_block,
               "block_steps": args.block_steps}
        t0 = time.monotonic()
        w = run_worker(alloc, job)
        w["duration_s"] = round(time.monotonic() - t0, 1)
        results += w.pop("results")
        workers[alloc] = w
    bar.close()
    first_touch_all = {a: w.pop("first_touch") for a, w in workers.items() if "first_touch" in w}
    block = next((w.pop("block") for w in workers.values() if "block" in w), None)
    data = {
        "provenance": prov,
        "what": "CPU benchmark of RMSNorm/LayerNorm implementations against the copy ceiling and the peers",
        "settings": {"eps": EPS, "layer_norm_eps": LN_EPS, "repeats": repeats, "round_budget_s": ROUND_BUDGET_S,
                     "max_calls_per_round": MAX_CALLS, "shapes": [list(s) for s in shapes], "dtypes": dtypes,
                     "modes": list(MODES), "impls": {m: list(v) for m, v in IMPLS.items()}, "labels": LABELS,
                     "out_mode_allocator": OUT_MODE_ALLOCATOR, "block_allocator": BLOCK_ALLOCATOR,
                     "fused_has_out": {f: has_out_parameter(getattr(fused, f)) for f in ("fused_rms_norm", "fused_layer_norm")},
                     "bytes": "forward 2*N*b, forward+backward 5*N*b, plus parameters",
                     "separation": "faster: every round of the faster one beats every round of the other"},
        "load": load,
        "allocators": status,
        "workers": workers,
        "results": results,
        "first_touch": first_touch_all,
        "flops": flop_summary(),
    }
    if block is not None:
        data["block"] = block
    data.update(analyse(results, allocs, shapes, dtypes))
    data["ort_dtype_support"] = ort_support(workers)
    data["status"] = status_text(data)
    data["tables"]["first_touch"] = first_touch_table(first_touch_all)
    data["tables"]["ort_support"] = ort_table(data["ort_dtype_support"], dtypes)
    finish(prov)
    if args.plots is not None:
        data["plots"] = plot(data, args.plots)
    return data


def reanalyse(data: dict, plots: Path | None) -> dict:
    """The derived sections again, from the raw records of a file (after a change to the analysis only:
    the provenance hash is updated and the file says it was re-analysed)."""
    allocs = [a for a, st in data["allocators"].items() if st["available"]]
    shapes = [tuple(s) for s in data["settings"]["shapes"]]
    first_touch_all = data["first_touch"]
    for key in ("comparisons", "targets", "advice", "tables", "ln_vs_rms"):
        data.pop(key, None)
    for r in data["results"]:
        r.pop("ratio_copy", None)
        r.pop("ratio_best_ceiling", None)
    data.update(analyse(data["results"], allocs, shapes, data["settings"]["dtypes"]))
    data["status"] = status_text(data)
    data["tables"]["first_touch"] = first_touch_table(first_touch_all)
    data["tables"]["ort_support"] = ort_table(data["ort_dtype_support"], data["settings"]["dtypes"])
    prov = data["provenance"]
    prov["sources"] = SOURCES
    prov["source_hash"] = pv_source_hash(SOURCES)
    prov["note"] = "derived sections re-analysed from the raw records with the current analysis code"
    if plots is not None:
        data["plots"] = plot(data, plots)
    return data


def ort_table(support: dict, dtypes) -> str:
    return _md(["ONNX Runtime op (CPU)", *dtypes], [
        [op, *[("runs" if v[dn]["supported"] else "no CPU kernel: " + v[dn]["detail"].replace("unavailable: ONNX Runtime: ", "")[:90])
               if dn in v else "not tried" for dn in dtypes]] for op, v in support.items()])


def status_text(data: dict) -> dict:
    """The line the page opens with: a smoke run says so; a measurement names its load and spread rule."""
    ld = data["load"]
    if data["provenance"]["quick"]:
        return {"title": "Smoke run, not a measurement",
                "text": ("These figures come from `--quick`: one tiny shape, one call per implementation, on a "
                         "machine that may have been busy. They show that the command and this page work; the "
                         "numbers say nothing about speed. The measurement is `python -m reference_impl.studies.bench`.")}
    busy = (f" The machine was busy (1-minute load {ld['load_at_start']:.2f} > {ld['max_load']}) and the run was "
            "forced: read the spreads." if ld["forced"] else "")
    return {"title": "Measured",
            "text": (f"{data['settings']['repeats']} rounds per configuration, implementations interleaved; 1-minute "
                     f"load {ld['load_at_start']:.2f} at the start (limit {ld['max_load']}).{busy}")}


def first_touch_table(ft: dict) -> str:
    rows = []
    for a, v in ft.items():
        c = v["cases"]
        rows.append([a, *[f"{c[k]['gbps']:.1f}" for k in ("copy_reused", "copy_fresh_pretouched", "clone", "empty_then_write")],
                     f"{c['clone']['minflt_per_call']:.0f} of {v['pages_4k']}"])
    return _md(["allocator", "copy_ into a reused buffer (GB/s)", "copy_ into a fresh, pre-touched buffer",
                "clone()", "torch.empty + one write", "page faults per clone() (of 4 KiB pages)"], rows)


def ort_support(workers: dict) -> dict:
    """Per ORT op and dtype: whether its CPU kernel ran (from the validation step), and the error if not."""
    out: dict = {}
    for w in workers.values():
        for key, verdict in w["validation"].items():
            mode, dname, impl = key.split("/")
            if impl.startswith("ort_") and mode == "forward_out":
                op = ORT_OPS[impl][0]
                out.setdefault(op, {})[dname] = {"supported": verdict == "passed",
                                                 "detail": verdict}
    return out


def plot(data: dict, out_dir: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"
    matplotlib.rcParams["svg.hashsalt"] = "bench"
    import matplotlib.pyplot as plt
    from matplotlib.container import BarContainer

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    shapes = [tuple(s) for s in data["settings"]["shapes"]]
    ticks = [f"{r}x{d}" for r, d in shapes]
    idx = _index(data["results"])
    quick = data["provenance"]["quick"]
    for mode, alloc in (("forward_out", OUT_MODE_ALLOCATOR), ("forward_alloc", "glibc"),
                        ("forward_alloc", "jemalloc_retain"), ("forward_backward", "glibc")):
        if not any(k[0] == alloc and k[1] == mode for k in idx):
            continue
        fig, axes = plt.subplots(1, len(data["settings"]["dtypes"]), figsize=(12, 5.0), squeeze=False)
        for ax, dname in zip(axes[0], data["settings"]["dtypes"]):
            impls = list(IMPLS[mode])  # fixed slots and colours: an implementation absent in a dtype leaves a gap
            width = 0.8 / max(1, len(impls))
            for j, impl in enumerate(impls):
                xs, ys, lo, hi = [], [], [], []
                for i, (r, d) in enumerate(shapes):
                    rec = idx.get((alloc, mode, dname, r, d, impl))
                    if rec:
                        xs.append(i + j * width)
                        ys.append(rec["gbps"])
                        lo.append(rec["gbps"] - rec["gbps_min"])
                        hi.append(rec["gbps_max"] - rec["gbps"])
                if not xs:
                    continue
                ax.bar(xs, ys, width, yerr=[lo, hi], capsize=1.5, label=LABELS[impl], color=COLORS[impl],
                       hatch="//" if impl in CEILINGS else None, edgecolor="black" if impl in CEILINGS else None,
                       linewidth=0.4)
            ax.set_xticks([i + 0.4 - width / 2 for i in range(len(shapes))], ticks, fontsize=8)
            ax.set_ylabel("GB/s (minimum bytes), median; bars: min-max")
            ax.set_title(f"{dname}, {mode.replace('_', ' ')}, {alloc}", fontsize=9)
            ax.grid(True, axis="y", alpha=0.3)
        handles = {h.get_label(): h for ax in axes[0] for h in ax.containers
                   if isinstance(h, BarContainer) and not h.get_label().startswith("_")}
        fig.legend(list(handles.values()), list(handles), fontsize=7, loc="lower center", ncol=5, frameon=False)
        prov = data["provenance"]
        title = f"{prov['machine']['cpu']}, {prov['machine'].get('torch_threads')} threads, {prov['date'][:10]}"
        fig.suptitle(("SMOKE RUN (--quick), not a measurement: " if quick else "") + title, fontsize=9)
        fig.tight_layout(rect=(0, 0.12, 1, 1))
        name = f"cpu_{mode}_{alloc}.svg"
        fig.savefig(out_dir / name, metadata={"Date": None})
        plt.close(fig)
        written.append(name)
    return written


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m reference_impl.studies.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke run: one tiny shape, one round, marked quick")
    p.add_argument("--out", type=Path, default=OUT, help=f"data file (default {OUT.relative_to(REPO)})")
    p.add_argument("--plots", type=Path, default=PLOTS, help="folder for the SVG plots")
    p.add_argument("--repeats", type=int, default=DEFAULT_REPEATS, help="rounds per configuration (>= 3)")
    p.add_argument("--allocators", default=",".join(ALLOCATORS), help="comma-separated allocator settings")
    p.add_argument("--shapes", default=None, help="rows x hidden list, e.g. 4096x1024,16384x4096")
    p.add_argument("--max-load", type=float, default=MAX_LOAD, help="1-minute load average that counts as busy")
    p.add_argument("--wait", type=float, default=WAIT_S, help="seconds to wait for a quiet machine")
    p.add_argument("--force", action="store_true", help="measure even on a busy machine (recorded in the file)")
    p.add_argument("--no-block", action="store_true", help="skip the decoder-block measurement")
    p.add_argument("--block-steps", type=int, default=8, help="decoder-layer steps per round")
    p.add_argument("--reanalyse", type=Path, default=None,
                   help="recompute comparisons, targets, tables and plots from the raw records of an existing file")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.reanalyse:
        data = reanalyse(json.loads(args.reanalyse.read_text()), args.plots)
        args.out.write_text(json.dumps(data, indent=1) + "\n")
        print(f"re-analysed {args.reanalyse} into {args.out}")
        return 0
    if args.worker:
        print("RESULT " + json.dumps(worker(json.loads(args.worker))))
        return 0
    if not args.quick and args.repeats < 3:
        p.error("--repeats must be at least 3 for a measurement (use --quick for a smoke run)")
    args.allocators = [a for a in args.allocators.split(",") if a]
    unknown = [a for a in args.allocators if a not in ALLOCATORS]
    if unknown:
        p.error(f"unknown allocator settings {unknown}; known: {sorted(ALLOCATORS)}")
    try:
        args.shapes = SHAPES if args.shapes is None else [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    except ValueError:
        p.error("--shapes takes ROWSxHIDDEN,... e.g. 4096x1024,16384x4096")
    data = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    for dname, t in data["targets"].items():
        c = t["forward_out_vs_copy"]
        print(f"{dname:9s} forward_out / copy: {c['met']}/{c['shapes']} shapes >= 0.9 (worst {c['worst']})")
    print(f"wrote {args.out} in {data['provenance']['duration_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
