"""Run one (engine path, model type) through the kit, and measure what the kit does not: the histogram of
ulp distances on a wide input, batch invariance and determinism, and the trainer x server agreement.

All figures are deterministic functions of the seeds, the released code and this CPU's torch kernels.
"""
from __future__ import annotations

import torch

from ...check import check_norm, kit, resolve
from ...check import matching as M

#: ulp-distance buckets of the histogram: [lo, hi] inclusive
BUCKETS = ((0, 0), (1, 1), (2, 2), (3, 4), (5, 16), (17, None))
HIST_WIDTH, HIST_ROWS = 4096, 32
BATCH_WIDTH, BATCH_ROWS = 1024, 12
DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


def bucket_names() -> list[str]:
    return [f"{lo}" if lo == hi else (f"{lo}-{hi}" if hi is not None else f">={lo}") for lo, hi in BUCKETS]


def histogram(dist: torch.Tensor) -> list[int]:
    d = dist.reshape(-1).to(torch.int64)
    return [int(((d >= lo) & (d <= (hi if hi is not None else torch.iinfo(torch.int64).max))).sum())
            for lo, hi in BUCKETS]


def _weight_dtypes(dt):
    return [dt, torch.float32] if dt in (torch.bfloat16, torch.float16) else [dt]


def _wide_probe(target, dt, wdt, residual, seed=5, rows=HIST_ROWS, width=HIST_WIDTH):
    return M.make_probes([width], [dt], [wdt], gain=target.gain, bias=target.bias, eps=target.eps, scales=(1.0,),
                         seed=seed, rows=rows, residual=residual)[0]


def _y(out, residual):
    return out[0] if residual else out


def per_dtype(report) -> list[dict]:
    """The kit's cases grouped by (x dtype, gain dtype): all identical, largest share and ulp that differ."""
    groups: dict = {}
    for r in report.results:
        if r.not_applicable:
            continue
        groups.setdefault((r.dtype, r.weight_dtype), []).append(r)
    out = []
    for (dt, wdt), rs in groups.items():
        problems = sorted({r.problem for r in rs if r.problem})
        compared = [r for r in rs if r.identical is not None]
        out.append({"dtype": dt, "weight_dtype": wdt, "cases": len(rs),
                    "identical": bool(compared) and all(r.identical for r in compared) and not problems,
                    "fraction_different": max((r.fraction_different or 0.0) for r in compared) if compared else None,
                    "max_ulp": max((r.max_ulp or 0) for r in compared) if compared else None,
                    "problem": problems[0] if problems else None})
    return out


def run_kit(fn, model_type: str, dtypes, residual: bool, weight_dtypes=None, widths=kit.WIDTHS) -> dict:
    """The kit's verdict and diagnosis for one row (forward only: the servers' paths run no backward).
    ``weight_dtypes``: None for the kit's default (x's own dtype and float32)."""
    rep = check_norm(fn, model=model_type, dtypes=dtypes, weight_dtypes=weight_dtypes, grads=False, residual=residual,
                     widths=widths, raise_on_failure=False)
    groups = per_dtype(rep)
    identical = all(g["identical"] for g in groups)
    problem = next((g["problem"] for g in groups if g["problem"]), None)
    return {"verdict": "identical" if identical else "differs",
            "cases": sum(g["cases"] for g in groups), "by_dtype": groups,
            "matched": None if rep.match is None else rep.match.matched,
            "all_matched": [] if rep.match is None else list(rep.match.all_matched),
            "diagnosis": rep.diagnosis or (problem or ""),
            "truth": rep.truth, "problem": problem}


