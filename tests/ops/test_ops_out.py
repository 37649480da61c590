"""``out=`` (and ``residual_out=``) on the fused ops: inference callers reuse their buffers.

The out= path runs the ops ``normlab::rms_norm_fwd_out`` / ``layer_norm_fwd_out`` (schemas in cuda/ops.h),
which write ``y`` (and ``h``) into the given tensors: the result must be bit-identical to the allocating
path, the buffer must be the returned object, and every misuse is a TypeError or ValueError.
"""
from __future__ import annotations

import pytest
import torch

from reference_impl.ops import fused_layer_norm, fused_rms_norm

pytestmark = pytest.mark.guards("fused.out")


def _data(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=g) * 2).to(dtype)
    w = (torch.rand(shape[-1], generator=g) + 0.5).to(dtype)
    b = torch.randn(shape[-1], generator=g).to(dtype)
    r = torch.randn(shape, generator=g).to(dtype)
    return x, w, b, r


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape", [(1, 1), (3, 37), (2, 4, 1000), (1, 70000)], ids=str)
def test_out_equals_the_allocating_path(shape, dtype):
    x, w, b, r = _data(shape, dtype)
    for conv in ("llama", "gemma"):
        out = torch.full_like(x, float("nan"))
        assert fused_rms_norm(x, w, 1e-6, convention=conv, out=out) is out
        assert torch.equal(out, fused_rms_norm(x, w, 1e-6, convention=conv))
        out, hout = torch.full_like(x, float("nan")), torch.full_like(x, float("nan"))
        y, h = fused_rms_norm(x, w, 1e-6, residual=r, convention=conv, out=out, residual_out=hout)
        assert y is out and h is hout
        y_ref, h_ref = fused_rms_norm(x, w, 1e-6, residual=r, convention=conv)
        assert torch.equal(out, y_ref) and torch.equal(hout, h_ref)
        # only one of the two buffers: the other one is allocated
        y2, h2 = fused_rms_norm(x, w, 1e-6, residual=r, convention=conv, residual_out=torch.empty_like(x))
        assert torch.equal(y2, y_ref) and torch.equal(h2, h_ref)
    out = torch.full_like(x, float("nan"))
    assert fused_layer_norm(x, w, b, out=out) is out and torch.equal(out, fused_layer_norm(x, w, b))
    # strided x: made contiguous first, the buffer still receives the result
    xt = x.transpose(0, -1) if x.dim() > 1 else x
    out = torch.empty(xt.shape, dtype=dtype)
    assert torch.equal(fused_rms_norm(xt, None, out=out), fused_rms_norm(xt))


def test_out_in_inference_mode_and_no_grad():
    x, w, b, _ = _data((4, 64), torch.float32)
    w.requires_grad_(True)  # a module parameter: fine without grad mode
    out = torch.empty_like(x)
    with torch.inference_mode():
        ref = fused_rms_norm(x, w)
        assert torch.equal(fused_rms_norm(x, w, out=out), ref)
    with torch.no_grad():
        assert torch.equal(fused_layer_norm(x, w, b, out=out), fused_layer_norm(x, w, b))


def test_out_errors():
    x, w, b, r = _data((4, 24), torch.float32)
    ok = torch.empty_like(x)
    buf = torch.empty(2 * x.numel())
    xs = buf[: x.numel()].view_as(x)
    xs.copy_(x)
    cases = [
        (TypeError, "must be a torch.Tensor", lambda: fused_rms_norm(x, out=[0.0] * 24)),
        (TypeError, "dtype", lambda: fused_rms_norm(x, out=ok.half())),
        (ValueError, "shape", lambda: fused_rms_norm(x, out=ok[:, :5])),
        (ValueError, "meta", lambda: fused_rms_norm(x, out=torch.empty_like(x, device="meta"))),
        (ValueError, "contiguous", lambda: fused_rms_norm(x, out=torch.empty(24, 4).t())),
        (ValueError, "shares memory with x", lambda: fused_rms_norm(x, out=x)),
        (ValueError, "shares memory with x",
         lambda: fused_rms_norm(xs, out=buf[x.numel() - 1: 2 * x.numel() - 1].view_as(x))),
        (ValueError, "shares memory with weight", lambda: fused_rms_norm(x[:1], w, out=w.view(1, 24))),
        (ValueError, "shares memory with residual", lambda: fused_rms_norm(x, residual=r, out=r)),
        (ValueError, "residual_out shares memory with out",
         lambda: fused_rms_norm(x, residual=r, out=ok, residual_out=ok)),
        (ValueError, "residual_out is given without a residual", lambda: fused_rms_norm(x, residual_out=ok)),
        (ValueError, "requires grad", lambda: fused_rms_norm(x.clone().requires_grad_(True), out=ok)),
        (ValueError, "requires grad", lambda: fused_rms_norm(x, w.clone().requires_grad_(True), out=ok)),
        (ValueError, "requires grad", lambda: fused_rms_norm(x, out=torch.empty_like(x, requires_grad=True))),
        (ValueError, "shares memory with bias", lambda: fused_layer_norm(x[:1], None, b, out=b.view(1, 24))),
        (ValueError, "requires grad", lambda: fused_layer_norm(x, w, b.clone().requires_grad_(True), out=ok)),
    ]
    for etype, match, fn in cases:
        with pytest.raises(etype, match=match):
            fn()
    # side by side in one storage: no overlap, accepted
    assert torch.equal(fused_rms_norm(xs, out=buf[x.numel():].view_as(x)), fused_rms_norm(x))


@pytest.mark.guards("fused.custom_op")
def test_opcheck_out_ops():
    x, w, b, r = _data((3, 5, 67), torch.float32)
    xb, wb, bb, rb = _data((4, 130), torch.bfloat16)
    cases = [
        (torch.ops.normlab.rms_norm_fwd_out.default, (x, w, None, 1e-6, 0),
         {"y": torch.empty_like(x), "residual_out": None}),
        (torch.ops.normlab.rms_norm_fwd_out.default, (xb, wb.float(), rb, 1e-6, 1),
         {"y": torch.empty_like(xb), "residual_out": torch.empty_like(xb)}),
        (torch.ops.normlab.layer_norm_fwd_out.default, (x, w, b, 1e-5), {"y": torch.empty_like(x)}),
        (torch.ops.normlab.layer_norm_fwd_out.default, (xb, None, None, 1e-5), {"y": torch.empty_like(xb)}),
        (torch.ops.normlab.layer_norm_fwd_out.default, (x, w, b, 1e-5, r, 2),
         {"y": torch.empty_like(x), "residual_out": torch.empty_like(x)}),
    ]
    for op, args, kwargs in cases:
        torch.library.opcheck(op, args, kwargs)


@pytest.mark.guards("fused.torch_compile")
def test_out_under_torch_compile():
    def f(x, w, r, out, hout):
        fused_rms_norm(x, w, 1e-6, residual=r, out=out, residual_out=hout)
        return out * 2

    x, w, _, r = _data((4, 64), torch.float32)
    outs = [(torch.empty_like(x), torch.empty_like(x)) for _ in range(2)]
    with torch.no_grad():
        got = torch.compile(f, fullgraph=True)(x, w, r, *outs[0])
        want = f(x, w, r, *outs[1])
    assert torch.equal(got, want) and torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
