"""What a schema cannot say about a data file: physical limits and the file's agreement with itself.

A JSON Schema checks types and ranges one field at a time. The checks here relate fields to each other, to
the sources and to the world: a bandwidth far above the copy of the same bytes, a gigabytes-per-second
figure that is not bytes over time, a minimum above a maximum, a worked example whose arithmetic is wrong,
a count of exact results above the count of inputs, a provenance block dated in the future, naming another
study's command, a source that does not exist or a source hash that no longer matches the sources.

Each check is a function of the parsed data that yields ``(field, problem)`` pairs, registered for the
file names it applies to with :func:`invariant` (``"*"``: every data file). :func:`~reference_impl.studies.
schemas.check_file` runs them after the schema, so the site build (``site_hooks/data.py``) refuses such a
file, naming the file and the field. Checks import what they need inside the function: importing the
schemas stays light.
"""
from __future__ import annotations

import datetime as _dt
import math
import re
from fractions import Fraction
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
_CHECKS: dict[str, list] = {}
#: a clock that runs a little fast on the machine that measured must not fail the build
CLOCK_SKEW = _dt.timedelta(days=1)
EARLIEST = _dt.datetime(2020, 1, 1, tzinfo=_dt.timezone.utc)


def invariant(*names: str):
    """Registers a check for the data files ``names`` (``"*"``: every file)."""
    def register(fn):
        for name in names:
            _CHECKS.setdefault(name, []).append(fn)
        return fn
    return register


def problems(data, name: str, exclude=()) -> list[tuple[str, str]]:
    """Every ``(dotted field, problem)`` the checks registered for ``name`` (and for every file) find,
    leaving out the checks named in ``exclude``."""
    out = []
    for fn in _CHECKS.get("*", []) + _CHECKS.get(name, []):
        if fn.__name__ in exclude:
            continue
        try:
            out.extend((field, problem) for field, problem in fn(data, name))
        except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError, AttributeError) as exc:
            # a shape the schema let through but the check cannot read: refuse it, naming the check
            out.append(("(top level)", f"{fn.__name__} cannot read this file ({type(exc).__name__}: {exc})"))
    return out


def _close(a: float, b: float, rel: float = 1e-9) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=0.0)


# ------------------------------------------------------------------------------------------ every file

@invariant("*")
def provenance_date(data, name):
    """Measured at a time that has happened: after 2020 and not after now (one day of clock skew allowed)."""
    prov = data.get("provenance") or {}
    for key in ("date",):
        text = prov.get(key)
        if not isinstance(text, str):
            continue
        try:
            when = _dt.datetime.fromisoformat(text)
        except ValueError:
            yield f"provenance.{key}", f"{text!r} is not an ISO 8601 date and time"
            continue
        if when.tzinfo is None:
            yield f"provenance.{key}", f"{text!r} has no time zone"
            continue
        now = _dt.datetime.now(_dt.timezone.utc)
        if when > now + CLOCK_SKEW:
            yield f"provenance.{key}", f"{text} lies in the future (now {now.isoformat(timespec='seconds')})"
        elif when < EARLIEST:
            yield f"provenance.{key}", f"{text} is before {EARLIEST.year}, earlier than this project"


_COMMAND = re.compile(r"python -m (reference_impl\.studies\.[A-Za-z_][\w.]*)(?:\s|$)")


def study_files(module: str, root: Path = REPO) -> list[Path]:
    """The Python files of a study module (``reference_impl.studies.bench`` is a package: all its files)."""
    base = root.joinpath(*module.split("."))
    if base.with_suffix(".py").is_file():
        return [base.with_suffix(".py")]
    return sorted(base.glob("*.py")) if base.is_dir() else []


