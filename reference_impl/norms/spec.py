"""What a catalog entry declares: :class:`NormSpec`, and the helpers the entries share.

A spec names its math once: the reference (PyTorch, differentiable), the float64 oracle (NumPy), the
forward error bound (from :mod:`reference_impl.tolerances`), its sample inputs, the registry formulas it
shows, the implementations (native, Triton, CUDA) that claim to compute it, and the model families that
use it. The generic tests (tests/core/test_catalog.py) iterate over every spec; nothing else needs to
know a norm exists.

Calling protocol: ``reference(**inputs, **params)`` and ``oracle(**inputs_as_float64_arrays, **params)``,
where ``inputs`` is the dict :meth:`NormSpec.sample` returns (tensors; ``x`` first) and ``params`` the
spec's fixed keyword parameters (eps, convention, ...). Both return one array or a tuple of arrays.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
# 0 rows, one feature, odd widths, a width past one SIMD register, a 3-d batch
SHAPES = ((0, 7), (1, 1), (3, 7), (2, 3, 33), (4, 129))


@dataclass(frozen=True)
class Layer:
    """How a model holds a catalog norm as a layer: ``build(width, eps)`` returns the ``nn.Module`` (its gain
    at the module's own initial value), and ``short`` is the name a model configuration uses for it (the tiny
    decoder of the training studies takes ``norm="rms"``). A norm without statistics may ignore ``eps``.
    Shorts are unique across the catalog; :func:`reference_impl.norms.model_layers` collects them."""

    short: str
    build: Callable[[int, float], Any]

    def __post_init__(self):
        if not (isinstance(self.short, str) and self.short.isidentifier() and self.short.islower()):
            raise ValueError(f"a layer's short name must be a lower-case identifier, got {self.short!r}")
        if not callable(self.build):
            raise TypeError(f"layer {self.short!r}: build must be callable (width, eps) -> nn.Module")


class NotApplicable(Exception):
    """A matching candidate that does not apply to a probe (skipped there, not counted)."""


@dataclass(frozen=True)
class Impl:
    """An implementation of a spec's math: ``fn`` takes the reference's arguments; ``device`` is where it
    runs ("cpu" or "cuda"); ``dtypes`` those it accepts; ``bound(inputs, params)`` its forward bound
    against the oracle when its roundings differ from the reference's (``None``: the spec's bound)."""

    fn: Callable
    device: str = "cpu"
    dtypes: tuple = (torch.float32, torch.bfloat16, torch.float16)
    bound: Callable | None = None


@dataclass(frozen=True)
class BadInput:
    """A bad call: ``change(inputs, params)`` returns the (inputs, params) to call with; the reference
    must raise ``exc`` with a message matching ``match``."""

    label: str
    change: Callable
    exc: type
    match: str


@dataclass(frozen=True)
class NormSpec:
    name: str
    title: str
    source: str                                   # primary citation (paper, model source file)
    reference: Callable[..., Any]
    oracle: Callable[..., Any]
    bound: Callable[..., Any]                     # bound(inputs, params) -> array or tuple, like the output
    make_inputs: Callable[..., dict]              # make_inputs(shape, dtype, generator) -> {name: tensor}
    params: dict = field(default_factory=dict)
    formulas: tuple = ()                          # registry ids the norm's page section shows
    build_formulas: Callable | None = None        # () -> [Formula]: this norm's entries in the registry
    conventions: tuple = ()                       # the casting order / placement it replays
    families: tuple = ()                          # model families that use it (names as in families.py)
    implementations: dict = field(default_factory=dict)   # name -> Impl
    shapes: tuple = SHAPES
    dtypes: tuple = DTYPES
    grads: tuple = ("x",)                         # inputs that receive gradients
    float64_exact: bool = True                    # computes in float64 for float64 input
    grad_twin: Callable | None = None             # float64 twin of the math when float64_exact is False
    bad_inputs: tuple = ()
    once_differentiable: bool = False             # double backward raises instead of computing
    page: str = "norms.md"
    layer: Layer | None = None                    # the nn.Module a model holds for it (the tiny decoder's norms)
    # how reference_impl.check.matching compares a module with this entry (None: not a matching candidate)
    match_kind: str | None = None                 # "rms", "layer", "l2", "fused_add_rms", "gated_rms", ...
    match_run: Callable | None = None             # match_run(probe, **variant options) -> Tensor
    # (suffix, options): one candidate "name (suffix)" each; a tuple suffix adds one "(part)" per part, a
    # part starting with "." is joined as is; options "convention", "placement", "folded" set the candidate's
    # fields (defaults: the entry's name, "inside", False); every option goes to match_run
    match_variants: tuple = ()
    match_rank: int = 100                         # preference among the candidates of a kind (low first)
    match_description: Any = ""                   # a sentence saying what a matched module computes,
    #                                               or {convention: sentence} for an entry of several orders

    def sample(self, shape, dtype, seed=0) -> dict:
        g = torch.Generator().manual_seed(seed)
        return self.make_inputs(tuple(shape), dtype, g)

    def run_oracle(self, inputs: dict):
        return self.oracle(**{k: to64(v) for k, v in inputs.items()}, **self.params)

    def run_reference(self, inputs: dict, **override):
        return self.reference(**inputs, **{**self.params, **override})

    def guard_ids(self) -> tuple:
        """The ids the generic tests guard for this norm: its formulas and ``norm.<name>``."""
        return (f"norm.{self.name}",) + tuple(self.formulas)


def to64(t):
    if t is None or not isinstance(t, torch.Tensor):
        return t
    return t.detach().cpu().double().numpy()


def randn(shape, dtype, g, scale=1.0, offset=0.0):
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale + offset).to(dtype)


def gain(d, dtype, g, around=1.0):
    """A gain near ``around`` in float32 for low-precision x (as models store it), else x's dtype."""
    wd = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    return randn((d,), wd, g, 0.5, around)


