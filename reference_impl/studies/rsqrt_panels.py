"""The ulp-distance histograms of the reciprocal square root methods, one small panel per method.

Drawn from ``docs/data/rsqrt_cpu.json`` (the study :mod:`reference_impl.studies.rsqrt` writes it): for each
method, the share of float32 inputs ``x >= 2^-125`` whose result lies 0, 1, 2-3, 4-7, ... float32 steps from
the correctly rounded ``1/sqrt(x)``. One panel per method on a shared x axis, so no colour has to tell nine
methods apart. Nothing here measures: it only redraws the committed data, so it is not one of the study's
sources. ``python -m reference_impl.studies.rsqrt_panels`` writes ``rsqrt_ulp_panels.svg`` and its dark twin.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from . import plotstyle

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "docs" / "data" / "rsqrt_cpu.json"
PLOTS = REPO / "docs" / "data" / "plots"
NAME = "rsqrt_ulp_panels"
# the order the page discusses them: the division, the SSE estimate and its refinements, AVX-512's, the bit tricks
ORDER = ("libm_div_sqrt", "sse_rsqrt", "sse_rsqrt_nr1", "sse_rsqrt_nr2_rearranged", "avx512_rsqrt14",
         "avx512_rsqrt14_nr1_fma", "quake_nr1", "walczyk_nr1", "walczyk_nr2")


def bin_labels(n: int) -> list[str]:
    """Labels of the ``n`` integer-ulp bins: 0, 1, then [2^(k-1), 2^k - 1], and the last one NaN/inf."""
    labels = ["0", "1"] + [f"{2 ** (k - 1)}-{2 ** k - 1}" for k in range(2, n - 1)] + ["NaN/inf"]
    if len(labels) != n:
        raise ValueError(f"an ulp histogram has at least 3 bins, got {n}")
    return labels


def shares(data: dict) -> dict[str, np.ndarray]:
    """Method -> share of inputs per bin, for the methods of :data:`ORDER` the file measured."""
    methods = data.get("methods")
    if not isinstance(methods, dict):
        raise ValueError(f"{DATA.name}: no 'methods' object")
    out = {}
    for name in ORDER:
        normal = (methods.get(name) or {}).get("normal")
        if not normal:
            continue
        h = np.asarray(normal["ulp_hist"], dtype=np.float64)
        if h.ndim != 1 or h.size < 3 or (h < 0).any() or h.sum() <= 0:
            raise ValueError(f"{DATA.name}: methods.{name}.normal.ulp_hist is not a histogram of counts")
        out[name] = h / h.sum()
    if not out:
        raise ValueError(f"{DATA.name}: none of the methods {', '.join(ORDER)} has a histogram")
    if len({h.size for h in out.values()}) != 1:
        raise ValueError(f"{DATA.name}: the methods' histograms have different numbers of bins")
    return out


def draw(data: dict, out_dir: Path = PLOTS) -> list[str]:
    """Writes the light and dark SVGs; returns their file names."""
    sh = shares(data)
    n = next(iter(sh.values())).size
    used = np.flatnonzero(sum(sh.values()) > 0)
    labels = bin_labels(n)

    def figure(theme):
        fig, axs = plotstyle.figure(0.72 * len(sh) + 1.3, nrows=len(sh), sharex=True)
        for ax, (name, h) in zip(axs[:, 0], sh.items()):
            nz = np.flatnonzero(h)
            ax.bar(nz, h[nz], width=0.8, log=True, color=plotstyle.CYCLE[0])
            ax.set_ylim(1e-10, 3.0)
            ax.set_yticks([1e-9, 1e-4, 1.0])
            ax.set_title(name, loc="left", pad=3)
        last = axs[-1, 0]
        last.set_xticks(used, [labels[i] for i in used], rotation=60)
        last.set_xlabel("float steps from the exact result")
        axs[len(sh) // 2, 0].set_ylabel("share of inputs")
        return fig

    return plotstyle.save(figure, NAME, out_dir)


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    source = Path(args[0]) if args else DATA
    data = json.loads(source.read_text())
    for name in draw(data):
        print("wrote", PLOTS / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
