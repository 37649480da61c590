"""Norms across devices on gloo: bytes per row, timings, Welford against sums, and what DTensor does.

``python -m reference_impl.studies.distributed_bench`` spawns process groups of 2 and 4 CPU ranks (gloo,
one thread each) and writes ``docs/data/distributed.json``:

- ``bytes``: the bytes each rank sends per row, counted by :class:`reference_impl.distributed.CommRecorder`
  at two row counts (their difference is the per-row part; what is left is per call), next to the
  registry's ``dist.*`` formulas at that p;
- ``timing``: forward + backward of each method, the slowest rank's time per call, median, quartiles,
  min and max over repetitions that interleave the methods (a different order each repetition);
- ``welford_vs_sums``: LayerNorm with a sharded hidden dimension, largest error against the float64
  oracle for rows whose mean is large against their standard deviation, both statistics methods;
- ``dtensor``: what ``F.rms_norm`` and ``F.layer_norm`` do with a DTensor sharded on its last dimension
  (``Shard(-1)``): the collectives, their bytes, the placements of y and dx, or the error raised.

It also draws ``docs/data/plots/distributed-layouts.svg`` (and ``-dark.svg``); ``--diagram`` draws only
those. ``--quick`` is a smoke run with tiny shapes, marked ``"quick": true``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from .. import distributed as D
from .. import oracle, provenance, symbolic
from . import diagrams as Dg
from . import distributed_machines
from .machine import cpu_identity, machine_key

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "docs" / "data" / "distributed.json"
PLOTS = REPO / "docs" / "data" / "plots"
COMMAND = "python -m reference_impl.studies.distributed_bench"
# the study's import closure (the norms' own modules and the helpers they share), plus the symbolic package's
# modules it calls through the package (a package import is not walked by python_closure)
SOURCES = sorted(set(provenance.python_closure("reference_impl/studies/distributed_bench.py"))
                 | {"reference_impl/symbolic/algebra.py", "reference_impl/symbolic/formulas.py",
                    "reference_impl/symbolic/costs.py"})
WORLDS = (2, 4)
P = symbolic.sp.Symbol("p", integer=True, positive=True)


# ---------------------------------------------------------------------------------- process groups

def _entry(rank, world, init_file, fn, args, timeout_s):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s))
    try:
        fn(rank, world, *args)
    finally:
        dist.destroy_process_group()


def spawn(fn, world: int, args=(), timeout_s: float = 240.0) -> None:
    """Runs ``fn(rank, world, *args)`` in ``world`` processes joined by a gloo group (FileStore rendezvous
    in a temporary folder), forked from a fork server that has imported torch and ``fn``'s module, so a
    rank starts in well under a second. ``fn`` must be a module-level function. Raises the failing rank's
    error; kills every rank after ``timeout_s`` seconds."""
    import multiprocessing

    import torch.multiprocessing as mp

    # a fork server imports torch once; each rank is then a fork of that clean, single-threaded process
    multiprocessing.set_forkserver_preload(["__main__", "torch", "torch.distributed", __name__, fn.__module__])
    with tempfile.TemporaryDirectory() as tmp:
        ctx = mp.start_processes(_entry, args=(world, os.path.join(tmp, "store"), fn, args, timeout_s / 2),
                                 nprocs=world, join=False, start_method="forkserver")
        deadline = time.monotonic() + timeout_s
        while not ctx.join(timeout=1.0):
            if time.monotonic() > deadline:
                for proc in ctx.processes:
                    if proc.is_alive():
                        proc.kill()
                raise TimeoutError(f"{world} ranks of {fn.__name__} did not finish within {timeout_s:.0f} s")


def shard_bounds(widths, rank):
    lo = sum(widths[:rank])
    return lo, lo + widths[rank]


def split(d: int, p: int):
    """Widths of p shards of d columns, the first ones one wider when p does not divide d (as DTensor)."""
    return [d // p + (1 if k < d % p else 0) for k in range(p)]


# ------------------------------------------------------------------------------------------ DTensor

def _dtensor_once(name, rows, d, mesh, seed):
    from torch.distributed.tensor import Shard, distribute_tensor

    g = torch.Generator().manual_seed(seed)
    x, w, dy = torch.randn(rows, d, generator=g), torch.randn(d, generator=g), torch.randn(rows, d, generator=g)
    fn, ref = {
        "f_rms_norm": (lambda a, b: F.rms_norm(a, (d,), b, 1e-6), lambda: F.rms_norm(x, (d,), w, 1e-6)),
        "f_layer_norm": (lambda a, b: F.layer_norm(a, (d,), b, None, 1e-5), lambda: F.layer_norm(x, (d,), w, None, 1e-5)),
        "written_out": (lambda a, b: a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + 1e-6) * b,
                        lambda: F.rms_norm(x, (d,), w, 1e-6)),
    }[name]
    xd = distribute_tensor(x, mesh, [Shard(1)]).requires_grad_()
    wd = distribute_tensor(w, mesh, [Shard(0)]).requires_grad_()
    with D.CommRecorder() as fw:
        y = fn(xd, wd)
    dyd = distribute_tensor(dy, mesh, y.placements)
    with D.CommRecorder() as bw:
        y.backward(dyd)
    err = (y.full_tensor() - ref()).abs().max().item()
    return y, xd, fw, bw, err


def dtensor_probe(d: int, rows=(4, 12), seed: int = 7) -> dict:
    """In a running group: ``F.rms_norm``, ``F.layer_norm`` and RMSNorm written out with tensor ops, on a
    float32 DTensor of ``(rows, d)`` placed ``Shard(-1)`` (weight ``Shard(0)``), forward and backward.
    Bytes per row and per call come from the wire bytes at the two row counts."""
    from torch.distributed.tensor import DeviceMesh

    p = dist.get_world_size()
    mesh = DeviceMesh("cpu", list(range(p)))
    out = {"d": d, "widths": split(d, p), "even": d % p == 0}
    for name in ("f_rms_norm", "f_layer_norm", "written_out"):
        try:
            runs = [_dtensor_once(name, n, d, mesh, seed) for n in rows]
        except RuntimeError as exc:
            out[name] = {"ok": False, "error": str(exc).strip().splitlines()[0][:400]}
            continue
        y, xd, _, _, _ = runs[0]
        entry = {"ok": True, "y_placement": str(y.placements[0]), "dx_placement": str(xd.grad.placements[0]),
                 "max_abs_error": max(r[4] for r in runs)}
        for pass_, i in (("forward", 2), ("backward", 3)):
            b1, b2 = (r[i].wire_bytes(p) for r in runs)
            per_row = (b2 - b1) / (rows[1] - rows[0])
            entry[pass_] = sorted({k for k, _ in runs[0][i].calls})
            entry[f"{pass_}_bytes_per_row"] = per_row
            entry[f"{pass_}_bytes_per_call"] = b1 - per_row * rows[0]
        out[name] = entry
    return out


# ------------------------------------------------------------------------------- bytes per row

def _record(call, rows):
    with D.CommRecorder() as rec:
        call(rows)
    return rec


BYTE_METHODS = {  # name -> (registry id, norm(x_local, w_local)); the bias of LayerNorm is the weight tensor
    "sharded_rms": ("dist.rms.sharded_bytes", lambda x, w: D.sharded_rms_norm(x, w, check_shapes=False)),
    "sharded_rms_deterministic": ("dist.rms.sharded_bytes_deterministic",
                                  lambda x, w: D.sharded_rms_norm(x, w, deterministic=True, check_shapes=False)),
    "sharded_ln_sums": ("dist.ln.sharded_bytes", lambda x, w: D.sharded_layer_norm(x, w, w, stats="sums",
                                                                                  check_shapes=False)),
    "sharded_ln_welford": ("dist.ln.sharded_bytes_welford",
                           lambda x, w: D.sharded_layer_norm(x, w, w, stats="welford", check_shapes=False)),
}
SP_BYTE_METHODS = {
    "sequence_parallel_rms": ("dist.rms.sequence_parallel_bytes",
                              lambda x, w: D.sequence_parallel_rms_norm(x, w, check_shapes=False)),
    "sequence_parallel_ln": ("dist.ln.sequence_parallel_bytes",
                             lambda x, w: D.sequence_parallel_layer_norm(x, w, w, check_shapes=False)),
}


def bytes_per_row(d: int = 37, rows=(8, 24)) -> dict:
    """Per-row and per-call wire bytes of each method in a running group (sharded: row counts ``rows``;
    sequence-parallel: per step, at both row counts)."""
    p, rank = dist.get_world_size(), dist.get_rank()
    lo, hi = shard_bounds(split(d, p), rank)
    out = {"d": d}

    def run(fn, n, full_row):
        g = torch.Generator().manual_seed(n)
        x = torch.randn(n, d, generator=g)
        w = torch.randn(d, generator=g)
        xl = (x if full_row else x[:, lo:hi]).clone().requires_grad_()
        wl = (w if full_row else w[lo:hi]).clone().requires_grad_()
        with D.CommRecorder() as rec:
            fn(xl, wl).sum().backward()
        return rec.wire_bytes(p)

    for name, (_, fn) in BYTE_METHODS.items():
        b1, b2 = run(fn, rows[0], False), run(fn, rows[1], False)
        per_row = (b2 - b1) / (rows[1] - rows[0])
        out[name] = {"per_row": per_row, "per_call": b1 - per_row * rows[0]}
    for name, (_, fn) in SP_BYTE_METHODS.items():
        out[name] = {"per_step": [run(fn, rows[0], True), run(fn, rows[1], True)]}
    # the input check: the same call with and without it
    with_check = run(lambda x, w: D.sharded_rms_norm(x, w), rows[0], False)
    out["check_shapes_per_call"] = with_check - run(BYTE_METHODS["sharded_rms"][1], rows[0], False)
    return out


def add_formulas(measured: dict, p: int) -> dict:
    """The registry's value next to each measured count (run in the parent: the registry needs SymPy)."""
    reg = symbolic.registry()
    subs = {P: p, symbolic.d: measured["d"], symbolic.ELEM_BYTES: 4}
    for name, (fid, _) in {**BYTE_METHODS, **SP_BYTE_METHODS}.items():
        measured[name]["formula"] = float(reg[fid].display.subs(subs))
        measured[name]["formula_id"] = fid
    measured["allgather_row_formula_fp32"] = float(reg["dist.allgather_row_bytes"].display.subs(subs))
    return measured


