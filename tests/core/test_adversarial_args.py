"""Arguments that once gave a wrong answer or an unclear error: each now works or raises naming the problem.

- eps: any ``numbers.Real`` (NumPy scalars, fractions) is accepted; under ``torch.compile`` a bad eps
  raises as in eager (a constant while tracing, a dynamic one through ``torch._check`` on every call)
  in the reference, the conventions and the variants;
- sparse and nested tensors: "x must be a dense, strided tensor";
- ``scale_norm(eps=1e39)`` names eps; ``rms_norm(convention="")`` is refused;
- the Triton backward functions check ``rstd`` and ``mean``; Triton refuses eps beyond float32.
"""
from __future__ import annotations

import fractions

import numpy as np
import pytest
import torch

import reference_impl
from reference_impl import conventions, variants
from reference_impl.norms.layer_norm import layer_norm
from reference_impl.norms.rms_norm import rms_norm

X = torch.randn(3, 8)


# --- eps: any real number, checked under torch.compile too -------------------------------------------

@pytest.mark.parametrize("eps", [np.float32(1e-5), np.float64(1e-6), np.int64(0), fractions.Fraction(1, 100000)],
                         ids=["np.float32", "np.float64", "np.int64", "Fraction"])
def test_numpy_scalars_and_other_reals_are_accepted(eps):
    want = rms_norm(X, None, float(eps))
    assert torch.equal(rms_norm(X, None, eps), want)
    assert torch.equal(conventions.rms_norm(X, None, eps, convention="llama"),
                       conventions.rms_norm(X, None, float(eps), convention="llama"))
    assert torch.equal(reference_impl.fused_rms_norm(X, None, eps), reference_impl.fused_rms_norm(X, None, float(eps)))


@pytest.mark.parametrize("eps", [np.bool_(True), True, 1j, "1e-5", None])
def test_non_real_eps_is_a_type_error(eps):
    with pytest.raises(TypeError, match="eps must be a real number"):
        layer_norm(X, eps=eps)


ENTRY_POINTS = {
    "reference.layer_norm": lambda x, eps: layer_norm(x, eps=eps),
    "reference.rms_norm": lambda x, eps: rms_norm(x, eps=eps),
    "conventions.rms_norm": lambda x, eps: conventions.rms_norm(x, None, eps, convention="gemma"),
    "conventions.layer_norm": lambda x, eps: conventions.layer_norm(x, None, None, eps, convention="neox"),
    "variants.partial_rms_norm": lambda x, eps: variants.partial_rms_norm(x, None, eps=eps, p=0.5),
    "variants.scale_norm": lambda x, eps: variants.scale_norm(x, torch.tensor(2.0), eps),
}


def _fresh():
    torch._dynamo.reset()


@pytest.mark.parametrize("name", list(ENTRY_POINTS))
def test_a_constant_bad_eps_raises_under_compile(name):
    """fullgraph=True: the eager check fails while tracing (Dynamo names the error it observed); without
    fullgraph the graph breaks and the eager ValueError itself reaches the caller."""
    fn = ENTRY_POINTS[name]
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="eps"):
            fn(X, bad)
        _fresh()
        with pytest.raises(ValueError, match="eps"):
            torch.compile(lambda x: fn(x, bad))(X)
        _fresh()
        with pytest.raises(Exception, match="eps must be"):
            torch.compile(lambda x: fn(x, bad), fullgraph=True)(X)


@pytest.mark.parametrize("name", list(ENTRY_POINTS))
def test_a_dynamic_eps_is_checked_on_every_call(name):
    """dynamic=True traces eps as a symbol: good values give the eager result, a bad one raises instead of
    returning plausible numbers."""
    fn = ENTRY_POINTS[name]
    _fresh()
    compiled = torch.compile(fn, dynamic=True, fullgraph=True)
    for good in (1e-6, 1e-3):
        torch.testing.assert_close(compiled(X, good), fn(X, good))
    for bad in (-1.0, -1e-3, float("nan")):
        with pytest.raises(Exception, match="eps must be"):
            compiled(X, bad)
    _fresh()


# --- tensors without rows ----------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["sparse_coo", "sparse_csr", "nested"])
@pytest.mark.parametrize("fn", [rms_norm, layer_norm, reference_impl.rms_norm, variants.scale_norm,
                                reference_impl.fused_rms_norm, reference_impl.fused_layer_norm],
                         ids=lambda f: f"{f.__module__}.{f.__name__}")
def test_sparse_and_nested_tensors_are_refused_by_name(kind, fn):
    if kind == "sparse_coo":
        x = X.to_sparse()
    elif kind == "sparse_csr":
        x = X.to_sparse_csr()
    else:
        x = torch.nested.nested_tensor([torch.randn(2, 8), torch.randn(3, 8)])
    args = (x, torch.tensor(1.0)) if fn is variants.scale_norm else (x,)
    with pytest.raises(ValueError, match="x must be a dense, strided tensor"):
        fn(*args)


def test_a_sparse_weight_is_refused_by_name():
    with pytest.raises(ValueError, match="weight must be a dense, strided tensor"):
        rms_norm(X, torch.ones(8).to_sparse())


# --- single entry points ---------------------------------------------------------------------------------

def test_scale_norm_names_an_eps_beyond_its_float_type():
    with pytest.raises(ValueError, match="eps=1e\\+39 is larger than"):
        variants.scale_norm(X, torch.tensor(2.0), 1e39)
    assert torch.isfinite(variants.scale_norm(X.double(), torch.tensor(2.0), 1e39)).all()  # fits float64


def test_an_empty_convention_name_is_refused():
    with pytest.raises(ValueError, match="unknown RMSNorm convention ''"):
        reference_impl.rms_norm(X, convention="")


# --- Triton: host-side checks (they run before any kernel, so no GPU or interpreter is needed) --------------

def test_triton_backward_checks_its_statistics():
    tn = pytest.importorskip("reference_impl.ops.triton_norm")
    h, dy = torch.randn(4, 16), torch.randn(4, 16)
    good = torch.ones(4)
    for rstd, kind, text in ((torch.ones(0), ValueError, "rstd has shape \\(0,\\)"),
                             (torch.ones(3), ValueError, "rstd has shape \\(3,\\); it must be x.shape\\[:-1\\]"),
                             (torch.ones(4, dtype=torch.int64), TypeError, "rstd has dtype torch.int64"),
                             (None, TypeError, "rstd must be a torch.Tensor")):
        with pytest.raises(kind, match=text):
            tn.rms_norm_bwd(dy, h, None, rstd)
        with pytest.raises(kind, match=text):
            tn.layer_norm_bwd(dy, h, None, None, good, rstd)
        with pytest.raises(kind, match=text.replace("rstd", "mean")):
            tn.layer_norm_bwd(dy, h, None, None, rstd, good)


def test_triton_refuses_eps_beyond_float32():
    tn = pytest.importorskip("reference_impl.ops.triton_norm")
    for call in (lambda: tn.triton_rms_norm(X, eps=1e39), lambda: tn.triton_layer_norm(X, eps=1e39),
                 lambda: tn.rms_norm_fwd(X, eps=1e39), lambda: tn.layer_norm_fwd(X, eps=1e39)):
        with pytest.raises(ValueError, match="eps=1e\\+39 is larger than"):
            call()
