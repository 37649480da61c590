"""Which CPU a measurement ran on, precisely enough to tell two machines apart.

Cloud machines often report a bare model name ("AMD EPYC", "Intel(R) Xeon(R) Processor"). The kernel's
``/proc/cpuinfo`` also gives the vendor, family, model and stepping (which identify the microarchitecture:
AMD family 25 model 17 is Zen 4 "Genoa", for example), and the instruction-set flags the kernels choose
their paths by. :func:`cpu_identity` collects those, and :func:`machine_key` turns them into a short stable
key under which a machine's timings are kept apart from every other machine's.
"""
from __future__ import annotations

import os
import platform
import re
from pathlib import Path

# the flags that decide which kernel path runs or how fast bfloat16 converts
FLAGS_THAT_MATTER = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq",
                     "avx512_bf16", "avx512_fp16", "avx512_vnni", "amx_tile", "amx_bf16")


def _cpuinfo(text: str | None = None) -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo ("" where the file is missing)."""
    if text is None:
        try:
            text = Path("/proc/cpuinfo").read_text()
        except OSError:
            return {}
    first = text.split("\n\n", 1)[0]
    out = {}
    for line in first.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            out[k.strip()] = v.strip()
    return out


def _cache_sizes() -> dict[str, str]:
    """Cache sizes of CPU 0 by level and type, as the kernel reports them (``{"L1d": "32K", ...}``)."""
    out = {}
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for idx in sorted(base.glob("index*")) if base.is_dir() else []:
        try:
            level = (idx / "level").read_text().strip()
            kind = (idx / "type").read_text().strip()
            size = (idx / "size").read_text().strip()
        except OSError:
            continue
        suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
        out[f"L{level}{suffix}"] = size
    return out


def cpu_identity(cpuinfo_text: str | None = None) -> dict:
    """Vendor, family, model, stepping, model name, the flags that matter, caches and the core count."""
    info = _cpuinfo(cpuinfo_text)
    flags = set(info.get("flags", "").split())
    return {
        "vendor": info.get("vendor_id", platform.processor() or "unknown"),
        "family": info.get("cpu family", ""),
        "model": info.get("model", ""),
        "stepping": info.get("stepping", ""),
        "model_name": re.sub(r"\s+", " ", info.get("model name", platform.processor() or "unknown")),
        "flags": [f for f in FLAGS_THAT_MATTER if f in flags],
        "caches": _cache_sizes() if cpuinfo_text is None else {},
        "cores": os.cpu_count() or 0,
    }


def machine_key(identity: dict) -> str:
    """A file-name-safe key, e.g. ``authenticamd-f25-m17-s1-avx512bf16-2c``: same key, same kind of machine."""
    bf16 = "avx512bf16" if "avx512_bf16" in identity["flags"] else (
        "avx512" if "avx512f" in identity["flags"] else ("avx2" if "avx2" in identity["flags"] else "base"))
    raw = f"{identity['vendor']}-f{identity['family']}-m{identity['model']}-s{identity['stepping']}-{bf16}-{identity['cores']}c"
    return re.sub(r"[^a-z0-9-]+", "", raw.lower())


def legacy_identity(machine: dict) -> dict:
    """What an old provenance block (no ``cpu_identity``) says about its CPU, in cpu_identity's form
    (family, model and stepping unknown: ``x``)."""
    return {"vendor": machine.get("vendor", "unknown"), "family": "x", "model": "x", "stepping": "x",
            "model_name": machine.get("cpu", "unknown"), "flags": list(machine.get("simd_flags", [])),
            "caches": {}, "cores": machine.get("cores", 0)}


def key_of(data: dict) -> str:
    """The machine key a data file is filed under: its recorded key; for an old file, its ``archive``
    block's, or one derived from what its provenance names (:func:`legacy_identity`)."""
    m = data["provenance"]["machine"]
    if m.get("machine_key"):
        return m["machine_key"]
    if data.get("archive", {}).get("machine_key"):
        return data["archive"]["machine_key"]
    return machine_key(legacy_identity(m))


def cpu_kernel_path(identity: dict, env: str | None = None) -> str:
    """The instruction-set path the CPU kernels take (cuda/cpu/isa.h's pick_isa, with NORMLAB_CPU_ISA)."""
    flags = set(identity["flags"])
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        best = "avx512bf16" if "avx512_bf16" in flags else "avx512"
    elif {"avx2", "fma"} <= flags:
        best = "avx2"
    else:
        best = "scalar"
    order = ["scalar", "avx2", "avx512", "avx512bf16"]
    env = os.environ.get("NORMLAB_CPU_ISA") if env is None else env
    want = env if env in ("scalar", "avx2", "avx512") else best
    return want if order.index(want) < order.index(best) else best
