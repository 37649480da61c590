"""The tolerance policy: error bounds derived from unit roundoff and the reduction length.

Every comparison test asks this module how far a result may lie from the float64 oracle. Nothing here is
tuned: each bound is a first-order rounding-error analysis (Higham, *Accuracy and Stability of Numerical
Algorithms*, 2nd ed., ch. 3 and 4) of the computation the reference performs, with

- ``u_c``: unit roundoff of the compute dtype (``2**-24`` for float32, ``2**-53`` for float64),
- ``u_o``: unit roundoff of the output dtype (``2**-8`` bfloat16, ``2**-11`` float16, ...),
- ``gamma(n, u) = n*u / (1 - n*u)``: the classic bound for ``n`` rounded operations in sequence; a sum of
  ``d`` terms in any order has absolute error at most ``gamma(d-1, u) * sum(|terms|)``.

Bounds are element-wise and absolute, so cancellation is charged to the terms that cancel, not to the
result. The oracle's own float64 error is added (it matters when the reference itself runs in float64).
A tiny absolute floor (half the smallest subnormal spacing of the output dtype) covers underflow.
"""
from __future__ import annotations

import numpy as np
import torch

from . import shared as _cv  # the casting-order helpers (conventions.py re-exports them)
from . import oracle as _oracle

_HALF = (torch.float16, torch.bfloat16)


def unit_roundoff(dtype: torch.dtype) -> float:
    """Half the machine epsilon: the largest relative error of one round-to-nearest operation."""
    return float(torch.finfo(dtype).eps) / 2.0