@invariant("*")
def provenance_command(data, name):
    """The command is ``python -m reference_impl.studies.<study>``, and that study's code names this file."""
    command = (data.get("provenance") or {}).get("command")
    if not isinstance(command, str):
        return
    m = _COMMAND.match(command)
    if not m:
        yield "provenance.command", f"{command!r} is not 'python -m reference_impl.studies.<study> ...'"
        return
    files = study_files(m.group(1))
    if not files:
        yield "provenance.command", f"{command!r}: no module {m.group(1)} in this repository"
    elif not any(name in f.read_text(encoding="utf-8", errors="replace") for f in files):
        yield "provenance.command", (f"{command!r} names a study that does not write {name} (its code never "
                                     f"names the file): another study's block?")


@invariant("*")
def provenance_sources(data, name):
    """Every listed source exists, and the recorded hash is the hash of those sources now.

    The hash (:func:`reference_impl.provenance.source_hash`) ignores comments, docstrings and layout, so
    editing those never makes a file stale; editing code that changes the numbers does."""
    from ... import provenance as pv

    prov = data.get("provenance") or {}
    sources = prov.get("sources")
    if not isinstance(sources, list):
        return
    missing = [i for i, s in enumerate(sources) if not (isinstance(s, str) and not Path(s).is_absolute()
                                                         and ".." not in Path(s).parts and (REPO / s).is_file())]
    for i in missing:
        yield f"provenance.sources.{i}", f"{sources[i]!r} does not exist in this repository"
    if missing or "source_hash" not in prov:
        return
    now = pv.source_hash(sources, prov.get("hashed_settings", ()), REPO)
    if now != prov["source_hash"]:
        yield "provenance.source_hash", (f"recorded {prov['source_hash']} but the sources now hash to {now}: "
                                         f"the numbers may not be what the code computes; rerun {prov.get('command')}")


# ------------------------------------------------------------------------------------------ the CPU benchmark

@invariant("bench_cpu.json")
def bench_records(data, name):
    """Each timing record agrees with itself: bytes are the minimum the case must move, min <= quartiles <=
    max, every round's median inside them, GB/s = bytes / median time, and no bandwidth-bound run beats the
    copy of the same bytes by more than half (a smoke run, --quick, is not a measurement and is exempt)."""
    from ..bench.cases import DTYPES, min_bytes
    from ..bench.limits import CEILING_MODES, ceiling_key

    results = data.get("results", [])
    ceilings = {}
    for i, r in enumerate(results):
        where = f"results.{i}"
        if r.get("dtype") in DTYPES:
            want = min_bytes(r["rows"], r["hidden"], DTYPES[r["dtype"]], r["mode"], r["impl"])
            if r["bytes"] != want:
                yield f"{where}.bytes", f"{r['bytes']} but a {r['impl']} {r['mode']} case moves {want} bytes"
        if "skipped" in r or "median_s" not in r:
            continue
        order = [r[k] for k in ("min_s", "q1_s", "median_s", "q3_s", "max_s")]
        if order != sorted(order):
            yield f"{where}.min_s", f"min, quartiles and max are out of order: {order}"
        if any(not r["min_s"] <= t <= r["max_s"] for t in r.get("round_median_s", [])):
            yield f"{where}.round_median_s", "a round's median lies outside [min_s, max_s]"
        if "gbps" in r and not _close(r["gbps"], r["bytes"] / r["median_s"] / 1e9):
            yield f"{where}.gbps", f"{r['gbps']} but bytes / median_s is {r['bytes'] / r['median_s'] / 1e9:.6g} GB/s"
        for k, t in (("gbps_min", "max_s"), ("gbps_max", "min_s")):
            if k in r and not _close(r[k], r["bytes"] / r[t] / 1e9):
                yield f"{where}.{k}", f"{r[k]} but bytes / {t} is {r['bytes'] / r[t] / 1e9:.6g} GB/s"
        if r["mode"] in CEILING_MODES and r["impl"] in ("copy", "stream_copy") and "gbps" in r:
            key = ceiling_key(r)
            ceilings[key] = max(ceilings.get(key, 0.0), r["gbps"])
    if (data.get("provenance") or {}).get("quick"):
        return
    repeats = (data.get("settings") or {}).get("repeats")
    if not (isinstance(repeats, int) and repeats >= 3):
        yield "settings.repeats", f"{repeats}: a full run repeats every case at least 3 times"
    if (data.get("load") or {}).get("quick") is not False:
        yield "load.quick", "a full run waits for a quiet machine (load.quick must be false)"
    # the groups (short rows, QK-norm) run settings.group_repeats rounds (runs before it was recorded: repeats)
    settings = data.get("settings") or {}
    main_modes = set(settings.get("modes") or [])
    group_repeats = settings.get("group_repeats", repeats)
    if not (isinstance(group_repeats, int) and isinstance(repeats, int) and group_repeats >= repeats):
        yield "settings.group_repeats", f"{group_repeats}: the groups run at least settings.repeats ({repeats}) rounds"
    for i, r in enumerate(results):
        want, name = (repeats, "repeats") if r["mode"] in main_modes else (group_repeats, "group_repeats")
        if "round_median_s" in r and len(r["round_median_s"]) != want:
            yield f"results.{i}.round_median_s", f"{len(r['round_median_s'])} rounds, settings.{name} {want}"
    for i, r in enumerate(results):
        if "gbps" not in r or r["mode"].endswith("forward_backward"):
            continue
        top = ceilings.get(ceiling_key(r))
        if top is None:
            yield f"results.{i}", f"no copy of the same shape ({ceiling_key(r)}) to hold it against"
        elif r["gbps"] > 1.5 * top:
            yield f"results.{i}.gbps", (f"{r['gbps']:.4g} GB/s is {r['gbps'] / top:.3g} times the copy of the same "
                                        f"bytes ({top:.4g} GB/s): physically impossible for a memory-bound pass")


