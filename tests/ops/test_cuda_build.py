"""The CUDA sources, checked without a GPU: they compile (every run), their compiler report is current,
and the reduction schemes and index maps of the kernels are proven on a lane-by-lane CPU model.

The model tests emulate the CUDA semantics that matter here: ``__shfl_down_sync`` (every lane reads its
partner's value from *before* the step; a partner past the warp returns the caller's own value; a lane
that does not exist returns garbage, modelled as ``None`` so that using it raises), shared memory and
barriers (a barrier separates the writes of one phase from the reads of the next). Integer inputs make
the sums exact, so a scheme is either right or provably wrong.
"""
from __future__ import annotations

import json
import re
import subprocess

import numpy as np
import pytest
import torch

from reference_impl.ops import build as native
from reference_impl.ops import cuda as cuda_ops
from reference_impl.studies import cuda_resources as cuda_build_report
from pathlib import Path

from reference_impl.ops.build import REPO, SOURCES, NativeBuildError

GPU = SOURCES / "gpu"


# ------------------------------------------------------------------------------------------------------
# Compiles on every run
# ------------------------------------------------------------------------------------------------------

@pytest.mark.guards("cuda.build", "snippet:rms_forward_steps.v1", "snippet:rms_forward_steps.v2",
                    "snippet:rms_forward_steps.v3", "snippet:rms_forward.v45", "snippet:common.row_rstd",
                    "snippet:common.warp_sum", "snippet:common.block_sum", "snippet:common.column_sum",
                    "snippet:rms_backward.rms_bwd", "snippet:layer_norm.ln_fwd", "snippet:layer_norm.ln_bwd")
def test_cuda_library_compiles_for_sm90_and_registers_the_cuda_kernels():
    """nvcc builds every .cu for sm_90 (+ compute_90 PTX) and the glue registers the CUDA dispatch key.

    Uses the cached build in build/native/normlab_cuda when the sources are unchanged (ninja tracks the
    headers too); a fresh clone compiles from scratch. A compile error fails here.
    """
    assert any("code=sm_90" in f for f in native.CUDA_FLAGS) and any("code=compute_90" in f for f in native.CUDA_FLAGS)
    try:
        cuda_ops.ensure_loaded()
    except NativeBuildError as exc:  # a missing nvcc is a failure too: CI must compile the CUDA sources
        pytest.fail(f"the CUDA library does not build: {exc}")
    for op in ("rms_norm_fwd", "rms_norm_fwd_out", "rms_norm_bwd", "layer_norm_fwd", "layer_norm_fwd_out",
               "layer_norm_bwd", "rms_norm_fwd_version"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"normlab::{op}", "CUDA"), op
    schema = str(torch.ops.normlab.rms_norm_fwd_version.default._schema)
    assert "int block_size=0" in schema and "-> (Tensor y, Tensor rstd)" in schema
    # the ops keep their single schema from cuda/ops.h (the CUDA glue only implements them)
    assert "Tensor? residual" in str(torch.ops.normlab.rms_norm_fwd.default._schema)
    so = REPO / "build" / "native" / native.CUDA_NAME / f"{native.CUDA_NAME}.so"
    assert b"sm_90" in so.read_bytes(), "no sm_90 machine code embedded in the library"


@pytest.mark.guards("cuda.build")
def test_kernel_sources_include_no_torch_header():
    """The .cu files see only CUDA headers (fast nvcc); the torch glue is in ops_cuda.cpp and its shim."""
    for p in sorted(GPU.iterdir()):
        if p.suffix in (".cu", ".cuh", ".h") and p.name not in native.CUDA_GLUE_HEADERS:
            includes = re.findall(r'#include\s+[<"]([^>"]+)', p.read_text())
            assert not [i for i in includes if i.startswith(("torch", "ATen", "c10"))], (p.name, includes)


# ------------------------------------------------------------------------------------------------------
# Warnings are errors, and the GPU build's glue is compiled on every run
# ------------------------------------------------------------------------------------------------------

@pytest.mark.guards("cuda.warnings")
def test_every_native_build_turns_warnings_into_errors():
    """-Wall -Wextra -Werror for the CPU library, the CUDA glue, the .cu host code (through nvcc's
    -Xcompiler), nvcc's own device-code warnings, and the emulation; the builds of this session used them
    (a build with a warning fails, and the tests that need the libraries with it)."""
    for flags in (native.CPU_CFLAGS, native.CUDA_CXX_FLAGS, native.EMU_CFLAGS):
        assert set(native.WARNINGS) <= set(flags) and native.WARNINGS == ("-Wall", "-Wextra", "-Werror")
    assert "-Xcompiler=-Wall,-Wextra,-Werror" in native.CUDA_FLAGS and "-Werror=all-warnings" in native.CUDA_FLAGS
    # torch's headers reach the compiler as -isystem (cpp_extension's choice), so only our code is judged
    ninja = (REPO / "build" / "native" / native.CPU_NAME / "build.ninja")
    if ninja.exists():
        text = ninja.read_text()
        assert "-isystem" in text and "-Werror" in text


