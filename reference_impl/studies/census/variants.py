"""The config fields that change a model type's norm structure, found by changing each and re-tracing.

A default config is not what people run. For one model type, the candidate fields are read from its config
class and its modeling file, never listed by hand:

- every boolean field of the default config (or of its text part) that the modeling file names,
- every string field that the modeling file compares with a literal (``config.x == "..."`` or
  ``config.x in ("...", ...)``), tried at each literal other than the default,
- every numeric or unset field whose name says norm or clip (``clip_qkv``), set to a value when unset and
  unset when set (eps fields are the eps, not a structure: the census records which one the norms read).

The fields the census's shrinking sets itself (sizes, ``use_cache``) are not candidates. Each candidate is
applied through the config class's constructor, the tiny model is traced again (:func:`.placement.place`),
and the field is kept as a variant when anything of the structure differs: placement, QK-norm kind and
order against the rotary embedding, the parallel block, the final norm, the norm classes and the roles of
the first layer's norms, the norms outside the layers, a clamp of the projections (``clip_qkv``), or the
settings the norm modules hold (eps, a gated norm's order). A field that changes nothing alone is tried again
with each variant found set (Falcon-H1's gate order matters only once its gated norm is switched on). A candidate whose config or model cannot be built or traced is kept with its
reason: it is not known to leave the structure alone.
"""
from __future__ import annotations

import re
import sys

import torch
from torch.overrides import TorchFunctionMode

from .placement import build, place
from .shrink import FILL, SIZES

CLIP_VALUE = 8.0   # a clip threshold to switch clipping on with (OLMoE's and DBRX's released value)
_CLAMPS = {torch.clamp, torch.clip, torch.Tensor.clamp, torch.Tensor.clip, torch.Tensor.clamp_, torch.Tensor.clip_,
           torch.clamp_}
_SET_BY_SHRINK = set(SIZES) | set(FILL) | {"use_cache"}
_EQ = re.compile(r"config\.(\w+)\s*(?:==|!=)\s*[\"']([\w.-]+)[\"']")
_IN = re.compile(r"config\.(\w+)\s+(?:not\s+)?in\s*[(\[{]([^)\]}]*)[)\]}]")
_LIT = re.compile(r"[\"']([\w.-]+)[\"']")
_NUMERIC = re.compile(r"norm|clip", re.I)
STRUCTURE = ("placement", "qk_norm", "qk_rope", "parallel", "final_norm", "norm_classes", "layer", "extra_norms",
             "clamps", "norm_attrs")


def _base_fields() -> set:
    from transformers import PretrainedConfig

    return set(vars(PretrainedConfig()))


def candidates(model_type: str) -> list[tuple[str, object, object]]:
    """(field, value to try, default value) for every candidate field of ``model_type`` (see the module doc)."""
    cfg_cls, cls = build(model_type)
    source = open(sys.modules[cls.__module__].__file__, encoding="utf-8").read()
    cfg = cfg_cls()
    own = {}
    for part in vars(cfg).values():   # the fields of its parts (text_config, attn_config, ...), then its own
        if hasattr(part, "to_dict"):
            own.update({k: v for k, v in vars(part).items() if k not in own})
    own.update(vars(cfg))
    skip = _base_fields() | _SET_BY_SHRINK
    named = {f for f in own if f not in skip and re.search(rf"\b{re.escape(f)}\b", source)}
    out = []
    for f in sorted(named):
        v = own[f]
        if isinstance(v, bool):
            out.append((f, not v, v))
        elif _NUMERIC.search(f) and "eps" not in f.lower() and (v is None or isinstance(v, (int, float))):
            out.append((f, CLIP_VALUE if v is None else None, v))
    literals: dict[str, set] = {}
    for m in _EQ.finditer(source):
        literals.setdefault(m.group(1), set()).add(m.group(2))
    for m in _IN.finditer(source):
        literals.setdefault(m.group(1), set()).update(_LIT.findall(m.group(2)))
    for f, values in sorted(literals.items()):
        if f in skip or not isinstance(own.get(f), str):
            continue
        out.extend((f, v, own[f]) for v in sorted(values - {own[f]}))
    return out


