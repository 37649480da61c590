"""Which model family uses which norm: a view of the census of the installed ``transformers``
(``docs/data/census.json``, written by ``python -m reference_impl.studies.census``).

Only names are kept here: the family name the pages use for a ``model_type``, and the decoder layer class
whose constructor tests/core/test_transformers_parity.py reads. Everything else in a row of :data:`FAMILIES`
(the norm class, its convention, the model folder, the config class and the config attribute that sets eps)
is read from the census, so a new transformers release changes the rows, not this file. The numerics study
writes the config defaults into docs/data/numerics.json.

A row: ``(family, model folder, norm class, convention, config class, eps attribute, layer class)``. The norm
class is the one on the residual stream (the first norm of the traced layer on a sub-layer's input or
output); the convention is the suffix of the catalog entry it equals bit for bit (``rms_norm.gemma`` ->
``gemma``, ``layer_norm.neox`` -> ``neox``).
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

CENSUS = Path(__file__).resolve().parent.parent / "docs" / "data" / "census.json"

# --8<-- [start:families]
NAMED = [
    # (family, transformers model_type, decoder layer class)
    ("Llama", "llama", "LlamaDecoderLayer"),
    ("Mistral", "mistral", "MistralDecoderLayer"),
    ("Mixtral", "mixtral", "MixtralDecoderLayer"),
    ("Qwen2", "qwen2", "Qwen2DecoderLayer"),
    ("Qwen3", "qwen3", "Qwen3DecoderLayer"),
    ("DeepSeek-V3", "deepseek_v3", "DeepseekV3DecoderLayer"),
    ("Phi-3", "phi3", "Phi3DecoderLayer"),
    ("Gemma", "gemma", "GemmaDecoderLayer"),
    ("Gemma 2", "gemma2", "Gemma2DecoderLayer"),
    ("Gemma 3", "gemma3_text", "Gemma3DecoderLayer"),
    ("T5", "t5", "T5LayerFF"),
    ("OLMo 2", "olmo2", "Olmo2DecoderLayer"),
    ("Mamba-2", "mamba2", "Mamba2Block"),
    ("GPT-NeoX / Pythia", "gpt_neox", "GPTNeoXLayer"),
    ("Cohere (Command R)", "cohere", "CohereDecoderLayer"),
]
# --8<-- [end:families]

# T5 is an encoder-decoder without a causal-LM class, so the census has no T5 model record: its config class
# and eps attribute are named here, and its norm class is read from the census's class records
UNTRACED = {"t5": {"config_class": "T5Config", "eps_attr": "layer_norm_epsilon"}}

# families the pages name beyond the rows above (placement table, catalog entries' users)
OTHER_NAMES = {
    "qwen3_next": "Qwen3-Next", "llama4_text": "Llama 4", "olmo": "OLMo 1", "gpt_oss": "GPT-OSS",
}
NAMES = {model_type: family for family, model_type, _ in NAMED} | OTHER_NAMES
"""model_type -> the family name the pages use."""

# users of catalog norms that are not a row of FAMILIES
OTHER_USERS = {
    "Qwen3-Next": "transformers, models/qwen3_next/modeling_qwen3_next.py (Qwen3NextRMSNorm: the (1 + w) gain)",
    "Llama 4": "transformers, models/llama4/modeling_llama4.py (Llama4TextL2Norm on queries and keys)",
    "nGPT": "Loshchilov et al., arXiv:2410.01131 (every vector normalized to unit length)",
    "torch.nn.RMSNorm": "PyTorch, torch/nn/modules/normalization.py",
}


class CensusError(RuntimeError):
    """docs/data/census.json is missing, or lacks what a family row needs."""


def family_key(family: str) -> str:
    """A stable key for a family name: 'GPT-NeoX / Pythia' -> 'gpt_neox_pythia'."""
    return "".join(ch if ch.isalnum() else "_" for ch in family.lower()).strip("_").replace("___", "_").replace("__", "_")


@lru_cache(maxsize=1)
def census() -> dict:
    if not CENSUS.is_file():
        raise CensusError(f"{CENSUS} is missing: the family rows are read from it (run "
                          "python -m reference_impl.studies.census in a checkout of the repository)")
    return json.loads(CENSUS.read_text())


def convention_of(entry: str | None) -> str:
    """'rms_norm.gemma' -> 'gemma'; 'layer_norm' (no variant) -> 'reference'."""
    if not entry:
        raise CensusError("no catalog entry equals this norm class bit for bit")
    base = entry.split(" (", 1)[0]
    return base.split(".", 1)[1] if "." in base else "reference"


def main_norm(model: dict) -> str:
    """The class of a traced model's norm on the residual stream."""
    for e in model["layer"]:
        if e["role"] in ("input", "sublayer_output", "residual_sum"):
            return e["class"]
    raise CensusError(f"{model['model_type']}: the traced layer has no norm on the residual stream")


def module_norm(classes: dict, folder: str, where: str) -> str:
    """The norm class a model folder defines, for a model the census could not trace: the one matched class
    of ``modeling_<folder>`` named ``...RMSNorm`` or ``...LayerNorm`` (not a gated or other variant)."""
    module = f"transformers.models.{folder}.modeling_{folder}"
    found = [c["name"] for c in classes.values() if c["module"] == module and c["in_scope"] and c["catalog"]
             and c["name"].endswith(("RMSNorm", "LayerNorm"))]
    if len(found) != 1:
        raise CensusError(f"{where}: not traced, and {module} defines {len(found)} matched norm classes "
                          f"({', '.join(found) or 'none'}), not one")
    return found[0]


def row(family: str, model_type: str, layer_class: str) -> tuple:
    """One FAMILIES row, read from the census."""
    doc = census()
    classes = {c["name"]: c for c in doc["classes"]}
    models = {m["model_type"]: m for m in doc["models"]}
    where = f"docs/data/census.json, {family} ({model_type})"
    m = models.get(model_type)
    if model_type in UNTRACED:
        folder, config_class, eps_attr = model_type, UNTRACED[model_type]["config_class"], UNTRACED[model_type]["eps_attr"]
    elif m is None:
        raise CensusError(f"{where}: no such model type")
    else:
        folder, config_class, eps_attr = m["source"].split("/")[1], m["config_class"], m["eps_attr"]
        if not (m["source"] and config_class and eps_attr):
            raise CensusError(f"{where}: no modeling file, config class or eps attribute")
    if m is not None and m["status"] == "traced":
        cls_name = main_norm(m)
    else:  # an encoder-decoder, or a model whose tiny instance failed: the folder's own norm class
        cls_name = module_norm(classes, folder, where)
    cls = classes.get(cls_name)
    if cls is None:
        raise CensusError(f"{where}: no record of norm class {cls_name!r} in classes")
    try:
        conv = convention_of(cls["catalog"])
    except CensusError as exc:
        raise CensusError(f"{where}: {cls_name}: {exc}") from None
    return (family, folder, cls_name, conv, config_class, eps_attr, layer_class)


def __getattr__(name: str):
    # FAMILIES is read from the census on first use (a checkout has docs/data/census.json; an installed
    # package without it raises CensusError only when a caller asks for the rows)
    if name == "FAMILIES":
        rows = [row(*named) for named in NAMED]
        globals()["FAMILIES"] = rows
        return rows
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