@pytest.fixture(scope="module")
def glue_objects(tmp_path_factory):
    """The CUDA glue compiled by the host compiler for the GPU build (no NORMLAB_EMULATION), with the
    project's warning flags; no nvcc, no GPU. Returns the process results: (glue, a glue with a bug)."""
    d = tmp_path_factory.mktemp("glue")
    glue = subprocess.run(native.glue_host_compile_command(GPU / "ops_cuda.cpp", d / "ops_cuda.o"),
                          capture_output=True, text=True)
    # the class of bug the warnings exist for: an allocation helper of the GPU branch that calls itself
    bug = d / "recursive_new_like.cpp"
    bug.write_text(f'#include "{GPU / "device_shim.h"}"\n'
                   "namespace {\nat::Tensor new_like(const at::Tensor& x) { return new_like(x); }\n}\n"
                   "at::Tensor use(const at::Tensor& x) { return new_like(x); }\n")
    broken = subprocess.run(native.glue_host_compile_command(bug, d / "bug.o"), capture_output=True, text=True)
    return glue, broken


@pytest.mark.guards("cuda.warnings", "cuda.shim")
def test_gpu_branch_of_the_glue_compiles_warning_free(glue_objects):
    glue, _ = glue_objects
    assert glue.returncode == 0, f"the CUDA glue (GPU branch) does not compile warning-free:\n{glue.stderr[-4000:]}"
    assert "warning" not in glue.stderr


@pytest.mark.guards("cuda.warnings")
def test_a_self_recursive_helper_fails_the_glue_build(glue_objects):
    """The check can fail: the same command rejects a new_like that calls itself (-Winfinite-recursion)."""
    _, broken = glue_objects
    assert broken.returncode != 0 and "infinite-recursion" in broken.stderr, broken.stderr[-2000:]


def _conditionals(path: Path) -> list[str]:
    return [ln.strip() for ln in path.read_text().splitlines() if re.match(r"\s*#\s*(if|ifdef|ifndef|elif)\b", ln)]


@pytest.mark.guards("cuda.shim")
def test_one_glue_one_shim():
    """The emulation and the GPU build share every line of the glue and of the kernels' launch code except
    the device shim (device_shim.h, at most about 15 lines) and the launch macro of common.cuh: no other
    preprocessor conditional exists in cuda/gpu (outside the emulation's own folder)."""
    allowed = {("device_shim.h", "#ifdef NORMLAB_EMULATION"), ("common.cuh", "#ifndef NORMLAB_LAUNCH"),
               ("launchers.h", "#ifdef __cplusplus")}
    found = {(p.name, c) for p in sorted(GPU.iterdir()) if p.is_file() for c in _conditionals(p)}
    assert found <= allowed, f"a preprocessor conditional outside the device shim: {sorted(found - allowed)}"
    assert ("device_shim.h", "#ifdef NORMLAB_EMULATION") in found
    assert sum(c == "#ifdef NORMLAB_EMULATION" for c in _conditionals(GPU / "device_shim.h")) == 1
    shim = (GPU / "device_shim.h").read_text()
    body = shim[shim.index("#ifdef NORMLAB_EMULATION"):shim.index("#endif")].splitlines()[1:]
    code = [ln for ln in body if ln.strip() and not ln.strip().startswith(("//", "#else"))]
    assert len(code) <= 15, f"the device shim has {len(code)} lines of code; keep it to about 15"
    # the launch macro is defined once for nvcc; every kernel launch goes through it
    common = (GPU / "common.cuh").read_text()
    assert common.count("#define NORMLAB_LAUNCH") == 1
    for p in sorted(GPU.glob("*.cu")):
        assert "<<<" not in p.read_text(), f"{p.name} launches a kernel without NORMLAB_LAUNCH"
    # the glue itself names neither the emulation nor a CUDA header: the shim does
    glue = (GPU / "ops_cuda.cpp").read_text()
    assert "NORMLAB_EMULATION" not in re.sub(r"//.*", "", glue) and "c10/cuda" not in glue


# ------------------------------------------------------------------------------------------------------
# The compiler's resource report on the Kernels page is current
# ------------------------------------------------------------------------------------------------------

def _report():
    path = cuda_build_report.OUT
    assert path.exists(), "docs/data/cuda_resources.json is missing: run python -m reference_impl.studies.cuda_resources"
    return json.loads(path.read_text())


