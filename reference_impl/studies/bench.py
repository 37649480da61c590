"""CPU benchmark of the normalization ops: ``python -m reference_impl.studies.bench``.

One run measures, for float32 and bfloat16 and a grid of (rows, hidden) shapes, the forward and the
forward+backward of: ``clone()`` (the copy ceiling), ``F.rms_norm`` eager, ``torch.compile`` of a plain
RMSNorm (Llama order), ``F.layer_norm`` eager, the PyTorch reference (:func:`reference_impl.rms_norm`), and
the fused ops of :mod:`reference_impl.ops.library` (RMSNorm and LayerNorm). It also counts the floating-point
operations of RMSNorm and LayerNorm (claim C05) and times a small Llama-style transformer block with and
without its norms (claim C38).

Method: every implementation is validated against the float64 oracle on a small input first; then per
shape each one runs once to warm up (and compile), once under the profiler for its peak memory, then
``repeats`` times interleaved round-robin with the others (so a burst of load on a shared machine hits
them alike); the median is reported. GB/s counts the bytes that must move at minimum:
forward ``2 N b`` (read x, write y) and forward+backward ``5 N b`` (forward, then read dy and x, write dx),
plus the gain (and bias) vectors, with ``N`` elements of ``b`` bytes. The copy ceiling of a shape is the
GB/s of ``x.clone()``, which reads and writes the same ``2 N b`` bytes as the forward. Peak memory is the
high-water mark of the tensors allocated during one call (inputs excluded), from ``torch.profiler``.

Writes ``docs/data/bench_cpu.json`` and SVG plots under ``docs/data/plots/`` (both from the same run).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from .. import oracle
from .. import tolerances as tol
from ..ops import library as fused
from ..provenance import cpu_model
from ..reference import rms_norm as ref_rms_norm

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "docs" / "data"
OUT = DATA / "bench_cpu.json"
PLOTS = DATA / "plots"
SOURCES = ("cuda/ops.cpp", "cuda/cpu/cpu_common.h", "cuda/cpu/simd.h", "cuda/cpu/rms_norm_cpu.cpp",
           "cuda/cpu/layer_norm_cpu.cpp", "reference_impl/ops/library.py", "reference_impl/studies/bench.py")

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
SHAPES = [(4096, 1024), (4096, 2048), (4096, 4096), (4096, 8192),
          (32768, 1024), (32768, 2048), (32768, 4096), (32768, 8192)]
QUICK_SHAPES = [(1024, 1024), (1024, 4096)]
MODES = ("forward", "forward_backward")
EPS = 1e-6
IMPLS = ("copy", "F.rms_norm", "compiled_rms_norm", "F.layer_norm", "reference_rms_norm",
         "fused_rms_norm", "fused_layer_norm")
LABELS = {
    "copy": "clone() (copy ceiling)",
    "F.rms_norm": "F.rms_norm (eager)",
    "compiled_rms_norm": "torch.compile(plain RMSNorm)",
    "F.layer_norm": "F.layer_norm (eager)",
    "reference_rms_norm": "reference_impl.rms_norm",
    "fused_rms_norm": "fused_rms_norm (this op)",
    "fused_layer_norm": "fused_layer_norm (this op)",
}
MEMORY_CAP_BYTES = 3 << 30  # skip a configuration whose projected peak exceeds this (shared machine)
RSS_LIMIT_BYTES = 12 << 30     # stop outright if the process ever holds more than this
MEMORY_MARGIN_BYTES = 6 << 30  # and one that would leave less than this much memory available to others
TIME_PER_CONFIG_S = 4.0     # repeats: as many as fit in this budget, between MIN and MAX
MIN_REPEATS, MAX_REPEATS = 3, 25


# --8<-- [start:plain_rms]
def plain_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """The RMSNorm a user would write and hand to torch.compile (Hugging Face LlamaRMSNorm's order)."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)
# --8<-- [end:plain_rms]


# Static shapes, one compiled kernel per (dtype, shape): torch.compile at its best. The recompile limit is
# raised so that no shape of the grid falls back to eager.
_compiled = torch.compile(plain_rms_norm, dynamic=False)


def _make_fn(impl: str, d: int):
    """Returns f(x, w, b) -> tensor for an implementation."""
    if impl == "copy":
        return lambda x, w, b: x.clone()
    if impl == "F.rms_norm":
        return lambda x, w, b: F.rms_norm(x, (d,), w, EPS)
    if impl == "compiled_rms_norm":
        return lambda x, w, b: _compiled(x, w, EPS)
    if impl == "F.layer_norm":
        return lambda x, w, b: F.layer_norm(x, (d,), w, b, 1e-5)
    if impl == "reference_rms_norm":
        return lambda x, w, b: ref_rms_norm(x, w, EPS)
    if impl == "fused_rms_norm":
        return lambda x, w, b: fused.fused_rms_norm(x, w, EPS)
    if impl == "fused_layer_norm":
        return lambda x, w, b: fused.fused_layer_norm(x, w, b, 1e-5)
    raise ValueError(impl)


def min_bytes(rows: int, d: int, dtype: torch.dtype, mode: str, impl: str) -> int:
    """Bytes that must move at minimum (see the module docstring)."""
    b = torch.empty((), dtype=dtype).element_size()
    n = rows * d
    params = 0 if impl == "copy" else (2 if "layer_norm" in impl else 1) * d * b
    if mode == "forward":
        return 2 * n * b + params
    return 5 * n * b + 2 * params  # parameters read in both passes, their gradients written


class _Case:
    """Inputs and one callable for an (impl, mode) at one shape."""

    def __init__(self, impl, mode, x, w, b, dy):
        self.impl, self.mode = impl, mode
        d = x.shape[-1]
        f = _make_fn(impl, d)
        if mode == "forward":
            self.x, self.w, self.b = x, w, b

            def run():
                with torch.no_grad():
                    return f(self.x, self.w, self.b)
        else:
            self.x = x.detach().requires_grad_(True)
            self.w = None if impl == "copy" else w.detach().requires_grad_(True)
            self.b = None if "layer_norm" not in impl else b.detach().requires_grad_(True)
            params = [p for p in (self.x, self.w, self.b) if p is not None]

            def run():
                y = f(self.x, self.w, self.b)
                y.backward(dy)
                for p in params:  # drop the gradients at once: seven cases must not hold seven copies
                    p.grad = None
                return None
        self.run = run


def peak_bytes(fn) -> int:
    """High-water mark of the bytes allocated by one call of fn (inputs excluded), from the profiler."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn()
        del out
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    cur = peak = 0
    for e in events:
        if e.device_type().name == "CPU":
            cur += e.nbytes()
            peak = max(peak, cur)
    return peak


def validate(impl: str, dtype: torch.dtype) -> None:
    """Before timing, check an implementation's forward against the float64 oracle (the copy excepted)."""
    if impl == "copy":
        return
    g = torch.Generator().manual_seed(7)
    x = torch.randn(8, 257, generator=g).to(dtype)
    w = (1 + 0.1 * torch.randn(257, generator=g)).to(dtype)
    b = (0.1 * torch.randn(257, generator=g)).to(dtype)
    with torch.no_grad():
        y = _make_fn(impl, 257)(x, w, b)
    u = tol.unit_roundoff(dtype)
    if "layer_norm" in impl:
        ref = oracle.layer_norm_forward(x.double().numpy(), w.double().numpy(), b.double().numpy(), 1e-5)
        bound = tol.ln_forward_bound(x, w, b, 1e-5, dtype)
    else:
        ref = oracle.rms_norm_forward(x.double().numpy(), w.double().numpy(), EPS)
        # llama order (compiled, fused): one more rounding to x's dtype before the gain
        bound = tol.rms_forward_bound(x, w, EPS, dtype) * (1 + u) + u * abs(ref)
    tol.assert_within(y, ref, bound, f"{impl} {dtype}")


def _available_bytes() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62


def _rss_bytes() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _cpu_flags() -> list[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                return sorted(f for f in flags if f in ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
                                                         "avx512dq", "avx512_bf16"))
    except OSError:
        pass
    return []


def machine_info() -> dict:
    mem = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "memory_gib": mem,
        "cpu_flags": _cpu_flags(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "load_average_at_start": list(os.getloadavg()),
    }


def sources_hash() -> str:
    h = hashlib.sha256()
    for rel in SOURCES:
        h.update(rel.encode())
        h.update((REPO / rel).read_bytes())
    return h.hexdigest()[:16]


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


# --8<-- [start:block]
class _Block(torch.nn.Module):
    """A Llama-style pre-norm decoder block: norm, attention, residual add, norm, SwiGLU MLP, residual add."""

    def __init__(self, d, heads, ffn, norm):
        super().__init__()
        self.h = heads
        self.qkv = torch.nn.Linear(d, 3 * d, bias=False)
        self.o = torch.nn.Linear(d, d, bias=False)
        self.up = torch.nn.Linear(d, 2 * ffn, bias=False)
        self.down = torch.nn.Linear(ffn, d, bias=False)
        self.w1 = torch.nn.Parameter(torch.ones(d))
        self.w2 = torch.nn.Parameter(torch.ones(d))
        self.norm = norm

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x, self.w1)).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.o(a)
        gate, up = self.up(self.norm(x, self.w2)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)
