"""Norm classes in scope that no catalog entry reproduces bit for bit, each with the reason.

The census marks a class unmatched when :func:`reference_impl.check.matching.match` finds no catalog
candidate equal to it on every probe. Each such class must be named here (the tests check that the list is
complete and that it names no class the census matches or no longer finds), so a new transformers release
that brings a class nothing reproduces fails the tests, naming the class and its closest entry.

Reasons say what the class computes that no entry does; the census file's ``note`` for the class adds the
closest entry and its distance in ulps. Gated classes are probed with a random gate and compared with the
gated entries (reference_impl/norms/gated_rms_norm.py) like any other class; per-head LayerNorms (a gain per
head, fed ``(rows, heads, head_dim)``) are compared with the per-head entries (reference_impl/norms/head_norms.py).
"""
from __future__ import annotations

EXCEPTIONS: dict[str, str] = {
    # a gate computed inside the module
    "AXK2GatedRMSNorm": ("an RMSNorm followed by y * sigmoid(mlp(y)): a gate computed by a small MLP inside the "
                         "module, so the output is not a normalized row"),
    # casting orders no entry has
    "MuseSparkTextInputScaledRMSNorm": ("scales x by (1 + w) first, rounds to x's dtype, and normalizes afterwards: "
                                        "the gain before the normalization, which no catalog entry does"),
    "MoonshineStreamingLayerNorm": ("torch.nn.LayerNorm without affine parameters, then multiplies by (gamma + 1) "
                                    "in x's dtype: a second rounding after the kernel's; equal to layer_norm.neox "
                                    "in float32 only"),
    "DoryL2Norm": ("L2 normalization with eps added to the sum of squares inside the root, x * rsqrt(sum(x^2) + "
                   "eps); the catalog's l2_norm divides by max(||x||, eps)"),
    # modules that do not take one (rows, width) tensor
    "AutoformerLayernorm": ("a LayerNorm followed by subtracting the mean over the time axis (Autoformer's seasonal "
                            "part): it needs a (batch, time, features) input and is not a per-row norm"),
    "xLSTMMultiHeadLayerNorm": ("a LayerNorm per head of a (batch, seq, heads, head_dim) input with gains over all "
                                "heads: it does not take (rows, width) input"),
    "ZayaQKNorm": ("normalizes queries and keys together (two inputs) to length sqrt(head_dim), dividing by "
                   "max(||x||, finfo.eps), with a learned per-key-head scale: not a one-input norm"),
}
