"""Standalone, copyable norms: one small function per catalog convention, each in a file that imports only
torch, so that a reader can copy it into their own code and run it.

Every function is checked bit for bit (``torch.equal``, same dtype) against the catalog's reference of its
entry (:data:`reference_impl.norms.CATALOG`) and against the model family's own module in the installed
``transformers`` (tests/core/test_standalone.py). The pages embed them through their snippet regions
(``# --8<-- [start:NAME]``, ``NAME`` the function's name): :data:`SNIPPETS` gives each one's
``path:region`` for ``pymdownx.snippets``.

:data:`BY_CATALOG` maps a catalog entry to the function that computes it, e.g. ``"rms_norm.llama"`` ->
``"llama_rms_norm"``; the argument lists follow the model code (``(x, weight, eps)`` and so on), not the
catalog's calling protocol.
"""
from __future__ import annotations

from .cohere import cohere_layer_norm
from .deepseek_v4 import deepseek_v4_rms_norm
from .eps_outside import rms_norm_eps_outside
from .fused_add import llama_add_rms_norm
from .gated import (falcon_h1_gated_rms_norm, kimi_linear_gated_rms_norm, mamba2_gated_rms_norm,
                    qwen3_next_gated_rms_norm)
from .gemma import gemma_rms_norm
from .head_norms import (chameleon_qk_norm, cohere_qk_norm, gemma_value_norm, kimi_linear_l2norm, persimmon_qk_norm,
                         qwen3_next_l2norm, stablelm_qk_norm)
from .l2_norm import l2_norm, llama4_l2_norm
from .layer_norm import reference_layer_norm
from .llama import llama_rms_norm
from .low_precision import deberta_layer_norm, imagegpt_rms_norm, x_dtype_layer_norm
from .neox import neox_layer_norm
from .olmo2 import olmo2_rms_norm
from .qk_norm import gemma3_qk_norm, olmo2_qk_norm, qwen3_qk_norm
from .reference import reference_rms_norm
from .t5 import t5_rms_norm
from .torch_rms import torch_rms_norm

BY_CATALOG = {
    "rms_norm": "reference_rms_norm",
    "rms_norm.llama": "llama_rms_norm",
    "rms_norm.gemma": "gemma_rms_norm",
    "rms_norm.t5": "t5_rms_norm",
    "rms_norm.olmo2": "olmo2_rms_norm",
    "rms_norm.torch": "torch_rms_norm",
    "rms_norm.eps_outside": "rms_norm_eps_outside",
    "layer_norm": "reference_layer_norm",
    "layer_norm.neox": "neox_layer_norm",
    "layer_norm.cohere": "cohere_layer_norm",
    "qk_norm.per_head": "qwen3_qk_norm",
    "qk_norm.per_head_gemma": "gemma3_qk_norm",
    "qk_norm.full": "olmo2_qk_norm",
    "llama4_l2_norm": "llama4_l2_norm",
    "l2_norm": "l2_norm",
    "fused_add_rms_norm": "llama_add_rms_norm",
    "gated_rms_norm.qwen3_next": "qwen3_next_gated_rms_norm",
    "gated_rms_norm.kimi_linear": "kimi_linear_gated_rms_norm",
    "gated_rms_norm.mamba2": "mamba2_gated_rms_norm",
    "gated_rms_norm.falcon_h1": "falcon_h1_gated_rms_norm",
    "rms_norm.deepseek_v4": "deepseek_v4_rms_norm",
    "rms_norm.imagegpt": "imagegpt_rms_norm",
    "layer_norm.x_dtype": "x_dtype_layer_norm",
    "layer_norm.deberta": "deberta_layer_norm",
    "value_norm": "gemma_value_norm",
    "qk_norm.layer_norm": "persimmon_qk_norm",
    "qk_norm.layer_per_head_gain.stablelm": "stablelm_qk_norm",
    "qk_norm.layer_per_head_gain.chameleon": "chameleon_qk_norm",
    "qk_norm.layer_per_head_gain.cohere": "cohere_qk_norm",
    "gated_delta_l2_norm.qwen3_next": "qwen3_next_l2norm",
    "gated_delta_l2_norm.kimi_linear": "kimi_linear_l2norm",
}
"""Catalog entry -> name of the standalone function (an attribute of this module) that computes it."""

_FILES = {
    "reference_rms_norm": "reference", "llama_rms_norm": "llama", "gemma_rms_norm": "gemma", "t5_rms_norm": "t5",
    "olmo2_rms_norm": "olmo2", "torch_rms_norm": "torch_rms", "rms_norm_eps_outside": "eps_outside",
    "reference_layer_norm": "layer_norm", "neox_layer_norm": "neox", "cohere_layer_norm": "cohere",
    "qwen3_qk_norm": "qk_norm", "gemma3_qk_norm": "qk_norm", "olmo2_qk_norm": "qk_norm",
    "llama4_l2_norm": "l2_norm", "l2_norm": "l2_norm", "llama_add_rms_norm": "fused_add",
    "qwen3_next_gated_rms_norm": "gated", "kimi_linear_gated_rms_norm": "gated", "mamba2_gated_rms_norm": "gated",
    "falcon_h1_gated_rms_norm": "gated",
    "deepseek_v4_rms_norm": "deepseek_v4", "imagegpt_rms_norm": "low_precision",
    "x_dtype_layer_norm": "low_precision", "deberta_layer_norm": "low_precision",
    **dict.fromkeys(("gemma_value_norm", "persimmon_qk_norm", "stablelm_qk_norm", "chameleon_qk_norm", "cohere_qk_norm",
                     "qwen3_next_l2norm", "kimi_linear_l2norm"), "head_norms"),
}
SNIPPETS = {name: f"reference_impl/standalone/{stem}.py:{name}" for name, stem in _FILES.items()}
"""Function name -> ``"path:region"`` of its code, as ``--8<--`` takes it (the path from the checkout's root)."""

__all__ = ["BY_CATALOG", "SNIPPETS", *sorted(_FILES)]