# ------------------------------------------------------------------------------ Welford vs sums

OFFSETS = (0.0, 10.0, 100.0, 1000.0, 10000.0)


def welford_vs_sums(rows: int, d: int) -> dict:
    """Largest |y - oracle| over all ranks' slices, float32, rows ~ offset + N(0, 1)."""
    p, rank = dist.get_world_size(), dist.get_rank()
    lo, hi = shard_bounds(split(d, p), rank)
    out = {"rows": rows, "d": d, "std": 1.0, "offsets": list(OFFSETS), "sums": [], "welford": [], "single_device_two_pass": []}
    for off in OFFSETS:
        g = torch.Generator().manual_seed(int(off) + 1)
        x = (off + torch.randn(rows, d, generator=g, dtype=torch.float64)).float()
        ref = oracle.layer_norm_forward(x.numpy(), None, None, 1e-5)
        errs = []
        for stats in ("sums", "welford"):
            y = D.sharded_layer_norm(x[:, lo:hi].contiguous(), None, None, 1e-5, stats=stats)
            errs.append(float(np.abs(y.double().numpy() - ref[:, lo:hi]).max()))
        t = torch.tensor(errs, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        out["sums"].append(t[0].item())
        out["welford"].append(t[1].item())
        from ..norms.layer_norm import layer_norm
        out["single_device_two_pass"].append(float(np.abs(layer_norm(x).double().numpy() - ref).max()))
    return out


# ------------------------------------------------------------------------------------------- timing

def _methods(rows, d, p, rank):
    from torch.distributed.tensor import DeviceMesh, Shard, distribute_tensor

    lo, hi = shard_bounds(split(d, p), rank)
    g = torch.Generator().manual_seed(3)
    x, w, dy = torch.randn(rows, d, generator=g), torch.randn(d, generator=g), torch.randn(rows, d, generator=g)
    xl, wl, dyl = x[:, lo:hi].clone().requires_grad_(), w[lo:hi].clone().requires_grad_(), dy[:, lo:hi].contiguous()
    r0, r1 = shard_bounds(split(rows, p), rank)
    xs, ws, dys = x[r0:r1].clone().requires_grad_(), w.clone().requires_grad_(), dy[r0:r1].contiguous()
    mesh = DeviceMesh("cpu", list(range(p)))
    xd = distribute_tensor(x, mesh, [Shard(1)]).requires_grad_()
    wd = distribute_tensor(w, mesh, [Shard(0)]).requires_grad_()
    dyd = distribute_tensor(dy, mesh, [Shard(1)])

    def step(fn, a, b, grad):
        def run():
            a.grad = b.grad = None
            fn(a, b).backward(grad)
        return run
    return {
        "sharded_rms": step(lambda a, b: D.sharded_rms_norm(a, b), xl, wl, dyl),
        "sharded_rms_nocheck": step(lambda a, b: D.sharded_rms_norm(a, b, check_shapes=False), xl, wl, dyl),
        "sharded_rms_deterministic": step(lambda a, b: D.sharded_rms_norm(a, b, deterministic=True), xl, wl, dyl),
        "sharded_ln_sums": step(lambda a, b: D.sharded_layer_norm(a, b, None, stats="sums"), xl, wl, dyl),
        "sharded_ln_welford": step(lambda a, b: D.sharded_layer_norm(a, b, None, stats="welford"), xl, wl, dyl),
        "dtensor_f_rms_norm": step(lambda a, b: F.rms_norm(a, (d,), b, 1e-6), xd, wd, dyd),
        "local_only": step(lambda a, b: F.rms_norm(a, (hi - lo,), b, 1e-6), xl, wl, dyl),
        "sequence_parallel_rms": step(lambda a, b: D.sequence_parallel_rms_norm(a, b), xs, ws, dys),
    }


def _summary(samples):
    q = np.percentile(samples, [25, 50, 75])
    return {"median_us": float(q[1]), "q1_us": float(q[0]), "q3_us": float(q[2]), "min_us": min(samples),
            "max_us": max(samples), "samples_us": samples}


def timing(rows: int, d: int, reps: int, inner: int) -> dict:
    p, rank = dist.get_world_size(), dist.get_rank()
    methods = _methods(rows, d, p, rank)
    names = list(methods)
    for fn in methods.values():   # warm-up: first-call allocations, DTensor's sharding caches
        fn()
        fn()
    samples = {n: [] for n in names}
    for rep in range(reps):
        order = names[rep % len(names):] + names[:rep % len(names)]
        for n in order:
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(inner):
                methods[n]()
            t = torch.tensor([(time.perf_counter() - t0) / inner * 1e6], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)   # a step lasts as long as its slowest rank
            samples[n].append(t.item())
    out = {"rows": rows, "d": d, "widths": split(d, p), "dtype": "float32", "reps": reps, "inner": inner,
           "methods": {n: _summary(s) for n, s in samples.items()}}
    ours, dt = out["methods"]["sharded_rms"], out["methods"]["dtensor_f_rms_norm"]
    out["ratio_dtensor_over_ours"] = dt["median_us"] / ours["median_us"]
    out["verdict_vs_dtensor"] = ("faster in every repetition" if ours["max_us"] < dt["min_us"] else
                                 "slower in every repetition" if ours["min_us"] > dt["max_us"] else
                                 "not separable from the spread")
    return out


# ------------------------------------------------------------------------------------ worked example

WORKED_X = (1.0, 2.0, 2.0, 4.0)


def worked_example() -> dict:
    """The page's hand example through the real function: x split 2 + 2 over the first two ranks, eps = 0."""
    rank = dist.get_rank()
    pair = dist.new_group([0, 1])
    if rank > 1:
        return {}
    x = torch.tensor([WORKED_X[2 * rank: 2 * rank + 2]])
    y = D.sharded_rms_norm(x, None, 0.0, pair)
    parts = [torch.zeros(1) for _ in range(2)]
    dist.all_gather(parts, x.pow(2).sum(-1), group=pair)
    ys = [torch.zeros(1, 2) for _ in range(2)]
    dist.all_gather(ys, y, group=pair)
    total = sum(t.item() for t in parts)
    return {"x": list(WORKED_X), "partials": [t.item() for t in parts], "sum_of_squares": total,
            "mean_square": total / 4, "rms": (total / 4) ** 0.5, "y": torch.cat(ys, -1).flatten().tolist()}


# ---------------------------------------------------------------------------------------- the run

def _world_job(rank, world, out_dir, cfg):
    res = {"worked_example": worked_example(), "bytes": bytes_per_row(),
           "welford_vs_sums": welford_vs_sums(cfg["ws_rows"], cfg["ws_d"]),
           "dtensor": {"even": dtensor_probe(8 * world), "uneven": dtensor_probe(8 * world + 1)},
           "timing": timing(cfg["rows"], cfg["d"], cfg["reps"], cfg["inner"])}
    if rank == 0:
        provenance.write_json(Path(out_dir, f"p{world}.json"), res)


def measure(quick: bool) -> dict:
    cfg = (dict(rows=64, d=63, reps=3, inner=2, ws_rows=8, ws_d=63) if quick else
           dict(rows=4096, d=1023, reps=7, inner=4, ws_rows=64, ws_d=1023))
    prov = provenance.record(COMMAND, SOURCES, quick=quick, packages=("torch", "numpy", "transformers"),
                             machine_extra={"torch_threads": 1, "cpu_identity": (ident := cpu_identity()),
                                            "machine_key": machine_key(ident)})
    worlds = {}
    with tempfile.TemporaryDirectory() as tmp:
        for p in WORLDS:
            t0 = time.monotonic()
            spawn(_world_job, p, (tmp, cfg), timeout_s=600)
            worlds[f"p{p}"] = json.loads(Path(tmp, f"p{p}.json").read_text())
            add_formulas(worlds[f"p{p}"]["bytes"], p)
            print(f"  {p} ranks: {time.monotonic() - t0:.0f} s", flush=True)
    reg = symbolic.registry()
    params = {"d": 4096, "elem_bytes": 2, "dtype": "bfloat16", "p": [2, 4, 8]}
    per_token = {}
    for p in params["p"]:
        subs = {P: p, symbolic.d: params["d"], symbolic.ELEM_BYTES: params["elem_bytes"]}
        per_token[f"p{p}"] = {k.split(".", 1)[1].replace(".", "_"): float(reg[k].display.subs(subs))
                              for k in reg if k.startswith("dist.") and reg[k].kind == "count"}
    data = {"provenance": provenance.finish(prov), "backend": "gloo", "torch": torch.__version__,
            "status": ({"title": "Smoke run", "text": "These figures come from a smoke run (--quick) with tiny "
                        "shapes and 3 repetitions on a busy machine; they show the page's layout, not measurements."}
                       if quick else {"title": "Measured", "text": f"Full run of `{COMMAND}`."}),
            "per_token_params": params,
            "per_token_bf16_d4096": per_token, "worked_example": worlds["p2"]["worked_example"],
            **{k: {w: worlds[w][k] for w in worlds} for k in ("bytes", "timing", "welford_vs_sums", "dtensor")}}
    return data


# ---------------------------------------------------------------------------------------- diagram

def layouts(t: Dg.Theme) -> Dg.Svg:
    s = Dg.Svg(640, 668, "Two ways to split a norm's input across ranks",
               "Top: tensor parallel. Every rank holds all rows and a slice of the hidden dimension and of the "
               "gain (slices may differ in width); each rank sums the squares of its own columns, one float32 "
               "per row, and an all-reduce adds the partial sums, in the forward and again in the backward. "
               "Bottom: sequence parallel. Every rank holds whole rows and the full gain; the forward needs no "
               "communication, and the backward all-reduces the gain gradient, d float32 values per step.", t)
    ranks = (t.rms, t.ln, t.bn)
    x0, w, rh = 24, 360, 34

    # tensor parallel: column blocks of uneven width, the gain split the same way
    s.text(x0, 34, "Tensor parallel: columns split", t.fg, size=25, weight="bold")
    y0, widths = 56, (150, 120, 90)
    cx = x0
    for k, cw in enumerate(widths):
        s.rect(cx, y0, cw, 4 * rh, ranks[k], 2.0, fill=ranks[k], fill_opacity=0.2, rx=2)
        s.rect(cx, y0 + 4 * rh + 14, cw, 20, ranks[k], 1.6, fill=ranks[k], fill_opacity=0.35, rx=2)
        s.text(cx + cw / 2, y0 + 4 * rh + 66, f"rank {k}", ranks[k], size=24, anchor="middle")
        cx += cw
    for r in range(1, 4):
        s.line(x0, y0 + r * rh, x0 + w, y0 + r * rh, t.muted, 1.2, dash="4 4")
    for r in range(4):
        s.arrow(x0 + w + 6, y0 + r * rh + rh / 2, x0 + w + 44, y0 + r * rh + rh / 2, t.fg, 2.0, head=10)
    s.text(x0 + w + 54, y0 + 40, "all-reduce", t.fg, size=24)
    s.text(x0 + w + 54, y0 + 74, "1 fp32 / row", t.fg, size=24)
    s.text(x0 + w + 54, y0 + 108, "each way", t.muted, size=24)
    s.text(x0 + w + 12, y0 + 4 * rh + 31, "gain w", t.fg, size=24)
    s.text(x0, 300, "each rank: sum of x² over its columns", t.muted, size=24)

    # sequence parallel: row blocks, full width, the whole gain on every rank
    s.text(x0, 362, "Sequence parallel: rows split", t.fg, size=25, weight="bold")
    y0, rows = 384, (2, 1, 1)
    cy = y0
    for k, n in enumerate(rows):
        s.rect(x0, cy, w, n * rh, ranks[k], 2.0, fill=ranks[k], fill_opacity=0.2, rx=2)
        s.text(x0 + w + 12, cy + n * rh / 2 + 9, f"rank {k}", ranks[k], size=24)
        cy += n * rh
    s.rect(x0, cy + 14, w, 20, t.fg, 1.6, fill=t.tint, fill_opacity=0.3, rx=2)
    s.text(x0 + w + 12, cy + 31, "w on all", t.fg, size=24)
    s.text(x0, cy + 82, "forward: nothing to send", t.muted, size=24)
    s.text(x0, cy + 116, "backward: all-reduce dw (d fp32)", t.fg, size=24)
    return s


def write_diagrams(out_dir: Path = PLOTS) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for theme in Dg.THEMES:
        path = out_dir / f"distributed-layouts{theme.suffix}.svg"
        provenance.write_text(path, layouts(theme).render())
        paths.append(path)
    return paths


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: tiny shapes, 3 repetitions (~1 min)")
    ap.add_argument("--diagram", action="store_true", help="only draw the layout diagram")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    provenance.check_out(ap, args.out)  # before any work: a missing directory is an argument error
    # a run with --out elsewhere (a smoke run) draws the diagrams next to its file, leaving the committed ones
    plots = PLOTS if args.out.resolve() == OUT.resolve() else args.out.parent
    for path in write_diagrams(plots):
        print(path.relative_to(REPO) if path.is_relative_to(REPO) else path)
    if args.diagram:
        return
    try:
        data = measure(args.quick)
    except Exception:
        traceback.print_exc()
        raise SystemExit(1)
    provenance.write_json(args.out, data)
    print(f"wrote {args.out} in {data['provenance'].get('duration_s')} s")
    if not args.quick and args.out.resolve() == OUT.resolve():
        # the timings are this machine's: file the run beside the other machines' (replacing only its own)
        print(f"filed this machine's run as {distributed_machines.write(data)}")


if __name__ == "__main__":
    main()
