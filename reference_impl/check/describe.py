"""``python -m reference_impl.check --describe NAME [--json]`` and ``--list [--json]``: what the census knows
about a model type, a family, a norm class or a released checkpoint.

Everything is read from the kit's index (``census_index.json``, written by
``python -m reference_impl.studies.census`` with ``docs/data/census.json`` and ``docs/data/checkpoints.json``),
so the answer needs neither ``transformers`` nor the site's files. A model type's answer is its **default
config**'s structure, and says so; a checkpoint's answer is the structure its released config resolves to
(its eps and the variant fields it sets), each value with where it was read.
"""
from __future__ import annotations

import json

from .models import load_index

STRUCTURE = ("placement", "placement_note", "qk_norm", "qk_rope", "parallel", "final_norm")


def _index() -> dict:
    index = load_index()
    if index is None:
        raise ValueError("no census index is installed (reference_impl/check/census_index.json): "
                         "run python -m reference_impl.studies.census")
    return index


def find_checkpoint(name: str, index: dict) -> str | None:
    """The repository id a checkpoint name (its repo id or an alias, in any case) stands for, or None."""
    low = name.lower()
    for repo, c in (index.get("checkpoints") or {}).items():
        if low == repo.lower() or low in (a.lower() for a in c.get("aliases") or []):
            return repo
    return None


def _family_types(name: str) -> list[str]:
    from .. import families as fam

    low = name.lower()
    return [t for t, f in fam.NAMES.items() if f.lower() == low or fam.family_key(f) == low]


def _model(model_type: str, row: dict, index: dict) -> dict:
    checkpoints = sorted(r for r, c in (index.get("checkpoints") or {}).items() if c["model_type"] == model_type)
    return {
        "name": model_type, "kind": "model_type", "model_type": model_type, "default_config": True,
        "config": f"the default config of {row.get('config_class')} (transformers {index.get('transformers')}): "
                  "a released checkpoint may set other values",
        **{k: row.get(k) for k in STRUCTURE}, "eps": row.get("eps"), "eps_attr": row.get("eps_attr"),
        "norm_class": row.get("norm_class"), "catalog": row.get("catalog"),
        "norms": [{**n, "eps": row.get("eps")} for n in row.get("norms") or []],
        "extra_norms": row.get("extra_norms") or [], "source": row.get("source"),
        "variants": row.get("variants") or [], "checkpoints": checkpoints,
    }


def _checkpoint(repo: str, index: dict) -> dict:
    c = index["checkpoints"][repo]
    row = index["models"].get(c["model_type"])
    if row is None:
        raise ValueError(f"checkpoint {repo!r} is a {c['model_type']!r} model, which the census does not trace")
    out = _model(c["model_type"], row, index)
    eps = c.get("eps") if c.get("eps") is not None else row.get("eps")
    where = "; ".join(f"{field} = {v['value']} ({', '.join(r['source'] + ': ' + r['where'] for r in v['readings'])})"
                      for field, v in c["values"].items()) or "no value recorded: the default config's"
    out.update({"name": repo, "kind": "checkpoint", "default_config": False,
                "config": f"the released config of {repo}: {where}", "eps": eps,
                "eps_default": row.get("eps"), "checkpoint": {"repo": repo, **c}})
    s = c.get("structure")
    if s:
        out.update({k: s[k] for k in ("placement", "qk_norm", "qk_rope", "parallel", "final_norm") if k in s})
        out["clip"] = s.get("clip", False)
        by_class = {n["class"]: n.get("catalog") for n in row.get("norms") or []}
        out["norms"] = [{**n, "catalog": by_class.get(n["class"]), "eps": eps} for n in s.get("norms") or []]
    else:
        out["norms"] = [{**n, "eps": eps} for n in out["norms"]]
    return out


