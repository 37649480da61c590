"""Generic tests over the norm catalog: a norm is tested by being declared in reference_impl.norms.

For every spec: the reference against the float64 oracle within the spec's bound (0 rows, one feature,
odd widths, every dtype), every implementation against the oracle, float64 gradcheck and gradgradcheck
(of the reference, or of its float64 twin when the reference computes in float32 whatever the input, with
the reference's own first and second derivatives then compared to the twin's), torch.compile with
fullgraph=True against eager, and the bad calls it must reject with a clear error. So that one consistent
mistake cannot pass: an independent statement of each entry's math (SymPy formulas or a declared relation),
gradients in every dtype against the float64 gradient, every optional input left out, every bound shown
tight; each rule is parametrized by entry (``-k <name>`` runs them all), and a scratch entry with each
planted mistake fails.
"""
from __future__ import annotations

import math
import re
import zlib

import numpy as np
import pytest
import torch
from torch.autograd.gradcheck import GradcheckError

from reference_impl import families as fam
from reference_impl import tolerances as tol
from reference_impl.norms import CATALOG, catalog_guards
from reference_impl.norms.spec import as_tuple, outputs64

NAMES = sorted(CATALOG)
FORWARD = [(n, s, d) for n in NAMES for s in CATALOG[n].shapes for d in CATALOG[n].dtypes]
IMPLS = [(n, i) for n in NAMES for i in CATALOG[n].implementations]


def _id(v):
    return str(v).replace("torch.", "").replace(" ", "")


def _grad_shape(spec):
    return next(s for s in spec.shapes if s[0] > 0 and s[-1] > 4)


@pytest.mark.guards(*catalog_guards())
@pytest.mark.parametrize("name,shape,dtype", FORWARD, ids=_id)
def test_reference_matches_oracle(name, shape, dtype):
    spec = CATALOG[name]
    inputs = spec.sample(shape, dtype, seed=zlib.crc32(name.encode()) % 1000)  # the same inputs every run
    got = as_tuple(spec.run_reference(inputs))
    expected = outputs64(spec.run_oracle(inputs))
    bounds = as_tuple(spec.bound(inputs, spec.params))
    assert len(got) == len(expected) == len(bounds)
    for k, (g, e, b) in enumerate(zip(got, expected, bounds)):
        assert tuple(g.shape) == e.shape, f"{name} output {k}: shape {tuple(g.shape)}, oracle {e.shape}"
        tol.assert_within(g, e, b, f"{name} output {k}")


@pytest.mark.parametrize("name,impl", IMPLS, ids=_id)
def test_implementations_match_oracle(name, impl):
    spec = CATALOG[name]
    im = spec.implementations[impl]
    if im.device == "cuda" and not torch.cuda.is_available():
        pytest.skip(f"{impl} runs on CUDA; this machine has none (scripts/gpu_check.sh runs it on a GPU)")
    for shape in spec.shapes:
        for dtype in im.dtypes:
            inputs = spec.sample(shape, dtype, seed=7)
            got = as_tuple(im.fn(**{k: v.to(im.device) for k, v in inputs.items()}, **spec.params))
            expected = outputs64(spec.run_oracle(inputs))
            bounds = as_tuple((im.bound or spec.bound)(inputs, spec.params))
            for k, (g, e, b) in enumerate(zip(got, expected, bounds)):
                tol.assert_within(g.cpu(), e, b, f"{name} via {impl}, {dtype}, {shape}, output {k}")


