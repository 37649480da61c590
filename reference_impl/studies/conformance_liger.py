"""Liger-Kernel's RMSNorm Triton kernels, run under Triton's interpreter on CPU tensors.

Import only with ``TRITON_INTERPRET=1`` set before ``triton`` was first imported. Two shims, both needed
because the interpreter is not the GPU, and neither changing Liger's casting order:

- eps and the gain offset are handed over as float32 kernel scalars, which is what compiled Triton passes;
  the interpreter would pass Python floats, on which Liger's ``eps.to(tl.float32)`` fails;
- Liger imports ``rsqrt`` from libdevice, which the interpreter cannot call (extern functions return
  nothing there); it is replaced by ``tl.math.rsqrt``. The GPU's libdevice ``rsqrt`` is an approximation, so
  the last bit of a row's statistic can differ on a GPU.

bfloat16 is not run: the interpreter converts float32 to bfloat16 by truncation, where the GPU rounds to
nearest even; such a row would measure the interpreter, not Liger.
"""
from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl
from liger_kernel.ops import fused_add_rms_norm as _fa
from liger_kernel.ops import rms_norm as _rn
from triton.runtime.interpreter import TensorHandle

BF16_REASON = ("Triton's interpreter casts float32 to bfloat16 by truncation, the GPU to nearest even: a "
               "bfloat16 row here would measure the interpreter; it is left to the GPU script")


@triton.jit
def _rsqrt(v):
    return tl.math.rsqrt(v)


_rn.rsqrt = _rsqrt
_fa.rsqrt = _rsqrt


def _f32(v: float):
    return tl.tensor(TensorHandle(np.array([v], dtype=np.float32), tl.float32), tl.float32)


def run(x, w, r, eps, convention, unavailable):
    """Liger's ``rms_norm_forward`` (no residual) or ``fused_add_rms_norm_forward``; returns (y, s)."""
    if x.dtype == torch.bfloat16:
        raise unavailable(BF16_REASON)
    offset = 0.0 if convention == "llama" else 1.0
    e, o = _f32(eps), _f32(offset)
    if r is None:
        return _rn.rms_norm_forward(x.contiguous(), w.contiguous(), e, o, convention, False)[0], None
    y, s = _fa.fused_add_rms_norm_forward(x.contiguous(), r.contiguous(), w.contiguous(), e, o, convention)[:2]
    return y, s
