"""One diagram per norm placement of the tiny decoder: ``python -m reference_impl.studies.placement_diagrams``.

Writes ``docs/assets/diagrams/placements/<name>.svg`` and ``<name>-dark.svg`` with the drawing primitives,
palettes and legibility rules of :mod:`reference_impl.studies.diagrams` (text at least 12 px tall in a
343 px phone column, no opaque background). Each diagram is one residual sub-layer, F being attention or
the MLP, drawn from the list of steps that :data:`PLACEMENTS` gives for it; the steps are the ones
``reference_impl/tiny_lm.py`` computes, and ``tests/studies/test_placement_diagrams.py`` checks that the
two agree and that the committed files are what this module writes.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from .diagrams import REPO, THEMES, Svg, Theme

OUT_DIR = REPO / "docs" / "assets" / "diagrams" / "placements"


@dataclass(frozen=True)
class Placement:
    name: str          # file name
    title: str
    steps: tuple       # top to bottom: "N" (the norm), "F", "+" (residual add), "a+" (add after scaling x by alpha)
    formula: str
    note: str          # one short line under the formula
    desc: str          # the alt text


PLACEMENTS = (
    Placement("post", "Post-LN", ("F", "+", "N"), "N(x + F(x))", "the original Transformer, BERT",
              "Post-LN: the sub-layer F reads x, its output is added to x and the sum is normalized, so the norm "
              "sits on the residual stream itself."),
    Placement("pre", "Pre-LN", ("N", "F", "+"), "x + F(N(x))", "GPT-2, Llama, most LLMs",
              "Pre-LN: only the input of the sub-layer F is normalized; the residual stream passes through "
              "untouched and one final norm follows the last block."),
    Placement("sandwich", "Sandwich", ("N", "F", "N", "+"), "x + N(F(N(x)))", "CogView, Gemma 2 and 3",
              "Sandwich norm: the sub-layer's input and its output are both normalized before the output is "
              "added to the residual stream."),
    Placement("peri", "Peri-LN", ("N", "F", "N", "+"), "x + N(F(N(x)))", "and one N on the embeddings",
              "Peri-LN: the sandwich block, normalizing the sub-layer's input and output, with a norm on the "
              "embeddings before the first block as well."),
    Placement("reordered", "Reordered (OLMo 2)", ("F", "N", "+"), "x + N(F(x))", "OLMo 2, Swin Transformer V2",
              "OLMo 2's reordered norm: the sub-layer reads the un-normalized stream and its output is "
              "normalized before it is added to the residual stream."),
    Placement("deepnorm", "DeepNorm", ("F", "a+", "N"), "N(\u03b1x + F(x))", "\u03b1 = (2L)^(1/4), small init \u03b2",
              "DeepNorm: Post-LN with the residual stream multiplied by a constant alpha greater than one before "
              "the add, and smaller initial weights in the sub-layers."),
    Placement("pre-dyt", "Pre-DyT", ("DyT", "F", "+"), "x + F(DyT(x))", "\u03b3 tanh(\u03b1x) + \u03b2, no statistics",
              "Pre-LN with DyT: the norm before the sub-layer is replaced by an element-wise gamma times "
              "tanh(alpha x) plus beta, which computes no mean or variance."),
    Placement("pre-derf", "Pre-Derf", ("Derf", "F", "+"), "x + F(Derf(x))", "\u03b3 erf(\u03b1x + s) + \u03b2",
              "Pre-LN with Derf: the norm before the sub-layer is replaced by an element-wise gamma times "
              "erf(alpha x + s) plus beta."),
)
MIXLN_DESC = ("Mix-LN: the first quarter of the blocks are Post-LN blocks, normalizing the sum x + F(x); "
              "the remaining blocks are Pre-LN blocks, normalizing only the sub-layer's input.")
# Where each family's QK-norm acts, as the installed transformers builds it (q_norm's width: head_dim or all
# heads); tests/studies/test_placement_diagrams.py checks each name against the module's size.
QK_GROUPS = (("per head", ("Qwen3", "Gemma 3")),
             ("whole projection", ("OLMo 2",)))
QK_DESC = ("QK-norm: inside attention the queries and keys are normalized before their dot product, either each "
           "head over its own features (Qwen3, Gemma 3) or the whole projection of all heads at once (OLMo 2), "
           "so the size of q and k no longer sets the size of the logits; with a learned gain the logits are "
           "bounded only as far as the gain is.")


def _column(s: Svg, t: Theme, cx: float, top: float, steps, box_w=150, box_h=42, gap=20) -> float:
    """Draws one sub-layer's steps downwards from ``top``; returns the y where the output leaves."""
    s.text(cx, top - 8, "x", t.fg, anchor="middle", italic=True, size=20)
    split = top + 12
    s.line(cx, top - 2, cx, split, t.fg, 2)
    s.dot(cx, split, t.fg, 4.5)
    y = split
    for st in steps:
        if st in ("+", "a+"):
            c = y + gap + 14
            s.arrow(cx, y, cx, c - 14, t.fg, 2)
            s.circle(cx, c, 14, t.fg, 2.0)
            s.line(cx - 8, c, cx + 8, c, t.fg, 2.0)
            s.line(cx, c - 8, cx, c + 8, t.fg, 2.0)
            bx = cx - box_w / 2 - 18                       # the residual path bypasses the branch on the left
            s.poly([(cx, split), (bx, split), (bx, c)], t.muted, 2.2)
            s.arrow(bx, c, cx - 14, c, t.muted, 2.2)
            if st == "a+":
                s.text(bx + 4, c - 8, "\u00d7\u03b1", t.bad, size=16)
            y = c + 14
        else:
            s.arrow(cx, y, cx, y + gap, t.fg, 2)
            norm = st != "F"
            color = t.rms if st == "N" else t.ln if norm else t.fg
            s.rect(cx - box_w / 2, y + gap, box_w, box_h, color, 2.0, fill=color if norm else t.tint,
                   fill_opacity=0.22 if norm else 0.14, rx=8)
            s.text(cx, y + gap + 28, {"N": "Norm", "F": "Attn / MLP"}.get(st, st), t.fg, anchor="middle", size=18)
            y += gap + box_h
    return y


