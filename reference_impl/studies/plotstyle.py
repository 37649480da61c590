"""One look for every data plot on the site: readable on a phone, a light and a dark variant, legends off the data.

A plot is an SVG shown as an image at most as wide as the article column. Its text shrinks with it, so the
figure is drawn narrow and its text large: at ``WIDTH_IN`` inches and ``FONT_PT`` points, a plot squeezed
into a 360-px phone's column (``PHONE_COLUMN_PX``) still shows its smallest text at 11 px or more, and at
its natural size on a laptop at about 15 px. Text stays text in the SVG (``svg.fonttype = none``), so the
browser tests can measure it.

Use :func:`save` with a function that draws the figure: it is called once per theme under that theme's
colours and writes ``name.svg`` and ``name-dark.svg``. Pages show them with Material's ``#only-light`` and
``#only-dark`` suffixes. :func:`save` refuses a figure whose legend covers an axes' data area.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

from cycler import cycler

WIDTH_IN = 4.6
FONT_PT = 11.5
PHONE_COLUMN_PX = 328          # article width in a 360-px window (Material keeps 0.8 rem = 16 px each side)
MIN_TEXT_PX = 11.0

# colours that read on white and on Material's slate background (#1e2129) alike
CYCLE = ["#3b7dd8", "#e0731f", "#2e9e57", "#c9403a", "#8a63c9", "#9a6b3f", "#d45fa6", "#7f8c8d", "#17a2b8", "#b5a000"]
THEMES = {
    "light": {"text": "#202124", "muted": "#5f6368", "grid": "#d5d8dc", "suffix": ""},
    "dark": {"text": "#e8eaed", "muted": "#aab0b6", "grid": "#454a52", "suffix": "-dark"},
}


def rc(theme: str) -> dict:
    t = THEMES[theme]
    return {
        "svg.fonttype": "none", "svg.hashsalt": "normlab",
        "font.size": FONT_PT, "axes.titlesize": FONT_PT, "axes.labelsize": FONT_PT,
        "xtick.labelsize": FONT_PT, "ytick.labelsize": FONT_PT, "legend.fontsize": FONT_PT,
        "figure.titlesize": FONT_PT, "legend.title_fontsize": FONT_PT,
        "text.color": t["text"], "axes.labelcolor": t["text"], "axes.edgecolor": t["muted"],
        "xtick.color": t["muted"], "ytick.color": t["muted"], "grid.color": t["grid"],
        "axes.titlecolor": t["text"], "legend.frameon": False, "legend.labelcolor": t["text"],
        "axes.prop_cycle": cycler(color=CYCLE),
        "figure.facecolor": "none", "axes.facecolor": "none", "savefig.facecolor": "none",
        "savefig.transparent": True, "figure.constrained_layout.use": True,
    }


def muted(theme: str) -> str:
    """The secondary text colour of a theme (annotations, reference lines)."""
    return THEMES[theme]["muted"]


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def check_legends(fig) -> None:
    """Raises ValueError if a legend lies on an axes' data area (it would hide bars, points or labels) or runs
    past the figure's edge (it would be cut off)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    page = fig.bbox
    for leg in legends:
        box = leg.get_window_extent(renderer)
        if box.x0 < page.x0 - 1 or box.x1 > page.x1 + 1 or box.y0 < page.y0 - 1 or box.y1 > page.y1 + 1:
            raise ValueError("a legend runs past the edge of the figure: use fewer columns or shorter labels")
        for ax in fig.axes:
            if _overlaps(box, ax.get_window_extent(renderer)):
                raise ValueError(f"a legend covers the data area of the axes titled {ax.get_title()!r}: "
                                 "place it outside (fig.legend(loc='outside lower center'))")


def _plain_log_label(value: float, _pos=None) -> str:
    """Tick labels of log axes as plain text ("0.01", "1e-5"): matplotlib's default writes 10 with a raised
    exponent in a smaller font, which would fall below the minimum text size on a phone."""
    if value <= 0:
        return ""
    exp = math.log10(value)
    if abs(exp - round(exp)) > 1e-9:
        return f"{value:g}"
    exp = int(round(exp))
    return f"{value:g}" if -3 <= exp <= 4 else f"1e{exp}"


def plain_log_ticks(fig) -> None:
    """Every log-scaled axis of the figure gets plain tick labels and no minor labels."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    for ax in fig.axes:
        for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
            if scale == "log":
                axis.set_major_formatter(FuncFormatter(_plain_log_label))
                axis.set_minor_formatter(NullFormatter())


def save(draw: Callable[[str], "object"], name: str, out_dir: Path) -> list[str]:
    """Calls ``draw(theme)`` (it returns a matplotlib figure) for each theme and writes the SVGs.

    Returns the file names written, light first."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for theme, t in THEMES.items():
        with matplotlib.rc_context(rc(theme)):
            fig = draw(theme)
            w_in = fig.get_figwidth()
            if w_in > WIDTH_IN + 1e-9:
                plt.close(fig)
                raise ValueError(f"{name}: {w_in} in wide; plots are at most {WIDTH_IN} in so that their text "
                                 f"stays >= {MIN_TEXT_PX} px in a {PHONE_COLUMN_PX}-px column")
            plain_log_ticks(fig)
            check_legends(fig)
            fname = f"{name}{t['suffix']}.svg"
            fig.savefig(out_dir / fname, metadata={"Date": None})
            plt.close(fig)
            written.append(fname)
    return written


def figure(height_in: float, nrows: int = 1, ncols: int = 1, **kw):
    """A figure of the standard width (panels are best stacked: ``nrows`` > 1, ``ncols`` = 1)."""
    import matplotlib.pyplot as plt

    return plt.subplots(nrows, ncols, figsize=(WIDTH_IN, height_in), squeeze=False, **kw)
