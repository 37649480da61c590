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
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

import numpy as np

REPO = Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "docs" / "assets" / "diagrams"

# Material's content column on a 375 px wide phone: 375 px less 0.8 rem (16 px) of margin on each side.
# tests/site/test_widget.py measures it in a real browser.
PHONE_CONTENT_PX = 343
MIN_TEXT_PX = 12
SANS = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"
MONO = "ui-monospace, SFMono-Regular, Menlo, Consolas, 'DejaVu Sans Mono', monospace"


@dataclass(frozen=True)
class Theme:
    """Colours of one palette. ``page`` is the page background the diagram sits on; it is never painted."""
    name: str
    suffix: str
    page: str
    fg: str
    muted: str
    ln: str      # LayerNorm
    rms: str     # RMSNorm
    bn: str      # BatchNorm
    good: str
    bad: str
    tint: str    # translucent fills (drawn with fill-opacity)


LIGHT = Theme("light", "", "#ffffff", fg="#1f2328", muted="#57606a", ln="#b35000", rms="#0b62c4",
              bn="#7a3fb5", good="#1a7f37", bad="#c4262e", tint="#8c959f")
DARK = Theme("dark", "-dark", "#1e2129", fg="#e6edf3", muted="#a8b1bb", ln="#f4a35a", rms="#72b7ff",
             bn="#c9a3ff", good="#5cd16f", bad="#ff8a85", tint="#8c959f")
THEMES = (LIGHT, DARK)


def fmt(v: float) -> str:
    """A coordinate with at most two decimals and no trailing zeros (stable text, so files compare bytewise)."""
    s = f"{v:.2f}".rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


class Svg:
    """Collects SVG elements for one diagram; checks text size and that text stays on the canvas."""

    strict = True    # False only while sketching a layout: text off the canvas is then allowed

    def __init__(self, width: int, height: int, title: str, desc: str, theme: Theme):
        if not title.strip() or not desc.strip():
            raise ValueError("a diagram needs a non-empty title and desc (its alt text)")
        self.w, self.h, self.title, self.desc, self.t = width, height, title, desc, theme
        self.min_font = math.ceil(MIN_TEXT_PX * width / PHONE_CONTENT_PX)
        self.parts: list[str] = []

    # -- primitives --------------------------------------------------------------------------------
    def raw(self, s: str) -> None:
        self.parts.append(s)

    def line(self, x1, y1, x2, y2, color, width=2.0, dash: str | None = None, opacity: float | None = None):
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        extra += f' stroke-opacity="{fmt(opacity)}"' if opacity is not None else ""
        self.raw(f'<line x1="{fmt(x1)}" y1="{fmt(y1)}" x2="{fmt(x2)}" y2="{fmt(y2)}" stroke="{color}" '
                 f'stroke-width="{fmt(width)}"{extra}/>')

    def poly(self, pts, color, width=2.0, fill="none", fill_opacity: float | None = None, closed=False,
             dash: str | None = None):
        d = "M" + " L".join(f"{fmt(x)} {fmt(y)}" for x, y in pts) + (" Z" if closed else "")
        self.path(d, color, width, fill, fill_opacity, dash)

    def path(self, d, color, width=2.0, fill="none", fill_opacity: float | None = None, dash: str | None = None):
        extra = f' fill-opacity="{fmt(fill_opacity)}"' if fill_opacity is not None else ""
        extra += f' stroke-dasharray="{dash}"' if dash else ""
        stroke = f'stroke="{color}" stroke-width="{fmt(width)}"' if color != "none" else 'stroke="none"'
        self.raw(f'<path d="{d}" fill="{fill}"{extra} {stroke} stroke-linejoin="round"/>')

    def rect(self, x, y, w, h, color, width=2.0, fill="none", fill_opacity: float | None = None, rx=6):
        extra = f' fill-opacity="{fmt(fill_opacity)}"' if fill_opacity is not None else ""
        if fill not in ("none",) and fill_opacity is None and w >= self.w * 0.9 and h >= self.h * 0.9:
            raise ValueError("an opaque full-canvas rectangle would hide the page background")
        self.raw(f'<rect x="{fmt(x)}" y="{fmt(y)}" width="{fmt(w)}" height="{fmt(h)}" rx="{fmt(rx)}" '
                 f'fill="{fill}"{extra} stroke="{color}" stroke-width="{fmt(width)}"/>')

    def circle(self, cx, cy, r, color, width=2.0, fill="none", fill_opacity: float | None = None,
               dash: str | None = None):
        extra = f' fill-opacity="{fmt(fill_opacity)}"' if fill_opacity is not None else ""
        extra += f' stroke-dasharray="{dash}"' if dash else ""
        self.raw(f'<circle cx="{fmt(cx)}" cy="{fmt(cy)}" r="{fmt(r)}" fill="{fill}"{extra} stroke="{color}" '
                 f'stroke-width="{fmt(width)}"/>')

    def dot(self, cx, cy, color, r=5.0):
        self.raw(f'<circle cx="{fmt(cx)}" cy="{fmt(cy)}" r="{fmt(r)}" fill="{color}"/>')

    def arrow(self, x1, y1, x2, y2, color, width=2.5, head=13.0, dash: str | None = None):
        """A line from (x1, y1) with a filled head whose tip is exactly (x2, y2)."""
        length = math.hypot(x2 - x1, y2 - y1)
        if length < 1e-9:
            raise ValueError("arrow of zero length")
        ux, uy = (x2 - x1) / length, (y2 - y1) / length
        h = min(head, 0.6 * length)
        bx, by = x2 - ux * h, y2 - uy * h
        self.line(x1, y1, bx + ux * 1.0, by + uy * 1.0, color, width, dash)
        half = 0.45 * h
        pts = [(x2, y2), (bx - uy * half, by + ux * half), (bx + uy * half, by - ux * half)]
        self.raw('<path d="M' + " L".join(f"{fmt(x)} {fmt(y)}" for x, y in pts) + f' Z" fill="{color}"/>')

    def text(self, x, y, s: str, color=None, size=None, anchor="start", weight="normal", mono=False,
             italic=False):
        size = size or self.min_font + 1
        if size < self.min_font:
            raise ValueError(f"{s!r}: font size {size} < {self.min_font}, unreadable at {PHONE_CONTENT_PX} px")
        # estimated extent (average advance ~0.56 em sans, 0.6 em mono) must stay on the canvas
        width = len(s) * size * (0.6 if mono else 0.66 if weight == "bold" else 0.56)
        left = {"start": x, "middle": x - width / 2, "end": x - width}[anchor]
        off = left < -1 or left + width > self.w + 1 or y - 0.8 * size < -1 or y + 0.25 * size > self.h + 1
        if off and self.strict:
            raise ValueError(f"text {s!r} runs off the {self.w}x{self.h} canvas")
        family = MONO if mono else SANS
        attrs = (f'x="{fmt(x)}" y="{fmt(y)}" font-size="{size}" fill="{color or self.t.fg}" '
                 f'text-anchor="{anchor}" font-family={quoteattr(family)}')
        if weight != "normal":
            attrs += f' font-weight="{weight}"'
        if italic:
            attrs += ' font-style="italic"'
        self.raw(f"<text {attrs}>{escape(s)}</text>")

    def render(self) -> str:
        head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.w}" height="{self.h}" '
                f'viewBox="0 0 {self.w} {self.h}" role="img" aria-labelledby="title desc">\n'
                f'<title id="title">{escape(self.title)}</title>\n<desc id="desc">{escape(self.desc)}</desc>\n')
        return head + "\n".join(self.parts) + "\n</svg>\n"