def gamma(n: int, u: float) -> float:
    """Higham's ``gamma_n = n*u / (1 - n*u)``; requires ``n*u < 1``."""
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

    The mean is off by at most ``e = gamma(d+1) * mean|x|``; that shift enters ``x_i - mean`` directly and
    the variance only at second order (the centred values sum to zero), adding ``e**2 / (var + eps)`` to
    its relative error. Hence
    ``|err_i| <= u_o |y_i| + |w_i| r (gamma(d//2+8) |xc_i| + e (1 + e r**2 |xc_i|)) + 2 u_c |b_i| + floor``.
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

    As for RMSNorm, plus the ``mean(g)`` term and the centring error ``e`` (see :func:`ln_forward_bound`),
    which perturbs xhat by about ``r*e``:
    ``|err dx_i| <= u_o|dx_i| + gamma(d+10) r (|g_i| + mean|g| + |xhat_i| mean|g xhat|)
    + r * (r e) * (mean|g xhat| + mean|g| * (1 + |xhat_i|))``. dweight as for RMSNorm with xhat's extra
    error ``r*e``; ``dbias_j``, a sum of n values, to ``gamma(n) * sum |dy|``.
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


# ----------------------------------------------------------------------------------------------------
# Bounds for the model-family conventions (reference_impl.conventions): the derivation above, plus the
# extra roundings each casting order performs.
# ----------------------------------------------------------------------------------------------------

def _u(dtype):
    return unit_roundoff(dtype)



# --8<-- [start:policy_conventions]
def extra_roundings(x_dtype, w_dtype, convention):
    """Unit roundoffs of the roundings a convention adds to the core's analysis, each relative to |y_i|.

    The core bound (``tolerances.rms_forward_bound``) charges gamma(d//2 + 6, u_c) for the statistics and
    two products, plus one final cast u_o. A convention that rounds the normalized value to a low
    precision *before* the gain (llama; t5 with a half weight) pays that cast, and the product in the
    low precision is rounded again. float64 input computed in float32 first rounds x (relative u_32 on
    each x_i, ~3 u_32 on y_i through x_i and the mean square); gemma rounds 1 + w in float32.
    """
    u32 = _u(torch.float32)
    out = _cv.output_dtype(x_dtype, w_dtype, convention)
    cd = torch.float64 if (x_dtype == torch.float64 and convention in ("reference", "torch")) else torch.float32
    extra = [_u(out)]  # the last rounding into the output dtype
    if x_dtype == torch.float64 and cd == torch.float32:
        extra.append(3 * u32)
    if w_dtype is not None:
        if convention == "llama" and x_dtype != torch.float64:
            extra.append(_u(x_dtype) if x_dtype in _HALF else 0.0)  # h.to(x.dtype) before the gain
        if convention == "t5" and w_dtype in _HALF:
            extra.append(_u(w_dtype))  # h.to(w.dtype) before the gain
        if convention == "gemma":
            extra.append(u32)  # 1 + w in float32
    return cd, extra


def convention_forward_bound(x, weight, eps, convention, eps_placement="inside", x_dtype=None, w_dtype=None):
    """Allowed |y_hat - y| per element for a convention, vs the float64 oracle of the same math.

    |err_i| <= (sum(extra roundings) + gamma(d//2 + 6, u_c) + gamma(d//2 + 6, u_64)) |y_i| + floor, with the
    extra roundings of :func:`extra_roundings`; eps outside the root costs one more rounding (the add after
    the square root) and is covered by the same gamma (it replaces rsqrt's second rounding).
    """
    x_dtype = x_dtype or x.dtype
    w_dtype = w_dtype or (None if weight is None else weight.dtype)
    cd, extra = extra_roundings(x_dtype, w_dtype, convention)
    xd = x.detach().double().cpu().numpy()
    wd = None if weight is None else _cv.effective_gain(weight.detach().cpu(), convention).double().numpy()
    y = np.abs(_oracle.rms_norm_forward_placed(xd, wd, 0.0 if eps is None else eps, eps_placement))
    d = xd.shape[-1]
    rel = sum(extra) + gamma(d // 2 + 6, _u(cd)) + gamma(d // 2 + 6, _u(torch.float64))
    out = _cv.output_dtype(x_dtype, w_dtype, convention)
    floor = float(torch.finfo(out).tiny) * _u(out)
    bound = rel * y + floor
    # the cast of h to a half dtype before the gain (llama; t5 with a half weight) may land in that dtype's
    # subnormal range, where its error is absolute: half the smallest subnormal spacing, times |w|
    half_cast = x_dtype if (convention == "llama" and x_dtype in _HALF) else (w_dtype if convention == "t5" else None)
    if weight is not None and half_cast in _HALF:
        bound = bound + float(torch.finfo(half_cast).tiny) * _u(half_cast) * np.abs(weight.detach().double().cpu().numpy())
    if convention == "gemma" and w_dtype == torch.float64:
        # w.float() rounds the stored offset itself: u_32 |w_i| on the gain, which 1 + w may cancel down to
        # far below |w_i|, so it is charged to |w_i| |xhat_i| rather than to |y_i|
        xhat = np.abs(_oracle.rms_norm_forward_placed(xd, None, 0.0 if eps is None else eps, eps_placement))
        bound = bound + _u(torch.float32) * np.abs(weight.detach().double().cpu().numpy()) * xhat
    return bound
# --8<-- [end:policy_conventions]


def convention_backward_bounds(dy, x, weight, eps, convention, eps_placement="inside", extra_low=0, w_low_rows=False):
    """Allowed errors for (dx, dweight) of a convention, vs the float64 oracle of the same math.

    The analysis of :func:`rms_backward_bounds`, with the effective gain:
    dx_i = r (g_i - c_i m), m = mean(g * xhat), c = xhat (eps inside) or x / sqrt(ms) (eps outside); each
    term is computed to gamma(d + 10, u_c), so |err dx_i| <= u_o |dx_i| + gamma(d + 10) env_i + floor with
    env_i = r (|g_i| + |c_i| mean|g xhat|). ``extra_low`` counts additional roundings in x's dtype on the way
    (an autograd graph of a family's module, e.g. llama's ``dy * w`` in bfloat16): each perturbs g by
    u_o |g| and adds u_o env. float64 input that a convention computes in float32 adds 3 u_32 env (x rounded).
    dweight_j = sum over n rows of dy * xhat: u_w |dw_j| + gamma(n + d//2 + 8, u_c) sum |dy xhat|, plus
    gamma(n + 2, u_w) sum |dy xhat| when the family reduces the rows in the weight's own dtype (``w_low_rows``).
    """
    cd = _cv.stat_dtype(x, convention)
    w_dtype = None if weight is None else weight.dtype
    xd, dyd = x.detach().double().cpu().numpy(), dy.detach().double().cpu().numpy()
    g_w = _cv.effective_gain(weight, convention)
    wd = None if g_w is None else g_w.detach().double().cpu().numpy()
    d = xd.shape[-1]
    n = int(np.prod(xd.shape[:-1]))
    ms = np.mean(xd * xd, -1, keepdims=True)
    s = np.sqrt(ms)
    r = 1.0 / np.sqrt(ms + eps) if eps_placement == "inside" else 1.0 / (s + eps)
    xhat = xd * r
    if eps_placement == "inside":
        c = xhat
    else:
        c = np.where(s > 0, xd / np.where(s > 0, s, 1.0), 0.0)
    g = dyd if wd is None else dyd * wd
    env = r * (np.abs(g) + np.abs(c) * np.mean(np.abs(g * xhat), -1, keepdims=True))
    dx, dw = _oracle.rms_norm_backward_placed(dyd, xd, wd, eps, eps_placement)
    low = extra_low * _u(x.dtype) + (3 * _u(torch.float32) if (x.dtype == torch.float64 and cd == torch.float32) else 0.0)
    gd = gamma(d + 10, _u(cd)) + gamma(d + 10, _u(torch.float64))
    floor = float(torch.finfo(x.dtype).tiny) * _u(x.dtype)
    bdx = _u(x.dtype) * np.abs(dx) + (gd + low) * env + floor
    if weight is None:
        return bdx, None
    sw = np.abs(dyd * xhat).reshape(n, d).sum(0)
    uw = _u(w_dtype)
    gw = gamma(n + d // 2 + 8, _u(cd)) + gamma(n + d // 2 + 8, _u(torch.float64))
    if w_low_rows:
        gw += gamma(n + 2, uw)
    bdw = uw * np.abs(dw) + (gw + low) * sw + float(torch.finfo(w_dtype).tiny) * uw
    return bdx, bdw



def ln_family_backward_bounds(dy, x, weight, bias, eps, extra_low=0, w_low_rows=False):
    """Allowed errors for LayerNorm's (dx, dweight, dbias), vs the float64 oracle, for a computation that
    rounds more than the core's float32 backward does.

    :func:`ln_backward_bounds` covers a float32 computation. torch's CPU
    ``layer_norm`` backward for float16/bfloat16 input lands outside it (tests/core/test_transformers_parity.py),
    as it would if intermediates were rounded to the input dtype. Each such rounding on g = dy * w or on
    xhat perturbs them by u_o relative and adds u_o times dx's envelope
    ``r (|g_i| + mean|g| + |xhat_i| mean|g xhat|)``; ``extra_low`` counts them. ``w_low_rows`` charges the
    sums over the n rows for dweight and dbias as if done in the lower of the input's and the parameter's
    dtypes: gamma(n + 2, max(u_x, u_w)) times the sum of the absolute terms. With one thread, torch's CPU
    kernel (2.14) adds the rows' bfloat16 or float16 contributions to a float32 gain's and bias's gradients in
    the input's dtype, one rounding per row (tests/core/test_torch_facts.py reproduces it bit for bit); with
    more threads it sums in float32, well inside this.
    """
    bdx, bdw, bdb = ln_backward_bounds(dy, x, weight, bias, eps, x.dtype, None if weight is None else weight.dtype)
    xd, dyd = x.detach().double().cpu().numpy(), dy.detach().double().cpu().numpy()
    d = xd.shape[-1]
    n = int(np.prod(xd.shape[:-1]))
    xc = xd - xd.mean(-1, keepdims=True)
    r = 1.0 / np.sqrt((xc * xc).mean(-1, keepdims=True) + eps)
    xhat = xc * r
    g = dyd if weight is None else dyd * weight.detach().double().cpu().numpy()
    env = r * (np.abs(g) + np.abs(g).mean(-1, keepdims=True) + np.abs(xhat) * np.abs(g * xhat).mean(-1, keepdims=True))
    bdx = bdx + extra_low * _u(x.dtype) * env
    if w_low_rows and bdw is not None:
        u_rows = max(_u(x.dtype), _u(weight.dtype))
        bdw = bdw + (gamma(n + 2, u_rows) + extra_low * _u(x.dtype)) * np.abs(dyd * xhat).reshape(n, d).sum(0)
    if w_low_rows and bdb is not None:
        bdb = bdb + gamma(n + 2, max(_u(x.dtype), _u(bias.dtype))) * np.abs(dyd).reshape(n, d).sum(0)
    return bdx, bdw, bdb
