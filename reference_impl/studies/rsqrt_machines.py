"""One CPU rsqrt-study run per machine: ``docs/data/rsqrt_machines/<machine_key>.json``.

``docs/data/rsqrt_cpu.json`` is the latest full CPU run of :mod:`reference_impl.studies.rsqrt`. Its sweep
(errors of every method over every positive float32) should agree on any CPU that implements the same
instructions, but its ``throughput`` and ``rmsnorm_time`` sections are timings of the machine that measured
them. So every full run written to the committed file is also filed under its machine's key
(:func:`reference_impl.studies.machine.key_of`), replacing that machine's earlier run and no other. The
file is written atomically (:func:`reference_impl.provenance.write_json`): an interrupted write leaves the
machine's earlier file whole.

A filed run keeps the ``source_hash`` of the code it ran, so the source-hash check is left out; the
``rsqrt_cpu`` schema and every other consistency check apply, a ``--quick`` run is refused, and the file
must be named by its machine key. The site build refuses a file that breaks any of this, naming it. Runs
recorded before the machine key was (no ``cpu_identity`` in their provenance) are keyed from what their
provenance names (:func:`reference_impl.studies.machine.legacy_identity`).
"""
from __future__ import annotations

from pathlib import Path

from . import machine_archive

REPO = Path(__file__).resolve().parents[2]
ARCHIVE = REPO / "docs" / "data" / "rsqrt_machines"
SCHEMA = "rsqrt_cpu.json"
# the throughput pair the table of machines compares: RSQRTPS against SQRTPS + DIVPS, both four floats wide
FAST, SLOW = "sse_rsqrt", "sse_div_sqrt"


def write(data: dict, archive_dir: Path = ARCHIVE) -> Path:
    """Writes (or replaces), atomically, this run's machine file; a ``--quick`` run is refused (its short
    timing loops describe no machine)."""
    return machine_archive.write(data, archive_dir)


def check_archived(path: Path) -> dict:
    """Reads one machine file and checks it: the rsqrt_cpu schema, every consistency check but the source
    hash (a filed run keeps the hash of the code it ran), a full run, and a name equal to its machine key.
    Errors name the file."""
    return machine_archive.check(path, SCHEMA)


def archived(archive_dir: Path = ARCHIVE) -> list[tuple[Path, dict]]:
    """Every machine file, checked, oldest run first."""
    return machine_archive.archived(archive_dir, check_archived)


def speedup_in_cache(data: dict) -> float | None:
    """How many times faster RSQRTPS ran than SQRTPS + DIVPS on an array in cache (the study's
    ``throughput.speedups.sse_rsqrt_vs_sse_div_sqrt.cache``, recomputed from the two timings); None where
    the run timed only one of them."""
    tp = data["throughput"]["methods"]
    if FAST not in tp or SLOW not in tp:
        return None
    return tp[SLOW]["cache_ns"] / tp[FAST]["cache_ns"]


def machine_row(data: dict) -> dict:
    """What the page's table of machines shows for one run: the machine, its SIMD level, the date, the
    load, whether the run used the current code, the ns of one scalar exact rsqrt (SQRTSS + DIVSS) and of
    one RSQRTSS in a loop, and how many times faster RSQRTPS was than SQRTPS + DIVPS in cache."""
    rt = data["rmsnorm_time"]
    scalar = rt.get("scalar_rsqrt_ns") if rt.get("available") else None
    missing = rt.get("reason", "not timed") if not rt.get("available") else "not timed"
    speedup = speedup_in_cache(data)
    return {**machine_archive.machine_cells(data), "cores": data["provenance"]["machine"].get("cores", "not recorded"),
            "exact_ns": f"{scalar['exact']:.2f}" if scalar else missing,
            "rsqrtss_ns": f"{scalar['rsqrtss']:.2f}" if scalar else missing,
            "speedup_cache": f"{speedup:.1f}x" if speedup is not None else f"not timed ({FAST} or {SLOW} missing)"}
