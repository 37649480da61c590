"""What DyT and Derf share in the catalog: their sample inputs, bounds and formula helpers.

Both are ``y = weight * f(alpha * x + shift) + bias`` with a bounded, odd, smooth ``f`` (tanh, erf).
Forward bound (float32 compute, float64 for float64 input; u_c and u_o the compute and output unit
roundoffs): the argument ``a = alpha * x + shift`` is rounded (two operations: relative u_c on each
product and sum, so an absolute error of at most ``2 u_c (|alpha x| + |shift|)``), f passes that on times
``|f'(a)|`` and adds its own error, at most ``L`` ulps of ``|f(a)|`` for the library's tanh/erf (L = 4: the
accuracy SLEEF and glibc document for these functions is within 1 to 4 ulps), then ``* weight`` and
``+ bias`` round once each and the cast rounds once more:
``|err| <= |w| (|f'(a)| 2 u_c (|alpha x| + |s|) + L u_c |f(a)|) + u_c (2 |w f(a)| + |b|) + u_o |y| + floor``,
plus the oracle's own float64 error, the same expression with u_64.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from .. import tolerances as _tol
from .spec import BadInput, replace_input, common_bad, randn

LIB_ULPS = 4


def inputs(alpha=0.8, shift=None):
    def make(shape, dtype, g):
        pd = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
        out = {"x": randn(shape, dtype, g, 2.0), "alpha": torch.tensor(alpha, dtype=pd)}
        if shift is not None:
            out["shift"] = torch.tensor(shift, dtype=pd)
        out["weight"] = randn((shape[-1],), pd, g, 0.5, 1.0)
        out["bias"] = randn((shape[-1],), pd, g, 0.3)
        return out
    return make


def bound(f, fprime):
    """The forward bound above for ``f`` with derivative ``fprime`` (NumPy float64 functions)."""
    def compute(inputs, params):
        x = inputs["x"]
        xd = x.detach().double().numpy()
        al = float(inputs["alpha"])
        sh = float(inputs["shift"]) if "shift" in inputs else 0.0
        w = inputs["weight"].detach().double().numpy()
        b = inputs["bias"].detach().double().numpy()
        a = al * xd + sh
        fa = f(a)
        y = w * fa + b
        cd = torch.float64 if x.dtype == torch.float64 else torch.float32
        total = _tol.unit_roundoff(x.dtype) * np.abs(y) + float(torch.finfo(x.dtype).tiny) * _tol.unit_roundoff(x.dtype)
        for u in {_tol.unit_roundoff(cd), _tol.unit_roundoff(torch.float64)}:
            arg = np.abs(fprime(a)) * 2 * u * (np.abs(al * xd) + abs(sh))
            total = total + np.abs(w) * (arg + LIB_ULPS * u * np.abs(fa)) + u * (2 * np.abs(w * fa) + np.abs(b))
        return total
    return compute


def bad_inputs(scalars=("alpha",)):
    out = list(common_bad(("weight", "bias"), eps=False))
    for name in scalars:
        out.append(BadInput(f"{name} not 0-d", replace_input(name, lambda a: a.reshape(1)), ValueError, "0-d"))
        out.append(BadInput(f"{name} a float", replace_input(name, lambda a: float(a)), TypeError, name))
    return tuple(out)


erf = np.vectorize(math.erf, otypes=[np.float64])


def derf_prime(a):
    return 2.0 / math.sqrt(math.pi) * np.exp(-a * a)


def tanh_prime(a):
    return 1.0 - np.tanh(a) ** 2
