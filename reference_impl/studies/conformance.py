"""Which implementation reproduces which checkpoint: ``python -m reference_impl.studies.conformance``.

Writes ``docs/data/conformance.json`` and ``docs/data/plots/conformance.svg`` (and ``-dark.svg``). The same
inputs go through every RMSNorm implementation that runs on this machine
(:mod:`reference_impl.studies.conformance_impls`): bfloat16, float16 and float32; the Llama and the Gemma
casting orders; with and without a residual stream; an odd and an even width. Each output is compared with
the checkpoint family's own module (``LlamaRMSNorm`` or ``GemmaRMSNorm`` from the installed transformers,
after ``h = x + r`` in x's dtype): bit-identical or not, the fraction of elements that differ, the largest
distance in units in the last place (counted exactly, as the number of representable values between two
outputs), and the largest error against the float64 oracle of the exact sum ``x + r``, in ulps of the output
dtype. The decoding part (:mod:`reference_impl.studies.conformance_decode`) shows what those bits do to
greedy tokens of a small random Llama.

This is not a timing study: every number is a deterministic function of the fixed seeds, the installed
packages and this CPU's kernels. The Triton rows need ``TRITON_INTERPRET=1`` before ``triton`` is imported,
so this module sets it when it is run as a command.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

from .. import oracle
from ..check import kit
from ..check.matching import Probe, ordered_bits, ulp_distance  # noqa: F401 (one definition, re-exported)
from ..check.models import Target
from ..provenance import REPO, check_out, finish, python_closure, record, write_json
from . import conformance_impls as ci
from .numerics import ulp

OUT = REPO / "docs" / "data" / "conformance.json"
PLOTS = REPO / "docs" / "data" / "plots"
COMMAND = "python -m reference_impl.studies.conformance"
SOURCES = python_closure("reference_impl/studies/conformance.py", "reference_impl/studies/conformance_decode.py",
                         "reference_impl/studies/conformance_liger.py") + sorted(
    p.relative_to(REPO).as_posix() for p in (REPO / "cuda" / "cpu").glob("*") if p.suffix in (".h", ".cpp"))
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
CONVENTIONS = ("llama", "gemma")
WIDTHS = (4095, 4096)
ROWS = 96
EPS = 1e-6
SEED = 23


# ------------------------------------------------------------------------------------------ metrics

def compare(got: torch.Tensor, ref: torch.Tensor, exact: np.ndarray) -> dict:
    """Bits of ``got`` against ``ref`` (the family's module) and its error against the float64 ``exact``:
    the kit's comparison (:func:`reference_impl.check.compare`), so a row here is what the kit reports."""
    return kit.compare(got, ref, exact)


def target(convention: str) -> Target:
    """The checkpoint family a column is compared with, as the kit names it: LlamaRMSNorm for the Llama
    casting order, GemmaRMSNorm (the stored weight an offset, the gain 1 + w) for Gemma's."""
    folder, cls = ("llama", "LlamaRMSNorm") if convention == "llama" else ("gemma", "GemmaRMSNorm")
    return Target(name=folder, entry=f"rms_norm.{convention}", kind="rms", convention=convention, eps=EPS,
                  gain="w" if convention == "llama" else "1+w", module=f"transformers.models.{folder}.modeling_{folder}",
                  norm_class=cls, source="the conformance study's two families")


# ------------------------------------------------------------------------------------------ inputs

def case_list(widths=WIDTHS) -> list[dict]:
    return [{"id": f"{dn}-{conv}-{'res' if res else 'nores'}-{d}", "dtype": dn, "convention": conv,
             "residual": res, "d": d}
            for dn in DTYPES for conv in CONVENTIONS for res in (False, True) for d in widths]


def inputs(case: dict, rows: int = ROWS, seed: int = SEED):
    """x ~ N(0, 1); the residual stream r ~ N(0, 4^2) (larger, as deep in a model); the weight: the gain
    1 + N(0, 0.1^2) for Llama, the offset N(0, 0.1^2) for Gemma. Rounded once to the case's dtype."""
    g = torch.Generator().manual_seed(seed + case["d"])
    dt, d = DTYPES[case["dtype"]], case["d"]
    x = torch.randn(rows, d, generator=g, dtype=torch.float64)
    r = 4 * torch.randn(rows, d, generator=g, dtype=torch.float64)
    w = 0.1 * torch.randn(d, generator=g, dtype=torch.float64) + (1.0 if case["convention"] == "llama" else 0.0)
    return x.to(dt), (r.to(dt) if case["residual"] else None), w.to(dt)


def exact_output(x, r, w, convention, eps=EPS) -> np.ndarray:
    """float64 oracle of the math: the exact sum x + r, normalized, times the gain (1 + w for Gemma)."""
    s = x.double().numpy() + (0.0 if r is None else r.double().numpy())
    gain = w.double().numpy() + (1.0 if convention == "gemma" else 0.0)
    return oracle.rms_norm_forward_placed(s, gain, eps)


# ------------------------------------------------------------------------------------------ measuring

def measure_case(case: dict, impls, rows: int = ROWS) -> dict:
    x, r, w = inputs(case, rows)
    conv = case["convention"]
    fam = target(conv)
    # the truth as the kit computes it: the family's module on h = x + r rounded to x's dtype
    ref_y, ref_h, _ = kit.truth(fam, Probe(x, w, None, EPS, case["id"], fam.gain, r), residual=r is not None)
    exact = exact_output(x, r, w, conv)
    entry = dict(case)
    entry["reference"] = {"module": fam.norm_class,
                          "max_ulp_vs_oracle": compare(ref_y, ref_y, exact)["max_ulp_vs_oracle"]}
    results = {}
    for impl in impls:
        if conv not in impl.conventions:
            continue
        try:
            y, h = impl.run(x, w, r, EPS, conv)
        except ci.Unavailable as exc:
            results[impl.key] = {"unavailable": str(exc)}
            continue
        res = compare(y, ref_y, exact)
        if r is not None:
            if h is None:
                raise RuntimeError(f"{impl.key} returned no residual stream for {case['id']}")
            res["residual_identical"] = bool(torch.equal(h, ref_h))
        results[impl.key] = res
    entry["results"] = results
    return entry


def summarize(impls, cases: list[dict]) -> list[dict]:
    rows = []
    for impl in impls:
        got = [c["results"][impl.key] for c in cases if impl.key in c["results"]]
        ok = [g for g in got if "unavailable" not in g]
        reasons = sorted({g["unavailable"] for g in got if "unavailable" in g})
        row = {"key": impl.key, "label": impl.label, "engine": impl.engine, "where": impl.where,
               "source": impl.source, "conventions": "/".join(impl.conventions),
               "cases": len(got), "measured": len(ok), "identical": sum(g["identical"] for g in ok),
               "max_fraction_different": max((g["fraction_different"] for g in ok), default=None),
               "max_ulp": max((g["max_ulp"] for g in ok), default=None),
               "max_ulp_vs_oracle": max((g["max_ulp_vs_oracle"] for g in ok), default=None),
               "residual_identical": all(g.get("residual_identical", True) for g in ok) if ok else None,
               "unavailable": reasons}
        row["verdict"] = verdict(row)
        rows.append(row)
    return rows


def verdict(row: dict) -> str:
    """The verdict of an implementation's row in words, from its counts: cases not run are said to be not
    run (never folded into "of N"), so the verdict and the row's ``unavailable`` reasons cannot disagree."""
    cases, measured, same = row["cases"], row["measured"], row["identical"]
    if not measured:
        return "not run here"
    unrun = f"; {cases - measured} of {cases} not run" if measured < cases else ""
    if same == measured:
        return ("bit-identical" if not unrun else f"bit-identical in the {measured} cases run") + unrun
    return f"differs in {measured - same} of {measured} cases run" + unrun if unrun else \
        f"differs in {measured - same} of {measured} cases"


def by_dtype(impls, cases: list[dict]) -> dict:
    """impl -> 'dtype convention' -> the largest fraction of differing elements (None: not run)."""
    out = {}
    for impl in impls:
        cells = {}
        for dn in DTYPES:
            for conv in CONVENTIONS:
                got = [c["results"].get(impl.key) for c in cases if c["dtype"] == dn and c["convention"] == conv]
                ok = [g for g in got if g is not None and "unavailable" not in g]
                cells[f"{dn} {conv}"] = max((g["fraction_different"] for g in ok), default=None)
        out[impl.key] = cells
    return out


def measure(quick: bool = False, progress: bool = True) -> dict:
    from tqdm import tqdm

    from . import conformance_decode as cd

    torch.manual_seed(0)
    impls = ci.implementations()
    widths = (255, 256) if quick else WIDTHS
    rows = 8 if quick else ROWS
    cases = [measure_case(c, impls, rows) for c in tqdm(case_list(widths), desc="conformance", disable=not progress)]
    summary = summarize(impls, cases)
    engines = sorted({s["key"] for s in summary if s["measured"]})
    return {
        "settings": {"rows": rows, "widths": list(widths), "eps": EPS, "seed": SEED, "dtypes": list(DTYPES),
                     "conventions": list(CONVENTIONS),
                     "inputs": "x ~ N(0,1), residual ~ N(0,16), Llama gain 1 + N(0,0.01), Gemma offset N(0,0.01)"},
        "implementations": summary,
        "by_key": {row["key"]: row for row in summary},
        "measured_here": len(engines),
        "grid": by_dtype(impls, cases),
        "cases": cases,
        "decoding": cd.decode_all(quick=quick, progress=progress),
    }


# ------------------------------------------------------------------------------------------ plot

SHORT = {"conventions": "conventions.py", "torch_module": "nn.RMSNorm", "torch_functional_f32": "F.rms_norm f32 w",
         "torch_compile": "torch.compile", "ort_rms_normalization": "ORT RMSNorm", "ort_simplified": "ORT Simplified",
         "ort_skip_simplified": "ORT SkipSimpl.", "fused_hf": "fused op hf", "fused_fp32": "fused op fp32",
         "triton_hf": "Triton hf", "triton_fp32": "Triton fp32", "liger": "Liger-Kernel"}


def plot(data: dict, out_dir: Path = PLOTS) -> list[str]:
    """A grid: one row per implementation (the transformers modules as one row when they agree), one column
    per dtype and casting order; a cell gives the largest share of elements whose bits differ."""
    from . import diagrams as D

    grid = data["grid"]
    hf = [k for k in grid if k.startswith("hf_")]
    same = [k for k in hf if all(v in (0, None) for v in grid[k].values())]  # bit-identical modules: one row
    rows = [(f"HF modules ({len(same)})", _merge([grid[k] for k in same]))] + \
        [(f"HF {k[3:]}", grid[k]) for k in hf if k not in same] + \
        [(SHORT.get(k, k), v) for k, v in grid.items() if not k.startswith("hf_")]
    cols = [f"{dn} {conv}" for dn in DTYPES for conv in CONVENTIONS]
    lw, cw, rh, top = 300, 90, 44, 120
    w, h = lw + cw * len(cols) + 10, top + rh * len(rows) + 70
    written = []
    for t in D.THEMES:
        s = D.Svg(w, h, "Conformance: share of output elements whose bits differ from the family's module",
                  "One row per RMSNorm implementation, one column per dtype and casting order; a cell shows the "
                  "largest share of elements that differ from LlamaRMSNorm or GemmaRMSNorm, = where every bit "
                  "matches, n/a where the implementation did not run.", t)
        f = s.min_font
        for j, c in enumerate(cols):
            dn, conv = c.split()
            x = lw + cw * j + cw / 2
            if j % 2 == 0:  # the dtype over its two casting orders
                s.text(x + cw / 2, top - 62, {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}[dn], t.fg, f,
                       "middle", weight="bold")
                s.line(x - cw / 2 + 6, top - 50, x + cw * 1.5 - 6, top - 50, t.muted, 1.5)
            s.text(x, top - 16, conv, t.muted, f, "middle")
        for i, (label, cells) in enumerate(rows):
            y = top + rh * i
            s.text(lw - 12, y + rh / 2 + f * 0.35, label, t.fg, f, "end")
            for j, c in enumerate(cols):
                v = cells.get(c)
                x = lw + cw * j
                if v is None:
                    s.rect(x + 3, y + 3, cw - 6, rh - 6, t.tint, 1.0, fill=t.tint, fill_opacity=0.12, rx=3)
                    s.text(x + cw / 2, y + rh / 2 + f * 0.35, "n/a", t.muted, f, "middle")
                elif v == 0:
                    s.rect(x + 3, y + 3, cw - 6, rh - 6, t.good, 1.5, fill=t.good, fill_opacity=0.25, rx=3)
                    s.text(x + cw / 2, y + rh / 2 + f * 0.35, "=", t.fg, f, "middle", weight="bold")
                else:
                    s.rect(x + 3, y + 3, cw - 6, rh - 6, t.bad, 1.5, fill=t.bad, fill_opacity=0.15 + 0.6 * v, rx=3)
                    s.text(x + cw / 2, y + rh / 2 + f * 0.35, _pct(v), t.fg, f, "middle")
        s.text(10, h - 22, "= all bits equal   n/a not run here", t.muted, f)
        name = f"conformance{t.suffix}.svg"
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / name).write_text(s.render(), encoding="utf-8")
        written.append(name)
    return written