# --8<-- [end:block]


BLOCK = {"batch": 1, "tokens": 1024, "hidden": 1024, "heads": 16, "ffn": 2816}


def block_share(repeats: int = 7) -> dict:
    """Times the block with each norm and with the norms removed; share = (t - t_without) / t."""
    norms = {  # keys without dots: the page's data() macro reads them as a dotted path
        "eager_rms_norm": lambda x, w: F.rms_norm(x, (x.shape[-1],), w, EPS),
        "fused_rms_norm": lambda x, w: fused.fused_rms_norm(x, w, EPS),
        "eager_layer_norm": lambda x, w: F.layer_norm(x, (x.shape[-1],), w, None, 1e-5),
        "fused_layer_norm": lambda x, w: fused.fused_layer_norm(x, w, None, 1e-5),
        "none": lambda x, w: x,
    }
    torch.manual_seed(0)
    blocks = {}
    base = _Block(BLOCK["hidden"], BLOCK["heads"], BLOCK["ffn"], norms["none"])
    for k, n in norms.items():
        blk = _Block(BLOCK["hidden"], BLOCK["heads"], BLOCK["ffn"], n)
        blk.load_state_dict(base.state_dict())
        blocks[k] = blk
    x = torch.randn(BLOCK["batch"], BLOCK["tokens"], BLOCK["hidden"])
    res: dict = {"config": dict(BLOCK, dtype="float32"), "repeats": repeats}
    for mode in MODES:
        times = {k: [] for k in blocks}

        def once(k):
            blk = blocks[k]
            t0 = time.perf_counter()
            if mode == "forward":
                with torch.no_grad():
                    blk(x)
            else:
                blk.zero_grad(set_to_none=True)
                blk(x).sum().backward()
            return time.perf_counter() - t0

        for k in blocks:
            once(k)
        for _ in range(repeats):
            for k in blocks:
                times[k].append(once(k))
        med = {k: statistics.median(v) for k, v in times.items()}
        res[mode] = {
            "median_s": med,
            "norm_share": {k: (med[k] - med["none"]) / med[k] for k in med if k != "none"},
            "rms_vs_layer_norm_block_saving": {
                "eager": 1 - med["eager_rms_norm"] / med["eager_layer_norm"],
                "fused": 1 - med["fused_rms_norm"] / med["fused_layer_norm"],
            },
        }
    return res