def _grad_inputs(spec, dtype=torch.float64):
    inputs = spec.sample(_grad_shape(spec), dtype, seed=3)
    return {k: (v.clone().requires_grad_(k in spec.grads) if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}


def _as_fn(fn, spec, inputs):
    names = [k for k in inputs if k in spec.grads]
    fixed = {k: v for k, v in inputs.items() if k not in spec.grads}

    def call(*tensors):
        return fn(**fixed, **dict(zip(names, tensors)), **spec.params)

    return call, tuple(inputs[k] for k in names)


@pytest.mark.guards(*catalog_guards())
@pytest.mark.parametrize("name", NAMES)
def test_gradcheck_and_gradgradcheck(name):
    """Every parameter's gradient (gain, bias, alpha, shift, ...) against float64 finite differences,
    and the second derivative. A once-differentiable reference must raise on double backward."""
    spec = CATALOG[name]
    inputs = _grad_inputs(spec)
    math_fn = spec.reference if spec.float64_exact else spec.grad_twin
    assert math_fn is not None, f"{name} computes in float32 for float64 input but declares no float64 twin"
    fn, args = _as_fn(math_fn, spec, inputs)
    names = [k for k in inputs if k in spec.grads]
    assert _named_check(torch.autograd.gradcheck, fn, args, names)
    if spec.once_differentiable:
        with pytest.raises(RuntimeError):
            torch.autograd.gradgradcheck(*_as_fn(spec.reference, spec, inputs))
        return
    assert _named_check(torch.autograd.gradgradcheck, fn, args, names)
    if not spec.float64_exact:
        _compare_with_twin(spec, inputs)


def _named_check(check, fn, args, names):
    """gradcheck / gradgradcheck whose failure names the input ("with respect to input 1 (weight)")."""
    try:
        return check(fn, args)
    except GradcheckError as exc:
        text = re.sub(r"input (\d+)", lambda m: f"input {m.group(1)} ({names[int(m.group(1))]})"
                      if int(m.group(1)) < len(names) else m.group(0), str(exc))
        raise AssertionError(f"{check.__name__} of {', '.join(names)}: {text}") from None


def undeclared_gradients(spec) -> list[str]:
    """Floating inputs of a sample that ``grads`` leaves out, and ``grads`` entries that are no input: a
    left-out input's gradient is never checked (a wrong weight gradient would pass every test)."""
    inputs = spec.sample(_grad_shape(spec), torch.float64)
    floating = [k for k, v in inputs.items() if isinstance(v, torch.Tensor) and v.is_floating_point()]
    return [f"{k}: a floating input missing from grads" for k in floating if k not in spec.grads] + \
           [f"{k}: in grads but not an input" for k in spec.grads if k not in inputs]


@pytest.mark.guards(*catalog_guards())
@pytest.mark.parametrize("name", NAMES)
def test_grads_lists_every_floating_input(name):
    problems = undeclared_gradients(CATALOG[name])
    assert not problems, f"{name}: {problems} (declare every input with a gradient in grads)"


def test_the_generic_checks_catch_an_undeclared_and_a_wrong_weight_gradient():
    """A new entry whose weight gradient is wrong: declaring grads=("x",) is refused, and declaring the
    weight makes gradcheck fail with a message that names it."""
    import dataclasses

    class WrongWeightGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight):
            ctx.save_for_backward(x, weight)
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight

        @staticmethod
        def backward(ctx, dy):
            x, weight = ctx.saved_tensors
            with torch.enable_grad():
                xx = x.detach().requires_grad_()
                y = xx * torch.rsqrt(xx.pow(2).mean(-1, keepdim=True) + 1e-6)
                (dx,) = torch.autograd.grad(y, xx, dy * weight)
            return dx, (dy * y.detach()).sum(0) * 2  # twice the true weight gradient

    base = CATALOG["rms_norm"]
    spec = dataclasses.replace(base, name="wrong_weight", params={},
                               reference=lambda x, weight: WrongWeightGrad.apply(x, weight), grads=("x",))
    assert undeclared_gradients(spec) == ["weight: a floating input missing from grads"]
    spec = dataclasses.replace(spec, grads=("x", "weight"))
    inputs = _grad_inputs(spec)
    fn, args = _as_fn(spec.reference, spec, inputs)
    with pytest.raises(AssertionError, match=r"with respect to input 1 \(weight\)"):
        _named_check(torch.autograd.gradcheck, fn, args, [k for k in inputs if k in spec.grads])


