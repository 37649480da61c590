"""What the GPU benchmark runs: settings, the device and peers, the implementations and their validation.

The implementations are part of the timed loop: a change here changes the numbers (see ``sources()``).
"""
from __future__ import annotations

import json
import math
import platform
import subprocess
from pathlib import Path
import torch
import torch.nn.functional as F



REPO = Path(__file__).resolve().parents[3]
OUT = REPO / "docs" / "data" / "bench_gpu.json"
PLOTS = REPO / "docs" / "data" / "plots" / "cuda"
COMMAND = "python -m reference_impl.studies.bench_gpu"
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
# the target shape first: if the run is cut short, the partial file written after each group has it
SHAPES = [(32768, 8192), (16384, 4096), (4096, 1024)]
QUICK_SHAPES = [(2048, 1024), (1024, 4096)]
EPS = 1e-6
LN_EPS = 1e-5
FWD = ("copy", "F_rms_norm", "torch_compile", "F_layer_norm", "normlab_v1", "normlab_v2", "normlab_v3",
       "normlab_v4", "normlab_layer_norm", "triton_rms_norm", "triton_layer_norm", "liger_rms_norm")
RESIDUAL = ("copy_residual", "add_then_normlab_v4", "normlab_v5", "triton_residual")
FWD_BWD = ("F_rms_norm", "torch_compile", "F_layer_norm", "normlab_rms_norm", "normlab_layer_norm",
           "triton_rms_norm", "triton_layer_norm", "liger_rms_norm")
MODES = (("forward", FWD), ("residual", RESIDUAL), ("forward_backward", FWD_BWD))
PEERS = ("F_rms_norm", "torch_compile", "F_layer_norm", "liger_rms_norm")  # not ours: validated, not tuned
BLOCK_SWEEP = (64, 128, 256, 512, 1024)
TARGET_SHAPE = "32768x8192"
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
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(out)


# ------------------------------------------------------------------------------------------------------
# implementations
# ------------------------------------------------------------------------------------------------------

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
    """f(s) for one implementation, s an input set (x, w, b, r, dy, and the copy's preallocated buffers)."""
    from ...ops import cuda as cuda_ops
    from ...ops import library as fused
    from ...ops import triton_norm as tn
    from ..bench import plain_rms_norm

    if impl == "copy":  # into a reused buffer: a clone() would also time the allocator
        return lambda s: s["buf"].copy_(s["x"])
    if impl == "copy_residual":  # the same 4 N b as the residual forward: two reads, two writes
        return lambda s: (s["buf"].copy_(s["x"]), s["buf2"].copy_(s["r"]))
    if impl == "F_rms_norm":
        return lambda s: F.rms_norm(s["x"], (d,), s["w"], EPS)
    if impl == "torch_compile":
        global _compiled
        if _compiled is None:  # one wrapper: it recompiles per shape and dtype (static shapes, its best case)
            _compiled = torch.compile(plain_rms_norm, dynamic=False)
        c = _compiled
        return lambda s: c(s["x"], s["w"], EPS)
    if impl == "F_layer_norm":
        return lambda s: F.layer_norm(s["x"], (d,), s["w"], s["b"], LN_EPS)
    if impl.startswith("normlab_v") and impl[-1] in "1234":
        v = int(impl[-1])
        return lambda s: cuda_ops.rms_norm_fwd_version(s["x"], s["w"], EPS, v, "llama")[0]
    if impl == "normlab_v5":
        return lambda s: fused.fused_rms_norm(s["x"], s["w"], EPS, residual=s["r"])
    if impl == "add_then_normlab_v4":
        return lambda s: (fused.fused_rms_norm(s["x"] + s["r"], s["w"], EPS), None)
    if impl == "normlab_rms_norm":
        return lambda s: fused.fused_rms_norm(s["x"], s["w"], EPS)
    if impl == "normlab_layer_norm":
        return lambda s: fused.fused_layer_norm(s["x"], s["w"], s["b"], LN_EPS)
    if impl == "triton_rms_norm":
        return lambda s: tn.triton_rms_norm(s["x"], s["w"], EPS)
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
    g = torch.Generator(device="cuda").manual_seed(seed)
    nbytes = rows * d * torch.empty((), dtype=dtype).element_size()
    k = count or (min(MAX_SETS, math.ceil(ROTATE_BELOW_BYTES / max(nbytes, 1))) if nbytes < ROTATE_BELOW_BYTES else 1)
    out = []
    for _ in range(k):
        x = torch.randn(rows, d, device="cuda", dtype=dtype, generator=g)
        r = torch.randn(rows, d, device="cuda", dtype=dtype, generator=g)
        w = (1 + 0.1 * torch.randn(d, device="cuda", generator=g)).to(dtype)
        b = (0.1 * torch.randn(d, device="cuda", generator=g)).to(dtype)
        dy = torch.randn(rows, d, device="cuda", dtype=dtype, generator=g) if grad else None
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