# ------------------------------------------------------------------------------------------------
# 3-D projection shared by the geometry and the Jacobian diagrams
# ------------------------------------------------------------------------------------------------
def _unit(v):
    v = np.asarray(v, dtype=float)
    return v / np.linalg.norm(v)


class Camera:
    """Orthographic view in which the all-ones direction points straight up the screen.

    The viewer looks slightly down onto the plane orthogonal to (1, 1, 1), so LayerNorm's circle in that
    plane shows as a flat ellipse and its normal as a vertical arrow.
    """

    def __init__(self, tilt_deg=22.0, turn_deg=-15.0, scale=60.0, origin=(0.0, 0.0)):
        n = _unit([1, 1, 1])
        a = _unit([1, -1, 0])                  # a direction inside the plane
        b = np.cross(n, a)                    # the third direction, also inside the plane
        phi = math.radians(turn_deg)
        w = math.cos(phi) * a + math.sin(phi) * b   # horizontal direction towards the viewer
        t = math.radians(tilt_deg)
        self.toward = math.cos(t) * w + math.sin(t) * n
        self.up = _unit(n - (n @ self.toward) * self.toward)
        self.right = np.cross(self.up, self.toward)
        self.scale, self.ox, self.oy = scale, origin[0], origin[1]

    def __call__(self, p):
        p = np.asarray(p, dtype=float)
        return self.ox + self.scale * float(p @ self.right), self.oy - self.scale * float(p @ self.up)

    def plane_basis(self):
        """Orthonormal (a, b) spanning the plane orthogonal to 1: a points right on screen, b to the viewer."""
        n = _unit([1, 1, 1])
        a = _unit(self.right - (self.right @ n) * n)
        b = np.cross(n, a)
        return a, (b if b @ self.toward > 0 else -b)

    def depth(self, p) -> float:
        """Positive towards the viewer."""
        return float(np.asarray(p, dtype=float) @ self.toward)


def _circle_points(center, u, v, radius, n=96):
    """Points of the 3-D circle center + radius (cos t u + sin t v)."""
    return [np.asarray(center) + radius * (math.cos(2 * math.pi * k / n) * np.asarray(u)
                                           + math.sin(2 * math.pi * k / n) * np.asarray(v)) for k in range(n + 1)]


def _draw_3d_curve(s: Svg, cam: Camera, pts, color, width=2.0):
    """Draws a closed 3-D curve, solid where it faces the viewer, dashed behind."""
    run: list = []
    front_prev = None
    for p in pts:
        front = cam.depth(p) >= -1e-9
        if front_prev is not None and front != front_prev and run:
            s.poly([cam(q) for q in run + [p]], color, width, dash=None if front_prev else "6 6")
            run = []
        run.append(p)
        front_prev = front
    if len(run) > 1:
        s.poly([cam(q) for q in run], color, width, dash=None if front_prev else "6 6")


# ------------------------------------------------------------------------------------------------
# a. which axes each norm normalizes over
# ------------------------------------------------------------------------------------------------
def norm_axes(t: Theme) -> Svg:
    s = Svg(600, 380, "Which axes BatchNorm, LayerNorm and RMSNorm normalize over",
            "Three copies of an activation tensor with axes batch B, sequence T and hidden d. "
            "BatchNorm (purple) computes its mean and variance for one hidden channel over all batch and "
            "sequence positions: a slab across B and T. LayerNorm (orange) computes mean and variance for one "
            "token over its d hidden values: a rod along d. RMSNorm (blue) uses the same rod as LayerNorm but "
            "only the mean of squares, with no mean subtracted.", t)
    nd, nb, nt = 5, 4, 3
    cw, ch, dx, dy = 26, 27, 14, -12    # cell width/height; depth offset per sequence step

    def cube(ox, oy, color, cells_front, cells_top, cells_right):
        # front face (t = 0): cell (b, j); top face (b = 0): cell (k, j); right face (j = nd - 1): cell (b, k)
        def front(b, j):
            x, y = ox + j * cw, oy + b * ch
            return [(x, y), (x + cw, y), (x + cw, y + ch), (x, y + ch)]

        def top(k, j):
            x, y = ox + j * cw + k * dx, oy + k * dy
            return [(x, y), (x + cw, y), (x + cw + dx, y + dy), (x + dx, y + dy)]

        def right(b, k):
            x, y = ox + nd * cw + k * dx, oy + b * ch + k * dy
            return [(x, y), (x + dx, y + dy), (x + dx, y + ch + dy), (x, y + ch)]

        for b in range(nb):
            for j in range(nd):
                hit = (b, j) in cells_front
                s.poly(front(b, j), t.muted, 1.2, fill=color if hit else t.tint,
                       fill_opacity=0.85 if hit else 0.12, closed=True)
        for k in range(nt):
            for j in range(nd):
                hit = (k, j) in cells_top
                s.poly(top(k, j), t.muted, 1.2, fill=color if hit else t.tint,
                       fill_opacity=0.85 if hit else 0.22, closed=True)
        for b in range(nb):
            for k in range(nt):
                hit = (b, k) in cells_right
                s.poly(right(b, k), t.muted, 1.2, fill=color if hit else t.tint,
                       fill_opacity=0.85 if hit else 0.32, closed=True)
        # axis labels
        s.text(ox + nd * cw / 2, oy + nb * ch + 26, "d", t.fg, anchor="middle", italic=True)
        s.text(ox - 8, oy + nb * ch / 2 + 8, "B", t.fg, anchor="end", italic=True)
        s.text(ox + nt * dx / 2 - 8, oy + nt * dy / 2 - 8, "T", t.fg, anchor="end", italic=True)

    panels = [
        ("BatchNorm", t.bn, ["per channel,", "over B and T"],
         {(b, 2) for b in range(nb)}, {(k, 2) for k in range(nt)}, set()),
        ("LayerNorm", t.ln, ["per token,", "over d"],
         {(1, j) for j in range(nd)}, set(), {(1, 0)}),
        ("RMSNorm", t.rms, ["as LayerNorm,", "but no mean"],
         {(1, j) for j in range(nd)}, set(), {(1, 0)}),
    ]
    for i, (name, color, lines, f, tp, r) in enumerate(panels):
        cx = 100 + 200 * i
        s.text(cx, 40, name, color, size=24, anchor="middle", weight="bold")
        cube(cx - (nd * cw + nt * dx) / 2 + 12, 100, color, f, tp, r)
        for k, ln in enumerate(lines):
            s.text(cx, 282 + 28 * k, ln, t.fg, anchor="middle")
    s.text(300, 366, "tensor (B, T, d); coloured: one group of statistics", t.muted, size=21, anchor="middle")
    return s


