"""The tolerance policy: error bounds derived from unit roundoff and the reduction length.

Every comparison test asks this module how far a result may lie from the float64 oracle. Nothing here is
tuned: each bound is a first-order rounding-error analysis (Higham, *Accuracy and Stability of Numerical
Algorithms*, 2nd ed., ch. 3 and 4) of the computation the reference performs, with

- ``u_c``: unit roundoff of the compute dtype (2**-24 for float32, 2**-53 for float64),
- ``u_o``: unit roundoff of the output dtype (2**-8 bfloat16, 2**-11 float16, ...),
- ``gamma(n, u) = n*u / (1 - n*u)``: the classic bound for ``n`` rounded operations in sequence; a sum of
  ``d`` terms in any order has absolute error at most ``gamma(d-1, u) * sum(|terms|)``.

Bounds are element-wise and absolute, so cancellation is charged to the terms that cancel, not to the
result. The oracle's own float64 error is added (it matters when the reference itself runs in float64).
A tiny absolute floor (half the smallest subnormal spacing of the output dtype) covers underflow.
"""
from __future__ import annotations

import numpy as np
import torch


def unit_roundoff(dtype: torch.dtype) -> float:
    """Half the machine epsilon: the largest relative error of one round-to-nearest operation."""
    return float(torch.finfo(dtype).eps) / 2.0


def gamma(n: int, u: float) -> float:
    """Higham's gamma_n = n*u / (1 - n*u); requires n*u < 1."""
    nu = n * u
    if nu >= 1:
        raise ValueError(f"gamma({n}) undefined for unit roundoff {u}: n*u >= 1")
    return nu / (1 - nu)


def _units(out_dtype: torch.dtype, compute: torch.dtype):
    u_o = unit_roundoff(out_dtype)
    u_cs = [unit_roundoff(compute)]
    if compute != torch.float64:
        u_cs.append(unit_roundoff(torch.float64))  # the oracle's own rounding
    floor = float(torch.finfo(out_dtype).tiny) * u_o
    return u_o, u_cs, floor


