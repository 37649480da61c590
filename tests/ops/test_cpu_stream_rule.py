"""Streaming stores only into memory that is already mapped (``use_stream`` in cuda/cpu/cpu_common.h).

An output of at least 4 MiB is written with non-temporal stores when its first, middle and last pages are
mapped; into fresh pages (an allocator that returned the block to the kernel) the kernels use ordinary
stores, because the page fault has just zeroed each line through the cache. ``NORMLAB_STREAM_BYTES`` set
decides by size alone. The store used changes no bit: the outputs written into an untouched anonymous
mapping, into the same memory once mapped, and under both forced settings must be identical, for the
forward (out= and allocating) and the backward of both norms.
"""
from __future__ import annotations

import mmap

import pytest
import torch

import reference_impl.ops  # noqa: F401  (loads the library)
from reference_impl.ops import library as lib

from .env_vars import set_env

ROWS, D = 1024, 2048  # 8 MiB in float32, 4 MiB in bfloat16: both at the 4 MiB threshold or above


def _fresh(like: torch.Tensor) -> tuple[mmap.mmap, torch.Tensor]:
    """A tensor over an anonymous mapping nobody has touched: none of its pages is mapped yet."""
    m = mmap.mmap(-1, like.nbytes)
    return m, torch.frombuffer(m, dtype=like.dtype).view(like.shape)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=str)
def test_fresh_and_mapped_outputs_get_the_same_bits(dtype):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(ROWS, D, generator=g).to(dtype)
    w = (1 + 0.1 * torch.randn(D, generator=g)).to(dtype)
    b = (0.1 * torch.randn(D, generator=g)).to(dtype)
    results = {}
    for name, env in (("rule", None), ("always", "0"), ("never", str(1 << 40))):
        with set_env(NORMLAB_STREAM_BYTES=env), torch.no_grad():
            m, fresh = _fresh(x)
            lib.fused_rms_norm(x, w, 1e-6, out=fresh)  # untouched pages: ordinary stores under the rule
            again = torch.empty_like(x)
            lib.fused_rms_norm(x, w, 1e-6, out=fresh)  # the same memory, now mapped: streamed under the rule
            lib.fused_rms_norm(x, w, 1e-6, out=again)
            m2, fresh_ln = _fresh(x)
            lib.fused_layer_norm(x, w, b, 1e-5, out=fresh_ln)
            results[name] = [fresh.clone(), again, fresh_ln.clone(), lib.fused_rms_norm(x, w, 1e-6),
                             lib.fused_layer_norm(x, w, b, 1e-5)]
            del fresh, fresh_ln
            m.close(), m2.close()
        xg, wg, bg = (t.clone().requires_grad_(True) for t in (x, w, b))
        dy = torch.randn(ROWS, D, generator=torch.Generator().manual_seed(4)).to(dtype)
        with set_env(NORMLAB_STREAM_BYTES=env):
            lib.fused_rms_norm(xg, wg, 1e-6).backward(dy)
            lib.fused_layer_norm(xg, wg, bg, 1e-5).backward(dy)
        results[name] += [xg.grad, wg.grad, bg.grad]
    ref = results["rule"]
    assert torch.equal(ref[0], ref[1]) and torch.equal(ref[0], ref[3])
    for name in ("always", "never"):
        for k, (a, c) in enumerate(zip(ref, results[name])):
            assert torch.equal(a.view(torch.uint8), c.view(torch.uint8)), f"output {k} differs from {name!r} ({dtype})"


def test_the_rule_reads_the_mapping_unless_the_size_is_forced():
    from reference_impl.ops import build

    text = (build.SOURCES / "cpu" / "cpu_common.h").read_text()
    body = text[text.index("inline bool use_stream("):]
    body = body[: body.index("\n}\n") + 3]
    assert 'std::getenv("NORMLAB_STREAM_BYTES")' in body and "pages_mapped(p, n)" in body
    assert "mincore(" in text[text.index("inline bool pages_mapped("):text.index("inline bool use_stream(")]
    for glue in ("rms_norm_cpu.cpp", "layer_norm_cpu.cpp"):  # every output that may stream asks the rule
        src = (build.SOURCES / "cpu" / glue).read_text()
        assert src.count("use_stream(") == 2 and ">= stream_bytes()" not in src, glue
