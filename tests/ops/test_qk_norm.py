"""fused_qk_norm: the RMSNorm of every attention head against the models' own per-head norms.

Qwen3 normalizes queries and keys per head with ``Qwen3RMSNorm`` (Llama order: cast, then the gain) and
Gemma 3 with ``Gemma3RMSNorm`` (the gain ``1 + w`` in float32, one cast); both from the installed
transformers. The fused op runs the same arithmetic per row; its statistic is a float32 sum in the
kernel's own order, which is not PyTorch's, so float32 results agree to the float32 rounding of that sum
and the 16-bit ones are compared bit for bit where the sums agree. Backward, double backward,
``torch.library.opcheck`` and ``torch.compile(fullgraph=True)`` run on the same shapes.
"""
from __future__ import annotations

import pytest
import torch

from reference_impl.ops import fused_qk_norm, fused_rms_norm

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
SHAPES = [(2, 5, 4, 64), (3, 8, 128), (1, 7, 2, 256), (6, 1, 96)]


def _models(head_dim, dtype, seed):
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

    g = torch.Generator().manual_seed(seed)
    qwen = Qwen3RMSNorm(head_dim, eps=1e-6).to(dtype)
    gemma = Gemma3RMSNorm(head_dim, eps=1e-6).to(dtype)
    with torch.no_grad():
        qwen.weight.copy_((1 + 0.5 * torch.randn(head_dim, generator=g)).to(dtype))
        gemma.weight.copy_((0.5 * torch.randn(head_dim, generator=g)).to(dtype))
    return qwen, gemma


def _x(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * 2).to(dtype)


def _rstd_as_torch(x, eps):
    """The statistic as the models compute it (PyTorch's sum order), float32."""
    return torch.rsqrt(x.float().pow(2).mean(-1) + eps)


@pytest.mark.guards("fused.qk_norm")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_qk_norm_matches_qwen3_and_gemma3_per_head(dtype, shape):
    """Llama order = Qwen3RMSNorm per head, Gemma order = Gemma3RMSNorm per head: bit for bit on every
    row whose float32 statistic equals PyTorch's (all rows but a few), within one float32 rounding of the
    statistic elsewhere; the 16-bit outputs are bit-identical on all but a handful of elements."""
    x = _x(shape, dtype, seed=len(shape) * 100 + shape[-1])
    qwen, gemma = _models(shape[-1], dtype, seed=shape[-1])
    rstd = torch.ops.normlab.rms_norm_fwd(x, None, None, 1e-6, 0)[2]
    same_stat = rstd == _rstd_as_torch(x, 1e-6)  # rows where the two sum orders agree
    assert same_stat.float().mean() > 0.5
    with torch.no_grad():
        for ours, theirs in ((fused_qk_norm(x, qwen.weight, 1e-6, "llama"), qwen(x)),
                             (fused_qk_norm(x, gemma.weight, 1e-6, "gemma"), gemma(x))):
            assert ours.dtype == theirs.dtype == dtype and ours.shape == theirs.shape
            assert torch.equal(ours[same_stat], theirs[same_stat])
            # elsewhere the statistic differs by float32 rounding of the sum: the outputs by as little
            torch.testing.assert_close(ours, theirs, rtol=2e-6 if dtype == torch.float32 else 1e-2, atol=1e-6)


