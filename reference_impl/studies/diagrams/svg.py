"""Drawing primitives of the diagrams: palettes, the SVG writer with its legibility checks, a 3-d camera."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

import numpy as np


REPO = Path(__file__).resolve().parents[3]
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
