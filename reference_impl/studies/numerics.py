"""Numerics of the conventions, measured: ``python -m reference_impl.studies.numerics``.

Writes ``docs/data/numerics.json`` and SVG plots under ``docs/data/plots/`` in one run:

- ``adoption``: family -> norm class -> convention -> eps default, read from the installed transformers;
- ``casting``: how far the casting orders land apart in bfloat16 and float16 (ulp histograms) and from
  the float64 oracle;
- ``fp16_overflow``: float16 statistics vs float32 statistics as the RMS of the input grows past 256;
- ``accumulation``: relative error of the mean square vs hidden size, accumulated sequentially in
  float16, bfloat16, float32, and by torch's float32 reduction, with the first-order bounds;
- ``eps_placement``: the relative gap between eps inside and outside the root for small-RMS inputs;
- ``neox_kernel``: torch's fused LayerNorm kernel vs a two-pass formula (why neox calls the kernel).

Every number on the Numerics page comes from this file; its ``provenance`` block
(:mod:`reference_impl.provenance`) records the machine, versions, date and a hash of the sources that produced
it. The quantities are deterministic (fixed seeds) up to the last bits of float32 reductions, whose order can
depend on the CPU's vector width; ``tests/studies/test_data_files.py`` re-runs the study and compares.
"""
from __future__ import annotations

import argparse
import importlib
import math
import warnings
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from ..norms.rms_norm import convention_rms_norm
from .. import families as fam
from .. import oracle
from .. import tolerances as tol
from ..provenance import check_out, finish, python_closure, record, write_json

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "docs" / "data" / "numerics.json"
PLOTS = REPO / "docs" / "data" / "plots"
COMMAND = "python -m reference_impl.studies.numerics"
# the sources whose change invalidates the data file (tests/studies/test_data_files.py checks the hash)
SOURCES = python_closure("reference_impl/studies/numerics.py")
HALF = {"bfloat16": torch.bfloat16, "float16": torch.float16}


# ------------------------------------------------------------------------------------------ adoption

def adoption() -> dict:
    out = {}
    for family, folder, cls, conv, cfg, attr, layer in fam.FAMILIES:
        config = getattr(importlib.import_module(f"transformers.models.{folder}.configuration_{folder}"), cfg)()
        out[fam.family_key(family)] = {
            "family": family, "norm_class": cls, "convention": conv, "eps": float(getattr(config, attr)),
            "eps_attribute": attr, "config_class": cfg, "layer_class": layer,
            "source": f"transformers/models/{folder}/modeling_{folder}.py",
        }
    return out


# ------------------------------------------------------------------------------------------ ulps

