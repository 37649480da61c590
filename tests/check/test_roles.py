"""Every norm of a model: norm= by class or by role (from the census's per-model list of norms), and gated
norms checked as fn(x, weight, gate, eps) against the model's own gated class."""
from __future__ import annotations

import pytest

from reference_impl.check import NormCheckFailed, check_norm, cli
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