def _plot(data: dict, out_dir: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: smaller files
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    rows_list = sorted({r["rows"] for r in data["results"]})
    styles = {"copy": ("k", "--"), "F.rms_norm": ("tab:orange", "-"), "compiled_rms_norm": ("tab:green", "-"),
              "F.layer_norm": ("tab:purple", ":"), "reference_rms_norm": ("tab:gray", "-"),
              "fused_rms_norm": ("tab:blue", "-"), "fused_layer_norm": ("tab:cyan", ":")}
    for mode in MODES:
        fig, axes = plt.subplots(len(DTYPES), len(rows_list), figsize=(5.2 * len(rows_list), 3.8 * len(DTYPES)),
                                 squeeze=False, sharey="row")
        for i, dname in enumerate(DTYPES):
            for j, rows in enumerate(rows_list):
                ax = axes[i][j]
                for impl in IMPLS:
                    pts = sorted((r["hidden"], r["gbps"]) for r in data["results"]
                                 if r["mode"] == mode and r["dtype"] == dname and r["rows"] == rows
                                 and r["impl"] == impl and r.get("gbps") is not None)
                    if pts:
                        c, ls = styles[impl]
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], color=c, linestyle=ls, marker="o",
                                markersize=3, label=LABELS[impl])
                ax.set_xscale("log", base=2)
                ax.set_title(f"{dname}, {rows} rows, {mode.replace('_', '+')}", fontsize=9)
                ax.set_xlabel("hidden size d")
                ax.set_ylabel("GB/s (minimum bytes)")
                ax.grid(True, alpha=0.3)
        axes[0][0].legend(fontsize=7, loc="best")
        fig.suptitle(f"{data['machine']['cpu']}, {data['machine']['torch_threads']} threads, {data['date'][:10]}",
                     fontsize=9)
        fig.tight_layout()
        name = f"cpu_{mode}.svg"
        fig.savefig(out_dir / name, metadata={"Date": None})
        plt.close(fig)
        written.append(name)
    return written


