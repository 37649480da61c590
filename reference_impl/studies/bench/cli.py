"""The command: ``python -m reference_impl.studies.bench`` runs, analyses, renders and writes the data file."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from ...ops import library as fused
from ...provenance import check_out, finish, record, write_json
from ...provenance import source_hash as pv_source_hash
from .cases import (ALLOCATORS, BLOCK_ALLOCATOR, COMMAND, DEFAULT_REPEATS, DTYPES, EPS, FIRST_TOUCH_SHAPE,
                    IMPLS, LABELS, LN_EPS, MAX_CALLS, MAX_LOAD, MODES, OUT, OUT_MODE_ALLOCATOR, PLOTS,
                    QUICK_OUT, QUICK_PLOTS, QUICK_SHAPES, REPO, ROUND_BUDGET_S, SHAPES, SOURCES, WAIT_S, has_out_parameter)
from .measure import allocator_available, flop_summary, run_worker, wait_for_quiet, worker
from .groups import (GROUP_IMPLS, GROUP_ROUNDS, GROUP_LABELS, QK_ALLOCATOR, QK_SHAPES, QUICK_QK_SHAPES, QUICK_SHORT_SHAPES,
                     SHORT_SHAPES, TILE_IMPLS, default_tile_bytes)
from .analyse import analyse, block_shares, index_results, ort_support
from .render import first_touch_table, ort_table, plot, status_text, tables
from . import archive
from reference_impl.studies.machine import cpu_identity, cpu_kernel_path, machine_key

def run(args) -> dict:
    from tqdm import tqdm

    quick = args.quick
    shapes = QUICK_SHAPES if quick else [tuple(s) for s in args.shapes]
    dtypes = list(DTYPES)
    repeats = 1 if quick else args.repeats
    load = wait_for_quiet(args.max_load, args.wait, args.force, quick)
    _identity = cpu_identity()
    prov = record(COMMAND, SOURCES, quick=quick, packages=("torch", "numpy", "onnxruntime", "onnx", "transformers"),
                  machine_extra={"torch_threads": torch.get_num_threads(),
                                 "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
                                 "cpu_identity": _identity, "machine_key": machine_key(_identity),
                                 "kernel_path": cpu_kernel_path(_identity)})
    allocs, status = [], {}
    for name in args.allocators:
        ok, why = allocator_available(name)
        status[name] = {"label": ALLOCATORS[name]["label"], "env": ALLOCATORS[name]["env"], "available": ok,
                        "reason": why}
        if ok:
            allocs.append(name)
        else:
            print(f"\n*** bench: ALLOCATOR {name!r} SKIPPED: {why} ***\n", file=sys.stderr, flush=True)
    if OUT_MODE_ALLOCATOR not in allocs:
        raise SystemExit(f"bench: the {OUT_MODE_ALLOCATOR!r} setting must be measured (it holds the ceilings)")
    qk_alloc = QK_ALLOCATOR if QK_ALLOCATOR in allocs else OUT_MODE_ALLOCATOR
    short = QUICK_SHORT_SHAPES if quick else SHORT_SHAPES
    qk = QUICK_QK_SHAPES if quick else QK_SHAPES
    fb_alloc = "glibc_tunables" if "glibc_tunables" in allocs else "glibc"  # forward+backward's targets
    results, workers = [], {}
    bar = tqdm(allocs, desc="bench (one worker per allocator)", unit="allocator", file=sys.stderr)
    for alloc in bar:
        modes = [m for m in MODES if m != "forward_out" or alloc == OUT_MODE_ALLOCATOR]
        job = {"allocator": alloc, "modes": modes, "dtypes": dtypes, "shapes": [list(s) for s in shapes],
               "repeats": repeats, "quick": quick,
               "first_touch": list(QUICK_SHAPES[0] if quick else FIRST_TOUCH_SHAPE),
               "block": (alloc == BLOCK_ALLOCATOR or (quick and alloc == allocs[-1])) and not args.no_block,
               "block_steps": args.block_steps, "overhead": alloc == fb_alloc,
               "groups": {**({"short_rows": [list(s) for s in short]} if alloc == OUT_MODE_ALLOCATOR else {}),
                          **({m: [list(s) for s in qk] for m in ("qk_forward", "qk_forward_backward")}
                             if alloc == qk_alloc else {})}}
        t0 = time.monotonic()
        w = run_worker(alloc, job)
        w["duration_s"] = round(time.monotonic() - t0, 1)
        results += w.pop("results")
        workers[alloc] = w
    bar.close()
    first_touch_all = {a: w.pop("first_touch") for a, w in workers.items() if "first_touch" in w}
    block = next((w.pop("block") for w in workers.values() if "block" in w), None)
    call_overhead = next((w.pop("call_overhead") for w in workers.values() if "call_overhead" in w), None)
    data = {
        "provenance": prov,
        "what": "CPU benchmark of RMSNorm/LayerNorm implementations against the copy ceiling and the peers",
        "settings": {"eps": EPS, "layer_norm_eps": LN_EPS, "repeats": repeats,
                     "group_repeats": repeats if quick else GROUP_ROUNDS * repeats, "round_budget_s": ROUND_BUDGET_S,
                     "max_calls_per_round": MAX_CALLS, "shapes": [list(s) for s in shapes], "dtypes": dtypes,
                     "modes": list(MODES), "impls": {m: list(v) for m, v in IMPLS.items()}, "labels": LABELS,
                     "out_mode_allocator": OUT_MODE_ALLOCATOR, "block_allocator": BLOCK_ALLOCATOR,
                     "fused_has_out": {f: has_out_parameter(getattr(fused, f)) for f in ("fused_rms_norm", "fused_layer_norm")},
                     "bytes": "forward 2*N*b, forward+backward 5*N*b, plus parameters",
                     "separation": "faster: every round of the faster one beats every round of the other",
                     "short_shapes": [list(s) for s in short], "qk_shapes": [list(s) for s in qk],
                     "qk_allocator": qk_alloc, "group_impls": {m: list(v) for m, v in GROUP_IMPLS.items()},
                     "group_labels": GROUP_LABELS, "tile_settings": dict(TILE_IMPLS),
                     "tile_default_bytes": default_tile_bytes()},
        "load": load,
        "allocators": status,
        "workers": workers,
        "results": results,
        "first_touch": first_touch_all,
        "flops": flop_summary(),
        "call_overhead": call_overhead,
    }
    if block is not None:
        data["block"] = block_shares(block)
    data.update(analyse(results, allocs, shapes, dtypes, _identity))
    data["ort_dtype_support"] = ort_support(workers)
    data["status"] = status_text(data)
    idx = index_results(results)
    data["tables"] = tables(idx, data["comparisons"], data["targets"], allocs, shapes, dtypes)
    data["tables"]["first_touch"] = first_touch_table(first_touch_all)
    data["tables"]["ort_support"] = ort_table(data["ort_dtype_support"], dtypes)
    _overhead_views(data, idx, shapes, dtypes)
    finish(prov)
    data["plots"] = []  # drawn by main() once the measurement is safely on disk
    return data


def reanalyse(data: dict, plots: Path | None) -> dict:
    """The derived sections again, from the raw records of a file (after a change to the analysis only:
    the provenance hash is updated and the file says it was re-analysed)."""
    allocs = [a for a, st in data["allocators"].items() if st["available"]]
    shapes = [tuple(s) for s in data["settings"]["shapes"]]
    first_touch_all = data["first_touch"]
    for key in ("comparisons", "targets", "advice", "tables", "ln_vs_rms", "short_rows", "qk_norm", "machine_targets",
                "fixed_shares"):
        data.pop(key, None)
    for r in data["results"]:
        r.pop("ratio_copy", None)
        r.pop("ratio_best_ceiling", None)
    if "block" in data:
        data["block"] = block_shares(data["block"])
    data.update(analyse(data["results"], allocs, shapes, data["settings"]["dtypes"],
                        data["provenance"]["machine"].get("cpu_identity")))
    data["status"] = status_text(data)
    idx = index_results(data["results"])
    data["tables"] = tables(idx, data["comparisons"], data["targets"], allocs, shapes, data["settings"]["dtypes"])
    data["tables"]["first_touch"] = first_touch_table(first_touch_all)
    data["tables"]["ort_support"] = ort_table(data["ort_dtype_support"], data["settings"]["dtypes"])
    _overhead_views(data, idx, shapes, data["settings"]["dtypes"])
    prov = data["provenance"]
    prov["sources"] = SOURCES
    prov["source_hash"] = pv_source_hash(SOURCES)
    prov["note"] = "derived sections re-analysed from the raw records with the current analysis code"
    if plots is not None:
        data["plots"] = plot(data, plots)
    return data



def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m reference_impl.studies.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke run: one tiny shape, one round, marked quick")
    p.add_argument("--out", type=Path, default=None,
                   help=f"data file (default {OUT.relative_to(REPO)}; with --quick {QUICK_OUT.relative_to(REPO)})")
    p.add_argument("--plots", type=Path, default=None,
                   help=f"folder for the SVG plots (default {PLOTS.relative_to(REPO)}; with --quick {QUICK_PLOTS.relative_to(REPO)})")
    p.add_argument("--repeats", type=int, default=DEFAULT_REPEATS, help="rounds per configuration (>= 3)")
    p.add_argument("--allocators", default=",".join(ALLOCATORS), help="comma-separated allocator settings")
    p.add_argument("--shapes", default=None, help="rows x hidden list, e.g. 4096x1024,16384x4096")
    p.add_argument("--max-load", type=float, default=MAX_LOAD, help="1-minute load average that counts as busy")
    p.add_argument("--wait", type=float, default=WAIT_S, help="seconds to wait for a quiet machine")
    p.add_argument("--force", action="store_true", help="measure even on a busy machine (recorded in the file)")
    p.add_argument("--no-block", action="store_true", help="skip the decoder-block measurement")
    p.add_argument("--block-steps", type=int, default=8, help="decoder-layer steps per round")
    p.add_argument("--reanalyse", type=Path, default=None,
                   help="recompute comparisons, targets, tables and plots from the raw records of an existing file")
    p.add_argument("--plots-only", action="store_true",
                   help="redraw the plots from the data file (--out) without measuring or changing it")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    # a smoke run never replaces the committed measurement unless --out names it
    default_out = QUICK_OUT if args.quick else OUT
    args.out = args.out or default_out
    # plots follow the data file: a run written elsewhere leaves the site's plots alone
    args.plots = args.plots or ((QUICK_PLOTS if args.quick else PLOTS) if args.out.resolve() == default_out.resolve()
                                else args.out.parent)
    if not args.worker:
        if args.out == default_out:
            default_out.parent.mkdir(parents=True, exist_ok=True)  # build/ for a smoke run
        check_out(p, args.out)
    if args.plots_only:
        written = plot(json.loads(args.out.read_text()), args.plots)
        print(f"redrew {len(written)} plots from {args.out} into {args.plots}")
        return 0
    if args.reanalyse:
        data = reanalyse(json.loads(args.reanalyse.read_text()), args.plots)
        write_json(args.out, data)
        print(f"re-analysed {args.reanalyse} into {args.out}")
        _archive(data, args.out)
        return 0
    if args.worker:
        print("RESULT " + json.dumps(worker(json.loads(args.worker))))
        return 0
    if not args.quick and args.repeats < 3:
        p.error("--repeats must be at least 3 for a measurement (use --quick for a smoke run)")
    args.allocators = [a for a in args.allocators.split(",") if a]
    unknown = [a for a in args.allocators if a not in ALLOCATORS]
    if unknown:
        p.error(f"unknown allocator settings {unknown}; known: {sorted(ALLOCATORS)}")
    try:
        args.shapes = SHAPES if args.shapes is None else [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    except ValueError:
        p.error("--shapes takes ROWSxHIDDEN,... e.g. 4096x1024,16384x4096")
    data = run(args)
    write_json(args.out, data)  # first without plots: a plot error loses no run
    data["plots"] = plot(data, args.plots)
    write_json(args.out, data)
    for dname, t in data["targets"].items():
        c = t["forward_out_vs_copy"]
        print(f"{dname:9s} forward_out / copy: {c['met']}/{c['shapes']} shapes >= 0.9 (worst {c['worst']})")
    for e in data.get("machine_targets", {}).get("entries", []):
        if e["count"]:
            print(f"{e['dtype']:9s} {e['target']} ({e['impl']}) >= {e['threshold']:g}: {e['met']}/{e['count']} shapes "
                  f"(worst {e['worst']:.2f} at {e['worst_shape']}; cache-resident: {e['cache_resident_shapes'] or 'none'}; "
                  f"missed, the cache's ceiling: {e['cache_bound'] or 'none'}; the op's own: {e['not_cache_bound'] or 'none'})")
    print(f"wrote {args.out} in {data['provenance']['duration_s']} s")
    _archive(data, args.out)
    return 0


def _overhead_views(data: dict, idx: dict, shapes, dtypes) -> None:
    """The fixed cost per call (overhead.py) as a table, and its share of each forward+backward step."""
    from . import overhead

    oh = data.get("call_overhead")
    data["fixed_shares"] = overhead.fixed_shares(oh, idx, oh["allocator"], shapes, dtypes) if oh else []
    data["tables"]["call_overhead"] = overhead.table(oh)
    data["tables"]["fixed_shares"] = overhead.share_table(data["fixed_shares"])


def _archive(data: dict, out: Path) -> None:
    """The committed latest file also goes to its machine's file in the archive (only that machine's)."""
    if out.resolve() == OUT.resolve() and not data["provenance"]["quick"]:
        print(f"and {archive.write(data).relative_to(REPO)} (this machine's file in the archive)")