def _derivatives(fn, args, seed=5):
    """First derivatives for a fixed cotangent, and a Hessian-vector product along a fixed direction."""
    out = as_tuple(fn(*args))
    g = torch.Generator().manual_seed(seed)
    cot = [torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype) for o in out]
    first = torch.autograd.grad(out, args, cot, create_graph=True, allow_unused=True)
    dirs = [torch.randn(a.shape, generator=g, dtype=torch.float64).to(a.dtype) for a in args]
    s = sum((f.double() * v.double()).sum() for f, v in zip(first, dirs) if f is not None)
    second = torch.autograd.grad(s, args, allow_unused=True)
    return first, second


def _compare_with_twin(spec, inputs):
    """The reference computes in float32: its derivatives must match the float64 twin's to float32
    accuracy. Envelope: a float32 evaluation of a derivative of an RMS over n features takes at most
    2n + 20 roundings on any path, charged against the largest component of that derivative."""
    ref_fn, args = _as_fn(spec.reference, spec, inputs)
    twin_fn, _ = _as_fn(spec.grad_twin, spec, inputs)
    n = inputs[next(iter(inputs))].shape[-1]
    rel = tol.gamma(2 * n + 20, tol.unit_roundoff(torch.float32))
    for order, (mine, theirs) in enumerate(zip(_derivatives(ref_fn, args), _derivatives(twin_fn, args)), 1):
        for a, b in zip(mine, theirs):
            if b is None:
                continue
            assert a is not None
            b = b.detach()
            bound = rel * (b.abs() + b.abs().max())
            assert ((a.detach() - b).abs() <= bound).all(), f"{spec.name}: derivative of order {order} off the twin"


@pytest.mark.parametrize("name", NAMES)
def test_compile_fullgraph_equals_eager(name):
    """torch.compile traces the whole reference in one graph (fullgraph=True) and computes the same bits
    (aot_eager: the traced graph itself, without code generation that may reorder roundings)."""
    spec = CATALOG[name]
    inputs = spec.sample(_grad_shape(spec), torch.float32, seed=11)
    fn, args = _as_fn(spec.reference, spec, {k: v.clone().requires_grad_(k in spec.grads) for k, v in inputs.items()})
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    for a, b in zip(as_tuple(compiled(*args)), as_tuple(fn(*args))):
        assert torch.equal(a, b)


@pytest.mark.parametrize("name,label", [(n, b.label) for n in NAMES for b in CATALOG[n].bad_inputs], ids=_id)
def test_bad_inputs_raise_clear_errors(name, label):
    spec = CATALOG[name]
    bad = next(b for b in spec.bad_inputs if b.label == label)
    inputs, params = bad.change(spec.sample(_grad_shape(spec), torch.float32), dict(spec.params))
    with pytest.raises(bad.exc, match=bad.match):
        spec.reference(**inputs, **params)


@pytest.mark.parametrize("name", NAMES)
def test_zero_rows_forward_and_backward(name):
    spec = CATALOG[name]
    shape = next(s for s in spec.shapes if s[0] == 0)
    inputs = _grad_inputs(spec, torch.float32)
    inputs = {k: v for k, v in inputs.items()}
    empty = spec.sample(shape, torch.float32)
    empty = {k: (v.clone().requires_grad_(k in spec.grads) if isinstance(v, torch.Tensor) else v) for k, v in empty.items()}
    out = as_tuple(spec.reference(**empty, **spec.params))
    assert all(o.numel() == 0 for o in out)
    sum(o.sum() for o in out).backward()
    for k in spec.grads:
        grad = empty[k].grad
        assert grad is not None and grad.shape == empty[k].shape and not grad.abs().sum()


