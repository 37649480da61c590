"""One distributed-study run per machine: ``docs/data/distributed_machines/<machine_key>.json``.

``docs/data/distributed.json`` is the latest full run of :mod:`reference_impl.studies.distributed_bench`.
Its byte counts, worked example, Welford comparison and DTensor probe do not depend on the machine, but its
``timing`` section is that machine's alone, so every full run written to the committed file is also filed
under its machine's key (:func:`reference_impl.studies.machine.key_of`), replacing that machine's earlier
run and no other. The file is written atomically (:func:`reference_impl.provenance.write_json`): an
interrupted write leaves the machine's earlier file whole.

A filed run keeps the ``source_hash`` of the code it ran, so the source-hash check is left out; the
``distributed`` schema and every other consistency check apply, a ``--quick`` smoke run is refused, and the
file must be named by its machine key. The site build refuses a file that breaks any of this, naming it.
Runs recorded before the machine key was (no ``cpu_identity`` in their provenance) are keyed from what their
provenance names (:func:`reference_impl.studies.machine.legacy_identity`).
"""
from __future__ import annotations

from pathlib import Path

from . import machine_archive

REPO = Path(__file__).resolve().parents[2]
ARCHIVE = REPO / "docs" / "data" / "distributed_machines"
SCHEMA = "distributed.json"
WORLDS = ("p2", "p4")          # the rank counts whose timings the table of machines shows


def write(data: dict, archive_dir: Path = ARCHIVE) -> Path:
    """Writes (or replaces), atomically, this run's machine file; a ``--quick`` smoke run is refused (it
    measures nothing)."""
    return machine_archive.write(data, archive_dir)


def check_archived(path: Path) -> dict:
    """Reads one machine file and checks it: the distributed schema, every consistency check but the
    source hash (a filed run keeps the hash of the code it ran), a full run, and a name equal to its
    machine key. Errors name the file."""
    return machine_archive.check(path, SCHEMA)


def archived(archive_dir: Path = ARCHIVE) -> list[tuple[Path, dict]]:
    """Every machine file, checked, oldest run first."""
    return machine_archive.archived(archive_dir, check_archived)


def machine_row(data: dict) -> dict:
    """What the page's table of machines shows for one run: the machine, its SIMD level, the date, the load,
    whether the run used the current code, and for 2 and 4 ranks the median time of ``sharded_rms_norm`` and
    of ``F.rms_norm`` on a DTensor, and the ratio of the two."""
    row = {**machine_archive.machine_cells(data), "cores": data["provenance"]["machine"].get("cores", "not recorded")}
    for world in WORLDS:
        t = data["timing"][world]
        row[f"{world}_ours_us"] = f"{t['methods']['sharded_rms']['median_us']:.0f}"
        row[f"{world}_dtensor_us"] = f"{t['methods']['dtensor_f_rms_norm']['median_us']:.0f}"
        row[f"{world}_ratio"] = f"{t['ratio_dtensor_over_ours']:.2g}"
    return row
