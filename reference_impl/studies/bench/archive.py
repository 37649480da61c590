"""One file per machine measured: ``docs/data/bench_cpu_machines/<machine_key>.json``.

The machine under the benchmark changes from one run to the next (cloud machines of several kinds come and
go), and a run on one says nothing about another. ``docs/data/bench_cpu.json`` is the latest run; every
full run also writes a copy under its machine's key (:func:`reference_impl.studies.machine.machine_key`),
replacing that machine's earlier file and no other. A file keeps the ``source_hash`` of the kernels it
measured: where that differs from the current sources, the Performance page shows the file as measured
with earlier kernels instead of hiding it. Every file must still match the ``bench_cpu`` schema.

Files written before the machine key existed (no ``cpu_identity`` in their provenance) carry an
``archive`` block with the key they were filed under and where they were recovered from.
"""
from __future__ import annotations

from pathlib import Path

from ... import provenance as pv
from .. import machine_archive
from ..machine import cpu_kernel_path, key_of, legacy_identity
from .cases import DATA, SOURCES

ARCHIVE = DATA / "bench_cpu_machines"


__all__ = ["ARCHIVE", "key_of", "legacy_identity", "write", "check_archived", "archived", "machine_row"]


def write(data: dict, archive_dir: Path = ARCHIVE) -> Path:
    """Writes (or replaces) this run's machine file; a smoke run is refused (it measures nothing)."""
    return machine_archive.write(data, archive_dir)


def check_archived(path: Path) -> dict:
    """Reads one machine file and checks it against the bench_cpu schema and its name; errors name the file.
    Every consistency check applies but two: an archived run keeps the hash of the kernels it measured, and
    was analysed by the analysis of its day."""
    return machine_archive.check(path, "bench_cpu.json", exclude=("provenance_sources", "bench_analysis"))


def archived(archive_dir: Path = ARCHIVE) -> list[tuple[Path, dict]]:
    """Every machine file, checked, oldest run first."""
    return machine_archive.archived(archive_dir, check_archived)


def _range(t: dict | None) -> str:
    if not t or not t.get("shapes"):
        return "not measured"
    return f"{t['worst']:.2f}-{t['best']:.2f}x"


def machine_row(data: dict) -> dict:
    """What the page's table of machines shows for one file."""
    prov = data["provenance"]
    m = prov["machine"]
    ident = m.get("cpu_identity")
    if ident:
        name = (f"{ident['model_name']} ({ident['vendor']}, family {ident['family']}, model {ident['model']}, "
                f"stepping {ident['stepping']})")
        path = m.get("kernel_path") or cpu_kernel_path(ident, env="")
    else:
        name = f"{m['cpu']} ({m.get('vendor', 'vendor not recorded')}; family, model and stepping not recorded)"
        path = cpu_kernel_path(legacy_identity(m), env="") + " (from the flags)"
    flags = (ident or {}).get("flags") or m.get("simd_flags", [])
    current = pv.is_current(data)[0] and prov["sources"] == list(SOURCES)
    tg = data.get("targets", {})
    short = [e for e in data.get("machine_targets", {}).get("entries", [])
             if e["target"] == "forward_out_short" and e["worst"] is not None]
    met = data.get("machine_targets", {}).get("entries")
    return {"key": key_of(data), "machine": name, "cores": m["cores"],
            "bf16_instructions": "yes" if "avx512_bf16" in flags else "no",
            "kernel_path": path, "date": prov["date"][:10],
            "source_state": "current kernels" if current else "earlier kernels",
            "float32_forward_vs_copy": _range(tg.get("float32", {}).get("forward_out_vs_copy")),
            "bfloat16_forward_vs_copy": _range(tg.get("bfloat16", {}).get("forward_out_vs_copy")),
            "short_rows_worst": (f"{min(e['worst'] for e in short):.2f}x" if short else "not measured"),
            "targets_met": (f"{sum(e['met'] for e in met)} of {sum(e['count'] for e in met)} shapes" if met
                            else "not evaluated")}