def _summaries(results: list[dict]) -> dict:
    """Per statistic (the median, and the minimum, which a burst of load from other jobs cannot inflate),
    mode and dtype: the extreme ratios of the fused op to copy and to torch.compile, the number of shapes
    meeting each target, the speed-up over eager F.rms_norm, and LayerNorm-vs-RMSNorm time reductions."""
    out: dict = {}
    for stat in ("median", "min"):
        key = f"{stat}_s"
        out[stat] = {}
        for mode in MODES:
            out[stat][mode] = {}
            for dname in DTYPES:
                rows = [r for r in results if r["mode"] == mode and r["dtype"] == dname and r.get(key)]
                t = {(r["rows"], r["hidden"], r["impl"]): r[key] for r in rows}
                shapes = sorted({(r["rows"], r["hidden"]) for r in rows})

                def ratios(num, den, shapes=shapes, t=t):
                    return [t[s + (num,)] / t[s + (den,)] for s in shapes if s + (num,) in t and s + (den,) in t]

                # GB/s ratio to copy = (bytes_op / t_op) / (bytes_copy / t_copy)
                bf = {(r["rows"], r["hidden"]): r["bytes"] for r in rows if r["impl"] == "fused_rms_norm"}
                bc = {(r["rows"], r["hidden"]): r["bytes"] for r in rows if r["impl"] == "copy"}
                rc = [bf[s] / t[s + ("fused_rms_norm",)] / (bc[s] / t[s + ("copy",)])
                      for s in shapes if s in bf and s in bc]
                rk = ratios("compiled_rms_norm", "fused_rms_norm")
                eager = ratios("F.rms_norm", "fused_rms_norm")
                red_fused = [1 - v for v in ratios("fused_rms_norm", "fused_layer_norm")]
                red_eager = [1 - v for v in ratios("F.rms_norm", "F.layer_norm")]

                def mmm(v):
                    return (min(v), statistics.median(v), max(v)) if v else (None, None, None)

                c0, c1, c2 = mmm(rc)
                k0, k1, k2 = mmm(rk)
                out[stat][mode][dname] = {
                    "shapes": len(rc),
                    "fused_ratio_copy_min": c0, "fused_ratio_copy_median": c1, "fused_ratio_copy_max": c2,
                    "fused_ratio_compile_min": k0, "fused_ratio_compile_median": k1, "fused_ratio_compile_max": k2,
                    "copy_target_met_shapes": sum(r >= 0.9 for r in rc),
                    "compile_target_met_shapes": sum(r >= 1.0 for r in rk),
                    "fused_speedup_over_eager_min": mmm(eager)[0], "fused_speedup_over_eager_max": mmm(eager)[2],
                    "ln_to_rms_time_reduction_fused_min": mmm(red_fused)[0],
                    "ln_to_rms_time_reduction_fused_median": mmm(red_fused)[1],
                    "ln_to_rms_time_reduction_fused_max": mmm(red_fused)[2],
                    "ln_to_rms_time_reduction_eager_min": mmm(red_eager)[0],
                    "ln_to_rms_time_reduction_eager_median": mmm(red_eager)[1],
                    "ln_to_rms_time_reduction_eager_max": mmm(red_eager)[2],
                }
    return out


def _prepare_process() -> None:
    fused.load()
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    torch._dynamo.config.accumulated_recompile_limit = max(torch._dynamo.config.accumulated_recompile_limit, 1024)