def _differences(stored, fresh, path: str, rel: float = 1e-12) -> list[str]:
    """Where a stored structure differs from a recomputed one (floats within ``rel``)."""
    if isinstance(stored, dict) and isinstance(fresh, dict):
        out = [f"{path}.{k}: missing" for k in fresh if k not in stored]
        out += [f"{path}.{k}: not derived from the timings" for k in stored if k not in fresh]
        return out + [d for k in fresh if k in stored for d in _differences(stored[k], fresh[k], f"{path}.{k}", rel)]
    if isinstance(stored, list) and isinstance(fresh, list):
        if len(stored) != len(fresh):
            return [f"{path}: {len(stored)} items, the timings give {len(fresh)}"]
        return [d for i, (a, b) in enumerate(zip(stored, fresh)) for d in _differences(a, b, f"{path}.{i}", rel)]
    if isinstance(stored, float) or isinstance(fresh, float):
        ok = (isinstance(stored, (int, float)) and isinstance(fresh, (int, float)) and not isinstance(stored, bool)
              and _close(stored, fresh, rel))
        return [] if ok else [f"{path}: {stored!r}, the timings give {fresh!r}"]
    return [] if stored == fresh else [f"{path}: {stored!r}, the timings give {fresh!r}"]


@invariant("bench_cpu.json")
def bench_analysis(data, name):
    """Every ratio to the copy, comparison label, target, advice entry and group summary is what the
    command's own analysis (:func:`reference_impl.studies.bench.analyse.analyse`) derives from the raw
    timings: an edited label or ratio, or a copy made faster by hand, no longer agrees."""
    import json

    from ..bench.analyse import analyse

    results = json.loads(json.dumps(data["results"]))
    allocs = [a for a, s in data["allocators"].items() if s["available"]]
    shapes = [tuple(s) for s in data["settings"]["shapes"]]
    identity = data["provenance"]["machine"].get("cpu_identity")
    fresh = json.loads(json.dumps(analyse(results, allocs, shapes, data["settings"]["dtypes"], identity)))
    diffs = _differences(data["results"], results, "results")
    for key in ("comparisons", "targets", "advice", "short_rows", "qk_norm", "machine_targets"):
        if key in data or key in ("comparisons", "targets", "advice"):
            diffs += _differences(data.get(key), fresh.get(key), key)
    for d in diffs[:10]:
        field, _, problem = d.partition(": ")
        yield field, problem


