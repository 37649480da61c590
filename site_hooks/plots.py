"""``{{ plot("name", "alt text", "caption") }}``: a data plot in its light and dark variants, with a caption.

The measuring commands draw each plot twice (reference_impl/studies/plotstyle.py): ``name.svg`` and
``name-dark.svg`` under docs/data/plots/. The macro shows the one that matches the reader's palette; a missing
variant fails the build with its path.
"""
from __future__ import annotations

import html
import posixpath
from pathlib import Path

from .macros import MacroError, macro

PLOTS = Path(__file__).resolve().parent.parent / "docs" / "data" / "plots"


@macro("plot")
def plot_macro(ctx, name: str, alt: str, caption: str = "") -> str:
    for suffix in ("", "-dark"):
        if not (PLOTS / f"{name}{suffix}.svg").is_file():
            raise MacroError(f"{ctx.src_path}: plot docs/data/plots/{name}{suffix}.svg does not exist "
                             "(its measuring command writes it)")
    rel = posixpath.relpath("data/plots", posixpath.dirname(ctx.src_path) or ".")
    alt = html.escape(alt, quote=True)
    out = ['<figure class="plot" markdown>',
           f"![{alt}]({rel}/{name}.svg#only-light)",
           f"![{alt}]({rel}/{name}-dark.svg#only-dark)"]
    if caption:
        out.append(f'<figcaption markdown="span">{caption}</figcaption>')
    out.append("</figure>")
    return "\n".join(out)
