"""Reference LayerNorm and RMSNorm.

- :mod:`reference_impl.oracle`: float64 NumPy oracle (forward and backward).
- :mod:`reference_impl.reference`: PyTorch reference with an explicit backward and an ``autograd.Function``;
  ``rms_norm(..., convention=...)`` covers the model families of :mod:`reference_impl.conventions`.
- :mod:`reference_impl.tolerances`: the tolerance policy every comparison test uses.
- :mod:`reference_impl.fused`: the native fused ops (built on first call, never at import).
"""
from .fused import fused_layer_norm, fused_rms_norm
from .reference import layer_norm, layer_norm_backward, rms_norm, rms_norm_backward

__all__ = ["rms_norm", "layer_norm", "rms_norm_backward", "layer_norm_backward", "fused_rms_norm", "fused_layer_norm"]
