"""What several norms of the catalog share: the batch-invariant row mean and the model families' casting orders.

Each norm's own math (its forward, its ``autograd.Function`` with the explicit backward, its public
function) lives in its catalog module in :mod:`reference_impl.norms`; this module holds only the pieces
more than one of them uses, so that a norm module imports them and nothing here imports a norm.

- :func:`row_mean`: the core reference's mean over the last dimension, summed in float64 in sequential
  order, so a row's bits do not depend on the batch (RMSNorm, LayerNorm, the ``reference`` convention).
- The casting orders of the model families (tabled below): the convention
  names and their checks, the statistic dtype, :func:`apply_gain` and the generic forward and explicit
  backward :func:`rms_forward` / :func:`rms_backward`, which the RMSNorm conventions, the fused residual
  add and the tensor-parallel norms all run.

The core reference (RMSNorm and LayerNorm in :mod:`reference_impl.norms`):

- Normalization over the last dimension; any leading shape, including empty ones.
- Statistics and the whole computation run in float32 (float64 for float64 input); the result is cast
  once to the input dtype at the end. The gain and bias are used in that compute dtype.
- eps sits inside the square root: ``x * rsqrt(mean(x**2) + eps)``.
- Row statistics (means) are summed in float64 in a fixed, sequential order per row and then rounded to
  the compute dtype, so a row's result does not depend on the other rows or the batch layout (torch's
  own reductions split long rows differently depending on how many rows there are, which moves the last
  bit). Squares are formed in the compute dtype, as the modules this mirrors do.
- Range: in float32, a square overflows for ``|x|`` above ``sqrt(float32 max)`` (about 1.8e19), which makes
  the row's mean square Inf and its rstd 0, so the row comes out as zeros (RMSNorm) or NaN/zeros
  (LayerNorm), as ``torch.nn.functional.rms_norm`` does. With ``eps=0``, a row whose squares all underflow
  (``|x|`` below about 2.6e-23, the square root of float32's smallest subnormal) has mean square 0 and
  rstd Inf: Inf or NaN. docs/numerics.md states both thresholds as a test measures them.
- Non-finite values stay in their row; other rows are unaffected. A NaN makes its whole row NaN. An Inf
  makes the row's mean square Inf, so RMSNorm's rstd is 0: the row's finite entries become 0 and the Inf
  entry NaN (0 * Inf), exactly as ``torch.nn.functional.rms_norm`` does; LayerNorm's row becomes all NaN
  (Inf - Inf in the centring). With ``eps=0`` an all-zero row gives NaN (0 * Inf).
- Gradients come back in the dtype of the tensor they belong to.

The core reference (``norms.rms_norm.rms_norm`` / ``norms.layer_norm.layer_norm``) computes in float32, applies the gain in float32 and
rounds once at the end. Model code does not all do that: the order of the casts decides which bits come
out in bfloat16 and float16. Each convention here replays one family's order of operations exactly, so its
forward output is bit-identical (``torch.equal``) to the installed module (tests/core/test_transformers_parity.py).

RMSNorm conventions (``reference_impl.rms_norm(..., convention=...)``); ``h = xf * rsqrt(mean(xf**2) + eps)``:

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

LayerNorm conventions (``convention_layer_norm(..., convention=...)``): ``neox`` is ``torch.nn.LayerNorm`` as
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

import torch

from ._checks import check_eps, check_input, check_norm_args, check_param, compute_dtype, eps_limit

RMS_CONVENTIONS = ("reference", "llama", "gemma", "t5", "olmo2", "torch")
LN_CONVENTIONS = ("neox", "cohere")
EPS_PLACEMENTS = ("inside", "outside")
HALF = (torch.float16, torch.bfloat16)


def rows(t):
    """Number of rows of any tensor (product of the leading dimensions); well defined when the last one is
    empty. A 0-d tensor has no row dimension: ValueError, not a count of 1."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"rows takes a torch.Tensor, got {type(t).__name__}")
    if t.dim() == 0:
        raise ValueError("a 0-d tensor has no rows: it needs at least one dimension (the last one is the row)")
    return math.prod(t.shape[:-1])


def rows2d(t):
    """``t`` viewed as ``(rows, d)``."""
    return t.reshape(math.prod(t.shape[:-1]), t.shape[-1])


def row_mean(t: torch.Tensor) -> torch.Tensor:
    """Mean over the last dimension, ``(..., 1)`` in ``t``'s dtype, the same bits whatever the batch.

    The sum runs in float64 in sequential order along each row (``cumsum`` never splits a row across
    threads, unlike ``sum``/``mean``, whose split depends on the number of rows), then it is rounded once.
    """
    return (t.to(torch.float64).cumsum(dim=-1)[..., -1:] / t.shape[-1]).to(t.dtype)


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
    check_input(x)
    check_convention(convention, RMS_CONVENTIONS + LN_CONVENTIONS, "normalization")
    if convention in ("reference", "torch"):
        return compute_dtype(x)
    return torch.float32


