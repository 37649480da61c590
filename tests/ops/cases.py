"""Inputs shared by the op test modules: one way to draw a LayerNorm case, so every backend sees the same."""
from __future__ import annotations

import torch

# which dtype the weight and the bias get in each parameter mode ("mixed": weight in x's dtype, bias float32)
WEIGHT_DTYPE = {"none": None, "same": "x", "f32": torch.float32, "mixed": "x"}
BIAS_DTYPE = {"none": None, "same": "x", "f32": torch.float32, "mixed": torch.float32}


def layer_norm_case(shape, dtype, pmode: str, seed: int):
    """(x, dy, weight, bias) for a LayerNorm test: x with mean 3 and std 2, so centring matters; weight near 1
    and bias near 0, in the dtypes ``pmode`` names; drawn in float64 from a seeded generator, then rounded."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=g, dtype=torch.float64) * 2 + 3).to(dtype)
    dy = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    d = shape[-1]

    def resolve(kind):
        return dtype if kind == "x" else kind

    wdt, bdt = resolve(WEIGHT_DTYPE[pmode]), resolve(BIAS_DTYPE[pmode])
    w = None if wdt is None else (1 + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)).to(wdt)
    b = None if bdt is None else (0.3 * torch.randn(d, generator=g, dtype=torch.float64)).to(bdt)
    return x, dy, w, b
