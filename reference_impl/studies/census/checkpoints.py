"""Released checkpoints: the config values that decide their norms, where each was read, and the structure
they resolve to under the census.

The one hand-kept source is ``reference_impl/checkpoints.yaml``: its family groups (the adoption table's
rows, eps read from each checkpoint's config.json on the Hub) and its ``checkpoints`` list (values with the
document and line they were read from). :func:`build` joins them with the census (``docs/data/census.json``):

- a repository read from two sources gets each value from each, and ``agree`` says whether they match;
  a disagreement is kept and shown, never resolved silently (the first source listed decides the value);
- each value field must be the model type's eps field or one of its variant fields (found by the census
  by re-tracing, :mod:`.variants`); a field that is neither is refused, naming the checkpoint;
- the structure (placement, QK-norm, parallel block, clipping, norm classes) is the default config's, or,
  where the checkpoint sets a variant field away from its default, that variant's trace.

``variant_coverage`` lists, for every variant field the census found, the checkpoints that set it away from
the default (empty: none known among the recorded checkpoints).
"""
from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
TABLE = REPO / "reference_impl" / "checkpoints.yaml"
DATA_FILE = REPO / "docs" / "data" / "checkpoints.json"
STRUCTURE = ("placement", "qk_norm", "qk_rope", "parallel", "final_norm", "norm_classes")


class CheckpointError(ValueError):
    """A checkpoint row that cannot be resolved: the message names the row and the problem."""


def table(path: Path = TABLE) -> dict:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as exc:
        raise CheckpointError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("checkpoints"), list):
        raise CheckpointError(f"{path}: needs a 'checkpoints' list")
    return data


def _readings(data: dict) -> dict:
    """repo -> {"model_type", "release", "family", "aliases", "readings": [(field, value, source, where)]}."""
    rows: dict[str, dict] = {}

    def row(repo, model_type, **extra):
        r = rows.setdefault(repo, {"repo": repo, "model_type": model_type, "release": None, "family": None,
                                   "aliases": [], "note": None, "readings": []})
        if r["model_type"] != model_type:
            raise CheckpointError(f"{repo}: model_type {r['model_type']!r} in one row, {model_type!r} in another")
        for k, v in extra.items():
            if v and not r.get(k):
                r[k] = v
        return r

    for group in ("rmsnorm_families", "layernorm_families"):
        for fam in data.get(group) or []:
            model_type = fam.get("model_type") or fam.get("folder")
            for c in fam["checkpoints"]:
                r = row(c["repo"], model_type, release=c.get("release"), family=fam["family"], note=c.get("note"))
                if c.get("key"):
                    r["readings"].append((c["key"].split(".")[-1], c["eps"], "hub", f"config.json, key {c['key']}"))
    for c in data["checkpoints"]:
        if not isinstance(c, dict) or not c.get("repo") or not c.get("model_type"):
            raise CheckpointError(f"checkpoints.yaml: a row without repo or model_type: {c!r}")
        r = row(c["repo"], c["model_type"], release=c.get("release"), aliases=c.get("aliases") or [])
        for field, pair in (c.get("values") or {}).items():
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[1], str)):
                raise CheckpointError(f"{c['repo']}: value of {field!r} must be [value, where it was read]")
            source, _, where = pair[1].partition(": ")
            if source not in (data.get("sources") or {}):
                raise CheckpointError(f"{c['repo']}: {field} cites source {source!r}, which 'sources' does not name")
            r["readings"].append((field, pair[0], source, where))
    return rows


def resolve_structure(model: dict, values: dict) -> tuple[dict, list]:
    """(structure, variant flags set away from the default) of a census model record under ``values``
    (field -> value). Raises CheckpointError for a field that is neither eps nor a variant field."""
    variants = model.get("variants") or []
    flags = {v["flag"] for v in variants}
    structure = {k: model.get(k) for k in STRUCTURE}
    structure["clip"] = False
    structure["norms"] = [{k: r[k] for k in ("module", "class", "role", "sublayer")} for r in model.get("layer", [])]
    chosen = []
    for field, value in values.items():
        if field == model.get("eps_attr"):
            continue
        if field not in flags:
            raise CheckpointError(f"field {field!r} is neither the eps field ({model.get('eps_attr')}) nor a field "
                                  f"the census found to change {model['model_type']}'s norm structure "
                                  f"({', '.join(sorted(flags)) or 'none'})")
        for v in variants:
            if v["flag"] != field or v["requires"]:
                continue
            away = (value is not None) if v["default"] is None else (value != v["default"])
            if away:
                chosen.append(field)
                structure.update({k: v[k] for k in STRUCTURE if k in v})
                structure["clip"] = v["clip"]
                structure["norms"] = v["norms"]
    return structure, chosen


