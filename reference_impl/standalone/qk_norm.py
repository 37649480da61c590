"""QK-norm: RMSNorm on the query and key projections before attention, in the three ways transformers'
models apply it (models/qwen3/modeling_qwen3.py, models/gemma3/modeling_gemma3.py,
models/olmo2/modeling_olmo2.py). Each function is self-contained: copy one, it needs only torch."""
# --8<-- [start:qwen3_qk_norm]
import torch


def qwen3_qk_norm(q, k, q_weight, k_weight, head_dim, eps=1e-6):
    """Qwen3's QK-norm: each head's head_dim features get their own RMS, in Llama's order (normalize in
    float32, round to the input's dtype, then the shared (head_dim,) gain).

    q: (..., n_q_heads * head_dim), k: (..., n_kv_heads * head_dim), as the projections return them.
    q_weight, k_weight: (head_dim,). eps: inside the root. Returns (q_normed, k_normed) in the input shapes.
    """
    out = []
    for t, w in ((q, q_weight), (k, k_weight)):
        h = t.view(*t.shape[:-1], t.shape[-1] // head_dim, head_dim).to(torch.float32)
        h = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(t.dtype)
        out.append((w * h).reshape(*t.shape[:-1], -1))
    return out[0], out[1]
# --8<-- [end:qwen3_qk_norm]


# --8<-- [start:gemma3_qk_norm]
import torch


def gemma3_qk_norm(q, k, q_weight, k_weight, head_dim, eps=1e-6):
    """Gemma 3's QK-norm: per head, with Gemma's (1 + w) gain applied in float32 and one rounding.

    q: (..., n_q_heads * head_dim), k: (..., n_kv_heads * head_dim). q_weight, k_weight: (head_dim,) stored
    offsets from 1. eps: inside the root. Returns (q_normed, k_normed) in the input shapes and dtypes.
    """
    out = []
    for t, w in ((q, q_weight), (k, k_weight)):
        h = t.view(*t.shape[:-1], t.shape[-1] // head_dim, head_dim).to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w.float())
        out.append(h.to(t.dtype).reshape(t.shape))
    return out[0], out[1]
# --8<-- [end:gemma3_qk_norm]


# --8<-- [start:olmo2_qk_norm]
import torch


def olmo2_qk_norm(q, k, q_weight, k_weight, eps=1e-6):
    """OLMo 2's QK-norm: one RMS over the whole projection (all heads together) and a gain as wide as it,
    applied in float32, one rounding to the input's dtype.

    q: (..., n_q_heads * head_dim), k: (..., n_kv_heads * head_dim). q_weight, k_weight: gains as wide as
    q and k. eps: inside the root. Returns (q_normed, k_normed).
    """
    out = []
    for t, w in ((q, q_weight), (k, k_weight)):
        h = t.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        out.append((w * h).to(t.dtype))
    return out[0], out[1]
# --8<-- [end:olmo2_qk_norm]
