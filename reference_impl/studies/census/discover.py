"""Finding every normalization class the installed ``transformers`` defines, by walking its model folders.

A class counts as a norm when it is an ``nn.Module`` defined in a ``transformers.models.<x>.modeling_*``
module and its name says so (``...RMSNorm``, ``...LayerNorm``, ``...L2Norm``, ``...QKNorm``,
``...NormGated``, ``...Norm2d``, ``...LayerNormPerHead``, ...). Classes whose name only contains the word
(``RobertaPreLayerNormModel``, ``...ConvNormLayer``, ``...NormedEmbedding``, ``...ForNormalEstimation``)
are layers or models that hold a norm, not norms, and are left out by :func:`is_norm_name`.
``torch.nn.LayerNorm`` and ``torch.nn.RMSNorm`` are added as two more classes: many models build them
directly. Nothing here runs a class; :mod:`.probe` does.
"""
from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import re
from dataclasses import dataclass, field

import torch.nn as nn

# the end of a norm class's name; the prefix is the model's
_NORM_END = re.compile(r"(Norm|Norm[123]d|Norm1P|NormGated|NormPerHead|LayerNormPerHead|Layernorm|"
                       r"NormActivation|Normalization|MeanVarianceNormLayer)$")
# names that contain "Norm" but hold a model, a layer around a norm, or an embedding
_NOT_NORM = re.compile(r"(PreTrainedModel|Model$|For[A-Z]|Attention|EncoderLayer|DecoderLayer|Embedding|"
                       r"Unnormed|Encoder|ConvDropout|Conv[A-Za-z]*Norm[A-Za-z]*Layer|NormConv|NormAttentionNorm|"
                       r"LayerNormConvLayer|GroupNormConvLayer|BatchNormConvLayer)")
# out of scope by what the name says it normalizes over (never dropped: listed with this reason)
OUT_OF_SCOPE_NAMES = (
    (re.compile(r"FrozenBatchNorm"), "frozen batch norm over image channels (fixed running statistics)"),
    (re.compile(r"BatchNorm"), "batch norm: statistics over the batch, not over a token's features"),
    (re.compile(r"GroupNorm"), "group norm over image or audio channels"),
    (re.compile(r"InstanceNorm"), "instance norm over image channels"),
    (re.compile(r"Norm2d$|Norm3d$"), "norm over the channel dimension of an image (NCHW) tensor"),
    (re.compile(r"AdaLayerNorm|AdaptiveLayerNorm|AdaRmsNorm|AdaRMSNorm|AdaLN|TimestepNorm|SpatialNorm"),
     "adaptive norm: gain and shift computed from a conditioning input"),
    (re.compile(r"MeanVarianceNorm"), "feature normalization with fixed, stored statistics"),
    (re.compile(r"^NoNorm$"), "not a normalization: an elementwise affine map used in its place"),
    (re.compile(r"NormActivation$"), "group norm fused with an activation, over image channels"),
)


def is_norm_name(name: str) -> bool:
    return bool(_NORM_END.search(name)) and not _NOT_NORM.search(name)


def out_of_scope_reason(name: str) -> str | None:
    for pattern, reason in OUT_OF_SCOPE_NAMES:
        if pattern.search(name):
            return reason
    return None


@dataclass
class Found:
    """One norm class: where it lives and what its constructor's signature says."""

    cls: type
    name: str
    module: str
    source: str                      # path relative to the transformers package, "models/llama/modeling_llama.py"
    line: int | None
    eps_default: float | None
    users: list = field(default_factory=list)   # model folders whose modeling code names it (torch.nn classes)

    @property
    def folder(self) -> str | None:
        parts = self.module.split(".")
        return parts[2] if self.module.startswith("transformers.models.") and len(parts) > 2 else None


def _transformers_root() -> str:
    import transformers

    return os.path.dirname(transformers.__file__)


