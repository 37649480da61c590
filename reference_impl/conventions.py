"""RMSNorm and LayerNorm as real model families compute them, operation for operation.

The core reference (:mod:`reference_impl.reference`) computes in float32, applies the gain in float32 and
rounds once at the end. Model code does not all do that: the order of the casts decides which bits come
out in bfloat16 and float16. Each convention here replays one family's order of operations exactly, so its
forward output is bit-identical (``torch.equal``) to the installed module (tests/test_transformers_parity.py).

RMSNorm conventions (``rms_norm(..., convention=...)``); ``h = xf * rsqrt(mean(xf**2) + eps)``:

===========  ===========================================================================================
reference    the core: compute in float32 (float64 for float64 input), ``h * w`` in that dtype, one cast
             to ``x.dtype`` at the end.
llama        ``xf = x.to(float32)``; ``w * h.to(x.dtype)``: cast *before* the gain, the product in
             ``promote(x.dtype, w.dtype)``. transformers' LlamaRMSNorm, also Mistral, Mixtral, Qwen2,
             Qwen3, DeepSeek-V3, Phi-3. float64 input is computed in float32 too.
gemma        ``(h * (1 + w.float())).type_as(x)``: the stored weight is an offset from 1 (initialised to 0),
             applied in float32, one cast at the end. Gemma, Gemma 2, Gemma 3.
t5           the mean square from ``x.to(float32)``, but ``x * rsqrt(...)`` multiplies the *uncast* input
             (type promotion); the result is cast to the weight's dtype only if that is float16/bfloat16,
             then ``w * h``. T5LayerNorm.
olmo2        ``(w * h).to(x.dtype)`` with ``xf = x.to(float32)``: gain in float32, one cast. Olmo2RMSNorm.
torch        ``torch.nn.RMSNorm`` / ``F.rms_norm``: compute dtype float32 (float64 for float64 input),
             gain applied in that dtype, one cast. ``eps=None`` means ``torch.finfo(compute dtype).eps``,
             i.e. float32's epsilon for float16 and bfloat16 input, not the input dtype's.
===========  ===========================================================================================

LayerNorm conventions (``layer_norm(..., convention=...)``): ``neox`` is ``torch.nn.LayerNorm`` as
GPT-NeoX/Pythia call it (the forward *is* ``F.layer_norm``: its fused kernel's reduction order cannot be
replayed in Python); ``cohere`` is CohereLayerNorm (two-pass float32 statistics, gain in float32, no bias).

``eps_placement``: ``"inside"`` the root, ``x * rsqrt(ms + eps)`` (every family above), or ``"outside"``,
``x / (sqrt(ms) + eps)``, as in the RMSNorm authors' PyTorch code (github.com/bzhangGo/rmsnorm,
``rmsnorm_torch.py``: ``x / (rms_x + self.eps)``, default eps 1e-8). Casting order is kept for either.

Backward: every convention has an explicit backward (no autograd inside): the RMSNorm gradient with the
convention's effective gain (``1 + w`` for gemma), computed in float32 (float64 where the convention
computes in float64), each gradient returned in its tensor's dtype.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from . import reference as _ref
from . import tolerances as _tol
from ._checks import check_eps, check_grad, check_input, check_param, compute_dtype

RMS_CONVENTIONS = ("reference", "llama", "gemma", "t5", "olmo2", "torch")
LN_CONVENTIONS = ("neox", "cohere")
EPS_PLACEMENTS = ("inside", "outside")
HALF = (torch.float16, torch.bfloat16)


def check_convention(convention, allowed=RMS_CONVENTIONS, kind="RMSNorm") -> str:
    if not isinstance(convention, str):
        raise TypeError(f"convention must be a string, got {type(convention).__name__}")
    if convention not in allowed:
        hint = ""
        if convention in LN_CONVENTIONS:
            hint = f"; {convention!r} is a LayerNorm convention: use conventions.layer_norm"
        elif convention in RMS_CONVENTIONS:
            hint = f"; {convention!r} is an RMSNorm convention: use conventions.rms_norm"
        raise ValueError(f"unknown {kind} convention {convention!r}; expected one of {', '.join(allowed)}{hint}")
    return convention


def check_placement(eps_placement) -> str:
    if eps_placement not in EPS_PLACEMENTS:
        raise ValueError(f"eps_placement must be 'inside' or 'outside', got {eps_placement!r}")
    return eps_placement


def stat_dtype(x: torch.Tensor, convention: str) -> torch.dtype:
    """The dtype the convention computes its statistics in: float32, except float64 for reference/torch."""
    if convention in ("reference", "torch"):
        return compute_dtype(x)
    return torch.float32


def resolve_eps(eps, x: torch.Tensor, convention: str) -> float:
    """``eps=None`` is allowed for the torch convention only, and means the compute dtype's epsilon."""
    if eps is None:
        if convention != "torch":
            raise TypeError(f"eps=None is only accepted with convention='torch' (got convention={convention!r})")
        return float(torch.finfo(compute_dtype(x)).eps)
    return check_eps(eps)


