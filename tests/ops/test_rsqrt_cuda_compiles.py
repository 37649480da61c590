"""The GPU side of the rsqrt study: cuda/rsqrt/rsqrt_gpu.cu must compile (sm_90 + PTX) on every run,
with and without -use_fast_math, and its glue must compile; the SASS shows what rsqrtf is; on a machine
with a CUDA device the sweep itself runs.

No GPU is needed to compile: nvcc and (for the SASS) the cuobjdump that ships with the pinned Triton.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import numpy as np
import pytest
import torch

from reference_impl.ops import rsqrt as R

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "cuda" / "rsqrt"
CUDA_HOME = Path(os.environ.get("CUDA_HOME") or "/usr/local/cuda")
NVCC = CUDA_HOME / "bin" / "nvcc"
ARCH = "-gencode=arch=compute_90,code=[sm_90,compute_90]"
FLAVOURS = {"default": [], "fast_math": ["-use_fast_math", "-DRSQ_FAST=1"]}


def _nvcc():
    if not NVCC.exists():
        pytest.fail(f"nvcc not found at {NVCC}: the CUDA sources must compile in every run (set CUDA_HOME)")
    return str(NVCC)


def _cuobjdump():
    found = shutil.which("cuobjdump") or str(CUDA_HOME / "bin" / "cuobjdump")
    if Path(found).exists():
        return found
    try:
        import triton

        p = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        return str(p) if p.exists() else None
    except ImportError:
        return None


@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    """rsqrt_gpu.cu compiled to an object for sm_90 (+ PTX), in both flavours."""
    out = {}
    d = tmp_path_factory.mktemp("rsqrt_gpu")
    for name, flags in FLAVOURS.items():
        obj = d / f"rsqrt_gpu_{name}.o"
        cmd = [_nvcc(), "-std=c++17", "-O3", ARCH, *flags, "-c", str(SRC / "rsqrt_gpu.cu"), "-o", str(obj)]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, f"nvcc failed ({name}):\n{res.stderr[-4000:]}"
        out[name] = obj
    return out


def _sass(obj: Path) -> dict[str, str]:
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("no cuobjdump (CUDA toolkit bin or Triton's copy) to disassemble the SASS")
    text = subprocess.run([tool, "-sass", str(obj)], capture_output=True, text=True, timeout=300, check=True).stdout
    funcs, name = {}, None
    for line in text.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            name = m.group(1)
            funcs[name] = ""
        elif name:
            funcs[name] += line + "\n"
    return funcs


@pytest.mark.guards("rsqrt.cuda", "snippet:rsqrt_gpu.gpu_methods")
def test_gpu_sweep_compiles_for_sm90_with_ptx(objects):
    for name, obj in objects.items():
        assert obj.stat().st_size > 0
        tool = _cuobjdump()
        if tool:
            elf = subprocess.run([tool, "--list-elf", str(obj)], capture_output=True, text=True, timeout=120).stdout
            ptx = subprocess.run([tool, "--list-ptx", str(obj)], capture_output=True, text=True, timeout=120).stdout
            assert "sm_90" in elf and "sm_90" in ptx, (name, elf, ptx)
        syms = subprocess.run(["nm", str(obj)], capture_output=True, text=True).stdout
        suffix = "_fast" if name == "fast_math" else ""
        assert f"T rsqrt_gpu_sweep{suffix}\n" in syms, f"launcher symbol missing in the {name} build"


@pytest.mark.guards("C14", "rsqrt.cuda")
def test_rsqrtf_is_one_mufu_rsq_and_fast_math_turns_division_into_it(objects):
    """rsqrtf lowers to the SFU instruction MUFU.RSQ. 1.0f/sqrtf(x) is an IEEE square root and an IEEE
    division by default (MUFU.RCP seeds the division); with -use_fast_math it becomes MUFU.RSQ alone."""
    default, fast = _sass(objects["default"]), _sass(objects["fast_math"])
    assert "MUFU.RSQ" in default["rsq_probe_rsqrtf"]
    assert "MUFU.RCP" not in default["rsq_probe_rsqrtf"]
    assert "MUFU.RCP" in default["rsq_probe_div_sqrtf"]  # the IEEE division
    fd = fast["rsq_probe_div_sqrtf"]
    assert fd.count("MUFU.RSQ") == 1 and "MUFU.RCP" not in fd and "CALL" not in fd
    assert fast["rsq_probe_rsqrtf"].count("MUFU.RSQ") == 1


@pytest.mark.guards("C14", "rsqrt.cuda")
def test_rsqrtf_ptx_is_the_approximate_instruction(tmp_path):
    ptx = tmp_path / "probe.ptx"
    cmd = [_nvcc(), "-std=c++17", "-O3", "-arch=compute_90", "-ptx", str(SRC / "rsqrt_gpu.cu"), "-o", str(ptx)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    text = ptx.read_text()
    body = text[text.index(".entry rsq_probe_rsqrtf"):]
    body = body[:body.index("\n}")]
    assert "rsqrt.approx.f32" in body


@pytest.mark.guards("C14")
def test_double_underscore_rsqrtf_does_not_exist(tmp_path):
    """The claim names `__rsqrtf()`; the CUDA Math API has `rsqrtf` and `__frsqrt_rn`, no `__rsqrtf`."""
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(float* y) { y[0] = __rsqrtf(y[0]); }\n")
    res = subprocess.run([_nvcc(), "-arch=sm_90", "-c", str(src), "-o", str(tmp_path / "k.o")],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode != 0 and "__rsqrtf" in res.stderr and "undefined" in res.stderr, res.stderr[-2000:]
    src.write_text("__global__ void k(float* y) { y[0] = rsqrtf(y[0]) + __frsqrt_rn(y[1]); }\n")
    res = subprocess.run([_nvcc(), "-arch=sm_90", "-c", str(src), "-o", str(tmp_path / "k.o")],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]


@pytest.mark.guards("rsqrt.cuda")
def test_gpu_glue_compiles(tmp_path):
    """rsqrt_gpu_bind.cpp (pybind11 only, no torch headers) compiles against the launcher's C interface."""
    from torch.utils.cpp_extension import include_paths

    incs = [f"-I{p}" for p in include_paths()] + [f"-I{sysconfig.get_paths()['include']}", f"-I{SRC}"]
    for fast in ("0", "1"):
        cmd = ["c++", "-std=c++17", "-fsyntax-only", "-DTORCH_EXTENSION_NAME=rsqrt_gpu_check", f"-DRSQ_FAST={fast}",
               *incs, str(SRC / "rsqrt_gpu_bind.cpp")]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-4000:]
    assert "torch" not in (SRC / "rsqrt_gpu_bind.cpp").read_text().split("namespace py")[0].replace("no torch", "")


