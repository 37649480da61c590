"""The diagnosis is an experiment: for each buggy norm of buggy_norms.py it names the one operation that differs
from the model's order (or the pair of them); and the ten bugs of unseen_bugs.py (never tuned on) are counted."""
from __future__ import annotations

import pytest
import torch

from reference_impl.check import check_norm
from reference_impl.check.diagnosis import replay
from reference_impl.check.kit import plan, truth
from reference_impl.check.models import resolve

import buggy_norms as B
import unseen_bugs as UN


def _name(fn):
    return getattr(fn, "__name__", type(fn).__name__)


@pytest.mark.guards("check.diagnosis")
@pytest.mark.parametrize("model,fn,opts,key", B.BUGS, ids=[_name(b[1]) for b in B.BUGS])
def test_each_bug_is_named_by_the_change_that_reproduces_it(model, fn, opts, key):
    report = check_norm(fn, model, raise_on_failure=False, **opts)
    assert not report.ok
    assert report.findings and report.findings[0].key == key, report.diagnosis
    d = report.diagnosis
    assert "rerun: check_norm(" in d and f"model={model!r}" in d
    assert "bit for bit: it" not in d.split(";")[0], "a failing check's diagnosis never says it equals the model"


def test_the_bugs_not_tuned_on_are_counted_honestly():
    named, missed = [], []
    for model, fn, words in UN.UNSEEN:
        report = check_norm(fn, model, dtypes=("bf16",), widths=B.SMALL, raise_on_failure=False)
        assert not report.ok and report.diagnosis, f"{fn.__name__} passed the check: a false pass"
        (named if words in report.diagnosis.split("; also")[0] else missed).append(fn.__name__)
    # 8 of 10: torch.var's d - 1 and an off-by-one row index are no change, nor pair, of the experiments
    assert len(named) >= 8, f"named {len(named)} of {len(UN.UNSEEN)}; missed: {missed}"
    assert missed == ["gpt2_unbiased_variance", "qwen3_rstd_of_previous_row"], missed


@pytest.mark.guards("check.diagnosis")
@pytest.mark.parametrize("model,fn,key", [
    ("qwen3", "vector_norm_bf16", "root_norm+stat_in_x"), ("llama", "uncentred_over_centred", "center+x_uncentred")])
def test_two_change_bugs_are_named_as_a_pair_with_each_change_alone(model, fn, key):
    """A bug that no single change reproduces is named by the pair that does, with each change's distance
    alone as evidence (neither reproduces it alone)."""
    def vector_norm_bf16(x, weight, eps):
        rms = torch.linalg.vector_norm(x, dim=-1, keepdim=True) / x.shape[-1] ** 0.5
        return weight * (x.float() * torch.rsqrt(rms.float().square() + eps)).to(x.dtype)

    def uncentred_over_centred(x, weight, eps):
        xf = x.float()
        var = xf.var(-1, keepdim=True, correction=0)
        return weight * (xf * torch.rsqrt(var + eps)).to(x.dtype)

    f = {"vector_norm_bf16": vector_norm_bf16, "uncentred_over_centred": uncentred_over_centred}[fn]
    report = check_norm(f, model, dtypes=("bf16",), widths=B.SMALL, grads=False, raise_on_failure=False)
    assert not report.ok and report.findings[0].key == key, report.diagnosis
    ev = report.findings[0].evidence
    assert "changing these two" in ev and "the first alone: 0 of" in ev and "the second alone: 0 of" in ev, ev


def test_a_bug_no_change_explains_is_not_named_by_a_barely_closer_change():
    """A change that comes no nearer than half the model's own distance is no evidence: the diagnosis says
    that nothing reproduces the function rather than naming it."""
    report = check_norm(UN.gpt2_unbiased_variance, "gpt2", dtypes=("bf16",), widths=B.SMALL, grads=False,
                        raise_on_failure=False)
    assert not report.ok and report.findings[0].key == "unexplained", report.diagnosis
    assert "alone or in a pair" in report.diagnosis


@pytest.mark.parametrize("model", ["gemma3_text", "qwen3", "olmo2", "cohere"])
def test_the_replay_is_the_models_module_bit_for_bit(model):
    """The experiments start from the model's own order: with no change, the replay equals the module.
    (torch's fused LayerNorm kernel rounds in its own order, so for torch.nn.LayerNorm the replay is close,
    not equal, and the diagnosis ranks the changes by distance.)"""
    target = resolve(model)
    for case in plan(target, ("bf16", "fp16", "fp32"), widths=(33,)):
        want = truth(target, case.probe)[0]
        got = replay(case.probe, target)
        assert got.dtype == want.dtype and torch.equal(got, want), (model, case.id)


def test_bits_within_the_bound_say_so_and_name_bits_false():
    def blocked(x, weight, eps):  # a blocked sum of squares: a few ulp from torch's mean, within the bound
        xf = x.float()
        d = x.shape[-1]
        ms = sum(xf[..., i:i + 16].pow(2).sum(-1, keepdim=True) for i in range(0, d, 16)) / d
        return weight * (xf * torch.rsqrt(ms + eps)).to(x.dtype)

    report = check_norm(blocked, "qwen3", dtypes=("fp32",), widths=B.SMALL, raise_on_failure=False, grads=False)
    assert not report.ok and all(r.within_bound for r in report.results)
    assert any("within the float64 bound" in n and "bits=False (--no-bits" in n for n in report.notes)
    assert check_norm(blocked, "qwen3", dtypes=("fp32",), widths=B.SMALL, bits=False, grads=False).ok


def test_forward_only_and_missing_gradients():
    def detached(x, weight, eps):
        with torch.no_grad():
            xf = x.float()
            return weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)

    report = check_norm(detached, "qwen3", dtypes=("bf16",), widths=B.SMALL, raise_on_failure=False)
    assert not report.ok and report.findings[0].key == "missing_grad"
    assert all("the output does not require grad" in r.problem for r in report.results)
    ok = check_norm(detached, "qwen3", dtypes=("bf16",), widths=B.SMALL, grads=False)
    assert ok.ok and "forward-only: gradients not checked" in ok.notes

    def weight_detached(x, weight, eps):
        xf = x.float()
        return weight.detach() * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)

    report = check_norm(weight_detached, "qwen3", dtypes=("bf16",), widths=B.SMALL, raise_on_failure=False)
    assert {r.problem for r in report.failures} == {"no gradient reaches the weight (detached, or not used through "
                                                    "autograd)"}


def test_gain_in_xs_dtype_and_bad_devices():
    report = check_norm(B.qwen3_sum_in_bf16.__globals__["torch"].nn.RMSNorm(8), "qwen3", dtypes=("bf16",),
                        weight_dtypes="x", grads=False, widths=B.SMALL, raise_on_failure=False)
    assert {r.weight_dtype for r in report.results} == {"bf16"}
    for dev, msg in (("banana", "unknown device 'banana'"), ("meta", "not meta")):
        with pytest.raises(ValueError, match=msg):
            check_norm(B.qwen3_variance, "qwen3", device=dev)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="torch sees no CUDA device"):
            check_norm(B.qwen3_variance, "qwen3", device="cuda")
    with pytest.raises(ValueError, match="dtypes is empty"):
        check_norm(B.qwen3_variance, "qwen3", dtypes=())
