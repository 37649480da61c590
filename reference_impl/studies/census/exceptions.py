"""Norm classes in scope that no catalog entry reproduces bit for bit, each with the reason.

The census marks a class unmatched when :func:`reference_impl.check.matching.match` finds no catalog
candidate equal to it on every probe. Each such class must be named here (the tests check that the list is
complete and that it names no class the census matches or no longer finds), so a new transformers release
that brings a class nothing reproduces fails the tests, naming the class and its closest entry.

Reasons say what the class computes that no entry does; the census file's ``note`` for the class adds the
closest entry and its distance in ulps (and, for a gated class, the entry its normalization equals).
"""
from __future__ import annotations

_GATED_AFTER = ("gated: multiplies the normalized rows by an activation of a second input, the gate (silu or "
                "sigmoid), inside the norm module; no catalog entry has a gate. The normalization before the gate "
                "is compared on its own (the note names the entry it equals)")
_GATED_BEFORE = ("gated before the normalization: multiplies x by silu(gate) and then normalizes (Mamba-2's "
                 "RMSNormGated with the gate first), so the gate changes what eps does; no catalog entry has a gate")
_UNWEIGHTED_ROUNDED_RSTD = ("unweighted RMSNorm that rounds the inverse RMS to x's dtype and multiplies in x's "
                            "dtype, x * rsqrt(mean(x^2) + eps).to(x.dtype): one rounding more than Llama's order, "
                            "1 ulp away from it; no catalog entry has this order")
_LN_IN_X_DTYPE = ("LayerNorm written out in the input's dtype (mean, biased variance, rsqrt, gain and bias without "
                  "a float32 upcast): half-precision statistics, which no catalog LayerNorm computes")

EXCEPTIONS: dict[str, str] = {
    # gated RMSNorms (the gate multiplies inside the module)
    "BailingHybridRMSNormGated": _GATED_AFTER,
    "FalconH1RMSNormGated": _GATED_AFTER,
    "Glm5NextTextRMSNormGated": _GATED_AFTER,
    "KimiLinearRMSNormGated": _GATED_AFTER,
    "LaraMiniRMSNormGated": _GATED_AFTER,
    "OlmoHybridRMSNormGated": _GATED_AFTER,
    "Qwen3_5RMSNormGated": _GATED_AFTER,
    "Qwen3_5MoeRMSNormGated": _GATED_AFTER,
    "Qwen3NextRMSNormGated": _GATED_AFTER,
    "Qwen4ExpTextRMSNormGated": _GATED_AFTER,
    "BambaRMSNormGated": _GATED_BEFORE,
    "GraniteMoeHybridRMSNormGated": _GATED_BEFORE,
    "MambaRMSNormGated": _GATED_BEFORE,
    "NemotronHRMSNormGated": _GATED_BEFORE,
    "Zamba2RMSNormGated": _GATED_BEFORE,
    "AXK2GatedRMSNorm": ("an RMSNorm followed by y * sigmoid(mlp(y)): a gate computed by a small MLP inside the "
                         "module, so the output is not a normalized row"),
    # casting orders no entry has
    "DeepseekV4UnweightedRMSNorm": _UNWEIGHTED_ROUNDED_RSTD,
    "Glm5NextTextUnweightedRMSNorm": _UNWEIGHTED_ROUNDED_RSTD,
    "ImageGPTLayerNorm": ("an RMSNorm (despite its name) computed entirely in the input's dtype and dividing by "
                          "sqrt(mean(x^2) + eps): no float32 upcast, which no catalog RMSNorm does"),
    "MuseSparkTextInputScaledRMSNorm": ("scales x by (1 + w) first, rounds to x's dtype, and normalizes afterwards: "
                                        "the gain before the normalization, which no catalog entry does"),
    "DebertaLayerNorm": ("LayerNorm in float32 that rounds the normalized rows to x's dtype before the gain and "
                         "bias (Llama's casting order applied to a LayerNorm); the catalog's LayerNorms round once"),
    "MoonshineStreamingLayerNorm": ("torch.nn.LayerNorm without affine parameters, then multiplies by (gamma + 1) "
                                    "in x's dtype: a second rounding after the kernel's; equal to layer_norm.neox "
                                    "in float32 only"),
    "GradiumPhononTTSFlowLayerNorm": _LN_IN_X_DTYPE,
    "PocketTTSFlowLayerNorm": _LN_IN_X_DTYPE,
    "DoryL2Norm": ("L2 normalization with eps added to the sum of squares inside the root, x * rsqrt(sum(x^2) + "
                   "eps); the catalog's l2_norm divides by max(||x||, eps)"),
    # modules that do not take one (rows, width) tensor
    "AutoformerLayernorm": ("a LayerNorm followed by subtracting the mean over the time axis (Autoformer's seasonal "
                            "part): it needs a (batch, time, features) input and is not a per-row norm"),
    "ChameleonLayerNorm": ("takes a (heads, head_dim) shape and applies per-head gains after a LayerNorm without "
                           "affine parameters over head_dim; its constructor does not take one width"),
    "StableLmLayerNormPerHead": ("one torch.nn.LayerNorm per head over (batch, heads, seq, head_dim), split along "
                                 "the head axis: the per-head module itself does not take (rows, width) input"),
    "xLSTMMultiHeadLayerNorm": ("a LayerNorm per head of a (batch, seq, heads, head_dim) input with gains over all "
                                "heads: it does not take (rows, width) input"),
    "ZayaQKNorm": ("normalizes queries and keys together (two inputs) to length sqrt(head_dim), dividing by "
                   "max(||x||, finfo.eps), with a learned per-key-head scale: not a one-input norm"),
}
