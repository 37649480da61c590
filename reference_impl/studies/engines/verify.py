"""Re-run committed rows whose release is at hand here (installed, or already in the download cache) and
compare with the file: ``python -m reference_impl.studies.engines --verify [--only liger] [--dtype fp16]``.

Downloads nothing, and is short enough for a test: per path, one row, in one x dtype with the gain in the
same dtype (as a checkpoint is loaded). Two checks per row: the wide input's ulp histogram is recomputed
and must equal the file's exactly; the kit is run on its smallest width, and a row the file calls identical
there must still be identical, a row that differs must not differ by more ulp than the file says. Prints
one JSON object: the rows re-run, what differs from the file, and how many rows were not re-run and why.
"""
from __future__ import annotations

import json

import torch

from . import measure
from .sources import CACHE

DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _skip(skipped: dict, why: str) -> None:
    skipped[why] = skipped.get(why, 0) + 1


def verify(data: dict, only=None, dtype="fp16", limit_per_path=1, cache=CACHE) -> dict:
    from .study import collect

    wanted = {r["release"] for r in data["rows"]} - {"mlx_core"}
    if only:
        wanted &= set(only)
    releases, _, paths, _ = collect(cache, download=False, only=sorted(wanted), log=lambda *_: None)
    missing = {r["key"]: r["note"] for r in releases if r["status"] == "unavailable"}
    done, mismatches, skipped, per_path = [], [], {}, {}
    for row in data["rows"]:
        if row["release"] not in wanted:
            continue
        p = paths.get(row["path"])
        if p is None:
            _skip(skipped, missing.get(row["release"], "its path is not built here"))
            continue
        if row["verdict"] not in ("identical", "differs"):
            _skip(skipped, f"verdict {row['verdict']}")
            continue
        if per_path.get(row["path"], 0) >= limit_per_path:
            _skip(skipped, "one row per path is re-run")
            continue
        stored = next((g for g in row["by_dtype"] if g["dtype"] == dtype and g["weight_dtype"] == dtype), None)
        hist = next((h for h in row["histograms"] if h["dtype"] == dtype and h["weight_dtype"] == dtype), None)
        if stored is None or hist is None or DT[dtype] not in p.dtypes:
            _skip(skipped, f"{dtype} is not run on this path")
            continue
        per_path[row["path"]] = per_path.get(row["path"], 0) + 1
        fn = p.factory(row["flags"], p.residual)
        fresh = measure.wide_histograms(fn, row["model_type"], (DT[dtype],), p.residual)
        fresh = next(h for h in fresh if h["weight_dtype"] == dtype)
        if fresh["histogram"] != hist["histogram"]:
            mismatches.append({"row": row["id"], "field": "histogram", "file": hist["histogram"],
                               "now": fresh["histogram"]})
        got = measure.run_kit(fn, row["model_type"], (DT[dtype],), p.residual, weight_dtypes=(DT[dtype],),
                              widths=(33,))["by_dtype"][0]
        if stored["identical"] and not got["identical"]:
            mismatches.append({"row": row["id"], "field": "identical", "file": True, "now": got["max_ulp"]})
        elif (got["max_ulp"] or 0) > (stored["max_ulp"] or 0):
            mismatches.append({"row": row["id"], "field": "max_ulp", "file": stored["max_ulp"], "now": got["max_ulp"]})
        done.append(row["id"])
    return {"rerun": len(done), "rows": done, "mismatches": mismatches, "skipped": skipped}


def main(path, only, dtype) -> int:
    data = json.loads(open(path, encoding="utf-8").read())
    out = verify(data, only, dtype)
    print(json.dumps(out))
    return 1 if out["mismatches"] else 0