def single(p: Placement, t: Theme) -> Svg:
    height = 140 + sum(42 if st in ("+", "a+") else 62 for st in p.steps) + 80
    s = Svg(300, height, f"{p.title} placement of the norm in a residual sub-layer", p.desc, t)
    s.text(150, 28, p.title, t.fg, size=20, anchor="middle", weight="bold")
    y = _column(s, t, 165, 62, p.steps)
    bottom = y + 24
    s.arrow(165, y, 165, bottom, t.fg, 2)
    s.text(150, bottom + 30, p.formula, t.fg, anchor="middle", size=18)
    s.text(150, bottom + 58, p.note, t.muted, anchor="middle", size=15)
    return s


def mixln(t: Theme) -> Svg:
    s = Svg(340, 360, "Mix-LN placement: Post-LN in the early blocks, Pre-LN in the later ones", MIXLN_DESC, t)
    s.text(170, 28, "Mix-LN", t.fg, size=20, anchor="middle", weight="bold")
    for cx, steps, label in ((95, ("F", "+", "N"), "first L/4 blocks"), (255, ("N", "F", "+"), "other blocks")):
        y = _column(s, t, cx, 86, steps, box_w=104)
        s.text(cx - 10, 58, label, t.muted, anchor="middle", size=15)
        s.arrow(cx, y, cx, y + 20, t.fg, 2)
    s.text(170, 330, "Post-LN, then Pre-LN", t.fg, anchor="middle", size=18)
    return s


def qk_norm(t: Theme) -> Svg:
    s = Svg(320, 330, "QK-norm: the queries and keys are normalized before their dot product", QK_DESC, t)
    s.text(160, 28, "QK-norm (inside attention)", t.fg, size=18, anchor="middle", weight="bold")
    xs = (70, 160, 250)
    s.text(160, 62, "x (the block's input)", t.fg, anchor="middle", size=15)
    for x, name in zip(xs, ("q", "k", "v")):
        s.arrow(x, 72, x, 96, t.fg, 2)
        s.rect(x - 36, 96, 72, 36, t.fg, 2.0, fill=t.tint, fill_opacity=0.14)
        s.text(x, 120, "W" + name, t.fg, anchor="middle", size=17)
        if name != "v":
            s.arrow(x, 132, x, 152, t.fg, 2)
            s.rect(x - 36, 152, 72, 36, t.rms, 2.0, fill=t.rms, fill_opacity=0.22)
            s.text(x, 176, "Norm", t.fg, anchor="middle", size=17)
            s.arrow(x, 188, x, 212, t.fg, 2)
        else:
            s.arrow(x, 132, x, 212, t.fg, 2)
    s.rect(30, 212, 260, 40, t.fg, 2.0, fill=t.tint, fill_opacity=0.14)
    s.text(160, 238, "softmax(q\u00b7k / \u221ad) v", t.fg, anchor="middle", size=17)
    y = 284
    for where, families in QK_GROUPS:
        s.text(160, y, f"{where}: {', '.join(families)}", t.muted, anchor="middle", size=15)
        y += 26
    return s


def render_all() -> dict[str, str]:
    """File name -> SVG text for every placement diagram in both palettes."""
    builders = {p.name: (lambda t, p=p: single(p, t)) for p in PLACEMENTS}
    builders.update({"mixln": mixln, "qk-norm": qk_norm})
    return {f"{name}{t.suffix}.svg": build(t).render() for name, build in builders.items() for t in THEMES}


def write_files(files: dict[str, str], out_dir: Path) -> list[Path]:
    """Writes each ``name -> SVG text`` into ``out_dir`` (a temporary file, then a rename); returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in files.items():
        tmp = out_dir / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(out_dir / name)
        paths.append(out_dir / name)
    return paths


def write(out_dir: Path = OUT_DIR) -> list[Path]:
    return write_files(render_all(), out_dir)


def diagram_cli(argv, description: str, default_out: Path, render) -> None:
    """The command of a diagram module: ``--out`` a folder (default ``default_out``), then every file of
    ``render()`` written there and its path printed."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", type=Path, default=default_out, help="folder for the SVG files")
    args = ap.parse_args(argv)
    for p in write_files(render(), args.out):
        print(p.relative_to(REPO) if p.is_relative_to(REPO) else p)


def main(argv=None) -> None:
    diagram_cli(argv, __doc__.split("\n")[0], OUT_DIR, render_all)


if __name__ == "__main__":
    main()
