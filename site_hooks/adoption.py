"""``{{ adoption_table() }}``: which norm each model family uses, and the eps its released checkpoints ship;
``{{ placement_table() }}``: where the named families put their norms, from the census (docs/data/census.json).

Rows of RMSNorm families (and GPT-NeoX, Cohere) take the norm class and casting convention from
``docs/data/numerics.json`` (read from the installed transformers by the numerics study); every row takes
its checkpoints and their eps from ``reference_impl/checkpoints.yaml``, each linked to the checkpoint's
``config.json`` on the Hugging Face Hub, with what another source says where ``docs/data/checkpoints.json``
finds that it disagrees. The LayerNorm families of that file are checked against the
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


def _disagreement(repo: str, key: str | None) -> str:
    """' (litgpt: 1e-05, which disagrees)' when another source gives this checkpoint's eps differently
    (docs/data/checkpoints.json compares them), else ''."""
    if not key:
        return ""
    rows = {c["repo"]: c for c in data.load("checkpoints.json")["checkpoints"]}
    value = rows.get(repo, {}).get("values", {}).get(key.split(".")[-1])
    if not value or value["agree"]:
        return ""
    others = [r for r in value["readings"] if r["source"] != "hub"]
    return " (" + "; ".join(f"{r['source']}: {format(r['value'], 'g')}" for r in others) + ", which disagrees)"


def _checkpoints_cell(checkpoints: list[dict]) -> str:
    """'1e-05 Llama 2 7B' per checkpoint, the release linked to its config.json (repo and key in the tooltip),
    and what another source says where it disagrees."""
    parts = []
    for c in checkpoints:
        where = f"{c['repo']}, config.json, " + (f"key {c['key']}" if c.get("key") else "no eps key")
        parts.append(f"**{format(c['eps'], 'g')}** [{c['release']}]({config_url(c['repo'])} \"{where}\")"
                     + _disagreement(c["repo"], c.get("key")))
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


def _pipe(text: str) -> str:
    return text.replace("|", "\\|")


@macro("placement_table")
def placement_table_macro(ctx) -> str:
    """Where each named family puts its norms and what it does to q and k: one row per family of
    ``reference_impl.families.NAMES`` that the census traced, read from ``docs/data/census.json`` (the
    norm modules of one decoder layer, in the order they run)."""
    from reference_impl.families import NAMES, UNTRACED

    from .census import PLACEMENT_WORDS, QK_WORDS, census

    ctx.guard_ids.append("adoption.placements")
    models = {m["model_type"]: m for m in census()["models"]}
    notes = checkpoint_list().get("placement_notes") or {}
    unknown = sorted(set(notes) - set(NAMES))
    if unknown:
        raise MacroError(f"reference_impl/checkpoints.yaml: placement_notes for {unknown}, which "
                         f"reference_impl/families.py NAMES does not name")
    rows = ["| family | placement | queries and keys | norm modules of one layer (`model_type`) | note |",
            "|---|---|---|---|---|"]
    for model_type, family in NAMES.items():
        if model_type in UNTRACED:
            continue  # not a decoder the census builds (T5): the adoption table has it
        m = models.get(model_type)
        if m is None:
            raise MacroError(f"{ctx.src_path}: docs/data/census.json has no model type {model_type!r} "
                             f"({family} in reference_impl/families.py NAMES)")
        if m["status"] != "traced":
            rows.append(f"| {family} | not traced: {_pipe(m['error'])} | | `{model_type}` | |")
            continue
        qk = QK_WORDS[m["qk_norm"]] + (f", {m['qk_rope']} RoPE" if m["qk_rope"] else "")
        mods = ", ".join(f"`{mod}` ({cls})" for mod, cls in dict.fromkeys((e["module"], e["class"]) for e in m["layer"])) or "none"
        placement = PLACEMENT_WORDS[m["placement"]] + (f" ({m['placement_note']})" if m["placement_note"] else "")
        rows.append(f"| {family} | {_pipe(placement)} | {qk} | `{model_type}`: {mods} | {_pipe(notes.get(model_type, ''))} |")
    return "\n".join(rows) + "\n"