def _inv_rms(ms: torch.Tensor, eps: float, placement: str) -> torch.Tensor:
    if placement == "inside":
        return torch.rsqrt(ms + eps)
    return 1.0 / (torch.sqrt(ms) + eps)


# --8<-- [start:conventions_forward]
def _rms_forward(x, w, eps, convention, placement):
    """Returns (y, rstd); rstd is the float32/float64 statistic the backward needs."""
    cd = stat_dtype(x, convention)
    xf = x.to(cd)
    rstd = _inv_rms(xf.pow(2).mean(-1, keepdim=True), eps, placement)
    if convention == "llama":  # normalize in fp32, cast to the input dtype, then the gain
        h = (xf * rstd).to(x.dtype)
        return (h if w is None else w * h), rstd
    if convention == "gemma":  # gain (1 + w) in fp32, then one cast
        h = xf * rstd
        return (h if w is None else h * (1.0 + w.float())).type_as(x), rstd
    if convention == "t5":  # statistics in fp32, product with the uncast input, cast to a half weight's dtype
        h = x * rstd
        if w is None:
            return h.to(x.dtype), rstd
        if w.dtype in HALF:
            h = h.to(w.dtype)
        return w * h, rstd
    if convention == "olmo2":  # gain in fp32, then one cast
        h = xf * rstd
        return (h if w is None else w * h).to(x.dtype), rstd
    # reference and torch: compute dtype, gain in it, one cast (torch's decomposition of _fused_rms_norm)
    h = xf * rstd
    if w is not None:
        h = h * w.to(cd) if convention == "reference" else h.mul(w)
    return h.to(x.dtype), rstd
# --8<-- [end:conventions_forward]


def effective_gain(w, convention):
    """The gain the math applies: ``1 + w`` for gemma (in float32, as Gemma computes it), else ``w``."""
    if w is None:
        return None
    return 1.0 + w.float() if convention == "gemma" else w


def _rms_backward(dy, x, w, rstd, convention, placement):
    """Explicit backward in the statistic dtype. Returns (dx, dw); dw has w's dtype."""
    cd = rstd.dtype
    xf = x.to(cd)
    xhat = xf * rstd
    dyf = dy.to(cd)
    g_w = effective_gain(w, convention)
    g = dyf if g_w is None else dyf * g_w.to(cd)
    m = (g * xhat).mean(-1, keepdim=True)
    if placement == "inside":
        dx = rstd * (g - xhat * m)
    else:  # r = 1/(s + eps): dx = r * (g - (x / s) * mean(g * xhat)); x/s := 0 on an all-zero row
        s = torch.sqrt(xf.pow(2).mean(-1, keepdim=True))
        x_over_s = torch.where(s > 0, xf / torch.where(s > 0, s, torch.ones_like(s)), torch.zeros_like(xf))
        dx = rstd * (g - x_over_s * m)
    dw = None
    if w is not None:
        dw = (dyf * xhat).reshape(math.prod(x.shape[:-1]), x.shape[-1]).sum(0).to(w.dtype)
    return dx.to(x.dtype), dw


class ConventionRMSNormFunction(torch.autograd.Function):
    """``ConventionRMSNormFunction.apply(x, weight, eps, convention, placement)``; explicit backward."""

    @staticmethod
    def forward(ctx, x, weight, eps, convention, placement):
        y, rstd = _rms_forward(x, weight, eps, convention, placement)
        ctx.save_for_backward(x, weight, rstd)
        ctx.convention, ctx.placement = convention, placement
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        dx, dw = _rms_backward(dy, x, weight, rstd, ctx.convention, ctx.placement)
        need = ctx.needs_input_grad
        return (dx if need[0] else None), (dw if need[1] else None), None, None, None


