"""Where a data file's numbers came from: one helper for every measuring command.

Every file under ``docs/data/`` carries one block under the key :data:`KEY` (``"provenance"``)::

    {"provenance": {"command": "python -m reference_impl.studies.numerics",
                    "sources": ["reference_impl/oracle.py", ...],      # files whose change changes the numbers
                    "hashed_settings": ["-O3 -ffp-contract=off"],    # optional: flags that change them too
                    "source_hash": "3f2a...",                         # 16 hex digits, see source_hash()
                    "machine": {"cpu": ..., "cores": ..., ...},
                    "versions": {"python": ..., "torch": ..., ...},
                    "date": "2026-11-30T02:39:10+00:00",
                    "load_avg": [1-min, 5-min, 15-min] at the start,
                    "quick": false},                                  # true: a smoke run, not for the site
     ...the study's numbers...}

Usage in a study::

    from ..provenance import record, finish
    prov = record("python -m reference_impl.studies.x", SOURCES, quick=args.quick, packages=("torch",))
    data = {"provenance": prov, **numbers}
    finish(prov)  # adds load_avg_end and duration_s

The source hash covers only what changes the numbers: Python files are hashed by their syntax tree without
docstrings (comments are not in the tree), C, C++ and CUDA files with comments removed and blank space
collapsed. Editing a docstring or a comment therefore does not make a data file stale; editing code does.
:func:`is_current` recomputes the hash from the file's own ``sources`` for the tests.
"""
from __future__ import annotations

import ast
import datetime as _dt
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import tempfile
import time
from pathlib import Path

KEY = "provenance"
REPO = Path(__file__).resolve().parent.parent
#: SIMD features worth recording: they decide which kernel paths and reduction orders ran
SIMD_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512dq", "avx512bw", "avx512vl",
              "avx512_bf16", "avx512_fp16", "amx_bf16")
C_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".h", ".hpp", ".cu", ".cuh")


# ------------------------------------------------------------------------------------------ machine

def _cpuinfo() -> dict:
    out = {"model name": None, "vendor_id": None, "flags": ""}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, val = line.partition(":")
            key = key.strip()
            if key in out and not out[key]:
                out[key] = val.strip()
    except OSError:
        pass
    return out


def cpu_model() -> str:
    """The CPU's model name as /proc/cpuinfo gives it (``platform.processor()`` elsewhere)."""
    return _cpuinfo()["model name"] or platform.processor() or "unknown"


def basic_info() -> dict:
    """CPU model, logical cores and Python version (for the test-results file)."""
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version()}


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def machine(extra: dict | None = None) -> dict:
    """CPU model and vendor, logical cores, memory, SIMD flags, OS; ``extra`` entries are added."""
    info = _cpuinfo()
    flags = set(info["flags"].split())
    out = {
        "cpu": cpu_model(),
        "vendor": info["vendor_id"] or "unknown",
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "simd_flags": [f for f in SIMD_FLAGS if f in flags],
        "os": f"{platform.system()} {platform.release()}",
    }
    out.update(extra or {})
    return out


def versions(packages=("torch", "numpy")) -> dict:
    """Python and the installed version of each named distribution (``None`` when it is not installed)."""
    out = {"python": platform.python_version()}
    for name in packages:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    if "torch" in packages:  # the local build tag (+cpu, +cu130) is part of what ran
        try:
            import torch

            out["torch"] = torch.__version__
        except ImportError:
            pass
    return out


# ------------------------------------------------------------------------------------------ source hash

def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


_C_TOKENS = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def strip_c_comments(text: str) -> str:
    """C/C++/CUDA source without comments (string and character literals kept), blank space collapsed."""
    def repl(m: re.Match) -> str:
        s = m.group(0)
        if s.startswith("//"):
            return ""
        if s.startswith("/*"):
            return " " if "\n" not in s else "\n"
        return s

    lines = (re.sub(r"[ \t]+", " ", ln).strip() for ln in _C_TOKENS.sub(repl, text).splitlines())
    return "\n".join(ln for ln in lines if ln)


def normalized_source(path: Path) -> bytes:
    """What of a source file the hash sees: Python's AST without docstrings, C/C++/CUDA without comments,
    other files as they are."""
    raw = path.read_bytes()
    if path.suffix == ".py":
        tree = _strip_docstrings(ast.parse(raw, filename=str(path)))
        return ast.dump(tree, annotate_fields=True, include_attributes=False).encode()
    if path.suffix in C_SUFFIXES:
        return strip_c_comments(raw.decode("utf-8", errors="replace")).encode()
    return raw


# A study that writes a second data file may import the module behind that file only to write it; the
# second file records that module's closure as its own sources. Such a module is not a source of the first
# file's numbers, so the closure from the study does not walk into it.
SECOND_FILE_MODULES = {
    "reference_impl/studies/training.py": ("reference_impl/equivalence.py",),  # -> training_equivalence.json
}


# A package that finds its modules at run time (the catalog: reference_impl.norms builds CATALOG from every
# module that defines SPECS) hides them from the import graph: importing the package itself (``from ..norms
# import CATALOG``) counts as importing every module in it.
DISCOVERING_PACKAGES = ("reference_impl/norms",)


