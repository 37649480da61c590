"""Reciprocal square root methods on the CPU (and the GPU sweep), with an exact float32 reference.

The native sources live in ``cuda/rsqrt/``: ``rsqrt_cpu.cpp`` (every CPU method, the exhaustive sweep,
timing), ``rsqrt_gpu.cu`` (plain CUDA kernels with a raw-pointer launcher) and ``rsqrt_gpu_bind.cpp``
(the Python glue for the GPU sweep). They are compiled on first use into ``build/native/``.

Methods (names as :func:`methods` lists them):

- ``libm_div_sqrt``: ``1.0f / sqrtf(x)``; ``sse|avx|avx512_div_sqrt``: the same two IEEE operations with
  packed intrinsics.
- ``sse_rsqrt``, ``avx_rsqrt`` (RSQRTPS, |rel. error| <= 1.5 * 2**-12 by the Intel SDM) and
  ``avx512_rsqrt14`` (VRSQRT14PS, < 2**-14), raw and with one or two Newton steps: ``_nr1``/``_nr2`` the
  classic ``y * (1.5 - (x/2*y)*y)``, ``_rearranged`` ``y + y*(0.5 - (x/2*y)*y)`` (SSE), ``_fma`` the fused
  ``fma(y, fma(-(x/2*y), y, 0.5), y)`` (AVX, AVX-512).
- ``quake*`` (0x5f3759df), ``lomont*`` (0x5f375a86), ``walczyk*`` (0x5f376908 with modified Newton
  coefficients, Walczyk, Moroz & Cieslinski, Entropy 23(1):86, 2021, arXiv:1802.06302), with 0, 1, 2 steps.

A method whose instruction set the CPU lacks is listed with ``available=False``; calling it raises
:class:`RuntimeError`. Nothing is emulated.
"""
from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import numpy as np
import torch

from .build import load_rsqrt_cpu, load_rsqrt_gpu

#: Documented bounds on |relative error| of the hardware estimates (Intel SDM, Vol. 2B RSQRTPS and
#: Vol. 2C VRSQRT14PS); the CUDA Programming Guide's bound for rsqrtf, in ulp.
RSQRTPS_REL_BOUND = 1.5 * 2.0**-12
RSQRT14_REL_BOUND = 2.0**-14
CUDA_RSQRTF_ULP_BOUND = 2

#: Positive finite float32 bit patterns: 0x00000001 (smallest subnormal) .. 0x7F7FFFFF (largest normal).
FIRST_POSITIVE = 0x00000001
END_POSITIVE_FINITE = 0x7F800000  # exclusive: +inf
FIRST_NORMAL = 0x00800000
N_POSITIVE_FINITE = END_POSITIVE_FINITE - FIRST_POSITIVE  # 2**31 - 2**23 - 1
N_SUBNORMAL = FIRST_NORMAL - FIRST_POSITIVE  # 2**23 - 1
#: x >= 2**-125: x/2 is still normal, so the Newton step's x/2 is exact.
FIRST_HALVABLE = 0x01000000
#: Input groups of the sweep statistics: x >= 2**-125, subnormal x, and [2**-126, 2**-125).
GROUPS = ("normal", "subnormal", "lowest_normal_binade")



@lru_cache(maxsize=None)
def cpu_ext():
    """The compiled CPU extension (built on first call, cached in build/native/rsqrt_cpu)."""
    return load_rsqrt_cpu()


@lru_cache(maxsize=None)
def gpu_ext(fast_math: bool = False):
    """The GPU sweep extension: ``rsqrt_gpu`` (default flags) or ``rsqrt_gpu_fast`` (``-use_fast_math``).

    Both compile ``rsqrt_gpu.cu`` for sm_90 with PTX (``TORCH_CUDA_ARCH_LIST`` defaults to "9.0+PTX" here).
    """
    return load_rsqrt_gpu(fast_math)


