"""reference_impl.check as a kernel author uses it: a right Gemma 3 RMSNorm passes, two subtly wrong ones are
caught with a diagnosis naming what they do compute, and a broken function gets a message naming the problem."""
from __future__ import annotations

import json

import pytest
import torch

from reference_impl import conventions as cv
from reference_impl.check import NormCheckFailed, check_norm, diagnose, models, norm_cases, check_case
from reference_impl.check.kit import plan

import user_norms as U

SMALL = (33, 64, 127)  # the small probes only; the first test runs the default plan with the wide ones
FAST = {"dtypes": ("bf16",), "grads": False, "widths": SMALL}


@pytest.mark.guards("check.kit")
def test_the_gemma3_order_passes_for_gemma3_text():
    report = check_norm(U.gemma_rms_norm, model="gemma3_text", dtypes=("fp16",))
    small = [r for r in report.results if r.layout != "wide"]
    wide = [r for r in report.results if r.layout == "wide"]
    assert report.ok and len(small) == 22
    assert all(r.identical for r in report.results) and all(r.within_bound for r in report.results)
    # gradients on every probe, the wide ones included (rows from 1e-3 sqrt(eps) to the float32 overflow edge)
    assert all(r.grad_ratio is not None and r.grad_ratio <= 1 for r in report.results)
    # the wide probes: widths 1 to 8192, primes, Gemma 3's own hidden (2304) and head (256) sizes, 64 rows
    assert {r.shape[-1] for r in wide} == {1, 7, 256, 2304, 4099, 8192} and {r.shape[0] for r in wide} == {64}
    cover = next(n for n in report.notes if n.startswith("covered: "))
    assert "widths 1, 7, 33, 64, 127, 256, 2304, 4099, 8192" in cover and "float16 subnormals included" in cover
    fp16 = next(c.probe.x for c in plan(report.target, ("fp16",)) if c.layout == "wide")
    tiny = fp16[fp16 != 0].abs()
    assert bool((tiny < torch.finfo(torch.float16).tiny).any()), "float16 subnormal inputs are probed"
    assert float(fp16.abs().max()) > 1000, "float16 rows near its overflow edge are probed"
    assert report.match.matched == "rms_norm.gemma"
    assert "equals rms_norm.gemma bit for bit" in report.diagnosis
    # the inputs the issue asks for: odd and even widths, bf16 and fp32 gains, tiny and large scales, strided
    shapes = {r.shape for r in report.results}
    assert {(4, 33), (4, 64), (2, 2, 127)} <= shapes
    assert {r.weight_dtype for r in report.results} == {"fp16", "fp32"}
    assert {r.scale for r in small} == {1e-4, 1.0, 300.0}
    assert any(r.layout == "strided" for r in report.results)


@pytest.mark.guards("check.kit", "check.diagnosis")
def test_rounding_before_the_gain_is_caught_and_named_llamas_order():
    with pytest.raises(NormCheckFailed) as info:
        check_norm(U.rounds_before_gain, model="gemma3_text", widths=SMALL)
    report, text = info.value.report, str(info.value)
    assert isinstance(info.value, AssertionError)
    assert report.match.matched == "rms_norm.llama"
    assert report.findings[0].key == "rounds_before_gain"
    # it fails in bfloat16 and float16 alike, so the sentence names x's dtype and both
    assert report.diagnosis.startswith("the result is rounded to x's dtype (bfloat16 or float16) before the gain, where "
                                       "gemma3_text applies the gain in float32 and rounds once")
    assert "reproduces the function bit for bit on all" in report.diagnosis
    assert "the catalog's rms_norm.llama: it rounds before the gain: Llama's order" in report.diagnosis
    assert "rerun: check_norm(rounds_before_gain, model='gemma3_text', dtypes=('bf16',)" in report.diagnosis
    for column in ("dtype", "w dtype", "shape", "scale", "bits", "differ", "max ulp", "err ulp (bound)"):
        assert column in text
    half = [r for r in report.results if r.dtype in ("bf16", "fp16")]
    assert half and all(not r.identical for r in half), "every half-precision case differs from the module"
    assert all(r.max_ulp >= 1 and 0 < r.fraction_different < 1 for r in half)
    fp32 = [r for r in report.results if r.dtype == "fp32"]
    assert all(r.ok for r in fp32), "in float32 the two orders round the same way"