@invariant("bench_cpu.json")
def bench_block(data, name):
    """The decoder block's norm share lies in (0, 1), is given exactly when the rounds separate, and a
    block without norms is never "slower" than with them beyond the noise."""
    block = data.get("block") or {}
    for mode, entries in block.items():
        if not isinstance(entries, dict):
            continue
        for k, s in entries.items():
            if not (isinstance(s, dict) and "share" in s and "separated" in s):
                continue
            where = f"block.{mode}.{k}"
            if s.get("label") == "slower":
                yield f"{where}.label", "removing the norms made the block slower beyond the noise"
            if s["share"] is not None and not 0 < s["share"] < 1:
                yield f"{where}.share", f"{s['share']} is not a share in (0, 1)"
            if s["separated"] != (s["share"] is not None):
                yield f"{where}.separated", "a share is given exactly when the rounds separate"


# ------------------------------------------------------------------------------------------ the worked example

def _sqrt(q: Fraction) -> Fraction | None:
    """The exact square root of a non-negative fraction, or None where it is irrational."""
    a, b = math.isqrt(q.numerator), math.isqrt(q.denominator)
    return Fraction(a, b) if a * a == q.numerator and b * b == q.denominator else None


def _fraction(text) -> Fraction | None:
    """``"4/5"`` -> Fraction(4, 5) (parsed, never evaluated); None for anything else."""
    try:
        return Fraction(text) if isinstance(text, str) else None
    except (ValueError, ZeroDivisionError):
        return None


@invariant("worked_example.json")
def worked_example(data, name):
    """Every step of the Start page's example, redone exactly from ``x`` (fractions; the example is chosen
    so that its square roots are exact); each ``exact`` is that fraction and each ``value`` its float."""
    x = [Fraction(v) for v in data["x"]]
    d = len(x)
    if data.get("d") != d:
        yield "d", f"{data.get('d')} but x has {d} numbers"
    ms = sum(v * v for v in x) / d
    mean = sum(x) / d
    var = sum((v - mean) ** 2 for v in x) / d
    rms, std = _sqrt(ms), _sqrt(var)
    if not rms or not std:
        yield "x", f"{data['x']}: its RMS or standard deviation is zero or not an exact fraction"
        return
    rms_y = [v / rms for v in x]
    ln_y = [(v - mean) / std for v in x]
    want = {
        "rms.squares": [v * v for v in x], "rms.sum_of_squares": ms * d, "rms.mean_square": ms,
        "rms.rms": rms, "rms.r": 1 / rms, "rms.y": rms_y, "rms.y_mean": sum(rms_y) / d,
        "rms.y_mean_square": sum(v * v for v in rms_y) / d, "rms.y_sum_of_squares": sum(v * v for v in rms_y),
        "rms.mean_times_r": mean / rms,
        "ln.sum": mean * d, "ln.mean": mean, "ln.centred": [v - mean for v in x],
        "ln.centred_squares": [(v - mean) ** 2 for v in x], "ln.sum_of_centred_squares": var * d,
        "ln.variance": var, "ln.std": std, "ln.r": 1 / std, "ln.y": ln_y,
        "ln.y_mean": sum(ln_y) / d, "ln.y_variance": sum(v * v for v in ln_y) / d,
    }
    for dotted, truth in want.items():
        section, key = dotted.split(".")
        entry = (data.get(section) or {}).get(key)
        if not isinstance(entry, dict):
            continue  # the schema decides which steps must be there
        truths = truth if isinstance(truth, list) else [truth]
        exacts = entry.get("exact") if isinstance(truth, list) else [entry.get("exact")]
        values = entry.get("value") if isinstance(truth, list) else [entry.get("value")]
        if len(exacts or []) != len(truths) or len(values or []) != len(truths):
            yield f"{dotted}", f"holds {len(values or [])} values where x gives {len(truths)}"
            continue
        for t, e, v in zip(truths, exacts, values):
            if _fraction(e) != t:
                yield f"{dotted}.exact", f"{e} but x = {data['x']} gives {t}"
            if not (isinstance(v, (int, float)) and (_close(float(v), float(t), 1e-12) or v == t == 0)):
                yield f"{dotted}.value", f"{v} but x = {data['x']} gives {float(t)!r}"
    eps = (data.get("eps") or {}).get("eps")
    if isinstance(eps, float):
        xs = [float(v) for v in x]
        m = sum(v * v for v in xs) / d
        mu = sum(xs) / d
        var_f = sum((v - mu) ** 2 for v in xs) / d
        for key, fresh in (("rms_y", [v / math.sqrt(m + eps) for v in xs]),
                           ("ln_y", [(v - mu) / math.sqrt(var_f + eps) for v in xs])):
            stored = data["eps"].get(key, [])
            if len(stored) != d or not all(_close(a, b, 1e-12) for a, b in zip(stored, fresh)):
                yield f"eps.{key}", f"is not x normalized with eps = {eps} inside the square root"


