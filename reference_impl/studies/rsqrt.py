"""The reciprocal-square-root study: ``python -m reference_impl.studies.rsqrt``.

CPU (default): sweeps every positive finite float32 (bit patterns 0x00000001..0x7F7FFFFF, normals and
subnormals) through every CPU method in ``reference_impl.ops.rsqrt`` and compares each result with the
correctly rounded 1/sqrt(x); times the methods (cache-resident and streaming); times an RMSNorm row loop
with exact and approximate rsqrt; measures the error an approximate rsqrt leaves in RMSNorm's output per
output dtype. Writes ``docs/data/rsqrt_cpu.json`` and the plots ``docs/data/plots/rsqrt_*.svg``; a full
(not ``--quick``) run written there is also filed under its machine's key in ``docs/data/rsqrt_machines/``
(:mod:`reference_impl.studies.rsqrt_machines`), since its timings belong to that machine.

GPU (``--gpu``, on a machine with a CUDA device): sweeps the same inputs through the device methods of
``cuda/rsqrt/rsqrt_gpu.cu``, built without and with ``-use_fast_math``, and writes
``docs/data/rsqrt_gpu.json`` (device, driver, versions, date). Without a device it exits with status 2
and writes nothing.

Options: ``--stride N`` sweeps every N-th pattern only (the data file then says it is not exhaustive);
``--plots-only`` re-renders the plots from an existing data file; ``--out FILE`` writes the data file there
(its folder must exist) and the plots into a folder ``plots`` beside it, leaving every committed file alone.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from .. import provenance as pv
from ..ops import rsqrt as R
from ..provenance import finish, record
from ..provenance import source_hash as _hash
from . import rsqrt_machines, rsqrt_panels
from .machine import cpu_identity, machine_key

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "docs" / "data"
PLOTS = DATA / "plots"
CPU_JSON = DATA / "rsqrt_cpu.json"
GPU_JSON = DATA / "rsqrt_gpu.json"
COMMAND = "python -m reference_impl.studies.rsqrt"
# what changes the numbers: the native methods, their build flags (ops/build.py), their loader and this
# study (the sweep and the timed loop); not the package's argument checks, reference or conventions
SOURCES = ["cuda/rsqrt/rsqrt_common.h", "cuda/rsqrt/rsqrt_cpu.cpp", "cuda/rsqrt/rsqrt_gpu.cu",
           "cuda/rsqrt/rsqrt_gpu_api.h", "cuda/rsqrt/rsqrt_gpu_bind.cpp", "reference_impl/ops/build.py",
           "reference_impl/ops/rsqrt.py", "reference_impl/studies/rsqrt.py"]
SIMD_FLAGS = ("sse", "sse2", "sse3", "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f",
              "avx512dq", "avx512cd", "avx512bw", "avx512vl", "avx512er")

#: Seeds whose Newton steps the page compares with theory: raw method -> (1-step, 2-step) methods.
NEWTON = {
    "sse_rsqrt": [("classic", "sse_rsqrt_nr1", "sse_rsqrt_nr2"),
                  ("rearranged", "sse_rsqrt_nr1_rearranged", "sse_rsqrt_nr2_rearranged")],
    "avx_rsqrt": [("classic", "avx_rsqrt_nr1", "avx_rsqrt_nr2"), ("fma", "avx_rsqrt_nr1_fma", "avx_rsqrt_nr2_fma")],
    "avx512_rsqrt14": [("classic", "avx512_rsqrt14_nr1", "avx512_rsqrt14_nr2"),
                       ("fma", "avx512_rsqrt14_nr1_fma", "avx512_rsqrt14_nr2_fma")],
    "quake": [("classic", "quake_nr1", "quake_nr2")],
    "lomont": [("classic", "lomont_nr1", "lomont_nr2")],
}
PROFILED = ["sse_rsqrt", "avx512_rsqrt14", "quake", "lomont", "walczyk", "sse_rsqrt_nr1",
            "sse_rsqrt_nr1_rearranged", "avx512_rsqrt14_nr1_fma", "quake_nr1", "lomont_nr1", "walczyk_nr1",
            "libm_div_sqrt"]
RMS_METHODS = ["libm_div_sqrt", "sse_rsqrt", "sse_rsqrt_nr1", "sse_rsqrt_nr2", "sse_rsqrt_nr1_rearranged",
               "avx512_rsqrt14", "avx512_rsqrt14_nr1_fma", "quake_nr1", "walczyk_nr1", "walczyk_nr2"]


# ------------------------------------------------------------------------------ machine and provenance
def simd_flags() -> list[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, val = line.partition(":")
            if key.strip() == "flags":
                return [f for f in SIMD_FLAGS if f in val.split()]
    except OSError:
        pass
    return []


def source_hash() -> str:
    return _hash(SOURCES)


def provenance(quick: bool = False) -> dict:
    """The data file's start: the ``provenance`` block of :mod:`reference_impl.provenance`, with the CPU's
    identity and machine key (:mod:`reference_impl.studies.machine`), under which the run is filed."""
    ident = cpu_identity()
    return {"provenance": record(COMMAND, SOURCES, quick=quick, packages=("torch", "numpy"),
                                 machine_extra={"simd_flags": simd_flags(), "cpu_identity": ident,
                                                "machine_key": machine_key(ident)})}


def _fx(bits: int) -> dict:
    return {"bits": f"0x{int(bits):08X}", "value": float(R.bits_to_float([int(bits)])[0])}


def _clean(g: dict, seed_bound: float) -> dict:
    """A group's statistics for the data file (no infinities: empty extrema become None)."""
    finite = g["count"] - g["nonfinite"]
    out = {k: g[k] for k in ("count", "exact", "nonfinite", "max_ulp_int", "max_ulp", "max_abs_rel",
                             "ulp_hist", "rel_hist")}
    out["mean_abs_rel"] = g["sum_abs_rel"] / finite if finite else None
    out["min_rel"] = g["min_rel"] if finite else None
    out["max_rel"] = g["max_rel"] if finite else None
    out["exact_share"] = g["exact"] / g["count"] if g["count"] else None
    out["bits"] = -math.log2(g["max_abs_rel"]) if finite and g["max_abs_rel"] > 0 else None
    out["worst_ulp_x"] = _fx(g["worst_ulp_x"]) if finite else None
    out["worst_rel_x"] = _fx(g["worst_rel_x"]) if finite else None
    if seed_bound > 0:
        out["within_documented_bound"] = bool(finite == g["count"] and g["max_abs_rel"] <= seed_bound)
    return out