@pytest.mark.guards("check.kit", "check.diagnosis")
def test_eps_outside_the_root_is_caught_on_the_tiny_rows_and_named():
    with pytest.raises(NormCheckFailed) as info:
        check_norm(U.eps_outside, model="gemma3_text", dtypes=("bf16", "fp16"), widths=SMALL)
    report = info.value.report
    tiny = [r for r in report.results if r.scale == 1e-4]
    assert tiny and all(r.within_bound is False and r.err_ulp > 100 for r in tiny), "eps decides tiny rows"
    assert report.match.matched is None and report.match.closest == "rms_norm.gemma (eps outside)"
    assert report.findings[0].key == "eps_outside"
    assert report.diagnosis.startswith("eps is added after the square root, x / (rms + eps)")
    # in bfloat16 it is the catalog's eps-outside Gemma order bit for bit
    assert "rms_norm.gemma (eps outside)" in report.match.by_dtype["bf16"]


def test_diagnose_only_names_what_it_matches():
    assert diagnose(U.rounds_before_gain, "gemma3_text", dtypes=("bf16",)).matched == "rms_norm.llama"
    assert diagnose(U.gemma_rms_norm, "gemma3_text", dtypes=("bf16",)).matched == "rms_norm.gemma"


# ------------------------------------------------------------------------------------------ bad functions

def _problems(fn, **kw):
    with pytest.raises(NormCheckFailed) as info:
        check_norm(fn, model="gemma3_text", **{**FAST, **kw})
    probs = {r.problem for r in info.value.report.results if r.problem}
    assert probs, "a failing case must say why"
    return probs, str(info.value)


@pytest.mark.guards("check.messages")
def test_a_function_that_raises_is_reported_with_its_error():
    def boom(x, weight, eps):
        raise RuntimeError("kernel not built for this width")

    probs, text = _problems(boom)
    assert probs == {"raised RuntimeError: kernel not built for this width"}
    assert "raised RuntimeError" in text


@pytest.mark.guards("check.messages")
def test_wrong_shape_dtype_nan_nondeterminism_and_in_place_writes_are_named():
    probs, _ = _problems(lambda x, w, eps: U.gemma_rms_norm(x, w, eps)[..., :-1])
    assert all(p.startswith("returned shape") and "expected" in p for p in probs)
    probs, _ = _problems(lambda x, w, eps: U.gemma_rms_norm(x, w, eps).float())
    assert probs == {"returned float32 where the model returns bfloat16"}

    def nan_on_tiny_rows(x, weight, eps):
        xf = x.float()
        y = xf / xf.pow(2).mean(-1, keepdim=True).sqrt() * (1.0 + weight.float())  # no eps: 0/0 on zero rows
        y = torch.where(xf.abs().amax(-1, keepdim=True) < 1e-3, torch.full_like(y, float("nan")), y)
        return y.to(x.dtype)

    probs, _ = _problems(nan_on_tiny_rows)
    assert any(p.startswith("NaN or inf in") and "where the model's output is finite" in p for p in probs)

    calls = {"n": 0}

    def flaky(x, weight, eps):
        calls["n"] += 1
        y = U.gemma_rms_norm(x, weight, eps)
        return y if calls["n"] % 2 else y * (1 + torch.finfo(y.dtype).eps * 4)

    probs, _ = _problems(flaky)
    assert any(p.startswith("non-deterministic: two calls on the same input differ") for p in probs)

    def in_place(x, weight, eps):
        y = U.gemma_rms_norm(x, weight, eps)
        x.mul_(2)
        return y

    probs, _ = _problems(in_place)
    assert probs == {"changed its input x in place"}