@pytest.mark.guards("fused.qk_norm")
@pytest.mark.parametrize("dtype", DTYPES)
def test_qk_norm_is_rms_norm_per_head_with_gradients(dtype):
    """The op equals fused_rms_norm over the last dimension (values and gradients of x and the shared
    weight, bit for bit), and its gradients pass torch.autograd.gradcheck-style comparison against the
    float64 model: x and weight gradients of Qwen3RMSNorm within the dtype's rounding."""
    x = _x((3, 4, 6, 64), dtype, seed=1).requires_grad_(True)
    w = (1 + 0.3 * torch.randn(64)).to(dtype).requires_grad_(True)
    dy = _x((3, 4, 6, 64), dtype, seed=2)
    for conv in ("llama", "gemma"):
        y = fused_qk_norm(x, w, 1e-6, conv)
        gx, gw = torch.autograd.grad(y, (x, w), dy)
        y2 = fused_rms_norm(x, w, 1e-6, convention=conv)
        gx2, gw2 = torch.autograd.grad(y2, (x, w), dy)
        assert torch.equal(y, y2) and torch.equal(gx, gx2) and torch.equal(gw, gw2)
    # against the float64 Llama-order per-head norm
    xd, wd = x.detach().double().requires_grad_(True), w.detach().double().requires_grad_(True)
    yd = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * wd
    gxd, gwd = torch.autograd.grad(yd, (xd, wd), dy.double())
    y = fused_qk_norm(x, w, 1e-6, "llama")
    gx, gw = torch.autograd.grad(y, (x, w), dy)
    tol = {torch.float32: 1e-4, torch.bfloat16: 6e-2, torch.float16: 1e-2}[dtype]
    torch.testing.assert_close(gx.double(), gxd, rtol=tol, atol=tol)
    torch.testing.assert_close(gw.double(), gwd, rtol=tol, atol=tol * 20)


@pytest.mark.guards("fused.qk_norm")
def test_qk_norm_double_backward_opcheck_and_compile():
    """Second-order gradients exist (gradgradcheck in float32 against finite differences of the float32
    op would be noisy: compared against the float64 expression's), opcheck passes on the op it calls, and
    torch.compile(fullgraph=True) traces the entry point without a break and returns the same bits."""
    x = _x((2, 3, 4, 32), torch.float32, seed=3).requires_grad_(True)
    w = (1 + 0.3 * torch.randn(32)).requires_grad_(True)
    y = fused_qk_norm(x, w, 1e-6, "gemma")
    (gx,) = torch.autograd.grad(y.square().sum(), (x,), create_graph=True)
    (ggx,) = torch.autograd.grad(gx.sum(), (x,))
    xd, wd = x.detach().double().requires_grad_(True), w.detach().double()
    yd = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * (1 + wd)
    (gxd,) = torch.autograd.grad(yd.square().sum(), (xd,), create_graph=True)
    (ggxd,) = torch.autograd.grad(gxd.sum(), (xd,))
    torch.testing.assert_close(ggx.double(), ggxd, rtol=1e-3, atol=1e-3)

    xs = x.detach().contiguous()
    torch.library.opcheck(torch.ops.normlab.rms_norm_fwd.default, (xs, w.detach(), None, 1e-6, 1))
    torch._dynamo.reset()
    compiled = torch.compile(lambda a, b: fused_qk_norm(a, b, 1e-6, "llama"), fullgraph=True, backend="aot_eager")
    for dtype in (torch.float32, torch.bfloat16):
        a, b = xs.to(dtype), w.detach().to(dtype)
        assert torch.equal(compiled(a, b), fused_qk_norm(a, b, 1e-6, "llama"))


@pytest.mark.guards("fused.qk_norm", "fused.bad_input")
def test_qk_norm_bad_arguments_are_named():
    """A 1-d x, a missing weight, a weight of the wrong length, an unknown convention and a bad eps are
    errors that name the problem."""
    x = torch.randn(2, 4, 16)
    with pytest.raises(ValueError, match=r"\(\.\.\., heads, head_dim\)"):
        fused_qk_norm(torch.randn(16), torch.ones(16))
    with pytest.raises(ValueError, match="needs a weight"):
        fused_qk_norm(x, None)
    with pytest.raises(ValueError, match="weight"):
        fused_qk_norm(x, torch.ones(8))
    with pytest.raises(ValueError, match="unknown convention"):
        fused_qk_norm(x, torch.ones(16), convention="t5")
    with pytest.raises(ValueError):
        fused_qk_norm(x, torch.ones(16), eps=-1.0)
    with pytest.raises(TypeError, match="float64"):
        fused_qk_norm(x.double(), torch.ones(16))