def test_catalog_holds_the_norms_the_site_covers():
    assert len(CATALOG) >= 10
    for name in ("dyt", "derf", "l2_norm", "llama4_l2_norm", "qk_norm.per_head", "qk_norm.full", "rms_norm.gemma"):
        assert name in CATALOG, name


# the catalog-wide rules below are parametrized by entry, so `pytest -k <name>` runs each for that entry

@pytest.mark.parametrize("name", NAMES)
def test_entry_declares_a_source_and_samples_zero_rows_and_an_odd_width(name):
    spec = CATALOG[name]
    assert spec.source and spec.title and spec.reference and spec.oracle
    assert any(s[0] == 0 for s in spec.shapes), f"{spec.name}: no 0-row sample"
    assert any(s[-1] % 2 for s in spec.shapes), f"{spec.name}: no odd width"


@pytest.mark.parametrize("name", NAMES)
def test_families_named_by_the_catalog_exist(name):
    known = {row[0] for row in fam.FAMILIES} | set(fam.OTHER_USERS)
    unknown = set(CATALOG[name].families) - known
    assert not unknown, f"{name} names families that families.py does not know: {unknown}"


@pytest.mark.parametrize("name", NAMES)
def test_registry_holds_every_formula_the_catalog_names(name):
    from reference_impl.norms import formula_registry

    missing = set(CATALOG[name].formulas) - set(formula_registry())
    assert not missing, f"{name} shows formulas the registry lacks: {missing}"


def test_llama4_l2_norm_is_bitwise_transformers():
    llama4 = pytest.importorskip("transformers.models.llama4.modeling_llama4")
    spec = CATALOG["llama4_l2_norm"]
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        x = spec.sample((2, 3, 33), dtype, seed=13)["x"]
        assert torch.equal(spec.reference(x, eps=1e-5), llama4.Llama4TextL2Norm(1e-5)(x))


def test_qwen3_next_gain_is_the_gemma_convention():
    q3n = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
    spec = CATALOG["rms_norm.gemma"]
    for dtype in (torch.float32, torch.bfloat16):
        inputs = spec.sample((3, 33), dtype, seed=17)
        m = q3n.Qwen3NextRMSNorm(33, eps=1e-6)
        with torch.no_grad():
            m.weight.copy_(inputs["weight"])
        assert torch.equal(spec.run_reference(inputs), m(inputs["x"]))


FORMULA_NAMES = [n for n in NAMES if CATALOG[n].formulas]
# registry gradient id suffix -> the input it differentiates; scalars come per row and are summed here
GRAD_OF = {"vjp_x": "x", "vjp_weight": "weight", "vjp_bias": "bias", "vjp_alpha": "alpha", "vjp_shift": "shift",
           "vjp_gate": "gate"}


