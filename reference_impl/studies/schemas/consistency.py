"""A data file's agreement with itself, with the other files it names and with the installed sources.

:mod:`.invariants` holds the physical limits; the checks here recompute every summary a file stores from
the rows it summarises (the census's counts, the conformance table's per-implementation rows and grid), and
resolve every name a file gives: catalog entries and their variants against the catalog's own candidate
list, norm classes against the census, source files and lines against the installed ``transformers`` and
``torch``, a machine key against the CPU identity recorded beside it, and the kit's example run against its
own command. Any correct run satisfies them; a hand edit, a merge of two runs or a truncated rewrite does not.
Each check yields ``(field, problem)`` pairs and is registered with :func:`.invariants.invariant`.
"""
from __future__ import annotations

import importlib.util
import json
import re
from collections import Counter
from functools import lru_cache
from pathlib import Path

from .invariants import REPO, _close, _dicts, _walk, invariant

CENSUS = REPO / "docs" / "data" / "census.json"


# ------------------------------------------------------------------------------------------ every file

@invariant("*")
def machine_key_of_identity(data, name):
    """A recorded machine key is the key :func:`reference_impl.studies.machine.machine_key` computes from
    the CPU identity recorded beside it."""
    from .. import machine

    for path, node in _dicts(data):
        ident, key = node.get("cpu_identity"), node.get("machine_key")
        if isinstance(ident, dict) and isinstance(key, str):
            want = machine.machine_key(ident)
            if key != want:
                yield ".".join((*path, "machine_key")), f"{key!r} but the CPU identity beside it gives {want!r}"


@invariant("*")
def quick_flag(data, name):
    """A file that says at its top whether it is a quick run says what its provenance says."""
    prov = data.get("provenance") if isinstance(data, dict) else None
    if isinstance(prov, dict) and "quick" in data and "quick" in prov and data["quick"] != prov["quick"]:
        yield "quick", f"{data['quick']} but provenance.quick is {prov['quick']}"


def _is_share(key: str) -> bool:
    # counted shares only: a timed share's confidence bounds (``rsqrt_share_low``) may fall below zero
    return "fraction" in key or key.endswith("exact_share")


@invariant("*")
def fractions(data, name):
    """A fraction of counted things (a field named ``*fraction*`` or ``*exact_share``) lies in [0, 1]."""
    for path, v in _walk(data):
        keys = [p for p in path if not p.isdigit()]
        if keys and _is_share(keys[-1]) and isinstance(v, (int, float)) and not isinstance(v, bool) \
                and not 0 <= v <= 1:
            yield ".".join(path), f"{v} is a fraction outside [0, 1]"


# ------------------------------------------------------------------------------------------ installed sources

