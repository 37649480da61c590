"""Resource usage of the CUDA kernels, from the compiler: ``python -m reference_impl.studies.cuda_resources``.

Runs nvcc on every kernel source in ``cuda/gpu/`` for ``sm_90`` with ``-Xptxas -v`` (registers, spills,
stack frame, static shared memory, barriers per kernel) and once more to PTX (to count 128-bit global
loads and stores and any tensor-core ``mma`` instruction per kernel), and writes
``docs/data/cuda_resources.json`` with the nvcc version, the flags and a ``provenance`` block (machine,
date, a hash of the sources and flags; :mod:`reference_impl.provenance`). The tests fail when the hash no
longer matches the sources, so the Kernels page never shows figures of older code. No GPU is needed.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
from pathlib import Path

from ..ops.build import CUDA_GLUE_HEADERS
from ..ops.build import CUDA_KERNEL_SOURCES as KERNEL_SOURCES
from ..ops.build import GENCODE
from ..ops.build import REPO, SOURCES
from ..provenance import check_out, finish, python_closure, record, write_json
from ..provenance import source_hash as _hash

OUT = REPO / "docs" / "data" / "cuda_resources.json"
GPU_DIR = SOURCES / "gpu"
# the same defines torch.utils.cpp_extension passes to nvcc, so the report compiles what the library does
TORCH_NVCC_DEFINES = ("-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                      "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__")
REPORT_FLAGS = ("-std=c++17", "-O3", "-arch=sm_90", *TORCH_NVCC_DEFINES)
COMMAND = "python -m reference_impl.studies.cuda_resources"
SHORT_TYPES = {"float": "f32", "__half": "f16", "__nv_bfloat16": "bf16", "true": "res", "false": "nores"}
# The last template argument of these kernels is FP32_SUM (the "fp32" residual contract): "fp32sum" when set,
# left out when not, so the "hf" kernels keep their names.
FP32_SUM_KERNELS = ("rms_fwd_v45", "rms_fwd_rows", "ln_fwd_kernel")


def nvcc_path() -> Path:
    return Path(os.environ.get("CUDA_HOME") or "/usr/local/cuda") / "bin" / "nvcc"


def hashed_files() -> list[Path]:
    """Every file that can change a kernel's machine code: the .cu sources and the headers they include."""
    return sorted(p for p in GPU_DIR.iterdir() if p.suffix in (".cu", ".cuh", ".h") and p.name not in CUDA_GLUE_HEADERS)


def sources() -> list[str]:
    """Repository-relative paths of the kernel sources and of the Python that parses the compiler's report."""
    return [p.relative_to(REPO).as_posix() for p in hashed_files()] + python_closure(
        "reference_impl/studies/cuda_resources.py")


def hashed_settings() -> list[str]:
    return [" ".join(REPORT_FLAGS + GENCODE)]


def source_hash() -> str:
    """The provenance hash of the kernel sources (comments stripped), this parser and the compile flags."""
    return _hash(sources(), hashed_settings())