@pytest.mark.guards("cuda.resources")
def test_resource_report_matches_the_current_sources():
    data = _report()
    assert data["provenance"]["source_hash"] == cuda_build_report.source_hash(), (
        "docs/data/cuda_resources.json was made from other sources or flags: "
        "run python -m reference_impl.studies.cuda_resources")
    assert re.match(r"\d+\.\d+ \(V[\d.]+\)", data["nvcc"]) and data["arch"] == "sm_90"
    families = {k.split("[")[0] for k in data["kernels"]}
    assert families == {"rms_fwd_v1", "rms_fwd_v2", "rms_fwd_v3", "rms_fwd_v45", "rms_fwd_rows", "rms_bwd_kernel",
                        "ln_fwd_kernel", "ln_bwd_kernel", "column_sum"}
    # five (x, weight) dtype pairs per templated kernel, two vector widths and three residual modes (none,
    # "hf", "fp32" sum) for v45 and for the several-rows-per-block version 6, in two register budgets (1 or
    # kFwdItems vectors a lane); the LayerNorm forward has the same three residual modes
    assert sum(k.startswith("rms_fwd_v45[") for k in data["kernels"]) == 5 * 2 * 3
    assert sum(k.startswith("rms_fwd_rows[") for k in data["kernels"]) == 5 * 2 * 3 * 2
    assert sum(k.startswith("ln_fwd_kernel[") for k in data["kernels"]) == 5 * 2 * 3
    assert sum(k.endswith(",fp32sum]") for k in data["kernels"]) == 5 * 2 + 5 * 2 * 2 + 5 * 2
    t = data["totals"]
    assert t["kernels"] == len(data["kernels"])
    assert t["max_registers"] == max(k["registers"] for k in data["kernels"].values())


@pytest.mark.guards("cuda.resources")
def test_no_kernel_spills_and_register_budget_allows_512_threads():
    """No local-memory spills; every kernel fits 128 registers, the limit for 512-thread blocks."""
    for name, k in _report()["kernels"].items():
        assert k["spill_stores_bytes"] == 0 and k["spill_loads_bytes"] == 0, name
        assert k["registers"] <= 128, name


@pytest.mark.guards("cuda.vectorized", "C29")
def test_vector_paths_use_128_bit_accesses_and_no_kernel_uses_tensor_cores():
    """The VEC = 16/sizeof(T) instantiations load and store 16 bytes per instruction (PTX ld/st .v4);
    the VEC = 1 fallbacks and versions 1-3 use none. No kernel contains an mma instruction: normalization
    has no matrix product for Tensor Cores to run."""
    kernels = _report()["kernels"]
    for name, k in kernels.items():
        assert k["mma_instructions"] == 0, name
        m = re.match(r"(rms_fwd_v45|rms_fwd_rows|rms_bwd_kernel|ln_fwd_kernel|ln_bwd_kernel)\[(\w+),(\w+),(\d+)", name)
        if m:
            vec_full = 16 // {"f32": 4, "f16": 2, "bf16": 2}[m.group(2)]
            if int(m.group(4)) == vec_full:
                assert k["ld_global_128bit"] > 0 and k["st_global_128bit"] > 0, name
            else:
                assert int(m.group(4)) == 1 and k["ld_global_128bit"] == 0, name
        elif name.startswith(("rms_fwd_v1", "rms_fwd_v2", "rms_fwd_v3")):
            assert k["ld_global_128bit"] == 0, name


@pytest.mark.guards("C16", "C42")
def test_the_articles_rsqrtf_intrinsic_does_not_exist_in_cuda(tmp_path):
    """The article credits ``__rsqrtf()``; CUDA has ``rsqrtf()`` (approximate) and ``__frsqrt_rn()``
    (correctly rounded), and nvcc rejects ``__rsqrtf`` as an undefined identifier."""
    nvcc = str(cuda_build_report.nvcc_path())
    results = {}
    for fn in ("__rsqrtf", "rsqrtf", "__frsqrt_rn"):
        src = tmp_path / f"k_{fn.strip('_')}.cu"
        src.write_text(f"__global__ void k(float* p) {{ p[0] = {fn}(p[0]); }}\n")
        proc = subprocess.run([nvcc, "-arch=sm_90", "-c", str(src), "-o", str(src.with_suffix(".o"))],
                              capture_output=True, text=True)
        results[fn] = (proc.returncode, proc.stderr)
    assert results["rsqrtf"][0] == 0 and results["__frsqrt_rn"][0] == 0
    assert results["__rsqrtf"][0] != 0 and 'identifier "__rsqrtf" is undefined' in results["__rsqrtf"][1]


# ------------------------------------------------------------------------------------------------------
# Lane-by-lane model of the reductions in cuda/gpu/common.cuh
# ------------------------------------------------------------------------------------------------------

def shfl_down(values, offset, lanes):
    """__shfl_down_sync over a warp whose lanes >= `lanes` do not exist (their reads are garbage: None)."""
    out = []
    for lane in range(len(values)):
        src = lane + offset
        if src >= 32:
            out.append(values[lane])  # past the warp: the caller's own value comes back
        elif src >= lanes:
            out.append(None)  # a lane that does not exist: undefined
        else:
            out.append(values[src])
    return out


def warp_sum_model(values, lanes):
    """The model of normlab::warp_sum: lane + offset < lanes guards every addition. Returns lane 0."""
    v = list(values[:lanes]) + [None] * (32 - lanes)
    for offset in (16, 8, 4, 2, 1):
        other = shfl_down(v, offset, lanes)
        v = [(v[l] + other[l]) if (l < lanes and l + offset < lanes) else v[l] for l in range(32)]
    return v[0]