# ------------------------------------------------------------------------------ parts of the cpu study
def run_sweep(names, stride: int, threads: int, quiet: bool) -> dict:
    from tqdm import tqdm

    total = (R.END_POSITIVE_FINITE - R.FIRST_POSITIVE + stride - 1) // stride
    chunks = max(1, min(128, total // (1 << 20)))
    with tqdm(total=total, unit="x", unit_scale=True, desc=f"sweep ({len(names)} methods)", disable=quiet) as bar:
        return R.sweep(names, R.FIRST_POSITIVE, R.END_POSITIVE_FINITE, stride, chunks=chunks, threads=threads,
                       progress=bar.update)


def newton_theory(seed: dict) -> dict:
    """Exact-arithmetic error after classic Newton steps from a seed with relative error in [lo, hi].

    With y = R(1+e), y * (3 - x*y*y) / 2 = R(1 - 3e^2/2 - e^3/2): the error after one step is
    -e^2 (3 + e) / 2, never positive, and its magnitude is largest at an end of [lo, hi]."""
    lo, hi = seed["min_rel"], seed["max_rel"]

    def step(e):
        return -e * e * (3.0 + e) / 2.0

    e1 = max(abs(step(lo)), abs(step(hi)))
    e2 = abs(step(-e1))
    return {"seed_min_rel": lo, "seed_max_rel": hi, "nr1_max_abs_rel": e1, "nr2_max_abs_rel": e2}


def run_throughput(names, quick: bool, quiet: bool) -> dict:
    from tqdm import tqdm

    cache_n, cache_inner = 4096, (50 if quick else 2000)
    stream_n = (1 << 18) if quick else (1 << 24)
    out = {"cache_n": cache_n, "cache_passes": cache_inner, "stream_n": stream_n, "threads": 1, "methods": {}}
    for name in tqdm(names, desc="throughput", disable=quiet):
        out["methods"][name] = {
            "cache_ns": R.throughput_ns(name, cache_n, cache_inner, 3 if quick else 7),
            "stream_ns": R.throughput_ns(name, stream_n, 1, 2 if quick else 5),
        }
    m = out["methods"]
    ratios = {}
    for fast, slow in (("sse_rsqrt", "sse_div_sqrt"), ("sse_rsqrt", "libm_div_sqrt"), ("avx_rsqrt", "avx_div_sqrt"),
                       ("avx512_rsqrt14", "avx512_div_sqrt"), ("sse_rsqrt_nr1", "sse_div_sqrt"),
                       ("avx_rsqrt_nr1_fma", "avx_div_sqrt"), ("avx512_rsqrt14_nr1_fma", "avx512_div_sqrt")):
        if fast in m and slow in m:
            ratios[f"{fast}_vs_{slow}"] = {"cache": m[slow]["cache_ns"] / m[fast]["cache_ns"],
                                           "stream": m[slow]["stream_ns"] / m[fast]["stream_ns"]}
    out["speedups"] = ratios
    return out


def run_rmsnorm_time(quick: bool, quiet: bool, repetitions: int | None = None) -> dict:
    """ns per row of the AVX2 RMSNorm row loop with each rsqrt variant, and the rsqrt's share.

    Each of ``repetitions`` (3 at least, 1 in a quick run) independent timings runs the four variants
    interleaved; a row's ``rsqrt_share = (t_exact - t_none) / t_exact`` is the median over them, reported
    only where every repetition saw t_none below t_exact ("measured"); otherwise it is None and
    ``rsqrt_share_high`` (the largest share any repetition saw, at least 0) bounds it ("within noise")."""
    from tqdm import tqdm

    if not R.cpu_features().get("avx2") or not R.cpu_features().get("fma"):
        return {"available": False, "reason": "the row loop needs AVX2 and FMA"}
    reps_n = repetitions or (1 if quick else 5)
    sizes = {"cache": 1 << 16, "stream": 1 << 19} if quick else {"cache": 1 << 20, "stream": 1 << 25}
    out = {"available": True, "variants": ["exact", "rsqrtss", "rsqrtss_nr1", "none"], "elements": sizes,
           "threads": 1, "repetitions": reps_n, "rows": {}}
    out["scalar_rsqrt_ns"] = {v: R.scalar_rsqrt_ns(v, 1 << 16, 3 if quick else 9)
                              for v in ("exact", "rsqrtss", "rsqrtss_nr1")}
    ds = [256, 4096] if quick else [64, 256, 1024, 4096, 8192]
    for d in tqdm(ds, desc="rmsnorm rows", disable=quiet):
        entry = {}
        for where, n in sizes.items():
            rows = max(1, n // d)
            runs = [R.rmsnorm_row_ns(d, rows, 3 if quick else 9) for _ in range(reps_n)]
            t = {v: float(np.median([r[v] for r in runs])) for v in out["variants"]}
            shares = [(r["exact"] - r["none"]) / r["exact"] for r in runs]
            measured = reps_n >= 3 and all(r["none"] < r["exact"] for r in runs)
            t["rsqrt_share_label"] = "measured" if measured else ("within noise" if reps_n >= 3 else "not repeated")
            t["rsqrt_share"] = float(np.median(shares)) if measured else None
            t["rsqrt_share_low"] = float(min(shares))
            t["rsqrt_share_high"] = float(max(shares))
            t["scalar_rsqrt_share"] = out["scalar_rsqrt_ns"]["exact"] / t["exact"]
            t["saving_rsqrtss"] = (t["exact"] - t["rsqrtss"]) / t["exact"]
            t["saving_rsqrtss_nr1"] = (t["exact"] - t["rsqrtss_nr1"]) / t["exact"]
            t["rows"] = rows
            entry[where] = t
        out["rows"][str(d)] = entry
    # upper bounds over the cache-resident runs (streaming runs are dominated by memory traffic and noise)
    big = [str(d) for d in ds if d >= 1024]
    out["max_rsqrt_share"] = max(max(0.0, e["cache"]["rsqrt_share_high"]) for e in out["rows"].values())
    out["max_rsqrt_share_d1024_up"] = max([max(0.0, out["rows"][d]["cache"]["rsqrt_share_high"]) for d in big] or [0.0])
    out["max_scalar_rsqrt_share"] = max(e["cache"]["scalar_rsqrt_share"] for e in out["rows"].values())
    out["max_scalar_rsqrt_share_d1024_up"] = max([out["rows"][d]["cache"]["scalar_rsqrt_share"] for d in big] or [0.0])
    out["max_saving_rsqrtss_d1024_up"] = max([max(0.0, out["rows"][d]["cache"]["saving_rsqrtss"]) for d in big] or [0.0])
    return out


def _ulp_of(y64: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """Spacing of the output dtype at |y| (subnormal spacing below the normal range)."""
    fi = torch.finfo(dtype)
    mant = {torch.float32: 23, torch.bfloat16: 7, torch.float16: 10}[dtype]
    a = np.maximum(np.abs(y64), float(fi.tiny))
    return np.exp2(np.floor(np.log2(a)) - mant)


def rmsnorm_error(rows: int = 512, d: int = 4096, eps: float = 1e-6, seed: int = 20261130,
                  methods=RMS_METHODS) -> dict:
    """Error an rsqrt method leaves in RMSNorm's output (Llama order: fp32 normalize, then cast).

    x (rows x d) is drawn in the output dtype with row scales from 1e-3 to 1e3, upcast to fp32;
    ms = mean(x^2) + eps in fp32 (torch); r = method(ms); y = (x * r).to(dtype). Against the float64
    oracle: max error in output ulps, share of outputs that differ from the exact-rsqrt result, and
    whether the result is within the project's tolerance policy (tolerances.rms_forward_bound)."""
    from ..tolerances import rms_forward_bound

    g = torch.Generator().manual_seed(seed)
    scales = torch.logspace(-3, 3, rows, dtype=torch.float64)
    base = torch.randn(rows, d, generator=g, dtype=torch.float64) * scales[:, None]
    out = {"rows": rows, "d": d, "eps": eps, "convention": "y = (x_fp32 * r).to(dtype), weight 1", "dtypes": {}}
    avail = set(R.method_names())
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        x = base.to(dtype)
        xf = x.float()
        ms = (xf * xf).mean(-1) + eps
        x64 = x.double().numpy()
        y64 = x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps)
        ulp = _ulp_of(y64, dtype)
        bound = rms_forward_bound(x, None, eps, dtype)
        y_exact = None
        per = {}
        u_o = R_unit(dtype)
        for name in methods:
            if name not in avail:
                continue
            r = R.rsqrt(ms.contiguous(), name)
            y = (xf * r[:, None]).to(dtype)
            if name == "libm_div_sqrt":
                y_exact = y
            yd = y.double().numpy()
            err = np.abs(yd - y64)
            r_exact = 1.0 / torch.sqrt(ms.double())
            rel_r = ((r.double() - r_exact) / r_exact).abs().max().item()
            per[name] = {
                "max_err_ulp": float(np.max(err / ulp)),
                "rsqrt_max_rel": rel_r,
                "rsqrt_rel_over_u_out": rel_r / u_o,
                "within_policy": bool(np.all(err <= bound)),
                "max_err_over_bound": float(np.max(err / bound)),
            }
        for name in per:
            y = (xf * R.rsqrt(ms.contiguous(), name)[:, None]).to(dtype)
            per[name]["differs_from_exact_share"] = float((y != y_exact).double().mean().item())
        out["dtypes"][str(dtype).replace("torch.", "")] = {"unit_roundoff": u_o, "methods": per}
    return out


def R_unit(dtype: torch.dtype) -> float:
    return float(torch.finfo(dtype).eps) / 2.0


# ------------------------------------------------------------------------------ plots
def render_plots(data: dict, outdir: Path) -> list[Path]:
    """The rsqrt page's plots, light and dark (reference_impl/studies/plotstyle.py). Titles name the figure;
    the machine and the details are in the page's captions."""
    from reference_impl.studies import plotstyle

    prof = data["profile"]
    lo, hi, nb = int(prof["lo"], 16), int(prof["hi"], 16), prof["nbins"]
    xs = R.bits_to_float(np.linspace(lo, hi, nb, endpoint=False).astype(np.uint32)).astype(np.float64)

    def envelope(ax, names, theme, scale=1.0):
        for name in names:
            p = prof["methods"].get(name)
            if p is None:
                continue
            mn, mx = np.array(p["min"]) / scale, np.array(p["max"]) / scale
            line = ax.plot(xs, mx, lw=0.9, label=name)[0]
            ax.plot(xs, mn, lw=0.9, color=line.get_color())
            ax.fill_between(xs, mn, mx, color=line.get_color(), alpha=0.15)
        ax.set_xscale("log", base=2)
        ax.set_xticks([1, 2, 4], ["1", "2", "4"])
        ax.axhline(0, color=plotstyle.muted(theme), lw=0.5)

    def binade(theme):
        fig, axes = plotstyle.figure(7.4, nrows=2)
        b = data["documented_bounds"]
        envelope(axes[0][0], ["sse_rsqrt", "avx512_rsqrt14"], theme)
        for v in (b["rsqrtps"], b["rsqrt14"]):
            for sign in (1, -1):
                axes[0][0].axhline(sign * v, ls="--", lw=0.8, color=plotstyle.muted(theme))
        axes[0][0].set_title("hardware estimates")
        envelope(axes[1][0], ["quake", "lomont", "walczyk"], theme)
        axes[1][0].set_title("bit-trick seeds")
        axes[1][0].set_xlabel("x (two binades)")
        for ax in (axes[0][0], axes[1][0]):
            ax.set_ylabel("relative error")
            ax.legend(loc="upper left", bbox_to_anchor=(0, -0.16) if ax is axes[0][0] else (0, -0.3), ncols=2)
        return fig

    def newton(theme):
        fig, axs = plotstyle.figure(4.8)
        ax = axs[0][0]
        envelope(ax, ["sse_rsqrt_nr1", "sse_rsqrt_nr1_rearranged", "avx512_rsqrt14_nr1_fma", "libm_div_sqrt"],
                 theme, scale=2.0**-24)
        ax.set_ylabel("relative error / 2^-24")
        ax.set_xlabel("x")
        fig.legend(loc="outside lower center", ncols=1)
        return fig

    show = [n for n in ("libm_div_sqrt", "sse_rsqrt", "sse_rsqrt_nr1", "sse_rsqrt_nr2_rearranged", "avx512_rsqrt14",
                        "avx512_rsqrt14_nr1_fma", "quake_nr1", "walczyk_nr1", "walczyk_nr2") if n in data["methods"]
            and data["methods"][n].get("normal")]

    # The page shows rsqrt_panels.py's drawing of these histograms (one panel per method, drawn by run_cpu);
    # this overlay of nine colours is the same data in one axes.
    def ulp_hist(theme):
        fig, axs = plotstyle.figure(7.6)
        ax = axs[0][0]
        labels = R.ulp_bin_edges()
        width = 0.8 / max(1, len(show))
        for k, name in enumerate(show):
            h = np.array(data["methods"][name]["normal"]["ulp_hist"], dtype=np.float64)
            h = h / h.sum()
            nz = np.flatnonzero(h)
            ax.bar(nz + k * width, h[nz], width=width, label=name, log=True)
        used = np.flatnonzero(sum(np.array(data["methods"][n]["normal"]["ulp_hist"]) for n in show))
        ax.set_xticks(used + 0.4, [labels[i] for i in used], rotation=60)
        ax.set_xlabel("float steps from the exact result")
        ax.set_ylabel("share of inputs")
        fig.legend(loc="outside lower center", ncols=1)
        return fig

    tp = data["throughput"]["methods"]
    names = list(tp)

    def throughput(theme):
        fig, axs = plotstyle.figure(0.32 * len(names) + 1.6)
        ax = axs[0][0]
        idx = np.arange(len(names))
        ax.barh(idx - 0.2, [tp[n]["cache_ns"] for n in names], 0.4, label="in cache")
        ax.barh(idx + 0.2, [tp[n]["stream_ns"] for n in names], 0.4, label="streaming")
        ax.set_yticks(idx, names)
        ax.invert_yaxis()
        ax.set_xlabel("ns per element (one thread)")
        fig.legend(loc="outside lower center", ncols=2)
        return fig

    written = []
    for draw, name in ((binade, "rsqrt_binade"), (newton, "rsqrt_newton"), (ulp_hist, "rsqrt_ulp_hist"),
                       (throughput, "rsqrt_throughput")):
        written += [outdir / f for f in plotstyle.save(draw, name, outdir)]

    rt = data.get("rmsnorm_time", {})
    if rt.get("available"):
        ds = list(rt["rows"])

        def share(theme):
            # median share with the repetitions' range; hollow markers: not separated from the noise
            fig, axs = plotstyle.figure(4.6)
            ax = axs[0][0]
            for where, mark, color in (("cache", "o", plotstyle.CYCLE[0]), ("stream", "s", plotstyle.CYCLE[1])):
                xs_ = [int(d) for d in ds]
                rows = [rt["rows"][d][where] for d in ds]
                mid = [100 * r["rsqrt_share"] if r.get("rsqrt_share") is not None
                       else 50 * (r.get("rsqrt_share_low", 0) + r.get("rsqrt_share_high", 0)) for r in rows]
                low = [m - 100 * r.get("rsqrt_share_low", m / 100) for m, r in zip(mid, rows)]
                high = [100 * r.get("rsqrt_share_high", m / 100) - m for m, r in zip(mid, rows)]
                ax.errorbar(xs_, mid, yerr=[low, high], fmt="none", ecolor=color, capsize=3, lw=0.8)
                for x, m, r in zip(xs_, mid, rows):
                    ok = r.get("rsqrt_share_label", "measured") == "measured"
                    ax.plot([x], [m], mark, color=color, mfc=color if ok else "none")
                ax.plot([], [], mark, color=color, label=f"{where}")
            ax.plot([], [], "o", color=plotstyle.muted(theme), mfc="none", label="hollow: within noise")
            ax.axhline(0, color=plotstyle.muted(theme), lw=0.6)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("row length d")
            ax.set_ylabel("rsqrt share of row time (%)")
            fig.legend(loc="outside lower center", ncols=2)
            return fig

        written += [outdir / f for f in plotstyle.save(share, "rsqrt_rmsnorm_share", outdir)]
    return written


# ------------------------------------------------------------------------------ drivers
def run_cpu(stride: int = 1, threads: int = 0, quick: bool = False, quiet: bool = False,
            out: Path = CPU_JSON, plots: Path = PLOTS) -> dict:
    t0 = time.time()
    data = provenance(quick)
    data["provenance"]["machine"]["mxcsr"] = R.cpu_features().get("mxcsr")
    meths = R.methods()
    names = [m["name"] for m in meths if m["available"]]
    data["stride"] = stride
    data["exhaustive"] = stride == 1
    e = R.RSQRTPS_REL_BOUND
    data["documented_bounds"] = {"rsqrtps": e, "rsqrt14": R.RSQRT14_REL_BOUND,
                                 "rsqrtps_bits": -math.log2(e), "rsqrt14_bits": -math.log2(R.RSQRT14_REL_BOUND),
                                 # one classic Newton step from the documented RSQRTPS bound, exact arithmetic
                                 "rsqrtps_nr1_exact_arithmetic": e * e * (3 + e) / 2}
    sw = run_sweep(names, stride, threads, quiet)
    data["inputs"] = {"total": sw["inputs"], "first": "0x00000001", "last": "0x7F7FFFFF",
                      "positive_finite_floats": R.N_POSITIVE_FINITE, "subnormal_floats": R.N_SUBNORMAL,
                      "groups": {"normal": "x >= 2^-125 (0x01000000..0x7F7FFFFF)",
                                 "lowest_normal_binade": "2^-126 <= x < 2^-125 (x/2 is subnormal)",
                                 "subnormal": "0x00000001..0x007FFFFF"}}
    data["reference"] = {"ambiguous": sw["ambiguous"], "corrected": sw["corrected"], "ties": sw["ties"],
                         "corrected_x": [_fx(b) for b in sw["corrected_x"]]}
    data["methods"] = {}
    for m in meths:
        entry = {k: m[k] for k in ("family", "form", "isa", "expr", "steps", "available")}
        entry["seed_bound"] = m["seed_bound"] if m["seed_bound"] > 0 else None
        if m["available"]:
            st = sw["methods"][m["name"]]
            raw = m["seed_bound"] if m["steps"] == 0 else -1
            entry["normal"] = _clean(st["normal"], raw)
            entry["lowest_normal_binade"] = _clean(st["lowest_normal_binade"], raw)
            entry["subnormal"] = _clean(st["subnormal"], -1)
        data["methods"][m["name"]] = entry
    # theory vs measurement for Newton's step
    newton = {}
    for seed, forms in NEWTON.items():
        if seed not in sw["methods"]:
            continue
        th = newton_theory(sw["methods"][seed]["normal"])
        rows = {}
        for form, one, two in forms:
            rows[form] = {"nr1_measured": sw["methods"][one]["normal"]["max_abs_rel"],
                          "nr2_measured": sw["methods"][two]["normal"]["max_abs_rel"],
                          "nr1_max_ulp": sw["methods"][one]["normal"]["max_ulp"],
                          "nr2_max_ulp": sw["methods"][two]["normal"]["max_ulp"]}
        newton[seed] = {**th, "forms": rows}
    data["newton"] = newton
    # relative error across [1, 4)
    lo, hi, nb = 0x3F800000, 0x40800000, 512
    prof = {"lo": f"0x{lo:08X}", "hi": f"0x{hi:08X}", "nbins": nb, "methods": {}}
    for name in PROFILED:
        if name in names:
            mn, mx = R.profile(name, lo, hi, nb)
            prof["methods"][name] = {"min": [float(f"{v:.5g}") for v in mn.tolist()],
                                     "max": [float(f"{v:.5g}") for v in mx.tolist()]}
    data["profile"] = prof
    data["throughput"] = run_throughput(names, quick, quiet)
    data["rmsnorm_time"] = run_rmsnorm_time(quick, quiet)
    data["rmsnorm_error"] = rmsnorm_error(rows=64 if quick else 512, d=1024 if quick else 4096)
    data["elapsed_s"] = round(time.time() - t0, 1)
    finish(data["provenance"])
    out.parent.mkdir(parents=True, exist_ok=True)
    pv.write_json(out, data)
    render_plots(data, plots)
    rsqrt_panels.draw(data, plots)  # the page's histograms, drawn from the file just written
    return data


def run_gpu(stride: int = 1, quiet: bool = False, out: Path = GPU_JSON, cpu_json: Path = CPU_JSON) -> dict:
    """Device sweep of rsqrt_gpu.cu's methods in both builds; returns the data written to ``out``."""
    from tqdm import tqdm

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device: the GPU sweep needs one (torch.cuda.is_available() is False)")
    data = provenance()
    props = torch.cuda.get_device_properties(0)
    data["device"] = {"name": props.name, "capability": f"{props.major}.{props.minor}",
                      "cuda_runtime": torch.version.cuda, "driver": _driver_version()}
    data["stride"] = stride
    data["exhaustive"] = stride == 1
    data["documented_ulp_bound_rsqrtf"] = R.CUDA_RSQRTF_ULP_BOUND
    groups = {"subnormal": (R.FIRST_POSITIVE, R.FIRST_NORMAL, 1),
              "lowest_normal_binade": (R.FIRST_NORMAL, R.FIRST_HALVABLE, 1),
              "normal": (R.FIRST_HALVABLE, R.END_POSITIVE_FINITE, 16)}
    builds = {}
    for fast in (False, True):
        ext = R.gpu_ext(fast)
        if ext.fast_math() != fast:
            raise RuntimeError(f"the {'fast-math' if fast else 'default'} build reports fast_math={ext.fast_math()}")
        res = {}
        for name in ext.methods():
            res[name] = {}
            for group, (lo, hi, chunks) in groups.items():
                span = -(-(hi - lo) // chunks)
                parts = []
                for c in tqdm(range(chunks), desc=f"{'fast' if fast else 'default'} {name} {group}", disable=quiet):
                    a = lo + c * span
                    a += (-(a - R.FIRST_POSITIVE)) % stride  # the CPU study's grid: 1 + k*stride
                    b = min(hi, lo + (c + 1) * span)
                    if a < b:
                        parts.append(ext.sweep(name, a, b, stride))
                res[name][group] = _merge_gpu(parts)
        builds["use_fast_math" if fast else "default"] = res
    data["builds"] = builds
    # Harness check: the bit trick rounds identically on CPU and GPU (no FMA contraction on either side),
    # so on the same inputs its statistics must agree exactly with the CPU study's.
    if cpu_json.exists():
        cpu = json.loads(cpu_json.read_text())
        same = {}
        if cpu.get("stride") == stride:
            for name in ("quake", "quake_nr1", "walczyk_nr1"):
                gd = builds["default"].get(name)
                cd = cpu["methods"].get(name, {})
                if gd and "normal" in cd:
                    same[name] = all(cd[g][k] == gd[g][k] for g in R.GROUPS
                                     for k in ("count", "exact", "nonfinite", "max_ulp_int", "ulp_hist"))
        data["bit_trick_matches_cpu"] = same
    finish(data["provenance"])
    pv.write_json(out, data)
    return data


def _merge_gpu(parts: list[dict]) -> dict:
    tot = None
    for p in parts:
        if tot is None:
            tot = dict(p)
            continue
        for k in ("count", "exact", "nonfinite", "ambiguous", "corrected", "ties", "sum_abs_rel", "inputs"):
            tot[k] += p[k]
        tot["max_ulp_int"] = max(tot["max_ulp_int"], p["max_ulp_int"])
        for val, where in (("max_ulp", "worst_ulp_x"), ("max_abs_rel", "worst_rel_x")):
            if p[val] > tot[val]:
                tot[val], tot[where] = p[val], p[where]
        tot["min_rel"] = min(tot["min_rel"], p["min_rel"])
        tot["max_rel"] = max(tot["max_rel"], p["max_rel"])
        for h in ("ulp_hist", "rel_hist"):
            tot[h] = [a + b for a, b in zip(tot[h], p[h])]
    tot["worst_ulp_x"] = _fx(tot["worst_ulp_x"])
    tot["worst_rel_x"] = _fx(tot["worst_rel_x"])
    finite = tot["count"] - tot["nonfinite"]
    tot["mean_abs_rel"] = tot.pop("sum_abs_rel") / finite if finite else None
    if not finite:
        tot["min_rel"] = tot["max_rel"] = None
    return tot


def _driver_version() -> str:
    import subprocess

    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m reference_impl.studies.rsqrt", description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", action="store_true", help="run the device sweep (needs a CUDA GPU) instead of the CPU study")
    ap.add_argument("--stride", type=int, default=1, help="sweep every N-th bit pattern (1 = exhaustive)")
    ap.add_argument("--threads", type=int, default=0, help="sweep threads (0 = all cores)")
    ap.add_argument("--quick", action="store_true", help="short timing runs and a small RMSNorm error study")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    ap.add_argument("--out", type=Path, default=None, help="data file (default docs/data/rsqrt_cpu.json or rsqrt_gpu.json)")
    ap.add_argument("--plots", type=Path, default=None,
                    help="folder for the SVG plots (default docs/data/plots, or a folder 'plots' beside --out)")
    ap.add_argument("--plots-only", action="store_true", help="re-render the plots from the existing data file")
    a = ap.parse_args(argv)
    if a.stride < 1:
        ap.error("--stride must be >= 1")
    if a.out is not None:
        pv.check_out(ap, a.out)  # before any work: a missing directory is an argument error
    # a run with --out elsewhere draws its plots beside that file, leaving the committed ones alone
    plots = a.plots or (PLOTS if a.out is None else a.out.parent / "plots")
    if a.gpu:
        if not torch.cuda.is_available():
            print("rsqrt_study --gpu: no CUDA device here (torch.cuda.is_available() is False); nothing written",
                  file=sys.stderr)
            return 2
        d = run_gpu(a.stride, a.quiet, a.out or GPU_JSON)
        print(f"wrote {a.out or GPU_JSON} ({d['device']['name']})")
        return 0
    out = a.out or CPU_JSON
    if a.plots_only:
        for p in render_plots(json.loads(out.read_text()), plots):
            print(f"wrote {p}")
        return 0
    d = run_cpu(a.stride, a.threads, a.quick, a.quiet, out, plots)
    print(f"wrote {out} and plots in {plots} ({d['provenance']['machine']['cpu']}, {d['elapsed_s']} s)")
    if not a.quick and out.resolve() == CPU_JSON.resolve():
        # the timings are this machine's: file the run beside the other machines' (replacing only its own)
        print(f"filed this machine's run as {rsqrt_machines.write(d)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
