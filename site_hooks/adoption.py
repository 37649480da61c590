"""``{{ adoption_table() }}``: which norm each model family uses, and the eps its released checkpoints ship.

Rows of RMSNorm families (and GPT-NeoX, Cohere) take the norm class and casting convention from
``docs/data/numerics.json`` (read from the installed transformers by the numerics study); every row takes
its checkpoints and their eps from ``reference_impl/checkpoints.yaml``, each linked to the checkpoint's
``config.json`` on the Hugging Face Hub. The LayerNorm families of that file are checked against the
installed source by ``tests/core/test_checkpoints.py``.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

from . import data
from .macros import MacroError, macro

REPO = Path(__file__).resolve().parent.parent
CHECKPOINTS = REPO / "reference_impl" / "checkpoints.yaml"
GUARD = "adoption.checkpoints"


def clear_caches() -> None:
    checkpoint_list.cache_clear()


@lru_cache(maxsize=1)
def checkpoint_list() -> dict:
    return yaml.safe_load(CHECKPOINTS.read_text())


def config_url(repo: str) -> str:
    return f"https://huggingface.co/{repo}/blob/main/config.json"


def _checkpoints_cell(checkpoints: list[dict]) -> str:
    """'1e-05 Llama 2 7B' per checkpoint, the release linked to its config.json (repo and key in the tooltip)."""
    parts = []
    for c in checkpoints:
        where = f"{c['repo']}, config.json, " + (f"key {c['key']}" if c.get("key") else "no eps key")
        parts.append(f"**{format(c['eps'], 'g')}** [{c['release']}]({config_url(c['repo'])} \"{where}\")")
    return "<br>".join(parts)


def _key(family: str) -> str:
    from reference_impl.families import family_key

    return family_key(family)


@macro("adoption_table")
def adoption_table_macro(ctx) -> str:
    """The adoption table as markdown (one row per family)."""
    lst = checkpoint_list()
    ctx.guard_ids.append(GUARD)
    rows = ["| family | eps of released checkpoints | norm class | casting convention |",
            "|---|---|---|---|"]
    for fam in lst["rmsnorm_families"]:
        key = _key(fam["family"])
        try:
            entry = data.lookup("numerics.json", f"adoption.{key}")
        except MacroError as exc:
            raise MacroError(f"{ctx.src_path}: {fam['family']} is in reference_impl/checkpoints.yaml but not in "
                             f"docs/data/numerics.json: {exc}") from exc
        cls = entry["norm_class"]
        cls = f"`torch.nn.{cls}`" if cls == "LayerNorm" else f"`{cls}`"
        rows.append(f"| {fam['family']} | {_checkpoints_cell(fam['checkpoints'])} | {cls} | `{entry['convention']}` |")
    for fam in lst["layernorm_families"]:
        rows.append(f"| {fam['family']} | {_checkpoints_cell(fam['checkpoints'])} | `torch.nn.LayerNorm` | `neox` |")
    return "\n".join(rows) + "\n"


@macro("placement_table")
def placement_table_macro(ctx) -> str:
    """Where each family puts its norms and what it does to q and k (``placement_families`` of
    ``reference_impl/checkpoints.yaml``), with the transformers modules that show it."""
    ctx.guard_ids.append("adoption.placements")
    rows = ["| family | placement | queries and keys | modules in transformers |", "|---|---|---|---|"]
    for fam in checkpoint_list()["placement_families"]:
        mods = ", ".join(f"`{m['path']}`" + (f" ({m['class']})" if m.get("class") else "") for m in fam["modules"])
        rows.append(f"| {fam['family']} | {fam['placement']} | {fam['qk']} | `{fam['model_type']}`: {mods} |")
    return "\n".join(rows) + "\n"
