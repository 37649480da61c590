"""Declared relations: an entry's float64 math written through another entry's, as an independent check.

A catalog entry's reference and oracle are written by the same hand; a mistake they share passes every
comparison between them. Each entry therefore needs a third, independent statement of its math: either
registry formulas that SymPy derives (``NormSpec.formulas`` with a ``*.forward`` id), or a
:class:`Relation` to another entry, e.g. Gemma's RMSNorm is RMSNorm with the gain ``1 + w``, a fused add
is RMSNorm of ``x + residual``, a per-head QK-norm is RMSNorm of each head. tests/core/test_catalog.py
checks each relation in float64 (the entry's oracle and its float64 math against the related entry's),
follows every chain of relations to an entry with SymPy formulas, and refuses an entry with neither.

An entry's module declares its relations next to its ``SPECS``: a module-level ``RELATIONS`` dict, entry
name -> :class:`Relation`. :data:`RELATIONS` here holds those of the entries whose modules keep their code
fixed (long timing studies hash their sources) or were written before this rule.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable

import torch


@dataclass(frozen=True)
class Relation:
    """``compute(f, inputs, params)`` gives the entry's outputs from ``f``, the float64 math of entry
    ``entry`` (called with keyword arguments; that entry's own parameters are the defaults). ``inputs``
    are the entry's sample inputs in float64, ``params`` its parameters. ``says`` is the relation in words."""

    entry: str
    compute: Callable
    says: str


def _ones(x, n=None):
    return torch.ones(x.shape[-1] if n is None else n, dtype=x.dtype)


def _same(entry, *keys, says="the same math in float64 (only the roundings differ)"):
    """The related entry on the same inputs (those named in ``keys``) and eps."""
    return Relation(entry, lambda f, i, p: f(**{k: i[k] for k in keys}, eps=p["eps"]), says)


def _heads(x, hd):
    return x.reshape(*x.shape[:-1], x.shape[-1] // hd, hd)


def _rms_heads(f, x, w, eps, hd):
    return f(x=_heads(x, hd), weight=w, eps=eps).reshape(x.shape)


def _qk(gemma: bool):
    def compute(f, i, p):
        hd, eps = p["head_dim"], p["eps"]
        wq, wk = (1 + i["q_weight"], 1 + i["k_weight"]) if gemma else (i["q_weight"], i["k_weight"])
        if p.get("placement") == "full":
            return f(x=i["q"], weight=wq, eps=eps), f(x=i["k"], weight=wk, eps=eps)
        return _rms_heads(f, i["q"], wq, eps, hd), _rms_heads(f, i["k"], wk, eps, hd)
    return compute


def _fused(f, i, p):
    s = i["x"] + i["residual"]
    extra = {"bias": i["bias"]} if "bias" in i else {}
    return f(x=s, weight=i["weight"], eps=p["eps"], **extra), s


def _grouped(f, i, p):
    x, g = i["x"], p["groups"]
    xs = x.reshape(*x.shape[:-1], g, x.shape[-1] // g)
    return f(x=xs, weight=_ones(xs), eps=p["eps"]).reshape(x.shape) * i["weight"]


def _l2(f, i, p):
    # x / max(||x||, eps) = x / rms(x) / sqrt(d) wherever ||x|| > eps (every sample row)
    x = i["x"]
    return f(x=x, weight=_ones(x), eps=0.0) / x.shape[-1] ** 0.5


def _head_gain(f, i, p):
    x = i["x"]
    y = f(x=x, weight=_ones(x), bias=torch.zeros_like(_ones(x)), eps=p["eps"]) * i["weight"]
    return y + i["bias"] if i.get("bias") is not None else y


def _qk_layer(f, i, p):
    return (f(x=i["q"], weight=i["q_weight"], bias=i["q_bias"], eps=p["eps"]),
            f(x=i["k"], weight=i["k_weight"], bias=i["k_bias"], eps=p["eps"]))


RELATIONS: dict[str, Relation] = {
    **{n: _same("rms_norm", "x", "weight") for n in ("rms_norm.llama", "rms_norm.t5", "rms_norm.olmo2",
                                                   "rms_norm.torch", "rms_norm.imagegpt")},
    "rms_norm.gemma": Relation("rms_norm", lambda f, i, p: f(x=i["x"], weight=1 + i["weight"], eps=p["eps"]),
                               "RMSNorm with the gain 1 + w"),
    "rms_norm.eps_outside": Relation(
        "rms_norm", lambda f, i, p: _eps_outside(f, i["x"], i["weight"], p["eps"]),
        "RMSNorm without eps, scaled by rms / (rms + eps)"),
    "rms_norm.deepseek_v4": Relation("rms_norm", lambda f, i, p: f(x=i["x"], weight=_ones(i["x"]), eps=p["eps"]),
                                     "RMSNorm with a unit gain"),
    "llama4_l2_norm": Relation("rms_norm", lambda f, i, p: f(x=i["x"], weight=_ones(i["x"]), eps=p["eps"]),
                               "RMSNorm with a unit gain (the mean square, not the sum, under the root)"),
    "l2_norm": Relation("rms_norm", _l2, "RMSNorm without eps and gain, divided by sqrt(d)"),
    "scale_norm": Relation("l2_norm", lambda f, i, p: i["g"][0] * f(x=i["x"], eps=p["eps"]),
                           "the scalar g times the L2 normalization"),
    **{n: _same("layer_norm", "x", "weight", "bias") for n in ("layer_norm.neox", "layer_norm.cohere",
                                                             "layer_norm.x_dtype", "layer_norm.deberta")},
    "fused_add_rms_norm": Relation("rms_norm", _fused, "RMSNorm of s = x + residual, and s"),
    "fused_add_layer_norm": Relation("layer_norm", _fused, "LayerNorm of s = x + residual, and s"),
    "grouped_rms_norm": Relation("rms_norm", _grouped, "RMSNorm of each group of d / groups features, then the gain"),
    "qk_norm.per_head": Relation("rms_norm", _qk(False), "RMSNorm of each head of q and of k"),
    "qk_norm.per_head_gemma": Relation("rms_norm", _qk(True), "RMSNorm of each head with the gain 1 + w"),
    "qk_norm.full": Relation("rms_norm", _qk(False), "RMSNorm of the whole q and k projections"),
    "qk_norm.layer_norm": Relation("layer_norm", _qk_layer, "LayerNorm of q and of k"),
    **{f"qk_norm.layer_per_head_gain.{o}": Relation("layer_norm", _head_gain,
                                                    "LayerNorm of each head, then a gain (and bias) per head")
       for o in ("stablelm", "chameleon", "cohere")},
}


def _eps_outside(f, x, w, eps):
    y0 = f(x=x, weight=w, eps=0.0)                 # x w / rms
    rms = (x.pow(2).mean(-1, keepdim=True)).sqrt()
    return y0 * rms / (rms + eps)


def relation_of(spec, table: dict | None = None) -> Relation | None:
    """The relation declared for an entry: in ``table`` when one is given (a scratch entry's), else in the
    ``RELATIONS`` of the module that declares the entry, else in :data:`RELATIONS`."""
    if table is not None:
        return table.get(spec.name)
    home = _declaring_module(spec)
    own = getattr(home, "RELATIONS", {}) if home is not None else {}
    return own[spec.name] if spec.name in own else RELATIONS.get(spec.name)


def _declaring_module(spec):
    """The already imported module of this package whose ``SPECS`` holds this very spec, or None (a scratch
    entry). Found in ``sys.modules`` rather than through the catalog, which imports this module."""
    prefix = __name__.rpartition(".")[0] + "."
    for name, module in list(sys.modules.items()):
        if name.startswith(prefix) and any(s is spec for s in getattr(module, "SPECS", ())):
            return module
    return None


def float64_math(spec):
    """The entry's math in float64: its reference, or its float64 twin when the reference computes in
    float32 whatever the input."""
    return spec.reference if spec.float64_exact else spec.grad_twin


def has_derived_forward(spec) -> bool:
    """The entry shows a forward formula of the SymPy registry (proven and checked against its reference by
    tests/core/test_catalog.py::test_catalog_formulas_hold_and_match_the_reference)."""
    return any(f.endswith(".forward") for f in spec.formulas)


def independent_check(spec, catalog, table: dict | None = None) -> str | None:
    """None when the entry, or the end of its chain of relations, has SymPy-derived forward formulas;
    otherwise why the entry has no independent check (``table``: relations of scratch entries, looked up
    before the declared ones)."""
    seen = [spec.name]
    while not has_derived_forward(spec):
        rel = (table or {}).get(spec.name) or relation_of(spec)
        if rel is None:
            return (f"{seen[-1]} has no independent check: declare registry formulas derived by SymPy "
                    f"(a '<id>.forward' in formulas) or a Relation to another entry"
                    + (f" (reached from {seen[0]})" if len(seen) > 1 else ""))
        if rel.entry not in catalog:
            return f"{spec.name} is related to {rel.entry!r}, which is not a catalog entry"
        if rel.entry in seen:
            return f"relations run in a circle: {' -> '.join(seen + [rel.entry])}"
        seen.append(rel.entry)
        spec = catalog[rel.entry]
    return None


def relation_differences(spec, catalog, shape, seed=0, relation: Relation | None = None) -> list[str]:
    """Where the entry's float64 oracle or float64 math departs from its relation, beyond what two float64
    evaluations can differ by: each at most 4 n + 20 roundings deep on any path (n: elements read),
    charged against the largest component (as the registry's formulas are checked). ``relation``: a scratch
    entry's, instead of the declared one."""
    import numpy as np

    from .. import tolerances as tol
    from .spec import as_tuple, outputs64

    rel = relation or relation_of(spec)
    other = catalog[rel.entry]
    inputs = spec.sample(shape, torch.float64, seed=seed)
    inputs = {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    other_math = float64_math(other)

    def f(**kw):
        return other_math(**{**other.params, **kw})

    want = outputs64(tuple(t.detach() for t in as_tuple(rel.compute(f, inputs, dict(spec.params)))))
    n = sum(v.numel() for v in inputs.values() if isinstance(v, torch.Tensor))
    rel_bound = 2 * tol.gamma(4 * n + 20, tol.unit_roundoff(torch.float64))
    out = []
    for what, got in (("oracle", spec.run_oracle(inputs)),
                      ("float64 math", tuple(t.detach() for t in as_tuple(float64_math(spec)(**inputs, **spec.params))))):
        got = outputs64(got)
        if len(got) != len(want):
            out.append(f"{spec.name}: its {what} gives {len(got)} outputs, the relation ({rel.says}) {len(want)}")
            continue
        for k, (g, e) in enumerate(zip(got, want)):
            bound = rel_bound * (np.abs(e) + (np.abs(e).max() if e.size else 0.0))
            bad = ~(np.abs(g - e) <= bound)
            if g.shape != e.shape or bad.any():
                worst = float(np.abs(g - e).max()) if g.shape == e.shape else float("nan")
                out.append(f"{spec.name}: output {k} of its {what} is not {rel.says} ({rel.entry}): "
                           f"{int(bad.sum()) if g.shape == e.shape else 'shape'} elements off, largest by {worst:.3g}")
    return out