def block_sum_model(values):
    """The model of normlab::block_sum for blockDim.x = len(values): warps, red[33], two barriers."""
    b = len(values)
    nwarps = (b + 31) // 32
    red = [None] * 33
    for w in range(nwarps):  # phase 1 (before the first barrier)
        lanes_here = min(32, b - 32 * w)
        red[w] = warp_sum_model(values[32 * w: 32 * w + lanes_here], lanes_here)
    lanes0 = min(32, b)  # phase 2: warp 0 only
    t = [red[l] if l < nwarps else 0 for l in range(lanes0)]
    red[32] = warp_sum_model(t, lanes0)
    return red[32]  # phase 3: every thread reads red[32]


@pytest.mark.guards("cuda.block_sum", "snippet:common.warp_sum", "snippet:common.block_sum")
def test_warp_sum_model_is_exact_for_every_partial_warp():
    rng = np.random.default_rng(1)
    for lanes in range(1, 33):
        vals = [int(v) for v in rng.integers(-1000, 1000, lanes)]
        assert warp_sum_model(vals, lanes) == sum(vals), lanes


@pytest.mark.guards("cuda.block_sum", "snippet:common.block_sum")
def test_block_sum_model_is_exact_for_every_block_size_1_to_1024():
    rng = np.random.default_rng(2)
    for b in range(1, 1025):
        vals = [int(v) for v in rng.integers(-10**6, 10**6, b)]
        assert block_sum_model(vals) == sum(vals), b


def tree_sum_model(values):
    """The model of version 2's shared-memory tree (blockDim.x = len(values))."""
    buf = list(values)
    s = len(buf) // 2
    while s > 0:
        buf = [buf[t] + buf[t + s] if t < s else buf[t] for t in range(len(buf))]
        s //= 2
    return buf[0]


@pytest.mark.guards("cuda.tree_sum", "snippet:rms_forward_steps.v2")
def test_v2_tree_is_exact_for_powers_of_two_and_wrong_otherwise():
    """Why version 2 refuses block sizes that are not powers of two (the host check in the launcher)."""
    for b in (1, 2, 4, 32, 64, 256, 1024):
        assert tree_sum_model(list(range(1, b + 1))) == b * (b + 1) // 2
    for b in (3, 96, 100, 1000):
        assert tree_sum_model(list(range(1, b + 1))) != b * (b + 1) // 2, b
    src = (GPU / "rms_forward_steps.cu").read_text()
    assert "if ((b & (b - 1)) != 0) return cudaErrorInvalidValue;" in src


# ------------------------------------------------------------------------------------------------------
# Claim C39: the article's kernel reduces one warp of a 256-thread block
# ------------------------------------------------------------------------------------------------------

def article_kernel_model(x: np.ndarray, eps: float, block: int = 256) -> np.ndarray:
    """A faithful fp32 model of the article's rms_norm_kernel for one row, launched with `block` threads.

    Each thread accumulates val*val over idx = tid, tid + block, ...; `warpReduceSum` (undefined in the
    article; every common definition, xor-butterfly or shfl_down, sums the 32 lanes of the calling warp)
    gives each warp its own sum; thread 0 - lane 0 of warp 0 - writes rsqrtf(variance / hidden + eps)
    into shared memory and every thread scales by it. The other warps' sums are never combined.
    """
    d = x.shape[-1]
    x32 = x.astype(np.float32)
    partial = np.zeros(block, dtype=np.float32)
    for tid in range(block):
        acc = np.float32(0)
        for idx in range(tid, d, block):
            acc = np.float32(acc + x32[idx] * x32[idx])
        partial[tid] = acc
    # xor butterfly within each warp: every lane ends with its warp's sum; thread 0 uses warp 0's
    warp0 = partial[:32].copy()
    for mask in (16, 8, 4, 2, 1):
        warp0 = np.array([warp0[l] + warp0[l ^ mask] for l in range(32)], dtype=np.float32)
    s_variance = np.float32(1.0) / np.sqrt(np.float32(warp0[0] / np.float32(d) + np.float32(eps)))
    return (x32 * s_variance).astype(np.float32)


@pytest.mark.guards("C39")
def test_article_kernel_is_wrong_for_rows_longer_than_one_warp():
    from reference_impl import oracle

    rng = np.random.default_rng(39)
    for d in (4096, 1000, 257):
        x = rng.standard_normal(d)
        got = article_kernel_model(x, 1e-6)
        want = oracle.rms_norm_forward(x, None, 1e-6)
        # warp 0 sees only the columns with idx % 256 < 32: about 1/8 of the squares for d >= 256,
        # so rstd comes out near sqrt(8) = 2.83 times too large
        ratio = float(np.median(got / want))
        assert ratio > 2.0, (d, ratio)
        share = sum(1 for i in range(d) if i % 256 < 32) / d
        assert abs(ratio - (share ** -0.5)) / ratio < 0.25, (d, ratio, share)
    # with at most 32 columns every square lands in warp 0 and the kernel is right (to fp32 rounding)
    x = rng.standard_normal(32)
    np.testing.assert_allclose(article_kernel_model(x, 1e-6), oracle.rms_norm_forward(x, None, 1e-6), rtol=1e-5)
    # the block-wide reduction used here (block_sum) gets every column for the same launch shape
    vals = [int(v) for v in rng.integers(0, 100, 256)]
    assert block_sum_model(vals) == sum(vals)