def resolve_eps(eps, x: torch.Tensor, convention: str) -> float:
    """``eps=None`` is allowed for the torch convention only, and means the compute dtype's epsilon."""
    if eps is None:
        if convention != "torch":
            raise TypeError(f"eps=None is only accepted with convention='torch' (got convention={convention!r})")
        return float(torch.finfo(compute_dtype(x)).eps)
    return check_eps(eps, max_value=eps_limit(stat_dtype(x, convention)))


def inv_rms(ms: torch.Tensor, eps: float, placement: str) -> torch.Tensor:
    """``rsqrt(ms + eps)`` with eps inside the root, ``1 / (sqrt(ms) + eps)`` outside."""
    if placement == "inside":
        return torch.rsqrt(ms + eps)
    return 1.0 / (torch.sqrt(ms) + eps)


def family_row_mean(t, convention):
    """Mean over the last dimension, ``(..., 1)``: torch's mean, as the modules compute it; the core's
    batch-invariant :func:`row_mean` for ``reference`` (so it stays bit-identical to the core reference)."""
    return row_mean(t) if convention == "reference" else t.mean(-1, keepdim=True)


def mean_square(xf, convention):
    return family_row_mean(xf.pow(2), convention)


def _check_gain_args(x, rstd, w, convention) -> None:
    """apply_gain's checks: x and the gain as every entry point checks them, a known RMSNorm convention,
    and an rstd of float32 or float64 with one value per row of x."""
    check_input(x)
    check_param(w, x, "w")
    check_convention(convention)
    if not isinstance(rstd, torch.Tensor):
        raise TypeError(f"rstd must be a torch.Tensor, got {type(rstd).__name__}")
    if rstd.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"rstd has dtype {rstd.dtype}; the statistic is float32 or float64")
    if tuple(rstd.shape) != (*x.shape[:-1], 1):
        raise ValueError(f"rstd has shape {tuple(rstd.shape)}; x of shape {tuple(x.shape)} needs one value per "
                         f"row, shape {(*x.shape[:-1], 1)}")
    if rstd.device != x.device:
        raise ValueError(f"rstd is on {rstd.device} but x is on {x.device}")


# --8<-- [start:conventions_forward]
def apply_gain(x, rstd, w, convention):
    """The family's casting order after the statistic: ``x`` the input, ``rstd`` its float32 (float64)
    reciprocal RMS of shape ``(..., 1)``, ``w`` the gain or ``None``. Returns y in the family's dtype."""
    _check_gain_args(x, rstd, w, convention)
    xf = x.to(rstd.dtype)
    if convention == "llama":  # normalize in fp32, cast to the input dtype, then the gain
        h = (xf * rstd).to(x.dtype)
        return h if w is None else w * h
    if convention == "gemma":  # gain (1 + w) in fp32, then one cast
        h = xf * rstd
        return (h if w is None else h * (1.0 + w.float())).type_as(x)
    if convention == "t5":  # statistics in fp32, product with the uncast input, cast to a half weight's dtype
        h = x * rstd
        if w is None:
            return h.to(x.dtype)
        if w.dtype in HALF:
            h = h.to(w.dtype)
        return w * h
    if convention == "olmo2":  # gain in fp32, then one cast
        h = xf * rstd
        return (h if w is None else w * h).to(x.dtype)
    # reference and torch: compute dtype, gain in it, one cast (torch's decomposition of _fused_rms_norm)
    h = xf * rstd
    if w is not None:
        h = h * w.to(rstd.dtype) if convention == "reference" else h.mul(w)
    return h.to(x.dtype)


def rms_forward(x, w, eps, convention, placement):
    """Returns (y, rstd); rstd is the float32/float64 statistic the backward needs."""
    eps = check_norm_args(x, w, eps, extra=lambda: (check_convention(convention), check_placement(placement)),
                          resolve_eps=lambda e: resolve_eps(e, x, convention))
    xf = x.to(stat_dtype(x, convention))
    rstd = inv_rms(mean_square(xf, convention), eps, placement)
    return apply_gain(x, rstd, w, convention), rstd
# --8<-- [end:conventions_forward]


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


def effective_gain(w, convention):
    """The gain the math applies: ``1 + w`` for gemma (in float32, as Gemma computes it), else ``w``."""
    if w is None:
        return None
    return 1.0 + w.float() if convention == "gemma" else w


def rms_backward(dy, x, w, rstd, convention, placement):
    """Explicit backward in the statistic dtype. Returns (dx, dw); dw has w's dtype."""
    cd = rstd.dtype
    xf = x.to(cd)
    xhat = xf * rstd
    dyf = dy.to(cd)
    g_w = effective_gain(w, convention)
    g = dyf if g_w is None else dyf * g_w.to(cd)
    m = family_row_mean(g * xhat, convention)
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
