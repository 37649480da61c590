"""What the CPU benchmark runs: settings, the implementations (ours and the peers), their validation.

The implementations are part of the timed loop: a change here changes the numbers (see ``SOURCES``).
"""
from __future__ import annotations

import inspect
import os
from pathlib import Path

import torch
import torch.nn.functional as F

from ... import oracle
from ... import tolerances as tol
from ...ops import library as fused


REPO = Path(__file__).resolve().parents[3]
DATA = REPO / "docs" / "data"
OUT = DATA / "bench_cpu.json"
PLOTS = DATA / "plots"
QUICK_OUT = REPO / "build" / "bench_cpu_quick.json"  # a smoke run's file and plots: never the committed ones
QUICK_PLOTS = REPO / "build" / "bench_quick_plots"
COMMAND = "python -m reference_impl.studies.bench"
# what changes the numbers: the CPU kernels and op schemas (comments stripped), the build flags, the Python
# entry points and autograd of the ops that are timed, the implementations (this module) and the timed loop
# (measure.py). Not the argument checks, the reference or the analysis: changing those moves no timing.
SOURCES = (sorted(p.relative_to(REPO).as_posix() for p in (REPO / "cuda" / "cpu").glob("*") if p.suffix in (".cpp", ".h"))
           + ["cuda/op_checks.h", "cuda/ops.cpp", "cuda/ops.h", "reference_impl/ops/build.py",
              "reference_impl/ops/library.py", "reference_impl/ops/autograd.py",
              "reference_impl/studies/bench/cases.py", "reference_impl/studies/bench/groups.py",
              "reference_impl/studies/bench/measure.py", "reference_impl/studies/bench/overhead.py"])

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
    "forward_out": ("copy", "stream_copy", "fused_rms_norm", "fused_rms_norm_avx512", "fused_layer_norm", "compiled_rms_norm",
                    "ort_rms_normalization", "ort_simplified_layer_norm", "ort_layer_normalization"),
    "forward_alloc": ("clone", "fused_rms_norm", "fused_layer_norm", "F.rms_norm", "F.layer_norm",
                      "compiled_rms_norm", "ort_rms_normalization", "ort_simplified_layer_norm",
                      "ort_layer_normalization"),
    "forward_backward": ("traffic_twin", "fused_rms_norm", "fused_layer_norm", "F.rms_norm", "F.layer_norm",
                         "compiled_rms_norm", "compiled_layer_norm"),
}
LABELS = {
    "copy": "y.copy_(x), reused y (ceiling)",
    "stream_copy": "copy with streaming stores, reused y",
    "clone": "x.clone() (allocating copy)",
    "traffic_twin": "traffic twin: copy, then dy + x",
    "fused_rms_norm": "fused_rms_norm (this op)",
    "fused_rms_norm_avx512": "fused_rms_norm, AVX-512 without BF16 instructions",
    "fused_layer_norm": "fused_layer_norm (this op)",
    "F.rms_norm": "F.rms_norm (eager)",
    "F.layer_norm": "F.layer_norm (eager)",
    "compiled_rms_norm": "torch.compile(plain RMSNorm)",
    "compiled_layer_norm": "torch.compile(LayerNorm)",
    "ort_rms_normalization": "ONNX Runtime RMSNormalization",
    "ort_simplified_layer_norm": "ONNX Runtime SimplifiedLayerNormalization",
    "ort_layer_normalization": "ONNX Runtime LayerNormalization",
}
CEILINGS = ("copy", "stream_copy", "clone", "traffic_twin")
COLORS = {"copy": "#bbbbbb", "stream_copy": "#888888", "clone": "#dddddd", "fused_rms_norm": "tab:blue",
          "fused_rms_norm_avx512": "#9ecae1",
          "fused_layer_norm": "tab:cyan", "F.rms_norm": "tab:red", "F.layer_norm": "tab:pink",
          "compiled_rms_norm": "tab:green", "compiled_layer_norm": "tab:olive", "traffic_twin": "#999999",
          "ort_rms_normalization": "tab:orange",
          "ort_simplified_layer_norm": "tab:brown", "ort_layer_normalization": "tab:olive"}
