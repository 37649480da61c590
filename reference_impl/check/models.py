"""What a model's norm is, by name: its convention, eps, gain storage and the class of the installed
transformers that computes it.

Read from ``census_index.json`` (next to this file, written by ``python -m reference_impl.studies.census``
from the installed transformers). Where that file is absent or does not list the model, the catalog's
family table (:data:`reference_impl.families.FAMILIES`) answers, and :attr:`Target.source` says so.
A ``convention=`` given by the caller (a catalog entry such as ``"rms_norm.gemma"`` or a bare order such
as ``"gemma"``) overrides the convention; ``eps=`` overrides eps.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

INDEX = Path(__file__).with_name("census_index.json")
HF_EXTRA = "install transformers (pip install 'reference_impl[hf]') to compare with the model's own module"


@dataclass(frozen=True)
class Target:
    """The norm a check compares against.

    ``entry``: the catalog entry (``rms_norm.gemma``); ``kind``: "rms", "layer" or "l2" (matching's kinds);
    ``convention``: the casting order; ``placement``: where eps goes ("inside" or "outside"); ``gain``:
    "w", "1+w" or "none" (how the weight is stored); ``gain_dtype``: the dtype the class keeps the weight in
    before a checkpoint is loaded; ``module``/``norm_class``: the transformers class (None if unknown);
    ``qk_norm``: "none", "per_head", ...; ``source``: where these facts came from; ``bias``: whether the
    norm adds a bias (a LayerNorm's beta).
    """

    name: str
    entry: str
    kind: str
    convention: str
    eps: float
    gain: str
    placement: str = "inside"
    gain_dtype: str = "float32"
    module: str | None = None
    norm_class: str | None = None
    qk_norm: str = "none"
    source: str = ""
    bias: bool = False

    @property
    def candidate(self) -> str:
        """The name :func:`reference_impl.check.matching.candidates` gives this target."""
        if self.kind == "rms" and self.placement == "outside":
            return "rms_norm.eps_outside" if self.convention == "reference" else f"{self.entry} (eps outside)"
        return self.entry


def _kind_of(entry: str) -> str:
    if entry.startswith(("rms_norm", "qk_norm", "fused_add_rms")):
        return "rms"
    if entry.startswith("layer_norm"):
        return "layer"
    if entry in ("l2_norm", "llama4_l2_norm"):
        return "l2"
    hint = ("; a fused residual add is checked with residual=True (--residual) against an RMSNorm convention"
            if entry.startswith("fused_add") else "")
    raise ValueError(f"the kit checks RMSNorm (also QK-norm and the fused residual add), LayerNorm and L2 norms; "
                     f"catalog entry {entry!r} is none of them{hint}")


def _entry_for(convention: str) -> tuple[str, str]:
    """A convention name -> (catalog entry, eps placement)."""
    from ..norms import CATALOG

    if isinstance(convention, str) and convention.endswith(" (eps outside)"):  # a matching candidate's name
        entry, _ = _entry_for(convention[: -len(" (eps outside)")])
        return entry, "outside"
    if convention in CATALOG:
        spec = CATALOG[convention]
        conv = spec.params.get("convention", "reference")
        if convention.startswith("qk_norm."):  # an RMSNorm over head_dim, x given as (..., heads, head_dim)
            return ("rms_norm" if conv == "reference" else f"rms_norm.{conv}"), "inside"
        if convention == "fused_add_rms_norm":  # check with residual=True
            return f"rms_norm.{conv}", "inside"
        _kind_of(convention)  # refuses the entries the kit does not check, naming them
        return convention, spec.params.get("eps_placement", "inside")
    for prefix in ("rms_norm.", "layer_norm."):
        if prefix + convention in CATALOG:
            return prefix + convention, "inside"
    if convention == "reference":
        return "rms_norm", "inside"
    known = ", ".join(sorted(CATALOG))
    raise ValueError(f"unknown convention {convention!r}; give a catalog entry ({known}) or a casting order "
                     f"(llama, gemma, t5, olmo2, torch, reference, neox, cohere)")


def _convention_of(entry: str) -> str:
    from ..norms import CATALOG

    spec = CATALOG[entry]
    if entry in ("l2_norm", "llama4_l2_norm"):
        return entry
    return spec.params.get("convention", "reference")


def load_index(path: Path = INDEX) -> dict | None:
    """The census index, or None when the file is absent. A corrupt file raises, naming it."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc}); rerun python -m reference_impl.studies.census") from exc
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict):
        raise ValueError(f"{path}: field 'models' must be an object mapping model types to their norms")
    return data


