"""The "Engines" page (docs/engines.md): views of ``docs/data/engines.json`` (written by
``python -m reference_impl.studies.engines``). Every number and sentence of evidence comes from that file;
the page names its columns.

- ``{{ engines_releases() }}``: the releases read, their source, and what became of each;
- ``{{ engines_matrix(residual) }}``: engine x model type, one cell per path the engine's model file uses;
- ``{{ engines_differences() }}``: each (path, model type) that differs, with its evidence;
- ``{{ engines_read() }}``: the kernels read where they cannot run, each step with its line;
- ``{{ engines_pairs() }}``: trainer x server per model type; ``{{ engines_batch() }}``: batch invariance.

The file is checked by :func:`reference_impl.studies.engines.validate.problems` before any table is drawn.
"""
from __future__ import annotations

from functools import lru_cache

from . import data
from .macros import MacroError, macro

FILE = "engines.json"
SHORT = 12


def clear_caches() -> None:
    engines.cache_clear()


@lru_cache(maxsize=1)
def engines() -> dict:
    doc = data.load(FILE)
    from reference_impl.studies.engines.validate import problems

    bad = problems(doc)
    if bad:
        raise MacroError(f"docs/data/{FILE} disagrees with itself: " + "; ".join(f"{f}: {w}" for f, w in bad[:5]))
    return doc


def anchor(row: dict) -> str:
    """The id of a row's block on the page (also the target of the model cards' links)."""
    return "e-" + "".join(c if c.isalnum() else "-" for c in row["id"]).strip("-").lower()


def _engines_in_order(doc) -> list[str]:
    return [r["engine"] for r in doc["releases"] if r["role"] != "reference"]


def _part(groups) -> str:
    if not groups:
        return "not run"
    if all(g["identical"] for g in groups):
        return "identical"
    ulps = [g["max_ulp"] for g in groups if g["max_ulp"]]
    if ulps:
        return f"≤ {max(ulps)} ulp"
    return "output dtype" if any("returned" in (g["problem"] or "") for g in groups) else "differs"


def _cell(row: dict) -> str:
    """A matrix cell: the verdict with the gain in the activation's dtype (as a checkpoint is loaded) and,
    where it differs, with a float32 gain."""
    link = "#" + anchor(row)
    if row["verdict"] in ("refused", "error"):
        return f"[{'refused' if row['verdict'] == 'refused' else 'raised'}]({link})"
    if row["verdict"] == "identical":
        return f"[identical]({link})"
    same = [g for g in row["by_dtype"] if g["weight_dtype"] == g["dtype"]]
    fp32 = [g for g in row["by_dtype"] if g["weight_dtype"] == "fp32" and g["dtype"] != "fp32"]
    return f"[{_part(same)} · fp32 gain: {_part(fp32)}]({link})"


@macro("engines_releases")
def releases_table(ctx) -> str:
    doc = engines()
    counts: dict = {}
    for r in doc["rows"]:
        counts[r["release"]] = counts.get(r["release"], 0) + 1
    for k in doc["read"]:
        counts[k["release"]] = counts.get(k["release"], 0)
    lines = ["| engine | role | release read | rows run | kernels read | what happened |", "|---|---|---|---|---|---|"]
    for rel in doc["releases"]:
        read_n = sum(1 for k in doc["read"] if k["release"] == rel["key"])
        ran = counts.get(rel["key"], 0) + sum(counts.get(k, 0) for k in ("mlx_core",) if rel["key"] == "mlx")
        note = rel["note"] or {"fetched": "read from the release", "reference": "the models' own modules"}[rel["status"]]
        lines.append(f"| [{rel['engine']}]({rel['url']}) | {rel['role']} | `{rel['source']}` | {ran} | {read_n} | "
                     f"{note.replace('|', '/')} |")
    return "\n".join(lines)