def _merge(cell_dicts: list[dict]) -> dict:
    out = {}
    for cells in cell_dicts:
        for k, v in cells.items():
            if v is not None:
                out[k] = max(out.get(k) or 0.0, v)
            else:
                out.setdefault(k, None)
    return out


def _pct(v: float) -> str:
    return f"{100 * v:.0f}%" if v >= 0.01 else "<1%"


# ------------------------------------------------------------------------------------------ command

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--plots", type=Path, default=None,
                    help="folder for the SVG plots (default: the site's, or --out's folder when --out is given)")
    ap.add_argument("--quick", action="store_true", help="small widths and few rows (a smoke test); not for the site")
    ap.add_argument("--plot-only", action="store_true", help="redraw the plots from the data file")
    args = ap.parse_args(argv)
    check_out(ap, args.out)
    args.plots = args.plots or (PLOTS if args.out.resolve() == OUT.resolve() else args.out.parent)
    warnings.filterwarnings("ignore")
    if args.plot_only:
        print(plot(json.loads(args.out.read_text()), args.plots))
        return 0
    prov = record(COMMAND, SOURCES, quick=args.quick,
                  packages=("torch", "numpy", "transformers", "onnxruntime", "onnx", "triton", "liger-kernel"))
    data = {"provenance": prov, **measure(args.quick)}
    finish(prov)
    data["plots"] = [f"conformance{t}.svg" for t in ("", "-dark")]
    write_json(args.out, data)
    if plot(data, args.plots) != data["plots"]:
        raise RuntimeError("the plot names changed: update main()")
    print(f"wrote {args.out} ({data['measured_here']} implementations measured) and {data['plots']}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TRITON_INTERPRET", "1")
    if "triton" in sys.modules and not os.environ.get("TRITON_INTERPRET") == "1":
        raise SystemExit("triton was imported before TRITON_INTERPRET=1 could be set")
    raise SystemExit(main())
