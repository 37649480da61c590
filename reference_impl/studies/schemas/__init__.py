"""JSON schemas of the data files under ``docs/data/``, and the one function that checks a file.

Every ``docs/data/<name>.json`` has ``<name>.schema.json`` here (JSON Schema 2020-12); the shared
``provenance.schema.json`` describes the block every study writes (:mod:`reference_impl.provenance`).
The site build (``site_hooks/data.py``) and the tests (``tests/studies/test_data_files.py``) both call
:func:`check_file`, so a corrupt, truncated or ill-typed file fails with its path named.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
DATA = REPO / "docs" / "data"


class DataFileError(ValueError):
    """A data file that cannot be read, is not JSON, has no schema, or does not match its schema."""


def schema_path(name: str) -> Path:
    """``bench_cpu.json`` -> ``.../schemas/bench_cpu.schema.json``."""
    return HERE / (Path(name).stem + ".schema.json")


@lru_cache(maxsize=None)
def _registry():
    from referencing import Registry, Resource

    resources = []
    for p in sorted(HERE.glob("*.schema.json")):
        schema = json.loads(p.read_text())
        resources.append((schema["$id"], Resource.from_contents(schema)))
    return Registry().with_resources(resources)


@lru_cache(maxsize=None)
def _validator(name: str):
    from jsonschema import Draft202012Validator

    schema = json.loads(schema_path(name).read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, registry=_registry())


def _rel(path: Path) -> str:
    try:
        return path.resolve().relative_to(REPO).as_posix()
    except ValueError:
        return str(path)


def check_data(data, name: str, where: str) -> None:
    """Validates already-parsed data against the schema of ``name``; ``where`` names the file in errors."""
    if not schema_path(name).exists():
        raise DataFileError(f"{where}: no schema for this data file; add {_rel(schema_path(name))}")
    errors = sorted(_validator(Path(name).name).iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"  at {'.'.join(str(p) for p in e.absolute_path) or '(top level)'}: {e.message[:300]}"
                 for e in errors[:10]]
        more = f"\n  ... and {len(errors) - 10} more" if len(errors) > 10 else ""
        raise DataFileError(f"{where} does not match {_rel(schema_path(name))}:\n" + "\n".join(lines) + more)


def check_file(path: Path):
    """Reads, parses and validates one data file; returns its data or raises DataFileError naming the path."""
    path = Path(path)
    where = _rel(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise DataFileError(f"{where}: cannot be read ({exc.strerror or exc})") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataFileError(f"{where} is not valid JSON (truncated or corrupt?): {exc.msg} at line {exc.lineno}, "
                            f"column {exc.colno}") from exc
    check_data(data, path.name, where)
    return data


def data_files(data_dir: Path = DATA) -> list[Path]:
    return sorted(Path(data_dir).glob("*.json"))