# ------------------------------------------------------------------------------------------------------
# Index maps of the register-resident kernels
# ------------------------------------------------------------------------------------------------------

def _constant(name: str) -> int:
    text = (GPU / "common.cuh").read_text() + (GPU / "layer_norm.cu").read_text()
    m = re.search(rf"constexpr int {name} = (\d+);", text)
    assert m, name
    return int(m.group(1))


def threads_for_model(nvec: int, items: int, max_threads: int) -> int:
    """The model of normlab::threads_for (common.cuh)."""
    if nvec > max_threads * items:
        return max_threads
    warps = (-(-nvec // items) + 31) // 32
    return 32 if warps < 1 else warps * 32


@pytest.mark.guards("cuda.index_map", "snippet:rms_forward.v45")
def test_register_paths_cover_every_column_exactly_once():
    """For every width up to 65536 and every vector width, the kernel's register path (thread t owns
    vectors t + i*B, i < items) covers [0, nvec) exactly once, and the block size depends on d only."""
    max_threads = _constant("kMaxThreads")
    src = (GPU / "common.cuh").read_text()
    assert "if (nvec > kMaxThreads * items) return kMaxThreads;" in src
    for items_name in ("kFwdItems", "kBwdItems", "kLnBwdItems"):
        items = _constant(items_name)
        widths = sorted(set(range(0, 300)) | {1000, 1023, 1024, 1025, 4095, 4096, 4097, 8191, 8192, 12288,
                                              16384, 16385, 32768, 65536})
        for d in widths:
            for vec in (1, 2, 4, 8):
                if d % vec:
                    continue
                nvec = d // vec
                b = threads_for_model(nvec, items, max_threads)
                assert 32 <= b <= max_threads and b % 32 == 0
                if nvec <= items * b:  # the kernel's own test for the register path
                    owned = [t + i * b for t in range(b) for i in range(items) if t + i * b < nvec]
                    assert sorted(owned) == list(range(nvec)), (items_name, d, vec)
                else:  # streaming: only when the row cannot fit the largest block
                    assert b == max_threads and nvec > items * max_threads


# ------------------------------------------------------------------------------------------------------
# The real glue, launchers and kernels, run on host threads by the CPU emulation (cuda/gpu/emulation/emu.h)
# ------------------------------------------------------------------------------------------------------
# reference_impl.ops.build.load_emulation_library compiles the four .cu files as C++ with emu.h included
# first, and the CUDA glue (ops_cuda.cpp) for CPU tensors, as the library normlab_emu: the same schemas,
# checks and launcher calls as on a GPU. Blocks run one after another, the threads of a block are real
# threads with real barriers, warp shuffles follow the CUDA rules (a wrong mask aborts, a missing lane
# yields NaN), and every output starts as NaN, so an element a kernel forgets to write fails the
# comparison. tests/ops/test_contract_emulation.py runs the op contract on it; the GPU module
# (tests/ops/test_cuda_kernels.py) repeats these checks on a device, where the memory model, scheduling and
# nvcc's code generation are the real ones.

import ctypes  # noqa: E402

from reference_impl import conventions as conv_tol  # noqa: E402
from reference_impl import oracle  # noqa: E402
from reference_impl import tolerances as tol  # noqa: E402

from .cases import layer_norm_case  # noqa: E402

CONV = {"llama": 0, "gemma": 1}
EPS = 1e-6


@pytest.fixture(scope="module")
def emu():
    try:
        native.load_emulation_library()
    except NativeBuildError as exc:  # the CUDA headers are part of the set-up: a failure, not a skip
        pytest.fail(f"the CUDA emulation does not build: {exc}")
    return torch.ops.normlab_emu


def emu_rms_fwd(ops, x, w, res, conv, version=5, block=0):
    """(y, h, rstd) of forward version 1-5 (5: the production op, with the residual when given)."""
    if version == 5:
        return ops.rms_norm_fwd(x, w, res, EPS, CONV[conv])
    y, rstd = ops.rms_norm_fwd_version(x, w, EPS, version, CONV[conv], block)
    return y, None, rstd


def emu_bwd_blocks(x, w):
    """How many row blocks (partial sums) the emulated RMSNorm backward launches for x: its launcher, called
    directly from the library's exported C symbols."""
    lib = ctypes.CDLL(str(native.BUILD_ROOT / native.EMU_NAME / f"{native.EMU_NAME}.so"))
    code = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
    blocks = ctypes.c_int(0)
    rows, d = x.numel() // x.shape[-1], x.shape[-1]
    p = ctypes.c_void_p
    f = lib.normlab_rms_bwd_blocks
    f.argtypes = [ctypes.c_int, ctypes.c_int, p, p, p, p, ctypes.c_longlong, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
    assert f(code[x.dtype], -1 if w is None else code[w.dtype], x.data_ptr(), x.data_ptr(), x.data_ptr(),
             None if w is None else w.data_ptr(), rows, d, ctypes.byref(blocks)) == 0
    return blocks.value


def _inputs(shape, dtype, seed, wdtype="same"):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=g, dtype=torch.float64) * 2).to(dtype)
    d = shape[-1]
    wd = {"none": None, "same": dtype, "f32": torch.float32}[wdtype]
    w = None if wd is None else (1 + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)).to(wd)
    dy = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    res = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    return x, w, dy, res