def test_bad_arguments_to_the_kit_name_the_problem():
    with pytest.raises(ValueError, match="unknown model 'gemma99'"):
        check_norm(U.gemma_rms_norm, model="gemma99")
    with pytest.raises(TypeError, match="needs model="):
        check_norm(U.gemma_rms_norm)
    with pytest.raises(ValueError, match="unknown convention 'gema'"):
        check_norm(U.gemma_rms_norm, convention="gema")
    with pytest.raises(TypeError, match="function or an nn.Module"):
        check_norm(3, model="gemma3_text")
    with pytest.raises(ValueError, match="unknown dtype"):
        check_norm(U.gemma_rms_norm, model="gemma3_text", dtypes=("bf17",))


# ------------------------------------------------------------------------------------------ other norms

def test_modules_layer_norms_and_the_fused_residual_add():
    class MyGemmaNorm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(5))
            self.eps = 1e-5

        def forward(self, x):
            return U.gemma_rms_norm(x, self.weight, self.eps)

    assert check_norm(MyGemmaNorm(), model="gemma3_text", dtypes=("bf16",), widths=SMALL).ok
    ln = check_norm(lambda x, w, b, eps: torch.nn.functional.layer_norm(x, x.shape[-1:], w, b, eps), model="gpt_neox",
                    dtypes=("bf16", "fp32"), widths=SMALL)
    assert ln.ok and ln.match.matched == "layer_norm.neox"
    from reference_impl import variants as va

    fused = check_norm(lambda x, r, w, eps: va.fused_add_rms_norm(x, r, w, eps), model="qwen3", residual=True,
                       dtypes=("bf16",), widths=SMALL)
    assert fused.ok and fused.match.matched == "fused_add_rms_norm.llama"

    def residual_not_rounded(x, r, w, eps):
        s = x.float() + r.float()
        return cv.rms_norm(s.to(x.dtype), w, eps, convention="llama"), s
    with pytest.raises(NormCheckFailed, match="residual contract"):
        check_norm(residual_not_rounded, model="qwen3", residual=True, **FAST)


def test_convention_overrides_and_eps():
    t = models.resolve("qwen3", "rms_norm.eps_outside", 1e-5)
    assert (t.convention, t.placement, t.eps) == ("reference", "outside", 1e-5)
    rep = check_norm(lambda x, w, eps: cv.rms_norm(x, w, eps, convention="reference", eps_placement="outside"),
                     convention="rms_norm.eps_outside", dtypes=("bf16",), widths=SMALL)
    assert rep.ok and rep.match.matched == "rms_norm.eps_outside"
    # catalog entries that are an RMSNorm in another arrangement, and candidate names, are accepted
    assert models.resolve(convention="qk_norm.per_head_gemma").entry == "rms_norm.gemma"
    assert models.resolve(convention="fused_add_rms_norm").entry == "rms_norm.llama"
    t = models.resolve(convention="rms_norm.gemma (eps outside)")
    assert (t.entry, t.placement, t.candidate) == ("rms_norm.gemma", "outside", "rms_norm.gemma (eps outside)")
    with pytest.raises(ValueError, match="catalog entry 'dyt' is none of them"):
        models.resolve(convention="dyt")


# ------------------------------------------------------------------------------------------ where facts come from

def test_the_census_index_is_read_and_names_the_models_own_module(tmp_path, monkeypatch):
    index = {"transformers": "5.24.0", "models": {"gemma3_text": {
        "norm_class": "Gemma3RMSNorm", "module": "transformers.models.gemma3.modeling_gemma3",
        "catalog": "rms_norm.gemma", "eps": 1e-6, "gain": "1+w", "gain_dtype": "float32", "qk_norm": "per_head"}}}
    path = tmp_path / "census_index.json"
    path.write_text(json.dumps(index))
    monkeypatch.setattr(models, "INDEX", path)
    monkeypatch.setattr(models.load_index, "__defaults__", (path,))
    rep = check_norm(U.gemma_rms_norm, model="gemma3_text", dtypes=("bf16",), widths=SMALL)
    assert rep.target.source.startswith("the census of transformers 5.24.0")
    assert rep.truth == "Gemma3RMSNorm from the installed transformers"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="census_index.json is not valid JSON"):
        models.resolve("gemma3_text")