def rms_norm(x, weight=None, eps=1e-6, *, convention="llama", eps_placement="inside"):
    """RMSNorm over the last dimension with a model family's casting order (see the module docstring).

    Args:
        x: ``(..., d)`` float16, bfloat16, float32 or float64 tensor.
        weight: ``(d,)`` gain or ``None``. For ``gemma`` this is the stored offset (the gain is ``1 + w``).
        eps: non-negative number; ``None`` only with ``convention="torch"`` (float32's epsilon for
            float16/bfloat16/float32 input, float64's for float64 input).
        convention: one of ``reference, llama, gemma, t5, olmo2, torch``.
        eps_placement: ``"inside"`` (``rsqrt(ms + eps)``) or ``"outside"`` (``1 / (sqrt(ms) + eps)``).

    Returns:
        The family's output. Its dtype is ``x.dtype``, except: ``llama`` gives ``promote(x, w)`` and ``t5``
        gives ``w.dtype`` for a half weight, else ``promote(float32, x, w)``, as the modules do.
        Differentiable in ``x`` and ``weight`` (explicit backward).

    Raises:
        TypeError / ValueError: as :func:`reference_impl.rms_norm`, plus an unknown convention or placement.
    """
    check_input(x)
    check_param(weight, x, "weight")
    check_convention(convention)
    check_placement(eps_placement)
    eps = resolve_eps(eps, x, convention)
    if convention == "reference" and eps_placement == "inside":
        return _ref.RMSNormFunction.apply(x, weight, eps)
    return ConventionRMSNormFunction.apply(x, weight, eps, convention, eps_placement)


def rms_norm_backward(dy, x, weight=None, eps=1e-6, *, convention="llama", eps_placement="inside"):
    """Explicit backward of :func:`rms_norm`. Returns ``(dx, dweight)`` (``dweight`` None without weight).

    ``dx = r * (g - xhat * mean(g * xhat))`` with ``g = dy * gain``, ``gain = 1 + w`` for gemma, ``w``
    otherwise; with eps outside, ``xhat`` in the bracket becomes ``x / sqrt(ms)``. ``dweight = sum dy * xhat``.
    """
    check_input(x)
    check_grad(dy, x)
    check_param(weight, x, "weight")
    check_convention(convention)
    check_placement(eps_placement)
    eps = resolve_eps(eps, x, convention)
    cd = stat_dtype(x, convention)
    xf = x.to(cd)
    rstd = _inv_rms(xf.pow(2).mean(-1, keepdim=True), eps, eps_placement)
    return _rms_backward(dy, x, weight, rstd, convention, eps_placement)


# --8<-- [start:ln_conventions]
def _ln_forward(x, w, b, eps, convention):
    if convention == "neox":  # GPT-NeoX builds torch.nn.LayerNorm: the forward is torch's own kernel
        d = x.shape[-1]
        return F.layer_norm(x, (d,), w, b, eps)
    xf = x.to(torch.float32)  # cohere: two-pass statistics in fp32, gain in fp32, one cast
    mean = xf.mean(-1, keepdim=True)
    var = (xf - mean).pow(2).mean(-1, keepdim=True)
    h = (xf - mean) * torch.rsqrt(var + eps)
    if w is not None:
        h = w.to(torch.float32) * h
    if b is not None:
        h = h + b.to(torch.float32)
    return h.to(x.dtype)
# --8<-- [end:ln_conventions]


class ConventionLayerNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps, convention):
        y = _ln_forward(x, weight, bias, eps, convention)
        ctx.save_for_backward(x, weight, bias)
        ctx.eps = eps
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, bias = ctx.saved_tensors
        cd = compute_dtype(x)
        xf = x.to(cd)
        xc = xf - xf.mean(-1, keepdim=True)
        rstd = torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + ctx.eps)
        dx, dw, db = _ref._ln_backward(dy, x, weight, bias, rstd)
        need = ctx.needs_input_grad
        return (dx if need[0] else None), (dw if need[1] else None), (db if need[2] else None), None, None