def _check_forward(y, rstd, x, w, conv, what):
    wd = None if w is None else conv_tol.effective_gain(w, conv).double().numpy()
    tol.assert_within(y, oracle.rms_norm_forward(x.double().numpy(), wd, EPS), cuda_ops.rms_forward_bound(x, w, EPS, conv), what)
    xd = x.double().numpy()
    want = 1.0 / np.sqrt(np.mean(xd * xd, -1) + EPS)
    d = x.shape[-1]
    rel = tol.gamma(d // 2 + 6, tol.unit_roundoff(torch.float32)) + tol.gamma(d // 2 + 6, tol.unit_roundoff(torch.float64))
    tol.assert_within(rstd, want, rel * want, what + " rstd")


# widths: odd, the 16-byte vector boundary (4096 / 4097), and rows that stream (no register path) for
# the vectorized (40000 bf16 -> 5000 vectors > 4096) and scalar (4097) kernels
EMU_SHAPES = [(3, 1), (2, 3, 33), (3, 1000), (2, 4096), (2, 4097), (1, 40000)]


@pytest.mark.guards("cuda.emulated", "cuda.rms_forward", "snippet:rms_forward_steps.v1",
                    "snippet:rms_forward_steps.v2", "snippet:rms_forward_steps.v3", "snippet:rms_forward.v45",
                    "snippet:common.row_rstd", "snippet:common.block_sum", "snippet:common.warp_sum")
@pytest.mark.parametrize("convention", ["llama", "gemma"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("version", [1, 2, 3, 4, 5])
def test_emulated_forward_versions_match_oracle_and_cpu_op(emu, version, dtype, convention):
    for i, shape in enumerate(EMU_SHAPES):
        wmode = ("same", "f32", "none")[i % 3] if dtype != torch.float32 else ("same", "none")[i % 2]
        x, w, _, res = _inputs(shape, dtype, 10 + i, wmode)
        r = res if version == 5 else None
        y, h, rstd = emu_rms_fwd(emu, x, w, r, convention, version)
        hx = x if r is None else (x.float() + r.float()).to(dtype)
        if r is not None:
            assert torch.equal(h, hx)
        _check_forward(y, rstd, hx, w, convention, f"v{version} {shape} {wmode}")
        y_cpu = torch.ops.normlab.rms_norm_fwd(x, w, r, EPS, CONV[convention])[0]
        tol.assert_within(y, y_cpu.double().numpy(), 2 * cuda_ops.rms_forward_bound(hx, w, EPS, convention),
                          f"v{version} {shape} vs CPU op")


@pytest.mark.guards("cuda.emulated", "cuda.block_sum", "cuda.tree_sum", "C39")
def test_emulated_v2_v3_block_sizes(emu):
    x, w, _, _ = _inputs((3, 777), torch.float32, 30)
    for version, block in [(3, 1), (3, 31), (3, 33), (3, 100), (3, 1024), (2, 1), (2, 64), (2, 1024)]:
        y, _, rstd = emu_rms_fwd(emu, x, w, None, "llama", version, block)
        _check_forward(y, rstd, x, w, "llama", f"v{version} block {block}")
    with pytest.raises(ValueError, match="power-of-two"):  # the tree needs a power-of-two block
        emu_rms_fwd(emu, x, w, None, "llama", 2, 96)


@pytest.mark.guards("cuda.emulated", "cuda.misaligned")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_emulated_offset_views_take_the_scalar_path(emu, dtype):
    for rows, d in [(3, 8), (2, 1024), (1, 4104)]:
        x, w, _, res = _inputs((rows, d), dtype, 40)
        xb, wb, rb = torch.empty(rows * d + 1, dtype=dtype), torch.empty(d + 1, dtype=dtype), torch.empty(rows * d + 1, dtype=dtype)
        xb[1:], wb[1:], rb[1:] = x.reshape(-1), w, res.reshape(-1)
        xm, wm, rm = xb[1:].view(rows, d), wb[1:], rb[1:].view(rows, d)
        assert xm.data_ptr() % 16 and wm.data_ptr() % 16
        for r in (None, rm):
            y, h, rstd = emu_rms_fwd(emu, xm, wm, r, "llama", 5)
            hx = x if r is None else (x.float() + res.float()).to(dtype)
            _check_forward(y, rstd, hx, w, "llama", f"offset view {rows}x{d}")


@pytest.mark.guards("cuda.emulated", "cuda.rms_backward", "cuda.deterministic", "cuda.batch_invariant",
                    "snippet:rms_backward.rms_bwd", "snippet:common.column_sum")
@pytest.mark.parametrize("convention", ["llama", "gemma"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)  # fp16 shares bf16's code path
def test_emulated_backward_matches_oracle(emu, dtype, convention):
    # (40, 64): a persistent grid of 5 blocks of 8 rows; (3, 4097): the scalar path; (2, 20000): bf16 and
    # fp32 rows that stream (dweight accumulated in the block's partial row in memory)
    for i, shape in enumerate([(40, 64), (2, 3, 33), (3, 4097), (2, 20000)]):
        wmode = ("same", "f32", "none", "same")[i] if dtype != torch.float32 else ("same", "none")[i % 2]
        x, w, dy, _ = _inputs(shape, dtype, 50 + i, wmode)
        _, _, rstd = emu_rms_fwd(emu, x, w, None, convention, 5)
        dx, dw = emu.rms_norm_bwd(dy, x, w, rstd, CONV[convention])
        rows = x.numel() // x.shape[-1]
        blocks = emu_bwd_blocks(x, w)
        assert 1 <= blocks <= rows and (rows < 16 or blocks < rows)
        assert dw.dtype == torch.float32 if w is not None else dw.shape == (0,)
        wd = None if w is None else conv_tol.effective_gain(w, convention).double().numpy()
        edx, edw = oracle.rms_norm_backward_placed(dy.double().numpy(), x.double().numpy(), wd, EPS)
        bdx, bdw = tol.convention_backward_bounds(dy, x, w, EPS, convention)
        tol.assert_within(dx, edx, bdx, f"dx {shape}")
        if w is not None:
            tol.assert_within(dw, edw, bdw, f"dweight {shape}")
        again = emu.rms_norm_bwd(dy, x, w, rstd, CONV[convention])
        assert torch.equal(dx, again[0]) and (w is None or torch.equal(dw, again[1]))
        k = max(1, rows // 3)
        part = emu.rms_norm_bwd(dy.reshape(rows, -1)[:k], x.reshape(rows, -1)[:k], w,
                                rstd.reshape(rows)[:k].contiguous(), CONV[convention])
        assert torch.equal(part[0], dx.reshape(rows, -1)[:k])


@pytest.mark.guards("cuda.emulated", "cuda.layer_norm", "snippet:layer_norm.ln_fwd", "snippet:layer_norm.ln_bwd")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_emulated_layer_norm_matches_oracle(emu, dtype):
    eps = 1e-5
    for i, (shape, pmode) in enumerate([((40, 64), "same"), ((3, 4097), "mixed"), ((2, 1000), "none"),
                                        ((2, 14000), "f32"), ((2, 3, 33), "same")]):
        x, dy, w, b = layer_norm_case(shape, dtype, pmode, seed=60 + i)
        d = shape[-1]
        y, mean, rstd = emu.layer_norm_fwd(x, w, b, eps)[:3]
        dx, dw, db = emu.layer_norm_bwd(dy, x, w, mean, rstd)
        ey = oracle.layer_norm_forward(x.double().numpy(), None if w is None else w.double().numpy(),
                                       None if b is None else b.double().numpy(), eps)
        tol.assert_within(y, ey, tol.ln_forward_bound(x, w, b, eps, dtype), f"LN y {shape}")
        edx, edw, edb = oracle.layer_norm_backward(dy.double().numpy(), x.double().numpy(),
                                                   None if w is None else w.double().numpy(), np.zeros(d), eps)
        bdx, bdw, _ = tol.ln_backward_bounds(dy, x, w, None, eps, dtype, torch.float32)
        _, _, bdb = tol.ln_backward_bounds(dy, x, None, torch.zeros(d), eps, dtype, torch.float32)
        tol.assert_within(dx, edx, bdx, f"LN dx {shape}")
        assert db.dtype == torch.float32  # the float32 sums over rows (cuda/ops.h)
        tol.assert_within(db, edb, bdb, f"LN dbias {shape}")
        if w is not None:
            assert dw.dtype == torch.float32
            tol.assert_within(dw, edw, bdw, f"LN dweight {shape}")


@pytest.mark.guards("cuda.emulated", "cuda.rms_forward", "cuda.rms_backward")
def test_emulated_non_finite_rows_and_empty_shapes(emu):
    """An Inf or NaN stays in its row, as in the CPU op; d = 0 is refused as on the CPU; 0 rows give a
    zero dweight."""
    g = torch.Generator().manual_seed(70)
    x, w = torch.randn(4, 300, generator=g), torch.rand(300, generator=g) + 0.5
    x[1, 7], x[2, 3] = float("inf"), float("nan")
    y_cpu = torch.ops.normlab.rms_norm_fwd(x, w, None, EPS, 0)[0]
    for version in (1, 2, 3, 5):
        y, _, _ = emu_rms_fwd(emu, x, w, None, "llama", version)
        assert torch.equal(torch.isnan(y), torch.isnan(y_cpu)) and (y[1, :7] == 0).all(), version
        tol.assert_within(y[[0, 3]], y_cpu[[0, 3]].double().numpy(),
                          2 * cuda_ops.rms_forward_bound(x[[0, 3]], w, EPS, "llama"), f"finite rows v{version}")
    for version in (3, 5):  # d = 0: nothing to normalize over, on every device
        with pytest.raises(ValueError, match="empty last dimension"):
            emu_rms_fwd(emu, torch.randn(3, 0), torch.ones(0), None, "llama", version)
    empty = torch.randn(0, 16)
    _, dw = emu.rms_norm_bwd(empty, empty, torch.ones(16), torch.empty(0), 0)
    assert emu_bwd_blocks(empty, torch.ones(16)) == 0 and torch.equal(dw, torch.zeros(16))


# QK-norm's head sizes and the other rows that fit one warp's registers (at most 256 vectors): the op runs
# them several to a block (version 6). Row counts that leave the last block partly empty.
SHORT_ROWS = [(37, 64), (19, 128), (9, 256), (5, 1), (7, 33), (4, 1000), (3, 2048)]


@pytest.mark.guards("cuda.emulated", "cuda.short_rows", "snippet:rms_forward.rows", "snippet:common.group_sum")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_emulated_version6_gives_version4s_bits_on_short_rows(emu, dtype):
    """Version 6 (several rows per block, a group of lanes per row) returns exactly version 4's y and rstd:
    same vectors per lane, same shuffle order. The op (version 4/5's entry) takes version 6 for these rows,
    with and without the residual, and stays within the oracle's bound."""
    for i, (rows, d) in enumerate(SHORT_ROWS):
        d = 1024 if dtype == torch.float32 and d == 2048 else d  # 256 vectors of 4 or of 8 elements
        wmode = ("same", "f32", "none")[i % 3] if dtype != torch.float32 else ("same", "none")[i % 2]
        x, w, _, res = _inputs((rows, d), dtype, 90 + i, wmode)
        conv = ("llama", "gemma")[i % 2]
        y4, _, r4 = emu_rms_fwd(emu, x, w, None, conv, 4)
        y6, _, r6 = emu_rms_fwd(emu, x, w, None, conv, 6)
        assert torch.equal(y6, y4) and torch.equal(r6, r4), (rows, d, wmode)
        y, _, rstd = emu_rms_fwd(emu, x, w, None, conv, 5)
        assert torch.equal(y, y6) and torch.equal(rstd, r6), (rows, d)
        _check_forward(y6, r6, x, w, conv, f"v6 {rows}x{d} {wmode}")
        y, h, rstd = emu_rms_fwd(emu, x, w, res, conv, 5)
        hx = (x.float() + res.float()).to(dtype)
        assert torch.equal(h, hx)
        _check_forward(y, rstd, hx, w, conv, f"v6 residual {rows}x{d}")


@pytest.mark.guards("cuda.emulated", "cuda.short_rows", "cuda.batch_invariant")
def test_emulated_version6_rows_do_not_depend_on_their_neighbours(emu):
    """A row's output is the same bits alone, at another position in its block, or in another batch."""
    x, w, _, _ = _inputs((37, 128), torch.bfloat16, 95)
    y_all, _, _ = emu_rms_fwd(emu, x, w, None, "llama", 6)
    for lo, hi in ((0, 1), (13, 14), (5, 37), (30, 37)):
        y_part, _, _ = emu_rms_fwd(emu, x[lo:hi].contiguous(), w, None, "llama", 6)
        assert torch.equal(y_part, y_all[lo:hi]), (lo, hi)


@pytest.mark.guards("cuda.emulated", "cuda.short_rows")
def test_emulated_version6_refuses_rows_longer_than_one_warp(emu):
    """Version 6 holds a row in one warp's registers: 256 vectors at most; a longer row is a ValueError
    that says so, while the op takes the one-row-per-block kernel for it."""
    x, w, _, _ = _inputs((2, 2056), torch.bfloat16, 96)  # 257 vectors of 8
    with pytest.raises(ValueError, match="version 6 takes rows of at most 256 vectors"):
        emu_rms_fwd(emu, x, w, None, "llama", 6)
    y, _, rstd = emu_rms_fwd(emu, x, w, None, "llama", 5)
    _check_forward(y, rstd, x, w, "llama", "2x2056 through the op")
    with pytest.raises(ValueError, match="version must be 1, 2, 3, 4 or 6"):
        emu_rms_fwd(emu, x, w, None, "llama", 7)