# ------------------------------------------------------------------------------------------------
# b. Post-, Pre- and Sandwich-Norm
# ------------------------------------------------------------------------------------------------
def norm_placement(t: Theme) -> Svg:
    s = Svg(600, 536, "Post-Norm, Pre-Norm and Sandwich-Norm placement in a Transformer sublayer",
            "Three diagrams of one residual sublayer, F being attention or the MLP. Post-Norm (the original "
            "Transformer, arXiv:1706.03762, and BERT, whose output layers compute LayerNorm(hidden_states + "
            "input_tensor) in transformers' modeling_bert.py) adds the residual first and normalizes the sum: "
            "N(x + F(x)), so the norm sits on the residual stream. Pre-Norm (GPT-2's ln_1 and ln_2, Llama's "
            "input_layernorm and post_attention_layernorm, which despite its name normalizes the MLP's input) "
            "normalizes only the input of the branch: "
            "x + F(N(x)); the residual stream itself is never normalized inside the block, so such models add "
            "one final norm after the last block (GPT-2's ln_f). Sandwich-Norm (CogView, arXiv:2105.13290; "
            "Gemma 2 and Gemma 3, with pre_feedforward_layernorm and post_feedforward_layernorm in "
            "transformers' modeling_gemma2.py) normalizes the branch input and the branch output: "
            "x + N(F(N(x))).", t)
    box_w, box_h, gap = 132, 44, 24

    def box(cx, y, label, color, filled):
        s.rect(cx - box_w / 2, y, box_w, box_h, color, 2.0, fill=color if filled else t.tint,
               fill_opacity=0.22 if filled else 0.14, rx=8)
        s.text(cx, y + 29, label, t.fg, anchor="middle", size=21)

    columns = [
        ("Post-Norm", ["F", "+", "N"], "N(x + F(x))", "BERT"),
        ("Pre-Norm", ["N", "F", "+"], "x + F(N(x))", "GPT-2, Llama"),
        ("Sandwich", ["N", "F", "N", "+"], "x + N(F(N(x)))", "Gemma 2"),
    ]
    top, bottom = 92, 396
    for i, (name, steps, formula, example) in enumerate(columns):
        cx = 200 * i + 112
        mid = 200 * i + 100
        s.text(mid, 36, name, t.fg, size=24, anchor="middle", weight="bold")
        s.text(cx, top - 10, "x", t.fg, anchor="middle", italic=True, size=22)
        split_y = top + 14
        s.line(cx, top - 2, cx, split_y, t.fg, 2)
        s.dot(cx, split_y, t.fg, 4.5)
        y = split_y
        for st in steps:
            if st == "+":
                centre = y + gap + 14
                s.arrow(cx, y, cx, centre - 14, t.fg, 2)
                s.circle(cx, centre, 14, t.fg, 2.0)
                s.line(cx - 8, centre, cx + 8, centre, t.fg, 2.0)
                s.line(cx, centre - 8, cx, centre + 8, t.fg, 2.0)
                bx = cx - box_w / 2 - 20          # the residual path bypasses the branch on the left
                s.poly([(cx, split_y), (bx, split_y), (bx, centre)], t.muted, 2.2)
                s.arrow(bx, centre, cx - 14, centre, t.muted, 2.2)
                y = centre + 14
            else:
                s.arrow(cx, y, cx, y + gap, t.fg, 2)
                if st == "N":
                    box(cx, y + gap, "Norm", t.rms, True)
                else:
                    box(cx, y + gap, "Attn / MLP", t.fg, False)
                y += gap + box_h
        s.arrow(cx, y, cx, bottom, t.fg, 2)
        s.text(mid, bottom + 38, formula, t.fg, anchor="middle", size=21)
        s.text(mid, bottom + 70, "e.g. " + example, t.muted, anchor="middle", size=21)
    s.text(300, 524, "F: attention or MLP; N: LayerNorm or RMSNorm", t.muted, size=21, anchor="middle")
    return s


# ------------------------------------------------------------------------------------------------
# c. geometry of the outputs
# ------------------------------------------------------------------------------------------------
GEOM_X_RMS = (3.0, 1.0, 0.5)
GEOM_X_LN = (3.0, 0.5, 0.0)