def describe(name: str) -> dict:
    """The structure for ``name``: a model type, a family name, a norm class or a checkpoint id. An unknown
    name raises ValueError listing the names that contain it."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"--describe needs a model type, family, norm class or checkpoint id, got {name!r}")
    index = _index()
    models = index["models"]
    repo = find_checkpoint(name, index)
    if repo is not None:
        return _checkpoint(repo, index)
    if name in models:
        return _model(name, models[name], index)
    types = [t for t in _family_types(name) if t in models]
    if types:
        return {**_model(types[0], models[types[0]], index), "name": name, "family": name}
    users = sorted(t for t, r in models.items() if any(n["class"] == name for n in r.get("norms") or []))
    if users:
        return {"name": name, "kind": "norm_class", "norm_class": name, "model_types": users,
                "catalog": next(n["catalog"] for n in models[users[0]]["norms"] if n["class"] == name)}
    low = name.lower()
    near = sorted(t for t in models if low in t.lower()) + sorted(
        (r for r in index.get("checkpoints") or {} if low in r.lower()), key=str.lower)
    hint = f"names containing it: {', '.join(near[:20])}" if near else "python -m reference_impl.check --list lists them"
    raise ValueError(f"unknown model type, family, norm class or checkpoint {name!r}; {hint}")


def listing() -> dict:
    """Every model type (with its placement and QK-norm) and every checkpoint (with its model type)."""
    index = _index()
    return {"transformers": index.get("transformers"),
            "model_types": [{"model_type": t, "placement": r.get("placement"), "qk_norm": r.get("qk_norm"),
                             "variants": sorted({v["flag"] for v in r.get("variants") or []})}
                            for t, r in sorted(index["models"].items())],
            "checkpoints": [{"repo": r, "model_type": c["model_type"], "eps": c.get("eps")}
                            for r, c in sorted((index.get("checkpoints") or {}).items(), key=lambda kv: kv[0].lower())]}


def text(d: dict) -> str:
    """A description as lines a person reads."""
    if d["kind"] == "norm_class":
        return (f"{d['norm_class']} (catalog: {d['catalog'] or 'no entry'}) is used by "
                f"{len(d['model_types'])} model types: {', '.join(d['model_types'])}")
    lines = [f"{d['name']}: {d['model_type']}" + (" (default config)" if d["default_config"] else ""),
             f"  config: {d['config']}",
             f"  placement: {d['placement']}" + (f" ({d['placement_note']})" if d.get("placement_note") else ""),
             f"  qk_norm: {d['qk_norm']}" + (f", {d['qk_rope']} RoPE" if d.get("qk_rope") else ""),
             f"  final_norm: {d['final_norm']}; eps: {d['eps']}"
             + (f" (default config: {d['eps_default']})" if d.get("eps_default") not in (None, d["eps"]) else "")]
    lines.append("  norms of one layer:")
    lines += [f"    {n['module']}: {n['class']}, {n['role']}" + (f" ({n['sublayer']})" if n.get("sublayer") else "")
              + f", {n.get('catalog') or 'no catalog entry'}" for n in d["norms"]]
    if d["variants"]:
        lines.append("  config fields that change the structure:")
        for v in d["variants"]:
            on = f" (with {', '.join(f'{k}={w}' for k, w in v['requires'].items())})" if v.get("requires") else ""
            lines.append(f"    {v['flag']}={v['value']}{on}: placement {v['placement']}, qk_norm {v['qk_norm']}"
                         + (", parallel" if v.get("parallel") else "") + (", clipped q/k/v" if v.get("clip") else ""))
    if d.get("checkpoints"):
        lines.append(f"  released checkpoints recorded: {', '.join(d['checkpoints'])}")
    return "\n".join(lines)


def main(args) -> int:
    """The ``--describe`` / ``--list`` half of the command (``args`` from :func:`.cli.parser`)."""
    out = describe(args.describe) if args.describe is not None else listing()
    if args.json:
        print(json.dumps(out, indent=1))
    elif args.describe is not None:
        print(text(out))
    else:
        print(f"{len(out['model_types'])} model types (transformers {out['transformers']}):")
        print("  " + ", ".join(m["model_type"] for m in out["model_types"]))
        print(f"{len(out['checkpoints'])} released checkpoints:")
        print("\n".join(f"  {c['repo']} ({c['model_type']}, eps {c['eps']})" for c in out["checkpoints"]))
    return 0
