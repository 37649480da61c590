"""GPU benchmark of the norms: ``python -m reference_impl.studies.bench_gpu`` (needs a CUDA device).

Run by ``scripts/gpu_check.sh`` on a lent GPU machine. For bfloat16 and float32 and rows x hidden from
4096 x 1024 to 32768 x 8192, in one run, it times:

- forward: a device-to-device copy into a preallocated buffer (the ceiling, measured in the same run),
  ``F.rms_norm``, ``torch.compile`` of a plain RMSNorm (``reference_impl.studies.bench.plain_rms_norm``,
  Llama order), ``F.layer_norm``, RMSNorm versions 1-4 of ``cuda/gpu``, our CUDA LayerNorm, our Triton
  RMSNorm and LayerNorm (``reference_impl.ops.triton_norm``) and Liger-Kernel's RMSNorm
  (``liger_kernel.ops.rms_norm.LigerRMSNormFunction``, casting mode ``"llama"``, ``in_place=False`` so
  that the timed calls leave their inputs unchanged);
- the fused residual add + RMSNorm: version 5 and the Triton kernel against a separate add followed by
  version 4, and against two copies (the same 4 N b);
- forward+backward: ``F.rms_norm``, ``torch.compile``, ``F.layer_norm``, our CUDA ops, our Triton ops and
  Liger-Kernel's RMSNorm;
- version 3's block size (claim C42) and version 4 with and without its 16-byte vector path (claim C29);
- short rows (bf16 heads of 64, 128 and 256, the QK-norm case): version 4 (one row per block), version 6
  (several rows per block, what the op runs for them) and the Triton forward with one row per program
  against its block-row kernel (``reference_impl.ops.triton_rows``), with the copy and ``F.rms_norm``.

Method: every implementation is first checked against a float32 PyTorch computation of the same math on
the group's own inputs (relative L2 error of the output and, for forward+backward, of dx and dweight;
recorded, with a loose sanity limit that flags a broken kernel). Then, per dtype, shape and mode, each implementation is warmed up (compiled), and timed in
``REPS`` repetitions that interleave the implementations (implementation order rotated in each
repetition). A repetition times ``calls`` calls with CUDA events around each and keeps their median; the
data file gives the median over the repetitions and their min and max (``ms``, ``ms_min``, ``ms_max``,
``reps_ms``). Inputs smaller than 512 MiB are rotated among several copies so that small shapes do not
run from L2. GB/s counts the bytes that must move at minimum: forward 2 N b (+ the gain), residual
forward 4 N b, forward+backward 5 N b (+ the gain read twice and its gradient written), N elements of b
bytes. ``frac_copy`` divides by the copy's GB/s at the same shape and dtype, repetition by repetition
(the copy ran in the same repetition), with min and max over the repetitions; forward+backward divides
by the forward copy's median.

Writes ``docs/data/bench_gpu.json`` (device, driver, the versions of torch, triton and liger-kernel, and
the ``provenance`` block of :mod:`reference_impl.provenance`) and, where matplotlib is present, SVG plots
under ``docs/data/plots/cuda/``. The file is rewritten after every group with ``"complete": false`` so
that a run cut short still leaves its numbers. ``--dry-run`` runs every step on tiny shapes without a GPU,
on the stand-ins of :mod:`reference_impl.studies.gpu_device` (the CUDA emulation, the Triton interpreter),
and writes ``build/bench_gpu_dry.json`` unless ``--out`` says otherwise; ``--quick`` is a smoke run on two
small shapes, written to ``build/bench_gpu_quick.json`` unless ``--out`` says otherwise (never commit
either as the measurement).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from ..provenance import finish, python_closure, record, write_json
from .bench_gpu_report import TARGET_SHAPE, plot, summarize
from .gpu_device import Device

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "docs" / "data" / "bench_gpu.json"
PLOTS = REPO / "docs" / "data" / "plots" / "cuda"
COMMAND = "python -m reference_impl.studies.bench_gpu"
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
# the target shape first: if the run is cut short, the partial file written after each group has it
SHAPES = [(32768, 8192), (16384, 4096), (4096, 1024)]
QUICK_SHAPES = [(2048, 1024), (1024, 4096)]
# short rows, bf16: QK-norm's heads (rows = tokens x heads)
SHORT_SHAPES = [(262144, 64), (262144, 128), (131072, 256)]
# the dry run's tiny shapes: every group of the real run, small enough for the CPU emulation
DRY_SHAPES = [(8, 256)]
DRY_SHORT_SHAPES = [(40, 64), (9, 256)]
EPS = 1e-6
LN_EPS = 1e-5
FWD = ("copy", "F_rms_norm", "torch_compile", "F_layer_norm", "normlab_v1", "normlab_v2", "normlab_v3",
       "normlab_v4", "normlab_layer_norm", "triton_rms_norm", "triton_layer_norm", "liger_rms_norm")
RESIDUAL = ("copy_residual", "add_then_normlab_v4", "normlab_v5", "triton_residual")
FWD_BWD = ("F_rms_norm", "torch_compile", "F_layer_norm", "normlab_rms_norm", "normlab_layer_norm",
           "triton_rms_norm", "triton_layer_norm", "liger_rms_norm")
SHORT = ("copy", "F_rms_norm", "normlab_v4", "normlab_v6", "triton_one_row", "triton_rms_norm")
MODES = (("forward", FWD), ("residual", RESIDUAL), ("forward_backward", FWD_BWD))
PEERS = ("F_rms_norm", "torch_compile", "F_layer_norm", "liger_rms_norm")  # not ours: validated, not tuned
BLOCK_SWEEP = (64, 128, 256, 512, 1024)
REPS = 3                       # interleaved repetitions per (dtype, shape, mode)
TIME_PER_REP_S = 0.025         # timed calls per repetition: as many as fit, between MIN_CALLS and MAX_CALLS
MIN_CALLS, MAX_CALLS = 3, 40
ROTATE_BELOW_BYTES = 512 << 20  # inputs smaller than this are rotated among several copies
MAX_SETS = 16
LIGER_API = ("liger_kernel.ops.rms_norm.LigerRMSNormFunction.apply(x, w, eps, offset=0.0, casting_mode='llama', "
             "in_place=False)")


# ------------------------------------------------------------------------------------------------------
# environment
# ------------------------------------------------------------------------------------------------------

DEV = Device()
"""Where the benchmark runs: the GPU, or (``--dry-run``) the CPU stand-ins."""


_DEVICE = None


def device_info_cached() -> dict:
    global _DEVICE
    if _DEVICE is None:
        _DEVICE = DEV.info()
    return _DEVICE


_LIGER: dict | None = None


def liger() -> dict:
    """Liger-Kernel's RMSNorm autograd function, or why it is not available: ``{"fn", "version"}`` or
    ``{"error"}``. Only its ops module is imported (no model patching)."""
    global _LIGER
    if _LIGER is None:
        try:
            from importlib.metadata import version

            from liger_kernel.ops.rms_norm import LigerRMSNormFunction

            _LIGER = {"fn": LigerRMSNormFunction, "version": version("liger-kernel")}
        except Exception as exc:  # any import failure only removes Liger from the comparison
            _LIGER = {"error": f"{type(exc).__name__}: {exc}"}
    return _LIGER


def peers_info() -> dict:
    import triton

    lk = liger()
    info = {"triton": triton.__version__, "liger_kernel": {"api": LIGER_API}}
    if "error" in lk:
        info["liger_kernel"]["error"] = lk["error"]
    else:
        info["liger_kernel"]["version"] = lk["version"]
    return info


def available(impl: str) -> bool:
    return not impl.startswith("liger") or "fn" in liger()


def _write(out: Path, data: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, data)


# ------------------------------------------------------------------------------------------------------
# implementations
# ------------------------------------------------------------------------------------------------------

def min_bytes(rows: int, d: int, dtype, mode: str, impl: str) -> int:
    b = torch.empty((), dtype=dtype).element_size()
    n = rows * d
    params = 0 if impl.startswith("copy") else (2 if "layer_norm" in impl else 1) * d * b
    if mode in ("forward", "short_rows"):
        return 2 * n * b + params
    if mode == "residual":
        return 4 * n * b + params
    return 5 * n * b + 2 * params


_compiled = None


def _impl(impl: str, d: int, mode: str = "forward"):
    """f(s) for one implementation, s an input set (x, w, b, r, dy, and the copy's preallocated buffers).
    The forward of our CUDA ops runs on DEV (the emulation in a dry run); forward+backward goes through
    the autograd of :mod:`reference_impl.ops.library`."""
    from ..ops import library as fused
    from ..ops import triton_norm as tn
    from .bench import plain_rms_norm

    if impl == "copy":  # into a reused buffer: a clone() would also time the allocator
        return lambda s: s["buf"].copy_(s["x"])
    if impl == "copy_residual":  # the same 4 N b as the residual forward: two reads, two writes
        return lambda s: (s["buf"].copy_(s["x"]), s["buf2"].copy_(s["r"]))
    if impl == "F_rms_norm":
        return lambda s: F.rms_norm(s["x"], (d,), s["w"], EPS)
    if impl == "torch_compile":
        global _compiled
        if _compiled is None:  # one wrapper: it recompiles per shape and dtype (static shapes, its best case)
            _compiled = torch.compile(plain_rms_norm, dynamic=False, backend="eager" if DEV.emulated else "inductor")
        c = _compiled
        return lambda s: c(s["x"], s["w"], EPS)
    if impl == "F_layer_norm":
        return lambda s: F.layer_norm(s["x"], (d,), s["w"], s["b"], LN_EPS)
    if impl.startswith("normlab_v") and impl[-1] in "12346":
        v = int(impl[-1])
        return lambda s: DEV.rms_version(s["x"], s["w"], EPS, v)
    if impl == "normlab_v5":
        return lambda s: DEV.rms_forward(s["x"], s["w"], EPS, residual=s["r"])
    if impl == "add_then_normlab_v4":
        return lambda s: (DEV.rms_version(s["x"] + s["r"], s["w"], EPS, 4), None)
    if impl == "normlab_rms_norm":
        if mode != "forward_backward":
            return lambda s: DEV.rms_forward(s["x"], s["w"], EPS)
        return lambda s: fused.fused_rms_norm(s["x"], s["w"], EPS)
    if impl == "normlab_layer_norm":
        if mode != "forward_backward":
            return lambda s: DEV.layer_norm_forward(s["x"], s["w"], s["b"], LN_EPS)
        return lambda s: fused.fused_layer_norm(s["x"], s["w"], s["b"], LN_EPS)
    if impl == "triton_rms_norm":  # short rows: the block-row kernel
        return lambda s: tn.triton_rms_norm(s["x"], s["w"], EPS)
    if impl == "triton_one_row":  # a given tile width keeps one row per program
        tile = max(16, 1 << max(0, d - 1).bit_length())
        return lambda s: tn.triton_rms_norm(s["x"], s["w"], EPS, block_size=tile)
    if impl == "triton_residual":
        return lambda s: tn.triton_rms_norm(s["x"], s["w"], EPS, residual=s["r"])
    if impl == "triton_layer_norm":
        return lambda s: tn.triton_layer_norm(s["x"], s["w"], s["b"], LN_EPS)
    if impl == "liger_rms_norm":
        fn = liger().get("fn")
        if fn is None:
            raise RuntimeError(f"Liger-Kernel is not available: {liger()['error']}")
        return lambda s: fn.apply(s["x"], s["w"], EPS, 0.0, "llama", False)
    raise ValueError(f"unknown implementation {impl!r}")


def _reference(impl: str, s: dict):
    """float32 PyTorch computation of what impl computes (for the pre-timing check)."""
    x, w, b, r = s["x"], s["w"], s["b"], s["r"]
    xf, wf = x.float(), w.float()
    if impl.startswith("copy"):
        return xf
    if "layer_norm" in impl:
        return F.layer_norm(xf, (x.shape[-1],), wf, b.float(), LN_EPS)
    fused_add = impl in ("normlab_v5", "add_then_normlab_v4", "triton_residual")
    h = (xf + r.float()).to(x.dtype).float() if fused_add else xf
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype).float() * wf


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def _sets(rows, d, dtype, grad: bool, seed: int, count: int | None = None):
    g = DEV.generator(seed)
    nbytes = rows * d * torch.empty((), dtype=dtype).element_size()
    k = count or (min(MAX_SETS, math.ceil(ROTATE_BELOW_BYTES / max(nbytes, 1))) if nbytes < ROTATE_BELOW_BYTES else 1)
    out = []
    for _ in range(k):
        x = torch.randn(rows, d, device=DEV.type, dtype=dtype, generator=g)
        r = torch.randn(rows, d, device=DEV.type, dtype=dtype, generator=g)
        w = (1 + 0.1 * torch.randn(d, device=DEV.type, generator=g)).to(dtype)
        b = (0.1 * torch.randn(d, device=DEV.type, generator=g)).to(dtype)
        dy = torch.randn(rows, d, device=DEV.type, dtype=dtype, generator=g) if grad else None
        if grad:
            x, w, b = (t.requires_grad_(True) for t in (x, w, b))
        s = {"x": x, "w": w, "b": b, "r": r, "dy": dy}
        if not grad:
            s["buf"], s["buf2"] = torch.empty_like(x), torch.empty_like(x)
        out.append(s)
    return out


def _rel(got, want) -> float:
    return float(torch.linalg.vector_norm(got.float() - want.float()) / torch.linalg.vector_norm(want.float()))


def validate(fn, impl: str, s: dict, mode: str) -> dict:
    """Relative L2 errors of impl against the float32 computation of the same math, on the group's own
    first input set (the timed shape, so torch.compile compiles nothing extra): the output, and for
    forward+backward also dx and dweight (float32 autograd)."""
    plain = {k: (v.detach() if torch.is_tensor(v) else v) for k, v in s.items()}
    if mode != "forward_backward":
        with torch.no_grad():
            return {"y": _rel(_first(fn(s)), _reference(impl, plain))}
    for t in (s["x"], s["w"], s["b"]):
        t.grad = None
    y = _first(fn(s))
    y.backward(s["dy"])
    err = {"y": _rel(y.detach(), _reference(impl, plain))}
    xf, wf, bf = (t.detach().float().requires_grad_(True) for t in (s["x"], s["w"], s["b"]))
    if "layer_norm" in impl:
        ref = F.layer_norm(xf, (xf.shape[-1],), wf, bf, LN_EPS)
    else:
        ref = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * wf
    ref.backward(s["dy"].float())
    err["dx"], err["dw"] = _rel(s["x"].grad, xf.grad), _rel(s["w"].grad, wf.grad)
    for t in (s["x"], s["w"], s["b"]):
        t.grad = None
    return err


def validation_ok(errors: dict, dtype) -> bool:
    """Loose sanity limits (a wrong kernel is off by far more): 2**-6 relative L2 for bfloat16, 1e-4 for
    float32."""
    limit = 2.0 ** -6 if dtype == torch.bfloat16 else 1e-4
    return all(v <= limit for v in errors.values())


# ------------------------------------------------------------------------------------------------------
# timing
# ------------------------------------------------------------------------------------------------------

def _call(fn, s, mode):
    if mode == "forward_backward":
        for t in (s["x"], s["w"], s["b"]):
            t.grad = None
        _first(fn(s)).backward(s["dy"])
    else:
        with torch.no_grad():
            fn(s)


def _warm(fn, sets, mode) -> int:
    """Warm-up (and compilation) calls; returns how many calls one repetition times."""
    for i in range(1 if DEV.emulated else 3):
        _call(fn, sets[i % len(sets)], mode)
    DEV.sync()
    if DEV.emulated:  # the stand-ins' times mean nothing: one call per repetition exercises the loop
        return 1
    est = max(DEV.time_calls(lambda i: _call(fn, sets[0], mode), 1)[0], 1e-3)
    return int(min(MAX_CALLS, max(MIN_CALLS, TIME_PER_REP_S * 1e3 / est)))


def _rep(fn, sets, mode, calls: int, start: int = 0) -> float:
    """One repetition: median milliseconds of ``calls`` calls, CUDA events around each."""
    return statistics.median(DEV.time_calls(lambda i: _call(fn, sets[(start + i) % len(sets)], mode), calls))


def time_interleaved(fns: dict, sets, mode, reps: int | None = None) -> dict:
    """{name: {"reps_ms": [...], "calls": n}}: every implementation warmed up, then ``reps`` rounds that
    each time every implementation once, in an order rotated by one each round (REPS; 2 in a dry run)."""
    reps = reps or (2 if DEV.emulated else REPS)
    calls = {name: _warm(fn, sets, mode) for name, fn in fns.items()}
    out = {name: {"reps_ms": [], "calls": calls[name]} for name in fns}
    names = list(fns)
    for rep in range(reps):
        order = names[rep % len(names):] + names[:rep % len(names)]
        for name in order:
            out[name]["reps_ms"].append(_rep(fns[name], sets, mode, calls[name], start=rep))
    return out


def summarize_reps(reps_ms: list[float], nbytes: int) -> dict:
    ms = statistics.median(reps_ms)
    return {"ms": round(ms, 5), "ms_min": round(min(reps_ms), 5), "ms_max": round(max(reps_ms), 5),
            "reps_ms": [round(v, 5) for v in reps_ms], "bytes": nbytes,
            "gbps": _sig(nbytes / ms / 1e6), "gbps_min": _sig(nbytes / max(reps_ms) / 1e6),
            "gbps_max": _sig(nbytes / min(reps_ms) / 1e6)}


def _sig(v: float, digits: int = 5) -> float:
    """v to `digits` significant digits: a slow dry run's small figures stay positive, a GPU's keep 0.1 GB/s."""
    return float(f"{v:.{digits}g}")


def add_frac_copy(entry: dict, copy: dict, paired: bool) -> None:
    """frac_copy = GB/s over the copy's GB/s; paired: repetition by repetition (same rounds), else the
    copy's median. Adds the median and min/max over the repetitions."""
    if paired and len(copy["reps_ms"]) == len(entry["reps_ms"]):
        fr = [(entry["bytes"] / e) / (copy["bytes"] / c) for e, c in zip(entry["reps_ms"], copy["reps_ms"])]
    else:
        fr = [(entry["bytes"] / e) / (copy["bytes"] / copy["ms"]) for e in entry["reps_ms"]]
    entry["frac_copy"] = _sig(statistics.median(fr), 4)
    entry["frac_copy_min"] = _sig(min(fr), 4)
    entry["frac_copy_max"] = _sig(max(fr), 4)


# ------------------------------------------------------------------------------------------------------
# the run
# ------------------------------------------------------------------------------------------------------

def sources() -> list[str]:
    """What changes the numbers: the CUDA kernels (comments stripped), the op schemas, the Triton kernels
    and this command."""
    from . import cuda_resources as cuda_build_report

    kernels = [s for s in cuda_build_report.sources() if s.startswith("cuda/")]
    return kernels + ["cuda/op_checks.h", "cuda/ops.cpp", "cuda/ops.h"] + python_closure("reference_impl/studies/bench_gpu.py")


def plan(shapes, dtypes, short_shapes=SHORT_SHAPES) -> list[tuple]:
    """The (dtype name, rows, d, mode, implementations) groups, in run order: every mode for every shape
    and dtype, then the short rows in bfloat16."""
    groups = [(dn, rows, d, mode, tuple(i for i in impls if available(i)))
              for dn in dtypes for (rows, d) in shapes for mode, impls in MODES]
    return groups + [("bfloat16", rows, d, "short_rows", SHORT) for rows, d in short_shapes]


def triton_settings(shapes) -> dict:
    """The Triton kernels' launch settings per hidden size (tile, chunked or not, warps)."""
    from ..ops import triton_norm as tn

    out = {}
    from ..ops import triton_rows

    for _, d in shapes:
        block, single, fw, bw = tn._settings(d, None)
        out[str(d)] = {"block": block, "single_tile": single, "forward_warps": fw, "backward_warps": bw}
        if d <= tn.ROWS_MAX_D:
            out[str(d)]["rows_per_program"] = triton_rows.rows_settings(d)[1]
    return out


def run(shapes=SHAPES, dtypes=DTYPES, out: Path = OUT, plots: Path | None = PLOTS, quick: bool = False,
        short_shapes=SHORT_SHAPES) -> dict:
    from tqdm import tqdm

    from . import cuda_resources as cuda_build_report

    DEV.prepare()
    try:  # one compiled graph per (shape, dtype, mode): let all of them compile instead of falling back
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    except AttributeError:
        pass
    prov = record(COMMAND, sources(), quick=quick, packages=("torch", "triton", "liger-kernel"),
                  machine_extra={"device": device_info_cached()},
                  hashed_settings=cuda_build_report.hashed_settings())
    head = {"device": device_info_cached(), "peers": peers_info(),
            "triton_settings": triton_settings([*shapes, *short_shapes])}
    results: dict = {}
    checks: dict = {}
    groups = plan(shapes, {dn: dtypes[dn] for dn in dtypes}, short_shapes)
    bar = tqdm(groups, desc="bench_gpu", unit="group")
    for dn, rows, d, mode, impls in bar:
        dtype = dtypes[dn]
        key = f"{rows}x{d}"
        bar.set_postfix_str(f"{dn} {key} {mode}")
        DEV.empty_cache()
        sets = _sets(rows, d, dtype, mode == "forward_backward", 1)
        fns = {i: _impl(i, d, mode) for i in impls}
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
        DEV.empty_cache()
        timed = time_interleaved(fns, sets, mode)
        del sets
        group = results.setdefault(dn, {}).setdefault(key, {}).setdefault(mode, {})
        for impl in fns:
            group[impl] = summarize_reps(timed[impl]["reps_ms"], min_bytes(rows, d, dtype, mode, impl))
            group[impl]["calls_per_rep"] = timed[impl]["calls"]
        if mode == "residual":
            for v in group.values():
                add_frac_copy(v, group["copy_residual"], paired=True)
        elif mode in ("forward", "short_rows"):
            for v in group.values():
                add_frac_copy(v, group["copy"], paired=True)
        else:  # forward+backward against the forward copy of the same shape (an earlier group)
            for v in group.values():
                add_frac_copy(v, results[dn][key]["forward"]["copy"], paired=False)
        _write(out, {"provenance": {k: v for k, v in prov.items() if k != "_t0"}, "complete": False, **head,
                     "validation_rel_l2": checks, "results": results})
    # version 3's block size (claim C42) at the target shape in bfloat16 (the first shape in quick mode)
    rows, d = shapes[0] if quick else (int(t) for t in TARGET_SHAPE.split("x"))
    rows = 1 if DEV.emulated else rows  # a 1024-thread block is 1024 host threads in the emulation
    sets = _sets(rows, d, torch.bfloat16, False, 3)
    fns = {str(blk): (lambda s, blk=blk: DEV.rms_version(s["x"], s["w"], EPS, 3, blk)) for blk in BLOCK_SWEEP}
    timed = time_interleaved(fns, sets, "forward")
    sweep = {blk: summarize_reps(t["reps_ms"], min_bytes(rows, d, torch.bfloat16, "forward", "v3"))
             for blk, t in timed.items()}
    del sets
    # the 16-byte vector path against its scalar fallback (claim C29): bf16 rows of 8192 (vectorized),
    # 8200 (a multiple of 8: vectorized), 8191 (not a multiple of 8) and 8192 starting one element past a
    # 16-byte boundary (an offset view); version 4, the op behind fused_rms_norm; and a row too long for
    # registers (65536 bf16: the streaming branch), 4096 rows of it
    vector_path = {}
    n_vec = 2 if DEV.emulated else 4096 if quick else 32768
    for label, n, dv, offset in (("d8192", n_vec, 8192, 0), ("d8200", n_vec, 8200, 0), ("d8191", n_vec, 8191, 0),
                                 ("d8192_offset1", n_vec, 8192, 1),
                                 ("d65536_streaming", 1 if DEV.emulated else 512 if quick else 4096, 65536, 0)):
        g = DEV.generator(5)
        base = torch.randn(n * dv + offset, device=DEV.type, dtype=torch.bfloat16, generator=g)
        s = {"x": base[offset:].view(n, dv), "w": torch.ones(dv, device=DEV.type, dtype=torch.bfloat16)}
        timed = time_interleaved({"v4": lambda s: DEV.rms_version(s["x"], s["w"], EPS, 4)}, [s], "forward")
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT, help="data file (default docs/data/bench_gpu.json)")
    ap.add_argument("--plot-only", action="store_true", help="render the SVG plots from an existing --out file")
    ap.add_argument("--quick", action="store_true", help="two small shapes (a smoke run; do not commit its file)")
    ap.add_argument("--dry-run", action="store_true",
                    help="every step on tiny shapes on the CPU stand-ins (CUDA emulation, Triton interpreter); no GPU")
    ap.add_argument("--no-plots", action="store_true", help="write no SVG plots")
    args = ap.parse_args(argv)
    shapes = QUICK_SHAPES if args.quick else SHAPES
    if args.plot_only:
        for p in plot(json.loads(args.out.read_text()), PLOTS):
            print(p)
        return 0
    if args.dry_run:
        global DEV
        DEV = Device(emulated=True)
        out = REPO / "build" / "bench_gpu_dry.json" if args.out == OUT else args.out  # never the measurement
        data = run(shapes=DRY_SHAPES, out=out, plots=None, quick=True, short_shapes=DRY_SHORT_SHAPES)
        checks = data["validation_rel_l2"]
        # a peer's Triton kernel may not run under the interpreter (Liger-Kernel's does not): left out, noted
        bad = sorted(k for k, v in checks.items() if not v["ok"] and k.split("|")[0] not in PEERS)
        peers = sorted(k for k, v in checks.items() if not v["ok"] and k.split("|")[0] in PEERS)
        cases = sum(len(m) for by in data["results"].values() for g in by.values() for m in g.values())
        print(f"bench_gpu --dry-run: wrote {out}: {cases} timed cases, {len(checks)} validated; "
              f"ours failed: {bad or 'none'}; peers left out on the stand-ins: {peers or 'none'}")
        return 1 if bad else 0
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