def geometry(t: Theme) -> Svg:
    d = 3
    R = math.sqrt(d)
    x_rms = np.array(GEOM_X_RMS)
    y_rms = R * x_rms / np.linalg.norm(x_rms)
    x_ln = np.array(GEOM_X_LN)
    mu = float(x_ln.mean())
    xc = x_ln - mu
    y_ln = R * xc / np.linalg.norm(xc)
    s = Svg(600, 460, "Where RMSNorm and LayerNorm outputs lie, for d = 3",
            "Two 3-D sketches with gain 1, bias 0 and eps -> 0, d = 3, seen from just above the plane "
            "orthogonal to the all-ones vector 1 (which points straight up). Left, RMSNorm: the input "
            f"x = ({', '.join(fmt(v) for v in x_rms)}) is scaled along its own ray onto the sphere of radius "
            f"sqrt(d) = {R:.3f}; every positive multiple c x lands on the same point y. Right, LayerNorm: "
            f"x = ({', '.join(fmt(v) for v in x_ln)}) first loses its component along 1 (its mean, "
            f"{mu:g}, is subtracted from every entry), which moves it down into the plane orthogonal to 1, and "
            "is then scaled onto the circle of radius sqrt(d) in that plane, the equator of the sphere. "
            "With eps > 0 the outputs lie slightly inside the sphere.", t)
    n = _unit([1, 1, 1])
    for panel, (cx, name, color) in enumerate([(150, "RMSNorm", t.rms), (450, "LayerNorm", t.ln)]):
        cam = Camera(scale=68, origin=(cx - 40 * panel, 250))
        a, b = cam.plane_basis()
        s.text(cx, 34, name, color, size=24, anchor="middle", weight="bold")
        o = cam([0, 0, 0])
        # the sphere's outline (a circle in an orthographic view) and its equator orthogonal to 1
        s.circle(o[0], o[1], cam.scale * R, t.muted, 1.5, fill=t.tint, fill_opacity=0.10)
        _draw_3d_curve(s, cam, _circle_points([0, 0, 0], a, b, R), color if panel else t.muted,
                       2.6 if panel else 1.2)
        s.dot(*o, t.fg, 3.5)
        if panel == 0:
            far = cam(1.28 * x_rms)
            s.line(*o, *far, t.muted, 1.6, dash="4 5")
            tip = cam(x_rms)
            s.arrow(*o, *tip, t.fg, 2.5)
            s.text(tip[0] + 10, tip[1] + 12, "x", t.fg, italic=True, size=22)
            s.text(far[0] - 8, far[1] - 6, "c·x", t.muted, size=21, anchor="end")
            yy = cam(y_rms)
            s.arrow(*o, *yy, color, 3.4)
            s.dot(*yy, color, 5.5)
            s.text(yy[0] + 12, yy[1] + 18, "y", color, italic=True, weight="bold", size=22)
            s.line(o[0], o[1], o[0] - cam.scale * R, o[1], t.muted, 1.5)
            s.text(o[0] - cam.scale * R / 2, o[1] - 10, "√d", t.fg, anchor="middle", size=22)
        else:
            top = cam(1.5 * n)
            s.arrow(*o, *top, t.fg, 2.2)
            s.text(top[0] - 10, top[1] + 8, "1", t.fg, weight="bold", size=22, anchor="end")
            tip, foot = cam(x_ln), cam(xc)
            s.arrow(*o, *tip, t.fg, 2.5)
            s.text(tip[0], tip[1] - 12, "x", t.fg, italic=True, size=22, anchor="middle")
            s.line(*tip, *foot, t.muted, 2, dash="5 5")
            s.text((tip[0] + foot[0]) / 2 + 6, (tip[1] + foot[1]) / 2 - 6, "− μ1", t.fg, size=21)
            s.arrow(*o, *foot, t.muted, 2)
            s.text(foot[0] + 14, foot[1] + 30, "x − μ1", t.muted, size=21, anchor="end")
            yy = cam(y_ln)
            s.arrow(*o, *yy, color, 3.4)
            s.dot(*yy, color, 5.5)
            s.text((o[0] + yy[0]) / 2, (o[1] + yy[1]) / 2 - 12, "y", color, anchor="middle", italic=True,
                   weight="bold", size=22)
        s.text(cx, 408, "on the sphere" if panel == 0 else "on the circle ⟂ 1", t.fg, anchor="middle", size=22)
        s.text(cx, 440, "‖y‖ = √d  (ε → 0)" if panel == 0 else "‖y‖ = √d,  mean(y) = 0", t.muted, size=21,
               anchor="middle")
    return s


# ------------------------------------------------------------------------------------------------
# d. the Jacobian as a projection
# ------------------------------------------------------------------------------------------------
JAC_G = (0.9, 0.7, 0.9)    # g in the frame (along 1, along x̂, along the tangent); the 2-D panel has no 1 part