def measure_config(dname: str, rows: int, d: int, mode: str, peak_per_elem: dict) -> list[dict]:
    """Times every implementation at one (dtype, shape, mode); returns one record per implementation.

    ``peak_per_elem`` maps "dtype/hidden/mode/impl" to the peak bytes per element measured at a smaller shape;
    an implementation whose projected peak is over the cap is recorded as skipped, not run."""
    dtype = DTYPES[dname]
    g = torch.Generator().manual_seed(rows * 31 + d)
    x = torch.randn(rows, d, generator=g, dtype=torch.float32).to(dtype)
    w = (1 + 0.1 * torch.randn(d, generator=g)).to(dtype)
    b = (0.1 * torch.randn(d, generator=g)).to(dtype)
    dy = torch.randn(rows, d, generator=g, dtype=torch.float32).to(dtype) if mode != "forward" else None
    cases, recs, out = [], {}, []
    for impl in IMPLS:
        rec = {"dtype": dname, "rows": rows, "hidden": d, "mode": mode, "impl": impl,
               "bytes": min_bytes(rows, d, dtype, mode, impl)}
        proj = peak_per_elem.get(f"{dname}/{d}/{mode}/{impl}")
        need = None if proj is None else proj * rows * d
        if need is not None and (need > MEMORY_CAP_BYTES or need > _available_bytes() - MEMORY_MARGIN_BYTES):
            rec["skipped"] = (f"projected peak {need / 2**30:.1f} GiB exceeds the benchmark's cap of "
                              f"{MEMORY_CAP_BYTES / 2**30:.0f} GiB or the memory left free for others")
            out.append(rec)
            continue
        case = _Case(impl, mode, x, w, b, dy)
        t0 = time.perf_counter()
        if impl == "compiled_rms_norm":
            case.run()  # compile outside the profiler, then profile a second call
        rec["warmup_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        rec["peak_mib"] = peak_bytes(case.run) / 2**20  # the profiled call (the warm-up for the others)
        rec["profiled_call_s"] = time.perf_counter() - t0
        if _rss_bytes() > RSS_LIMIT_BYTES:
            raise RuntimeError(f"the benchmark holds {_rss_bytes() / 2**30:.1f} GiB, more than its limit of "
                               f"{RSS_LIMIT_BYTES / 2**30:.0f} GiB; stopping to protect the machine")
        cases.append(case)
        recs[impl] = rec
    # repeats: as many as fit in the time budget, interleaved round-robin across implementations
    est = sum(r["profiled_call_s"] for r in recs.values())  # one round, compile time excluded
    reps = max(MIN_REPEATS, min(MAX_REPEATS, int(TIME_PER_CONFIG_S / max(est, 1e-9))))
    times = {c.impl: [] for c in cases}
    for _ in range(reps):
        for c in cases:
            t0 = time.perf_counter()
            c.run()
            times[c.impl].append(time.perf_counter() - t0)
    rss = _rss_bytes()
    for impl, rec in recs.items():
        ts = times[impl]
        rec.update(median_s=statistics.median(ts), min_s=min(ts), repeats=len(ts))
        rec["gbps"] = rec["bytes"] / rec["median_s"] / 1e9
        rec["process_rss_gib"] = round(rss / 2**30, 2)
    copy_gbps = recs["copy"]["gbps"] if "copy" in recs else None
    comp = recs.get("compiled_rms_norm")
    for impl, rec in recs.items():
        rec["ratio_copy"] = rec["gbps"] / copy_gbps if copy_gbps else None
        rec["ratio_compile"] = comp["median_s"] / rec["median_s"] if comp else None
        out.append(rec)
    return sorted(out, key=lambda r: IMPLS.index(r["impl"]))


def _worker(spec: str) -> int:
    """One (dtype, shape, mode) in a fresh process, so the heap of one configuration never inflates the next."""
    job = json.loads(spec)
    _prepare_process()
    recs = measure_config(job["dtype"], job["rows"], job["hidden"], job["mode"], job["peaks"])
    print("RESULTS " + json.dumps(recs))
    return 0


def run(shapes=SHAPES, dtypes=DTYPES, out: Path = OUT, plots: Path | None = PLOTS, block: bool = True) -> dict:
    import subprocess

    from tqdm import tqdm

    _prepare_process()
    for dname, dtype in dtypes.items():
        for impl in IMPLS:
            validate(impl, dtype)
    started = _dt.datetime.now(_dt.timezone.utc)
    results: list[dict] = []
    peaks: dict = {}  # "dtype/hidden/mode/impl" -> peak bytes per element at a smaller shape
    jobs = [(dn, s, m) for dn in dtypes for s in sorted(shapes) for m in MODES]
    bar = tqdm(total=len(jobs) * len(IMPLS), desc="bench", unit="case", file=sys.stderr)
    for dname, (rows, d), mode in jobs:
        spec = json.dumps({"dtype": dname, "rows": rows, "hidden": d, "mode": mode, "peaks": peaks})
        proc = subprocess.run([sys.executable, "-m", "reference_impl.studies.bench", "--worker", spec, "--no-reexec"],
                              capture_output=True, text=True, cwd=REPO)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULTS ")]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"benchmark worker for {dname} {rows}x{d} {mode} failed:\n{proc.stderr[-3000:]}")
        recs = json.loads(lines[-1][len("RESULTS "):])
        for rec in recs:
            if "peak_mib" in rec:
                peaks[f"{dname}/{d}/{rec['mode']}/{rec['impl']}"] = rec["peak_mib"] * 2**20 / (rows * d)
        results += recs
        bar.update(len(recs))
    bar.close()
    data = {
        "what": "CPU benchmark of RMSNorm/LayerNorm implementations (python -m reference_impl.studies.bench)",
        "date": started.isoformat(timespec="seconds"),
        "duration_s": None,
        "machine": machine_info(),
        "sources_sha256": sources_hash(),
        "settings": {"eps": EPS, "process": "one fresh worker process per (dtype, shape, mode)", "warmup_calls": 1, "warmup_profiled": "all but torch.compile (profiled on a 2nd call)", "repeats_min": MIN_REPEATS, "repeats_max": MAX_REPEATS,
                     "time_per_config_s": TIME_PER_CONFIG_S, "memory_cap_gib": MEMORY_CAP_BYTES / 2**30,
                     "statistic": "median", "order": "round-robin across implementations",
                     "bytes": "forward 2*N*b, forward+backward 5*N*b, plus parameters",
                     "malloc_env": {k: os.environ.get(k) for k in MALLOC_ENV},
                     "shapes": [list(s) for s in shapes], "dtypes": list(dtypes), "impls": list(IMPLS),
                     "labels": LABELS},
        "results": results,
        "summary": _summaries(results),
        "flops": flop_summary(),
    }
    if block:
        data["block"] = block_share()
    data["machine"]["load_average_at_end"] = list(os.getloadavg())
    data["duration_s"] = round((_dt.datetime.now(_dt.timezone.utc) - started).total_seconds(), 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    if plots is not None:
        data["plots"] = _plot(data, plots)
    out.write_text(json.dumps(data, indent=1) + "\n")
    return data


# glibc's malloc hands blocks above its mmap threshold back to the kernel on free, so every call of every
# implementation would pay one page fault per 4 KiB of fresh output (about 2 GB/s on the machine of the
# committed data), which hides the kernels. The command re-executes itself with these settings, which
# keep freed memory in the heap for reuse, as a caching allocator (jemalloc, tcmalloc) does.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(1 << 34), "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
              "MALLOC_TOP_PAD_": str(1 << 26)}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(os.environ.get(k) != v for k, v in MALLOC_ENV.items()) and "--no-reexec" not in argv:
        # the workers inherit the settings from this process
        os.execve(sys.executable, [sys.executable, "-m", "reference_impl.studies.bench", *argv],
                  {**os.environ, **MALLOC_ENV})
    p = argparse.ArgumentParser(prog="python -m reference_impl.studies.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="two small shapes, no block timing (a smoke test)")
    p.add_argument("--out", type=Path, default=OUT, help=f"data file (default {OUT.relative_to(REPO)})")
    p.add_argument("--plots", type=Path, default=PLOTS, help="folder for the SVG plots")
    p.add_argument("--no-reexec", action="store_true", help="keep the current malloc settings (see MALLOC_ENV)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return _worker(args.worker)
    data = run(QUICK_SHAPES if args.quick else SHAPES, out=args.out, plots=args.plots, block=not args.quick)
    for mode in MODES:
        for dname, s in data["summary"]["median"][mode].items():
            print(f"{mode:17s} {dname:9s} fused/copy {s['fused_ratio_copy_min']:.2f}..{s['fused_ratio_copy_max']:.2f}"
                  f"  fused vs compile {s['fused_ratio_compile_min']:.2f}..{s['fused_ratio_compile_max']:.2f}x")
    print(f"wrote {args.out} in {data['duration_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
