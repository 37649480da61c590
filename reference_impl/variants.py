"""RMSNorm variants: partial (pRMSNorm), grouped (Mamba-2), fused residual add, QK-norm placements, ScaleNorm.

Each variant's code lives in its catalog module: :mod:`reference_impl.norms.prms_norm`,
:mod:`~reference_impl.norms.grouped_rms_norm`, :mod:`~reference_impl.norms.fused_add_rms_norm`,
:mod:`~reference_impl.norms.qk_norm`, :mod:`~reference_impl.norms.scale_norm`. This module keeps their
public names (``variants.grouped_rms_norm``, ...).

Every variant has an explicit backward (``torch.autograd.Function``; reshapes around it are plain views)
and the core's input checks. Each Function's ``apply`` checks its own arguments too, and inside torch.func
transforms (vmap, grad, jvp, ...) runs the forward as plain torch operations, which they handle exactly.
Range (as the core reference and the modules): squares are formed in float32, so ``|x|`` above about
1.8e19 gives rstd 0 (zeros), and with ``eps=0`` rows whose squares underflow give Inf/NaN. Shapes are ``(..., d)``, normalization over the last dimension unless stated.
"""
from __future__ import annotations

from .norms.fused_add_rms_norm import FusedAddRMSNormFunction, fused_add_rms_norm
from .norms.grouped_rms_norm import GroupedRMSNormFunction, group_size, grouped_rms_norm
from .norms.prms_norm import PartialRMSNormFunction, partial_rms_norm, partial_size
from .norms.qk_norm import QK_PLACEMENTS, qk_norm
from .norms.scale_norm import ScaleNormFunction, scale_norm

__all__ = ["partial_rms_norm", "grouped_rms_norm", "fused_add_rms_norm", "qk_norm", "scale_norm", "QK_PLACEMENTS"]
