"""Every norm of a model: norm= by class or by role (from the census's per-model list of norms), and gated
norms checked as fn(x, weight, gate, eps) against the model's own gated class."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from reference_impl.check import NormCheckFailed, check_norm, cli
from reference_impl.check.kit import plan
from reference_impl.check.roles import norms_of, resolve_norm
from reference_impl.norms.gated_rms_norm import (kimi_linear_gated_rms_norm, mamba2_gated_rms_norm,
                                                 qwen3_next_gated_rms_norm)

BF16 = {"dtypes": ("bf16",), "widths": (33, 64)}


@pytest.mark.parametrize("model,norm,cls,entry", [
    ("qwen3_next", "inner output", "Qwen3NextRMSNormGated", "gated_rms_norm.qwen3_next"),
    ("qwen3_next", "qwen3nextrmsnormgated", "Qwen3NextRMSNormGated", "gated_rms_norm.qwen3_next"),
    ("mamba2", "inner_output", "MambaRMSNormGated", "gated_rms_norm.mamba2"),
    ("deepseek_v3", "latent", "DeepseekV3RMSNorm", "rms_norm.llama"),
    ("qwen3", "q", "Qwen3RMSNorm", "rms_norm.llama"),
    ("qwen3", "K", "Qwen3RMSNorm", "rms_norm.llama"),
    ("gemma3n_text", "value", "Gemma3nRMSNorm", "rms_norm.olmo2"),
    ("qwen3_next", "final", "Qwen3NextRMSNorm", "rms_norm.gemma"),
])
def test_a_norm_by_class_or_role(model, norm, cls, entry):
    t = resolve_norm(model, norm)
    assert (t.norm_class, t.entry) == (cls, entry)
    assert any(n["class"] == cls for n in norms_of(model))


def test_an_unknown_role_lists_the_models_norms():
    with pytest.raises(ValueError, match=r"qwen3 has no norm 'latent'; its norms: input \(Qwen3RMSNorm\), q_per_head"):
        resolve_norm("qwen3", "latent")
    with pytest.raises(ValueError, match="not both"):
        check_norm(qwen3_next_gated_rms_norm, "qwen3_next", norm="final", convention="rms_norm.gemma")


@pytest.mark.guards("check.kit")
def test_gated_norms_against_the_models_own_gated_class():
    rep = check_norm(lambda x, w, g, eps: qwen3_next_gated_rms_norm(x, w, g, eps, "silu"), "qwen3_next",
                     norm="inner output", **BF16)
    assert rep.ok and rep.truth == "Qwen3NextRMSNormGated from the installed transformers"
    assert rep.match.matched == "gated_rms_norm.qwen3_next (silu)"
    assert check_norm(lambda x, w, g, eps: mamba2_gated_rms_norm(x, w, g, eps, 1), "mamba2", norm="inner_output",
                      **BF16).ok
    # another gated order (all float32, Kimi-Linear's), and the wrong activation, are caught
    with pytest.raises(NormCheckFailed) as info:
        check_norm(lambda x, w, g, eps: kimi_linear_gated_rms_norm(x, w, g, eps, "silu"), "qwen3_next",
                   norm="inner output", **BF16)
    assert "bit for bit: it" not in info.value.report.diagnosis.split(";")[0]
    assert "gated_rms_norm.kimi_linear (silu)" in info.value.report.diagnosis
    with pytest.raises(NormCheckFailed):
        check_norm(lambda x, w, g, eps: qwen3_next_gated_rms_norm(x, w, g, eps, "sigmoid"), "qwen3_next",
                   norm="inner output", **BF16)


def test_the_command_takes_norm(capsys):
    assert cli.main(["reference_impl.norms.gated_rms_norm:mamba2_gated_rms_norm", "--model", "mamba2", "--norm",
                     "inner_output", "--dtypes", "fp32", "--widths", "16", "--no-grads"]) == 0
    assert "all 5 cases pass" in capsys.readouterr().out
    assert cli.main(["reference_impl.norms.gated_rms_norm:mamba2_gated_rms_norm", "--model", "mamba2", "--norm",
                     "banana"]) == 2
    assert "mamba2 has no norm 'banana'" in capsys.readouterr().err


class _WrongGateSlope(torch.autograd.Function):
    """Qwen3-Next's gated order with a hand-written backward whose gate derivative is sigmoid(gate), the
    slope of softplus, not silu's s (1 + gate (1 - s))."""

    @staticmethod
    def forward(ctx, x, weight, gate, eps):
        ctx.save_for_backward(x, weight, gate)
        ctx.eps = eps
        return qwen3_next_gated_rms_norm(x, weight, gate, eps, "silu")

    @staticmethod
    def backward(ctx, dy):
        x, weight, gate = ctx.saved_tensors
        xf, zf = x.float(), gate.float()
        r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + ctx.eps)
        n = xf * r
        a = torch.nn.functional.silu(zf)
        g = dy.float() * weight.float() * a
        dx = r * (g - n * (g * n).mean(-1, keepdim=True))
        dw = (dy.float() * n * a).reshape(-1, x.shape[-1]).sum(0)
        dz = dy.float() * n * weight.float() * torch.sigmoid(zf)  # the bug: silu's slope is s (1 + z (1 - s))
        return dx.to(x.dtype), dw.to(weight.dtype), dz.to(gate.dtype), None


