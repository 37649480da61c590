"""A user's RMSNorm in the Gemma 3 order and two subtly wrong variants, as a kernel author might write them:
the functions the "Check your implementation" page checks. Each is ``fn(x, weight, eps) -> y`` with
``weight`` Gemma's stored offset (its gain is ``1 + weight``)."""
# --8<-- [start:user_norms]
import torch


def gemma_rms_norm(x, weight, eps):
    """Right: normalize in float32, multiply by (1 + w) in float32, round once (Gemma 3's order)."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * (1.0 + weight.float())).to(x.dtype)


def rounds_before_gain(x, weight, eps):
    """Wrong: rounds the normalized value to x's dtype before the gain."""
    xf = x.float()
    y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return (y * (1.0 + weight.float())).to(x.dtype)


def eps_outside(x, weight, eps):
    """Wrong: eps added to the RMS, outside the square root."""
    xf = x.float()
    y = xf / (xf.pow(2).mean(-1, keepdim=True).sqrt() + eps)
    return (y * (1.0 + weight.float())).to(x.dtype)
# --8<-- [end:user_norms]


# --8<-- [start:more_norms]
import torch  # again: this part is shown on its own, so it carries its import


def sum_in_half(x, weight, eps):
    """Wrong for Qwen3 (Llama's order): the mean of squares is taken in x's dtype."""
    ms = x.pow(2).mean(-1, keepdim=True)
    return weight * (x.float() * torch.rsqrt(ms.float() + eps)).to(x.dtype)


def blocked_sum(x, weight, eps):
    """Accurate, not bit-identical: the sum of squares in blocks of 16 columns, as a tiled kernel adds."""
    xf = x.float()
    d = x.shape[-1]
    ms = sum(xf[..., i:i + 16].pow(2).sum(-1, keepdim=True) for i in range(0, d, 16)) / d
    return weight * (xf * torch.rsqrt(ms + eps)).to(x.dtype)


def split_by_batch(x, weight, eps):
    """Right row by row, but a batch of 32 rows or more adds the two halves of each row apart (a kernel that
    picks its split by the number of rows): a row's bits depend on its batch."""
    xf = x.float()
    if x.shape[0] >= 32:
        h = x.shape[-1] // 2
        ms = (xf[..., :h].pow(2).sum(-1, keepdim=True) + xf[..., h:].pow(2).sum(-1, keepdim=True)) / x.shape[-1]
    else:
        ms = xf.pow(2).mean(-1, keepdim=True)
    return weight * (xf * torch.rsqrt(ms + eps)).to(x.dtype)


def detached_weight(x, weight, eps):
    """Right forward, but the weight is detached: no gradient reaches it."""
    xf = x.float()
    return weight.detach() * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def gated_norm(x, weight, gate, eps):
    """A gated RMSNorm for Qwen3-Next's linear attention: normalize in float32, round, gain, then silu(gate)
    in float32, one more rounding."""
    xf = x.float()
    y = weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return (y * torch.nn.functional.silu(gate.float())).to(x.dtype)
# --8<-- [end:more_norms]