RMS_NORMS = ("fused_rms_norm", "F.rms_norm", "compiled_rms_norm", "ort_rms_normalization", "ort_simplified_layer_norm")
LAYER_NORMS = ("fused_layer_norm", "F.layer_norm", "compiled_layer_norm", "ort_layer_normalization")  # gain and bias; the rest: gain only
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


def plain_layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """The LayerNorm a user would write out for torch.compile: statistics in float32, one cast at the end."""
    xf = x.float()
    mean = xf.mean(-1, keepdim=True)
    xc = xf - mean
    y = xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + eps)
    return (y * weight.float() + bias.float()).to(x.dtype)


# Static shapes, one compiled kernel per (dtype, shape, mode): torch.compile at its best.
_compiled = torch.compile(plain_rms_norm, dynamic=False)
_compiled_ln = torch.compile(plain_layer_norm, dynamic=False)
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
    if mode.endswith("forward_backward"):  # forward_backward, qk_forward_backward
        return 5 * n * b + 2 * params  # parameters read in both passes, their gradients written
    return 2 * n * b + params


# the variables the CPU kernels read on every call; a case that sets one sets it around its own calls only
KERNEL_ENV = ("NORMLAB_CPU_TILE", "NORMLAB_CPU_ISA")


class EnvCase:
    """A timed callable that needs environment variables set around its calls (outside the timing)."""

    def __init__(self, fn, env: dict):
        self.fn, self.env = fn, env

    def __call__(self):
        return self.fn()


class _Env:
    """Sets variables on entry (None: unset) and restores them on exit."""

    def __init__(self, env: dict | None):
        self.env, self.old = env or {}, {}

    def __enter__(self):
        for k, v in self.env.items():
            self.old[k] = os.environ.get(k)
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = str(v)

    def __exit__(self, *exc):
        for k, v in self.old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def case_env(case) -> _Env:
    """The environment a case runs under: the kernel's variables (``KERNEL_ENV``) unset, then the case's own
    (so a tile or instruction-set setting never leaks into another line)."""
    return _Env({**{k: None for k in KERNEL_ENV}, **(getattr(case, "env", None) or {})})


def has_avx512_bf16() -> bool:
    """Whether this CPU reports AVX512-BF16 (``/proc/cpuinfo``), i.e. the default bfloat16 path uses it."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    return "avx512_bf16" in flags and "avx512bw" in flags


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
        if impl == "fused_rms_norm_avx512":  # the bfloat16 path of a CPU without AVX512-BF16, on one with it
            if dname != "bfloat16":
                raise Unavailable("the AVX-512 path differs from the default only in its bfloat16 conversions")
            if not has_avx512_bf16():
                raise Unavailable("this CPU has no AVX512-BF16: its default line is already the AVX-512 path")
            return EnvCase(lambda: fused.fused_rms_norm(x, w, EPS, out=y), {"NORMLAB_CPU_ISA": "avx512"})
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
        "compiled_layer_norm": lambda x, w, b: _compiled_ln(x, w, b, LN_EPS),
    }
    if impl == "traffic_twin":  # forward_backward only: what moving the same bytes costs without a norm
        if mode != "forward_backward":
            raise ValueError("traffic_twin is a forward_backward line")
        ty, tdx = torch.empty_like(x), torch.empty_like(x)
        ty.zero_(), tdx.zero_()  # touched once, outside any timing, as the copy's reused buffer is

        def twin():
            ty.copy_(x)  # the forward's traffic: x in, y out
            torch.add(dy, x, out=tdx)  # the backward's: dy and x in, dx out
        return twin
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
             "compiled_rms_norm": lambda: _compiled(xt, w, EPS),
             "compiled_layer_norm": lambda: _compiled_ln(xt, w, b, LN_EPS)}[impl]
        f().backward(dy)
        err = (xt.grad.double() - xg.grad).abs().max().item()
        scale = xg.grad.abs().max().item()
        if not err <= 16 * tol.unit_roundoff(dtype) * scale:
            raise AssertionError(f"{impl} {dname}: gradient of x off by {err:.3g} (scale {scale:.3g})")
        return
    y = torch.empty_like(x)
    out = make_case(impl, mode, x, w, b, None, y if mode == "forward_out" else None)
    if mode == "forward_out":
        with case_env(out):
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
