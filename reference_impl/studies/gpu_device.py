"""Where ``bench_gpu`` runs: a CUDA device, or the CPU stand-ins of ``scripts/gpu_check.sh --dry-run``.

The stand-ins run every step of the benchmark without a GPU, in seconds: ``normlab``'s CUDA kernels through
their CPU emulation (``torch.ops.normlab_emu``, the same glue, launchers and kernels; see
:func:`reference_impl.ops.build.load_emulation_library`), the Triton kernels under Triton's interpreter
(``TRITON_INTERPRET=1``, set before ``triton`` is first imported), PyTorch's own ops on CPU tensors,
``torch.compile`` with its eager backend (no code generation), and wall-clock time instead of CUDA events.
The emulation has no autograd registration, so forward+backward of our ops runs the CPU kernels there.
Its times say nothing about a GPU; what it checks is the benchmark itself: imports, names, validation
before timing, the data file's layout.
"""
from __future__ import annotations

import os
import platform
import subprocess
import time

import torch


class Device:
    """The device the benchmark's tensors live on, its clock, and how it calls ``normlab``'s CUDA ops."""

    def __init__(self, emulated: bool = False):
        self.emulated = emulated
        self.type = "cpu" if emulated else "cuda"

    def prepare(self) -> None:
        """Load the libraries: the CUDA kernels, or the emulation and the Triton interpreter."""
        if self.emulated:
            os.environ["TRITON_INTERPRET"] = "1"  # before triton's first import, which decides for good
            from ..ops.build import load_emulation_library

            load_emulation_library()
        else:
            from ..ops import cuda as cuda_ops

            cuda_ops.ensure_loaded()

    def sync(self) -> None:
        if not self.emulated:
            torch.cuda.synchronize()

    def empty_cache(self) -> None:
        if not self.emulated:
            torch.cuda.empty_cache()

    def generator(self, seed: int) -> torch.Generator:
        return torch.Generator(device=self.type).manual_seed(seed)

    def time_calls(self, call, n: int) -> list[float]:
        """Milliseconds of each of n calls of call(i): CUDA events around each, or the wall clock."""
        if self.emulated:
            out = []
            for i in range(n):
                t0 = time.perf_counter()
                call(i)
                out.append((time.perf_counter() - t0) * 1e3)
            return out
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
        for i, (a, z) in enumerate(events):
            a.record()
            call(i)
            z.record()
        torch.cuda.synchronize()
        return [a.elapsed_time(z) for a, z in events]

    def info(self) -> dict:
        base = {"torch": torch.__version__, "cuda_runtime": torch.version.cuda, "python": platform.python_version()}
        if self.emulated:
            return {"name": "CPU stand-ins (CUDA emulation, Triton interpreter): a dry run, not a measurement",
                    "sm_count": 0, "memory_gib": 0.0, "capability": "none", "l2_mib": 0.0, "driver": "none", **base}
        p = torch.cuda.get_device_properties(0)
        info = {"name": p.name, "sm_count": p.multi_processor_count, "memory_gib": round(p.total_memory / 2**30, 1),
                "capability": f"{p.major}.{p.minor}", "l2_mib": round(getattr(p, "L2_cache_size", 0) / 2**20, 1),
                **base}
        try:
            q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=30)
            info["driver"] = q.stdout.strip().splitlines()[0] if q.returncode == 0 and q.stdout.strip() else "unknown"
        except (OSError, subprocess.SubprocessError):
            info["driver"] = "unknown"
        return info

    # --- normlab's CUDA ops: the real ones on a GPU, the emulated ones (same glue and kernels) otherwise ---

    def rms_version(self, x, w, eps: float, version: int, block: int = 0):
        """y of RMSNorm forward version 1-4 or 6 (llama convention)."""
        if self.emulated:
            return torch.ops.normlab_emu.rms_norm_fwd_version(x, w, eps, version, 0, block)[0]
        from ..ops import cuda as cuda_ops

        return cuda_ops.rms_norm_fwd_version(x, w, eps, version, "llama", block)[0]

    def rms_forward(self, x, w, eps: float, residual=None):
        """The op's forward (version 4/5/6 as the row length picks): y, or (y, h) with a residual."""
        if self.emulated:
            y, h, _ = torch.ops.normlab_emu.rms_norm_fwd(x, w, residual, eps, 0)
            return y if residual is None else (y, h)
        from ..ops import library as fused

        return fused.fused_rms_norm(x, w, eps, residual=residual)

    def layer_norm_forward(self, x, w, b, eps: float):
        if self.emulated:
            return torch.ops.normlab_emu.layer_norm_fwd(x, w, b, eps)[0]
        from ..ops import library as fused

        return fused.fused_layer_norm(x, w, b, eps)
