"""LayerNorm (Ba, Kiros, Hinton, arXiv:1607.06450): the core reference and two families' orders.

``y = (x - mean) * rsqrt(var + eps) * weight + bias`` with the biased variance. The math lives in
:mod:`reference_impl.reference` and :mod:`reference_impl.conventions`; this module declares it.
"""
from __future__ import annotations

import numpy as np
import torch

from .. import conventions as _cv
from .. import oracle as _oracle
from .. import reference as _ref
from .. import tolerances as _tol
from .spec import Impl, NormSpec, common_bad, gain, randn

FORMULAS = ("ln.forward", "ln.vjp_x", "ln.vjp_weight", "ln.vjp_bias")


def _inputs(shape, dtype, g):
    x = randn(shape, dtype, g, 2.0, 0.0 if dtype == torch.float16 else 3.0)  # an offset: centring must work
    return {"x": x, "weight": randn((shape[-1],), dtype, g, 0.5, 1.0), "bias": randn((shape[-1],), dtype, g, 0.3)}


def _reference(x, weight, bias, eps, convention):
    if convention == "reference":
        return _ref.layer_norm(x, weight, bias, eps)
    return _cv.layer_norm(x, weight, bias, eps, convention=convention)


def _oracle_fn(x, weight, bias, eps, convention):
    return _oracle.layer_norm_forward(x, weight, bias, eps)


def _bound(inputs, params):
    x, w, b = inputs["x"], inputs["weight"], inputs["bias"]
    compute = torch.float32 if (params["convention"] != "reference" and x.dtype == torch.float64) else None
    bound = _tol.ln_forward_bound(x, w, b, params["eps"], x.dtype, compute=compute)
    if compute is not None:  # x rounded to float32 first: u32 |x_i| on x_i, u32 mean|x| on the mean, times |w| r
        xd = x.detach().double().numpy()
        r = 1 / np.sqrt(np.var(xd, -1, keepdims=True) + params["eps"])
        wd = np.abs(w.detach().double().numpy())
        bound = bound + _tol.unit_roundoff(torch.float32) * wd * r * (np.abs(xd) + np.mean(np.abs(xd), -1, keepdims=True))
    return bound


def _twin(x, weight, bias, eps, convention):
    return _ref.layer_norm(x, weight, bias, eps)


def _native(name):
    def run(x, weight, bias, eps, convention):
        from .. import ops

        if name == "triton":
            from ..ops.triton_norm import triton_layer_norm

            return triton_layer_norm(x, weight, bias, eps)
        return ops.fused_layer_norm(x, weight, bias, eps)
    return run


def _spec(convention):
    name = "layer_norm" if convention == "reference" else f"layer_norm.{convention}"
    titles = {"reference": "LayerNorm, the core order (two-pass statistics)",
              "neox": "LayerNorm as torch.nn.LayerNorm computes it (GPT-NeoX, Pythia)",
              "cohere": "LayerNorm, Cohere order (float32 two-pass statistics, gain in float32)"}
    sources = {"reference": "Ba, Kiros and Hinton, arXiv:1607.06450",
               "neox": "transformers, models/gpt_neox/modeling_gpt_neox.py (torch.nn.LayerNorm)",
               "cohere": "transformers, models/cohere/modeling_cohere.py (CohereLayerNorm)"}
    families = {"reference": (), "neox": ("GPT-NeoX / Pythia",), "cohere": ("Cohere (Command R)",)}
    impls = {}
    if convention == "reference":
        impls = {"normlab (CPU)": Impl(_native("normlab"), "cpu"), "normlab (CUDA)": Impl(_native("normlab"), "cuda"),
                 "Triton": Impl(_native("triton"), "cuda")}
    return NormSpec(
        name=name, title=titles[convention], source=sources[convention], reference=_reference,
        oracle=_oracle_fn, bound=_bound, make_inputs=_inputs, params={"eps": 1e-5, "convention": convention},
        formulas=FORMULAS if convention == "reference" else (), conventions=(convention,),
        families=families[convention], implementations=impls, grads=("x", "weight", "bias"),
        float64_exact=convention != "cohere", grad_twin=_twin if convention == "cohere" else None,
        bad_inputs=common_bad(("weight", "bias")),
    )


SPECS = tuple(_spec(c) for c in ("reference",) + _cv.LN_CONVENTIONS)