# ------------------------------------------------------------------------------------------ rsqrt sweeps

_GROUP_KEYS = ("normal", "lowest_normal_binade", "subnormal")


@invariant("rsqrt_cpu.json")
def rsqrt_counts(data, name):
    """Per method and input group: exact and non-finite results at most the inputs, the ulp histogram
    counts every input and its first bin is the exact results, the share is exact / count; the groups
    together are every input swept."""
    total = (data.get("inputs") or {}).get("total")
    for mname, m in (data.get("methods") or {}).items():
        if not m.get("available"):
            continue
        counted = 0
        for g in _GROUP_KEYS:
            s = m.get(g)
            if not isinstance(s, dict):
                continue
            where = f"methods.{mname}.{g}"
            n = s["count"]
            counted += n
            for k in ("exact", "nonfinite"):
                if not 0 <= s[k] <= n:
                    yield f"{where}.{k}", f"{s[k]} {k} results out of {n} inputs"
            hist = s.get("ulp_hist")
            if hist is not None and sum(hist) != n:
                yield f"{where}.ulp_hist", f"counts {sum(hist)} results for {n} inputs"
            if hist and hist[0] != s["exact"]:
                yield f"{where}.exact", f"{s['exact']} but the histogram's 0-ulp bin holds {hist[0]}"
            share = s.get("exact_share")
            if share is not None and n and not _close(share, s["exact"] / n):
                yield f"{where}.exact_share", f"{share} but exact / count is {s['exact'] / n!r}"
        if data.get("exhaustive") and data.get("stride") == 1 and total is not None and counted != total:
            yield f"methods.{mname}", f"its groups hold {counted} inputs, the sweep {total}"


# ------------------------------------------------------------------------------------------ distributed

@invariant("distributed.json")
def distributed_per_token(data, name):
    """The per-token traffic figures are the registry's count formulas at the recorded d, dtype and ranks."""
    from ... import symbolic

    params = data.get("per_token_params") or {}
    table = data.get("per_token_bf16_d4096") or {}
    reg = symbolic.registry()
    p_sym = next((s for k in reg if k.startswith("dist.") for s in reg[k].display.free_symbols
                  if s.name == "p"), None)
    for p in params.get("p", []):
        row = table.get(f"p{p}")
        if not isinstance(row, dict):
            yield "per_token_bf16_d4096", f"no row for {p} ranks"
            continue
        subs = {symbolic.d: params["d"], symbolic.ELEM_BYTES: params["elem_bytes"]}
        if p_sym is not None:
            subs[p_sym] = p
        for k in reg:
            if not (k.startswith("dist.") and reg[k].kind == "count"):
                continue
            key = k.split(".", 1)[1].replace(".", "_")
            want = float(reg[k].display.subs(subs))
            if key not in row:
                yield f"per_token_bf16_d4096.p{p}", f"has no {key}"
            elif not _close(row[key], want, 1e-12):
                yield f"per_token_bf16_d4096.p{p}.{key}", f"{row[key]!r} bytes but the formula {k} gives {want!r}"