def layer_norm(x, weight=None, bias=None, eps=1e-5, *, convention="neox"):
    """LayerNorm over the last dimension as a family computes it: ``neox`` (torch.nn.LayerNorm, as in
    GPT-NeoX/Pythia) or ``cohere`` (CohereLayerNorm: float32 two-pass statistics, no bias in the model).

    Shapes, dtypes and errors as :func:`reference_impl.layer_norm`. Output dtype ``x.dtype``. The
    backward is the core's explicit LayerNorm backward (two-pass statistics in float32/float64).
    """
    check_input(x)
    check_param(weight, x, "weight")
    check_param(bias, x, "bias")
    check_convention(convention, LN_CONVENTIONS, "LayerNorm")
    eps = check_eps(eps)
    if convention == "neox":
        for name, p in (("weight", weight), ("bias", bias)):
            if p is not None and p.dtype != x.dtype:
                raise TypeError(f"neox (torch.nn.LayerNorm) needs {name} in x's dtype {x.dtype}, got {p.dtype}")
    return ConventionLayerNormFunction.apply(x, weight, bias, eps, convention)


# ----------------------------------------------------------------------------------------------------
# Tolerance policy for the conventions (same derivation as reference_impl.tolerances, plus the extra
# roundings each casting order performs).
# ----------------------------------------------------------------------------------------------------

def _u(dtype):
    return _tol.unit_roundoff(dtype)


def output_dtype(x_dtype, w_dtype, convention):
    """The dtype the family's module returns."""
    if w_dtype is None:
        return x_dtype
    if convention == "llama":
        return torch.promote_types(x_dtype, w_dtype)
    if convention == "t5":
        if w_dtype in HALF:
            return w_dtype
        return torch.promote_types(torch.promote_types(x_dtype, torch.float32), w_dtype)
    return x_dtype


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
    out = output_dtype(x_dtype, w_dtype, convention)
    cd = torch.float64 if (x_dtype == torch.float64 and convention in ("reference", "torch")) else torch.float32
    extra = [_u(out)]  # the last rounding into the output dtype
    if x_dtype == torch.float64 and cd == torch.float32:
        extra.append(3 * u32)
    if w_dtype is not None:
        if convention == "llama" and x_dtype != torch.float64:
            extra.append(_u(x_dtype) if x_dtype in HALF else 0.0)  # h.to(x.dtype) before the gain
        if convention == "t5" and w_dtype in HALF:
            extra.append(_u(w_dtype))  # h.to(w.dtype) before the gain
        if convention == "gemma":
            extra.append(u32)  # 1 + w in float32
    return cd, extra