def jacobian(t: Theme) -> Svg:
    s = Svg(600, 480, "The input gradient is a projection of g = γ ⊙ ȳ",
            "Two sketches with eps -> 0. Left, RMSNorm, in the plane spanned by x̂ and g: the input gradient "
            "is r (I − x̂x̂ᵀ/d) g. Since ‖x̂‖² = d, the matrix P = I − x̂x̂ᵀ/d removes the component of g "
            "along x̂ (the radial direction, dashed) and keeps the part Pg tangent to the sphere of radius "
            "sqrt(d); r = 1/rms(x) then scales it. Moving x along its own direction does not change the "
            "output, so the gradient has no component along x. Right, LayerNorm in 3-D: "
            "P = I − 11ᵀ/d − x̂x̂ᵀ/d also removes the component along the all-ones vector 1 (the vertical "
            "drop), and because x̂ is orthogonal to 1 the two removals do not interfere: what remains is "
            "tangent to LayerNorm's circle. With eps > 0, ‖x̂‖² < d and the radial part is only mostly removed.",
            t)
    along_n, along_x, along_t = JAC_G
    # ---- left: RMSNorm in the plane spanned by x̂ and g (screen y points down) ----
    cx, cy, rad = 130, 290, 112
    s.text(150, 36, "RMSNorm", t.rms, size=24, anchor="middle", weight="bold")
    s.circle(cx, cy, rad, t.muted, 1.5, fill=t.tint, fill_opacity=0.10)
    ang = math.radians(35)
    ur = np.array([math.cos(ang), -math.sin(ang)])      # radial unit
    ut = np.array([-math.sin(ang), -math.cos(ang)])     # tangent unit (counter-clockwise)
    c = np.array([cx, cy], dtype=float)
    p = c + rad * ur                                    # x̂ on the circle of radius sqrt(d)
    unit = rad / math.sqrt(3)                           # pixels per unit of x̂'s scale, as if d = 3
    s.line(*(p - 0.9 * unit * ut), *(p + 2.2 * unit * ut), t.muted, 1.5, dash="4 5")   # tangent line
    s.arrow(*c, *p, t.fg, 2.5)
    s.dot(*c, t.fg, 3.5)
    s.text((c[0] + p[0]) / 2 + 12, (c[1] + p[1]) / 2 + 22, "x̂", t.fg, italic=True, size=22)
    g_tip = p + unit * (along_t * 1.9 * ut + along_x * 1.9 * ur)
    pg_tip = p + unit * along_t * 1.9 * ut
    s.line(*g_tip, *pg_tip, t.bad, 2.2, dash="5 5")
    s.arrow(*p, *g_tip, t.fg, 2.6)
    s.text(g_tip[0] + 8, g_tip[1] + 4, "g", t.fg, italic=True, weight="bold", size=22)
    s.arrow(*p, *pg_tip, t.rms, 3.4)
    s.text(pg_tip[0] - 10, pg_tip[1] + 4, "Pg", t.rms, weight="bold", size=22, anchor="end")
    s.text((g_tip[0] + pg_tip[0]) / 2 - 6, (g_tip[1] + pg_tip[1]) / 2 - 14, "radial", t.bad, size=21,
           anchor="end")
    s.text(150, 442, "P = I − x̂x̂ᵀ/d", t.fg, anchor="middle", size=22)

    # ---- right: LayerNorm in 3-D ----
    n = _unit([1, 1, 1])
    R = math.sqrt(3)
    cam = Camera(tilt_deg=45, scale=78, origin=(400, 262))
    a, b = cam.plane_basis()
    s.text(450, 36, "LayerNorm", t.ln, size=24, anchor="middle", weight="bold")
    o = cam([0, 0, 0])
    _draw_3d_curve(s, cam, _circle_points([0, 0, 0], a, b, R), t.ln, 2.4)
    s.dot(*o, t.fg, 3.5)
    top = cam(1.3 * n)
    s.arrow(*o, *top, t.fg, 2.2)
    s.text(top[0] - 10, top[1] + 8, "1", t.fg, weight="bold", size=22, anchor="end")
    th = math.radians(55)
    uh = math.cos(th) * a + math.sin(th) * b            # unit vector along x̂ (front right of the circle)
    xh = R * uh
    tang = np.cross(n, uh)
    if tang @ cam.right < 0:
        tang = -tang                                     # draw the tangent part towards the right
    s.arrow(*o, *cam(xh), t.fg, 2.5)
    px, py = cam(xh)
    s.text((o[0] + px) / 2 - 8, (o[1] + py) / 2 + 22, "x̂", t.fg, italic=True, size=22, anchor="end")
    gvec = 1.5 * (along_n * n - along_x * uh + along_t * tang)    # this g points inwards: either sign works
    g_plane = gvec - (gvec @ n) * n
    g_tan = (gvec @ tang) * tang
    s.line(*cam(xh - 0.6 * tang), *cam(xh + 1.6 * tang), t.muted, 1.5, dash="4 5")
    tip, mid, end = cam(xh + gvec), cam(xh + g_plane), cam(xh + g_tan)
    s.line(*tip, *mid, t.bad, 2.2, dash="5 5")
    s.line(*mid, *end, t.bad, 2.2, dash="5 5")
    s.arrow(*cam(xh), *tip, t.fg, 2.6)
    s.text(tip[0] - 4, tip[1] - 12, "g", t.fg, italic=True, weight="bold", size=22, anchor="middle")
    s.text((tip[0] + mid[0]) / 2 + 8, (tip[1] + mid[1]) / 2 + 8, "1", t.bad, size=21, weight="bold")
    s.arrow(*cam(xh), *end, t.ln, 3.4)
    s.text(end[0] - 4, end[1] + 32, "Pg", t.ln, weight="bold", size=22, anchor="middle")
    s.text(450, 442, "P = I − 11ᵀ/d − x̂x̂ᵀ/d", t.fg, anchor="middle", size=22)
    s.text(300, 474, "input gradient x̄ = r · Pg,  r = 1/rms", t.muted, anchor="middle", size=21)
    return s


# ------------------------------------------------------------------------------------------------
# e. warp-shuffle butterfly reduction
# ------------------------------------------------------------------------------------------------
def warp_reduce(t: Theme) -> Svg:
    lanes, masks = 32, (16, 8, 4, 2, 1)
    s = Svg(600, 550, "Butterfly reduction of 32 lanes with __shfl_xor_sync",
            "Rows are the five steps of a warp reduction, columns the 32 lanes. In the step with mask m every "
            "lane i reads the value of lane i XOR m (lines) and adds it to its own (vertical lines); masks "
            "16, 8, 4, 2, 1. After five steps every lane holds the sum of all 32 values, without shared "
            "memory or a barrier. The highlighted lines are the values that end up in lane 0: its set of "
            "inputs doubles at each step. A shfl_down reduction uses the same offsets but only lane 0 ends "
            "with the full sum.", t)
    left, right = 56, 576
    step = (right - left) / (lanes - 1)
    y0, dy = 86, 70
    xs = [left + i * step for i in range(lanes)]
    s.text(300, 32, "v += __shfl_xor_sync(0xffffffff, v, m)", t.fg, size=21, anchor="middle", mono=True)
    s.text(8, y0 - 14, "m", t.muted, size=21, italic=True)
    # lanes contributing to lane 0's final value, walked back from the last step
    needed = [set() for _ in range(len(masks) + 1)]
    needed[len(masks)] = {0}
    for k in range(len(masks) - 1, -1, -1):
        needed[k] = needed[k + 1] | {i ^ masks[k] for i in needed[k + 1]}
    for k, m in enumerate(masks):
        ya, yb = y0 + k * dy, y0 + (k + 1) * dy
        s.text(8, (ya + yb) / 2 + 8, str(m), t.fg, size=22)
        for i in range(lanes):
            hot = i in needed[k + 1]
            for src in (i, i ^ m):
                if hot:
                    continue
                s.line(xs[src], ya, xs[i], yb, t.muted, 1.0, opacity=0.55)
        for i in range(lanes):
            if i in needed[k + 1]:
                for src in (i, i ^ m):
                    s.line(xs[src], ya, xs[i], yb, t.rms, 2.4)
    for k in range(len(masks) + 1):
        y = y0 + k * dy
        for i in range(lanes):
            s.dot(xs[i], y, t.rms if i in needed[k] else t.muted, 3.6 if i in needed[k] else 2.8)
    yl = y0 + len(masks) * dy + 30
    for i in (0, 8, 16, 24, 31):
        s.text(xs[i], yl, str(i), t.fg, size=21, anchor="middle")
    s.text(300, yl + 36, "lane", t.muted, size=21, anchor="middle")
    s.text(300, yl + 70, "lane 0 gathers 2, 4, 8, 16, 32 values", t.rms, size=21, anchor="middle")
    return s


