"""RMSNorm and LayerNorm as real model families compute them, operation for operation.

The code lives where each norm lives: the RMSNorm conventions in :mod:`reference_impl.norms.rms_norm`
(``convention_rms_norm``), the LayerNorm ones in :mod:`reference_impl.norms.layer_norm`
(``convention_layer_norm``), and the casting orders several norms share (:func:`apply_gain`, the generic
forward and backward, the convention names and checks) in :mod:`reference_impl.shared`. This module keeps
the public names (``conventions.rms_norm``, ``conventions.apply_gain``, ...) and the table below.

The core reference (:mod:`reference_impl.reference`) computes in float32, applies the gain in float32 and
rounds once at the end. Model code does not all do that: the order of the casts decides which bits come
out in bfloat16 and float16. Each convention here replays one family's order of operations exactly, so its
forward output is bit-identical (``torch.equal``) to the installed module (tests/core/test_transformers_parity.py).

RMSNorm conventions (``rms_norm(..., convention=...)``); ``h = xf * rsqrt(mean(xf**2) + eps)``:

===========  ===========================================================================================
reference    the core: compute in float32 (float64 for float64 input), ``h * w`` in that dtype, one cast
             to ``x.dtype`` at the end.
llama        ``xf = x.to(float32)``; ``w * h.to(x.dtype)``: cast *before* the gain, the product in
             ``promote(x.dtype, w.dtype)``. transformers' LlamaRMSNorm, also Mistral, Mixtral, Qwen2,
             Qwen3, DeepSeek-V3, Phi-3. float64 input is computed in float32 too.
gemma        ``(h * (1 + w.float())).type_as(x)``: the stored weight is an offset from 1 (initialised to 0),
             applied in float32, one cast at the end. Gemma, Gemma 2, Gemma 3.
t5           the mean square from ``x.to(float32)``, but ``x * rsqrt(...)`` multiplies the *uncast* input
             (type promotion); the result is cast to the weight's dtype only if that is float16/bfloat16,
             then ``w * h``. T5LayerNorm.
olmo2        ``(w * h).to(x.dtype)`` with ``xf = x.to(float32)``: gain in float32, one cast. Olmo2RMSNorm.
torch        ``torch.nn.RMSNorm`` / ``F.rms_norm``: compute dtype float32 (float64 for float64 input),
             gain applied in that dtype, one cast. ``eps=None`` means ``torch.finfo(compute dtype).eps``,
             i.e. float32's epsilon for float16 and bfloat16 input, not the input dtype's.
===========  ===========================================================================================

LayerNorm conventions (``layer_norm(..., convention=...)``): ``neox`` is ``torch.nn.LayerNorm`` as
GPT-NeoX/Pythia call it (the forward *is* ``F.layer_norm``: its fused kernel's reduction order cannot be
replayed in Python); ``cohere`` is CohereLayerNorm (two-pass float32 statistics, gain in float32, no bias).

``eps_placement``: ``"inside"`` the root, ``x * rsqrt(ms + eps)`` (every family above), or ``"outside"``,
``x / (sqrt(ms) + eps)``, as in the RMSNorm authors' PyTorch code (github.com/bzhangGo/rmsnorm,
``rmsnorm_torch.py``: ``x / (rms_x + self.eps)``, default eps 1e-8). Casting order is kept for either.

Backward: every convention has an explicit backward (no autograd inside): the RMSNorm gradient with the
convention's effective gain (``1 + w`` for gemma), computed in float32 (float64 where the convention
computes in float64), each gradient returned in its tensor's dtype.
"""
from __future__ import annotations

from .norms.layer_norm import ConventionLayerNormFunction
from .norms.layer_norm import check_convention_ln_args as check_ln_args
from .norms.layer_norm import convention_layer_norm as layer_norm
from .norms.rms_norm import ConventionRMSNormFunction
from .norms.rms_norm import check_convention_rms_args as check_rms_args
from .norms.rms_norm import convention_rms_norm as rms_norm
from .norms.rms_norm import convention_rms_norm_backward as rms_norm_backward
from .shared import (EPS_PLACEMENTS, HALF, LN_CONVENTIONS, RMS_CONVENTIONS, apply_gain, check_convention,
                     check_placement, effective_gain, output_dtype, resolve_eps, rms_backward, rms_forward,
                     stat_dtype)
from .shared import family_row_mean as row_mean

__all__ = [
    "RMS_CONVENTIONS", "LN_CONVENTIONS", "EPS_PLACEMENTS", "rms_norm", "rms_norm_backward", "layer_norm",
    "apply_gain", "effective_gain", "stat_dtype", "output_dtype", "rms_forward", "rms_backward", "resolve_eps",
]
