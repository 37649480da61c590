"""Every norm of a model, by class or by role: ``check_norm(fn, model="qwen3_next", norm="inner_output")`` or
``norm="Qwen3NextRMSNormGated"``.

The census traced each model and recorded, for each norm module of a decoder layer, its class and its role
(what it is applied to: ``input``, ``q_per_head``/``q_whole``, ``k_per_head``/``k_whole``, ``latent``,
``inner_output``, a norm on the values, ...) and whether the model ends with a final norm. This module reads
that list (``models[].layer`` and ``final_norm`` of ``docs/data/census.json``, with the classes' facts from
its ``classes``) and turns a class name or a role into the kit's :class:`~reference_impl.check.models.Target`.

Roles accepted (any case, any separator): ``q``, ``k``, ``value`` (or ``v``), ``latent``, ``inner output``, ``final``,
``input``, ``sublayer output``, ``residual sum``, and the census's own role names. A gated class
(``Qwen3NextRMSNormGated``, ``MambaRMSNormGated``, ``FalconH1RMSNormGated``) gives a target of kind
``"gated_rms"``, checked as ``fn(x, weight, gate, eps)`` against the class itself with its activation and
order.
"""
from __future__ import annotations

import json
from functools import lru_cache

from . import matching as M
from .models import Target, _from_index, _squash, _similar, resolve

_ROLES = {"q": ("q_per_head", "q_whole"), "k": ("k_per_head", "k_whole"), "latent": ("latent",),
          "inneroutput": ("inner_output",), "input": ("input",), "sublayeroutput": ("sublayer_output",),
          "residualsum": ("residual_sum",), "value": ("value", "v_per_head", "v_whole"),
          "v": ("value", "v_per_head", "v_whole"), "final": ("final",)}


@lru_cache(maxsize=1)
def census() -> dict:
    """docs/data/census.json of this checkout; a ValueError saying what is missing otherwise."""
    from ..provenance import REPO

    path = REPO / "docs" / "data" / "census.json"
    if not path.exists():
        raise ValueError("norm= needs the census's list of each model's norms (docs/data/census.json, in a checkout "
                         "of the repository); pass convention= to check against a catalog entry instead")
    return json.loads(path.read_text())


def norms_of(model_type: str) -> list[dict]:
    """The norms of a model as ``{"role", "module", "class"}`` rows: the layer's norms in the census's order
    (a norm on the values gets the role ``value``), then the final norm (the model's first norm class)."""
    row = next((m for m in census()["models"] if m["model_type"] == model_type), None)
    if row is None:
        return []
    out = []
    for n in row.get("layer") or []:
        role = n["role"]
        if role == "other" and "on the values" in (n.get("note") or ""):
            role = "value"
        out.append({"role": role, "module": n["module"], "class": n["class"]})
    if row.get("final_norm") and row.get("norm_classes"):
        out.append({"role": "final", "module": "norm", "class": row["norm_classes"][0]})
    return out


def _class(name: str) -> dict | None:
    want = _squash(name)
    return next((c for c in census()["classes"] if _squash(c["name"]) == want), None)


def resolve_norm(model: str | None, norm: str, eps: float | None = None) -> Target:
    """The target for one norm of ``model`` named by its class or its role (see the module docstring)."""
    if not isinstance(norm, str) or not norm.strip():
        raise ValueError(f"norm must be a norm class or a role ({', '.join(sorted(_ROLES))}), got {norm!r}")
    base = resolve(model) if model is not None else None
    mt = base.name if base is not None else None
    listed = norms_of(mt) if mt else []
    cls = _class(norm)
    where = f"class {norm}"
    if cls is None:
        roles = _ROLES.get(_squash(norm), (norm,))
        hits = [n for n in listed if n["role"] in roles]
        if model is None:
            raise ValueError(f"norm={norm!r} is not a norm class the census knows; a role needs model=")
        if not hits:
            have = ", ".join(f"{n['role']} ({n['class']})" for n in listed) or "none traced"
            near = [n for n in _similar(norm, [c["name"] for c in census()["classes"]] + list(_ROLES))
                    if _squash(n) != _squash(norm)]
            raise ValueError(f"{mt} has no norm {norm!r}; its norms: {have}"
                             + (f"; similar names: {', '.join(near)}" if near else ""))
        cls = _class(hits[0]["class"])
        where = f"its {hits[0]['role']} norm {hits[0]['module']} ({hits[0]['class']})"
    elif mt and listed and cls["name"] not in {n["class"] for n in listed}:
        where += f" (not among the norms the census traced in {mt}'s default config)"
    if cls is None or not cls.get("catalog"):
        raise ValueError(f"{where}: the census matched no catalog entry to it, so the kit has no order to check")
    use_eps = eps if eps is not None else (base.eps if base is not None else float(cls.get("eps_default") or 1e-6))
    name = f"{mt}:{cls['name']}" if mt else cls["name"]
    version = census().get("provenance", {}).get("versions", {}).get("transformers", "?")
    source = f"the census of transformers {version} (docs/data/census.json): {where}"
    if cls["kind"] == "gated_rms":
        cand = next((c for c in M.candidate_list("gated_rms") if c.name == cls["catalog"]), None)
        if cand is None:
            raise ValueError(f"{where}: the census names {cls['catalog']!r}, which is no gated entry of this catalog")
        return Target(name=name, entry=cand.entry, kind="gated_rms", convention=cand.name, eps=float(use_eps), gain="w",
                      gain_dtype=cls.get("gain_dtype") or "float32", module=cls["module"], norm_class=cls["name"],
                      source=source)
    if cls["kind"] not in ("rms", "layer"):
        raise ValueError(f"{where} is a {cls['kind']} norm; the kit checks RMSNorm, LayerNorm and gated RMSNorm")
    row = {"catalog": cls["catalog"], "eps": use_eps, "gain": cls.get("gain"), "gain_dtype": cls.get("gain_dtype"),
           "module": cls["module"], "norm_class": cls["name"], "bias": cls.get("bias")}
    t = _from_index(name, row, version)
    return Target(**{**t.__dict__, "source": source})