def wide_histograms(fn, model_type: str, dtypes, residual: bool) -> list[dict]:
    """ulp distance to the model's module on a (32, 4096) input per (x dtype, gain dtype), bucketed."""
    target = resolve(model_type)
    out = []
    for dt in dtypes:
        for wdt in _weight_dtypes(dt):
            p = _wide_probe(target, dt, wdt, residual)
            ref, _, _ = kit.truth(target, p, residual)
            with torch.no_grad():
                got = _y(kit.call(fn, p, target, residual), residual)
            if got.dtype != ref.dtype or got.shape != ref.shape:
                out.append({"dtype": DTYPE_NAMES[dt], "weight_dtype": DTYPE_NAMES[wdt], "histogram": None,
                            "note": f"returned {got.dtype} {tuple(got.shape)}"})
                continue
            out.append({"dtype": DTYPE_NAMES[dt], "weight_dtype": DTYPE_NAMES[wdt],
                        "histogram": histogram(M.ulp_distance(got, ref))})
    return out


def batch_invariance(fn, model_type: str, dtype, residual: bool) -> dict:
    """Each row alone, inside batches of other sizes at other positions, and next to zero padding rows,
    against the same row in one full batch: bit for bit. Two calls on the full batch: determinism."""
    target = resolve(model_type)
    wdt = dtype
    p = _wide_probe(target, dtype, wdt, residual, seed=9, rows=BATCH_ROWS, width=BATCH_WIDTH)

    def run(idx, pad=0):
        x = p.x[idx]
        r = None if p.residual is None else p.residual[idx]
        if pad:
            x = torch.cat([x, torch.zeros(pad, x.shape[1], dtype=x.dtype)])
            r = None if r is None else torch.cat([r, torch.zeros(pad, r.shape[1], dtype=r.dtype)])
        q = M.Probe(x, p.weight, p.bias, p.eps, "batch", p.gain, r, 1.0)
        with torch.no_grad():
            return _y(kit.call(fn, q, target, residual), residual)[: len(idx)]

    full = run(list(range(BATCH_ROWS)))
    again = run(list(range(BATCH_ROWS)))
    checks = {"alone": [[i] for i in range(BATCH_ROWS)],
              "other batch sizes and positions": [list(range(s, s + n)) for n in (3, 5, 7) for s in (0, BATCH_ROWS - n)],
              "reversed order": [list(range(BATCH_ROWS))[::-1]]}
    differing = {}
    for name, sets in checks.items():
        bad = 0
        for idx in sets:
            bad += int((M.ulp_distance(run(idx), full[idx]) > 0).any(dim=-1).sum())
        differing[name] = bad
    padded = run(list(range(BATCH_ROWS)), pad=5)
    differing["with padding rows"] = int((M.ulp_distance(padded, full) > 0).any(dim=-1).sum())
    return {"dtype": DTYPE_NAMES[dtype], "width": BATCH_WIDTH, "rows": BATCH_ROWS,
            "rows_differing": differing, "batch_invariant": not any(differing.values()),
            "deterministic": bool((M.ulp_distance(full, again) == 0).all())}


def agreement(fn_a, fn_b, model_type: str, dtypes) -> list[dict]:
    """Two paths on the wide input of :func:`wide_histograms`: identical or not, per (x dtype, gain dtype)."""
    target = resolve(model_type)
    out = []
    for dt in dtypes:
        for wdt in _weight_dtypes(dt):
            p = _wide_probe(target, dt, wdt, False)  # the histograms' input: the two measurements must agree
            with torch.no_grad():
                a, b = kit.call(fn_a, p, target), kit.call(fn_b, p, target)
            if a.dtype != b.dtype:
                out.append({"dtype": DTYPE_NAMES[dt], "weight_dtype": DTYPE_NAMES[wdt], "identical": False,
                            "max_ulp": None, "note": f"dtypes differ: {a.dtype} and {b.dtype}"})
                continue
            d = M.ulp_distance(a, b)
            out.append({"dtype": DTYPE_NAMES[dt], "weight_dtype": DTYPE_NAMES[wdt], "identical": bool((d == 0).all()),
                        "max_ulp": int(d.max())})
    return out
