"""Forward bounds shared by the catalog's RMS-type entries, built from :mod:`reference_impl.tolerances`."""
from __future__ import annotations

import numpy as np
import torch

from .. import tolerances as _tol

u = _tol.unit_roundoff


def rms_like(y_abs, n, x_dtype, out_dtype=None, compute=None):
    """|err| <= (u_o + gamma(n//2 + 6, u_c) + gamma(n//2 + 6, u_64)) |y| + floor for an RMS over ``n``
    values: the analysis of :func:`reference_impl.tolerances.rms_forward_bound` with the mean over n."""
    out_dtype = out_dtype or x_dtype
    compute = compute or (torch.float64 if x_dtype == torch.float64 else torch.float32)
    rel = u(out_dtype) + _tol.gamma(n // 2 + 6, u(compute)) + _tol.gamma(n // 2 + 6, u(torch.float64))
    if x_dtype == torch.float64 and compute == torch.float32:
        rel += 3 * u(torch.float32)  # x rounded to float32 first
    return rel * np.abs(y_abs) + float(torch.finfo(out_dtype).tiny) * u(out_dtype)
