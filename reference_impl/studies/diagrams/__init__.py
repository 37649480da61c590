"""Explanatory diagrams of the site, drawn as SVG text by plain Python (no renderer, no network).

``python -m reference_impl.studies.diagrams`` writes ``docs/assets/diagrams/<name>.svg`` (for the light
palette) and ``<name>-dark.svg`` (for Material's slate palette) for every diagram below; pages embed the pair
with Material's ``#only-light`` / ``#only-dark`` fragments (``--markdown`` prints the lines to paste).
Every number drawn (coordinates, a Newton step, byte counts, a float32 sum) is computed here, and the
output is deterministic, so ``tests/studies/test_diagrams.py`` can demand that regenerating reproduces the committed
files byte for byte.

Legibility rules the generator enforces on itself (and the tests check again): text is at least
``MIN_TEXT_PX`` pixels tall when a diagram is shrunk to a phone's content column (``PHONE_CONTENT_PX``),
nothing paints an opaque background, and every text and stroke colour has enough contrast against the
page background of its palette.

Modules: :mod:`.svg` (palettes, the SVG writer and its checks), :mod:`.geometry` and :mod:`.kernels` (the
diagrams); this package lists them (``DIAGRAMS``), writes them and re-exports every name.
"""
from __future__ import annotations
import argparse
from dataclasses import dataclass
from pathlib import Path

from . import geometry as _geometry_module
from . import kernels as _kernels_module
from . import svg as _svg_module
from .svg import OUT_DIR, REPO, THEMES
from .geometry import geometry, jacobian, norm_axes, norm_placement
from .kernels import dweight_reduction, fused_residual, newton, row_passes, warp_reduce

for _module in (_svg_module, _geometry_module, _kernels_module):
    globals().update({k: v for k, v in vars(_module).items() if not k.startswith("__") and k != "annotations"})
del _module


@dataclass(frozen=True)
class Diagram:
    name: str
    page: str      # the page it explains (docs-relative)
    alt: str
    build: object


DIAGRAMS = (
    Diagram("norm-axes", "history.md",
            "BatchNorm normalizes one channel over batch and sequence; LayerNorm and RMSNorm normalize one "
            "token over its hidden values", norm_axes),
    Diagram("norm-placement", "history.md",
            "Post-Norm, Pre-Norm and Sandwich-Norm placement of the norm in a residual sublayer", norm_placement),
    Diagram("geometry", "invariances.md",
            "RMSNorm maps x onto the sphere of radius sqrt(d); LayerNorm onto the circle of that radius "
            "orthogonal to the all-ones vector", geometry),
    Diagram("jacobian-projection", "gradients.md",
            "The input gradient is r times g with its radial part removed (RMSNorm) and also its part along "
            "the all-ones vector (LayerNorm)", jacobian),
    Diagram("warp-reduce", "kernels/cuda.md",
            "Butterfly reduction over the 32 lanes of a warp with shuffle-xor and masks 16, 8, 4, 2, 1", warp_reduce),
    Diagram("dweight-reduction", "kernels/cuda.md",
            "Two-stage deterministic reduction of the weight gradient against atomicAdd", dweight_reduction),
    Diagram("row-passes", "kernels/cpu.md",
            "One RMSNorm row in two passes: the row is read from memory once, read again from the cache, and y "
            "written once", row_passes),
    Diagram("fused-residual", "performance.md",
            "Fusing the residual add into the norm saves one write and one read of a tensor", fused_residual),
    Diagram("newton-rsqrt", "rsqrt.md",
            "A Newton step for 1/sqrt(a): the tangent of f(y) = 1/y^2 - a from y0 to y1", newton),
)


def render_all() -> dict[str, str]:
    """File name -> SVG text for every diagram in both palettes (nothing written)."""
    out = {}
    for d in DIAGRAMS:
        for theme in THEMES:
            out[f"{d.name}{theme.suffix}.svg"] = d.build(theme).render()
    return out


def markdown_lines(diagram: Diagram) -> str:
    """The two image lines a page pastes (light and dark variant), with the path relative to that page."""
    depth = diagram.page.count("/")
    prefix = "../" * depth + "assets/diagrams/"
    alt = diagram.alt
    return (f"![{alt}]({prefix}{diagram.name}.svg#only-light)\n"
            f"![{alt}]({prefix}{diagram.name}-dark.svg#only-dark)")


def write(out_dir: Path = OUT_DIR) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render_all().items():
        path = out_dir / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=OUT_DIR, help="folder for the SVG files")
    ap.add_argument("--markdown", action="store_true", help="print the lines each page pastes, write nothing")
    args = ap.parse_args(argv)
    if args.markdown:
        for d in DIAGRAMS:
            print(f"<!-- {d.page} -->\n{markdown_lines(d)}\n")
        return
    for p in write(args.out):
        print(p.relative_to(REPO) if p.is_relative_to(REPO) else p)