def test_without_transformers_the_truth_is_the_catalog_replay():
    rep = check_norm(U.gemma_rms_norm, model="gemma3_text", dtypes=("bf16",), use_hf=False, widths=SMALL)
    assert rep.ok and rep.truth.startswith("the catalog's rms_norm.gemma")


def test_norm_cases_and_check_case_run_one_case_each():
    cases = norm_cases("gemma3_text", dtypes=("bf16",))
    assert len(cases) == len(plan(models.resolve("gemma3_text"), ("bf16",)))
    assert check_case(U.gemma_rms_norm, cases[0]).ok
    with pytest.raises(NormCheckFailed, match="DIFFER"):
        check_case(U.rounds_before_gain, cases[1])


def test_torch_layer_norm_passes_the_kit_with_one_thread():
    """torch's one-thread CPU LayerNorm backward sums the rows of a float32 gain's gradient in bfloat16; the
    kit's gradient bound charges that, so the function people call passes on a one-core CI runner too."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        report = check_norm(lambda x, w, b, eps: torch.nn.functional.layer_norm(x, x.shape[-1:], w, b, eps),
                            model="gpt_neox", dtypes=("bf16", "fp32"), widths=SMALL)
    finally:
        torch.set_num_threads(before)
    assert report.ok and any(c.grad_ratio is not None for c in report.results)


class _NudgedDx(torch.autograd.Function):
    """Gemma's order whose dx is moved by ``K`` times its bound at the element where the bound's range terms
    (calling.range_terms: the statistic's term lost to float32 underflow) make up most of it."""
    K = 3.0

    @staticmethod
    def forward(ctx, x, weight, eps):
        ctx.save_for_backward(x, weight)
        ctx.eps = eps
        return U.gemma_rms_norm(x, weight, eps)

    @staticmethod
    def backward(ctx, dy):
        from reference_impl.check import matching as M
        from reference_impl.check.calling import range_terms, reference_grads

        x, weight = ctx.saved_tensors
        with torch.enable_grad():
            xx, ww = x.detach().requires_grad_(True), weight.detach().requires_grad_(True)
            dx, dw = torch.autograd.grad(U.gemma_rms_norm(xx, ww, ctx.eps), (xx, ww), dy)
        target = models.resolve("gemma3_text")
        p = M.Probe(x, weight, None, ctx.eps, "", gain="1+w")
        (_, bound), _, _ = reference_grads(target, p, dy)
        share = range_terms(target, p, dy, 2) / bound
        i = int(share.argmax())
        if share.reshape(-1)[i] > 0.5:  # only where the range terms decide the bound (the wide rows' extremes)
            dx = dx.clone()
            dx.view(-1)[i] += _NudgedDx.K * float(bound.reshape(-1)[i])
        return dx, dw, None


@pytest.mark.guards("check.kit")
@pytest.mark.parametrize("k,fails", [(3.0, True), (0.0, False)])
def test_the_wide_rows_gradient_bound_is_tight(k, fails, monkeypatch):
    """The bound's range terms (float32 underflow of r**3 in the statistic's term, subnormal g) are no slack:
    the right function's error meets the bound almost with equality on the widest-scaled rows (at least 0.9
    of it: a float32 row of width 1 above RMS 2**42 loses the whole statistic's term), and a dx moved by 3
    times the bound where those terms decide it fails."""
    monkeypatch.setattr(_NudgedDx, "K", k)
    report = check_norm(_NudgedDx.apply, "gemma3_text", dtypes=("fp32",), raise_on_failure=False)
    wide = [r for r in report.results if r.layout == "wide"]
    assert report.ok is not fails, report.diagnosis
    if fails:
        assert {r.problem for r in report.failures} == {None} and all(r.layout == "wide" for r in report.failures)
        assert all(2 < r.grad_ratio < 4 for r in report.failures)
        assert report.findings[0].sentence.startswith("the gradient of x"), report.diagnosis
    else:
        assert 0.9 <= max(r.grad_ratio for r in wide) <= 1