def gated_params(target: Target) -> dict:
    """The catalog parameters of a gated target: its entry's, with the candidate's options (the activation)."""
    from ..norms import CATALOG

    cand = next(c for c in M.candidate_list("gated_rms") if c.name == target.convention)
    opts = {k: v for k, v in cand.options if k not in ("convention", "placement", "folded")}
    return {**CATALOG[target.entry].params, **opts, "eps": target.eps}


def gated_truth(target: Target, p: M.Probe):
    """The catalog's replay of a gated target's order (when the class cannot be built)."""
    from ..norms import CATALOG

    cand = next(c for c in M.candidate_list("gated_rms") if c.name == target.convention)
    return CATALOG[target.entry].match_run(p, **dict(cand.options))


def gated_module(target: Target, d: int, weight):
    """The model's gated norm class, width ``d``, one group (as the census probed it: Mamba-2's
    ``group_size = d``, Falcon-H1's ``n_groups = 1``), holding ``weight`` exactly; None when the class cannot
    be imported (the catalog's replay is used)."""
    import importlib
    import inspect

    import torch

    try:
        cls = getattr(importlib.import_module(target.module), target.norm_class)
    except (ImportError, AttributeError):
        return None
    params = inspect.signature(cls.__init__).parameters
    kw = {"eps": target.eps}
    if "group_size" in params:
        kw["group_size"] = d
    if "n_groups" in params:
        kw["n_groups"] = 1
    m = cls(d, **kw)
    with torch.no_grad():
        m.weight = torch.nn.Parameter(weight.detach().clone(), requires_grad=False)
    return m.eval()


# ------------------------------------------------------------------------------------------ gradients

def _act_and_slope(name: str, z):
    """``act(z)``, ``act'(z)`` and the slope's envelope in float64: silu ``z s(z)`` with slope
    ``s (1 + z (1 - s))``, which cancels to 0 near z = -1.28, so its rounding errors are charged to
    ``s (1 + |z| (1 - s))``; sigmoid ``s`` with slope ``s (1 - s)`` (no cancellation: its own size)."""
    import numpy as np

    s = 1.0 / (1.0 + np.exp(-z))
    if name == "silu":
        return z * s, s * (1.0 + z * (1.0 - s)), s * (1.0 + np.abs(z) * (1.0 - s))
    return s, s * (1.0 - s), s * (1.0 - s)


