"""Reference LayerNorm and RMSNorm.

Core math (data flows one way: oracle and symbolic -> shared helpers -> each norm's catalog module):

- :mod:`reference_impl.oracle`: float64 NumPy oracle (forward and backward).
- :mod:`reference_impl.shared` and :mod:`reference_impl._checks`: what several norms share (the
  batch-invariant row mean, the model families' casting orders, the input checks).
- :mod:`reference_impl.reference` (RMSNorm and LayerNorm with an explicit backward and an
  ``autograd.Function``), :mod:`reference_impl.conventions` (the families' casting orders) and
  :mod:`reference_impl.variants` (pRMSNorm, grouped, fused residual, QK-norm, ScaleNorm): the public names,
  re-exported from the catalog modules that hold the code; :mod:`reference_impl.families` says which
  family uses which order.
- :mod:`reference_impl.tolerances`: the tolerance policy every comparison test uses.
- :mod:`reference_impl.symbolic`: the SymPy registry of every formula on the site.
- :mod:`reference_impl.norms`: the catalog, one module per norm (DyT, Derf, the L2 norms and every norm
  above), which the generic tests, the registry and the catalog page iterate over.

Native ops live in :mod:`reference_impl.ops` (``fused_rms_norm``, ``fused_layer_norm`` and ``fused_qk_norm`` are
re-exported here, imported on first use); measuring commands in :mod:`reference_impl.studies`.
"""
from __future__ import annotations

from . import conventions as _conventions
from . import reference as _reference
from .reference import layer_norm, layer_norm_backward, rms_norm_backward

__all__ = ["rms_norm", "layer_norm", "rms_norm_backward", "layer_norm_backward", "fused_rms_norm", "fused_layer_norm",
           "fused_qk_norm"]


def rms_norm(x, weight=None, eps: float = 1e-6, convention: str | None = None, eps_placement: str = "inside"):
    """RMSNorm over the last dimension: ``x * rsqrt(mean(x**2, -1) + eps) * weight``.

    With ``convention=None`` and eps inside the root this is :func:`reference_impl.reference.rms_norm`
    (statistics and gain in float32, float64 for float64 input, one cast at the end). A model family's
    casting order (``"llama"``, ``"gemma"``, ``"t5"``, ``"olmo2"``, ``"torch"``, ``"reference"``) or
    ``eps_placement="outside"`` (``x / (sqrt(ms) + eps)``) goes to :func:`reference_impl.conventions.rms_norm`.
    Shapes, dtypes and errors as those functions say.
    """
    if convention is None and eps_placement == "inside":
        return _reference.rms_norm(x, weight, eps)
    return _conventions.rms_norm(x, weight, eps, convention="reference" if convention is None else convention, eps_placement=eps_placement)


def __getattr__(name):
    # the native ops import their library on first use, so `import reference_impl` needs no compiler
    if name in ("fused_rms_norm", "fused_layer_norm", "fused_qk_norm"):
        from . import ops

        return getattr(ops, name)
    raise AttributeError(f"module 'reference_impl' has no attribute {name!r}")
