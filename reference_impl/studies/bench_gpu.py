"""GPU benchmark of the CUDA kernels: ``python -m reference_impl.studies.bench_gpu`` (needs a CUDA device).

Run by ``scripts/gpu_check.sh`` on a lent GPU machine. For bfloat16 and float32 and shapes up to
32768 x 16384, in one run, it times the forward of: a device-to-device copy (the ceiling, measured in the
same run), ``F.rms_norm``, ``torch.compile`` of a plain RMSNorm (``reference_impl.studies.bench.plain_rms_norm``,
Llama order), ``F.layer_norm``, RMSNorm versions 1-4 of ``cuda/gpu`` and our LayerNorm; the fused
residual add + RMSNorm (version 5) against a separate add followed by version 4; and the forward+backward
of the copy, ``F.rms_norm``, ``torch.compile``, ``F.layer_norm`` and our two ops (through
``reference_impl.ops.library``). It also sweeps version 3's block size (claim C42) and times version 4 with
and without its 16-byte vector path (claim C29: widths that are or are not multiples of 8, an offset view).

Method: every implementation is first checked against a float32 PyTorch computation of the same math on
fresh random data (relative L2 error, recorded); then each is warmed up (and compiled), and timed with
CUDA events around each call, as many calls as fit in ``TIME_PER_CONFIG_S`` (between MIN and MAX), input
sets rotated so that small shapes do not run from L2; the median is reported. GB/s counts the bytes that
must move at minimum: forward 2 N b (+ the gain), residual forward 4 N b, forward+backward 5 N b (+ the
gain read twice and its gradient written), N elements of b bytes. ``frac_copy`` divides by the copy's
GB/s at the same shape and dtype (the forward copy for forward and forward+backward, two copies for the
residual case). Only this project's kernels are validated; PyTorch's own ops are taken as they are.

Writes ``docs/data/bench_gpu.json`` (device name, driver, torch and CUDA versions, and the ``provenance``
block of :mod:`reference_impl.provenance`: machine, date, the sources' hash) and, where matplotlib is present, SVG plots under ``docs/data/plots/cuda/``. The file is
rewritten after every case with ``"complete": false`` so that a run cut short still leaves its numbers.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import subprocess
from pathlib import Path

import torch
import torch.nn.functional as F

from ..provenance import finish, python_closure, record

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "docs" / "data" / "bench_gpu.json"
PLOTS = REPO / "docs" / "data" / "plots" / "cuda"
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
# the target shape first: if the run is cut short, the partial file written after each case has it
SHAPES = [(32768, 8192), (32768, 16384), (32768, 4096), (32768, 1024), (4096, 8192)]
EPS = 1e-6
FWD = ("copy", "F_rms_norm", "torch_compile", "F_layer_norm", "normlab_v1", "normlab_v2", "normlab_v3",
       "normlab_v4", "normlab_layer_norm")
RESIDUAL = ("copy_residual", "add_then_normlab_v4", "normlab_v5")
FWD_BWD = ("F_rms_norm", "torch_compile", "F_layer_norm", "normlab_rms_norm", "normlab_layer_norm")
BLOCK_SWEEP = (64, 128, 256, 512, 1024)
TARGET_SHAPE = "32768x8192"
TIME_PER_CONFIG_S = 0.15
MIN_REPEATS, MAX_REPEATS = 5, 100
ROTATE_BELOW_BYTES = 512 << 20
COMMAND = "python -m reference_impl.studies.bench_gpu"  # inputs smaller than this are rotated among several copies


def device_info() -> dict:
    p = torch.cuda.get_device_properties(0)
    info = {"name": p.name, "sm_count": p.multi_processor_count, "memory_gib": round(p.total_memory / 2**30, 1),
            "capability": f"{p.major}.{p.minor}", "l2_mib": round(getattr(p, "L2_cache_size", 0) / 2**20, 1),
            "torch": torch.__version__, "cuda_runtime": torch.version.cuda, "python": platform.python_version()}
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
        info["driver"] = q.stdout.strip().splitlines()[0] if q.returncode == 0 and q.stdout.strip() else "unknown"
    except (OSError, subprocess.SubprocessError):
        info["driver"] = "unknown"
    return info


_DEVICE = None


def device_info_cached() -> dict:
    global _DEVICE
    if _DEVICE is None:
        _DEVICE = device_info()
    return _DEVICE


def _write(out: Path, data: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(out)


def min_bytes(rows: int, d: int, dtype, mode: str, impl: str) -> int:
    b = torch.empty((), dtype=dtype).element_size()
    n = rows * d
    params = 0 if impl.startswith("copy") else (2 if "layer_norm" in impl else 1) * d * b
    if mode == "forward":
        return 2 * n * b + params
    if mode == "residual":
        return 4 * n * b + params
    return 5 * n * b + 2 * params


_compiled = None


def _impl(impl: str, d: int):
    """f(x, w, b, res) for one implementation (forward)."""
    from ..ops import cuda as cuda_ops
    from ..ops import library as fused
    from .bench import plain_rms_norm

    if impl == "copy":
        return lambda x, w, b, r: x.clone()
    if impl == "copy_residual":  # the same 4 N b as the residual forward: two reads, two writes
        return lambda x, w, b, r: (x.clone(), r.clone())
    if impl == "F_rms_norm":
        return lambda x, w, b, r: F.rms_norm(x, (d,), w, EPS)
    if impl == "torch_compile":
        global _compiled
        if _compiled is None:  # one wrapper: it recompiles per shape and dtype (static shapes, its best case)
            _compiled = torch.compile(plain_rms_norm, dynamic=False)
        c = _compiled
        return lambda x, w, b, r: c(x, w, EPS)
    if impl == "F_layer_norm":
        return lambda x, w, b, r: F.layer_norm(x, (d,), w, b, 1e-5)
    if impl.startswith("normlab_v") and impl[-1] in "1234":
        v = int(impl[-1])
        return lambda x, w, b, r: cuda_ops.rms_norm_fwd_version(x, w, EPS, v, "llama")[0]
    if impl == "normlab_v5":
        return lambda x, w, b, r: fused.fused_rms_norm(x, w, EPS, residual=r)
    if impl == "add_then_normlab_v4":
        return lambda x, w, b, r: (fused.fused_rms_norm(x + r, w, EPS), None)
    if impl == "normlab_rms_norm":
        return lambda x, w, b, r: fused.fused_rms_norm(x, w, EPS)
    if impl == "normlab_layer_norm":
        return lambda x, w, b, r: fused.fused_layer_norm(x, w, b, 1e-5)
    raise ValueError(impl)


def _reference(impl: str, x, w, b, r):
    """float32 PyTorch computation of what impl computes (for the pre-timing check)."""
    xf, wf = x.float(), w.float()
    if impl.startswith("copy"):
        return x.float()
    if "layer_norm" in impl:
        return F.layer_norm(xf, (x.shape[-1],), wf, b.float(), 1e-5)
    h = (xf + r.float()).to(x.dtype).float() if impl in ("normlab_v5", "add_then_normlab_v4") else xf
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype).float() * wf


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def _time(fn, sets, mode) -> float:
    """Median milliseconds of one call, CUDA events around each call."""
    def call(i):
        x, w, b, r, dy = sets[i % len(sets)]
        if mode == "forward_backward":
            for t in (x, w, b):
                t.grad = None
            _first(fn(x, w, b, r)).backward(dy)
        else:
            with torch.no_grad():
                fn(x, w, b, r)

    for i in range(3):  # warm-up, compilation
        call(i)
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    call(0)
    e.record()
    torch.cuda.synchronize()
    est = max(s.elapsed_time(e), 1e-3)
    reps = int(min(MAX_REPEATS, max(MIN_REPEATS, TIME_PER_CONFIG_S * 1e3 / est)))
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for i, (a, z) in enumerate(events):
        a.record()
        call(i)
        z.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(z) for a, z in events)


def _sets(rows, d, dtype, grad: bool, seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)
    nbytes = rows * d * torch.empty((), dtype=dtype).element_size()
    k = max(1, min(4, math.ceil(ROTATE_BELOW_BYTES / max(nbytes, 1)))) if nbytes < ROTATE_BELOW_BYTES else 1
    out = []
    for _ in range(k):
        x = torch.randn(rows, d, device="cuda", dtype=dtype, generator=g)
        r = torch.randn(rows, d, device="cuda", dtype=dtype, generator=g)
        w = (1 + 0.1 * torch.randn(d, device="cuda", generator=g)).to(dtype)
        b = (0.1 * torch.randn(d, device="cuda", generator=g)).to(dtype)
        dy = torch.randn(rows, d, device="cuda", dtype=dtype, generator=g) if grad else None
        if grad:
            x, w, b = (t.requires_grad_(True) for t in (x, w, b))
        out.append((x, w, b, r, dy))
    return out


def validate(impl: str, d: int, dtype) -> float:
    """Relative L2 error of impl's forward against the float32 computation, on fresh random data."""
    sets = _sets(64, d, dtype, False, 7)
    x, w, b, r, _ = sets[0]
    with torch.no_grad():
        got = _first(_impl(impl, d)(x, w, b, r)).float()
        want = _reference(impl, x, w, b, r)
    return float(torch.linalg.vector_norm(got - want) / torch.linalg.vector_norm(want))