def build(census: dict, data: dict | None = None) -> dict:
    """The rows and the coverage of ``docs/data/checkpoints.json`` (without provenance)."""
    data = table() if data is None else data
    models = {m["model_type"]: m for m in census["models"]}
    out = []
    for repo, r in sorted(_readings(data).items(), key=lambda kv: (kv[1]["model_type"], kv[0].lower())):
        values: dict[str, dict] = {}
        for field, value, source, where in r["readings"]:
            v = values.setdefault(field, {"value": value, "readings": []})
            v["readings"].append({"source": source, "where": where, "value": value})
        for v in values.values():
            v["agree"] = len({repr(x["value"]) for x in v["readings"]}) == 1
        m = models.get(r["model_type"])
        row = {"repo": repo, "aliases": r["aliases"], "release": r["release"], "family": r["family"],
               "model_type": r["model_type"], "note": r["note"], "values": values, "variants_set": [],
               "structure": None, "eps": None, "eps_default": None}
        if m is None or m["status"] != "traced":
            row["note"] = "; ".join(filter(None, [r["note"], "the census does not trace this model type "
                                                  "(no causal-LM class of a decoder), so no structure is resolved"]))
        else:
            try:
                row["structure"], row["variants_set"] = resolve_structure(m, {k: v["value"] for k, v in values.items()})
            except CheckpointError as exc:
                raise CheckpointError(f"{repo}: {exc}") from None
            row["eps_default"] = m["eps"]
            eps = values.get(m["eps_attr"]) if m["eps_attr"] else None
            row["eps"] = eps["value"] if eps else None
        out.append(row)
    coverage = []
    for m in census["models"]:
        for v in m.get("variants") or []:
            setters = [c["repo"] for c in out if c["model_type"] == m["model_type"] and v["flag"] in c["variants_set"]]
            coverage.append({"model_type": m["model_type"], "flag": v["flag"], "value": v["value"],
                             "checkpoints": setters})
    return {"sources": data.get("sources") or {}, "counts": counts(out, coverage), "checkpoints": out,
            "variant_coverage": coverage}


def counts(rows: list, coverage: list) -> dict:
    return {"checkpoints": len(rows), "model_types": len({r["model_type"] for r in rows}),
            "two_sources": sum(1 for r in rows if any(len(v["readings"]) > 1 for v in r["values"].values())),
            "disagreements": sum(1 for r in rows if any(not v["agree"] for v in r["values"].values())),
            "variant_fields": len(coverage), "variant_fields_set": sum(1 for c in coverage if c["checkpoints"])}


def contradictions(data: dict, census: dict):
    """(field, problem) for every row of a checkpoints file that the census no longer resolves the same way."""
    models = {m["model_type"]: m for m in census["models"]}
    for i, row in enumerate(data.get("checkpoints") or []):
        m = models.get(row.get("model_type"))
        if m is None or m["status"] != "traced":
            if row.get("structure") is not None:
                yield f"checkpoints.{i}.structure", f"{row.get('repo')}: the census does not trace {row.get('model_type')!r}"
            continue
        try:
            want, chosen = resolve_structure(m, {k: v["value"] for k, v in row["values"].items()})
        except CheckpointError as exc:
            yield f"checkpoints.{i}.values", f"{row['repo']}: {exc}"
            continue
        if row.get("structure") != want or row.get("variants_set") != chosen:
            yield f"checkpoints.{i}.structure", (f"{row['repo']}: its values resolve to {want} (variants {chosen}) "
                                                 f"under the census, the file says {row.get('structure')}")
        if row.get("eps_default") != m["eps"]:
            yield f"checkpoints.{i}.eps_default", f"{row['repo']}: the census's default eps is {m['eps']}"