def _from_index(name: str, row: dict, version: str) -> Target:
    entry = row.get("catalog")
    if not entry:
        raise ValueError(f"model {name!r}: the census found no catalog entry equal to its norm "
                         f"{row.get('norm_class')!r}; pass convention= to say which order to check against")
    # the census names entries as matching.candidates does: "rms_norm.llama (eps outside)" is the entry with
    # eps outside the root; a folded (1 + w) gain is no entry's own storage
    base, _, flags = entry.partition(" (")
    if "folded" in flags:
        raise ValueError(f"model {name!r}: its norm equals {entry}, a gain folded into the weight's dtype, which "
                         f"the kit does not model; pass convention= to check against an entry")
    from ..norms import CATALOG

    if base not in CATALOG:
        raise ValueError(f"model {name!r}: the census names catalog entry {base!r}, which this package lacks; "
                         f"rerun the census or pass convention=")
    # a QK-norm entry is an RMSNorm over head_dim with the entry's casting order
    conv = _convention_of(base)
    rms_entry = base
    if base.startswith("qk_norm."):
        rms_entry = f"rms_norm.{conv}" if conv != "reference" else "rms_norm"
    outside = "eps outside" in flags or rms_entry == "rms_norm.eps_outside"
    eps = row.get("eps")
    return Target(name=name, entry=rms_entry, kind=_kind_of(rms_entry), convention=conv,
                  eps=float(_default_eps(rms_entry)) if eps is None else float(eps), gain=row.get("gain") or "w",
                  placement="outside" if outside else "inside",
                  gain_dtype=row.get("gain_dtype") or "float32", module=row.get("module"),
                  norm_class=row.get("norm_class"), qk_norm=row.get("qk_norm") or "none",
                  # a norm without a gain (OLMo's LayerNorm) has no bias either, unless the census says so
                  bias=bool(row.get("bias", _kind_of(rms_entry) == "layer" and conv != "cohere"
                                    and (row.get("gain") or "w") != "none")),
                  source=f"the census of transformers {version} (reference_impl/check/census_index.json)")


def _family_target(name, entry, cls, module, source) -> Target:
    conv = _convention_of(entry)
    placement = "outside" if entry == "rms_norm.eps_outside" else "inside"
    return Target(name=name, entry=entry, kind=_kind_of(entry), convention=conv, eps=float(_default_eps(entry)),
                  gain="1+w" if conv == "gemma" else "w", placement=placement, module=module, norm_class=cls,
                  bias=entry.startswith("layer_norm") and conv != "cohere", source=source)


def _from_families(name: str) -> Target | None:
    """The catalog's view of the families: the census-derived rows of a checkout, else the families each
    catalog entry declares (``NormSpec.families``), found through the model type's family name."""
    from .. import families as fam
    from ..norms import CATALOG

    key = name.lower()
    family_name = fam.NAMES.get(key) or fam.NAMES.get(key.replace("-", "_"))
    try:
        rows = fam.FAMILIES  # read from docs/data/census.json, present in a checkout
    except Exception:  # an installed package has no docs/: use the catalog's declarations below
        rows = []
    for family, folder, cls, conv, _config, _eps_attr, _layer in rows:
        if family_name == family or key in (folder, fam.family_key(family), family.lower()):
            entry, _ = _entry_for(conv)
            module = "torch.nn" if cls == "LayerNorm" else f"transformers.models.{folder}.modeling_{folder}"
            return _family_target(name, entry, cls, module, "the catalog's family table (reference_impl/families.py, "
                                  "read from docs/data/census.json): no census index lists this model; eps is the "
                                  "catalog's default")
    wanted = family_name or next((f for f in fam.NAMES.values() if fam.family_key(f) == key or f.lower() == key), None)
    if wanted is None:
        return None
    for entry, spec in CATALOG.items():
        if entry.startswith(("rms_norm", "layer_norm", "l2_norm", "llama4_l2_norm")) and wanted in spec.families:
            return _family_target(name, entry, None, None, f"the catalog entry {entry}, which lists {wanted} among "
                                  "its families: no census index lists this model, so bits are compared with the "
                                  "catalog's replay and eps is the catalog's default")
    return None


