"""JSON schemas of the data files under ``docs/data/``, and the one function that checks a file.

Every ``docs/data/<name>.json`` has ``<name>.schema.json`` here (JSON Schema 2020-12); the shared
``provenance.schema.json`` describes the block every study writes (:mod:`reference_impl.provenance`).
The site build (``site_hooks/data.py``) and the tests (``tests/studies/test_data_files.py``) both call
:func:`check_file`, so a corrupt, truncated or ill-typed file fails with its path named; after the schema it
runs the checks of :mod:`.invariants` (physical limits, a file's agreement with itself and with its
sources), so a file that parses and types well but cannot be true fails too, naming the field.
"""
from __future__ import annotations

import json
import math
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


def _read_text(path: Path, where: str) -> str:
    """The file as text: strict UTF-8, an error naming the file and the first bad byte otherwise."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataFileError(f"{where}: cannot be read ({exc.strerror or exc})") from exc
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise DataFileError(f"{where} is not valid UTF-8: byte {exc.start} (line {line}) is "
                            f"{raw[exc.start:exc.start + 1]!r} ({exc.reason})") from None


class _Bad:
    """Marks a value the JSON text may not hold (NaN, Infinity, a number beyond the float range) until the
    walk below finds its path."""

    def __init__(self, what: str, why: str = "is not a number JSON allows (a measurement that failed?)"):
        self.what = what
        self.why = why


#: digits of the largest integer a data file may hold: no count, size or seed a study writes comes near
#: 2**63 (19 digits), while Python refuses to parse integers of more than 4300 digits with a bare ValueError
MAX_INT_DIGITS = 19


def _int(text: str):
    """A JSON integer; one longer than :data:`MAX_INT_DIGITS` digits is refused (by its length: converting
    a 5000-digit integer would raise before any check could name the field)."""
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        return _Bad(f"an integer of {len(text.lstrip('-'))} digits",
                    f"is larger than any count a study writes (at most {MAX_INT_DIGITS} digits)")
    return int(text)


def _float(text: str):
    """A JSON number with a fraction or exponent; ``1e400`` parses as inf in Python, so it is refused too."""
    value = float(text)
    if math.isinf(value):
        return _Bad(text, "is beyond the float range (it would read as infinity)")
    return value


class _Pairs(dict):
    """A JSON object that remembers the keys its text repeated (json.loads keeps the last one silently)."""

    duplicates: tuple = ()


def _pairs(items):
    out = _Pairs(items)
    seen: set = set()
    out.duplicates = tuple(k for k, _ in items if k in seen or seen.add(k))
    return out


def _walk_for_problems(node, path=()):
    """(dotted path, problem) of the first NaN/Infinity or repeated key in parsed data."""
    where = ".".join(str(p) for p in path) or "(top level)"
    if isinstance(node, _Bad):
        return where, f"{node.what} {node.why}"
    if isinstance(node, _Pairs) and node.duplicates:
        return where, f"key {node.duplicates[0]!r} appears more than once (only the last would be kept)"
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for k, v in items:
        found = _walk_for_problems(v, (*path, k))
        if found:
            return found
    return None


def _plain(node):
    if isinstance(node, dict):
        return {k: _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node


def parse_json(text: str, where: str):
    """JSON as the data files may hold it: no NaN or Infinity, no repeated key, nesting that Python can
    parse; every failure a DataFileError naming the file (and the field, where there is one)."""
    try:
        data = json.loads(text, parse_constant=_Bad, parse_float=_float, parse_int=_int,
                          object_pairs_hook=_pairs)
    except json.JSONDecodeError as exc:
        raise DataFileError(f"{where} is not valid JSON (truncated or corrupt?): {exc.msg} at line {exc.lineno}, "
                            f"column {exc.colno}") from exc
    except RecursionError:
        raise DataFileError(f"{where} is nested too deeply to parse (corrupt?)") from None
    try:
        problem = _walk_for_problems(data)
    except RecursionError:
        raise DataFileError(f"{where} is nested too deeply to check (corrupt?)") from None
    if problem:
        raise DataFileError(f"{where}: at {problem[0]}: {problem[1]}")
    return _plain(data)


def check_invariants(data, name: str, where: str, exclude=()) -> None:
    """Runs the physical and consistency checks of :mod:`.invariants` registered for ``name`` (less the
    checks named in ``exclude``); raises DataFileError naming ``where`` and each field found wrong."""
    from . import consistency  # noqa: F401 - registers its checks beside those of .invariants
    from .invariants import problems

    found = problems(data, Path(name).name, exclude)
    if found:
        lines = [f"  at {field}: {problem[:400]}" for field, problem in found[:10]]
        more = f"\n  ... and {len(found) - 10} more" if len(found) > 10 else ""
        raise DataFileError(f"{where} fails its consistency checks (reference_impl/studies/schemas/invariants.py, consistency.py):\n"
                            + "\n".join(lines) + more)


def check_file(path: Path):
    """Reads, parses and validates one data file (its schema, then :mod:`.invariants`: physical limits,
    agreement with itself, a provenance that matches the sources); returns its data or raises DataFileError
    naming the path and the field."""
    path = Path(path)
    where = _rel(path)
    data = parse_json(_read_text(path, where), where)
    check_data(data, path.name, where)
    check_invariants(data, path.name, where)
    return data


def _yaml_loader():
    import yaml

    class Loader(yaml.SafeLoader):
        """safe_load that refuses a key repeated in one mapping (PyYAML keeps the last one silently)."""

        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} appears more than once in this mapping", key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep)

    return Loader


def check_yaml_file(path: Path, schema: str):
    """Reads a YAML file (the claims ledger), parses it and validates it against ``<schema>.schema.json``
    (``schema``: "ledger_claims" for ``<schemas>/ledger_claims.schema.json``) with the machinery of the
    data files; returns the data or raises DataFileError naming the file and
    the field."""
    import yaml

    path = Path(path)
    where = _rel(path)
    text = _read_text(path, where)
    try:
        data = yaml.load(text, Loader=_yaml_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise DataFileError(f"{where} is not valid YAML: {str(exc)[:400]}") from None
    except RecursionError:
        raise DataFileError(f"{where} is nested too deeply to parse (corrupt?)") from None
    check_data(data, schema + ".json", where)
    return data


def data_files(data_dir: Path = DATA) -> list[Path]:
    return sorted(Path(data_dir).glob("*.json"))
