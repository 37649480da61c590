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