def source_of(cls) -> tuple[str, int | None]:
    """(file relative to the transformers package or torch, first line) of a class."""
    try:
        path = inspect.getsourcefile(cls) or ""
        _, line = inspect.getsourcelines(cls)
    except (OSError, TypeError):
        return cls.__module__.replace(".", "/") + ".py", None
    root = _transformers_root()
    if path.startswith(root):
        path = os.path.relpath(path, root)
    elif "site-packages" in path:
        path = path.split("site-packages" + os.sep, 1)[1]
    return path.replace(os.sep, "/"), int(line)


_EPS_NAMES = ("eps", "epsilon", "variance_epsilon", "layer_norm_eps", "norm_eps", "rms_norm_eps")


def eps_default(cls) -> float | None:
    """The default of the constructor's eps argument; ``None`` when it has none (see :mod:`.probe`)."""
    try:
        params = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return None
    for name in _EPS_NAMES:
        p = params.get(name)
        if p is not None and isinstance(p.default, (int, float)) and not isinstance(p.default, bool):
            return float(p.default)
    return None


def modeling_modules():
    """Every ``transformers.models.<folder>.modeling_*`` module that imports here, and the ones that
    do not, as (module name, error)."""
    import transformers.models as tm

    mods, failed = [], []
    for info in sorted(pkgutil.iter_modules(tm.__path__), key=lambda i: i.name):
        if not info.ispkg:
            continue
        folder = os.path.join(tm.__path__[0], info.name)
        for fname in sorted(os.listdir(folder)):
            if not (fname.startswith("modeling_") and fname.endswith(".py")):
                continue
            name = f"transformers.models.{info.name}.{fname[:-3]}"
            try:
                mods.append(importlib.import_module(name))
            except Exception as exc:  # an optional dependency missing (torchaudio, ...)
                failed.append((name, f"{type(exc).__name__}: {exc}"[:300]))
    return mods, failed


def _uses(mod, attr: str) -> bool:
    try:
        text = inspect.getsource(mod)
    except (OSError, TypeError):
        return False
    return bool(re.search(rf"\bnn\.{attr}\(|torch\.nn\.{attr}\(", text))


def discover() -> tuple[list[Found], list]:
    """All norm classes (sorted by module, then name) and the modeling modules that failed to import."""
    mods, failed = modeling_modules()
    found: dict[tuple, Found] = {}
    torch_users = {"LayerNorm": set(), "RMSNorm": set()}
    for mod in mods:
        for name, obj in sorted(vars(mod).items()):
            if not (isinstance(obj, type) and issubclass(obj, nn.Module) and obj.__module__ == mod.__name__):
                continue
            if not is_norm_name(name):
                continue
            src, line = source_of(obj)
            found[(mod.__name__, name)] = Found(obj, name, mod.__name__, src, line, eps_default(obj))
        folder = mod.__name__.split(".")[2]
        for attr in torch_users:
            if _uses(mod, attr):
                torch_users[attr].add(folder)
    out = sorted(found.values(), key=lambda f: (f.module, f.name))
    for attr in ("LayerNorm", "RMSNorm"):
        cls = getattr(nn, attr)
        src, line = source_of(cls)
        out.append(Found(cls, attr, cls.__module__, src, line, eps_default(cls), sorted(torch_users[attr])))
    return out, failed


def found_from(module: str, name: str) -> Found:
    """One class as :func:`discover` records it, from its module and name (the tests re-probe a few)."""
    cls = getattr(importlib.import_module(module), name)
    src, line = source_of(cls)
    return Found(cls, name, module, src, line, eps_default(cls))


def scan_names() -> dict[str, str]:
    """Norm class names defined in the modeling files' text, without importing them: name -> file. A cheap
    check that the committed census still covers the installed transformers."""
    import transformers.models as tm

    out = {}
    root = tm.__path__[0]
    for folder in sorted(os.listdir(root)):
        path = os.path.join(root, folder)
        if not os.path.isdir(path):
            continue
        for fname in sorted(os.listdir(path)):
            if fname.startswith("modeling_") and fname.endswith(".py"):
                with open(os.path.join(path, fname), encoding="utf-8") as fh:
                    for m in re.finditer(r"^class (\w+)\(", fh.read(), re.M):
                        if is_norm_name(m.group(1)):
                            out.setdefault(m.group(1), f"models/{folder}/{fname}")
    return out