class _Clamps(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in _CLAMPS:
            self.n += 1
        return func(*args, **(kwargs or {}))


def _norm_attrs(tr) -> list:
    """The plain settings every norm module holds (eps, ``norm_before_gate``, group sizes): class, name, value."""
    found = set()
    for m in tr.model.modules():
        if isinstance(m, tr.norm_types):
            for attr, v in vars(m).items():
                if not attr.startswith("_") and attr != "training" and isinstance(v, (bool, int, float, str)):
                    found.add((type(m).__name__, attr, v))
    return [list(t) for t in sorted(found, key=repr)]


def structure(model_type: str, norm_types: tuple, class_catalog: dict, overrides: dict | None = None):
    """(record, structure) of one trace: the census record and the fields :data:`STRUCTURE` compares."""
    seen = {}
    clamps = _Clamps()
    with clamps:
        rec = place(model_type, norm_types, class_catalog, overrides=overrides,
                    observe=lambda tr: seen.update(norm_attrs=_norm_attrs(tr)))
    s = {k: rec.get(k) for k in STRUCTURE[:5]}
    s["norm_classes"] = list(rec["norm_classes"])
    s["layer"] = [[r["module"], r["class"], r["role"], r["sublayer"]] for r in rec["layer"]]
    s["extra_norms"] = list(rec["extra_norms"])
    s["clamps"] = clamps.n
    s["norm_attrs"] = seen.get("norm_attrs", [])
    return rec, s


def variants(model_type: str, norm_types: tuple, class_catalog: dict, base: tuple | None = None
             ) -> tuple[list[dict], list[dict]]:
    """(variants, fields that could not be toggled) of one model type. A variant: ``flag``, ``value``,
    ``default``, ``requires`` (another variant's field and value it was found on top of, or None),
    ``changes`` (the structure fields that differ) and the resulting ``placement``, ``qk_norm``,
    ``qk_rope``, ``parallel``, ``final_norm``, ``clip`` and ``norms`` (module, class, role, sublayer)."""
    seen: dict = {}

    def trace(overrides):   # each config traced once
        k = repr(sorted(overrides.items()))
        if k not in seen:
            seen[k] = structure(model_type, norm_types, class_catalog, overrides)
        return seen[k]

    if base is not None:   # the default config's (record, structure), already traced by the caller
        seen[repr([])] = base
    base_rec, base = trace({})
    if base_rec["status"] != "traced":
        return [], []
    found, failed, quiet = [], [], []
    tried = candidates(model_type)
    for field, value, default in tried:
        rec, s = trace({field: value})
        if rec["status"] != "traced":
            failed.append({"flag": field, "value": value, "reason": rec["error"]})
        elif [k for k in STRUCTURE if s[k] != base[k]]:
            found.append(_variant(field, value, default, rec, s, base, None))
        else:
            quiet.append((field, value, default))
    for v in list(found):
        if v["requires"] is not None:
            continue
        on = {v["flag"]: v["value"]}
        _, with_v = trace(on)
        for field, value, default in quiet:
            if field == v["flag"] or any(f["flag"] == field for f in found):
                continue
            rec, s = trace({**on, field: value})
            if rec["status"] == "traced" and [k for k in STRUCTURE if s[k] != with_v[k]]:
                found.append(_variant(field, value, default, rec, s, with_v, on))
    return found, failed


def _variant(field, value, default, rec, s, base, requires) -> dict:
    return {"flag": field, "value": value, "default": default, "requires": requires,
            "changes": [k for k in STRUCTURE if s[k] != base[k]],
            "placement": rec["placement"], "placement_note": rec["placement_note"], "qk_norm": rec["qk_norm"],
            "qk_rope": rec["qk_rope"], "parallel": rec["parallel"], "final_norm": rec["final_norm"],
            "clip": s["clamps"] > base["clamps"], "norm_classes": rec["norm_classes"],
            "norms": [{k: r[k] for k in ("module", "class", "role", "sublayer")} for r in rec["layer"]]}