@pytest.mark.guards("check.kit")
def test_gated_norms_gradients_of_x_gate_and_weight_are_checked():
    """The gradients of x, the gate and the weight of a gated norm are compared with the float64 gradients of
    its math within the derived bounds (roles.gated_reference_grads): the model's own class and the catalog's
    orders pass; a backward with the wrong gate derivative fails, named by the gradient that differs."""
    from reference_impl.check.calling import reference_grads
    from reference_impl.check.roles import gated_module

    target = resolve_norm("qwen3_next", "inner output")
    cls = gated_module(target, 8, torch.ones(8))
    cls.weight.requires_grad_(True)
    for fn in (cls, lambda x, w, g, eps: qwen3_next_gated_rms_norm(x, w, g, eps, "silu")):
        rep = check_norm(fn, "qwen3_next", norm="inner output", dtypes=("bf16", "fp32"), widths=(33, 127))
        assert rep.ok and all(r.grad_ratio is not None and r.grad_ratio <= 1 for r in rep.results)
    # the wide probes (rows from 1e-3 sqrt(eps) to the float32 overflow edge) with their gradients
    rep = check_norm(lambda x, w, g, eps: qwen3_next_gated_rms_norm(x, w, g, eps, "silu"), "qwen3_next",
                     norm="inner output", dtypes=("fp32",))
    assert rep.ok and any(r.layout == "wide" and r.grad_ratio is not None for r in rep.results)
    assert check_norm(lambda x, w, g, eps: mamba2_gated_rms_norm(x, w, g, eps, 1), "mamba2", norm="inner_output",
                      dtypes=("fp16", "fp32"), widths=(33, 127)).ok
    with pytest.raises(NormCheckFailed) as info:
        check_norm(_WrongGateSlope.apply, "qwen3_next", norm="inner output", dtypes=("fp32",), widths=(33, 127))
    rep = info.value.report
    assert {r.problem for r in rep.failures} == {None} and all(r.within_bound for r in rep.results)
    f = rep.findings[0]
    assert f.key.startswith("dgate_") and f.sentence.startswith("the gradient of the gate"), rep.diagnosis
    # the float64 gradients are those of the math: autograd through the catalog's float64 twin agrees
    from reference_impl.norms import CATALOG

    case = plan(target, ("fp64",), widths=(16,), wide=False)[0]
    p = case.probe
    dy = torch.randn(p.x.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    (dx, _), (dw, _), (dz, _) = reference_grads(target, p, dy)
    ins = [p.x.double().requires_grad_(True), p.weight.double().requires_grad_(True), p.gate.double().requires_grad_(True)]
    y = CATALOG[target.entry].grad_twin(*ins, p.eps, "silu")
    want = torch.autograd.grad(y, ins, dy)
    for mine, theirs in zip((dx, dw, dz), want):
        assert np.allclose(mine, theirs.numpy(), rtol=1e-10, atol=1e-12)
