"""Reference LayerNorm and RMSNorm.

Core math (data flows one way: oracle and symbolic -> shared helpers -> each norm's catalog module):

- :mod:`reference_impl.oracle`: float64 NumPy oracle (forward and backward).
- :mod:`reference_impl.shared` and :mod:`reference_impl._checks`: what several norms share (the
  batch-invariant row mean, the model families' casting orders, the input checks).
- :mod:`reference_impl.reference` (RMSNorm and LayerNorm with an explicit backward and an
  ``autograd.Function``) and :mod:`reference_impl.conventions` (the families' casting orders): the public
  names, re-exported from the catalog modules that hold the code; ``reference_impl.variants`` (pRMSNorm,
  grouped, fused residual, QK-norm, ScaleNorm) is a module object made here, without a file, that hands
  on the catalog's functions by their old names; :mod:`reference_impl.families` says which family uses
  which order.
- :mod:`reference_impl.tolerances`: the tolerance policy every comparison test uses.
- :mod:`reference_impl.symbolic`: the SymPy registry of every formula on the site.
- :mod:`reference_impl.norms`: the catalog, one module per norm (DyT, Derf, the L2 norms and every norm
  above), which the generic tests, the registry and the catalog page iterate over.

Native ops live in :mod:`reference_impl.ops` (``fused_rms_norm``, ``fused_layer_norm`` and ``fused_qk_norm`` are
re-exported here, imported on first use); measuring commands in :mod:`reference_impl.studies`.
"""
from __future__ import annotations

import importlib as _importlib
import sys as _sys
import types as _types

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


class _Names(_types.ModuleType):
    """A module of old names that now live elsewhere: each is imported from its home on first use, so
    ``from reference_impl.variants import grouped_rms_norm`` gets the catalog's own function (no file, no copy)."""

    def __init__(self, name: str, doc: str, homes: dict[str, str]):
        super().__init__(name, doc)
        self.__all__ = sorted(homes)
        self._homes = homes

    def __getattr__(self, attr):
        home = self.__dict__["_homes"].get(attr)
        if home is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}")
        module, _, new = home.partition(":")
        value = getattr(_importlib.import_module(module), new or attr)
        setattr(self, attr, value)
        return value

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._homes))


def _names(name: str, doc: str, homes: dict[str, str]) -> _Names:
    mod = _Names(f"{__name__}.{name}", doc, homes)
    _sys.modules[mod.__name__] = mod
    return mod


_N = "reference_impl.norms."
variants = _names("variants", "RMSNorm variants (pRMSNorm, grouped, fused residual add, QK-norm, ScaleNorm): their "
                  "public names, each the function of its catalog module under reference_impl.norms.", {
                      **{n: _N + "prms_norm" for n in ("partial_rms_norm", "PartialRMSNormFunction", "partial_size")},
                      **{n: _N + "grouped_rms_norm" for n in ("grouped_rms_norm", "GroupedRMSNormFunction",
                                                               "group_size")},
                      **{n: _N + "fused_add_rms_norm" for n in ("fused_add_rms_norm", "FusedAddRMSNormFunction")},
                      **{n: _N + "qk_norm" for n in ("qk_norm", "QK_PLACEMENTS")},
                      **{n: _N + "scale_norm" for n in ("scale_norm", "ScaleNormFunction")}})


def __getattr__(name):
    # the native ops import their library on first use, so `import reference_impl` needs no compiler
    if name in ("fused_rms_norm", "fused_layer_norm", "fused_qk_norm"):
        from . import ops

        return getattr(ops, name)
    raise AttributeError(f"module 'reference_impl' has no attribute {name!r}")