def ulp(v: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """Spacing of ``dtype`` at |v| (float64 array): 2**(floor(log2|v|) - mantissa bits), subnormal floor."""
    fi = torch.finfo(dtype)
    bits = {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23}[dtype]
    a = np.maximum(np.abs(v), fi.tiny)
    return np.exp2(np.floor(np.log2(a)) - bits)


def casting(rows: int, d: int, seed: int) -> dict:
    """Same inputs and gains through each distinct casting order; differences in ulps of the output dtype."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, dt in HALF.items():
        x = torch.randn(rows, d, generator=g, dtype=torch.float64).mul(2).to(dt)
        w = (1 + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)).to(dt)
        orders = {
            "cast once (reference, torch, olmo2)": convention_rms_norm(x, w, 1e-6, convention="reference"),
            "cast, then gain (llama, t5)": convention_rms_norm(x, w, 1e-6, convention="llama"),
        }
        exact = oracle.rms_norm_forward_placed(x.double().numpy(), w.double().numpy(), 1e-6)
        u = ulp(exact, dt)
        a = orders["cast, then gain (llama, t5)"].double().numpy()
        b = orders["cast once (reference, torch, olmo2)"].double().numpy()
        diff = np.abs(a - b) / u
        hist = {str(k): int(np.sum(np.round(diff) == k)) for k in range(0, 4)}
        entry = {
            "rows": rows, "d": d, "elements": int(a.size),
            "fraction_different": float(np.mean(a != b)),
            "max_ulp_between": float(diff.max()), "mean_ulp_between": float(diff.mean()),
            "histogram_ulp_between": hist,
            "max_ulp_vs_oracle": {k: float((np.abs(v.double().numpy() - exact) / u).max()) for k, v in orders.items()},
            "mean_ulp_vs_oracle": {k: float((np.abs(v.double().numpy() - exact) / u).mean()) for k, v in orders.items()},
        }
        # Gemma's gain: the stored value is w - 1, so 1 + w is formed in float32. For gains near 1 this keeps
        # more bits of the gain than storing it directly in the half dtype.
        target = (1 + 0.01 * torch.randn(d, generator=g, dtype=torch.float64))
        direct = target.to(dt).double()
        offset = 1 + (target - 1).to(dt).double()
        entry["gain_near_one"] = {
            "spread": 0.01,
            "max_abs_error_direct": float((direct - target).abs().max()),
            "max_abs_error_offset": float((offset - target).abs().max()),
        }
        out[name] = entry
    return out


# ------------------------------------------------------------------------------------------ fp16 overflow

def fp16_overflow(d: int, seed: int) -> dict:
    """Rows of RMS ``a``: statistics in float16 (x*x in float16) vs in float32 (every convention)."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(8, d, generator=g, dtype=torch.float64)
    base = base / base.pow(2).mean(-1, keepdim=True).sqrt()
    levels = [1.0, 16.0, 64.0, 128.0, 200.0, 255.0, 256.0, 300.0, 1000.0, 4096.0]
    threshold = math.sqrt(torch.finfo(torch.float16).max)
    rows = []
    for a in levels:
        x = (base * a).to(torch.float16)
        exact = oracle.rms_norm_forward_placed(x.double().numpy(), None, 1e-6)
        half_stats = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)).double().numpy()
        fp32_stats = convention_rms_norm(x, None, 1e-6, convention="llama").double().numpy()
        sq_inf = float(torch.isinf(x.pow(2)).float().mean())
        rows.append({
            "rms": a, "fraction_of_squares_inf": sq_inf,
            "max_rel_error_fp16_stats": _max_rel(half_stats, exact),
            "max_rel_error_fp32_stats": _max_rel(fp32_stats, exact),
        })
    return {"d": d, "overflow_threshold": threshold, "float16_max": float(torch.finfo(torch.float16).max), "rows": rows}


def _max_rel(a, e):
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.abs(a - e) / np.abs(e)
    r = np.where(np.isnan(r), np.inf, r)
    return float(r.max()) if np.isfinite(r.max()) else "inf"


# ------------------------------------------------------------------------------------------ accumulation

