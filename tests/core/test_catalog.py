"""Generic tests over the norm catalog: a norm is tested by being declared in reference_impl.norms.

For every spec: the reference against the float64 oracle within the spec's bound (0 rows, one feature,
odd widths, every dtype), every implementation against the oracle, float64 gradcheck and gradgradcheck
(of the reference, or of its float64 twin when the reference computes in float32 whatever the input, with
the reference's own first and second derivatives then compared to the twin's), torch.compile with
fullgraph=True against eager, and the bad calls it must reject with a clear error.
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
    for spec in CATALOG.values():
        assert spec.source and spec.title and spec.reference and spec.oracle
        assert any(s[0] == 0 for s in spec.shapes), f"{spec.name}: no 0-row sample"
        assert any(s[-1] % 2 for s in spec.shapes), f"{spec.name}: no odd width"


def test_families_named_by_the_catalog_exist():
    known = {row[0] for row in fam.FAMILIES} | set(fam.OTHER_USERS)
    for spec in CATALOG.values():
        unknown = set(spec.families) - known
        assert not unknown, f"{spec.name} names families that families.py does not know: {unknown}"


def test_registry_holds_every_formula_the_catalog_names():
    from reference_impl import symbolic

    reg = symbolic.registry()
    for spec in CATALOG.values():
        missing = set(spec.formulas) - set(reg)
        assert not missing, f"{spec.name} shows formulas the registry lacks: {missing}"


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
    from reference_impl import symbolic

    spec = CATALOG[name]
    reg = symbolic.registry()
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