def nvcc_version() -> str:
    out = subprocess.run([str(nvcc_path()), "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"release ([\d.]+), (V[\d.]+)", out)
    return f"{m.group(1)} ({m.group(2)})" if m else out.strip().splitlines()[-1]


def demangle(names: list[str]) -> dict[str, str]:
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
        return dict(zip(names, out.splitlines()))
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def short_name(demangled: str) -> str:
    """'void normlab::rms_fwd_v45<__nv_bfloat16, float, 8, true>(...)' -> 'rms_fwd_v45[bf16,f32,8,res]'.

    Keys contain no dots, so a page can address them with ``{{ data(...) }}``'s dotted paths.
    """
    m = re.match(r"(?:void )?(?:normlab::)?(\w+)<(.*?)>\(", demangled)
    if not m:
        return re.sub(r"[^\w\[\],]", "_", demangled)
    raw = [a.strip() for a in m.group(2).split(",")]
    if m.group(1) in FP32_SUM_KERNELS:
        raw = raw[:-1] + (["fp32sum"] if raw[-1] == "true" else [])
    args = [SHORT_TYPES.get(a, a) for a in raw]
    return f"{m.group(1)}[{','.join(args)}]"


_PTXAS = re.compile(
    r"Function properties for (\S+)\n\s*(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads\n"
    r"ptxas info\s*: Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes cumulative stack size)?"
    r"(?:, (\d+) bytes smem)?"
)


def ptxas_info(src: Path, tmp: Path) -> dict[str, dict]:
    cmd = [str(nvcc_path()), *REPORT_FLAGS, "-Xptxas", "-v", "-cubin", str(src), "-o", str(tmp / (src.stem + ".cubin"))]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=GPU_DIR)
    if proc.returncode != 0:
        raise RuntimeError(f"nvcc failed on {src.name}:\n{proc.stderr[-4000:]}")
    info = {}
    for m in _PTXAS.finditer(proc.stderr):
        info[m.group(1)] = {
            "registers": int(m.group(5)),
            "spill_stores_bytes": int(m.group(3)),
            "spill_loads_bytes": int(m.group(4)),
            "stack_frame_bytes": int(m.group(2)),
            "barriers": int(m.group(6) or 0),
            "static_smem_bytes": int(m.group(8) or 0),
        }
    if not info:
        raise RuntimeError(f"no ptxas report parsed for {src.name}:\n{proc.stderr[-2000:]}")
    return info


def ptx_counts(src: Path, tmp: Path) -> dict[str, dict]:
    ptx = tmp / (src.stem + ".ptx")
    cmd = [str(nvcc_path()), *REPORT_FLAGS, "-ptx", str(src), "-o", str(ptx)]
    subprocess.run(cmd, capture_output=True, text=True, cwd=GPU_DIR, check=True)
    text = ptx.read_text()
    counts = {}
    # each kernel starts at ".visible .entry NAME(" and its body runs to the next entry
    parts = re.split(r"\.(?:visible|weak)\s+\.entry\s+", text)[1:]
    for part in parts:
        name = part.split("(", 1)[0].strip()
        counts[name] = {
            "ld_global_128bit": len(re.findall(r"\bld\.global(?:\.nc)?\.v4\.(?:u32|b32|f32|s32)", part))
            + len(re.findall(r"\bld\.global(?:\.nc)?\.v2\.(?:u64|b64|f64)", part)),
            "st_global_128bit": len(re.findall(r"\bst\.global\.v4\.(?:u32|b32|f32|s32)", part))
            + len(re.findall(r"\bst\.global\.v2\.(?:u64|b64|f64)", part)),
            "mma_instructions": len(re.findall(r"\b(?:w?gmma|mma)\.", part)),
        }
    return counts


def kernel_report(rels=KERNEL_SOURCES, progress: bool = True) -> dict[str, dict]:
    """The per-kernel entries of the report for the kernel sources ``rels`` (paths under ``cuda/``), keyed
    by :func:`short_name`. The tests compile a few of the sources and compare their entries with the file."""
    from tqdm import tqdm

    kernels: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for rel in tqdm(rels, desc="nvcc -Xptxas -v", unit="file", disable=not progress):
            src = SOURCES / rel
            info = ptxas_info(src, tmp)
            counts = ptx_counts(src, tmp)
            names = demangle(sorted(info))
            for mangled, res in sorted(info.items()):
                key = short_name(names[mangled])
                kernels[key] = {"file": f"cuda/{rel}", "kernel": names[mangled].split("(")[0], **res,
                                **counts.get(mangled, {})}
    return kernels


def run(out: Path = OUT) -> dict:
    prov = record(COMMAND, sources(), packages=(), hashed_settings=hashed_settings())
    kernels = kernel_report()
    prov["versions"]["nvcc"] = nvcc_version()
    data = {
        "provenance": finish(prov),
        "what": "per-kernel resource usage reported by ptxas -v for sm_90, and 128-bit access counts from the PTX",
        "nvcc": prov["versions"]["nvcc"],
        "flags": list(REPORT_FLAGS),
        "arch": "sm_90",
        "totals": {
            "kernels": len(kernels),
            "with_spills": sum(1 for k in kernels.values() if k["spill_stores_bytes"] or k["spill_loads_bytes"]),
            "max_registers": max(k["registers"] for k in kernels.values()),
            "mma_instructions": sum(k.get("mma_instructions", 0) for k in kernels.values()),
        },
        "kernels": dict(sorted(kernels.items())),
    }
    write_json(out, data)
    return data


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    data = run(check_out(ap, args.out))
    t = data["totals"]
    print(f"wrote {args.out}: {t['kernels']} kernels, max {t['max_registers']} registers, "
          f"{t['with_spills']} with spills, nvcc {data['nvcc']}, hash {data['provenance']['source_hash']}")


if __name__ == "__main__":
    main()