def accumulation(max_log2: int, rows: int, seed: int) -> dict:
    """Relative error of mean(x**2) (N(0,1) entries) when the sum is accumulated in various precisions."""
    d_max = 2 ** max_log2
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, d_max, generator=g, dtype=torch.float64)
    sizes = [2 ** k for k in range(6, max_log2 + 1)]
    out = {"rows": rows, "sizes": sizes, "series": {}, "bounds": {}}
    # sequential accumulation in each dtype (every partial sum rounded), squares formed in that dtype
    for name, dt in (("float16", torch.float16), ("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        xs = x.to(dt)
        sq = xs * xs
        acc = torch.zeros(rows, dtype=dt)
        errs = {}
        exact_d = np.cumsum((xs.double() ** 2).numpy(), axis=1)
        targets = set(sizes)
        for j in tqdm(range(d_max), desc=f"sequential {name}", leave=False, mininterval=1.0):
            acc = acc + sq[:, j]
            if j + 1 in targets:
                e = exact_d[:, j]
                with np.errstate(invalid="ignore"):
                    rel = np.abs(acc.double().numpy() - e) / e
                rel = np.where(np.isfinite(rel), rel, np.inf)
                errs[j + 1] = float(np.max(rel))
        out["series"][f"sequential {name}"] = [errs[s] if np.isfinite(errs[s]) else "inf" for s in sizes]
        u = tol.unit_roundoff(dt)
        out["bounds"][name] = [(tol.gamma(s, u) if s * u < 1 else "none") for s in sizes]
    # what torch does: upcast to float32 and reduce with its own (blocked) order
    for name, dt in (("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        xs = x.to(dt)
        errs = []
        for s in sizes:
            got = xs[:, :s].float().pow(2).sum(-1).double().numpy()
            e = np.sum((xs[:, :s].double() ** 2).numpy(), axis=1)
            errs.append(float(np.max(np.abs(got - e) / e)))
        out["series"][f"torch float32 reduction ({name} input)"] = errs
    return out


# ------------------------------------------------------------------------------------------ eps placement

def eps_placement(d: int, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(4, d, generator=g, dtype=torch.float64)
    base = base / base.pow(2).mean(-1, keepdim=True).sqrt()
    rows = []
    for eps in (1e-8, 1e-6, 1e-5):
        for rms in (1.0, 1e-1, 1e-2, 1e-3, 1e-4, 1e-6):
            x = (base * rms).to(torch.float32)
            inside = convention_rms_norm(x, None, eps, convention="reference").double()
            outside = convention_rms_norm(x, None, eps, convention="reference", eps_placement="outside").double()
            measured = float(((inside - outside).abs().max() / inside.abs().max()).item())
            out_rms = float(inside.pow(2).mean(-1).sqrt().mean())
            rows.append({"eps": eps, "rms": rms, "relative_gap": measured,
                         "closed_form": abs(math.sqrt(rms * rms + eps) / (rms + eps) - 1),
                         "output_rms_inside": out_rms,
                         "output_rms_outside": float(outside.pow(2).mean(-1).sqrt().mean())})
    return {"d": d, "rows": rows}


# ------------------------------------------------------------------------------------------ neox kernel

def neox_kernel(seed: int) -> dict:
    """torch's fused LayerNorm kernel vs a two-pass float32 formula: not the same bits, both within the
    policy bound (``tolerances.ln_forward_bound``) of the float64 oracle."""

    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, dt in (("float32", torch.float32), ("bfloat16", torch.bfloat16), ("float16", torch.float16)):
        x = (torch.randn(64, 2048, generator=g) * 2 + 3).to(dt)
        w = (1 + 0.5 * torch.randn(2048, generator=g)).to(dt)
        b = (0.3 * torch.randn(2048, generator=g)).to(dt)
        kernel = torch.nn.functional.layer_norm(x, (2048,), w, b, 1e-5)
        xf = x.float()
        xc = xf - xf.mean(-1, keepdim=True)
        two_pass = (xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + 1e-5) * w.float() + b.float()).to(dt)
        exact = oracle.layer_norm_forward(x.double().numpy(), w.double().numpy(), b.double().numpy(), 1e-5)
        bound = tol.ln_forward_bound(x, w, b, 1e-5, dt)
        out[name] = {
            "fraction_different": float((kernel != two_pass).float().mean()),
            "max_abs_difference": float((kernel.double() - two_pass.double()).abs().max()),
            "max_error_over_bound_kernel": float((np.abs(kernel.double().numpy() - exact) / bound).max()),
            "max_error_over_bound_two_pass": float((np.abs(two_pass.double().numpy() - exact) / bound).max()),
        }
    return out


# ------------------------------------------------------------------------------------------ plots

def plots(data: dict, out_dir: Path = PLOTS) -> list[str]:
    """The three plots of the numerics page, light and dark (see plotstyle)."""
    from reference_impl.studies import plotstyle

    acc, ov, ep = data["accumulation"], data["fp16_overflow"], data["eps_placement"]

    def accumulation(theme):
        fig, axs = plotstyle.figure(5.6)
        ax = axs[0][0]
        for label, ys in acc["series"].items():
            pts = [(s, y) for s, y in zip(acc["sizes"], ys) if y != "inf" and y > 0]
            if pts:
                ax.loglog(*zip(*pts), marker="o", ms=3, label=label)
        for i, (name, ys) in enumerate(acc["bounds"].items()):
            pts = [(s, y) for s, y in zip(acc["sizes"], ys) if y != "none"]
            if pts:
                ax.loglog(*zip(*pts), ls="--", lw=0.8, color=plotstyle.muted(theme),
                          label="bound, sequential sums" if i == 0 else None)
        ax.set_xlabel("hidden size d")
        ax.set_ylabel("max rel. error of sum(x²)")
        ax.grid(True, which="major", lw=0.3)
        fig.legend(loc="outside lower center", ncols=1)
        return fig

    def overflow(theme):
        fig, axs = plotstyle.figure(3.6)
        ax = axs[0][0]
        xs = [r["rms"] for r in ov["rows"]]
        for key, label in (("max_rel_error_fp16_stats", "float16 statistics"),
                           ("max_rel_error_fp32_stats", "float32 statistics")):
            ys = [1.0 if r[key] == "inf" else min(float(r[key]), 1.0) for r in ov["rows"]]
            ax.loglog(xs, ys, marker="o", label=label)
        ax.axvline(ov["overflow_threshold"], color=plotstyle.muted(theme), ls="--", lw=0.8)
        ax.set_xlabel("RMS of the float16 row")
        ax.set_ylabel("max rel. error (capped at 1)")
        ax.grid(True, which="major", lw=0.3)
        fig.legend(loc="outside lower center", ncols=2)
        return fig

    def eps_placement(theme):
        fig, axs = plotstyle.figure(3.8)
        ax = axs[0][0]
        for eps in sorted({r["eps"] for r in ep["rows"]}):
            rs = [r for r in ep["rows"] if r["eps"] == eps]
            line = ax.loglog([r["rms"] for r in rs], [r["closed_form"] for r in rs], label=f"eps = {eps:g}")[0]
            measured = [(r["rms"], r["relative_gap"]) for r in rs if r["relative_gap"] > 0]
            ax.loglog(*zip(*measured), ls="none", marker="o", color=line.get_color())
        ax.plot([], [], ls="none", marker="o", color=plotstyle.muted(theme), label="measured")
        ax.set_xlabel("RMS of the row")
        ax.set_ylabel("relative gap")
        ax.grid(True, which="major", lw=0.3)
        fig.legend(loc="outside lower center", ncols=2)
        return fig

    written = []
    for draw, name in ((accumulation, "numerics_accumulation"), (overflow, "numerics_fp16_overflow"),
                       (eps_placement, "numerics_eps_placement")):
        written += plotstyle.save(draw, name, out_dir)
    return written


def measure(quick: bool = False, progress: bool = True) -> dict:
    """Every section of the data file (without provenance and plots), from fixed seeds."""
    torch.manual_seed(0)
    steps = [
        ("adoption", lambda: adoption()),
        ("casting", lambda: casting(64 if quick else 256, 4096, 1)),
        ("fp16_overflow", lambda: fp16_overflow(1024, 2)),
        ("accumulation", lambda: accumulation(10 if quick else 16, 16, 3)),
        ("eps_placement", lambda: eps_placement(1024, 4)),
        ("neox_kernel", lambda: neox_kernel(5)),
    ]
    return {name: fn() for name, fn in tqdm(steps, desc="numerics study", disable=not progress)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--plots", type=Path, default=None,
                    help="folder for the SVG plots (default: the site's, or --out's folder when --out is given)")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (for a smoke test); not for the site")
    args = ap.parse_args(argv)
    check_out(ap, args.out)
    args.plots = args.plots or (PLOTS if args.out.resolve() == OUT.resolve() else args.out.parent)
    warnings.filterwarnings("ignore")
    prov = record(COMMAND, SOURCES, quick=args.quick, packages=("torch", "numpy", "transformers"))
    data = {"provenance": prov, **measure(args.quick)}
    finish(prov)
    data["plots"] = plots(data, args.plots)
    write_json(args.out, data)
    print(f"wrote {args.out} and {len(data['plots'])} plots in {args.plots}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