def _checkpoint_id(name: str, index: dict | None) -> str | None:
    """The recorded repository id ``name`` stands for (its repo id or an alias, any case), or None."""
    low = name.lower()
    for repo, c in ((index or {}).get("checkpoints") or {}).items():
        if low == repo.lower() or low in (a.lower() for a in c.get("aliases") or []):
            return repo
    return None


def _from_checkpoint(repo: str, index: dict) -> Target:
    """A released checkpoint: its model type's norm under the variant its config sets, with its eps. The
    source names where each value was read (docs/data/checkpoints.json, from reference_impl/checkpoints.yaml)."""
    c = index["checkpoints"][repo]
    row = index["models"].get(c["model_type"])
    if row is None:
        raise ValueError(f"checkpoint {repo!r} is a {c['model_type']!r} model, which the census does not trace")
    chosen = [v for v in row.get("variants") or [] if v["flag"] in c.get("variants_set", []) and not v.get("requires")]
    for v in chosen:   # a variant that swaps the main norm class (Falcon-H1's mamba_rms_norm) brings its own
        row = {**row, **{k: v[k] for k in ("norm_class", "module", "catalog", "gain", "gain_dtype", "qk_norm")
                         if v.get(k) is not None}}
    target = _from_index(repo, row, index.get("transformers", "?"))
    read = "; ".join(f"{field} = {v['value']} read from " + ", ".join(f"{r['source']} ({r['where']})"
                                                                      for r in v["readings"])
                     for field, v in c["values"].items()) or "no value recorded, the default config's"
    sets = ", ".join(f"{v['flag']}={v['value']}" for v in chosen) or "no structure field away from its default"
    eps = c.get("eps") if c.get("eps") is not None else target.eps
    return Target(**{**target.__dict__, "eps": float(eps), "source": (
        f"checkpoint {repo} (model type {c['model_type']}): {read}; it sets {sets}; the norm from {target.source}")})


def _squash(name: str) -> str:
    """A name without case and separators: "Gemma3-Text", "gemma3 text" and "gemma3_text" are one name."""
    return "".join(ch for ch in name.lower() if ch not in "-_ ./")


def _index_key(model: str, index: dict) -> str | None:
    """The census's model type that ``model`` names, whatever its case and separators (None: none)."""
    if model in index["models"]:
        return model
    want = _squash(model)
    hits = [k for k in index["models"] if _squash(k) == want]
    return hits[0] if len(hits) == 1 else None


def _similar(model: str, names) -> list[str]:
    """Up to five names most like ``model`` (difflib's ratio on the squashed names), best first."""
    import difflib

    by = {}
    for n in names:
        by.setdefault(_squash(n), n)
    return [by[k] for k in difflib.get_close_matches(_squash(model), list(by), n=5, cutoff=0.6)]


def _warn_version(index: dict) -> None:
    """Warn once per process when the installed transformers is not the one the census index was written
    with (its classes and defaults may have changed)."""
    import importlib.metadata
    import warnings

    written = index.get("transformers")
    try:
        installed = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return
    if written and installed != written and (written, installed) not in _WARNED:
        _WARNED.add((written, installed))
        warnings.warn(f"the census index was written with transformers {written}, and transformers {installed} is "
                      "installed: the model's norm class or defaults may differ; rerun python -m "
                      "reference_impl.studies.census", UserWarning, stacklevel=3)


_WARNED: set = set()


