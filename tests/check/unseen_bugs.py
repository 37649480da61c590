"""Five buggy norms written before the diagnosis was built and never used to tune it: each is
``(model, fn, words)``, where ``words`` is a phrase the diagnosis must contain to have named the bug.
They are written in styles the tuned set does not use (vector norms, einsum, a module), so that the count
of bugs named here says how the diagnosis does on code it has not seen."""
import torch


def qwen3_vector_norm_in_bf16(x, weight, eps):
    """Bug: the RMS comes from a vector norm taken in x's dtype (bf16), not in float32."""
    d = x.shape[-1]
    rms = torch.linalg.vector_norm(x, dim=-1, keepdim=True) / d ** 0.5
    y = x.float() * torch.rsqrt(rms.float() ** 2 + eps)
    return weight * y.to(x.dtype)


def llama_einsum_variance(x, weight, eps):
    """Bug: the statistic is a variance (mean subtracted), written with einsum."""
    xf = x.float()
    c = xf - xf.mean(-1, keepdim=True)
    var = torch.einsum("...i,...i->...", c, c)[..., None] / x.shape[-1]
    return weight * (xf * torch.rsqrt(var + eps)).to(x.dtype)


def gemma_plain_gain(x, weight, eps):
    """Bug: Gemma's stored offset used as the gain itself (w, not 1 + w)."""
    xf = x.float()
    inv = 1.0 / torch.sqrt(xf.square().mean(-1, keepdim=True) + eps)
    return (xf * inv * weight.float()).to(x.dtype)


def llama_writes_into_x(x, weight, eps):
    """Bug: normalizes x in place to save memory."""
    xf = x.float()
    inv = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    x.copy_((xf * inv).to(x.dtype))
    return weight * x.clone()


def qwen3_hard_coded_eps(x, weight, eps):
    """Bug: ignores the eps it is given and uses 1e-5."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)
    return weight * y.to(x.dtype)


UNSEEN = [
    ("qwen3", qwen3_vector_norm_in_bf16, "bfloat16"),
    ("llama", llama_einsum_variance, "mean is subtracted"),
    ("gemma3_text", gemma_plain_gain, "w, not 1 + w"),
    ("llama", llama_writes_into_x, "in place"),
    ("qwen3", qwen3_hard_coded_eps, "eps is 1e-05"),
]