def sources() -> list[str]:
    """What changes the numbers: the CUDA kernels (comments stripped), the op schemas and this command."""
    from . import cuda_resources as cuda_build_report

    kernels = [s for s in cuda_build_report.sources() if s.startswith("cuda/")]
    return kernels + ["cuda/ops.cpp"] + python_closure("reference_impl/studies/bench_gpu.py")


def run(shapes=SHAPES, dtypes=DTYPES, out: Path = OUT, plots: Path | None = PLOTS, quick: bool = False) -> dict:
    from tqdm import tqdm

    from ..ops import cuda as cuda_ops
    from . import cuda_resources as cuda_build_report

    cuda_ops.ensure_loaded()
    prov = record(COMMAND, sources(), quick=quick, packages=("torch", "triton"),
                  machine_extra={"device": device_info_cached()},
                  hashed_settings=cuda_build_report.hashed_settings())
    try:  # one compiled graph per (shape, dtype, mode): let all of them compile instead of falling back
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    except AttributeError:
        pass
    results: dict = {}
    jobs = [(dn, s, m, i) for dn in dtypes for s in shapes
            for m, impls in (("forward", FWD), ("residual", RESIDUAL), ("forward_backward", FWD_BWD)) for i in impls]
    checks: dict = {}
    bar = tqdm(jobs, desc="bench_gpu", unit="case")
    cache: dict = {}
    for dn, (rows, d), mode, impl in bar:
        dtype = dtypes[dn]
        key = f"{rows}x{d}"
        bar.set_postfix_str(f"{dn} {key} {mode} {impl}")
        ck = f"{impl}|{dn}|{d}|{mode == 'residual'}"
        if ck not in checks and mode != "forward_backward" and impl.startswith(("normlab", "add_then")):
            checks[ck] = validate(impl, d, dtype)
        skey = (dn, rows, d, mode == "forward_backward")
        if skey not in cache:
            cache.clear()
            torch.cuda.empty_cache()
            cache[skey] = _sets(rows, d, dtype, mode == "forward_backward", 1)
        ms = _time(_impl(impl, d), cache[skey], mode)
        nb = min_bytes(rows, d, dtype, "forward" if mode == "forward" else mode, impl)
        results.setdefault(dn, {}).setdefault(key, {}).setdefault(mode, {})[impl] = {
            "ms": round(ms, 5), "gbps": round(nb / ms / 1e6, 1), "bytes": nb}
        _write(out, {"provenance": {k: v for k, v in prov.items() if k != "_t0"}, "complete": False,
                     "device": device_info_cached(), "results": results})
    cache.clear()
    for dn, by_shape in results.items():
        for key, by_mode in by_shape.items():
            for mode, by_impl in by_mode.items():
                # the copy's bandwidth is the ceiling for every mode (a backward through clone() would not
                # move 5 N b: autograd may hand dy to x.grad without copying it)
                ceiling = by_impl["copy_residual"]["gbps"] if mode == "residual" else by_mode["forward"]["copy"]["gbps"]
                for v in by_impl.values():
                    v["frac_copy"] = round(v["gbps"] / ceiling, 4)
    # version 3's block size (claim C42) at the target shape in bfloat16
    sweep = {}
    rows, d = (int(t) for t in TARGET_SHAPE.split("x"))
    sets = _sets(rows, d, torch.bfloat16, False, 3)
    for block in BLOCK_SWEEP:
        fn = lambda x, w, b, r, blk=block: cuda_ops.rms_norm_fwd_version(x, w, EPS, 3, "llama", blk)[0]  # noqa: E731
        ms = _time(fn, sets, "forward")
        sweep[str(block)] = {"ms": round(ms, 5), "gbps": round(min_bytes(rows, d, torch.bfloat16, "forward", "v3") / ms / 1e6, 1)}
    # the 16-byte vector path against its scalar fallback (claim C29): bf16 rows of 8192 (vectorized),
    # 8200 (a multiple of 8: vectorized), 8191 (not a multiple of 8) and 8192 starting one element past a
    # 16-byte boundary (an offset view); version 4, the op behind fused_rms_norm
    vector_path = {}
    # and a row too long for registers (65536 bf16: the streaming branch), 4096 rows of it
    for label, n, d, offset in (("d8192", rows, 8192, 0), ("d8200", rows, 8200, 0), ("d8191", rows, 8191, 0),
                                ("d8192_offset1", rows, 8192, 1), ("d65536_streaming", 4096, 65536, 0)):
        g = torch.Generator(device="cuda").manual_seed(5)
        base = torch.randn(n * d + offset, device="cuda", dtype=torch.bfloat16, generator=g)
        x = base[offset:].view(n, d)
        w = torch.ones(d, device="cuda", dtype=torch.bfloat16)
        fn = lambda x, w, b, r: cuda_ops.rms_norm_fwd_version(x, w, EPS, 4, "llama")[0]  # noqa: E731
        ms = _time(fn, [(x, w, None, None, None)], "forward")
        nb = min_bytes(n, d, torch.bfloat16, "forward", "v4")
        vector_path[label] = {"rows": n, "d": d, "offset_elements": offset, "ms": round(ms, 5),
                              "gbps": round(nb / ms / 1e6, 1)}
        del base, x
    data = {
        "provenance": finish(prov),
        "complete": True,
        "what": "GPU forward and forward+backward times of RMSNorm/LayerNorm implementations; GB/s counts minimum bytes",
        "device": device_info_cached(),
        "method": {"timing": "CUDA events per call, median", "time_per_config_s": TIME_PER_CONFIG_S,
                   "repeats": [MIN_REPEATS, MAX_REPEATS], "eps": EPS, "convention": "llama"},
        "validation_rel_l2": checks,
        "results": results,
        "v3_block_sweep_bf16": {"shape": TARGET_SHAPE, "blocks": sweep},
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


def summarize(results: dict) -> dict:
    """The issue's targets at bf16 32768x8192, and the ratios the claims ledger needs (C16, C20)."""
    s: dict = {}
    bf = results.get("bfloat16", {}).get(TARGET_SHAPE)
    if bf:
        f, fb = bf["forward"], bf["forward_backward"]
        s["target_bf16_32768x8192"] = {
            "fwd_frac_copy": f["normlab_v4"]["frac_copy"],
            "fwd_meets_90pct_copy": f["normlab_v4"]["frac_copy"] >= 0.9,
            "fwd_faster_than_F_rms_norm": f["normlab_v4"]["ms"] < f["F_rms_norm"]["ms"],
            "fwd_faster_than_torch_compile": f["normlab_v4"]["ms"] < f["torch_compile"]["ms"],
            "fwd_bwd_frac_copy": fb["normlab_rms_norm"]["frac_copy"],
            "fwd_bwd_meets_70pct_copy": fb["normlab_rms_norm"]["frac_copy"] >= 0.7,
        }
    s["rms_over_ln_speedup_fwd"] = {
        dn: {k: round(v["forward"]["normlab_layer_norm"]["ms"] / v["forward"]["normlab_v4"]["ms"], 3)
             for k, v in by.items()} for dn, by in results.items()}
    s["F_rms_over_F_ln_speedup_fwd"] = {
        dn: {k: round(v["forward"]["F_layer_norm"]["ms"] / v["forward"]["F_rms_norm"]["ms"], 3)
             for k, v in by.items()} for dn, by in results.items()}
    if "bfloat16" in results and "float32" in results:
        s["bf16_over_fp32_speedup_fwd"] = {
            k: round(results["float32"][k]["forward"]["normlab_v4"]["ms"] / v["forward"]["normlab_v4"]["ms"], 3)
            for k, v in results["bfloat16"].items() if k in results["float32"]}
    return s


def plot(data: dict, out_dir: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for dn, by_shape in data["results"].items():
        for mode in ("forward", "residual", "forward_backward"):
            shapes = list(by_shape)
            impls = list(by_shape[shapes[0]][mode])
            fig, ax = plt.subplots(figsize=(8, 4))
            width = 0.8 / len(impls)
            for j, impl in enumerate(impls):
                ax.bar([i + j * width for i in range(len(shapes))], [by_shape[s][mode][impl]["gbps"] for s in shapes],
                       width, label=impl)
            ax.set_xticks([i + 0.4 - width / 2 for i in range(len(shapes))], shapes)
            ax.set_ylabel("GB/s (minimum bytes)")
            ax.set_title(f"{data['device']['name']}, {dn}, {mode} ({data['provenance']['date'][:10]})")
            ax.legend(fontsize=7, ncol=3)
            fig.tight_layout()
            path = out_dir / f"bench_gpu_{dn}_{mode}.svg"
            fig.savefig(path, metadata={"Date": None})
            plt.close(fig)
            written.append(str(path))
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--plot-only", action="store_true", help="render the SVG plots from an existing --out file")
    ap.add_argument("--quick", action="store_true", help="two small shapes (a smoke run)")
    args = ap.parse_args(argv)
    if args.plot_only:
        for p in plot(json.loads(args.out.read_text()), PLOTS):
            print(p)
        return 0
    if not torch.cuda.is_available():
        print("bench_gpu: no CUDA device; nothing measured (run scripts/gpu_check.sh on a GPU machine)")
        return 2
    shapes = [(1024, 1024), (4096, 4096)] if args.quick else SHAPES
    data = run(shapes=shapes, out=args.out, quick=args.quick)
    print(json.dumps(data["summary"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
