"""Where squaring in float16 overflows and underflows, found by trying every float16 value.

``python -m reference_impl.studies.fp16_limits`` writes ``docs/data/fp16_limits.json`` (under a second):
the largest float16 whose square is finite in float16, the smallest whose square is Inf, and the same two
edges for underflow to zero. A product of two float16 values is exact in float32 (11 + 11 significant bits),
so rounding it once to float16 gives the correctly rounded float16 product that float16 arithmetic returns.
``tests/studies/test_fp16_limits.py`` checks the edges with exact rational arithmetic.
"""
from __future__ import annotations

import sys

import torch

from ..provenance import REPO, finish, python_closure, record, write_json

OUT = REPO / "docs" / "data" / "fp16_limits.json"
COMMAND = "python -m reference_impl.studies.fp16_limits"
SOURCES = python_closure("reference_impl/studies/fp16_limits.py")


def positive_float16() -> torch.Tensor:
    """Every positive finite float16 value, in increasing order (bit patterns 0x0001 to 0x7BFF)."""
    bits = torch.arange(1, 0x7C00, dtype=torch.int32).to(torch.int16)
    return bits.view(torch.float16)


def square_edges() -> dict:
    v = positive_float16()
    sq = v * v                                   # float16 arithmetic: the exact product, rounded once
    finite, zero = torch.isfinite(sq), sq == 0
    largest_finite = v[finite].max()
    smallest_inf = v[~finite].min()
    largest_zero = v[zero].max()
    smallest_nonzero = v[~zero].min()
    return {
        "float16_max": float(torch.finfo(torch.float16).max),
        "float16_smallest_subnormal": float(v[0]),
        "overflow": {
            "largest_finite_square_of": float(largest_finite),
            "its_square": float(largest_finite * largest_finite),
            "smallest_inf_square_of": float(smallest_inf),
        },
        "underflow": {
            "largest_zero_square_of": float(largest_zero),
            "smallest_nonzero_square_of": float(smallest_nonzero),
            "its_square": float(smallest_nonzero * smallest_nonzero),
        },
        "eps_in_float16": {"1e-06": float(torch.tensor(1e-6).half()), "1e-05": float(torch.tensor(1e-5).half())},
        "underflow_row": underflow_row(),
    }


def underflow_row(value: float = 2.0 ** -13, d: int = 128, eps: float = 1e-6) -> dict:
    """A row of ``d`` equal values whose squares underflow to 0 in float16, normalized with its mean square
    formed in float16 and in float32: with eps = 0 the float16 statistic gives x / sqrt(0) = Inf; with a
    typical eps, eps dominates such a row's mean square anyway, and the underflow changes little."""
    x = torch.full((1, d), value, dtype=torch.float16)

    def norm(stat_dtype, e):
        xs = x.to(stat_dtype)
        return (xs * torch.rsqrt(xs.pow(2).mean(-1, keepdim=True) + e)).float()

    y16, y32 = norm(torch.float16, eps), norm(torch.float32, eps)
    return {
        "value": value, "d": d, "eps": eps,
        "eps0_float16_statistics_is_inf": bool(torch.isinf(norm(torch.float16, 0.0)).all()),
        "eps0_float32_statistics": float(norm(torch.float32, 0.0)[0, 0]),
        "float16_statistics": float(y16[0, 0]),
        "float32_statistics": float(y32[0, 0]),
        "relative_difference": float(((y16 - y32).abs() / y32.abs()).max()),
    }


def main(argv=None) -> int:
    prov = record(COMMAND, SOURCES, packages=("torch",))
    payload = {"provenance": finish(prov), **square_edges()}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    write_json(OUT, payload)
    print(f"wrote {OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
