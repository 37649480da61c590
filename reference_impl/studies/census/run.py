"""The census run: discover, probe every class, place every model type, count, and write the two files.

:func:`run_census` returns the data of ``docs/data/census.json`` (CONTRACT section 2); :func:`write` writes
it and the kit's index. :func:`class_record` and :func:`model_records` are what the tests re-run on a subset.
"""
from __future__ import annotations

import contextlib
import json
import logging
import signal
import warnings
from collections import Counter
from pathlib import Path

import torch

from ... import provenance as pv
from .discover import Found, discover
from .exceptions import EXCEPTIONS
from .placement import model_types, place
from .probe import probe_class

REPO = Path(__file__).resolve().parents[3]
DATA_FILE = REPO / "docs" / "data" / "census.json"
INDEX_FILE = REPO / "reference_impl" / "check" / "census_index.json"
COMMAND = "python -m reference_impl.studies.census"
MODEL_SECONDS = 60   # a model whose tiny forward pass takes longer is recorded as an error
PLACEMENTS = ("pre", "post", "sandwich", "output", "other")
QK = ("none", "per_head", "whole_projection", "other")


def sources() -> list[str]:
    here = Path(__file__).resolve().parent
    entries = sorted(p.relative_to(REPO).as_posix() for p in here.glob("*.py") if p.name != "__init__.py")
    return pv.python_closure(*entries, "reference_impl/check/matching.py")


def class_record(found: Found) -> dict:
    """The census record of one class (see CONTRACT section 2)."""
    r = probe_class(found)
    unmatched = r.in_scope and r.catalog is None
    return {
        "name": found.name, "module": found.module, "source": found.source, "line": found.line, "kind": r.kind,
        "in_scope": r.in_scope, "reason": r.reason, "catalog": r.catalog, "closest": r.closest,
        "max_ulp": r.max_ulp, "eps_default": r.eps, "gain": r.gain, "gain_dtype": r.gain_dtype, "bias": r.bias,
        "dtypes": r.dtypes, "note": r.note, "users": [],
        "exception": EXCEPTIONS.get(found.name) if unmatched else None,
    }


class _Timeout(Exception):
    pass


@contextlib.contextmanager
def _limit(seconds: int):
    def fire(signum, frame):
        raise _Timeout(f"the tiny model's build and forward pass took longer than {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def model_records(types, norm_types: tuple, class_catalog: dict, progress=None) -> list[dict]:
    out = []
    for i, t in enumerate(types):
        try:
            with _limit(MODEL_SECONDS):
                rec = place(t, norm_types, class_catalog)
        except _Timeout as exc:
            rec = {**_error_record(t), "error": str(exc)}
        out.append(rec)
        if progress is not None and (i + 1) % 20 == 0:
            print(f"  placed {i + 1}/{len(types)} model types", file=progress, flush=True)
    return out


def _error_record(model_type: str) -> dict:
    return {"model_type": model_type, "config_class": None, "model_class": None, "status": "error",
            "error": "unknown", "norm_classes": [], "catalog": [], "placement": None, "placement_note": None,
            "qk_norm": None, "qk_rope": None, "final_norm": None, "extra_norms": [], "eps": None,
            "eps_attr": None, "layer": [], "source": None, "parallel": None}


def counts(classes: list[dict], models: list[dict]) -> dict:
    in_scope = [c for c in classes if c["in_scope"]]
    matched = [c for c in in_scope if c["catalog"]]
    traced = [m for m in models if m["status"] == "traced"]
    by_pl = Counter(m["placement"] for m in traced)
    by_qk = Counter(m["qk_norm"] for m in traced)
    return {
        "classes": len(classes), "in_scope": len(in_scope), "matched": len(matched),
        "unmatched": len(in_scope) - len(matched), "out_of_scope": len(classes) - len(in_scope),
        "model_types": len(models), "traced": len(traced), "failed": len(models) - len(traced),
        "by_placement": {p: by_pl.get(p, 0) for p in PLACEMENTS},
        "by_qk_norm": {q: by_qk.get(q, 0) for q in QK},
        "by_catalog": dict(sorted(Counter(c["catalog"] for c in matched).items())),
        "exceptions": sum(1 for c in in_scope if c["exception"]),
    }


def _quiet():
    warnings.filterwarnings("ignore")
    for name in ("transformers", "torch"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
    except ImportError:
        pass


def run_census(max_classes: int | None = None, max_models: int | None = None, progress=None) -> dict:
    _quiet()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    quick = max_classes is not None or max_models is not None
    prov = pv.record(COMMAND, sources(), quick=quick, packages=("torch", "numpy", "transformers"))
    found, failed_imports = discover()
    if progress is not None:
        print(f"census: {len(found)} norm classes found ({len(failed_imports)} modeling modules did not import)",
              file=progress, flush=True)
    chosen = found if max_classes is None else found[:max_classes]
    classes = []
    for i, f in enumerate(chosen):
        classes.append(class_record(f))
        if progress is not None and (i + 1) % 50 == 0:
            print(f"  probed {i + 1}/{len(chosen)} classes", file=progress, flush=True)
    norm_types = tuple(f.cls for f in found)
    by_name = {c["name"]: c["catalog"] for c in classes}
    types = model_types()
    types = types if max_models is None else types[:max_models]
    models = model_records(types, norm_types, by_name, progress)
    users: dict[str, list] = {}
    for m in models:
        for cls in m["norm_classes"]:
            users.setdefault(cls, []).append(m["model_type"])
    for c in classes:
        c["users"] = sorted(users.get(c["name"], []))
    if failed_imports:
        prov["note"] = "modeling modules that did not import (their classes are not in the census): " + \
            "; ".join(f"{n} ({e})" for n, e in failed_imports)
    data = {"provenance": pv.finish(prov), "counts": counts(classes, models), "classes": classes, "models": models}
    return data


def index(data: dict) -> dict:
    """The kit's look-up: model type -> its main norm class and what the census found about it."""
    by_name = {c["name"]: c for c in data["classes"]}
    out = {}
    for m in data["models"]:
        if m["status"] != "traced" or not m["layer"] and not m["norm_classes"]:
            continue
        main = next((r["class"] for r in m["layer"] if r["role"] in ("input", "sublayer_output", "residual_sum")),
                    m["norm_classes"][0] if m["norm_classes"] else None)
        c = by_name.get(main, {})
        out[m["model_type"]] = {"norm_class": main, "module": c.get("module"), "catalog": c.get("catalog"),
                                "eps": m["eps"], "gain": c.get("gain"), "gain_dtype": c.get("gain_dtype"),
                                "qk_norm": m["qk_norm"]}
    return {"transformers": data["provenance"]["versions"].get("transformers"), "models": out}


def write(data: dict, out: Path = DATA_FILE, index_file: Path = INDEX_FILE) -> None:
    from ..schemas import check_data

    check_data(data, "census.json", str(out))
    Path(out).write_text(json.dumps(data, indent=1) + "\n")
    Path(index_file).write_text(json.dumps(index(data), indent=1, sort_keys=True) + "\n")