# ------------------------------------------------------------------------------------------------
# f. two-stage deterministic weight-gradient reduction
# ------------------------------------------------------------------------------------------------
PARTIALS = (1.0e8, 3.0, -1.0e8, 2.0)   # float32 partial sums of one column, one per row block


def _f32_sum(values, order) -> float:
    acc = np.float32(0.0)
    for i in order:
        acc = np.float32(acc + np.float32(values[i]))
    return float(acc)


def _short(v: float) -> str:
    """1e8 instead of 1e+08, a true minus sign, integers without a decimal point."""
    if v == int(v) and abs(v) < 1e6:
        txt = str(int(v))
    else:
        mant, exp = f"{v:.0e}".split("e")
        txt = f"{mant}e{int(exp)}"
    return txt.replace("-", "−")


def dweight_reduction(t: Theme) -> Svg:
    fixed = _f32_sum(PARTIALS, (0, 1, 2, 3))
    other = _f32_sum(PARTIALS, (2, 0, 3, 1))
    exact = float(sum(Fraction(v) for v in PARTIALS))
    if fixed == other:
        raise ValueError("the example partials must show that float32 addition depends on the order")
    vals = ", ".join(_short(v) for v in PARTIALS)
    s = Svg(600, 580, "Deterministic two-stage reduction of the weight gradient",
            "The weight gradient of a norm is a column sum over all rows, dγ_j = Σ_i ȳ_ij x̂_ij. Stage 1: "
            "each thread block sums its own block of rows into one float32 partial row, written to its own "
            "slot of a buffer. Stage 2: one pass adds the partials of each column in the fixed order block "
            "0, 1, 2, 3, so every run gives the same bits. With atomicAdd the blocks add into dγ in whatever "
            "order they finish; float32 addition is not associative, so the result can change from run to "
            f"run. Example: the partials {vals} (exact sum {_short(exact)}) summed in float32 in the order "
            f"0, 1, 2, 3 give {_short(fixed)}, in the order 2, 0, 3, 1 give {_short(other)}. A fixed order makes "
            "the result reproducible, not more accurate.", t)
    blocks, cols = 4, 6
    gx, gy, cw, rh = 24, 96, 26, 12
    rows_per_block = 3
    s.text(300, 34, "dγ = column sums of ȳ ⊙ x̂ over all rows", t.fg, size=22, anchor="middle")
    colors = [t.rms, t.ln, t.good, t.bn]
    block_h = rows_per_block * rh + 10
    for bi in range(blocks):
        for r in range(rows_per_block):
            y = gy + bi * block_h + r * rh
            s.rect(gx, y, cols * cw, rh, t.muted, 0.8, fill=colors[bi], fill_opacity=0.35, rx=0)
        s.text(gx + cols * cw + 8, gy + bi * block_h + 26, f"block {bi}", t.fg, size=21)
    s.text(gx, gy - 14, "rows", t.muted, size=21)
    px, py, ph, pgap = 380, 96, 26, 12
    s.text(px, py - 14, "fp32 partials", t.muted, size=21)
    s.text(300, 76, "stage 1", t.fg, size=21, anchor="middle", weight="bold")
    for bi in range(blocks):
        y = py + bi * (ph + pgap)
        s.rect(px, y, cols * 32, ph, colors[bi], 2, fill=colors[bi], fill_opacity=0.3, rx=3)
        for c in range(1, cols):
            s.line(px + 32 * c, y, px + 32 * c, y + ph, colors[bi], 1)
        src_y = gy + bi * block_h + rows_per_block * rh / 2
        s.arrow(gx + cols * cw + 94, src_y, px - 6, y + ph / 2, t.muted, 1.8, head=10)
    ry = py + blocks * (ph + pgap) + 44
    s.arrow(px + 96, py + blocks * (ph + pgap) - 6, px + 96, ry - 4, t.fg, 2.2)
    s.text(px + 86, ry - 16, "stage 2", t.fg, size=21, anchor="end", weight="bold")
    s.rect(px, ry, cols * 32, ph, t.fg, 2.2, fill=t.tint, fill_opacity=0.25, rx=3)
    for c in range(1, cols):
        s.line(px + 32 * c, ry, px + 32 * c, ry + ph, t.fg, 1)
    s.text(px - 10, ry + 20, "dγ", t.fg, size=22, anchor="end", weight="bold")
    s.text(24, 330, "fixed order 0, 1, 2, 3:", t.fg, size=21)
    s.text(24, 360, "same bits every run", t.good, size=21, weight="bold")
    s.line(20, 384, 580, 384, t.muted, 1, dash="3 6")
    s.text(300, 418, "atomicAdd: blocks add as they finish", t.fg, size=22, anchor="middle", weight="bold")
    s.text(300, 452, f"partials {vals} (exact sum {_short(exact)})", t.fg, size=21, anchor="middle", mono=True)
    s.text(300, 488, f"order 0,1,2,3 → {_short(fixed)}", t.fg, size=21, anchor="middle", mono=True)
    s.text(300, 520, f"order 2,0,3,1 → {_short(other)}", t.fg, size=21, anchor="middle", mono=True)
    s.text(300, 558, "float32 + is not associative", t.bad, size=21, anchor="middle")
    return s


# ------------------------------------------------------------------------------------------------
# g. fused residual add + norm
# ------------------------------------------------------------------------------------------------
FUSE_TOKENS, FUSE_HIDDEN, FUSE_BYTES = 4096, 4096, 2   # bf16 activations