def gated_reference_grads(target: Target, p: M.Probe, dy) -> list:
    """The float64 gradients of a gated norm's math on a probe and their derived bounds:
    ``[(dx, bound), (dweight, bound), (dgate, bound)]``.

    With ``n = x r``, ``r = 1 / sqrt(mean(x^2) + eps)`` (per group of features) and ``a = act(gate)``:

    - gate after the norm (Qwen3-Next, Kimi-Linear; ``y = n w a``): ``g = dy w a``,
      ``dx = r (g - n mean(g n))``, ``dgate = dy n w act'(gate)``, ``dweight = sum over rows of dy n a``;
    - gate before it (Mamba-2, Falcon-H1; ``u = x silu(gate)``, ``y = w n(u)``): ``g = dy w``,
      ``du = r (g - n mean(g n))`` with ``n = u r``, ``dx = du a``, ``dgate = du x act'(gate)``,
      ``dweight = sum over rows of dy n``.

    Bounds, element-wise and absolute, by the analysis of
    :func:`reference_impl.tolerances.convention_backward_bounds`: the RMS backward's two terms each to
    ``gamma(d + 10)`` (float32 and the oracle's float64) of its envelope ``env = r (|g| + |n| mean|g n|)``;
    ``low = 4 u_x`` for roundings in x's dtype on the way (the gradient of a row rounded to x's dtype before
    the gain, ``dy w`` in x's dtype, the gate's gradient cast back to x's dtype, one spare) and ``8 u_32``
    for the activation and its slope in float32 (exp, add, divide, products), each charged to the same
    envelope; a factor applied after the reduction (``a`` for dx before the gate, ``x act'`` for dgate)
    multiplies the envelope; the final rounding is ``u_x`` of the result. ``dgate`` after the norm is a
    product of n (relative ``gamma(d//2 + 6)``, the forward's analysis) and elementwise factors:
    ``(gamma(d//2 + 6) + low + 8 u_32) |dy n w| act'_env``, where ``act'_env`` is the slope's envelope
    (silu's slope cancels to 0 near gate = -1.28: its errors are charged to the terms that cancel); before
    the norm the factor ``x act'`` is likewise charged as ``|x| act'_env``. ``dweight`` sums the rows: ``u_w |dw| + (gamma(rows +
    d//2 + 8) + gamma(rows + 2, u_w) + low + 8 u_32) sum |dy n a|`` (the rows may be added in the weight's
    dtype). Each has the floor of half the smallest subnormal of its dtype. At the ends of the kit's range
    (the wide probes' rows) the envelope of the RMS backward gains the terms of
    :func:`reference_impl.check.calling.range_terms`: the statistic's term lost to float32 underflow of
    ``r**3`` (relative ``min(1, eta_32 / r**3)``), ``2 eta_32 |u|`` for a subnormal per-row scalar, and
    ``eta_x r (1 + |n| mean|n|)`` for each of the four roundings of g in x's dtype; eight eta_32 join the
    floor for products in float32 below its normal range.
    """
    import numpy as np
    import torch

    from .. import tolerances as T

    params = gated_params(target)
    before = "groups" in params
    groups = int(params.get("groups", 1))
    act = "silu" if before else params["activation"]
    x = p.x.detach().cpu().double().numpy()
    z = p.gate.detach().cpu().double().numpy()
    w = p.weight.detach().cpu().double().numpy()
    dyd = dy.detach().cpu().double().numpy()
    d = x.shape[-1]
    a, slope, slope_env = _act_and_slope(act, z)
    u_in = x * a if before else x
    shp = (*x.shape[:-1], groups, d // groups)
    ug = u_in.reshape(shp)
    r = 1.0 / np.sqrt(np.mean(ug * ug, -1, keepdims=True) + p.eps)
    n = (ug * r).reshape(x.shape)
    g = dyd * w if before else dyd * w * a
    gn = (g * n).reshape(shp)
    du = (r * (g.reshape(shp) - n.reshape(shp) * gn.mean(-1, keepdims=True))).reshape(x.shape)
    env = (r * (np.abs(g).reshape(shp) + np.abs(n).reshape(shp) * np.abs(gn).mean(-1, keepdims=True))).reshape(x.shape)
    xdt, wdt = p.x.dtype, p.weight.dtype
    u = T.unit_roundoff
    k = d // groups
    rel = T.gamma(k + 10, u(torch.float32)) + T.gamma(k + 10, u(torch.float64)) + 4 * u(xdt) + 8 * u(torch.float32)
    # the ends of the range, as calling.range_terms derives them for RMSNorm: the statistic's term lost to
    # float32 underflow of r**3, the per-row scalar subnormal, and eta_x on each rounding of g in x's dtype
    eta32 = float(torch.finfo(torch.float32).tiny) * u(torch.float32)
    eta_x = float(torch.finfo(xdt).tiny) * u(xdt)
    nn = np.abs(n).reshape(shp)
    with np.errstate(over="ignore", divide="ignore"):
        lost = np.minimum(1.0, eta32 / r ** 3)
    stat = r * nn * np.abs(gn).mean(-1, keepdims=True)
    env = env + ((lost * stat + 2 * eta32 * np.abs(ug) + 4 * eta_x * r * (1.0 + nn * nn.mean(-1, keepdims=True)))
                 * (1.0 + 2.0 ** -20)).reshape(x.shape) / rel
    floor_x = float(torch.finfo(xdt).tiny) * u(xdt) + 8 * eta32
    if before:
        dx, dgate = du * a, du * x * slope
        bdx = u(xdt) * np.abs(dx) + rel * env * np.abs(a) + floor_x
        bdg = u(xdt) * np.abs(dgate) + rel * env * np.abs(x) * slope_env + floor_x
        terms = dyd * n
    else:
        dx, dgate = du, dyd * n * w * slope
        bdx = u(xdt) * np.abs(dx) + rel * env + floor_x
        rel_g = T.gamma(k // 2 + 6, u(torch.float32)) + 4 * u(xdt) + 8 * u(torch.float32)
        bdg = u(xdt) * np.abs(dgate) + rel_g * np.abs(dyd * n * w) * slope_env + floor_x
        terms = dyd * n * a
    rows = int(np.prod(x.shape[:-1]))
    dw = terms.reshape(rows, d).sum(0)
    sw = np.abs(terms).reshape(rows, d).sum(0)
    gw = (T.gamma(rows + k // 2 + 8, u(torch.float32)) + T.gamma(rows + k // 2 + 8, u(torch.float64))
          + T.gamma(rows + 2, u(wdt)) + 4 * u(xdt) + 8 * u(torch.float32))
    bdw = u(wdt) * np.abs(dw) + gw * sw + float(torch.finfo(wdt).tiny) * u(wdt)
    return [(dx, bdx), (dw, bdw), (dgate, bdg)]
