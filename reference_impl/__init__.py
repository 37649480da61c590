"""Reference LayerNorm and RMSNorm.

Core math (data flows one way: oracle and symbolic -> shared helpers -> each norm's catalog module):

- :mod:`reference_impl.oracle`: float64 NumPy oracle (forward and backward).
- :mod:`reference_impl.shared` and :mod:`reference_impl._checks`: what several norms share (the
  batch-invariant row mean, the model families' casting orders, the input checks).
- The old module names ``reference_impl.reference`` (RMSNorm and LayerNorm with an explicit backward and an
  ``autograd.Function``), ``reference_impl.conventions`` (the families' casting orders) and
  ``reference_impl.variants`` (pRMSNorm, grouped, fused residual, QK-norm, ScaleNorm) are module objects
  made here, without a file, that hand on the catalog's and :mod:`reference_impl.shared`'s objects by their
  old names; :mod:`reference_impl.families` says which family uses which order. :func:`square_edges` (where
  squares leave a float type's range) lives here.
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

import torch as _torch

from .norms.layer_norm import layer_norm, layer_norm_backward
from .norms.rms_norm import convention_rms_norm as _convention_rms_norm
from .norms.rms_norm import rms_norm as _core_rms_norm
from .norms.rms_norm import rms_norm_backward

__all__ = ["rms_norm", "layer_norm", "rms_norm_backward", "layer_norm_backward", "fused_rms_norm", "fused_layer_norm",
           "fused_qk_norm", "square_edges"]


def rms_norm(x, weight=None, eps: float = 1e-6, convention: str | None = None, eps_placement: str = "inside"):
    """RMSNorm over the last dimension: ``x * rsqrt(mean(x**2, -1) + eps) * weight``.

    With ``convention=None`` and eps inside the root this is :func:`reference_impl.norms.rms_norm.rms_norm`
    (statistics and gain in float32, float64 for float64 input, one cast at the end). A model family's
    casting order (``"llama"``, ``"gemma"``, ``"t5"``, ``"olmo2"``, ``"torch"``, ``"reference"``) or
    ``eps_placement="outside"`` (``x / (sqrt(ms) + eps)``) goes to :func:`reference_impl.norms.rms_norm.convention_rms_norm`.
    Shapes, dtypes and errors as those functions say.
    """
    if convention is None and eps_placement == "inside":
        return _core_rms_norm(x, weight, eps)
    return _convention_rms_norm(x, weight, eps, convention="reference" if convention is None else convention, eps_placement=eps_placement)


_BITS = {_torch.float16: _torch.int16, _torch.bfloat16: _torch.int16, _torch.float32: _torch.int32,
         _torch.float64: _torch.int64}


def square_edges(dtype: _torch.dtype = _torch.float32) -> dict:
    """Where squares formed in ``dtype`` leave its range: ``overflow``, the smallest positive value whose
    square is Inf (a row holding one gets rstd 0 and comes out as zeros); ``underflow``, the largest value
    whose square is 0 (with ``eps=0`` a row with every ``|x|`` at or below it has mean square 0 and rstd
    Inf). docs/numerics.md prints both. Found by bisection over the dtype's positive values in bit order
    (squaring is monotone there), each square computed in ``dtype`` itself.

    Raises:
        TypeError: ``dtype`` is not float16, bfloat16, float32 or float64.
    """
    if dtype not in _BITS:
        raise TypeError(f"square_edges takes float16, bfloat16, float32 or float64, got {dtype!r}")
    ity = _BITS[dtype]
    top = int(_torch.tensor(_torch.finfo(dtype).max, dtype=dtype).view(ity))

    def square(i: int) -> _torch.Tensor:
        v = _torch.tensor(i, dtype=ity).view(dtype)
        return v * v

    def first(pred) -> int:  # the smallest bit pattern in [0, top] where pred holds (pred(top) holds)
        lo, hi = 0, top
        while lo < hi:
            mid = (lo + hi) // 2
            if pred(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo

    over = first(lambda i: not bool(_torch.isfinite(square(i))))
    under = first(lambda i: bool(square(i) != 0)) - 1
    return {"overflow": float(_torch.tensor(over, dtype=ity).view(dtype)),
            "underflow": float(_torch.tensor(under, dtype=ity).view(dtype))}


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


_RMS, _LN, _S = _N + "rms_norm", _N + "layer_norm", "reference_impl.shared"
reference = _names("reference", "The core reference RMSNorm and LayerNorm (explicit backward, autograd.Function): "
                   "their old public names, each the object of reference_impl.norms.rms_norm / layer_norm, plus "
                   "row_mean (reference_impl.shared) and square_edges (reference_impl).", {
                       **{n: _RMS for n in ("rms_norm", "rms_norm_backward", "RMSNormFunction", "rms_forward",
                                            "rms_backward", "rms_rstd", "check_rms_args")},
                       **{n: _LN for n in ("layer_norm", "layer_norm_backward", "LayerNormFunction", "ln_forward",
                                           "ln_backward", "ln_rstd", "check_ln_args")},
                       "row_mean": _S, "square_edges": "reference_impl"})
conventions = _names("conventions", "RMSNorm and LayerNorm as model families compute them: their old public "
                     "names, each the object of reference_impl.norms.rms_norm / layer_norm or reference_impl.shared "
                     "(whose docstring tables the casting orders).", {
                         "rms_norm": _RMS + ":convention_rms_norm",
                         "rms_norm_backward": _RMS + ":convention_rms_norm_backward",
                         "ConventionRMSNormFunction": _RMS, "check_rms_args": _RMS + ":check_convention_rms_args",
                         "layer_norm": _LN + ":convention_layer_norm", "ConventionLayerNormFunction": _LN,
                         "check_ln_args": _LN + ":check_convention_ln_args",
                         "row_mean": _S + ":family_row_mean",
                         **{n: _S for n in ("RMS_CONVENTIONS", "LN_CONVENTIONS", "EPS_PLACEMENTS", "HALF", "apply_gain",
                                            "check_convention", "check_placement", "effective_gain", "output_dtype",
                                            "resolve_eps", "rms_backward", "rms_forward", "stat_dtype")}})


def __getattr__(name):
    # the native ops import their library on first use, so `import reference_impl` needs no compiler
    if name in ("fused_rms_norm", "fused_layer_norm", "fused_qk_norm"):
        from . import ops

        return getattr(ops, name)
    raise AttributeError(f"module 'reference_impl' has no attribute {name!r}")