@pytest.mark.guards(*catalog_guards())
@pytest.mark.parametrize("name", FORMULA_NAMES)
def test_catalog_formulas_hold_and_match_the_reference(name):
    """Each formula a norm module adds is proven (derived ones equal what SymPy derives), and its NumPy
    value equals the float64 reference (forward) or the reference's autograd gradient (its float64 twin's
    where the reference computes in float32 whatever the input)."""
    from reference_impl.norms import formula_registry

    spec = CATALOG[name]
    reg = formula_registry()
    inputs = _grad_inputs(spec)
    math_fn = spec.reference if spec.float64_exact else spec.grad_twin
    y = math_fn(**inputs, **spec.params)
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    grads = dict(zip(spec.grads, torch.autograd.grad(y, [inputs[k] for k in spec.grads], dy)))
    args = {"x": inputs["x"].detach().numpy(), "dy": dy.numpy(), **spec.params}
    for k in ("weight", "bias", "gate"):
        if k in inputs:
            args[k] = inputs[k].detach().numpy()
    if "p" in spec.params:  # pRMSNorm's k = int(d p)
        args["k"] = int(args["x"].shape[-1] * spec.params["p"])
    if "alpha" in inputs:
        args["alpha"] = float(inputs["alpha"].detach())
    if "shift" in inputs:
        args["s"] = float(inputs["shift"].detach())
    u64 = tol.unit_roundoff(torch.float64)
    for fid in spec.formulas:
        f = reg[fid]
        assert f.holds(), f"{fid}: not proven equal to what SymPy derives"
        suffix = fid.split(".", 1)[1]
        if suffix != "forward" and suffix not in GRAD_OF:
            continue  # a statistic, proven above; its value is checked where the norm's tests use it
        value = f.numeric()(**{k: v for k, v in args.items() if k in f.numeric().arg_names or k in ("x", "dy")})
        expected = y.detach().numpy() if suffix == "forward" else grads[GRAD_OF[suffix]].numpy()
        if suffix in ("vjp_alpha", "vjp_shift"):
            value = value.sum()
        # two float64 evaluations of the same value, each at most 4 n + 20 roundings deep on any path
        # (n = number of elements the value reads), charged against the largest component
        expected = np.asarray(expected)
        bound = 2 * tol.gamma(4 * args["x"].size + 20, u64) * (np.abs(expected) + np.abs(expected).max())
        tol.assert_within(np.asarray(value), expected, bound, fid)


# ------------------------------------------------------------------------------------------ independence
# A reference and an oracle written by the same hand can share a mistake. Every entry carries a third,
# independent statement of its math: a SymPy-derived forward formula, or a declared relation to another
# entry whose chain ends at one (reference_impl/norms/relations.py).

from reference_impl.norms import relations as rel  # noqa: E402

RELATED = [n for n in NAMES if rel.relation_of(CATALOG[n]) is not None]


@pytest.mark.guards(*catalog_guards())
@pytest.mark.parametrize("name", NAMES)
def test_every_entry_has_an_independent_check(name):
    problem = rel.independent_check(CATALOG[name], CATALOG)
    assert problem is None, problem


@pytest.mark.guards(*catalog_guards())
@pytest.mark.parametrize("name", RELATED)
def test_declared_relation_holds_for_oracle_and_float64_math(name):
    spec = CATALOG[name]
    for shape in (s for s in spec.shapes if s[0] > 0):
        problems = rel.relation_differences(spec, CATALOG, shape, seed=zlib.crc32(name.encode()) % 1000)
        assert not problems, problems


def test_a_spec_with_neither_formulas_nor_a_relation_is_refused():
    import dataclasses

    bare = dataclasses.replace(CATALOG["rms_norm.llama"], name="scratch", formulas=())
    assert rel.relation_of(bare) is None
    assert re.match(r"scratch has no independent check", rel.independent_check(bare, {**CATALOG, "scratch": bare}))
    itself = {"scratch": rel.Relation("scratch", lambda f, i, p: f(**i), "itself")}
    assert "circle" in rel.independent_check(bare, {**CATALOG, "scratch": bare}, itself)
    dangling = {"scratch": rel.Relation("no_such_norm", lambda f, i, p: f(**i), "nothing")}
    assert "not a catalog entry" in rel.independent_check(bare, CATALOG, dangling)


def test_a_module_declares_its_entries_relations_beside_its_specs(monkeypatch):
    """relation_of finds a relation in the RELATIONS of the module that declares the entry."""
    from reference_impl.norms import declared_in

    module = declared_in("rms_norm.t5")
    mine = rel.Relation("rms_norm", lambda f, i, p: f(x=i["x"], weight=i["weight"], eps=p["eps"]), "declared there")
    monkeypatch.setattr(module, "RELATIONS", {"rms_norm.t5": mine}, raising=False)
    assert rel.relation_of(CATALOG["rms_norm.t5"]) is mine


# ------------------------------------------------------------------------------------------ optional inputs