def fused_residual(t: Theme) -> Svg:
    mib = FUSE_TOKENS * FUSE_HIDDEN * FUSE_BYTES / 2**20
    unfused = {"add": (("x", "residual"), ("h",)), "norm": (("h",), ("y",))}
    fused = {"add + norm": (("x", "residual"), ("h", "y"))}
    n_unfused = sum(len(r) + len(w) for r, w in unfused.values())
    n_fused = sum(len(r) + len(w) for r, w in fused.values())
    s = Svg(600, 560, "Fused residual add and norm: fewer bytes through memory",
            "Unfused, one kernel computes h = x + residual and writes h, and a second kernel reads h back to "
            f"compute y = norm(h): {n_unfused} tensor-sized transfers. Fused, one kernel reads x and the residual "
            f"once, keeps h in registers to normalize it, and writes h (the next residual) and y: {n_fused} "
            f"transfers. For {FUSE_TOKENS} tokens of hidden size {FUSE_HIDDEN} in bf16 each tensor is "
            f"{mib:g} MiB: {n_unfused * mib:g} MiB against {n_fused * mib:g} MiB, {n_fused}/{n_unfused} of the "
            "traffic (the gain vector is negligible). For a memory-bound kernel time follows bytes.", t)

    def tensor(x, y, label, color):
        s.rect(x, y, 110, 40, color, 2, fill=color, fill_opacity=0.14, rx=20)
        s.text(x + 55, y + 27, label, t.fg, anchor="middle", size=22)

    def kernel(x, y, w, label):
        s.rect(x, y, w, 48, t.fg, 2.2, fill=t.tint, fill_opacity=0.2, rx=4)
        s.text(x + w / 2, y + 31, label, t.fg, anchor="middle", size=22, weight="bold")

    s.text(20, 36, f"unfused: 2 kernels, {n_unfused} transfers", t.bad, size=22, weight="bold")
    tensor(20, 60, "x", t.rms)
    tensor(20, 120, "residual", t.rms)
    kernel(175, 86, 90, "add")
    tensor(315, 90, "h", t.ln)
    kernel(175, 176, 90, "norm")
    tensor(315, 180, "y", t.good)
    s.arrow(130, 80, 175, 102, t.muted, 2)
    s.arrow(130, 140, 175, 120, t.muted, 2)
    s.arrow(265, 110, 315, 110, t.muted, 2)
    s.path("M370 130 L370 150 L220 150 L220 172", t.muted, 2)
    s.arrow(220, 160, 220, 176, t.muted, 2)
    s.arrow(265, 200, 315, 200, t.muted, 2)
    s.text(440, 146, "h read back", t.bad, size=21, anchor="start")

    s.text(20, 278, f"fused: 1 kernel, {n_fused} transfers", t.good, size=22, weight="bold")
    tensor(20, 300, "x", t.rms)
    tensor(20, 360, "residual", t.rms)
    kernel(175, 326, 150, "add + norm")
    tensor(375, 300, "h", t.ln)
    tensor(375, 360, "y", t.good)
    s.arrow(130, 320, 175, 342, t.muted, 2)
    s.arrow(130, 380, 175, 360, t.muted, 2)
    s.arrow(325, 342, 375, 320, t.muted, 2)
    s.arrow(325, 360, 375, 380, t.muted, 2)
    s.text(250, 404, "h stays in registers", t.muted, size=21, anchor="middle")
    # bytes bars
    scale = 400 / (n_unfused * mib)
    for k, (label, n_t, color) in enumerate([("unfused", n_unfused, t.bad), ("fused", n_fused, t.good)]):
        y = 440 + k * 54
        s.rect(130, y, scale * n_t * mib, 34, color, 2, fill=color, fill_opacity=0.3, rx=3)
        s.text(120, y + 25, label, t.fg, size=21, anchor="end")
        s.text(140, y + 25, f"{n_t * mib:g} MiB", t.fg, size=21)
    s.text(300, 550, f"{FUSE_TOKENS}×{FUSE_HIDDEN} bf16: {mib:g} MiB per tensor", t.muted, size=21,
           anchor="middle")
    return s


# ------------------------------------------------------------------------------------------------
# g2. one row, two passes: what moves between memory, cache and registers
# ------------------------------------------------------------------------------------------------
ROW_D = 4096
ROW_BYTES = 4          # float32


def row_passes(t: Theme) -> Svg:
    kib = ROW_D * ROW_BYTES / 1024
    s = Svg(600, 560, "One RMSNorm row, two passes: what moves where",
            f"Pass 1 loads the row of x from memory, squares and adds it in vector registers, and leaves the row "
            f"in the cache ({ROW_D} float32 values are {kib:g} KiB). The reciprocal square root r is computed once. "
            "Pass 2 loads the row again, now from the cache, multiplies by r and the gain, and stores y to memory. "
            "Memory sees one read and one write of the row; the second read costs no memory traffic.", t)

    def box(x, y, w, h, label, color):
        s.rect(x, y, w, h, color, 2, fill=color, fill_opacity=0.1, rx=8)
        s.text(x + w / 2, y + 28, label, color, anchor="middle", size=22, weight="bold")

    box(15, 60, 170, 390, "memory", t.muted)
    box(215, 60, 170, 390, "cache", t.muted)
    box(415, 60, 170, 390, "registers", t.muted)
    s.text(300, 36, f"d = {ROW_D}, float32: a row is {kib:g} KiB", t.fg, anchor="middle", size=22)

    def chip(x, y, label, color):
        s.rect(x, y, 130, 40, color, 2, fill=color, fill_opacity=0.18, rx=20)
        s.text(x + 65, y + 27, label, t.fg, anchor="middle", size=22)

    chip(35, 110, "row of x", t.rms)
    chip(235, 110, "row of x", t.rms)
    chip(435, 110, "sum of x²", t.ln)
    chip(435, 230, "r", t.ln)
    chip(35, 365, "row of y", t.good)
    s.text(290, 190, "pass 1", t.fg, anchor="middle", size=22, weight="bold")
    s.arrow(165, 130, 235, 130, t.rms, 2.5)
    s.arrow(365, 130, 435, 130, t.rms, 2.5)
    s.arrow(500, 150, 500, 230, t.ln, 2.5)
    s.text(510, 200, "rsqrt", t.fg, size=21)
    s.text(340, 300, "pass 2", t.fg, anchor="end", size=22, weight="bold")
    s.path("M350 150 L350 350", t.rms, 2.5, dash="6 4")
    s.arrow(350, 350, 435, 350, t.rms, 2.5, dash="6 4")
    s.arrow(500, 270, 500, 330, t.ln, 2.5)
    chip(435, 330, "x · r · γ", t.good)
    s.arrow(435, 385, 165, 385, t.good, 2.5)
    s.text(300, 420, "second read", t.muted, anchor="middle", size=21)
    s.text(300, 443, "hits the cache", t.muted, anchor="middle", size=21)
    # memory traffic of the row
    s.text(20, 492, "memory traffic per row", t.fg, size=22, weight="bold")
    scale = 200 / (2 * kib)
    s.rect(20, 506, scale * kib, 34, t.rms, 2, fill=t.rms, fill_opacity=0.3, rx=3)
    s.rect(20 + scale * kib, 506, scale * kib, 34, t.good, 2, fill=t.good, fill_opacity=0.3, rx=3)
    s.text(235, 531, f"{kib:g} KiB in, {kib:g} KiB out", t.fg, size=21)
    return s


