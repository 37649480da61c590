"""Two gain-free norms with "L2" in their name: nGPT's L2 normalization (unit length) and Llama 4's
``Llama4TextL2Norm`` (unit RMS, despite the name).

- nGPT (Loshchilov, Hsieh, Sun, Ginsburg, arXiv:2410.01131) keeps hidden states and weight vectors on the
  unit hypersphere: each vector is divided by its Euclidean length, so its norm is 1 (its RMS is
  ``1 / sqrt(d)``). :func:`l2_norm` is ``x / max(||x||_2, eps)`` over the last dimension, no gain.
- Llama 4 calls its query/key norm ``Llama4TextL2Norm``, yet (transformers,
  models/llama4/modeling_llama4.py) it computes ``x * rsqrt(mean(x**2) + eps)`` in float32 and casts back:
  an RMSNorm without gain, unit RMS rather than unit length (a row of ``d`` features ends with length
  ``sqrt(d)``, not 1). It is applied per head after the rotary embedding. The attention layer builds it as
  ``Llama4TextL2Norm(config.rms_norm_eps)``, so its eps is the config's (``Llama4TextConfig`` default 1e-5),
  never the class's own default of 1e-6. :func:`llama4_l2_norm` replays it operation for operation.

Both are written with plain torch operations, so autograd gives every derivative.
"""
from __future__ import annotations

import numpy as np
import torch

from .._checks import check_eps, check_input, compute_dtype
from ._bounds import rms_like
from .rms_norm import convention_rms_norm
from .spec import NormSpec, common_bad, randn


# Llama4TextConfig's rms_norm_eps default, which the attention layer passes to Llama4TextL2Norm.
LLAMA4_DEFAULT_EPS = 1e-5


# --8<-- [start:l2_norm]
def l2_norm(x, eps=1e-12):
    """``x / max(||x||_2, eps)`` over the last dimension (nGPT's normalization to unit length).

    Computed in float32 (float64 for float64 input), one cast to ``x.dtype``. An all-zero row stays zero.
    """
    check_input(x)
    eps = check_eps(eps)
    xf = x.to(compute_dtype(x))
    return (xf / torch.linalg.vector_norm(xf, dim=-1, keepdim=True).clamp_min(eps)).to(x.dtype)


def llama4_l2_norm(x, eps):
    """Llama 4's ``Llama4TextL2Norm``: ``x * rsqrt(mean(x**2) + eps)`` in float32, cast to ``x.dtype``.

    ``x``: any float tensor ``(..., head_dim)``; the result has its shape and dtype. Despite the name it
    divides by the RMS (unit RMS, length ``sqrt(d)``, not unit length), eps inside the root, and it has no
    gain. ``eps`` has no default on purpose: the model passes ``config.rms_norm_eps`` (1e-5 unless the
    checkpoint's config says otherwise), not the class's default of 1e-6.
    """
    return convention_rms_norm(x, None, eps, convention="llama")
# --8<-- [end:l2_norm]


def _inputs(shape, dtype, g):
    return {"x": randn(shape, dtype, g, 2.0)}


def _l2_oracle(x, eps):
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), eps)


def _l4_oracle(x, eps):
    return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps)


def _l4_twin(x, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


SPECS = (
    NormSpec(
        name="l2_norm", title="L2 normalization to unit length (nGPT)",
        source="Loshchilov, Hsieh, Sun and Ginsburg, nGPT, arXiv:2410.01131",
        reference=l2_norm, oracle=_l2_oracle, make_inputs=_inputs, params={"eps": 1e-12},
        bound=lambda i, p: rms_like(_l2_oracle(i["x"].double().numpy(), **p), i["x"].shape[-1], i["x"].dtype),
        families=("nGPT",), bad_inputs=common_bad(()),
        match_kind="l2", match_run=lambda p: l2_norm(p.x, eps=p.eps), match_rank=4,
        match_description="divides by the Euclidean length, max(||x||, eps): nGPT's L2 normalization",
    ),
    NormSpec(
        name="llama4_l2_norm", title="Llama4TextL2Norm: unit RMS, no gain (Llama 4's QK-norm)",
        source="transformers, models/llama4/modeling_llama4.py (Llama4TextL2Norm)",
        reference=llama4_l2_norm, oracle=_l4_oracle, make_inputs=_inputs, params={"eps": LLAMA4_DEFAULT_EPS},
        bound=lambda i, p: rms_like(_l4_oracle(i["x"].double().numpy(), **p), i["x"].shape[-1], i["x"].dtype,
                                    compute=torch.float32),
        conventions=("llama", "no gain"), families=("Llama 4",), float64_exact=False, grad_twin=_l4_twin,
        bad_inputs=common_bad(()),
        match_kind="l2", match_run=lambda p: llama4_l2_norm(p.x, eps=p.eps), match_rank=3,
        match_description="divides by the RMS in float32 without a gain: Llama 4's L2Norm",
    ),
)
