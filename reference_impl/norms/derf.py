"""Derf, Dynamic erf: a point-wise replacement for a normalization layer.

``y = weight * erf(alpha * x + shift) + bias`` with learnable scalars ``alpha`` and ``shift`` and a
per-channel gain and bias of shape ``(d,)``. Chen, Lu, Zhu, Sun, Liu, "Stronger Normalization-Free
Transformers", arXiv:2512.10938. The authors' implementation (github.com/zlab-princeton/Derf, file
``ViT/dynamic_erf.py``) initialises ``alpha = 0.5``, ``shift = 0``, ``weight = 1``, ``bias = 0``.

Like DyT it has no statistics and a diagonal Jacobian; the forward is plain torch operations, so
autograd derives every gradient (x, alpha, shift, weight, bias) and every higher derivative.

Conventions: the computation runs in float32 (float64 for float64 input) and the result is cast once to
``x``'s dtype. This module imports nothing from the package, so its source (and hash) does not move when
the package's shared checks do.
"""
from __future__ import annotations

import torch

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _check_x(x):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _FLOATS:
        raise TypeError(f"x has dtype {x.dtype}; expected one of float16, bfloat16, float32, float64")
    if x.dim() == 0:
        raise ValueError("x is a 0-d tensor; the gain and bias act along its last dimension, so it needs one")
    if x.shape[-1] == 0:
        raise ValueError("x has an empty last dimension (size 0); there are no channels")


def _check_scalar(p, x, name):
    if not isinstance(p, torch.Tensor):
        raise TypeError(f"{name} must be a 0-d float tensor, got {type(p).__name__}")
    if p.dtype not in _FLOATS:
        raise TypeError(f"{name} has dtype {p.dtype}; expected one of float16, bfloat16, float32, float64")
    if p.dim() != 0:
        raise ValueError(f"{name} must be a 0-d tensor (one scalar), got shape {tuple(p.shape)}")
    if p.device != x.device:
        raise ValueError(f"{name} is on {p.device} but x is on {x.device}")


def _check_channel(p, x, name):
    if p is None:
        return
    if not isinstance(p, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or None, got {type(p).__name__}")
    if p.dtype not in _FLOATS:
        raise TypeError(f"{name} has dtype {p.dtype}; expected one of float16, bfloat16, float32, float64")
    if tuple(p.shape) != (x.shape[-1],):
        raise ValueError(
            f"{name} has shape {tuple(p.shape)} but the last dimension of x has size {x.shape[-1]}; "
            f"expected shape ({x.shape[-1]},)"
        )
    if p.device != x.device:
        raise ValueError(f"{name} is on {p.device} but x is on {x.device}")


# --8<-- [start:derf]
def derf(x, alpha, shift, weight=None, bias=None):
    """``weight * erf(alpha * x + shift) + bias`` over the last dimension of ``x``.

    Args:
        x: ``(..., d)`` float tensor (float16, bfloat16, float32, float64); 0 rows are fine.
        alpha: 0-d float tensor, the learnable input scale.
        shift: 0-d float tensor, the learnable input offset.
        weight: gain of shape ``(d,)`` or ``None``.
        bias: shape ``(d,)`` or ``None``.

    Returns:
        Tensor of ``x``'s shape and dtype, differentiable in every tensor argument.

    Raises:
        TypeError: a non-tensor or a non-float dtype.
        ValueError: 0-d ``x``, an empty last dimension, ``alpha`` or ``shift`` not 0-d, a gain or bias of
            the wrong shape, or a tensor on another device.
    """
    _check_x(x)
    _check_scalar(alpha, x, "alpha")
    _check_scalar(shift, x, "shift")
    _check_channel(weight, x, "weight")
    _check_channel(bias, x, "bias")
    cd = torch.float64 if x.dtype == torch.float64 else torch.float32
    y = torch.erf(alpha.to(cd) * x.to(cd) + shift.to(cd))
    if weight is not None:
        y = y * weight.to(cd)
    if bias is not None:
        y = y + bias.to(cd)
    return y.to(x.dtype)
# --8<-- [end:derf]


class Derf(torch.nn.Module):
    """Derf layer over the last dimension: parameters ``alpha`` and ``shift`` (0-d), ``weight`` (ones),
    ``bias`` (zeros). The defaults ``alpha_init=0.5``, ``shift_init=0.0`` are those of the authors' code
    for arXiv:2512.10938; ``elementwise_affine=False`` keeps only alpha and shift."""

    def __init__(self, d, alpha_init=0.5, shift_init=0.0, elementwise_affine=True):
        super().__init__()
        if isinstance(d, bool) or not isinstance(d, int) or d < 1:
            raise ValueError(f"d must be a positive int (the number of channels), got {d!r}")
        self.d = d
        self.alpha = torch.nn.Parameter(torch.tensor(float(alpha_init)))
        self.shift = torch.nn.Parameter(torch.tensor(float(shift_init)))
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.ones(d))
            self.bias = torch.nn.Parameter(torch.zeros(d))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x):
        return derf(x, self.alpha, self.shift, self.weight, self.bias)

    def extra_repr(self):
        return f"{self.d}, elementwise_affine={self.weight is not None}"