def as_tuple(v):
    return v if isinstance(v, tuple) else (v,)


def outputs64(v):
    return tuple(np.asarray(a, dtype=np.float64) for a in as_tuple(v))


def replace_input(name, value):
    """A bad input for :class:`BadInput`: the sample with input ``name`` replaced by ``value(old)`` (or by
    ``value`` itself when it is not callable), e.g. ``replace_input("x", lambda x: x.to(torch.int32))``."""
    def change(inputs, params):
        return {**inputs, name: value(inputs[name]) if callable(value) else value}, params
    return change


def set_param(name, value):
    """A bad input for :class:`BadInput`: the sample with keyword parameter ``name`` set to ``value``, e.g.
    ``set_param("eps", -1.0)``."""
    def change(inputs, params):
        return inputs, {**params, name: value}
    return change


def common_bad(gains=("weight",), eps=True) -> tuple:
    """The bad calls every norm over the last dimension must reject, with the words its error uses."""
    out = [
        BadInput("x not a tensor", replace_input("x", lambda x: x.tolist()), TypeError, "torch.Tensor"),
        BadInput("integer x", replace_input("x", lambda x: x.to(torch.int32)), TypeError, "dtype"),
        BadInput("0-d x", replace_input("x", lambda x: torch.tensor(1.0, dtype=x.dtype)), ValueError, "0-d"),
        BadInput("empty last dimension", replace_input("x", lambda x: x[..., :0]), ValueError, "empty last dimension"),
    ]
    for name in gains:
        out.append(BadInput(f"{name} of the wrong length", replace_input(name, lambda w: torch.cat([w, w[:1]])),
                            ValueError, "shape"))
    if eps:
        out.append(BadInput("negative eps", set_param("eps", -1.0), ValueError, "eps"))
        out.append(BadInput("NaN eps", set_param("eps", float("nan")), ValueError, "eps"))
    return tuple(out)
