"""The census run: discover, probe every class, place every model type, count, and write the two files.

:func:`run_census` returns the data of ``docs/data/census.json`` (CONTRACT section 2); :func:`.__main__.write` writes
it and the kit's index. :func:`class_record` and :func:`model_records` are what the tests re-run on a subset.
"""
from __future__ import annotations

import contextlib
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
from .builds import config_builds
from .probe import probe_class
from .variants import structure, variants

REPO = Path(__file__).resolve().parents[3]
DATA_FILE = REPO / "docs" / "data" / "census.json"
INDEX_FILE = REPO / "reference_impl" / "check" / "census_index.json"
COMMAND = "python -m reference_impl.studies.census"
MODEL_SECONDS = 60   # a model whose tiny forward pass takes longer is recorded as an error
PLACEMENTS = ("pre", "post", "sandwich", "output", "other")
QK = ("none", "per_head", "whole_projection", "other")


def sources() -> list[str]:
    here = Path(__file__).resolve().parent
    # checkpoints.py resolves the released checkpoints under the census: it changes no number of census.json
    entries = sorted(p.relative_to(REPO).as_posix() for p in here.glob("*.py")
                     if p.name not in ("__init__.py", "checkpoints.py"))
    return pv.python_closure(*entries, "reference_impl/check/matching.py")


def class_record(found: Found) -> dict:
    """The census record of one class (see CONTRACT section 2)."""
    r = probe_class(found)
    unmatched = r.in_scope and r.catalog is None
    builds = config_builds(found) if r.in_scope else []
    return {**({"config_builds": builds} if builds else {}),
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


def model_records(types, norm_types: tuple, class_catalog: dict, progress=None, with_variants=True) -> list[dict]:
    out = []
    for i, t in enumerate(types):
        base = None
        try:
            with _limit(MODEL_SECONDS):
                if with_variants:   # the default config's trace with what the variants compare (one trace)
                    base = structure(t, norm_types, class_catalog)
                    rec = dict(base[0])
                else:
                    rec = place(t, norm_types, class_catalog)
        except _Timeout as exc:
            rec = {**_error_record(t), "error": str(exc)}
        rec["variants"], rec["untoggled"] = [], []
        if base is not None and rec["status"] == "traced":
            try:
                with _limit(MODEL_SECONDS):
                    rec["variants"], rec["untoggled"] = variants(t, norm_types, class_catalog, base)
            except _Timeout as exc:
                rec["untoggled"] = [{"flag": "*", "value": None, "reason": str(exc)}]
        out.append(rec)
        if progress is not None and (i + 1) % 20 == 0:
            print(f"  placed {i + 1}/{len(types)} model types", file=progress, flush=True)
    return out


def _error_record(model_type: str) -> dict:
    return {"model_type": model_type, "config_class": None, "model_class": None, "status": "error",
            "error": "unknown", "norm_classes": [], "catalog": [], "placement": None, "placement_note": None,
            "qk_norm": None, "qk_rope": None, "final_norm": None, "final_module": None, "extra_norms": [], "eps": None,
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


def main_norm(layer: list, norm_classes: list) -> str | None:
    """The norm class on the residual stream: the first of the layer on a sub-layer's input or output."""
    return next((r["class"] for r in layer if r["role"] in ("input", "sublayer_output", "residual_sum")),
                norm_classes[0] if norm_classes else None)


_DESCRIBED = ("config_class", "placement", "placement_note", "qk_rope", "parallel", "final_norm", "eps_attr",
              "extra_norms", "source")
_VARIANT = ("flag", "value", "default", "requires", "placement", "qk_norm", "qk_rope", "parallel", "final_norm",
            "clip", "norm_classes")


def _index_variant(v: dict, by_name: dict) -> dict:
    main = main_norm(v["norms"], v["norm_classes"])
    c = by_name.get(main, {})
    return {**{k: v[k] for k in _VARIANT}, "norm_class": main, "module": c.get("module"), "catalog": c.get("catalog"),
            "gain": c.get("gain"), "gain_dtype": c.get("gain_dtype")}


def index(data: dict, checkpoints: dict | None = None) -> dict:
    """The kit's look-up: model type -> its main norm class and what the census found about it (its norms,
    placement and variants, for ``--describe``), and, with ``checkpoints``, each released checkpoint."""
    by_name = {c["name"]: c for c in data["classes"]}
    out = {}
    for m in data["models"]:
        if m["status"] != "traced" or not m["layer"] and not m["norm_classes"]:
            continue
        main = main_norm(m["layer"], m["norm_classes"])
        c = by_name.get(main, {})
        out[m["model_type"]] = {"norm_class": main, "module": c.get("module"), "catalog": c.get("catalog"),
                                "eps": m["eps"], "gain": c.get("gain"), "gain_dtype": c.get("gain_dtype"),
                                "qk_norm": m["qk_norm"], **{k: m[k] for k in _DESCRIBED},
                                "norms": [{**{k: r[k] for k in ("module", "class", "role", "sublayer")},
                                           "catalog": by_name.get(r["class"], {}).get("catalog")}
                                          for r in m["layer"]],
                                "variants": [_index_variant(v, by_name) for v in m.get("variants", [])]}
    res = {"transformers": data["provenance"]["versions"].get("transformers"), "models": out}
    if checkpoints is not None:
        res["checkpoints"] = {c["repo"]: {k: c[k] for k in ("aliases", "release", "model_type", "values",
                                                              "variants_set", "structure", "eps")}
                              for c in checkpoints["checkpoints"]}
    return res