def resolve(model: str | None = None, convention: str | None = None, eps: float | None = None) -> Target:
    """The target for ``model`` (a transformers model type such as ``"gemma3_text"``, a family name such
    as ``"Gemma 3"``, or a released checkpoint's repository id such as ``"meta-llama/Llama-3.1-8B"``: its eps
    and the variant its config sets) and/or ``convention``; ``eps`` overrides the model's eps."""
    if model is None and convention is None:
        raise TypeError("check_norm needs model= (a transformers model type or family name) or convention= "
                        "(a catalog entry such as 'rms_norm.gemma')")
    target = None
    if model is not None:
        if not isinstance(model, str) or not model:
            raise TypeError(f"model must be a model type string such as 'gemma3_text', got {model!r}")
        index = load_index()
        repo = _checkpoint_id(model, index)
        if repo is not None:
            target = _from_checkpoint(repo, index)
        elif index is not None and _index_key(model, index) is not None:
            key = _index_key(model, index)
            _warn_version(index)
            target = _from_index(key, index["models"][key], index.get("transformers", "?"))
        else:
            target = _from_families(model)
            if target is None:
                from .. import families as fam

                listed = sorted(index["models"]) if index else sorted(fam.NAMES)
                near = _similar(model, listed)
                hint = (f"did you mean {', '.join(near)}? " if near else "") + (
                    f"the census lists {len(listed)} model types (python -m reference_impl.check --list)" if index
                    else "no census index is installed; known model types: " + ", ".join(listed))
                raise ValueError(f"unknown model {model!r}: {hint}")
    if convention is not None:
        entry, placement = _entry_for(convention)
        conv = _convention_of(entry)
        base = target or Target(name=entry, entry=entry, kind=_kind_of(entry), convention=conv,
                                eps=float(_default_eps(entry)), gain="1+w" if conv == "gemma" else "w",
                                bias=entry.startswith("layer_norm") and conv != "cohere", source=f"the catalog entry {entry}")
        if target is not None and (conv, placement) != (target.convention, target.placement):
            # the caller's convention replaces the model's: the model's module is no longer the truth
            base = Target(name=target.name, entry=entry, kind=_kind_of(entry), convention=conv, eps=target.eps,
                          gain="1+w" if conv == "gemma" else ("none" if entry.startswith("l2") else target.gain),
                          placement=placement, qk_norm=target.qk_norm,
                          bias=entry.startswith("layer_norm") and conv != "cohere",
                          source=f"{target.source}, with convention={convention!r} given by the caller")
        else:
            base = Target(**{**base.__dict__, "entry": entry, "kind": _kind_of(entry), "convention": conv,
                             "placement": placement})
        target = base
    if target.kind == "l2" and target.gain != "none":
        target = Target(**{**target.__dict__, "gain": "none"})
    if eps is not None:
        if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps >= 0:
            raise ValueError(f"eps must be a non-negative number, got {eps!r}")
        target = Target(**{**target.__dict__, "eps": float(eps)})
    return target


def _default_eps(entry: str) -> float:
    from ..norms import CATALOG

    return CATALOG[entry].params.get("eps", 1e-6)


def _construct(cls, d: int, eps: float):
    """``cls`` of width ``d`` with ``eps``, as its constructor takes them: positionally or as ``hidden_size``,
    and ``eps`` only where the constructor has such a parameter (OLMo's LayerNorm fixes its own)."""
    import inspect

    try:
        params = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        params = {}
    takes_eps = "eps" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kw = {"eps": eps} if takes_eps else {}
    try:
        return cls(d, **kw)
    except TypeError:
        return cls(hidden_size=d, **kw)


def hf_module(target: "Target", d: int, weight, bias=None):
    """The model's own norm module from the installed transformers (or torch.nn), width ``d``, holding
    ``weight`` (and ``bias``) exactly, in their dtypes; None when the target names no class. Raises
    ImportError with the install hint when transformers is missing."""
    import importlib

    import torch

    if not target.norm_class or not target.module:
        return None
    if target.module.startswith("transformers"):
        try:
            mod = importlib.import_module(target.module)
        except ImportError as exc:
            if "transformers" in str(exc):
                raise ImportError(HF_EXTRA) from exc
            raise
    else:
        mod = importlib.import_module(target.module)
    cls = getattr(mod, target.norm_class, None)
    if cls is None:
        raise ValueError(f"{target.module} has no class {target.norm_class!r} (installed transformers differs "
                         f"from the census's): rerun the census or pass convention=")
    m = _construct(cls, d, target.eps)
    with torch.no_grad():
        if weight is not None:
            if getattr(m, "weight", None) is None:
                raise ValueError(f"{target.norm_class} has no weight, but the probe has one")
            m.weight = torch.nn.Parameter(weight.detach().clone(), requires_grad=False)
        elif getattr(m, "weight", None) is not None:
            return None  # the class always has a gain; a gain-less probe is not its computation
        if getattr(m, "bias", None) is not None:
            if bias is None:
                return None
            m.bias = torch.nn.Parameter(bias.detach().clone(), requires_grad=False)
    return m.eval()
