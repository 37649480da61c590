"""Per-head norms as transformers computes them: the value norm of Gemma 3n / Gemma 4, QK-norms built on
LayerNorm (Persimmon's shared gain; StableLM's, Chameleon's and Cohere's gain per head) and the L2
normalization of q and k in the gated delta rule (Qwen3-Next, Kimi Linear). Each file region is
self-contained: copy it, it needs only torch.

- ``gemma_value_norm``: models/gemma4/modeling_gemma4.py and models/gemma3n/modeling_gemma3n.py (``v_norm``,
  an RMSNorm built with ``with_scale=False``).
- ``persimmon_qk_norm``: models/persimmon/modeling_persimmon.py (``q_layernorm``, ``k_layernorm``).
- ``stablelm_qk_norm``: models/stablelm/modeling_stablelm.py (``StableLmLayerNormPerHead``).
- ``chameleon_qk_norm``: models/chameleon/modeling_chameleon.py (``ChameleonLayerNorm``).
- ``cohere_qk_norm``: models/cohere/modeling_cohere.py (``CohereLayerNorm(hidden_size=(heads, head_dim))``).
- ``qwen3_next_l2norm``, ``kimi_linear_l2norm``: ``l2norm`` in models/qwen3_next/modeling_qwen3_next.py and
  models/kimi_linear/modeling_kimi_linear.py, applied to float32 q and k.
"""
# --8<-- [start:gemma_value_norm]
import torch


def gemma_value_norm(x, eps=1e-6):
    """The value norm of Gemma 3n and Gemma 4: each head of the values divided by its RMS, no gain.

    x: (..., head_dim), the values viewed per head (float64 is computed in float32, as the model does).
    eps: added to the mean square. Returns x's shape and dtype, one rounding from float32.
    """
    xf = x.to(torch.float32)
    return (xf * torch.pow(xf.pow(2).mean(-1, keepdim=True) + eps, -0.5)).to(x.dtype)
# --8<-- [end:gemma_value_norm]


# --8<-- [start:persimmon_qk_norm]
import torch


def persimmon_qk_norm(q, k, q_weight, q_bias, k_weight, k_bias, eps=1e-5):
    """QK-norm with LayerNorm (Persimmon, Fuyu): torch's layer_norm over head_dim, one (head_dim,) gain and
    bias for all the heads of q and one for those of k.

    q, k: (..., heads, head_dim). Returns (q_normed, k_normed) in their shapes and dtypes.
    """
    d = q.shape[-1]
    return (torch.nn.functional.layer_norm(q, (d,), q_weight, q_bias, eps),
            torch.nn.functional.layer_norm(k, (d,), k_weight, k_bias, eps))
# --8<-- [end:persimmon_qk_norm]


# --8<-- [start:stablelm_qk_norm]
import torch


def stablelm_qk_norm(x, weight, bias=None, eps=1e-5):
    """QK-norm with one LayerNorm per head (StableLM): head h gets layer_norm with gain weight[h] and bias
    bias[h] (StableLM builds it without a bias).

    x: (..., heads, head_dim). weight, bias: (heads, head_dim). Returns x's shape and dtype.
    """
    d = x.shape[-1]
    return torch.stack([torch.nn.functional.layer_norm(x[..., h, :], (d,), weight[h],
                                                       None if bias is None else bias[h], eps)
                        for h in range(x.shape[-2])], dim=-2)
# --8<-- [end:stablelm_qk_norm]


# --8<-- [start:chameleon_qk_norm]
import torch


def chameleon_qk_norm(x, weight, bias):
    """QK-norm with a gain and bias per head applied after the LayerNorm (Chameleon): layer_norm without
    affine over head_dim with eps 1e-5 (the model fixes it), rounded to x's dtype, then * weight + bias.

    x: (..., heads, head_dim). weight, bias: (heads, head_dim). Returns promote(x, weight, bias).
    """
    return torch.nn.functional.layer_norm(x, x.shape[-1:], None, None, 1e-5) * weight + bias
# --8<-- [end:chameleon_qk_norm]


# --8<-- [start:cohere_qk_norm]
import torch


def cohere_qk_norm(x, weight, eps=1e-5):
    """QK-norm of Cohere models built with use_qk_norm: LayerNorm over head_dim with float32 two-pass
    statistics and a (heads, head_dim) gain applied in float32, one rounding to x's dtype. No bias.

    x: (..., heads, head_dim). weight: (heads, head_dim). Returns x's shape and dtype.
    """
    xf = x.to(torch.float32)
    xc = xf - xf.mean(-1, keepdim=True)
    return (weight.to(torch.float32) * (xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + eps))).to(x.dtype)
# --8<-- [end:cohere_qk_norm]


# --8<-- [start:qwen3_next_l2norm]
import torch


def qwen3_next_l2norm(x, eps=1e-6):
    """q or k of Qwen3-Next's gated delta rule: x * rsqrt(sum(x**2) + eps) over head_dim, in float32.

    x: (..., head_dim), any float dtype (cast to float32 first, as the model does). Returns float32.
    """
    xf = x.to(torch.float32)
    return xf * torch.rsqrt((xf * xf).sum(-1, keepdim=True) + eps)
# --8<-- [end:qwen3_next_l2norm]


# --8<-- [start:kimi_linear_l2norm]
import torch


def kimi_linear_l2norm(x, eps=1e-6):
    """q or k of Kimi Linear's gated delta rule: x / sqrt(sum(x**2) + eps) over head_dim, in float32.

    x: (..., head_dim), any float dtype (cast to float32 first, as the model does). Returns float32.
    """
    xf = x.to(torch.float32)
    return xf / torch.sqrt((xf * xf).sum(-1, keepdim=True) + eps)
# --8<-- [end:kimi_linear_l2norm]