# ------------------------------------------------------------------------------------------ training runs

def _walk(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, (*path, str(k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, (*path, str(i)))
    else:
        yield path, node


@invariant("training.json", "placements.json")
def losses(data, name):
    """A cross-entropy loss (any field whose name holds ``loss``) is never negative."""
    for path, v in _walk(data):
        if any("loss" in p for p in path) and isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0:
            yield ".".join(path), f"a loss of {v} (a cross-entropy is never negative)"


@invariant("training.json", "placements.json")
def runs_and_their_summary(data, name):
    """A run's final validation loss is the last one it recorded, and a configuration's ``final.values``
    are its runs' final losses, seed by seed."""
    for path, node in _dicts(data):
        runs = node.get("runs")
        if not (isinstance(runs, list) and runs and all(isinstance(r, dict) for r in runs)):
            continue
        where = ".".join(path)
        for i, r in enumerate(runs):
            curve = r.get("val_loss")
            if isinstance(curve, list) and curve and "final_val_loss" in r and curve[-1] != r["final_val_loss"]:
                yield f"{where}.runs.{i}.final_val_loss", (f"{r['final_val_loss']} but the run's last recorded "
                                                           f"validation loss is {curve[-1]}")
        final = node.get("final")
        if isinstance(final, dict) and all("final_val_loss" in r for r in runs):
            if final.get("values") != [r["final_val_loss"] for r in runs]:
                yield f"{where}.final.values", "are not the runs' final validation losses, seed by seed"


@invariant("*")
def summary_statistics(data, name):
    """A summary ``{"values": [...], "n", "mean", "min", "max"}`` (and ``n_finite`` where given) describes
    its own values: n counts them, min, max and mean are those of the finite ones."""
    for path, node in _dicts(data):
        if not {"values", "n", "mean", "min", "max"} <= set(node) or not isinstance(node["values"], list):
            continue
        where = ".".join(path)
        finite = [v for v in node["values"] if isinstance(v, (int, float)) and not isinstance(v, bool)
                  and math.isfinite(v)]
        if node["n"] != len(node["values"]):
            yield f"{where}.n", f"{node['n']} but there are {len(node['values'])} values"
        if "n_finite" in node and node["n_finite"] != len(finite):
            yield f"{where}.n_finite", f"{node['n_finite']} but {len(finite)} values are finite"
        if not finite:
            continue
        for key, want in (("min", min(finite)), ("max", max(finite)), ("mean", sum(finite) / len(finite))):
            if not (isinstance(node[key], (int, float)) and _close(node[key], want, 1e-9)):
                yield f"{where}.{key}", f"{node[key]!r} but the values give {want!r}"


def _dicts(node, path=()):
    if isinstance(node, dict):
        yield path, node
        for k, v in node.items():
            yield from _dicts(v, (*path, str(k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _dicts(v, (*path, str(i)))


# ------------------------------------------------------------------------------------------ checkpoints

@invariant("checkpoints.json")
def checkpoints_resolve_under_the_census(data, name):
    """Every checkpoint's values resolve, under the committed census's variants, to the structure the file
    records (a value that contradicts its model type's variants is refused), and the counts are its rows'."""
    import json as _json

    from ..census.checkpoints import contradictions, counts

    census = _json.loads((REPO / "docs" / "data" / "census.json").read_text())
    yield from contradictions(data, census)
    want = counts(data["checkpoints"], data["variant_coverage"])
    if data["counts"] != want:
        yield "counts", f"recorded {data['counts']}, the rows give {want}"
