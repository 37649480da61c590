"""DeepSeek-V4's unweighted RMSNorm, as transformers' ``DeepseekV4UnweightedRMSNorm`` computes it
(models/deepseek_v4/modeling_deepseek_v4.py); also GLM-5-Next's ``Glm5NextTextUnweightedRMSNorm``.
Self-contained: copy it, it needs only torch."""
# --8<-- [start:deepseek_v4_rms_norm]
import torch


def deepseek_v4_rms_norm(x, eps=1e-6):
    """RMSNorm without gain that rounds the inverse RMS to x's dtype and multiplies in x's dtype.

    x: (..., d) float16, bfloat16, float32 or float64 (the statistics in float32, as the model does).
    eps: added to the mean square inside the square root. Returns x * round_x(rsqrt(mean(x**2) + eps)) in
    x's dtype: two roundings (the statistic, then the product), one more than Llama's order.
    """
    return x * torch.rsqrt(x.float().square().mean(-1, keepdim=True) + eps).to(x.dtype)
# --8<-- [end:deepseek_v4_rms_norm]
