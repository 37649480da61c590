"""Ten buggy norms the diagnosis was not designed on: each is ``(model, fn, words)``, where ``words`` is a
phrase the diagnosis must contain to have named the bug (the sentence a user should read is in each
docstring). The first five were written before the diagnosis was built; the last five after its
one-change and two-change experiments were fixed, as a kernel engineer would get a norm wrong (an eps
squared, an offset added in the weight's dtype, a backward written by hand, ``torch.var``'s default, an
off-by-one row index). They are written in styles the tuned set does not use (vector norms, einsum, a
module, a hand-written autograd Function), so the count of bugs named here says how the diagnosis does on
code it has not seen."""
import torch


def qwen3_vector_norm_in_bf16(x, weight, eps):
    """Bug: the RMS comes from a vector norm taken in x's dtype (bf16), not in float32.
    Read: the RMS is a vector norm over sqrt(d) held in bfloat16."""
    d = x.shape[-1]
    rms = torch.linalg.vector_norm(x, dim=-1, keepdim=True) / d ** 0.5
    y = x.float() * torch.rsqrt(rms.float() ** 2 + eps)
    return weight * y.to(x.dtype)


def llama_einsum_variance(x, weight, eps):
    """Bug: the statistic is a variance (mean subtracted), written with einsum, but x itself is divided.
    Read: the mean is subtracted in the statistic but x is not centred."""
    xf = x.float()
    c = xf - xf.mean(-1, keepdim=True)
    var = torch.einsum("...i,...i->...", c, c)[..., None] / x.shape[-1]
    return weight * (xf * torch.rsqrt(var + eps)).to(x.dtype)


def gemma_plain_gain(x, weight, eps):
    """Bug: Gemma's stored offset used as the gain itself. Read: the gain is applied as w, not 1 + w."""
    xf = x.float()
    inv = 1.0 / torch.sqrt(xf.square().mean(-1, keepdim=True) + eps)
    return (xf * inv * weight.float()).to(x.dtype)


def llama_writes_into_x(x, weight, eps):
    """Bug: normalizes x in place to save memory. Read: the input x is modified in place."""
    xf = x.float()
    inv = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    x.copy_((xf * inv).to(x.dtype))
    return weight * x.clone()


def qwen3_hard_coded_eps(x, weight, eps):
    """Bug: ignores the eps it is given and uses 1e-5. Read: eps is 1e-05."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)
    return weight * y.to(x.dtype)


def qwen3_eps_squared(x, weight, eps):
    """Bug: eps squared, as if it were a standard deviation to be squared into the variance.
    Read: eps is 1e-12, where qwen3 uses 1e-06."""
    xf = x.float()
    ms = torch.sum(xf * xf, dim=-1, keepdim=True) / xf.shape[-1]
    return weight * (xf * torch.rsqrt(ms + eps * eps)).to(x.dtype)


def gemma_offset_in_weight_dtype(x, weight, eps):
    """Bug: ``1 + w`` formed in the checkpoint's dtype (bf16) before the float32 multiply.
    Read: the gain is rounded to bfloat16 before it is applied."""
    gain = (weight + 1).float()
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * gain).to(x.dtype)


class _LayerNormNoMeanTerm(torch.autograd.Function):
    """A hand-written LayerNorm backward that drops the mean of g from dx."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        xf = x.float()
        mu = xf.mean(-1, keepdim=True)
        rstd = torch.rsqrt((xf - mu).pow(2).mean(-1, keepdim=True) + eps)
        xhat = (xf - mu) * rstd
        ctx.save_for_backward(xhat, rstd, weight)
        return (xhat * weight.float() + bias.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        xhat, rstd, weight = ctx.saved_tensors
        g = dy.float() * weight.float()
        dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))  # the "- g.mean(-1)" term is missing
        flat = dy.float().reshape(-1, dy.shape[-1])
        dw = (flat * xhat.reshape(flat.shape)).sum(0)
        return dx.to(dy.dtype), dw.to(weight.dtype), flat.sum(0).to(weight.dtype), None


def gpt2_backward_without_mean_of_g(x, weight, bias, eps):
    """Bug: a custom backward whose dx misses the mean-of-g term. Read: the gradient of x is wrong."""
    return _LayerNormNoMeanTerm.apply(x, weight, bias, eps)


def gpt2_unbiased_variance(x, weight, bias, eps):
    """Bug: ``torch.var``'s default divides by d - 1. Read: the variance divides by d - 1, not d."""
    xf = x.float()
    var = torch.var(xf, dim=-1, keepdim=True)
    y = (xf - xf.mean(-1, keepdim=True)) / torch.sqrt(var + eps)
    return (y * weight.float() + bias.float()).to(x.dtype)


def qwen3_rstd_of_previous_row(x, weight, eps):
    """Bug: a row loop whose rstd index is off by one (each row uses the statistic of the row before).
    Read: each row is scaled by another row's statistic."""
    xf = x.float().reshape(-1, x.shape[-1])
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    rstd = torch.cat([rstd[:1], rstd[:-1]])
    return weight * (xf * rstd).reshape(x.shape).to(x.dtype)


UNSEEN = [
    ("qwen3", qwen3_vector_norm_in_bf16, "bfloat16"),
    ("llama", llama_einsum_variance, "not centred"),
    ("gemma3_text", gemma_plain_gain, "w, not 1 + w"),
    ("llama", llama_writes_into_x, "in place"),
    ("qwen3", qwen3_hard_coded_eps, "eps is 1e-05"),
    ("qwen3", qwen3_eps_squared, "eps is 1e-12"),
    ("gemma3_text", gemma_offset_in_weight_dtype, "gain is rounded to bfloat16"),
    ("gpt2", gpt2_backward_without_mean_of_g, "gradient of x"),
    ("gpt2", gpt2_unbiased_variance, "d - 1"),
    ("qwen3", qwen3_rstd_of_previous_row, "another row"),
]
