"""ScaleNorm (Nguyen and Salazar, arXiv:1910.05895): ``g * x / max(||x||_2, eps)`` with one scalar gain.
Math: :func:`reference_impl.variants.scale_norm`."""
from __future__ import annotations

import math

import numpy as np
import torch

from .. import variants as _va
from ._bounds import rms_like
from .spec import BadInput, NormSpec, replace_input, common_bad, randn


def _inputs(shape, dtype, g):
    return {"x": randn(shape, dtype, g, 2.0), "g": torch.tensor([math.sqrt(shape[-1])], dtype=dtype)}


def _oracle(x, g, eps):
    return g[0] * x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), eps)


def _bound(inputs, params):
    x = inputs["x"]
    return rms_like(_oracle(x.double().numpy(), inputs["g"].double().numpy(), **params), x.shape[-1], x.dtype)


SPECS = (NormSpec(
    name="scale_norm", title="ScaleNorm: one learned scalar over the unit-length row",
    source="Nguyen and Salazar, arXiv:1910.05895",
    reference=lambda x, g, eps: _va.scale_norm(x, g, eps), oracle=_oracle, bound=_bound, make_inputs=_inputs,
    params={"eps": 1e-2}, grads=("x", "g"),
    bad_inputs=common_bad(())[:4] + (
        BadInput("g with two values", replace_input("g", lambda g: torch.cat([g, g])), ValueError, "exactly one"),
        BadInput("negative eps", lambda i, p: (i, {**p, "eps": -1.0}), ValueError, "eps")),
),)