def _neutral(key: str, like: torch.Tensor) -> torch.Tensor:  # no bias or shift is zero, no gain is one
    return torch.zeros_like(like) if ("bias" in key or "shift" in key) else torch.ones_like(like)


def optional_inputs(spec) -> list[str]:
    """Sample inputs the reference lets a caller leave out (a keyword defaulting to None)."""
    import inspect

    params = inspect.signature(spec.reference).parameters
    inputs = spec.sample(_grad_shape(spec), torch.float32)
    return [k for k in inputs if k in params and params[k].default is None]


OPTIONAL = [(n, k) for n in NAMES for k in optional_inputs(CATALOG[n])]


@pytest.mark.guards(*catalog_guards())
@pytest.mark.parametrize("name,absent", OPTIONAL, ids=_id)
def test_an_optional_input_left_out_is_its_neutral_value(name, absent):
    """weight=None (bias=None, ...) computes what the oracle computes with a unit gain (zero bias), within
    the spec's bound, in every dtype: a gain-free path of its own cannot be wrong unseen."""
    _check_absent(CATALOG[name], absent)


def _check_absent(spec, absent):
    for dtype in spec.dtypes:
        inputs = spec.sample(_grad_shape(spec), dtype, seed=9)
        neutral = {**inputs, absent: _neutral(absent, inputs[absent])}
        got = as_tuple(spec.run_reference({**inputs, absent: None}))
        expected = outputs64(spec.run_oracle(neutral))
        for k, (g, e, b) in enumerate(zip(got, expected, as_tuple(spec.bound(neutral, spec.params)))):
            tol.assert_within(g, e, b, f"{spec.name} without {absent}, {dtype}, output {k}")


# ------------------------------------------------------------------------------------------ planted mistakes
# A contributor's new entry with one consistent mistake must fail somewhere (the CRMSNorm trial).

def _crms_reference(x, weight, eps=1e-6, wrong=False):
    # CRMSNorm (arXiv:2305.14858): RMSNorm of the d + 1 numbers [x, -sum x], the first d kept
    s = x.pow(2).sum(-1, keepdim=True) + (0 if wrong else x.sum(-1, keepdim=True).pow(2))
    return x * torch.rsqrt(s / (x.shape[-1] + (0 if wrong else 1)) + eps) * weight


def _crms_oracle(x, weight, eps=1e-6, wrong=False):
    s = (x * x).sum(-1, keepdims=True) + (0 if wrong else x.sum(-1, keepdims=True) ** 2)
    return x / np.sqrt(s / (x.shape[-1] + (0 if wrong else 1)) + eps) * weight


def _crms_relation(f, i, p):
    x = i["x"]
    z = torch.cat([x, -x.sum(-1, keepdim=True)], -1)
    return f(x=z, weight=torch.ones(z.shape[-1], dtype=x.dtype), eps=p["eps"])[..., :-1] * i["weight"]


CRMS_RELATION = rel.Relation("rms_norm", _crms_relation, "RMSNorm of [x, -sum x]")


def _crms(wrong: bool):
    import dataclasses

    return dataclasses.replace(
        CATALOG["rms_norm"], name="crms_norm", title="CRMSNorm", formulas=(), build_formulas=None,
        reference=lambda x, weight, eps, wrong=wrong: _crms_reference(x, weight, eps, wrong),
        oracle=lambda x, weight, eps, wrong=wrong: _crms_oracle(x, weight, eps, wrong), params={"eps": 1e-6},
        implementations={}, match_kind=None, layer=None)


