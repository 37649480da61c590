"""Reference LayerNorm and RMSNorm.

- :mod:`reference_impl.oracle`: float64 NumPy oracle (forward and backward).
- :mod:`reference_impl.reference`: PyTorch reference with an explicit backward and an ``autograd.Function``.
- :mod:`reference_impl.tolerances`: the tolerance policy every comparison test uses.
"""
from .reference import layer_norm, layer_norm_backward, rms_norm, rms_norm_backward

__all__ = ["rms_norm", "layer_norm", "rms_norm_backward", "layer_norm_backward"]
from .fused import fused_layer_norm, fused_rms_norm  # noqa: E402  (builds nothing until first call)