@lru_cache(maxsize=None)
def _package_dir(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    return Path(spec.origin).parent if spec is not None and spec.origin else None


@lru_cache(maxsize=None)
def _lines(path: Path) -> tuple[str, ...] | None:
    try:
        return tuple(path.read_text(encoding="utf-8", errors="replace").splitlines())
    except OSError:
        return None


def installed_file(source: str, default: str = "transformers") -> Path | None:
    """The installed file a data file names: ``torch/...`` or ``transformers/...`` under that package's
    folder's parent; any other relative path under the ``default`` package's folder."""
    first = source.split("/", 1)[0]
    if first in ("torch", "transformers"):
        base = _package_dir(first)
        return None if base is None else base.parent / source
    base = _package_dir(default)
    return None if base is None else base / source


def _installed_version(package: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def class_at(source: str, line: int, cls: str) -> str | None:
    """None when the installed ``source`` defines ``class cls`` at ``line`` (its decorators first, as
    ``inspect.getsourcelines`` counts); else what is wrong."""
    path = installed_file(source)
    lines = _lines(path) if path is not None else None
    if lines is None:
        return f"{source} is not a file of the installed package"
    if not (isinstance(line, int) and 1 <= line <= len(lines)):
        return f"line {line} is outside {source} ({len(lines)} lines)"
    for text in lines[line - 1:line + 8]:
        text = text.strip()
        if re.match(rf"class {re.escape(cls)}\b", text):
            return None
        if not (text.startswith(("@", "#", ")")) or text.endswith((",", "("))):  # decorators, comments
            break
    return f"line {line} of the installed {source} does not define class {cls}"


# ------------------------------------------------------------------------------------------ the census

@lru_cache(maxsize=None)
def _candidate_names() -> frozenset:
    """Every name a match may carry: the catalog's candidates of every kind (variants included)."""
    from ...check import matching

    return frozenset(c.name for k in matching.kinds() for c in matching.candidate_list(k))


def _duplicates(items, key, where):
    seen = Counter(key(x) for x in items)
    for i, x in enumerate(items):
        if seen[key(x)] > 1:
            yield f"{where}.{i}", f"{key(x)!r} is listed {seen[key(x)]} times"
            seen[key(x)] = 0  # once per repeated name


@invariant("census.json")
def census_self(data, name):
    """Each class and model type once; every count is the count of the rows it counts; a matched class
    is in scope, names a catalog candidate and sits 0 ulps from it; a model's classes are census classes
    and its catalog list is theirs; each class's users are the models that use it."""
    from ...norms import CATALOG
    from ..census.run import counts as census_counts  # the definition the census run writes

    classes, models = data.get("classes", []), data.get("models", [])
    yield from _duplicates(classes, lambda c: c["name"], "classes")
    yield from _duplicates(models, lambda m: m["model_type"], "models")
    counts = data.get("counts") or {}
    for key, want in census_counts(classes, models).items():
        if key in counts and counts[key] != want:
            if isinstance(want, dict) and isinstance(counts[key], dict):  # name the buckets that differ
                diff = sorted(k for k in {*want, *counts[key]} if counts[key].get(k) != want.get(k))
                yield f"counts.{key}", "; ".join(f"{k!r}: {counts[key].get(k)} but the rows give {want.get(k)}"
                                                 for k in diff)
            else:
                yield f"counts.{key}", f"{counts[key]} but the rows give {want}"
    names = _candidate_names()
    for i, c in enumerate(classes):
        for key in ("catalog", "closest"):
            v = c.get(key)
            if v is not None and v not in names:
                yield f"classes.{i}.{key}", f"{v!r} is not a catalog entry or variant (catalog: {', '.join(CATALOG)})"
        if c.get("catalog") and not c.get("in_scope"):
            yield f"classes.{i}.catalog", f"{c['name']} is out of scope but matched to {c['catalog']!r}"
        if c.get("catalog") and c.get("max_ulp") not in (None, 0):
            yield f"classes.{i}.max_ulp", f"{c['name']} is matched to {c['catalog']!r} yet {c['max_ulp']} ulps away"
        if c.get("exception") and (c.get("catalog") or not c.get("in_scope")):
            yield f"classes.{i}.exception", f"{c['name']} carries an exception but is matched or out of scope"
    by_name = {c["name"]: c for c in classes}
    users: dict = {}
    for i, m in enumerate(models):
        for cls in m.get("norm_classes", []):
            users.setdefault(cls, []).append(m["model_type"])
            if cls not in by_name:
                yield f"models.{i}.norm_classes", f"{cls!r} is not a class of this census"
        want = [by_name[c].get("catalog") if c in by_name else None for c in m.get("norm_classes", [])]
        if "catalog" in m and m["catalog"] != want:
            yield f"models.{i}.catalog", f"{m['catalog']} but its classes are matched to {want}"
    for i, c in enumerate(classes):
        if "users" in c and sorted(c["users"]) != sorted(users.get(c["name"], [])):
            yield f"classes.{i}.users", f"{c['users']} but the models using {c['name']} are {sorted(users.get(c['name'], []))}"


@invariant("census.json")
def census_sources(data, name):
    """Every class's source file and line defines that class in the installed package, every model's
    source file exists there, and the installed transformers is the version the census read."""
    recorded = ((data.get("provenance") or {}).get("versions") or {}).get("transformers")
    installed = _installed_version("transformers")
    if recorded and installed != recorded:
        yield "provenance.versions.transformers", (f"the census read transformers {recorded}, {installed} is "
                                                   f"installed: its sources cannot be checked (re-run the census)")
        return
    for i, c in enumerate(data.get("classes", [])):
        if c.get("source") is not None:
            problem = class_at(c["source"], c.get("line"), c["name"])
            if problem:
                yield f"classes.{i}.source", problem
    for i, m in enumerate(data.get("models", [])):
        src = m.get("source")
        if isinstance(src, str) and not (installed_file(src) or Path("/nonexistent")).is_file():
            yield f"models.{i}.source", f"{src} is not a file of the installed transformers"


@lru_cache(maxsize=4)
def _census(mtime_ns: int) -> dict:
    return json.loads(CENSUS.read_text())


def committed_census() -> dict | None:
    try:
        return _census(CENSUS.stat().st_mtime_ns)
    except (OSError, ValueError):
        return None


@invariant("census_index.json")
def census_index(data, name):
    """The kit's index is a view of the census: each model type a traced census model, its class a census
    class with the same module and catalog entry, its eps and QK-norm the model's, the transformers version
    the census's; every catalog name a catalog candidate."""
    census = committed_census()
    if census is None:
        yield "(top level)", f"{CENSUS.relative_to(REPO)} cannot be read to check the index against"
        return
    models = {m["model_type"]: m for m in census.get("models", [])}
    classes = {c["name"]: c for c in census.get("classes", [])}
    version = ((census.get("provenance") or {}).get("versions") or {}).get("transformers")
    if data.get("transformers") != version:
        yield "transformers", f"{data.get('transformers')!r} but the census read transformers {version!r}"
    names = _candidate_names()
    for t, row in (data.get("models") or {}).items():
        where = f"models.{t}"
        m = models.get(t)
        if m is None or m.get("status") != "traced":
            yield where, f"{t!r} is not a traced model type of the census"
            continue
        if row.get("catalog") is not None and row["catalog"] not in names:
            yield f"{where}.catalog", f"{row['catalog']!r} is not a catalog entry or variant"
        c = classes.get(row.get("norm_class"))
        if c is None or row["norm_class"] not in m.get("norm_classes", []):
            yield f"{where}.norm_class", f"{row.get('norm_class')!r} is not one of the census's classes of {t}"
            continue
        for key, want in (("module", c.get("module")), ("catalog", c.get("catalog")), ("gain", c.get("gain")),
                          ("gain_dtype", c.get("gain_dtype")), ("eps", m.get("eps")), ("qk_norm", m.get("qk_norm"))):
            if key in row and row[key] != want:
                yield f"{where}.{key}", f"{row[key]!r} but the census gives {want!r}"


# ------------------------------------------------------------------------------------------ conformance

def conformance_row(key: str, cases: list) -> dict:
    """An implementation's summary fields as its cases give them (reference_impl/studies/conformance.py)."""
    got = [c["results"][key] for c in cases if key in c.get("results", {})]
    ok = [g for g in got if "unavailable" not in g]
    return {"cases": len(got), "measured": len(ok), "identical": sum(bool(g["identical"]) for g in ok),
            "max_fraction_different": max((g["fraction_different"] for g in ok), default=None),
            "max_ulp": max((g["max_ulp"] for g in ok), default=None),
            "max_ulp_vs_oracle": max((g["max_ulp_vs_oracle"] for g in ok), default=None)}


@invariant("conformance.json")
def conformance_self(data, name):
    """Each implementation and case once; an implementation's row, its ``by_key`` entry and its ``grid``
    cells are what its cases give; a case is identical exactly when no element differs; every case's
    dtype, convention and width are the settings'; measured_here counts the implementations measured."""
    impls, cases = data.get("implementations", []), data.get("cases", [])
    settings = data.get("settings") or {}
    yield from _duplicates(impls, lambda r: r["key"], "implementations")
    yield from _duplicates(cases, lambda c: c["id"], "cases")
    for i, c in enumerate(cases):
        for key, allowed in (("dtype", "dtypes"), ("convention", "conventions"), ("d", "widths")):
            if allowed in settings and c.get(key) not in settings[allowed]:
                yield f"cases.{i}.{key}", f"{c.get(key)!r} is not one of settings.{allowed} {settings[allowed]}"
        for k, r in (c.get("results") or {}).items():
            if "unavailable" in r:
                continue
            same = r.get("fraction_different") == 0 and r.get("max_ulp") == 0
            if bool(r.get("identical")) != same:
                yield f"cases.{i}.results.{k}.identical", (f"{r.get('identical')} but {r.get('fraction_different')} "
                                                           f"of the elements differ, by up to {r.get('max_ulp')} ulps")
    by_key = data.get("by_key") or {}
    for i, row in enumerate(impls):
        want = conformance_row(row["key"], cases)
        for field, v in want.items():
            if field in row and not _same(row[field], v):
                yield f"implementations.{i}.{field}", f"{row[field]!r} but its cases give {v!r}"
        if row.get("identical", 0) > row.get("measured", 0) or row.get("measured", 0) > row.get("cases", 0):
            yield f"implementations.{i}", (f"{row.get('identical')} identical of {row.get('measured')} measured "
                                           f"of {row.get('cases')} cases")
        if "by_key" in data and by_key.get(row["key"]) != row:
            yield f"by_key.{row['key']}", "is not the implementation's row"
    for k in by_key:
        if k not in {r["key"] for r in impls}:
            yield f"by_key.{k}", "names no implementation of the file"
    grid = data.get("grid") or {}
    for k, cells in grid.items():
        for cell, v in cells.items():
            dn, _, conv = cell.partition(" ")
            got = [c["results"][k] for c in cases if c.get("dtype") == dn and c.get("convention") == conv
                   and k in c.get("results", {}) and "unavailable" not in c["results"][k]]
            want = max((g["fraction_different"] for g in got), default=None)
            if not _same(v, want):
                yield f"grid.{k}.{cell}", f"{v!r} but its cases give {want!r}"
    if "measured_here" in data:
        want = sum(1 for r in impls if r.get("measured"))
        if data["measured_here"] != want:
            yield "measured_here", f"{data['measured_here']} but {want} implementations were measured"


def _same(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return a == b or _close(float(a), float(b), 1e-12)
    return a == b


@invariant("conformance.json")
def conformance_sources(data, name):
    """A case's reference module is a census class; a transformers implementation's source file exists in
    the installed package."""
    census = committed_census()
    classes = {c["name"] for c in (census or {}).get("classes", [])}
    for i, c in enumerate(data.get("cases", [])):
        module = (c.get("reference") or {}).get("module")
        if census is not None and module is not None and module not in classes:
            yield f"cases.{i}.reference.module", f"{module!r} is not a class of the census"
    for i, row in enumerate(data.get("implementations", [])):
        src = row.get("source")
        if isinstance(src, str) and src.startswith("transformers/"):
            path = installed_file(src)
            if path is None or not path.is_file():
                yield f"implementations.{i}.source", f"{src} is not a file of the installed transformers"


# ------------------------------------------------------------------------------------------ the kit's example

_VERDICT = re.compile(r"^(?:(\d+) of (\d+) cases FAIL|all (\d+) cases pass)$")


@invariant("check_example.json")
def check_example_self(data, name):
    """Each run's verdict, ok flag and counts agree; its names are catalog candidates; the command names a
    function of this repository and a model of the kit's index; the command's exit status is 1 exactly when
    its output reports failing cases, and its output is the verdict of the run the command names."""
    names = _candidate_names()
    runs = data.get("runs") or {}
    for k, r in runs.items():
        m = _VERDICT.match(str(r.get("verdict", "")))
        if not m:
            yield f"runs.{k}.verdict", f"{r.get('verdict')!r} is not 'N of M cases FAIL' or 'all M cases pass'"
        else:
            failed, cases = (int(m[1]), int(m[2])) if m[1] else (0, int(m[3]))
            if (failed, cases) != (r.get("failed"), r.get("cases")):
                yield f"runs.{k}.verdict", f"{r['verdict']!r} but failed = {r.get('failed')}, cases = {r.get('cases')}"
        if "ok" in r and r["ok"] != (r.get("failed") == 0):
            yield f"runs.{k}.ok", f"{r['ok']} but {r.get('failed')} cases failed"
        if isinstance(r.get("failed"), int) and isinstance(r.get("cases"), int) and r["failed"] > r["cases"]:
            yield f"runs.{k}.failed", f"{r['failed']} failed cases of {r['cases']}"
        for key in ("matched", "closest"):
            if r.get(key) is not None and r[key] not in names:
                yield f"runs.{k}.{key}", f"{r[key]!r} is not a catalog entry or variant"
    command, output, status = data.get("command"), data.get("cli_output"), data.get("cli_exit_status")
    if isinstance(command, str):
        yield from _kit_command(command, runs)
        fn = command.split()[3].partition(":")[2] if len(command.split()) > 3 else ""
        run = runs.get(fn)
        if isinstance(run, dict) and isinstance(output, str) and isinstance(status, int):
            if str(run.get("verdict")) not in output.splitlines():
                yield "cli_output", f"does not report the verdict of run {fn!r} ({run.get('verdict')!r})"
            if status != (0 if run.get("ok") else 1):
                yield "cli_exit_status", f"{status} but run {fn!r} has ok = {run.get('ok')}"
    if isinstance(output, str) and isinstance(status, int):
        fails = re.search(r"^(\d+) of \d+ cases FAIL$", output, re.M)
        passes = re.search(r"^all \d+ cases pass$", output, re.M)
        if fails and int(fails[1]) > 0 and status != 1:
            yield "cli_exit_status", f"{status} but the output reports {fails[0]!r} (the kit exits 1 on a failure)"
        elif passes and not fails and status != 0:
            yield "cli_exit_status", f"{status} but the output reports {passes[0]!r} (the kit exits 0 on a pass)"
        elif not fails and not passes:
            yield "cli_output", "reports neither failing cases nor a pass"


def _kit_command(command: str, runs: dict):
    parts = command.split()
    if parts[:3] != ["python", "-m", "reference_impl.check"] or len(parts) < 4:
        yield "command", f"{command!r} is not 'python -m reference_impl.check <module>:<function> ...'"
        return
    module, _, fn = parts[3].partition(":")
    path = REPO.joinpath(*module.split(".")).with_suffix(".py")
    lines = _lines(path) if fn else None
    if lines is None or not any(re.match(rf"def {re.escape(fn)}\b", t) for t in lines):
        yield "command", f"{parts[3]!r}: no function {fn!r} in a module {module} of this repository"
    elif runs and fn not in runs:
        yield "command", f"runs {fn!r}, which is not one of the file's runs ({', '.join(runs)})"
    if "--model" in parts[:-1]:
        model = parts[parts.index("--model") + 1]
        index = REPO / "reference_impl" / "check" / "census_index.json"
        try:
            known = json.loads(index.read_text()).get("models", {})
        except (OSError, ValueError):
            known = None
        if known is not None and model not in known:
            yield "command", f"--model {model}: not a model type of the kit's index (census_index.json)"



# ------------------------------------------------------------------------------------------ smaller studies

@invariant("numerics.json")
def numerics_self(data, name):
    """A casting comparison's ulp histogram counts its elements (rows x d) and its largest non-empty bin
    is the largest ulp distance; each adopting family's norm class is a census class and its source a file
    of the installed transformers."""
    for dt, c in (data.get("casting") or {}).items():
        hist = {int(k): v for k, v in (c.get("histogram_ulp_between") or {}).items()}
        if hist and sum(hist.values()) != c.get("elements"):
            yield f"casting.{dt}.histogram_ulp_between", f"counts {sum(hist.values())} of {c.get('elements')} elements"
        if "rows" in c and "d" in c and c.get("elements") != c["rows"] * c["d"]:
            yield f"casting.{dt}.elements", f"{c.get('elements')} but rows x d is {c['rows'] * c['d']}"
        top = max((k for k, v in hist.items() if v), default=None)
        if top is not None and "max_ulp_between" in c and c["max_ulp_between"] != top:
            yield f"casting.{dt}.max_ulp_between", f"{c['max_ulp_between']} but the histogram's last non-empty bin is {top}"
    census = committed_census()
    classes = {c["name"] for c in (census or {}).get("classes", [])}
    for k, row in (data.get("adoption") or {}).items():
        if census is not None and row.get("norm_class") not in classes:
            yield f"adoption.{k}.norm_class", f"{row.get('norm_class')!r} is not a class of the census"
        src = row.get("source")
        if isinstance(src, str) and not ((installed_file(src) or Path("/nonexistent")).is_file()):
            yield f"adoption.{k}.source", f"{src} is not a file of the installed transformers"


@invariant("advice.json")
def advice_self(data, name):
    """A norm's FLOP share is its FLOPs over all FLOPs; a d-wide RMSNorm's Jacobian has rank d - 1 and a
    LayerNorm's d - 2 (each removes the directions it normalizes away)."""
    for k, row in (data.get("flop_share") or {}).items():
        n, m = row.get("norm_flops"), row.get("matmul_flops")
        if isinstance(n, int) and isinstance(m, int) and n + m and not _close(row.get("share", -1), n / (n + m), 1e-9):
            yield f"flop_share.{k}.share", f"{row.get('share')} but norm / (norm + matmul) FLOPs is {n / (n + m)!r}"
    for d, ranks in (data.get("jacobian_rank") or {}).items():
        for norm, drop in (("rmsnorm", 1), ("layernorm", 2)):
            if norm in ranks and ranks[norm] != max(int(d) - drop, 0):
                yield f"jacobian_rank.{d}.{norm}", f"{ranks[norm]} but a {d}-wide {norm}'s Jacobian has rank {max(int(d) - drop, 0)}"


@invariant("cuda_resources.json")
def cuda_resources_self(data, name):
    """The totals are those of the kernels listed, and each kernel's file is a source of this repository."""
    kernels = data.get("kernels") or {}
    rows = list(kernels.values())
    want = {"kernels": len(rows), "max_registers": max((r.get("registers", 0) for r in rows), default=0),
            "with_spills": sum(1 for r in rows if r.get("spill_loads_bytes") or r.get("spill_stores_bytes")),
            "mma_instructions": sum(r.get("mma_instructions", 0) for r in rows)}
    for key, v in want.items():
        if key in (data.get("totals") or {}) and data["totals"][key] != v:
            yield f"totals.{key}", f"{data['totals'][key]} but the kernels listed give {v}"
    for k, r in kernels.items():
        if isinstance(r.get("file"), str) and not (REPO / r["file"]).is_file():
            yield f"kernels.{k}.file", f"{r['file']} is not a file of this repository"


@invariant("fp16_limits.json")
def fp16_limits_self(data, name):
    """Each eps as float16 stores is the nearest float16 to it."""
    import numpy as np

    for text, v in (data.get("eps_in_float16") or {}).items():
        want = float(np.float16(float(text)))
        if v != want:
            yield f"eps_in_float16.{text}", f"{v} but {text} rounds to {want!r} in float16"
