"""The engines file agrees with itself and with what is installed here: :func:`problems` lists every
disagreement as ``(field, words)``. The site build and the tests both call it after the schema.

- every model type is one the census of the installed transformers knows;
- a row's verdict is what its groups say (identical only if every dtype pair is), its batch verdict what
  its counts say, a matrix pair's verdict what its cells say, each histogram counts every element once;
- the matrix compares on the same wide input as the rows' histograms: a pair whose two rows each have an
  all-zero histogram in a dtype pair is identical there, and a server against transformers is identical
  exactly where the server's histogram is all zero (otherwise one of the measurements lies);
- a row is "identical" only if every kit case and every histogram is;
- every row's file is one release's file, with one sha256 (two rows reading one file agree on its hash),
  and a file of an installed release has that sha256 here.
"""
from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

from .sources import RELEASES


def _census_models() -> set:
    from ...check.models import load_index

    return set((load_index() or {}).get("models", {}))


def installed_file(member: str) -> Path | None:
    """Where an installed release's file lies here (None: its package is not installed)."""
    spec = importlib.util.find_spec(member.split("/")[0])
    if spec is None or not spec.submodule_search_locations:
        return None
    p = Path(list(spec.submodule_search_locations)[0]).parent / member
    return p if p.is_file() else None


def problems(data: dict) -> list[tuple[str, str]]:
    out = []
    known = _census_models()
    for i, m in enumerate(data["model_types"]):
        if m not in known:
            out.append((f"model_types.{i}", f"{m!r} is not a model type of the census of the installed transformers"))
    total = data["histogram_shape"][0] * data["histogram_shape"][1]
    hashes: dict = {}
    identical_at: dict = {}
    for i, r in enumerate(data["rows"]):
        where = f"rows.{i} ({r['id']})"
        if r["model_type"] not in known:
            out.append((where, f"model type {r['model_type']!r} is not in the census"))
        if r["release"] not in RELEASES:
            out.append((where, f"release {r['release']!r} is not one the study pins"))
        elif RELEASES[r["release"]].version != r["version"]:
            out.append((where, f"version {r['version']} is not the pinned {RELEASES[r['release']].version}"))
        for f, digest in [(r["file"], r["sha256"])] + [(a["file"], a["sha256"]) for a in r.get("also", [])]:
            if hashes.setdefault((r["release"], f), digest) != digest:
                out.append((where, f"{f} has two sha256 in this file"))
        groups = r["by_dtype"]
        wide_same = {(h["dtype"], h["weight_dtype"]): h["histogram"] is not None and not any(h["histogram"][1:])
                     for h in r["histograms"]}
        if r["verdict"] in ("identical", "differs"):
            want = "identical" if groups and all(g["identical"] for g in groups) and all(wide_same.values()) \
                else "differs"
            if r["verdict"] != want:
                out.append((where, f"verdict {r['verdict']!r} but its dtype groups say {want!r}"))
            if r["cases"] != sum(g["cases"] for g in groups):
                out.append((where, f"cases {r['cases']} is not the sum of its groups'"))
        for g in groups:
            if g["identical"] and (g["max_ulp"] or g["fraction_different"]):
                out.append((where, f"{g['dtype']}/{g['weight_dtype']}: identical but {g['max_ulp']} ulp apart"))
        if not r["residual"]:  # the matrix compares on the histograms' wide input
            for (dt, wdt), same in wide_same.items():
                identical_at[(r["path"], r["model_type"], dt, wdt)] = same
        for h in r["histograms"]:
            if h["histogram"] is not None:
                if len(h["histogram"]) != len(data["histogram_buckets"]) or sum(h["histogram"]) != total:
                    out.append((where, f"histogram {h['dtype']}/{h['weight_dtype']} does not count {total} elements "
                                       f"in {len(data['histogram_buckets'])} buckets"))
        b = r.get("batch")
        if b is not None and b["batch_invariant"] != (not any(b["rows_differing"].values())):
            out.append((where, "batch_invariant disagrees with its counts of differing rows"))
    for i, b in enumerate(data["reference_batch"]):
        if b["batch_invariant"] != (not any(b["rows_differing"].values())):
            out.append((f"reference_batch.{i}", "batch_invariant disagrees with its counts"))
    for i, p in enumerate(data["matrix"]):
        where = f"matrix.{i} ({p['model_type']}: {p['trainer_path']} x {p['server_path']})"
        if p["identical"] != all(c["identical"] for c in p["cells"]):
            out.append((where, "identical disagrees with its cells"))
        for c in p["cells"]:
            if c["identical"] and c["max_ulp"]:
                out.append((where, f"{c['dtype']}: identical but {c['max_ulp']} ulp apart"))
            t_ok = True if p["trainer"] == "transformers" else \
                identical_at.get((p["trainer_path"], p["model_type"], c["dtype"], c["weight_dtype"]))
            s_ok = identical_at.get((p["server_path"], p["model_type"], c["dtype"], c["weight_dtype"]))
            if t_ok and s_ok and not c["identical"]:
                out.append((where, f"{c['dtype']}/{c['weight_dtype']}: both paths equal the model's module bit for bit "
                                   f"but not each other"))
            if p["trainer"] == "transformers" and s_ok is not None and s_ok != c["identical"]:
                out.append((where, f"{c['dtype']}/{c['weight_dtype']}: the server's histogram says identical={s_ok} "
                                   f"on the same input, the pair {c['identical']}"))
    return out


def installed_hash_problems(data: dict) -> list[tuple[str, str]]:
    """Rows of an installed release (Liger-Kernel) whose file here has another sha256."""
    out = []
    for i, r in enumerate(data["rows"]):
        rel = RELEASES.get(r["release"])
        if rel is None or rel.kind != "installed":
            continue
        p = installed_file(r["file"])
        if p is None:
            continue
        digest = hashlib.sha256(p.read_bytes()).hexdigest()
        if digest != r["sha256"]:
            out.append((f"rows.{i}", f"{r['file']} here has sha256 {digest[:12]}..., the row {r['sha256'][:12]}..."))
    return out
