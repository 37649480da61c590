"""Buggy norms with the diagnosis each must get: ``BUGS`` holds ``(model, fn, options, key)``, where ``key`` is
the :class:`reference_impl.check.diagnosis.Finding` key naming the bug. Each function differs from its
model's order in one operation, as a kernel author's slip would."""
import torch


def qwen3_sum_in_bf16(x, weight, eps):
    """The mean of squares taken in x's dtype."""
    ms = x.pow(2).mean(-1, keepdim=True)
    y = x.float() * torch.rsqrt(ms.float() + eps)
    return weight * y.to(x.dtype)


def gemma_eps_outside(x, weight, eps):
    xf = x.float()
    return (xf / (xf.pow(2).mean(-1, keepdim=True).sqrt() + eps) * (1.0 + weight.float())).to(x.dtype)


def gemma_gain_w(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def gemma_rounds_before_gain(x, weight, eps):
    xf = x.float()
    y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return (y * (1.0 + weight.float())).to(x.dtype)


def qwen3_variance(x, weight, eps):
    xf = x.float()
    xf = xf - xf.mean(-1, keepdim=True)
    return weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def qwen3_wrong_dim(x, weight, eps):
    xf = x.float()
    return weight * (xf * torch.rsqrt(xf.pow(2).mean(0, keepdim=True) + eps)).to(x.dtype)


def gemma_returns_float32(x, weight, eps):
    xf = x.float()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + weight.float())


def qwen3_in_place(x, weight, eps):
    xf = x.float()
    y = weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    x.zero_()
    return y


def qwen3_square_in_half(x, weight, eps):
    """x * x in float16 overflows for |x| > 256 before the float32 mean."""
    ms = (x * x).float().mean(-1, keepdim=True)
    return weight * (x.float() * torch.rsqrt(ms + eps)).to(x.dtype)


def qwen3_nondeterministic(x, weight, eps):
    xf = x.float()
    r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * (1 + 1e-3 * torch.rand(()))
    return weight * (xf * r).to(x.dtype)


class _WrongWeightGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        xf = x.float()
        r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, r)
        return weight * (xf * r).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, weight, r = ctx.saved_tensors
        xhat = x.float() * r
        g = dy.float() * weight.float()
        dx = r * (g - xhat * (g * xhat).mean(-1, keepdim=True))
        dw = 2 * (dy.float() * xhat).reshape(-1, x.shape[-1]).sum(0)  # twice the gradient
        return dx.to(x.dtype), dw.to(weight.dtype), None


class Qwen3WrongWeightGrad(torch.nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))
        self.variance_epsilon = 1e-6

    def forward(self, x):
        return _WrongWeightGrad.apply(x, self.weight, self.variance_epsilon)


class Qwen3DetachedWeight(Qwen3WrongWeightGrad):
    def forward(self, x):
        xf = x.float()
        return self.weight.detach() * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)).to(x.dtype)


def qwen3_fused_residual_in_fp32(x, residual, weight, eps):
    s = x.float() + residual.float()
    y = weight * (s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return y, s


def qwen3_constant_rstd(x, weight, eps):
    """A backward that holds the statistic constant (the rstd detached)."""
    xf = x.float()
    r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps).detach()
    return weight * (xf * r).to(x.dtype)


SMALL = (33, 64, 127)  # the small probes only (the wide ones are tested in test_kit)
BF16 = {"dtypes": ("bf16",), "grads": False, "widths": SMALL}
BUGS = [
    ("qwen3", qwen3_sum_in_bf16, BF16, "acc_in_x"),
    ("gemma3_text", gemma_eps_outside, BF16, "eps_outside"),
    ("gemma3_text", gemma_gain_w, BF16, "plain_gain"),
    ("gemma3_text", gemma_rounds_before_gain, BF16, "rounds_before_gain"),
    ("qwen3", qwen3_variance, BF16, "center"),
    ("qwen3", qwen3_wrong_dim, BF16, "dim0"),
    ("gemma3_text", gemma_returns_float32, BF16, "output_dtype"),
    ("qwen3", qwen3_in_place, BF16, "in_place"),
    ("qwen3", qwen3_square_in_half, {"dtypes": ("fp16",), "grads": False, "widths": SMALL}, "square_in_x"),
    ("qwen3", qwen3_nondeterministic, BF16, "nondeterministic"),
    ("qwen3", Qwen3WrongWeightGrad(), {"dtypes": ("fp32",), "widths": (8,)}, "dweight_scaled"),
    ("qwen3", Qwen3DetachedWeight(), {"dtypes": ("fp32",), "widths": (8,)}, "missing_grad"),
    ("qwen3", qwen3_fused_residual_in_fp32, {**BF16, "residual": True}, "residual_dtype"),
    ("qwen3", qwen3_constant_rstd, {"dtypes": ("fp32",), "widths": SMALL}, "dx_no_stat_term"),
]


# a kernel that picks its split by the number of rows: the page's example function
from reference_impl.studies.check_example_norms import split_by_batch as qwen3_batch_dependent  # noqa: E402


BUGS.append(("qwen3", qwen3_batch_dependent, {"dtypes": ("fp32",), "grads": False, "batch_invariant": True, "widths": SMALL},
             "batch_variant"))