# ------------------------------------------------------------------------------------------------
# On a lent GPU: the device sweep
# ------------------------------------------------------------------------------------------------
def _cpu_groups(name: str, stride: int) -> dict:
    return R.sweep([name], R.FIRST_POSITIVE, R.END_POSITIVE_FINITE, stride)["methods"][name]


@pytest.mark.gpu
@pytest.mark.guards("C14", "rsqrt.gpu")
@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no CUDA device in this run; the device sweep runs on a lent GPU "
                           "(python -m reference_impl.studies.rsqrt --gpu)")
def test_gpu_sweep_on_device(tmp_path):
    from reference_impl.studies import rsqrt as rsqrt_study

    stride = 9973
    ranges = {"subnormal": (R.FIRST_POSITIVE, R.FIRST_NORMAL), "lowest_normal_binade": (R.FIRST_NORMAL, R.FIRST_HALVABLE),
              "normal": (R.FIRST_HALVABLE, R.END_POSITIVE_FINITE)}

    def grid(lo):  # first pattern >= lo on the grid 1 + k*stride
        return lo + (-(lo - 1)) % stride

    for fast in (False, True):
        ext = R.gpu_ext(fast)
        assert ext.fast_math() == fast
        st = {m: {g: ext.sweep(m, grid(lo), hi, stride) for g, (lo, hi) in ranges.items()} for m in ext.methods()}
        for g in ("normal", "lowest_normal_binade"):
            assert st["rsqrtf"][g]["nonfinite"] == 0 and st["rsqrtf"][g]["max_ulp_int"] <= R.CUDA_RSQRTF_ULP_BOUND
            assert st["__frsqrt_rn"][g]["max_ulp_int"] == 0  # correctly rounded
            assert st["1.0f/sqrtf"][g]["max_ulp_int"] <= (R.CUDA_RSQRTF_ULP_BOUND if fast else 1)
        sub = st["rsqrtf"]["subnormal"]
        if fast:  # -use_fast_math implies -ftz=true: subnormal inputs are flushed to zero, 1/sqrt(0) = inf
            assert sub["nonfinite"] == sub["count"]
        else:
            assert sub["nonfinite"] == 0 and sub["max_ulp_int"] <= R.CUDA_RSQRTF_ULP_BOUND
        if not fast:  # the bit trick rounds identically on both sides: identical statistics
            for name in ("quake", "quake_nr1", "walczyk_nr1"):
                cpu = _cpu_groups(name, stride)
                for g in ranges:
                    for k in ("count", "exact", "nonfinite", "max_ulp_int", "ulp_hist"):
                        assert st[name][g][k] == cpu[g][k], (name, g, k)
        x = torch.tensor([0.0, -0.0, float("inf"), -1.0, float("nan"), 4.0], device="cuda")
        y = R.gpu_rsqrt(x, "rsqrtf", fast_math=fast).cpu().tolist()
        assert y[0] == float("inf") and y[1] == float("-inf") and y[2] == 0.0 and np.isnan(y[3]) and np.isnan(y[4])
        assert y[5] == 0.5
    d = rsqrt_study.run_gpu(stride=99991, quiet=True, out=tmp_path / "gpu.json", cpu_json=tmp_path / "none.json")
    assert d["device"]["name"] and set(d["builds"]) == {"default", "use_fast_math"}