def forward_bound(x, weight, eps, convention, eps_placement="inside", x_dtype=None, w_dtype=None):
    """Allowed |y_hat - y| per element for a convention, vs the float64 oracle of the same math.

    |err_i| <= (sum(extra roundings) + gamma(d//2 + 6, u_c) + gamma(d//2 + 6, u_64)) |y_i| + floor, with the
    extra roundings of :func:`extra_roundings`; eps outside the root costs one more rounding (the add after
    the square root) and is covered by the same gamma (it replaces rsqrt's second rounding).
    """
    x_dtype = x_dtype or x.dtype
    w_dtype = w_dtype or (None if weight is None else weight.dtype)
    cd, extra = extra_roundings(x_dtype, w_dtype, convention)
    xd = x.detach().double().cpu().numpy()
    wd = None if weight is None else effective_gain(weight.detach().cpu(), convention).double().numpy()
    y = np.abs(oracle_forward(xd, wd, 0.0 if eps is None else eps, eps_placement))
    d = xd.shape[-1]
    rel = sum(extra) + _tol.gamma(d // 2 + 6, _u(cd)) + _tol.gamma(d // 2 + 6, _u(torch.float64))
    out = output_dtype(x_dtype, w_dtype, convention)
    floor = float(torch.finfo(out).tiny) * _u(out)
    return rel * y + floor
# --8<-- [end:policy_conventions]


def backward_bounds(dy, x, weight, eps, convention, eps_placement="inside", extra_low=0, w_low_rows=False):
    """Allowed errors for (dx, dweight) of a convention, vs the float64 oracle of the same math.

    The analysis of :func:`reference_impl.tolerances.rms_backward_bounds`, with the effective gain:
    dx_i = r (g_i - c_i m), m = mean(g * xhat), c = xhat (eps inside) or x / sqrt(ms) (eps outside); each
    term is computed to gamma(d + 10, u_c), so |err dx_i| <= u_o |dx_i| + gamma(d + 10) env_i + floor with
    env_i = r (|g_i| + |c_i| mean|g xhat|). ``extra_low`` counts additional roundings in x's dtype on the way
    (an autograd graph of a family's module, e.g. llama's ``dy * w`` in bfloat16): each perturbs g by
    u_o |g| and adds u_o env. float64 input that a convention computes in float32 adds 3 u_32 env (x rounded).
    dweight_j = sum over n rows of dy * xhat: u_w |dw_j| + gamma(n + d//2 + 8, u_c) sum |dy xhat|, plus
    gamma(n + 2, u_w) sum |dy xhat| when the family reduces the rows in the weight's own dtype (``w_low_rows``).
    """
    cd = stat_dtype(x, convention)
    w_dtype = None if weight is None else weight.dtype
    xd, dyd = x.detach().double().cpu().numpy(), dy.detach().double().cpu().numpy()
    g_w = effective_gain(weight, convention)
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
    dx, dw = oracle_backward(dyd, xd, wd, eps, eps_placement)
    low = extra_low * _u(x.dtype) + (3 * _u(torch.float32) if (x.dtype == torch.float64 and cd == torch.float32) else 0.0)
    gd = _tol.gamma(d + 10, _u(cd)) + _tol.gamma(d + 10, _u(torch.float64))
    floor = float(torch.finfo(x.dtype).tiny) * _u(x.dtype)
    bdx = _u(x.dtype) * np.abs(dx) + (gd + low) * env + floor
    if weight is None:
        return bdx, None
    sw = np.abs(dyd * xhat).reshape(n, d).sum(0)
    uw = _u(w_dtype)
    gw = _tol.gamma(n + d // 2 + 8, _u(cd)) + _tol.gamma(n + d // 2 + 8, _u(torch.float64))
    if w_low_rows:
        gw += _tol.gamma(n + 2, uw)
    bdw = uw * np.abs(dw) + (gw + low) * sw + float(torch.finfo(w_dtype).tiny) * uw
    return bdx, bdw


# ----------------------------------------------------------------------------------------------------
# float64 oracle for eps outside the root (the core oracle has eps inside only)
# ----------------------------------------------------------------------------------------------------

def oracle_forward(x, weight=None, eps=1e-6, eps_placement="inside"):
    """float64 NumPy RMSNorm with eps inside (``x / sqrt(ms + eps)``) or outside (``x / (sqrt(ms) + eps)``)."""
    x = np.asarray(x, dtype=np.float64)
    ms = np.mean(x * x, axis=-1, keepdims=True)
    r = 1.0 / np.sqrt(ms + eps) if eps_placement == "inside" else 1.0 / (np.sqrt(ms) + eps)
    y = x * r
    return y if weight is None else y * np.asarray(weight, dtype=np.float64)


def oracle_backward(dy, x, weight=None, eps=1e-6, eps_placement="inside"):
    """float64 gradient of :func:`oracle_forward`: returns (dx, dweight)."""
    dy, x = np.asarray(dy, np.float64), np.asarray(x, np.float64)
    d = x.shape[-1]
    ms = np.mean(x * x, -1, keepdims=True)
    s = np.sqrt(ms)
    r = 1.0 / np.sqrt(ms + eps) if eps_placement == "inside" else 1.0 / (s + eps)
    xhat = x * r
    g = dy if weight is None else dy * np.asarray(weight, np.float64)
    m = np.mean(g * xhat, -1, keepdims=True)
    if eps_placement == "inside":
        dx = r * (g - xhat * m)
    else:
        with np.errstate(invalid="ignore", divide="ignore"):
            dx = r * (g - np.where(s > 0, x / np.where(s > 0, s, 1.0), 0.0) * m)
    dw = None if weight is None else (dy * xhat).reshape(-1, d).sum(0)
    return dx, dw


__all__ = [
    "RMS_CONVENTIONS", "LN_CONVENTIONS", "EPS_PLACEMENTS", "rms_norm", "rms_norm_backward", "layer_norm",
    "forward_bound", "backward_bounds", "output_dtype", "oracle_forward", "oracle_backward",
]


# ----------------------------------------------------------------------------------------------------
# Which model family uses which norm, as the installed transformers package defines it. Each row is
# checked by tests/test_transformers_parity.py against the installed source and config classes, and the
# numerics study writes the config defaults into docs/data/numerics.json for the History page.
# ----------------------------------------------------------------------------------------------------

# --8<-- [start:families]
FAMILIES = [
    # (family, transformers model folder, norm class, convention, config class, eps attribute, layer class)
    ("Llama", "llama", "LlamaRMSNorm", "llama", "LlamaConfig", "rms_norm_eps", "LlamaDecoderLayer"),
    ("Mistral", "mistral", "MistralRMSNorm", "llama", "MistralConfig", "rms_norm_eps", "MistralDecoderLayer"),
    ("Mixtral", "mixtral", "MixtralRMSNorm", "llama", "MixtralConfig", "rms_norm_eps", "MixtralDecoderLayer"),
    ("Qwen2", "qwen2", "Qwen2RMSNorm", "llama", "Qwen2Config", "rms_norm_eps", "Qwen2DecoderLayer"),
    ("Qwen3", "qwen3", "Qwen3RMSNorm", "llama", "Qwen3Config", "rms_norm_eps", "Qwen3DecoderLayer"),
    ("DeepSeek-V3", "deepseek_v3", "DeepseekV3RMSNorm", "llama", "DeepseekV3Config", "rms_norm_eps", "DeepseekV3DecoderLayer"),
    ("Phi-3", "phi3", "Phi3RMSNorm", "llama", "Phi3Config", "rms_norm_eps", "Phi3DecoderLayer"),
    ("Gemma", "gemma", "GemmaRMSNorm", "gemma", "GemmaConfig", "rms_norm_eps", "GemmaDecoderLayer"),
    ("Gemma 2", "gemma2", "Gemma2RMSNorm", "gemma", "Gemma2Config", "rms_norm_eps", "Gemma2DecoderLayer"),
    ("Gemma 3", "gemma3", "Gemma3RMSNorm", "gemma", "Gemma3TextConfig", "rms_norm_eps", "Gemma3DecoderLayer"),
    ("T5", "t5", "T5LayerNorm", "t5", "T5Config", "layer_norm_epsilon", "T5LayerFF"),
    ("OLMo 2", "olmo2", "Olmo2RMSNorm", "olmo2", "Olmo2Config", "rms_norm_eps", "Olmo2DecoderLayer"),
    ("Mamba-2", "mamba2", "Mamba2RMSNorm", "llama", "Mamba2Config", "layer_norm_epsilon", "Mamba2Block"),
    ("GPT-NeoX / Pythia", "gpt_neox", "LayerNorm", "neox", "GPTNeoXConfig", "layer_norm_eps", "GPTNeoXLayer"),
    ("Cohere (Command R)", "cohere", "CohereLayerNorm", "cohere", "CohereConfig", "layer_norm_eps", "CohereDecoderLayer"),
]
# --8<-- [end:families]


def family_key(family: str) -> str:
    """A stable key for a family name: 'GPT-NeoX / Pythia' -> 'gpt_neox_pythia'."""
    return "".join(ch if ch.isalnum() else "_" for ch in family.lower()).strip("_").replace("___", "_").replace("__", "_")


def ln_backward_bounds(dy, x, weight, bias, eps, extra_low=0, w_low_rows=False):
    """Allowed errors for LayerNorm's (dx, dweight, dbias), vs the float64 oracle, for a computation that
    rounds more than the core's float32 backward does.

    :func:`reference_impl.tolerances.ln_backward_bounds` covers a float32 computation. torch's CPU
    ``layer_norm`` backward for float16/bfloat16 input lands outside it (tests/test_transformers_parity.py),
    as it would if intermediates were rounded to the input dtype. Each such rounding on g = dy * w or on
    xhat perturbs them by u_o relative and adds u_o times dx's envelope
    ``r (|g_i| + mean|g| + |xhat_i| mean|g xhat|)``; ``extra_low`` counts them. ``w_low_rows`` charges the
    sums over the n rows for dweight and dbias as if done in the parameter's dtype: gamma(n + 2, u_w) times
    the sum of the absolute terms.
    """
    bdx, bdw, bdb = _tol.ln_backward_bounds(dy, x, weight, bias, eps, x.dtype, None if weight is None else weight.dtype)
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
        bdw = bdw + (_tol.gamma(n + 2, _u(weight.dtype)) + extra_low * _u(x.dtype)) * np.abs(dyd * xhat).reshape(n, d).sum(0)
    if w_low_rows and bdb is not None:
        bdb = bdb + _tol.gamma(n + 2, _u(bias.dtype)) * np.abs(dyd).reshape(n, d).sum(0)
    return bdx, bdw, bdb
