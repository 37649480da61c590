"""RMSNorm: the core reference and every model family's casting order (arXiv:1910.07467).

``y = x * rsqrt(mean(x**2) + eps) * gain`` over the last dimension. The math lives in
:mod:`reference_impl.reference` (the core order) and :mod:`reference_impl.conventions` (the families'
orders, eps inside or outside the root); this module declares each of them once for the catalog.
"""
from __future__ import annotations

import torch

from .. import conventions as _cv
from .. import oracle as _oracle
from .. import tolerances as _tol
from .spec import Impl, NormSpec, common_bad, gain, randn

FORMULAS = ("rms.forward", "rms.vjp_x", "rms.vjp_weight")


def _inputs(around):
    def make(shape, dtype, g):
        return {"x": randn(shape, dtype, g, 2.0), "weight": gain(shape[-1], dtype, g, around)}
    return make


def _reference(x, weight, eps, convention, eps_placement):
    return _cv.rms_norm(x, weight, eps, convention=convention, eps_placement=eps_placement)


def _oracle_fn(x, weight, eps, convention, eps_placement):
    w = None if weight is None else (1.0 + weight if convention == "gemma" else weight)
    return _oracle.rms_norm_forward_placed(x, w, eps, eps_placement)


def _bound(inputs, params):
    return _tol.convention_forward_bound(inputs["x"], inputs["weight"], params["eps"], params["convention"],
                                         params["eps_placement"])


def _native_bound(inputs, params):
    # the native ops return x's dtype whatever the weight's: bound the llama order with w in x's dtype
    x = inputs["x"]
    return _tol.convention_forward_bound(x, inputs["weight"], params["eps"], params["convention"],
                                         params["eps_placement"], x_dtype=x.dtype, w_dtype=x.dtype)


def _twin(x, weight, eps, convention, eps_placement):
    """The same math computed in float64 (the families compute in float32 even for float64 input)."""
    w = None if weight is None else (1.0 + weight if convention == "gemma" else weight)
    return _cv.rms_norm(x, w, eps, convention="reference", eps_placement=eps_placement)


def _native(name):
    def run(x, weight, eps, convention, eps_placement):
        from .. import ops

        fn = ops.fused_rms_norm
        if name == "triton":
            from ..ops.triton_norm import triton_rms_norm as fn
        return fn(x, weight, eps, convention=convention)
    return run


def _impls(convention):
    if convention not in ("llama", "gemma"):
        return {}
    return {
        "normlab (CPU)": Impl(_native("normlab"), "cpu"),
        "normlab (CUDA)": Impl(_native("normlab"), "cuda"),
        "Triton": Impl(_native("triton"), "cuda"),
    }


_FAMILIES = {
    "reference": (), "torch": ("torch.nn.RMSNorm",),
    "llama": ("Llama", "Mistral", "Mixtral", "Qwen2", "Qwen3", "DeepSeek-V3", "Phi-3", "Mamba-2"),
    "gemma": ("Gemma", "Gemma 2", "Gemma 3", "Qwen3-Next"), "t5": ("T5",), "olmo2": ("OLMo 2",),
}
_TITLES = {
    "reference": "RMSNorm, the core order (float32 statistics and gain, one cast)",
    "llama": "RMSNorm, Llama order (cast before the gain)",
    "gemma": "RMSNorm with the (1 + w) gain of Gemma and Qwen3-Next",
    "t5": "RMSNorm, T5 order (cast to a half weight's dtype)",
    "olmo2": "RMSNorm, OLMo 2 order (gain in float32, one cast)",
    "torch": "RMSNorm as torch.nn.RMSNorm computes it",
}
_SOURCES = {
    "reference": "Zhang and Sennrich, arXiv:1910.07467",
    "llama": "transformers, models/llama/modeling_llama.py (LlamaRMSNorm)",
    "gemma": "transformers, models/gemma/modeling_gemma.py (GemmaRMSNorm); models/qwen3_next/modeling_qwen3_next.py",
    "t5": "transformers, models/t5/modeling_t5.py (T5LayerNorm)",
    "olmo2": "transformers, models/olmo2/modeling_olmo2.py (Olmo2RMSNorm)",
    "torch": "torch.nn.RMSNorm",
}


def _spec(convention, placement="inside"):
    name = "rms_norm" if convention == "reference" else f"rms_norm.{convention}"
    title, source = _TITLES[convention], _SOURCES[convention]
    if placement == "outside":
        name, title = "rms_norm.eps_outside", "RMSNorm with eps outside the root, x / (rms + eps)"
        source = "the RMSNorm authors' code, github.com/bzhangGo/rmsnorm (rmsnorm_torch.py)"
    exact = convention in ("reference", "torch")
    return NormSpec(
        name=name, title=title, source=source, reference=_reference, oracle=_oracle_fn, bound=_bound,
        make_inputs=_inputs(0.0 if convention == "gemma" else 1.0),
        params={"eps": 1e-6, "convention": convention, "eps_placement": placement},
        formulas=FORMULAS if name == "rms_norm" else (), conventions=(convention, f"eps {placement}"),
        families=_FAMILIES[convention] if placement == "inside" else (),
        implementations={k: Impl(v.fn, v.device, v.dtypes, bound=_native_bound) for k, v in _impls(convention).items()}
        if placement == "inside" else {},
        grads=("x", "weight"), float64_exact=exact, grad_twin=None if exact else _twin,
        bad_inputs=common_bad(("weight",)),
    )


SPECS = tuple(_spec(c) for c in _cv.RMS_CONVENTIONS) + (_spec("reference", "outside"),)
