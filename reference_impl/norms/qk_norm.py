"""QK-norm: RMSNorm on the query and key projections before attention, as each family applies it.

- per head, over ``head_dim``, one ``(head_dim,)`` gain shared by the heads: Qwen3 (llama order) and
  Gemma 3 (the ``(1 + w)`` gain), transformers models/qwen3/modeling_qwen3.py and models/gemma3;
- over the whole projection, a gain as wide as it: OLMo 2 (models/olmo2/modeling_olmo2.py).

The math is here: :func:`qk_norm` (returns ``(q_normed, k_normed)``), built on the families' RMSNorm
(:func:`reference_impl.norms.rms_norm.convention_rms_norm`); ``reference_impl.variants.qk_norm`` is the
same function.
"""
from __future__ import annotations

import numpy as np
import torch

from .. import tolerances as _tol
from .._checks import check_input
from .rms_norm import convention_rms_norm


QK_PLACEMENTS = ("per_head", "full")


# --8<-- [start:qk_norm]
def qk_norm(q, k, q_weight, k_weight, head_dim, eps=1e-6, *, placement="per_head", convention="llama"):
    """RMSNorm on the query and key projections before attention (QK-norm).

    ``q``: ``(..., n_q_heads * head_dim)``, ``k``: ``(..., n_kv_heads * head_dim)``, as the projections
    return them. ``placement="per_head"``: each head's ``head_dim`` features get their own RMS and one
    shared ``(head_dim,)`` gain (Qwen3, Gemma 3). ``placement="full"``: one RMS over the whole projection
    and a gain as wide as it (OLMo 2). Returns ``(q_normed, k_normed)`` in the input shapes.
    """
    if placement not in QK_PLACEMENTS:
        raise ValueError(f"placement must be 'per_head' or 'full', got {placement!r}")
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 1:
        raise ValueError(f"head_dim must be a positive int, got {head_dim!r}")
    out = []
    for t, w, name in ((q, q_weight, "q"), (k, k_weight, "k")):
        check_input(t, name)
        if t.shape[-1] % head_dim:
            raise ValueError(f"{name}'s last dimension {t.shape[-1]} is not a multiple of head_dim={head_dim}")
        if placement == "per_head":
            heads = t.view(*t.shape[:-1], t.shape[-1] // head_dim, head_dim)
            out.append(convention_rms_norm(heads, w, eps, convention=convention).reshape(t.shape))
        else:
            out.append(convention_rms_norm(t, w, eps, convention=convention))
    return out[0], out[1]
# --8<-- [end:qk_norm]


# ------------------------------------------------------------------ the catalog entry
from .spec import BadInput, Impl, NormSpec, set_param, replace_input, gain, randn

HEAD_DIM = 3


def _inputs(placement, around):
    def make(shape, dtype, g):
        nq = shape[-1] // HEAD_DIM
        nk = max(1, nq // 2)
        wq = HEAD_DIM if placement == "per_head" else nq * HEAD_DIM
        wk = HEAD_DIM if placement == "per_head" else nk * HEAD_DIM
        return {"q": randn(shape, dtype, g, 2.0), "k": randn(shape[:-1] + (nk * HEAD_DIM,), dtype, g, 2.0),
                "q_weight": gain(wq, dtype, g, around), "k_weight": gain(wk, dtype, g, around)}
    return make


def _one(t, w, head_dim, eps, placement, convention):
    w = 1.0 + w if convention == "gemma" else w
    v = t.reshape(*t.shape[:-1], t.shape[-1] // head_dim, head_dim) if placement == "per_head" else t
    return (v / np.sqrt(np.mean(v * v, -1, keepdims=True) + eps) * w).reshape(t.shape)


def _oracle(q, k, q_weight, k_weight, head_dim, eps, placement, convention):
    return (_one(q, q_weight, head_dim, eps, placement, convention),
            _one(k, k_weight, head_dim, eps, placement, convention))


def _bound(inputs, params):
    out = []
    for t, w in ((inputs["q"], inputs["q_weight"]), (inputs["k"], inputs["k_weight"])):
        v = t.reshape(*t.shape[:-1], t.shape[-1] // params["head_dim"], params["head_dim"]) if params["placement"] == "per_head" else t
        out.append(_tol.convention_forward_bound(v, w, params["eps"], params["convention"]).reshape(t.shape))
    return tuple(out)


def _reference(q, k, q_weight, k_weight, head_dim, eps, placement, convention):
    return qk_norm(q, k, q_weight, k_weight, head_dim, eps, placement=placement, convention=convention)


def _twin(q, k, q_weight, k_weight, head_dim, eps, placement, convention):
    def one(t, w):
        w = 1.0 + w if convention == "gemma" else w
        v = t.reshape(*t.shape[:-1], t.shape[-1] // head_dim, head_dim) if placement == "per_head" else t
        return (v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps) * w).reshape(t.shape)
    return one(q, q_weight), one(k, k_weight)


def _fused(q, k, q_weight, k_weight, head_dim, eps, placement, convention):
    """The native op ``fused_qk_norm`` on (..., heads, head_dim) views of q and k."""
    from ..ops import fused_qk_norm

    def one(t, w):
        heads = t.shape[-1] // head_dim
        return fused_qk_norm(t.reshape(*t.shape[:-1], heads, head_dim), w, eps, convention=convention).reshape(t.shape)
    return one(q, q_weight), one(k, k_weight)


def _fused_bound(inputs, params):
    # the native op returns x's dtype whatever the weight's: bound the order with w in x's dtype
    out = []
    for t, w in ((inputs["q"], inputs["q_weight"]), (inputs["k"], inputs["k_weight"])):
        v = t.reshape(*t.shape[:-1], t.shape[-1] // params["head_dim"], params["head_dim"])
        out.append(_tol.convention_forward_bound(v, w, params["eps"], params["convention"], x_dtype=t.dtype,
                                                 w_dtype=t.dtype).reshape(t.shape))
    return tuple(out)


def _bad():
    return (
        BadInput("q not a tensor", replace_input("q", lambda q: q.tolist()), TypeError, "torch.Tensor"),
        BadInput("integer k", replace_input("k", lambda k: k.to(torch.int32)), TypeError, "dtype"),
        BadInput("q width not a multiple of head_dim", replace_input("q", lambda q: q[..., :-1]), ValueError, "multiple of head_dim"),
        BadInput("unknown placement", set_param("placement", "diagonal"), ValueError, "placement"),
        BadInput("head_dim of zero", set_param("head_dim", 0), ValueError, "head_dim"),
        BadInput("negative eps", set_param("eps", -1.0), ValueError, "eps"),
    )


def _spec(name, title, placement, convention, families, source):
    return NormSpec(
        name=name, title=title, source=source, reference=_reference, oracle=_oracle, bound=_bound,
        make_inputs=_inputs(placement, 0.0 if convention == "gemma" else 1.0),
        params={"head_dim": HEAD_DIM, "eps": 1e-6, "placement": placement, "convention": convention},
        conventions=(convention, placement), families=families,
        shapes=((0, 6), (1, 3), (3, 9), (2, 3, 33), (4, 129)),
        grads=("q", "k", "q_weight", "k_weight"), float64_exact=False, grad_twin=_twin, bad_inputs=_bad(),
        implementations=({"fused_qk_norm (CPU)": Impl(_fused, "cpu", bound=_fused_bound)}
                         if placement == "per_head" and convention in ("llama", "gemma") else {}),
    )


SPECS = (
    _spec("qk_norm.per_head", "QK-norm per head over head_dim (Qwen3)", "per_head", "llama", ("Qwen3",),
          "transformers, models/qwen3/modeling_qwen3.py (q_norm, k_norm over head_dim)"),
    _spec("qk_norm.per_head_gemma", "QK-norm per head with the (1 + w) gain (Gemma 3)", "per_head", "gemma",
          ("Gemma 3",), "transformers, models/gemma3/modeling_gemma3.py (q_norm, k_norm over head_dim)"),
    _spec("qk_norm.full", "QK-norm over the whole projection (OLMo 2)", "full", "olmo2", ("OLMo 2",),
          "transformers, models/olmo2/modeling_olmo2.py (q_norm over num_heads * head_dim)"),
)