def test_planted_a_reference_and_oracle_sharing_a_wrong_formula_fail_the_relation():
    right, wrong = _crms(False), _crms(True)
    for spec in (right, wrong):  # reference and oracle agree with each other either way
        inputs = spec.sample((3, 7), torch.float64, seed=1)
        np.testing.assert_allclose(spec.run_reference(inputs).numpy(), spec.run_oracle(inputs), rtol=1e-12)
    assert rel.relation_differences(right, CATALOG, (3, 7), relation=CRMS_RELATION) == []
    problems = rel.relation_differences(wrong, CATALOG, (3, 7), relation=CRMS_RELATION)
    assert any("oracle is not RMSNorm of [x, -sum x]" in p for p in problems), problems
    assert any("float64 math is not RMSNorm" in p for p in problems), problems
    assert "no independent check" in rel.independent_check(wrong, CATALOG)
    assert rel.independent_check(wrong, CATALOG, {"crms_norm": CRMS_RELATION}) is None


def test_planted_a_wrong_gain_free_path_fails():
    import dataclasses

    dyt = CATALOG["dyt"]

    def reference(x, alpha, weight=None, bias=None):
        out = dyt.reference(x, alpha, weight, bias)
        return out * 1.01 if weight is None else out  # the gain-free path scales by mistake

    planted = dataclasses.replace(dyt, name="scratch_dyt", reference=reference)
    _check_absent(dyt, "weight")
    with pytest.raises(AssertionError, match="scratch_dyt without weight"):
        _check_absent(planted, "weight")


# ------------------------------------------------------------------------------------------ gradients in every dtype

def _low_precision_grad_problems(spec, dtype) -> list[str]:
    """The reference's gradients for ``dtype`` input against the float64 gradient on the same (rounded)
    inputs and cotangent. Bound, from the envelope the float64-twin comparison uses (a derivative's every
    path takes at most 2 m + 20 roundings, m the elements one gradient element reads: the row's width plus
    the elements a sum over rows adds), charged in the input's own precision (the least a reference may
    compute in) against the largest component, plus the final rounding of the gradient to its dtype."""
    low = {k: (v.clone().requires_grad_(k in spec.grads) if isinstance(v, torch.Tensor) else v)
           for k, v in spec.sample(_grad_shape(spec), dtype, seed=4).items()}
    high = {k: (v.detach().double().requires_grad_(k in spec.grads) if isinstance(v, torch.Tensor) else v)
            for k, v in low.items()}
    first = next(iter(low.values()))
    d, total = first.shape[-1], first.numel()
    out_low = as_tuple(spec.reference(**low, **spec.params))
    out_high = as_tuple(rel.float64_math(spec)(**high, **spec.params))
    g = torch.Generator().manual_seed(6)
    cots = [torch.randn(o.shape, generator=g, dtype=torch.float64) for o in out_high]
    names = [k for k in low if k in spec.grads]
    got = torch.autograd.grad(out_low, [low[k] for k in names], [c.to(o.dtype) for c, o in zip(cots, out_low)],
                              allow_unused=True)
    want = torch.autograd.grad(out_high, [high[k] for k in names],
                               [c.to(o.dtype).double() for c, o in zip(cots, out_low)], allow_unused=True)
    problems = [f"{spec.name}, {dtype}: no gradient for {k}" for k, a, b in zip(names, got, want)
                if a is None and b is not None]
    for k, a, b in ((k, a, b) for k, a, b in zip(names, got, want) if a is not None and b is not None):
        b = b.detach()
        m = d + total // max(b.numel(), 1)
        u_in = tol.unit_roundoff(low[k].dtype)
        rel_bound = tol.gamma(2 * m + 20, tol.unit_roundoff(dtype)) + u_in
        bound = rel_bound * (b.abs() + b.abs().max())
        err = (a.detach().double() - b).abs()
        if not (err <= bound).all():
            problems.append(f"{spec.name}, {dtype}: gradient of {k} off the float64 gradient by up to "
                            f"{float((err / (b.abs() + b.abs().max())).max()):.3g} of its size (bound {rel_bound:.3g})")
    return problems


LOW_GRADS = [(n, dt) for n in NAMES for dt in CATALOG[n].dtypes if dt != torch.float64]


