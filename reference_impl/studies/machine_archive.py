"""A folder of runs, one per kind of machine: what the CPU benchmark and the training study share.

A study whose figures belong to the machine that measured them (timings) keeps its latest run in
``docs/data/<study>.json`` and files every full run under ``<folder>/<machine_key>.json``
(:func:`reference_impl.studies.machine.key_of`), replacing that machine's earlier run and no other. A filed
run keeps the source hash of the code it ran, so its source-hash check is left out; every other check of
its schema and of its consistency checks applies, and its name must be its machine key.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..provenance import write_json
from .machine import key_of
from .schemas import DataFileError, _read_text, _rel, check_data, check_invariants, parse_json


def write(data: dict, archive_dir: Path) -> Path:
    """Writes (or replaces) this run's machine file; a ``--quick`` smoke run is refused (it measures nothing)."""
    if data["provenance"]["quick"]:
        raise ValueError("a --quick smoke run is not archived: it measures nothing")
    archive_dir = Path(archive_dir)
    archive_dir.mkdir(parents=True, exist_ok=True)
    path = archive_dir / f"{key_of(data)}.json"
    return write_json(path, data)  # atomic: an interrupted write leaves the machine's earlier file whole


def machine_cells(data: dict) -> dict:
    """The cells every table of machines starts with: the machine's key, its name (from ``cpu_identity``, or
    what a run filed before it was recorded names), its SIMD level, the date, the load (start to end, or
    what was recorded), and whether the run used the current code."""
    from ..provenance import is_current

    prov, m = data["provenance"], data["provenance"]["machine"]
    ident = m.get("cpu_identity")
    if ident:
        name = f"{ident['model_name']} ({ident['vendor']}, family {ident['family']}, model {ident['model']})"
    else:
        name = f"{m['cpu']} ({m.get('vendor', 'vendor not recorded')}; family and model not recorded)"
    flags = (ident or {}).get("flags") or m.get("simd_flags", [])
    simd = "AVX-512" if "avx512f" in flags else ("AVX2" if "avx2" in flags else "neither AVX2 nor AVX-512")
    start = prov["load_avg"][0] if prov.get("load_avg") else None
    if start is None:
        load = "not recorded"
    elif "load_avg_end" in prov:
        load = f"{start:.2f} to {prov['load_avg_end'][0]:.2f}"
    else:
        load = f"{start:.2f} at the start"
    return {"key": key_of(data), "machine": name, "simd": simd, "date": prov["date"][:10], "load": load,
            "code": "current code" if is_current(data)[0] else "earlier code"}


def check(path: Path, schema: str, exclude: tuple = ("provenance_sources",)) -> dict:
    """Reads one machine file and checks it: the schema of ``schema`` (a data file name), its consistency
    checks less ``exclude``, a full run, and a name equal to its machine key. Errors name the file."""
    where = _rel(Path(path))
    data = parse_json(_read_text(Path(path), where), where)
    check_data(data, schema, where)
    check_invariants(data, schema, where, exclude=exclude)
    if data["provenance"]["quick"]:
        raise DataFileError(f"{where}: a --quick smoke run does not belong in the machine archive")
    key = key_of(data)
    if Path(path).stem != key:
        raise DataFileError(f"{where}: holds the run of machine {key!r}; the file must be named {key}.json")
    return data


def archived(archive_dir: Path, check_one: Callable[[Path], dict]) -> list[tuple[Path, dict]]:
    """Every machine file of ``archive_dir``, each checked by ``check_one``, oldest run first."""
    out = [(p, check_one(p)) for p in sorted(Path(archive_dir).glob("*.json"))]
    return sorted(out, key=lambda e: e[1]["provenance"]["date"])
