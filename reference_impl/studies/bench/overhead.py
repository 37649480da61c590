"""What one call costs before it moves a byte: the fixed cost per call, measured on rows too few to take time.

On a (4, 1024) input (16 KiB in float32), every case's time is its fixed cost: Python, the dispatcher, the
autograd graph, allocations (four rows run on one thread). Cases, interleaved over rounds of ``CALLS`` calls each:

- ``copy``: ``y.copy_(x)`` into a reused buffer, the ceiling's own fixed cost;
- ``native_rms``, ``native_ln``: the native forward and backward ops called directly
  (``torch.ops.normlab.*_fwd`` then ``*_bwd``), no autograd;
- ``fused_rms_norm``, ``fused_layer_norm``, ``F.rms_norm``, ``F.layer_norm``: forward+backward through autograd,
  gradients for x, the gain (and the bias), as the main shapes' forward+backward lines time them;
- ``fused_rms_norm_out``: the forward into a reused buffer (``out=``), as the forward_out lines.

Against a main shape's median step, the fused op's fixed cost gives its share of that step (``fixed_shares``):
the part of the time that no kernel change can remove, largest on the smallest shapes.
"""
from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

from ...ops import library as fused
from .cases import DTYPES, EPS, LN_EPS

ROWS, HIDDEN = 4, 1024
CALLS, ROUNDS = 200, 7
CASES = ("copy", "native_rms", "native_ln", "fused_rms_norm", "fused_layer_norm", "F.rms_norm", "F.layer_norm",
         "fused_rms_norm_out")
STEP_CASES = {"fused_rms_norm": "fused_rms_norm", "fused_layer_norm": "fused_layer_norm"}  # main line -> case


def _cases(dtype: torch.dtype) -> dict:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(ROWS, HIDDEN, generator=g).to(dtype)
    w = (1 + 0.1 * torch.randn(HIDDEN, generator=g)).to(dtype)
    b = (0.1 * torch.randn(HIDDEN, generator=g)).to(dtype)
    dy = torch.randn(ROWS, HIDDEN, generator=g).to(dtype)
    y = torch.empty_like(x)
    xg, wg, bg = (t.detach().clone().requires_grad_(True) for t in (x, w, b))
    ops = torch.ops.normlab

    def native_rms():
        _, _, rstd = ops.rms_norm_fwd(x, w, None, EPS, 0)
        ops.rms_norm_bwd(dy, x, w, rstd, 0)

    def native_ln():
        _, mean, rstd, _ = ops.layer_norm_fwd(x, w, b, LN_EPS)
        ops.layer_norm_bwd(dy, x, w, mean, rstd)

    def step(f, params):
        def run():
            f().backward(dy)
            for p in params:
                p.grad = None
        return run

    def out():
        with torch.no_grad():
            fused.fused_rms_norm(x, w, EPS, out=y)

    return {"copy": lambda: y.copy_(x), "native_rms": native_rms, "native_ln": native_ln,
            "fused_rms_norm": step(lambda: fused.fused_rms_norm(xg, wg, EPS), (xg, wg)),
            "fused_layer_norm": step(lambda: fused.fused_layer_norm(xg, wg, bg, LN_EPS), (xg, wg, bg)),
            "F.rms_norm": step(lambda: F.rms_norm(xg, (HIDDEN,), wg, EPS), (xg, wg)),
            "F.layer_norm": step(lambda: F.layer_norm(xg, (HIDDEN,), wg, bg, LN_EPS), (xg, wg, bg)),
            "fused_rms_norm_out": out}


def measure(quick: bool) -> dict:
    """Per dtype and case: the median, lowest and highest per-call time over the rounds, in microseconds."""
    calls, rounds = (3, 1) if quick else (CALLS, ROUNDS)
    out = {"rows": ROWS, "hidden": HIDDEN, "calls_per_round": calls, "rounds": rounds, "dtypes": {}}
    for dname, dtype in DTYPES.items():
        cases = _cases(dtype)
        per = {n: [] for n in CASES}
        for f in cases.values():  # warm-up: the first calls build caches and autograd state
            for _ in range(3):
                f()
        for r in range(rounds):
            for n in CASES[r % len(CASES):] + CASES[: r % len(CASES)]:
                cases[n]()  # untimed, as every timed block of the benchmark
                t0 = time.perf_counter()
                for _ in range(calls):
                    cases[n]()
                per[n].append((time.perf_counter() - t0) / calls * 1e6)
        out["dtypes"][dname] = {n: {"median_us": statistics.median(v), "min_us": min(v), "max_us": max(v)}
                                for n, v in per.items()}
    return out


def fixed_shares(overhead: dict | None, idx: dict, allocator: str, shapes, dtypes) -> list[dict]:
    """Per dtype, main shape and fused line: the forward+backward step's median time and the share of it that
    the fixed cost per call takes (the fixed cost over the step's median)."""
    if not overhead:
        return []
    rows = []
    for dn in dtypes:
        fixed = overhead["dtypes"].get(dn)
        if fixed is None:
            continue
        for r, d in shapes:
            for line, case in STEP_CASES.items():
                rec = idx.get((allocator, "forward_backward", dn, r, d, line))
                if rec is None or "median_s" not in rec:
                    continue
                us = fixed[case]["median_us"]
                rows.append({"dtype": dn, "shape": f"{r}x{d}", "impl": line, "step_ms": rec["median_s"] * 1e3,
                             "fixed_us": us, "fixed_share": us * 1e-6 / rec["median_s"]})
    return rows


def table(overhead: dict | None) -> str:
    """One row per dtype: each case's median per-call time (lowest-highest round), in microseconds."""
    if not overhead:
        return "| fixed cost per call |\n|---|\n| not measured in this run |"
    head = "| dtype | " + " | ".join(CASES) + " |"
    lines = [head, "|" + "---|" * (len(CASES) + 1)]
    for dn, cases in overhead["dtypes"].items():
        cells = [f"{c['median_us']:.1f} ({c['min_us']:.1f}-{c['max_us']:.1f})" for c in (cases[n] for n in CASES)]
        lines.append(f"| {dn} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def share_table(rows: list[dict]) -> str:
    """Per dtype and shape: the fused forward+backward step and the share of it that is fixed cost."""
    if not rows:
        return "| share of fixed cost |\n|---|\n| not measured in this run |"
    lines = ["| dtype | rows x d | line | step, median (ms) | fixed cost per call (us) | share of the step |",
             "|---|---|---|---|---|---|"]
    for e in rows:
        lines.append(f"| {e['dtype']} | {e['shape']} | {e['impl']} | {e['step_ms']:.3f} | {e['fixed_us']:.1f} | "
                     f"{e['fixed_share']:.1%} |")
    return "\n".join(lines)