@macro("engines_matrix")
def matrix_table(ctx, residual: bool = False) -> str:
    doc = engines()
    cols = [m for m in doc["model_types"]]
    lines = ["| engine: path | " + " | ".join(f"`{m}`" for m in cols) + " |", "|---|" + "---|" * len(cols)]
    paths: dict = {}
    for r in doc["rows"]:
        if r["residual"] == residual:
            paths.setdefault((r["engine"], r["path"]), {})[r["model_type"]] = r
    if not paths:
        raise MacroError(f"{ctx.src_path}: docs/data/{FILE} has no rows with residual={residual}")
    order = {e: i for i, e in enumerate(_engines_in_order(doc))}
    for (engine, path), by_model in sorted(paths.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][1])):
        fn = next(iter(by_model.values()))["function"]
        cells = [_cell(by_model[m]) if m in by_model else "·" for m in cols]
        lines.append(f"| {engine}: `{fn}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _histogram(doc, h) -> str:
    if h["histogram"] is None:
        return f"{h['dtype']} x, {h['weight_dtype']} gain: {h.get('note', 'not compared')}"
    total = sum(h["histogram"])
    parts = [f"{b} ulp: {n}" for b, n in zip(doc["histogram_buckets"], h["histogram"]) if n]
    return f"{h['dtype']} x, {h['weight_dtype']} gain ({total} elements): " + ", ".join(parts)


def _advice(row: dict, rows: dict) -> str:
    """What a user can do, from the row's own groups: a gain dtype that makes it identical, the unfused path."""
    groups = row["by_dtype"]
    bad = {g["weight_dtype"] for g in groups if not g["identical"]} | {
        h["weight_dtype"] for h in row["histograms"] if h["histogram"] is None or any(h["histogram"][1:])}
    fixes = sorted({g["weight_dtype"] for g in groups if g["identical"]} - bad)
    if row["verdict"] == "refused":
        return "Use the engine's other norm path for this model (see its row in the matrix)."
    if fixes:
        return (f"It is bit-identical when the norm's weight is kept in {', '.join(fixes)}: load the norm weights "
                f"in that dtype, or accept the difference shown.")
    if row["residual"]:
        plain = rows.get((row["path"].removesuffix(":residual"), row["model_type"]))
        if plain is not None and plain["verdict"] == "identical":
            return ("The same class without the residual stream is bit-identical: the difference is the fused "
                    "add. No flag of the engine changes it; a trainer that must match it computes the norm from "
                    "the float32 sum as the engine does.")
    return "No flag of the engine read here changes this order; compare within the error bound instead of bits."


@macro("engines_differences")
def differences(ctx) -> str:
    doc = engines()
    rows = {(r["path"], r["model_type"]): r for r in doc["rows"]}
    out = []
    for r in doc["rows"]:
        ok = r["verdict"] == "identical"
        kind = "success" if ok else ("warning" if r["verdict"] == "differs" else "failure")
        head = f"{r['engine']} {r['version']}: {r['function']} for {r['model_type']}" + (
            " (with the residual stream)" if r["residual"] else "") + f": {r['verdict']}"
        body = [f'<a id="{anchor(r)}"></a>',
                f"`{r['file']}` line {r['line']} (sha256 `{r['sha256'][:SHORT]}…`); {r['label']}."]
        for ev in r["evidence"]:
            body.append(f"Model file: `{ev['file']}` line {ev['line']}: {ev['what']}.")
        if r.get("diagnosis"):
            body.append(f"The kit: {r['diagnosis']}")
        if r["by_dtype"]:
            body.append("| x | gain | cases | identical | share differing | max ulp | problem |\n|---|---|---|---|---|---|---|")
            body[-1] += "".join(
                f"\n| {g['dtype']} | {g['weight_dtype']} | {g['cases']} | {'yes' if g['identical'] else 'no'} | "
                f"{'n/a' if g['fraction_different'] is None else format(100 * g['fraction_different'], '.1f') + ' %'} | "
                f"{'n/a' if g['max_ulp'] is None else g['max_ulp']} | {(g['problem'] or '').replace('|', '/')} |"
                for g in r["by_dtype"])
        for h in r["histograms"]:
            body.append("ulp distance to the model's module, " + _histogram(doc, h) + ".")
        for dt, why in (r.get("not_run_dtypes") or {}).items():
            body.append(f"{dt} not run: {why}.")
        if r.get("batch"):
            b = r["batch"]
            body.append(f"Batch invariance ({b['dtype']}, {b['rows']} rows of {b['width']}): "
                        f"{'yes' if b['batch_invariant'] else 'no'}; deterministic: {'yes' if b['deterministic'] else 'no'}.")
        if r.get("stubs"):
            body.append("Stubs: " + "; ".join(r["stubs"]) + ".")
        if not ok:
            body.append("What to do: " + _advice(r, rows))
        flags = ", ".join(f"{k}={v}" for k, v in r["flags"].items())
        body.append(f"Re-run: `python -m reference_impl.studies.engines --only {r['release']}`" +
                    (f" (flags read from the model file: {flags})" if flags else ""))
        out.append((r["engine"], r["version"], f'??? {kind} "{head}"\n' +
                    "\n\n".join("    " + b.replace("\n", "\n    ") for b in body)))
    groups: dict = {}
    for engine, version, block in out:
        groups.setdefault((engine, version), []).append(block)
    return "\n\n".join(f'??? note "{e} {v}: {len(blocks)} rows"\n' + "\n\n".join(
        "    " + b.replace("\n", "\n    ") for b in blocks) for (e, v), blocks in groups.items())


@macro("engines_read")
def read_table(ctx) -> str:
    doc = engines()
    rel = {r["key"]: r for r in doc["releases"]}
    out = []
    for k in doc["read"]:
        r = rel[k["release"]]
        out.append(f"**{r['engine']}** (`{r['source']}`): `{k['function']}` in `{k['file']}` line {k['line']} "
                   f"(sha256 `{k['sha256'][:SHORT]}…`), read, not run: {k['why_not_run']}. Applies to {k['applies_to']}.\n")
        out.append("| step | line | order |\n|---|---|---|")
        out[-1] += "".join(f"\n| {s['aspect']} | {s['line']} | {s['order']} |" for s in k["steps"])
    return "\n\n".join(out)


@macro("engines_pairs")
def pairs_table(ctx) -> str:
    doc = engines()
    lines = ["| model type | trainer path | server path | identical | per dtype (x / gain: max ulp) |",
             "|---|---|---|---|---|"]
    for p in doc["matrix"]:
        cells = "; ".join(f"{c['dtype']}/{c['weight_dtype']}: " + ("same" if c["identical"] else
                          (f"{c['max_ulp']} ulp" if c["max_ulp"] is not None else c.get("note", "differs")))
                          for c in p["cells"])
        lines.append(f"| `{p['model_type']}` | {p['trainer_path']} | {p['server_path']} | "
                     f"{'yes' if p['identical'] else 'no'} | {cells} |")
    return "\n".join(lines)


@macro("engines_batch")
def batch_table(ctx) -> str:
    doc = engines()
    lines = ["| path | model type | x dtype | batch-invariant | deterministic | rows differing (alone / other batches / "
             "reversed / padded) |", "|---|---|---|---|---|---|"]
    seen = set()
    items = [(f"transformers: {b['model_type']}", b) for b in doc["reference_batch"]]
    items += [(f"{r['engine']}: `{r['function']}`" + (" + residual" if r["residual"] else ""), r["batch"] | {
        "model_type": r["model_type"]}) for r in doc["rows"] if r.get("batch")]
    for name, b in items:
        counts = " / ".join(str(v) for v in b["rows_differing"].values())
        key = (name, b["model_type"])
        if key in seen:
            continue
        seen.add(key)
        lines.append(f"| {name} | `{b['model_type']}` | {b['dtype']} | {'yes' if b['batch_invariant'] else 'no'} | "
                     f"{'yes' if b['deterministic'] else 'no'} | {counts} |")
    return "\n".join(lines)


@macro("engines_count")
def count(ctx, what: str) -> str:
    """A count from the file, for a sentence: rows, ran engines, read kernels, differing rows, pairs."""
    doc = engines()
    values = {"rows": len(doc["rows"]), "read": len(doc["read"]), "pairs": len(doc["matrix"]),
              "engines": len({r["engine"] for r in doc["rows"]} | {e["engine"] for e in doc["releases"] for k in
                                                                    doc["read"] if k["release"] == e["key"]}),
              "differing": sum(r["verdict"] != "identical" for r in doc["rows"]),
              "identical": sum(r["verdict"] == "identical" for r in doc["rows"]),
              "identical_pairs": sum(p["identical"] for p in doc["matrix"]),
              "batch_paths": sum(1 for r in doc["rows"] if r.get("batch")),
              "batch_invariant": sum(1 for r in doc["rows"] if r.get("batch", {}).get("batch_invariant")),
              "deterministic": sum(1 for r in doc["rows"] if r.get("batch", {}).get("deterministic"))}
    if what not in values:
        raise MacroError(f"{ctx.src_path}: engines_count knows {', '.join(values)}, not {what!r}")
    return str(values[what])


@macro("engines_by_model")
def by_model(ctx) -> str:
    """One line per model type (the target of the Find-your-model cards' links): each engine path's cell
    and the trainer x server pairs that agree."""
    doc = engines()
    lines = ["| model type | engine paths (without the residual stream) | trainer x server pairs identical |",
             "|---|---|---|"]
    for m in doc["model_types"]:
        rows = [r for r in doc["rows"] if r["model_type"] == m and not r["residual"]]
        cells = "; ".join(f"{r['engine']}: {_cell(r)}" for r in rows) or "no engine path read for it"
        pairs = [p for p in doc["matrix"] if p["model_type"] == m]
        lines.append(f'| <span id="model-{m}"></span>`{m}` | {cells} | {sum(p["identical"] for p in pairs)} of '
                     f"{len(pairs)} |")
    return "\n".join(lines)