# ------------------------------------------------------------------------------------------------
# h. Newton step for rsqrt
# ------------------------------------------------------------------------------------------------
NEWTON_A = 2.0
NEWTON_Y0 = 0.5


def newton_step(y: float, a: float) -> float:
    """One Newton step on f(y) = 1/y^2 - a: y - f/f' = y (1.5 - 0.5 a y^2)."""
    return y * (1.5 - 0.5 * a * y * y)


def newton(t: Theme) -> Svg:
    a, y0 = NEWTON_A, NEWTON_Y0
    y1 = newton_step(y0, a)
    y2 = newton_step(y1, a)
    root = 1 / math.sqrt(a)
    # the same step written as Newton's y - f/f', to be sure the closed form is the tangent's zero
    f = lambda y: 1 / y**2 - a          # noqa: E731
    fp = lambda y: -2 / y**3            # noqa: E731
    if abs((y0 - f(y0) / fp(y0)) - y1) > 1e-12:
        raise ValueError("closed form of the Newton step disagrees with y - f/f'")
    rel = lambda y: (y - root) / root    # noqa: E731
    s = Svg(600, 500, "Newton's method for the reciprocal square root",
            f"The curve f(y) = 1/y² − a for a = {a:g}; its zero is y = 1/√a = {root:.4f}. Newton's step "
            "follows the tangent at the current guess down to the axis: y1 = y0 − f(y0)/f'(y0) = "
            f"y0 (1.5 − 0.5 a y0²). From y0 = {y0:g} (relative error {rel(y0):.1%}) it gives y1 = {y1:.4f} "
            f"({rel(y1):.1%}) and y2 = {y2:.4f} ({rel(y2):.2%}): the error roughly squares at every step. "
            "The step needs only multiplications, no division or square root. f is convex, so from below the "
            "root the iterates stay below it and increase towards it.", t)
    # plot area
    X0, X1, Y0, Y1 = 70, 585, 60, 400       # pixel box
    ylo, yhi, flo, fhi = 0.4, 0.86, -0.9, 4.6

    def P(y, fv):
        return X0 + (y - ylo) / (yhi - ylo) * (X1 - X0), Y1 - (fv - flo) / (fhi - flo) * (Y1 - Y0)

    zx, zy = P(ylo, 0)
    s.arrow(X0, zy, X1 + 8, zy, t.muted, 1.6, head=10)      # y axis (horizontal)
    s.arrow(X0, Y1, X0, Y0 - 14, t.muted, 1.6, head=10)     # f axis
    s.text(X1 + 4, zy + 30, "y", t.fg, italic=True, anchor="end")
    s.text(X0 + 10, Y0 - 4, "f(y)", t.fg, italic=True)
    for fv in (0, 2, 4):
        _, py = P(ylo, fv)
        s.line(X0 - 5, py, X0 + 5, py, t.muted, 1.5)
        s.text(X0 - 10, py + 7, str(fv), t.fg, size=21, anchor="end")
    # curve, clipped to the box
    pts = []
    for k in range(241):
        y = ylo + (yhi - ylo) * k / 240
        fv = f(y)
        if flo <= fv <= fhi:
            pts.append(P(y, fv))
    s.poly(pts, t.rms, 3)
    # tangents
    for yk, yn, lab in ((y0, y1, "0"), (y1, y2, "1")):
        px, py = P(yk, f(yk))
        qx, qy = P(yn, 0)
        ext = P(yn + 0.35 * (yn - yk), 0 + fp(yk) * 0.35 * (yn - yk))
        s.line(px, py, *ext, t.ln, 2.2)
        s.line(px, py, px, zy, t.muted, 1.5, dash="4 5")
        s.dot(px, py, t.ln, 5)
    for yk, lab, dyl in ((y0, "y₀", 34), (y1, "y₁", 34), (y2, "y₂", 34)):
        px, _ = P(yk, 0)
        s.dot(px, zy, t.fg, 4.5)
        s.text(px, zy + dyl, lab, t.fg, anchor="middle", size=22)
    rx_, _ = P(root, 0)
    s.dot(rx_, zy, t.good, 5.5)
    s.text(rx_ + 40, zy - 12, "1/√a", t.good, size=22, anchor="start")
    # numbers
    lx, ly = 300, 110
    s.text(lx, ly, f"a = {a:g},  1/√a = {root:.4f}", t.fg, size=21)
    for k, (lab, v, digits) in enumerate((("y₀", y0, 1), ("y₁", y1, 1), ("y₂", y2, 2))):
        err = f"{rel(v):+.{digits}%}".replace("-", "−")
        s.text(lx, ly + 32 * (k + 1), f"{lab} = {v:.4f}  ({err})", t.fg, size=21)
    s.text(300, 452, "f(y) = 1/y² − a", t.rms, size=22, anchor="middle")
    s.text(300, 488, "y₁ = y₀ (1.5 − 0.5 a y₀²)", t.ln, size=22, anchor="middle", weight="bold")
    return s


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


if __name__ == "__main__":
    main()
