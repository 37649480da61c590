"""Gated RMSNorms, as transformers computes them: the output (or, for Mamba-2, the input) is multiplied by an
activation of a second tensor, the gate. Four casting orders, one function each; each file region is
self-contained: copy it, it needs only torch.

- ``qwen3_next_gated_rms_norm``: models/qwen3_next/modeling_qwen3_next.py (``Qwen3NextRMSNormGated``); the
  same code in qwen3_5, qwen3_5_moe, olmo_hybrid and qwen4_exp.
- ``kimi_linear_gated_rms_norm``: models/kimi_linear/modeling_kimi_linear.py (``KimiLinearRMSNormGated``);
  the same code in bailing_hybrid, lara_mini, glm5_next and falcon_h1 (``norm_before_gate=True``).
- ``mamba2_gated_rms_norm``: models/mamba2/modeling_mamba2.py (``MambaRMSNormGated``); the same code in
  bamba, granitemoehybrid, nemotron_h and zamba2.
- ``falcon_h1_gated_rms_norm``: models/falcon_h1/modeling_falcon_h1.py (``FalconH1RMSNormGated`` with
  ``norm_before_gate=False``, which a config with ``mamba_norm_before_gate=False`` builds).
"""
# --8<-- [start:qwen3_next_gated_rms_norm]
import torch


def qwen3_next_gated_rms_norm(x, weight, gate, eps=1e-6, activation="silu"):
    """Gated RMSNorm in Qwen3-Next's order: normalize in float32, round to x's dtype, multiply by the weight,
    multiply by act(gate) in float32, round once to x's dtype.

    x, gate: (..., d) of one float dtype (float64 is computed in float32, as the model does).
    weight: (d,) gain. eps: added to the mean square inside the square root.
    activation: "silu" (Qwen3-Next, Qwen3.5, OLMo-Hybrid) or "sigmoid". Returns x's shape and dtype.
    """
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    h = weight * h.to(x.dtype)  # rounded before the gain, as in Llama's order
    acts = {"silu": torch.nn.functional.silu, "sigmoid": torch.sigmoid}
    if activation not in acts:
        raise ValueError(f"unknown activation {activation!r}; the known ones are {', '.join(acts)}")
    return (h * acts[activation](gate.to(torch.float32))).to(x.dtype)
# --8<-- [end:qwen3_next_gated_rms_norm]


# --8<-- [start:kimi_linear_gated_rms_norm]
import torch


def kimi_linear_gated_rms_norm(x, weight, gate, eps=1e-6, activation="sigmoid"):
    """Gated RMSNorm in Kimi-Linear's order: normalize, multiply by the weight cast to float32 and by
    act(gate), all in float32, then round once to x's dtype.

    x, gate: (..., d) of one float dtype (float64 is computed in float32, as the model does).
    weight: (d,) gain. eps: added to the mean square inside the square root.
    activation: "sigmoid" (Kimi-Linear, Bailing-Hybrid, GLM-5-Next) or "silu" (LaraMini, Falcon-H1).
    Returns x's shape and dtype.
    """
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    h = weight.to(torch.float32) * h  # no rounding before the gain
    acts = {"silu": torch.nn.functional.silu, "sigmoid": torch.sigmoid}
    if activation not in acts:
        raise ValueError(f"unknown activation {activation!r}; the known ones are {', '.join(acts)}")
    return (h * acts[activation](gate.to(torch.float32))).to(x.dtype)
# --8<-- [end:kimi_linear_gated_rms_norm]


# --8<-- [start:mamba2_gated_rms_norm]
import torch


def mamba2_gated_rms_norm(x, weight, gate, eps=1e-6, groups=1):
    """Gated RMSNorm in Mamba-2's order, the gate before the normalization: x * silu(gate) in float32, one
    RMS per group of d // groups consecutive features, round to x's dtype, then multiply by the weight.

    x, gate: (..., d) of one float dtype (float64 is computed in float32, as the model does); d divisible by
    groups. weight: (d,) gain. eps: added to each group's mean square inside the square root.
    Returns x's shape in promote(x.dtype, weight.dtype): a float32 weight gives a float32 result.
    """
    h = x.to(torch.float32) * torch.nn.functional.silu(gate.to(torch.float32))
    hg = h.reshape(*h.shape[:-1], groups, h.shape[-1] // groups)
    hg = hg * torch.rsqrt(hg.pow(2).mean(-1, keepdim=True) + eps)
    return weight * hg.reshape(h.shape).to(x.dtype)
# --8<-- [end:mamba2_gated_rms_norm]


# --8<-- [start:falcon_h1_gated_rms_norm]
import torch


def falcon_h1_gated_rms_norm(x, weight, gate, eps=1e-6, groups=1):
    """Gated RMSNorm in Falcon-H1's order with the gate before the normalization: x * silu(gate), one RMS
    per group of d // groups consecutive features, times the weight, all in float32 (float64 for a float64
    x or weight, as the model's promotion gives), then one rounding to x's dtype.

    x, gate: (..., d) of one float dtype; d divisible by groups. weight: (d,) gain. eps: added to each
    group's mean square inside the square root. Returns x's shape and dtype.
    """
    h = (x * torch.nn.functional.silu(gate.to(torch.float32))).to(torch.float32)
    hg = h.reshape(*h.shape[:-1], groups, h.shape[-1] // groups)
    hg = hg * torch.rsqrt(hg.pow(2).mean(-1, keepdim=True) + eps)
    return (weight * hg.reshape(h.shape)).to(x.dtype)  # no rounding before the gain
# --8<-- [end:falcon_h1_gated_rms_norm]