def _compute_for(out_dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if out_dtype == torch.float64 else torch.float32


def _f64(a):
    return None if a is None else np.asarray(a.detach().cpu().double() if isinstance(a, torch.Tensor) else a, dtype=np.float64)


def _rstd_rms(x, eps):
    return 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


# --8<-- [start:policy_rms_forward]
def rms_forward_bound(x, weight, eps, out_dtype, compute=None):
    """Allowed |y_hat - y| per element for RMSNorm forward.

    mean(x**2) carries relative error gamma(d+2) (d squares and a sum of non-negative terms, the
    division, the eps add); rsqrt halves it and adds two roundings; two products follow; the final cast
    adds u_o. Hence |err_i| <= (u_o + gamma(d//2 + 6, u_c)) * |y_i| + floor.
    """
    compute = compute or _compute_for(out_dtype)
    x, w = _f64(x), _f64(weight)
    d = x.shape[-1]
    y = np.abs(x * _rstd_rms(x, eps) * (1.0 if w is None else w))
    u_o, u_cs, floor = _units(out_dtype, compute)
    rel = u_o + sum(gamma(d // 2 + 6, u) for u in u_cs)
    return rel * y + floor
# --8<-- [end:policy_rms_forward]


def rms_backward_bounds(dy, x, weight, eps, x_dtype, w_dtype=None, compute=None):
    """Allowed errors for (dx, dweight) of RMSNorm.

    dx_i = r (g_i - xhat_i m) with m = mean(g * xhat): each of the two terms is computed to relative
    gamma(d+10) (the reduction for m, the error in r and a few products), so
    |err dx_i| <= u_o |dx_i| + gamma(d+10) * r * (|g_i| + |xhat_i| * mean|g * xhat|).
    dweight_j = sum over n rows of dy * xhat: |err| <= u_w |dw_j| + gamma(n + d//2 + 8) * sum |dy * xhat|.
    """
    compute = compute or _compute_for(x_dtype)
    dy, x, w = _f64(dy), _f64(x), _f64(weight)
    d = x.shape[-1]
    r = _rstd_rms(x, eps)
    xhat = x * r
    g = dy if w is None else dy * w
    m_abs = np.mean(np.abs(g * xhat), axis=-1, keepdims=True)
    dx = r * (g - xhat * np.mean(g * xhat, axis=-1, keepdims=True))
    u_o, u_cs, floor = _units(x_dtype, compute)
    gd = sum(gamma(d + 10, u) for u in u_cs)
    dx_bound = u_o * np.abs(dx) + gd * r * (np.abs(g) + np.abs(xhat) * m_abs) + floor
    if w is None:
        return dx_bound, None
    n = int(np.prod(x.shape[:-1]))
    dw = (dy * xhat).reshape(-1, d).sum(0)
    s = np.abs(dy * xhat).reshape(-1, d).sum(0)
    u_w, u_cs_w, floor_w = _units(w_dtype or x_dtype, compute)
    dw_bound = u_w * np.abs(dw) + sum(gamma(n + d // 2 + 8, u) for u in u_cs_w) * s + floor_w
    return dx_bound, dw_bound


def _ln_parts(x, eps):
    mu = np.mean(x, axis=-1, keepdims=True)
    xc = x - mu
    var = np.mean(xc * xc, axis=-1, keepdims=True)
    r = 1.0 / np.sqrt(var + eps)
    return mu, xc, var, r


# --8<-- [start:policy_ln_forward]
def ln_forward_bound(x, weight, bias, eps, out_dtype, compute=None):
    """Allowed |y_hat - y| per element for LayerNorm forward.

    The mean is off by at most e = gamma(d+1) * mean|x|; that shift enters x_i - mean directly and the
    variance only at second order (the centred values sum to zero), adding (e**2 / (var + eps)) to its
    relative error. Hence |err_i| <= u_o |y_i| + |w_i| r (gamma(d//2+8) |xc_i| + e (1 + e r**2 |xc_i|))
    + 2 u_c |b_i| + floor.
    """
    compute = compute or _compute_for(out_dtype)
    x, w, b = _f64(x), _f64(weight), _f64(bias)
    d = x.shape[-1]
    mu, xc, var, r = _ln_parts(x, eps)
    aw = 1.0 if w is None else np.abs(w)
    y = xc * r * (1.0 if w is None else w) + (0.0 if b is None else b)
    u_o, u_cs, floor = _units(out_dtype, compute)
    mean_abs = np.mean(np.abs(x), axis=-1, keepdims=True)
    total = u_o * np.abs(y) + floor
    for u in u_cs:
        e = gamma(d + 1, u) * mean_abs
        total = total + aw * r * (gamma(d // 2 + 8, u) * np.abs(xc) + e * (1.0 + e * r * r * np.abs(xc)))
        if b is not None:
            total = total + 2 * u * np.abs(b)
    return total
# --8<-- [end:policy_ln_forward]


def ln_backward_bounds(dy, x, weight, bias, eps, x_dtype, w_dtype=None, compute=None):
    """Allowed errors for (dx, dweight, dbias) of LayerNorm.

    As for RMSNorm, plus the mean(g) term and the centring error e (see :func:`ln_forward_bound`), which
    perturbs xhat by about r*e: |err dx_i| <= u_o|dx_i| + gamma(d+10) r (|g_i| + mean|g| + |xhat_i| mean|g xhat|)
    + r * (r e) * (mean|g xhat| + mean|g| * (1 + |xhat_i|)). dweight as for RMSNorm with xhat's extra
    error r*e; dbias_j = sum of n values: gamma(n) * sum |dy|.
    """
    compute = compute or _compute_for(x_dtype)
    dy, x, w = _f64(dy), _f64(x), _f64(weight)
    d = x.shape[-1]
    n = int(np.prod(x.shape[:-1]))
    mu, xc, var, r = _ln_parts(x, eps)
    xhat = xc * r
    g = dy if w is None else dy * w
    mg = np.mean(np.abs(g), axis=-1, keepdims=True)
    mgx = np.mean(np.abs(g * xhat), axis=-1, keepdims=True)
    dx = r * (g - np.mean(g, -1, keepdims=True) - xhat * np.mean(g * xhat, -1, keepdims=True))
    u_o, u_cs, floor = _units(x_dtype, compute)
    mean_abs = np.mean(np.abs(x), axis=-1, keepdims=True)
    dx_bound = u_o * np.abs(dx) + floor
    for u in u_cs:
        e = gamma(d + 1, u) * mean_abs
        dx_bound = dx_bound + gamma(d + 10, u) * r * (np.abs(g) + mg + np.abs(xhat) * mgx)
        dx_bound = dx_bound + r * (r * e) * (mgx + mg * (1.0 + np.abs(xhat)))
    dw_bound = db_bound = None
    u_w, u_cs_w, floor_w = _units(w_dtype or x_dtype, compute)
    if w is not None:
        dw = (dy * xhat).reshape(-1, d).sum(0)
        s = np.abs(dy * xhat).reshape(-1, d).sum(0)
        sx = (np.abs(dy) * r * gamma(d + 1, u_cs_w[0]) * mean_abs).reshape(-1, d).sum(0)
        dw_bound = u_w * np.abs(dw) + sum(gamma(n + d // 2 + 8, u) for u in u_cs_w) * s + sx + floor_w
    if bias is not None:
        s = np.abs(dy).reshape(-1, d).sum(0)
        db = dy.reshape(-1, d).sum(0)
        db_bound = u_w * np.abs(db) + sum(gamma(n + 1, u) for u in u_cs_w) * s + floor_w
    return dx_bound, dw_bound, db_bound


def assert_within(actual, expected, bound, what: str = "result") -> None:
    """Fails with the worst offender when |actual - expected| > bound anywhere (NaN must match NaN)."""
    a = _f64(actual)
    e = np.asarray(expected, dtype=np.float64)
    bnd = np.broadcast_to(np.asarray(bound, dtype=np.float64), e.shape)
    if a.shape != e.shape:
        raise AssertionError(f"{what}: shape {a.shape} != expected {e.shape}")
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    if not np.array_equal(nan_a, nan_e):
        raise AssertionError(f"{what}: NaN pattern differs ({nan_a.sum()} NaN vs {nan_e.sum()} expected)")
    ok = ~nan_e
    err = np.abs(a[ok] - e[ok])
    over = err > bnd[ok]
    if over.any():
        i = int(np.argmax(err - bnd[ok]))
        raise AssertionError(
            f"{what}: {int(over.sum())} of {err.size} elements outside the policy bound; worst: "
            f"|{a[ok][i]!r} - {e[ok][i]!r}| = {err[i]:.3e} > bound {bnd[ok][i]:.3e}"
        )
