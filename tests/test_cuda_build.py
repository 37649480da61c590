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

from reference_impl import cuda_build_report, cuda_ops
from reference_impl.native import REPO, SOURCES, NativeBuildError

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
    assert any("code=sm_90" in f for f in cuda_ops.CUDA_FLAGS) and any("code=compute_90" in f for f in cuda_ops.CUDA_FLAGS)
    try:
        cuda_ops.ensure_loaded()
    except NativeBuildError as exc:  # a missing nvcc is a failure too: CI must compile the CUDA sources
        pytest.fail(f"the CUDA library does not build: {exc}")
    for op in ("rms_norm_fwd", "rms_norm_bwd", "layer_norm_fwd", "layer_norm_bwd", "rms_norm_fwd_version"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"normlab::{op}", "CUDA"), op
    schema = str(torch.ops.normlab.rms_norm_fwd_version.default._schema)
    assert "int block_size=0" in schema and "-> (Tensor y, Tensor rstd)" in schema
    # the four ops keep their single schema from cuda/ops.cpp (the CUDA glue only implements them)
    assert "Tensor? residual" in str(torch.ops.normlab.rms_norm_fwd.default._schema)
    so = REPO / "build" / "native" / cuda_ops.NATIVE_NAME / f"{cuda_ops.NATIVE_NAME}.so"
    assert b"sm_90" in so.read_bytes(), "no sm_90 machine code embedded in the library"


@pytest.mark.guards("cuda.build")
def test_kernel_sources_include_no_torch_header():
    """The .cu files see only CUDA headers (fast nvcc); the torch glue is in ops_cuda.cpp."""
    for p in sorted(GPU.iterdir()):
        if p.suffix in (".cu", ".cuh", ".h"):
            includes = re.findall(r'#include\s+[<"]([^>"]+)', p.read_text())
            assert not [i for i in includes if i.startswith(("torch", "ATen", "c10"))], (p.name, includes)


# ------------------------------------------------------------------------------------------------------
# The compiler's resource report on the Kernels page is current
# ------------------------------------------------------------------------------------------------------

def _report():
    path = cuda_build_report.OUT
    assert path.exists(), "docs/data/cuda_resources.json is missing: run python -m reference_impl.cuda_build_report"
    return json.loads(path.read_text())


@pytest.mark.guards("cuda.resources")
def test_resource_report_matches_the_current_sources():
    data = _report()
    assert data["source_hash"] == cuda_build_report.source_hash(), (
        "docs/data/cuda_resources.json was made from other sources or flags: "
        "run python -m reference_impl.cuda_build_report")
    assert re.match(r"\d+\.\d+ \(V[\d.]+\)", data["nvcc"]) and data["arch"] == "sm_90"
    families = {k.split("[")[0] for k in data["kernels"]}
    assert families == {"rms_fwd_v1", "rms_fwd_v2", "rms_fwd_v3", "rms_fwd_v45", "rms_bwd_kernel",
                        "ln_fwd_kernel", "ln_bwd_kernel", "column_sum"}
    # five (x, weight) dtype pairs per templated kernel, two vector widths and two residual modes for v45
    assert sum(k.startswith("rms_fwd_v45[") for k in data["kernels"]) == 5 * 2 * 2
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
        m = re.match(r"(rms_fwd_v45|rms_bwd_kernel|ln_fwd_kernel|ln_bwd_kernel)\[(\w+),(\w+),(\d+)", name)
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
