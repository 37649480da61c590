"""The timed loop of the GPU benchmark: interleaved repetitions, summaries, the sources that change the
numbers, the plan of a run."""
from __future__ import annotations

import statistics
import torch
from .cases import MAX_CALLS, MIN_CALLS, MODES, REPS, TIME_PER_REP_S, _first, available


# ------------------------------------------------------------------------------------------------------
# timing
# ------------------------------------------------------------------------------------------------------

def _call(fn, s, mode):
    if mode == "forward_backward":
        for t in (s["x"], s["w"], s["b"]):
            t.grad = None
        _first(fn(s)).backward(s["dy"])
    else:
        with torch.no_grad():
            fn(s)


def _warm(fn, sets, mode) -> int:
    """Warm-up (and compilation) calls; returns how many calls one repetition times."""
    for i in range(3):
        _call(fn, sets[i % len(sets)], mode)
    torch.cuda.synchronize()
    a, z = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    _call(fn, sets[0], mode)
    z.record()
    torch.cuda.synchronize()
    est = max(a.elapsed_time(z), 1e-3)
    return int(min(MAX_CALLS, max(MIN_CALLS, TIME_PER_REP_S * 1e3 / est)))


def _rep(fn, sets, mode, calls: int, start: int = 0) -> float:
    """One repetition: median milliseconds of ``calls`` calls, CUDA events around each."""
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
    for i, (a, z) in enumerate(events):
        a.record()
        _call(fn, sets[(start + i) % len(sets)], mode)
        z.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(z) for a, z in events)


def time_interleaved(fns: dict, sets, mode, reps: int = REPS) -> dict:
    """{name: {"reps_ms": [...], "calls": n}}: every implementation warmed up, then ``reps`` rounds that
    each time every implementation once, in an order rotated by one each round."""
    calls = {name: _warm(fn, sets, mode) for name, fn in fns.items()}
    out = {name: {"reps_ms": [], "calls": calls[name]} for name in fns}
    names = list(fns)
    for rep in range(reps):
        order = names[rep % len(names):] + names[:rep % len(names)]
        for name in order:
            out[name]["reps_ms"].append(_rep(fns[name], sets, mode, calls[name], start=rep))
    return out


def summarize_reps(reps_ms: list[float], nbytes: int) -> dict:
    ms = statistics.median(reps_ms)
    return {"ms": round(ms, 5), "ms_min": round(min(reps_ms), 5), "ms_max": round(max(reps_ms), 5),
            "reps_ms": [round(v, 5) for v in reps_ms], "bytes": nbytes,
            "gbps": round(nbytes / ms / 1e6, 1), "gbps_min": round(nbytes / max(reps_ms) / 1e6, 1),
            "gbps_max": round(nbytes / min(reps_ms) / 1e6, 1)}


def add_frac_copy(entry: dict, copy: dict, paired: bool) -> None:
    """frac_copy = GB/s over the copy's GB/s; paired: repetition by repetition (same rounds), else the
    copy's median. Adds the median and min/max over the repetitions."""
    if paired and len(copy["reps_ms"]) == len(entry["reps_ms"]):
        fr = [(entry["bytes"] / e) / (copy["bytes"] / c) for e, c in zip(entry["reps_ms"], copy["reps_ms"])]
    else:
        fr = [(entry["bytes"] / e) / (copy["bytes"] / copy["ms"]) for e in entry["reps_ms"]]
    entry["frac_copy"] = round(statistics.median(fr), 4)
    entry["frac_copy_min"] = round(min(fr), 4)
    entry["frac_copy_max"] = round(max(fr), 4)


# ------------------------------------------------------------------------------------------------------
# the run
# ------------------------------------------------------------------------------------------------------

def sources() -> list[str]:
    """What changes the numbers: the CUDA kernels (comments stripped), the op schemas, the Python entry
    points of the timed ops, the Triton kernels, the implementations and the timed loop (not the reference,
    the conventions or the argument checks)."""
    from .. import cuda_resources as cuda_build_report

    kernels = [s for s in cuda_build_report.sources() if s.startswith("cuda/")]
    return kernels + ["cuda/op_checks.h", "cuda/ops.cpp", "cuda/ops.h", "reference_impl/ops/build.py",
                      "reference_impl/ops/library.py", "reference_impl/ops/autograd.py", "reference_impl/ops/cuda.py",
                      "reference_impl/ops/triton_norm.py", "reference_impl/studies/bench_gpu/cases.py",
                      "reference_impl/studies/bench_gpu/measure.py"]


def plan(shapes, dtypes) -> list[tuple]:
    """The (dtype name, rows, d, mode, implementations) groups, in run order."""
    return [(dn, rows, d, mode, tuple(i for i in impls if available(i)))
            for dn in dtypes for (rows, d) in shapes for mode, impls in MODES]


def triton_settings(shapes) -> dict:
    """The Triton kernels' launch settings per hidden size (tile, chunked or not, warps)."""
    from ...ops import triton_norm as tn

    out = {}
    for _, d in shapes:
        block, single, fw, bw = tn._settings(d, None)
        out[str(d)] = {"block": block, "single_tile": single, "forward_warps": fw, "backward_warps": bw}
    return out
