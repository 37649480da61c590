"""``{{ square_edge("overflow") }}``: where float32 squares leave float32's range, computed at build time by
:func:`reference_impl.square_edges` (the function the range tests check), never typed."""
from __future__ import annotations

from .macros import MacroError, macro


@macro("square_edge")
def square_edge_macro(ctx, which: str, fmt: str = ".3g") -> str:
    import torch

    from reference_impl import square_edges

    edges = square_edges(torch.float32)
    if which not in edges:
        raise MacroError(f"{ctx.src_path}: square_edge({which!r}): expected one of {sorted(edges)}")
    return format(edges[which], fmt)