def python_closure(*entries: str, root: Path = REPO, exclude=("reference_impl/provenance.py",),
                   discover: bool = True) -> list[str]:
    """The given repository-relative Python files and every module of the repository they import,
    directly or not (relative and absolute ``reference_impl`` imports; imports inside functions too).
    Package ``__init__`` files are left out (they only re-export), except that importing a package of
    :data:`DISCOVERING_PACKAGES` adds every module in it. Native sources loaded at run time are
    not imports: list them yourself. Modules an entry imports only for a second data file
    (:data:`SECOND_FILE_MODULES`) are left out of that entry's closure. ``discover=False`` does not expand
    the discovering packages (for a study that lists the catalog modules it uses itself, through
    :func:`reference_impl.norms.layer_sources`)."""
    exclude = tuple(exclude) + tuple(m for e in entries for m in SECOND_FILE_MODULES.get(e, ()))
    seen: list[str] = []
    todo = list(entries)
    while todo:
        rel = todo.pop(0)
        if rel in seen or rel in exclude:
            continue
        seen.append(rel)
        path = root / rel
        package = path.parent.relative_to(root).parts
        for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
            names: list[tuple[str, ...]] = []
            if isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else ()
                mod = tuple(node.module.split(".")) if node.module else ()
                names = [base + mod + (a.name,) for a in node.names] + [base + mod]
            elif isinstance(node, ast.Import):
                names = [tuple(a.name.split(".")) for a in node.names]
            for parts in names:
                if not parts or parts[0] != "reference_impl":
                    continue
                cand = Path(*parts).with_suffix(".py")
                if (root / cand).is_file():
                    todo.append(cand.as_posix())
                elif discover and Path(*parts).as_posix() in DISCOVERING_PACKAGES:
                    todo.extend(m.relative_to(root).as_posix() for m in sorted((root / Path(*parts)).glob("*.py"))
                                if m.name != "__init__.py")
    return sorted(seen)


def relative(path, root: Path = REPO) -> str:
    """A file's path relative to the repository, with forward slashes (as ``sources`` lists it)."""
    return Path(path).resolve().relative_to(root.resolve()).as_posix()


def source_hash(sources, hashed_settings=(), root: Path = REPO) -> str:
    """sha256 (16 hex digits) over each source's path (relative to the repository) and normalized text,
    then over ``hashed_settings`` (compiler flags and the like). A missing source raises FileNotFoundError."""
    h = hashlib.sha256()
    for rel in sources:
        p = root / rel
        if not p.is_file():
            raise FileNotFoundError(f"source {rel!r} listed for a data file does not exist under {root}")
        h.update(rel.encode() + b"\0" + normalized_source(p) + b"\0")
    for s in hashed_settings:
        h.update(b"setting\0" + str(s).encode() + b"\0")
    return h.hexdigest()[:16]


# ------------------------------------------------------------------------------------------ the block

def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def record(command: str, sources, *, quick: bool = False, packages=("torch", "numpy"), machine_extra=None,
           hashed_settings=()) -> dict:
    """The provenance block for a run that starts now. ``sources``: repository-relative paths of every file
    whose change changes the numbers (the study's own module included)."""
    sources = [str(s) for s in sources]
    prov = {
        "command": command,
        "sources": sources,
        "source_hash": source_hash(sources, hashed_settings),
        "machine": machine(machine_extra),
        "versions": versions(packages),
        "date": _now(),
        "load_avg": [round(v, 2) for v in os.getloadavg()],
        "quick": bool(quick),
    }
    if hashed_settings:
        prov["hashed_settings"] = [str(s) for s in hashed_settings]
    prov["_t0"] = time.monotonic()
    return prov


def finish(prov: dict) -> dict:
    """Adds the load average at the end and the run's duration (seconds) to a block from :func:`record`."""
    t0 = prov.pop("_t0", None)
    prov["load_avg_end"] = [round(v, 2) for v in os.getloadavg()]
    if t0 is not None:
        prov["duration_s"] = round(time.monotonic() - t0, 1)
    return prov


def is_current(data: dict, root: Path = REPO) -> tuple[bool, str]:
    """Whether a data file's recorded hash matches its recorded sources as they are now, and why not."""
    prov = data.get(KEY)
    if not isinstance(prov, dict):
        return False, f"no {KEY!r} block"
    try:
        now = source_hash(prov["sources"], prov.get("hashed_settings", ()), root)
    except FileNotFoundError as exc:
        return False, str(exc)
    if now != prov["source_hash"]:
        return False, (f"recorded source hash {prov['source_hash']} but the sources now hash to {now}: "
                       f"rerun {prov['command']}")
    return True, "current"


# ------------------------------------------------------------------------------------------ writing

def write_text(path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically: into a temporary file in the same directory, flushed to
    disk, then moved over ``path`` with :func:`os.replace`. A reader, or a run that crashes half way, sees the
    old file or the new one, never half of one. The directory must exist (FileNotFoundError names it)."""
    path = Path(path)
    folder = path.parent
    if not folder.is_dir():
        raise FileNotFoundError(f"cannot write {path}: the directory {folder} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(path, data, *, indent: int = 1, sort_keys: bool = False, allow_nan: bool = True) -> Path:
    """A data file or index as every study writes it (``json.dumps(data, indent=1)`` and a final newline),
    atomically through :func:`write_text`. The JSON is built in full before anything is written, so a value
    that cannot be serialised leaves the old file as it was."""
    return write_text(path, json.dumps(data, indent=indent, sort_keys=sort_keys, allow_nan=allow_nan) + "\n")


def check_out(parser, path, option: str = "--out"):
    """Refuse an output path before a study's work starts (``parser.error``: exit status 2, a one-line
    message): its directory must exist and the path must not be a directory. Returns ``path``."""
    path = Path(path)
    if path.is_dir():
        parser.error(f"{option} {path} is a directory; give a file name")
    if not path.parent.is_dir():
        parser.error(f"{option} {path}: the directory {path.parent} does not exist; create it first")
    return path
