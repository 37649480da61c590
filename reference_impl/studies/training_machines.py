"""One training run per machine: ``docs/data/training_machines/<machine_key>.json``.

``docs/data/training.json`` is the latest full run of :mod:`reference_impl.studies.training`. Its losses
depend on the machine only through rounding, but its step times are that machine's alone, so every full
run also files a copy under its machine's key (:func:`reference_impl.studies.machine.machine_key`),
replacing that machine's earlier copy and no other. A copy keeps the ``source_hash`` of the code it ran:
where that differs from the current sources, the page says the run used earlier code instead of hiding
it. Every copy must still match the ``training`` schema and its consistency checks, and be named by its
key; the site build refuses one that does not, naming the file.

Runs filed before the machine key was recorded (no ``cpu_identity`` in their provenance) are keyed from
what their provenance names (:func:`reference_impl.studies.machine.legacy_identity`: family, model and
stepping ``x``).
"""
from __future__ import annotations

from pathlib import Path

from . import machine_archive

REPO = Path(__file__).resolve().parents[2]
ARCHIVE = REPO / "docs" / "data" / "training_machines"
CONFIGS = ("pre-rms", "pre-ln")        # the two whose step times the table of machines shows


def write(data: dict, archive_dir: Path = ARCHIVE) -> Path:
    """Writes (or replaces) this run's machine file; a ``--quick`` smoke run is refused (it measures
    nothing)."""
    return machine_archive.write(data, archive_dir)


def check_archived(path: Path) -> dict:
    """Reads one machine file and checks it: the training schema, every consistency check but the source
    hash (a copy keeps the hash of the code it ran), a full run, and a name equal to its machine key.
    Errors name the file."""
    return machine_archive.check(path, "training.json")


def archived(archive_dir: Path = ARCHIVE) -> list[tuple[Path, dict]]:
    """Every machine file, checked, oldest run first."""
    return machine_archive.archived(archive_dir, check_archived)


def machine_row(data: dict) -> dict:
    """What the page's table of machines shows for one run: the machine, the date, the threads and load,
    and for Pre-RMSNorm and Pre-LN the median step time and the norms' median share of it."""
    m = data["provenance"]["machine"]
    row = {**machine_archive.machine_cells(data), "threads": m.get("torch_threads", "not recorded")}
    for cfg in CONFIGS:
        t = data["timing"][cfg]
        row[f"{cfg}_step_ms"] = f"{t['median_step_ms']:.1f}"
        row[f"{cfg}_share"] = f"{t['median_share']:.0%}"
    return row
