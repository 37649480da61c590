"""The command: ``python -m reference_impl.studies.bench_gpu`` (needs a CUDA device)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
import torch
from ...provenance import finish, record
from .cases import (MAX_CALLS, MIN_CALLS, BLOCK_SWEEP, COMMAND, DTYPES, EPS, LN_EPS, OUT, PLOTS, QUICK_SHAPES,
                    REPO, REPS, SHAPES, TARGET_SHAPE, TIME_PER_REP_S, _impl, _sets, _write,
                    device_info_cached, liger, min_bytes, peers_info, validate, validation_ok)
from .measure import add_frac_copy, plan, sources, summarize_reps, time_interleaved, triton_settings
from .analyse import summarize
from .render import plot


def run(shapes=SHAPES, dtypes=DTYPES, out: Path = OUT, plots: Path | None = PLOTS, quick: bool = False) -> dict:
    from tqdm import tqdm

    from ...ops import cuda as cuda_ops
    from .. import cuda_resources as cuda_build_report

    cuda_ops.ensure_loaded()
    try:  # one compiled graph per (shape, dtype, mode): let all of them compile instead of falling back
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    except AttributeError:
        pass
    prov = record(COMMAND, sources(), quick=quick, packages=("torch", "triton", "liger-kernel"),
                  machine_extra={"device": device_info_cached()},
                  hashed_settings=cuda_build_report.hashed_settings())
    head = {"device": device_info_cached(), "peers": peers_info(), "triton_settings": triton_settings(shapes)}
    results: dict = {}
    checks: dict = {}
    groups = plan(shapes, {dn: dtypes[dn] for dn in dtypes})
    bar = tqdm(groups, desc="bench_gpu", unit="group")
    for dn, rows, d, mode, impls in bar:
        dtype = dtypes[dn]
        key = f"{rows}x{d}"
        bar.set_postfix_str(f"{dn} {key} {mode}")
        torch.cuda.empty_cache()
        sets = _sets(rows, d, dtype, mode == "forward_backward", 1)
        fns = {i: _impl(i, d) for i in impls}
        for impl in impls:  # validation before timing; an implementation that fails is left out
            ck = f"{impl}|{dn}|{key}|{mode}"
            try:
                if not impl.startswith("copy"):
                    err = validate(fns[impl], impl, sets[0], mode)
                    checks[ck] = {k: round(v, 7) for k, v in err.items()} | {"ok": validation_ok(err, dtype)}
                    if not checks[ck]["ok"]:
                        print(f"bench_gpu: VALIDATION FAILED {ck}: {err}", file=sys.stderr)
            except Exception as exc:  # e.g. a peer's kernel that does not compile with this Triton
                checks[ck] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
                print(f"bench_gpu: {ck} raised {checks[ck]['error']}; left out", file=sys.stderr)
                fns.pop(impl)
        torch.cuda.empty_cache()
        timed = time_interleaved(fns, sets, mode)
        del sets
        group = results.setdefault(dn, {}).setdefault(key, {}).setdefault(mode, {})
        for impl in fns:
            group[impl] = summarize_reps(timed[impl]["reps_ms"], min_bytes(rows, d, dtype, mode, impl))
            group[impl]["calls_per_rep"] = timed[impl]["calls"]
        if mode == "residual":
            for v in group.values():
                add_frac_copy(v, group["copy_residual"], paired=True)
        elif mode == "forward":
            for v in group.values():
                add_frac_copy(v, group["copy"], paired=True)
        else:  # forward+backward against the forward copy of the same shape (an earlier group)
            for v in group.values():
                add_frac_copy(v, results[dn][key]["forward"]["copy"], paired=False)
        _write(out, {"provenance": {k: v for k, v in prov.items() if k != "_t0"}, "complete": False, **head,
                     "validation_rel_l2": checks, "results": results})
    # version 3's block size (claim C42) at the target shape in bfloat16 (the first shape in quick mode)
    rows, d = shapes[0] if quick else (int(t) for t in TARGET_SHAPE.split("x"))
    sets = _sets(rows, d, torch.bfloat16, False, 3)
    fns = {str(blk): (lambda s, blk=blk: cuda_ops.rms_norm_fwd_version(s["x"], s["w"], EPS, 3, "llama", blk)[0])
           for blk in BLOCK_SWEEP}
    timed = time_interleaved(fns, sets, "forward")
    sweep = {blk: summarize_reps(t["reps_ms"], min_bytes(rows, d, torch.bfloat16, "forward", "v3"))
             for blk, t in timed.items()}
    del sets
    # the 16-byte vector path against its scalar fallback (claim C29): bf16 rows of 8192 (vectorized),
    # 8200 (a multiple of 8: vectorized), 8191 (not a multiple of 8) and 8192 starting one element past a
    # 16-byte boundary (an offset view); version 4, the op behind fused_rms_norm; and a row too long for
    # registers (65536 bf16: the streaming branch), 4096 rows of it
    vector_path = {}
    n_vec = 4096 if quick else 32768
    for label, n, dv, offset in (("d8192", n_vec, 8192, 0), ("d8200", n_vec, 8200, 0), ("d8191", n_vec, 8191, 0),
                                 ("d8192_offset1", n_vec, 8192, 1), ("d65536_streaming", 512 if quick else 4096, 65536, 0)):
        g = torch.Generator(device="cuda").manual_seed(5)
        base = torch.randn(n * dv + offset, device="cuda", dtype=torch.bfloat16, generator=g)
        s = {"x": base[offset:].view(n, dv), "w": torch.ones(dv, device="cuda", dtype=torch.bfloat16)}
        timed = time_interleaved({"v4": lambda s: cuda_ops.rms_norm_fwd_version(s["x"], s["w"], EPS, 4, "llama")[0]},
                                 [s], "forward")
        vector_path[label] = {"rows": n, "d": dv, "offset_elements": offset,
                              **summarize_reps(timed["v4"]["reps_ms"], min_bytes(n, dv, torch.bfloat16, "forward", "v4"))}
        del base, s
    data = {
        "complete": True,
        "what": "GPU forward and forward+backward times of RMSNorm/LayerNorm implementations; GB/s counts minimum bytes",
        **head,
        "provenance": finish(prov),
        "method": {"timing": "CUDA events per call; median per repetition; median, min and max over repetitions",
                   "repetitions": REPS, "interleaved": True, "time_per_rep_s": TIME_PER_REP_S,
                   "calls_per_rep": [MIN_CALLS, MAX_CALLS], "copy": "into a preallocated buffer",
                   "eps": EPS, "layer_norm_eps": LN_EPS, "convention": "llama"},
        "validation_rel_l2": checks,
        "results": results,
        "v3_block_sweep_bf16": {"shape": f"{rows}x{d}", "blocks": sweep},
        "v4_vector_path_bf16": vector_path,
        "summary": summarize(results),
    }
    _write(out, data)
    if plots is not None:
        try:
            plot(data, plots)
        except ImportError:
            pass
    return data




def dry_run(shapes) -> int:
    """Prints the plan and checks what needs no GPU: every implementation name resolves, the Triton
    settings, and whether Liger-Kernel imports."""
    groups = plan(shapes, DTYPES)
    for dn, rows, d, mode, impls in groups:
        for impl in impls:
            _impl(impl, d)  # builds the closure: unknown names and missing modules fail here
        print(f"{dn:9s} {rows:6d}x{d:<6d} {mode:17s} {len(impls):2d} implementations, {REPS} interleaved repetitions")
    lk = liger()
    print("liger-kernel:", lk.get("version") or f"NOT AVAILABLE ({lk['error']})")
    print("triton settings:", json.dumps(triton_settings(shapes)))
    print(f"{len(groups)} groups, {sum(len(g[4]) for g in groups)} timed cases; validation before timing; "
          "then the v3 block sweep and the v4 vector-path cases")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT, help="data file (default docs/data/bench_gpu.json)")
    ap.add_argument("--plot-only", action="store_true", help="render the SVG plots from an existing --out file")
    ap.add_argument("--quick", action="store_true", help="two small shapes (a smoke run; do not commit its file)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and check imports; needs no GPU")
    ap.add_argument("--no-plots", action="store_true", help="write no SVG plots")
    args = ap.parse_args(argv)
    shapes = QUICK_SHAPES if args.quick else SHAPES
    if args.plot_only:
        for p in plot(json.loads(args.out.read_text()), PLOTS):
            print(p)
        return 0
    if args.dry_run:
        return dry_run(shapes)
    if not torch.cuda.is_available():
        print("bench_gpu: no CUDA device; nothing measured (run scripts/gpu_check.sh on a GPU machine)")
        return 2
    if args.quick and args.out == OUT:  # a smoke file never replaces the measurement, nor enters docs/data
        args.out = REPO / "build" / "bench_gpu_quick.json"
    data = run(shapes=shapes, out=args.out, plots=None if (args.no_plots or args.quick) else PLOTS, quick=args.quick)
    print(json.dumps(data["summary"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