def gpu_rsqrt(x: torch.Tensor, method: str, fast_math: bool = False) -> torch.Tensor:
    """Applies a device method of ``rsqrt_gpu.cu`` (``rsqrtf``, ``__frsqrt_rn``, ``1.0f/sqrtf``, ...) to a
    float32 CUDA tensor, from the default or the ``-use_fast_math`` build."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype != torch.float32 or x.device.type != "cuda":
        raise TypeError(f"x must be a float32 CUDA tensor, got {x.dtype} on {x.device}")
    ext = gpu_ext(fast_math)
    if method not in ext.methods():
        raise ValueError(f"unknown GPU rsqrt method {method!r}; known: {', '.join(ext.methods())}")
    x = x.contiguous()
    y = torch.empty_like(x)
    torch.cuda.synchronize(x.device)  # the launcher uses the legacy default stream
    with torch.cuda.device(x.device):
        ext.apply(method, x.data_ptr(), y.data_ptr(), x.numel())
    return y


def methods() -> list[dict]:
    """Every CPU method: name, family, form, isa, expr, steps, seed_bound (-1: none), available."""
    return list(cpu_ext().methods())


def method_names(available_only: bool = True) -> list[str]:
    return [m["name"] for m in methods() if m["available"] or not available_only]


def _check_name(name) -> str:
    if not isinstance(name, str):
        raise TypeError(f"method name must be a str, got {type(name).__name__}")
    known = method_names(available_only=False)
    if name not in known:
        raise ValueError(f"unknown rsqrt method {name!r}; known: {', '.join(known)}")
    return name


def _check_x(x) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype != torch.float32:
        raise TypeError(f"x must be float32 (the methods are float32 instructions), got {x.dtype}")
    if x.device.type != "cpu":
        raise ValueError(f"x must be on the CPU, got {x.device}")
    return x


def rsqrt(x: torch.Tensor, method: str) -> torch.Tensor:
    """Applies ``method`` element-wise through its vector (array) path; returns a new float32 tensor."""
    return cpu_ext().apply(_check_name(method), _check_x(x))


def rsqrt_scalar(x: torch.Tensor, method: str) -> torch.Tensor:
    """The same method through its scalar path (one element per call: RSQRTSS, VRSQRT14SS, ...)."""
    return cpu_ext().apply_scalar(_check_name(method), _check_x(x))


def reference(x: torch.Tensor) -> torch.Tensor:
    """Correctly rounded float32 1/sqrt(x) (C++; IEEE results for 0, inf, NaN and negatives)."""
    return cpu_ext().reference(_check_x(x))


def bits_to_float(bits) -> np.ndarray:
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def reference_numpy(x: np.ndarray) -> np.ndarray:
    """An independent correctly rounded 1/sqrt for positive finite float32 (NumPy + exact rationals).

    float64 1/sqrt has relative error below 2**-52; its rounding to float32 can only be wrong when it
    lies within that distance of a float32 midpoint. Those few inputs are decided with integers:
    1/sqrt(x) > m  <=>  x * m**2 < 1, with x and m exact rationals.
    """
    x = np.asarray(x, dtype=np.float32)
    if not (np.all(np.isfinite(x)) and np.all(x > 0)):
        raise ValueError("reference_numpy needs positive finite inputs")
    r = 1.0 / np.sqrt(x.astype(np.float64))
    y = r.astype(np.float32)
    yd = y.astype(np.float64)
    up = np.nextafter(y, np.float32(np.inf))
    dn = np.nextafter(y, np.float32(0))
    nb = np.where(r >= yd, up, dn)
    m = 0.5 * (yd + nb.astype(np.float64))
    close = np.abs(r - m) <= 2.0**-50 * m
    for i in np.flatnonzero(close):
        xm = Fraction(float(x[i])) * Fraction(float(m[i])) ** 2
        if xm == 1:
            raise AssertionError(f"exact tie at x={float(x[i])!r}: impossible for a float midpoint")
        above = xm < 1  # 1/sqrt(x) > m
        y[i] = max(y[i], nb[i]) if above else min(y[i], nb[i])
    return y


def ulp_float32(v: float) -> float:
    """The spacing of float32 numbers at |v| (normal range)."""
    return 2.0 ** (math.floor(math.log2(abs(v))) - 23)


def sweep(names, lo: int = FIRST_POSITIVE, hi: int = END_POSITIVE_FINITE, stride: int = 1, *,
          chunks: int = 1, threads: int = 0, progress=None) -> dict:
    """Error statistics of ``names`` over the bit patterns lo, lo+stride, ... < hi.

    The work is split into ``chunks`` calls (each multi-threaded in C++) so that ``progress`` (a callable
    taking the number of inputs just done, e.g. ``tqdm.update``) can report. Returns per method and per
    input group (``normal``, ``subnormal``): count, exact (== correctly rounded), nonfinite, max_ulp
    (real-valued, against the exact value), max_ulp_int (float steps from the correctly rounded
    result), max_abs_rel, min_rel, max_rel, mean_abs_rel, worst_ulp_x/worst_rel_x (bit patterns) and
    two histograms (see ``cuda/rsqrt/rsqrt_common.h`` for the bins). Also the reference's own counts:
    ambiguous (inputs decided by exact integers), corrected (where float64-then-round would be wrong).
    """
    names = [_check_name(n) for n in names]
    for k, v in (("lo", lo), ("hi", hi), ("stride", stride), ("chunks", chunks)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{k} must be an int, got {type(v).__name__}")
    if not (FIRST_POSITIVE <= lo < hi <= END_POSITIVE_FINITE):
        raise ValueError(f"need 1 <= lo < hi <= 0x7F800000 (positive finite floats), got lo={lo:#x}, hi={hi:#x}")
    if stride < 1 or chunks < 1:
        raise ValueError("stride and chunks must be >= 1")
    ext = cpu_ext()
    total = (hi - lo + stride - 1) // stride
    per = -(-total // chunks)
    merged = None
    for c in range(chunks):
        i0, i1 = c * per, min(total, (c + 1) * per)
        if i0 >= i1:
            break
        part = ext.sweep(names, lo + i0 * stride, lo + (i1 - 1) * stride + 1, stride, threads)
        merged = part if merged is None else _merge(merged, part)
        if progress is not None:
            progress(i1 - i0)
    for per_m in merged["methods"].values():
        for g in per_m.values():
            g["mean_abs_rel"] = g["sum_abs_rel"] / max(1, g["count"] - g["nonfinite"])
    return merged


def _merge_stats(a: dict, b: dict) -> dict:
    out = dict(a)
    for k in ("count", "exact", "nonfinite", "sum_abs_rel"):
        out[k] = a[k] + b[k]
    out["max_ulp_int"] = max(a["max_ulp_int"], b["max_ulp_int"])
    out["min_rel"] = min(a["min_rel"], b["min_rel"])
    out["max_rel"] = max(a["max_rel"], b["max_rel"])
    for val, where in (("max_ulp", "worst_ulp_x"), ("max_abs_rel", "worst_rel_x")):
        if b[val] > a[val] or (b[val] == a[val] and b[where] < a[where] and b["count"] > 0):
            out[val], out[where] = b[val], b[where]
    for h in ("ulp_hist", "rel_hist"):
        out[h] = [p + q for p, q in zip(a[h], b[h])]
    return out


def _merge(a: dict, b: dict) -> dict:
    out = {"inputs": a["inputs"] + b["inputs"], "ambiguous": a["ambiguous"] + b["ambiguous"],
           "corrected": a["corrected"] + b["corrected"], "ties": a["ties"] + b["ties"],
           "corrected_x": (list(a["corrected_x"]) + list(b["corrected_x"]))[:256], "methods": {}}
    for name in a["methods"]:
        out["methods"][name] = {g: _merge_stats(a["methods"][name][g], b["methods"][name][g]) for g in GROUPS}
    return out


def ulp_bin_edges() -> list[str]:
    """Labels of the integer-ulp histogram bins (see rsqrt_common.h)."""
    labels = ["0", "1"] + [f"{2**(k-1)}-{2**k - 1}" for k in range(2, 33)] + ["NaN/inf"]
    return labels


def rel_bin_lower(j: int) -> float:
    """Lower edge of relative-error bin j (1..50); bin 0 is exactly zero, bin 51 NaN/inf."""
    return 0.0 if j == 0 else 2.0 ** (j - 42)


def profile(name: str, lo: int, hi: int, nbins: int):
    """(min, max) signed relative error of ``name`` in ``nbins`` equal slices of bit patterns [lo, hi)."""
    return cpu_ext().profile(_check_name(name), lo, hi, nbins)


def throughput_ns(name: str, n: int, inner: int, reps: int = 5) -> float:
    """Best single-thread ns per element of the array path over ``n`` floats, ``inner`` passes per run."""
    return cpu_ext().throughput_ns(_check_name(name), n, inner, reps)


def rmsnorm_row_ns(d: int, rows: int, reps: int = 5) -> dict:
    """ns per row of an AVX2 fp32 RMSNorm forward row loop (one thread), for the variants
    exact (``1.0f/sqrtf``), rsqrtss (raw RSQRTSS), rsqrtss_nr1 (+ one classic step) and none
    (r = mean(x^2) + eps: no rsqrt at all), run interleaved."""
    vals = cpu_ext().rmsnorm_row_ns(d, rows, reps)
    return dict(zip(("exact", "rsqrtss", "rsqrtss_nr1", "none"), vals))


def scalar_rsqrt_ns(variant: str, n: int = 1 << 16, reps: int = 5) -> float:
    """ns per scalar rsqrt (``exact``, ``rsqrtss`` or ``rsqrtss_nr1``) in a loop over n floats, one thread."""
    ids = {"exact": 0, "rsqrtss": 1, "rsqrtss_nr1": 2}
    if variant not in ids:
        raise ValueError(f"variant must be one of {sorted(ids)}, got {variant!r}")
    return cpu_ext().scalar_rsqrt_ns(ids[variant], n, reps)


def cpu_features() -> dict:
    return dict(cpu_ext().cpu_features())