@pytest.mark.guards(*catalog_guards())
@pytest.mark.parametrize("name,dtype", LOW_GRADS, ids=_id)
def test_gradients_in_every_dtype_match_the_float64_gradient(name, dtype):
    problems = _low_precision_grad_problems(CATALOG[name], dtype)
    assert not problems, problems


class _ScaledBelowFloat64(torch.autograd.Function):
    """A planted backward: right in float64, 1.5 times too large in every other dtype."""

    @staticmethod
    def forward(ctx, x, weight):
        with torch.enable_grad():
            xx, ww = x.detach().requires_grad_(), weight.detach().requires_grad_()
            y = CATALOG["rms_norm"].reference(xx, ww, **CATALOG["rms_norm"].params)
        ctx.save_for_backward(xx, ww, y)
        return y.detach()

    @staticmethod
    def backward(ctx, dy):
        xx, ww, y = ctx.saved_tensors
        dx, dw = torch.autograd.grad(y, (xx, ww), dy)
        scale = 1.0 if xx.dtype == torch.float64 else 1.5
        return dx * scale, dw


def test_planted_a_backward_wrong_only_below_float64_fails():
    import dataclasses

    base = CATALOG["rms_norm"]
    planted = dataclasses.replace(base, name="scratch_rms", params={},
                                  reference=lambda x, weight: _ScaledBelowFloat64.apply(x, weight))
    assert _low_precision_grad_problems(base, torch.bfloat16) == []
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        problems = _low_precision_grad_problems(planted, dtype)
        assert any("gradient of x off the float64 gradient" in p for p in problems), (dtype, problems)


# ------------------------------------------------------------------------------------------ tight bounds

def _bound_use(spec, dtype) -> tuple[float, float]:
    """(the largest share of its bound the reference's error uses on the spec's samples, the least share an
    honest bound leaves it). The output's last rounding to its dtype errs by up to u |y|, and among a
    sample's many elements some come close to it; a derived bound charges at most 2 d + 20 roundings on any
    path (d the widest sample row), so an honest bound is used to at least 1 / (4 (2 d + 20)) somewhere. A
    bound looser than that (one loosened to a few percent in float32) charges roundings that do not happen."""
    used, width = 0.0, 1
    for shape in (s for s in spec.shapes if s[0] > 0):
        inputs = spec.sample(shape, dtype, seed=zlib.crc32(spec.name.encode()) % 1000)
        got = as_tuple(spec.run_reference(inputs))
        for g, e, b in zip(got, outputs64(spec.run_oracle(inputs)), as_tuple(spec.bound(inputs, spec.params))):
            b = np.broadcast_to(np.asarray(b, dtype=np.float64), e.shape)
            err = np.abs(g.detach().double().numpy() - e)
            if (b > 0).any():
                used = max(used, float((err[b > 0] / b[b > 0]).max()))
        width = max(width, shape[-1])
    return used, 1 / (4 * (2 * width + 20))


@pytest.mark.guards(*catalog_guards())
@pytest.mark.parametrize("name,dtype", LOW_GRADS, ids=_id)
def test_every_bound_is_tight(name, dtype):
    used, least = _bound_use(CATALOG[name], dtype)
    assert used >= least, (f"{name}, {dtype}: the error uses {used:.3g} of the bound at most, an honest bound "
                           f"at least {least:.3g}: the bound is looser than the roundings it charges")


def test_planted_a_bound_loosened_to_five_percent_fails():
    import dataclasses

    base = CATALOG["rms_norm"]

    def loose(inputs, params):
        return 0.05 * np.abs(outputs64(base.run_oracle(inputs))[0])

    planted = dataclasses.replace(base, name="scratch_rms", bound=loose)
    used, least = _bound_use(planted, torch.float32)  # every entry runs in float32, where 5 % is far too loose
    assert used < least, (used, least)
    assert _bound_use(base, torch.float32)[0] >= least
