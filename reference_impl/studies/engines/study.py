"""The study: fetch each release, build its paths, run every (path, model type) through the kit, read the
kernels that cannot run, and assemble ``docs/data/engines.json``."""
from __future__ import annotations

import itertools
import sys
import time
import traceback

import torch

from ...check.models import hf_module, resolve
from . import measure, paths as P, read
from .sources import CACHE, RELEASES, Unavailable, companion_path, open_release

TRAINERS = ("transformers", "megatron", "te", "liger")
SERVERS = ("vllm", "sglang", "tensorrt_llm", "mlx", "llamacpp")
BUILDERS = {"vllm": P.vllm, "sglang": P.sglang, "megatron": P.megatron, "te": P.te, "liger": P.liger}


def transformers_fn(model_type: str):
    """The model's own module from the installed transformers, by the kit's protocol (the reference)."""
    target = resolve(model_type)

    def fn(x, weight, eps):
        m = hf_module(target, x.shape[-1], weight, None)
        return m(x)
    fn.__qualname__ = target.norm_class or model_type
    return fn


def _release_record(r, status: str, note: str = "", files=None) -> dict:
    return {"key": r.key, "engine": r.engine, "package": r.package, "version": r.version, "source": r.source,
            "role": r.role, "url": r.url, "status": status, "note": note}


def collect(cache=CACHE, download=True, only=None, log=print):
    """Every release's archive, paths and uses; a release that cannot be had is recorded, not fatal."""
    releases, archives, all_paths, all_uses = [], {}, {}, []
    for key in RELEASES:
        if (only and key not in only) or key == "mlx_core":  # MLX's core comes with mlx-lm
            continue
        r = RELEASES[key]
        try:
            arch = open_release(r, cache, download)
            archives[key] = arch
            if key == "mlx":
                got = P.mlx(arch, companion_path("mlx", cache, download))
            elif key in BUILDERS:
                got = BUILDERS[key](arch)
            else:
                got = ([], [])
            releases.append(_release_record(r, "fetched" if got[0] or key in ("llamacpp",) else "reference"))
            for p in got[0]:
                all_paths[p.key] = p
            all_uses += got[1]
            log(f"{r.engine} {r.version}: {len(got[0])} paths, {len(got[1])} model uses")
        except Unavailable as exc:
            releases.append(_release_record(r, "unavailable", str(exc)))
            log(f"{r.engine} {r.version}: unavailable ({exc})")
    return releases, archives, all_paths, all_uses


def row_for(path: P.Path, use: P.Use, quick: bool) -> dict:
    r = RELEASES[path.release]
    row = {"id": f"{path.key}|{use.model_type}" + ("|" + ",".join(f"{k}={v}" for k, v in sorted(use.flags.items()))
                                                    if use.flags else ""),
           "engine": r.engine, "release": path.release, "version": r.version,
           "file": path.file, "sha256": path.sha256, "function": path.function, "line": path.line,
           "path": path.key, "label": path.label, "model_type": use.model_type, "flags": use.flags,
           "residual": path.residual, "mode": "ran", "evidence": use.evidence, "stubs": path.stubs,
           "also": path.also, "not_run_dtypes": path.not_run}
    if use.refused:
        row.update(verdict="refused", diagnosis=use.refused, by_dtype=[], histograms=[], cases=0)
        return row
    dtypes = path.dtypes if not quick else tuple(d for d in path.dtypes if d != torch.float32)[:1] or path.dtypes
    fn = path.factory(use.flags, path.residual)
    try:
        row.update(measure.run_kit(fn, use.model_type, dtypes, path.residual))
        row["histograms"] = measure.wide_histograms(fn, use.model_type, dtypes, path.residual)
        if row["verdict"] == "identical" and any(h["histogram"] is None or any(h["histogram"][1:])
                                                 for h in row["histograms"]):
            row["verdict"] = "differs"  # identical on the kit's small widths, not on the wide input
            row["diagnosis"] += (" On the kit's inputs (widths 33 to 127) it is bit-identical; on the wide "
                                 "input (the histogram) it is not.")
        row["batch"] = measure.batch_invariance(fn, use.model_type, dtypes[0], path.residual)
    except Exception as exc:  # the engine's own code raised on the kit's input: recorded with its words
        row.update(verdict="error", diagnosis=f"raised {type(exc).__name__}: {exc}"[:400], by_dtype=[],
                   histograms=[], cases=0, traceback=traceback.format_exc(limit=-2)[-800:])
    return row


def matrix(all_paths: dict, uses: list, quick: bool) -> list[dict]:
    """Per model type, each trainer path against each server path that ran: identical bits or not."""
    out = []
    by_model: dict = {}
    for u in uses:
        p = all_paths.get(u.path)
        if p is None or p.residual or u.refused:
            continue
        by_model.setdefault(u.model_type, []).append((p, u))
    for m in P.MODEL_TYPES:
        got = by_model.get(m, [])
        trainers = [("transformers", "transformers:" + (resolve(m).norm_class or m), transformers_fn(m), (
            torch.bfloat16, torch.float16), {})]
        trainers += [(p.release, p.key, p.factory(u.flags, False), p.dtypes, u.flags) for p, u in got
                     if RELEASES[p.release].role == "trainer"]
        servers = [(p.release, p.key, p.factory(u.flags, False), p.dtypes, u.flags) for p, u in got
                   if RELEASES[p.release].role == "server"]
        for (tr, tk, tf, tdt, _), (sr, sk, sf, sdt, _) in itertools.product(trainers, servers):
            dts = tuple(d for d in (torch.bfloat16, torch.float16) if d in tdt and d in sdt)
            if quick:
                dts = dts[:1]
            if not dts:
                continue
            try:
                cells = measure.agreement(tf, sf, m, dts)
            except Exception as exc:
                cells = [{"dtype": "-", "weight_dtype": "-", "identical": False, "max_ulp": None,
                          "note": f"raised {type(exc).__name__}: {exc}"[:200]}]
            out.append({"model_type": m, "trainer": tr, "trainer_path": tk, "server": sr, "server_path": sk,
                        "cells": cells, "identical": all(c["identical"] for c in cells)})
    return out


def transformers_batch(quick: bool) -> list[dict]:
    """The reference modules' own batch invariance (what a trainer on transformers computes)."""
    out = []
    for m in (P.MODEL_TYPES[:2] if quick else P.MODEL_TYPES):
        b = measure.batch_invariance(transformers_fn(m), m, torch.bfloat16, False)
        out.append({"model_type": m, **b})
    return out


def measure_all(quick=False, cache=CACHE, download=True, only=None, log=print) -> dict:
    t0 = time.monotonic()
    releases, archives, all_paths, uses = collect(cache, download, only, log)
    rows = []
    for u in uses:
        p = all_paths[u.path]
        variants = [p]
        if not p.key.endswith(":residual"):
            res = all_paths.get(p.key + ":residual")
            if res is not None and u.residual:
                variants.append(res)
        for v in variants:
            rows.append(row_for(v, u, quick))
            log(f"  {rows[-1]['id']}: {rows[-1]['verdict']}")
    kernels = read.read_kernels(archives)
    return {"releases": releases, "model_types": list(P.MODEL_TYPES), "rows": rows, "read": kernels,
            "matrix": matrix(all_paths, uses, quick), "reference_batch": transformers_batch(quick),
            "histogram_buckets": measure.bucket_names(),
            "histogram_shape": [measure.HIST_ROWS, measure.HIST_WIDTH],
            "python": sys.version.split()[0], "elapsed_s": round(time.monotonic() - t0, 1)}