@pytest.mark.guards("rsqrt.gpu")
def test_gpu_driver_with_a_cpu_stand_in(tmp_path, monkeypatch):
    """run_gpu's chunking, merging and CPU cross-check, driven by a stand-in whose 'device' sweep is the
    CPU sweep (the kernel itself only runs on a lent GPU)."""
    from reference_impl.studies import rsqrt as rsqrt_study

    stride = 65537
    cpu_name = {"rsqrtf": "libm_div_sqrt", "__frsqrt_rn": "libm_div_sqrt", "1.0f/sqrtf": "libm_div_sqrt",
                "quake": "quake", "quake_nr1": "quake_nr1", "walczyk_nr1": "walczyk_nr1"}

    class FakeExt:
        def __init__(self, fast):
            self.fast = fast

        def methods(self):
            return list(cpu_name)

        def fast_math(self):
            return self.fast

        def sweep(self, name, lo, hi, s):
            res = R.sweep([cpu_name[name]], lo, hi, s)
            groups = [g for g in res["methods"][cpu_name[name]].values() if g["count"]]
            assert len(groups) == 1, "a device sweep range never straddles the groups"
            g = dict(groups[0])
            g.update(inputs=res["inputs"], ambiguous=res["ambiguous"], corrected=res["corrected"], ties=res["ties"])
            return g

    class Props:
        name, major, minor = "stand-in", 9, 0

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: Props())
    monkeypatch.setattr(R, "gpu_ext", lambda fast=False: FakeExt(fast))
    cpu = R.sweep(["quake", "quake_nr1", "walczyk_nr1"], R.FIRST_POSITIVE, R.END_POSITIVE_FINITE, stride)
    cpu_json = tmp_path / "cpu.json"
    cpu_json.write_text(json.dumps({"stride": stride, "methods": cpu["methods"]}))
    d = rsqrt_study.run_gpu(stride=stride, quiet=True, out=tmp_path / "gpu.json", cpu_json=cpu_json)
    assert d["bit_trick_matches_cpu"] == {"quake": True, "quake_nr1": True, "walczyk_nr1": True}
    total = sum(d["builds"]["default"]["quake"][g]["count"] for g in R.GROUPS)
    assert total == len(range(R.FIRST_POSITIVE, R.END_POSITIVE_FINITE, stride))
    assert json.loads((tmp_path / "gpu.json").read_text())["device"]["name"] == "stand-in"
