"""RMSNorm and LayerNorm across devices: tensor- and sequence-parallel normalization on torch.distributed.

Two ways to split a ``(..., d)`` activation over the ``p`` ranks of a process group:

- **Sharded hidden dimension** (``sharded_rms_norm``, ``sharded_layer_norm``): every rank holds every row
  and a slice of the last dimension, in rank order (rank 0 the first ``d_0`` columns, rank 1 the next
  ``d_1``, ...); slices may differ in size. This is the layout of tensor parallelism (Shoeybi et al. 2019,
  arXiv:1909.08053), e.g. a QK-norm over all heads when the heads are split across ranks. A row's statistic
  is a sum over every slice, so it crosses devices: one float32 partial per row for RMSNorm, two for
  LayerNorm, in each direction.
- **Sequence parallelism** (``sequence_parallel_rms_norm``, ``sequence_parallel_layer_norm``): every rank
  holds some rows (tokens) with the full last dimension and the same, replicated gain (Korthikanti et al.
  2022, arXiv:2205.05198, section 4.2.2). The forward needs no communication; the gain (and bias) gradients
  are sums over all rows, so the backward all-reduces them and every rank ends with the full gradient.

Numerics: statistics in float32 (float64 for float64 input where the convention says so), eps inside the
root: ``r = rsqrt(sum over all ranks of x**2 / d + eps)``. ``deterministic=True`` replaces each all-reduce by
an all-gather of the partials and a left-to-right float32 sum in rank order on every rank, so results are
bit-identical on every rank, on every run, whatever algorithm the backend uses. LayerNorm's statistics come
either from ``stats="sums"`` (sum and sum of squares in one all-reduce, var = E[x^2] - mean^2, which cancels
when |mean| >> std) or ``stats="welford"`` (each rank's (mean, M2) all-gathered and merged in rank order with
the pairwise update of Chan, Golub and LeVeque 1979; Welford 1962), which is as accurate as a two-pass
variance at the price of an all-gather.

Input checks: with ``check_shapes=True`` (the default) each call first all-gathers one small integer
descriptor per rank (shape, dtypes, eps, options, and whether the rank's own checks passed), so a bad or
mismatched input raises the same error on every rank instead of leaving the others waiting in a collective.
The descriptor includes whether the call records a gradient (grad mode on and an input requiring grad):
ranks that differ there would leave one rank alone in the backward's collective, so they raise too.
With ``check_shapes=False`` nothing is exchanged: a rank that fails its own checks raises alone while
the others wait in the collective, and a mismatch no rank can see by itself (shapes, eps or options that
differ across ranks) reaches the collectives, where the backend may abort the whole process (gloo does
on a size mismatch) or wait forever. Turn it off only where every rank is known to pass the same shapes.

Every rank must call each function (and run its backward) in the same order, like any collective.
"""
from __future__ import annotations

import math
import struct
import zlib

import torch
import torch.distributed as dist

from .comm import CommRecorder  # re-exported: the bench and the tests count collectives with it
from ._checks import check_eps, check_input, check_param, compute_dtype, eps_limit, once_differentiable
from .shared import RMS_CONVENTIONS, apply_gain, check_convention, effective_gain, resolve_eps, stat_dtype
from .shared import family_row_mean as row_mean

STATS = ("sums", "welford")

# _ONCE: every backward here is once-differentiable. It uses the forward's statistics as constants and
# all-reduces with torch.distributed's in-place collectives, which record no graph, so a second derivative
# (create_graph=True, then another backward) would come out wrong (at any world size, 1 included). Marked
# once_differentiable, it raises an error that says so instead; for second derivatives, gather the rows
# and use the single-device reference (reference_impl.rms_norm / layer_norm), whose double backward is exact.
# (torch's own once_differentiable lets a Hessian-vector product through as zeros: see _checks.once_differentiable.)
_SECOND = "{}: its backward all-reduces without a graph, so it has no second derivative; gather the rows and use {}"
_DTYPE_CODE = {torch.float16: 1, torch.bfloat16: 2, torch.float32: 3, torch.float64: 4}


# ----------------------------------------------------------------------------------------- collectives

def _membership(group, fn: str) -> int:
    """World size of ``group``; clear errors when there is no process group or this rank is not in it."""
    if not dist.is_available():
        raise RuntimeError(f"{fn}: torch.distributed is not available in this build of PyTorch")
    if not dist.is_initialized():
        raise RuntimeError(f"{fn}: the torch.distributed default process group is not initialised; call "
                           "torch.distributed.init_process_group(backend, ...) on every rank first")
    if isinstance(group, int) and group == dist.GroupMember.NON_GROUP_MEMBER:
        raise ValueError(f"{fn}: this process (global rank {dist.get_rank()}) is not a member of group "
                         "(torch.distributed.new_group returned GroupMember.NON_GROUP_MEMBER here)")
    if group is not None and not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"{fn}: group must be a torch.distributed.ProcessGroup or None, got {type(group).__name__}")
    if dist.get_rank(group) < 0:
        raise ValueError(f"{fn}: this process (global rank {dist.get_rank()}) is not a member of group")
    return dist.get_world_size(group)


def _all_gather(buf: torch.Tensor, group) -> torch.Tensor:
    """``(p, n)``: row k is rank k's 1-D ``buf``."""
    p = dist.get_world_size(group)
    out = buf.new_empty(p * buf.numel())   # the concatenated form: every backend accepts it
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(out, buf.contiguous(), group=group)
    return out.view(p, buf.numel())


# --8<-- [start:reduce]
def _sum_over_ranks(buf: torch.Tensor, group, deterministic: bool) -> torch.Tensor:
    """Sum of a 1-D float buffer over the ranks of ``group``.

    deterministic=False: one all-reduce; the backend picks the order of the additions.
    deterministic=True: all-gather the partials, then add them left to right in rank order on every rank,
    so every rank gets the same bits, on every run, whatever the backend's all-reduce algorithm is.
    """
    if not deterministic:
        buf = buf.contiguous()
        dist.all_reduce(buf, op=dist.ReduceOp.SUM, group=group)
        return buf
    parts = _all_gather(buf, group)
    total = parts[0].clone()
    for k in range(1, parts.shape[0]):
        total += parts[k]
    return total
# --8<-- [end:reduce]


def _row_sums(parts: torch.Tensor, width: int, group, deterministic: bool):
    """``parts``: ``(..., k)`` per-row partials of this rank. Returns (their sums over ranks, d) where d is the
    sum of the ranks' widths, carried as one extra element of the same collective (exact below 2**24)."""
    flat = torch.cat([parts.reshape(-1), parts.new_tensor([float(width)])])
    total = _sum_over_ranks(flat, group, deterministic)
    return total[:-1].reshape(parts.shape), int(total[-1].item())


# --------------------------------------------------------------------------------------- input checks

def _descriptor(x, params, eps, options: str, error) -> list[int]:
    """13 integers that must agree across ranks (or may differ, as the layout allows)."""
    ok = isinstance(x, torch.Tensor) and x.dim() > 0
    shape = tuple(x.shape) if ok else ()
    out = [0 if error is None else (1 if isinstance(error, TypeError) else 2),
           len(shape), hash(shape[:-1]) & 0x7FFFFFFFFFFFFFFF, math.prod(shape[:-1]) if ok else -1,
           shape[-1] if ok else -1, _DTYPE_CODE.get(getattr(x, "dtype", None), 0)]
    for p in params:
        t = isinstance(p, torch.Tensor)
        out += [p.numel() if t else -1, _DTYPE_CODE.get(p.dtype, 0) if t else -1]
    out += [0, 0] * (2 - len(params))
    e = eps if isinstance(eps, float) else float("nan")
    out += [struct.unpack("<q", struct.pack("<d", e))[0], zlib.crc32(options.encode())]
    return out + [int(_records_grad(x, params))]


def _records_grad(x, params) -> bool:
    """Whether this call builds a graph, so that its backward (a collective) will run on this rank."""
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in (x, *params))


def _describe(x, params, eps, options, error) -> str:
    shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
    ps = ", ".join("None" if p is None else f"{tuple(p.shape)} {p.dtype}" if isinstance(p, torch.Tensor)
                   else type(p).__name__ for p in params)
    head = (f"x {shape} {getattr(x, 'dtype', '')}, params [{ps}], eps {eps!r}, options {options}, "
            f"records grad {_records_grad(x, params)}")
    return head if error is None else f"{head}: {type(error).__name__}: {error}"


def _validated(fn, layout, group, check_shapes, x, params, eps, options, local_checks):
    """Runs ``local_checks()`` (returns the resolved eps) and, with ``check_shapes``, agrees with every
    other rank via one all-gather of ``_descriptor``; raises the same error on every rank."""
    error = None
    try:
        eps = local_checks()
    except (TypeError, ValueError) as exc:
        if not check_shapes:
            raise
        error = exc
    if not check_shapes:
        return eps
    device = x.device if isinstance(x, torch.Tensor) else (
        torch.device("cuda", torch.cuda.current_device()) if "nccl" in str(dist.get_backend(group)) else "cpu")
    desc = torch.tensor(_descriptor(x, params, eps, options, error), dtype=torch.int64, device=device)
    rows = _all_gather(desc, group).cpu().tolist()
    problem, kind = _compare(rows, layout)
    if problem is None:
        return eps
    texts = [None] * len(rows)   # only on the error path: every rank's own description
    dist.all_gather_object(texts, _describe(x, params, eps, options, error), group=group)
    detail = "; ".join(f"rank {k}: {t}" for k, t in enumerate(texts))
    raise kind(f"{fn}: {problem} (every rank's input: {detail})") from error


def _compare(rows, layout):
    """(message, exception type) for the first disagreement, or (None, None)."""
    bad = [k for k, r in enumerate(rows) if r[0] != 0]
    if bad:
        return f"rank(s) {bad} rejected their own input, see below", (TypeError if rows[bad[0]][0] == 1 else ValueError)
    col = list(zip(*rows))

    def differs(i):
        return len(set(col[i])) > 1
    checks = [(11, ValueError, "the options (convention, stats, deterministic) differ across ranks"),
              (10, ValueError, "eps differs across ranks"),
              (1, ValueError, "x_local has a different number of dimensions on different ranks"),
              (5, TypeError, "x_local's dtype differs across ranks")]
    if layout == "sharded":
        checks += [(3, ValueError, "the row count (product of the leading dimensions) differs across ranks"),
                   (2, ValueError, "the leading dimensions of x_local differ across ranks")]
        checks += [(c, ValueError, "a parameter is given on some ranks and None on others")
                   for c in (6, 8) if len({v < 0 for v in col[c]}) > 1]
    else:
        checks += [(4, ValueError, "the normalized (last) dimension differs across ranks"),
                   (6, ValueError, "weight differs in size (or is None on some ranks)"),
                   (8, ValueError, "bias differs in size (or is None on some ranks)")]
    checks += [(7, TypeError, "weight's dtype differs across ranks"), (9, TypeError, "bias's dtype differs across ranks"),
               (12, ValueError, "some ranks record a gradient (grad mode on and an input with requires_grad) and "
                "others do not: the backward's collective would run on some ranks only")]
    for i, kind, msg in checks:
        if differs(i):
            return msg, kind
    return None, None


def _check_stats(stats):
    if stats not in STATS:
        raise ValueError(f"stats must be 'sums' or 'welford', got {stats!r}")


# ---------------------------------------------------------------------------------------------- RMSNorm



def _check_not_empty_shard(x_local) -> None:
    # a more specific message than check_input's "empty last dimension": the row is split, this rank got none of it
    if isinstance(x_local, torch.Tensor) and x_local.dim() >= 1 and x_local.shape[-1] == 0:
        raise ValueError("x_local is an empty shard (its last dimension has size 0); give every rank at least "
                         "one column of the row")


def _rms_grad_parts(dy, x, weight, rstd, convention):
    cd = rstd.dtype
    xhat = x.to(cd) * rstd
    dyf = dy.to(cd)
    gain = effective_gain(weight, convention)
    return xhat, dyf, (dyf if gain is None else dyf * gain.to(cd))


def _col_sum(t, width):
    """Sum over every row: ``(..., width)`` -> ``(width,)``."""
    return t.reshape(-1, width).sum(0)


# --8<-- [start:sharded_rms]
class _ShardedRMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps, group, convention, deterministic):
        xf = x.to(stat_dtype(x, convention))
        # one float32 partial per row: this rank's sum of squares; the sum over ranks is the row's
        ss, d = _row_sums(xf.pow(2).sum(-1, keepdim=True), x.shape[-1], group, deterministic)
        rstd = torch.rsqrt(ss / d + eps)
        ctx.save_for_backward(x, weight, rstd)
        ctx.opts = (d, group, convention, deterministic)
        return apply_gain(x, rstd, weight, convention)

    @staticmethod
    @once_differentiable(_SECOND.format("sharded_rms_norm", "reference_impl.rms_norm"))  # see _ONCE above
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        d, group, convention, deterministic = ctx.opts
        xhat, dyf, g = _rms_grad_parts(dy, x, weight, rstd, convention)
        # one float32 partial per row: this rank's part of sum_j g_j xhat_j
        dot = _sum_over_ranks((g * xhat).sum(-1).reshape(-1), group, deterministic)
        m = dot.reshape(rstd.shape) / d
        dx = (rstd * (g - xhat * m)).to(x.dtype)
        dw = None if weight is None else _col_sum(dyf * xhat, x.shape[-1]).to(weight.dtype)
        return dx, dw, None, None, None, None
# --8<-- [end:sharded_rms]


def sharded_rms_norm(x_local, weight_local, eps=1e-6, group=None, *, convention="reference",
                     deterministic=False, check_shapes=True):
    """RMSNorm over a last dimension that is split across the ranks of ``group`` (tensor parallelism).

    Rank k holds columns ``[d_0 + ... + d_{k-1}, ... + d_k)`` of every row; the ``d_k`` may differ.
    ``y_i = x_i * rsqrt(sum over all d columns of x_j**2 / d + eps) * w_i``: eps inside the root.

    Args:
        x_local: ``(..., d_k)`` float16, bfloat16, float32 or float64; the leading shape is the same on every
            rank, ``d_k >= 1``.
        weight_local: ``(d_k,)`` slice of the gain (for ``gemma`` the stored offset, gain ``1 + w``), or None.
        eps: non-negative number (``None`` only with ``convention="torch"``), the same on every rank.
        group: a ``torch.distributed.ProcessGroup`` (None: the default group).
        convention: casting order of ``reference_impl.shared`` (``reference``, ``llama``, ``gemma``,
            ``t5``, ``olmo2``, ``torch``); statistics in that convention's dtype (float32, or float64 for
            float64 input under ``reference``/``torch``).
        deterministic: all-gather the partials and add them in rank order instead of an all-reduce.
        check_shapes: agree on shapes, dtypes, eps, options and whether a gradient is recorded with the
            other ranks first (one small all-gather per call) so that a mismatch raises on every rank.
            ``False`` skips it: a mismatch across ranks then reaches the collectives, which may abort the
            process or hang (see the module docstring).

    Returns:
        This rank's ``(..., d_k)`` slice of y, dtype as the convention's module returns it.
            Differentiable in ``x_local`` and ``weight_local``; the backward all-reduces one partial dot
            product per row and returns this rank's slices of dx and dweight.

    Communication per row: one float32 element each way (all-reduce), plus one element per call for d.

    Range: squares are formed in the statistic dtype (float32), so ``|x|`` above about 1.8e19 (or a row whose
    sum of squares passes float32's maximum) gives rstd 0 and zeros, and with ``eps=0`` rows whose squares
    underflow give Inf/NaN, as the modules do (docs/numerics.md). The backward is once-differentiable.
    """
    fn = "sharded_rms_norm"
    _membership(group, fn)
    options = f"{fn}/{convention}/{bool(deterministic)}"

    def local_checks():
        check_convention(convention)
        _check_not_empty_shard(x_local)
        check_input(x_local, "x_local")
        check_param(weight_local, x_local, "weight_local")
        return resolve_eps(eps, x_local, convention)

    eps = _validated(fn, "sharded", group, check_shapes, x_local, (weight_local,), eps, options, local_checks)
    return _ShardedRMSNorm.apply(x_local, weight_local, eps, group, convention, bool(deterministic))


# --8<-- [start:sp_rms]
class _SequenceParallelRMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps, group, convention, deterministic):
        xf = x.to(stat_dtype(x, convention))
        rstd = torch.rsqrt(row_mean(xf.pow(2), convention) + eps)   # rows are whole: no communication
        ctx.save_for_backward(x, weight, rstd)
        ctx.opts = (group, convention, deterministic)
        return apply_gain(x, rstd, weight, convention)

    @staticmethod
    @once_differentiable(_SECOND.format("sequence_parallel_rms_norm", "reference_impl.rms_norm"))  # see _ONCE above
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        group, convention, deterministic = ctx.opts
        xhat, dyf, g = _rms_grad_parts(dy, x, weight, rstd, convention)
        dx = (rstd * (g - xhat * row_mean(g * xhat, convention))).to(x.dtype)
        dw = None
        if weight is not None:  # this rank's rows only: sum the float32 partials over ranks, then cast
            dw = _sum_over_ranks(_col_sum(dyf * xhat, x.shape[-1]), group, deterministic).to(weight.dtype)
        return dx, dw, None, None, None, None
# --8<-- [end:sp_rms]


def sequence_parallel_rms_norm(x_local, weight, eps=1e-6, group=None, *, convention="reference",
                               deterministic=False, check_shapes=True):
    """RMSNorm of rows split across the ranks of ``group`` (sequence parallelism), gain replicated.

    Args:
        x_local: ``(..., d)`` this rank's rows; the leading shapes may differ across ranks (uneven splits,
            even zero rows), ``d``, dtype and number of dimensions may not.
        weight: ``(d,)`` the full gain, the same on every rank, or None.
        eps: as ``sharded_rms_norm``.
        group: as ``sharded_rms_norm``.
        convention: as ``sharded_rms_norm``.
        deterministic: add the float32 partial dweight of the ranks in rank order (all-gather) instead of
            an all-reduce.
        check_shapes: as ``sharded_rms_norm``; here the leading shapes may differ across ranks.

    Returns:
        y of this rank's rows, shape ``(..., d)``, bit-identical to the single-device convention on them.
            The backward computes dx locally and all-reduces the float32 partial dweight (``d`` elements
            per call, not per row), so ``weight.grad`` on every rank is the gradient over all ranks' rows.
    """
    fn = "sequence_parallel_rms_norm"
    _membership(group, fn)
    options = f"{fn}/{convention}/{bool(deterministic)}"

    def local_checks():
        check_convention(convention)
        check_input(x_local, "x_local")
        check_param(weight, x_local, "weight")
        return resolve_eps(eps, x_local, convention)

    eps = _validated(fn, "sequence", group, check_shapes, x_local, (weight,), eps, options, local_checks)
    return _SequenceParallelRMSNorm.apply(x_local, weight, eps, group, convention, bool(deterministic))


# -------------------------------------------------------------------------------------------- LayerNorm

# --8<-- [start:chan_merge]
def _merge_mean_m2(parts: torch.Tensor, widths):
    """Chan, Golub & LeVeque's pairwise update, applied in rank order to ``parts[k] = (mean_k, M2_k)``
    of ``widths[k]`` values each (``parts``: ``(p, ..., 2)``). Returns the row's (mean, M2)."""
    mean, m2, n = parts[0][..., :1], parts[0][..., 1:], float(widths[0])
    for k in range(1, parts.shape[0]):
        nb = float(widths[k])
        delta = parts[k][..., :1] - mean
        total = n + nb
        mean = mean + delta * (nb / total)
        m2 = m2 + parts[k][..., 1:] + delta * delta * (n * nb / total)
        n = total
    return mean, m2
# --8<-- [end:chan_merge]


# --8<-- [start:sharded_ln_stats]
def _sharded_ln_stats(xf, group, stats, deterministic):
    """(mean, var) of each whole row, shape ``(..., 1)``, from this rank's columns ``xf``."""
    width = xf.shape[-1]
    if stats == "sums":   # one all-reduce of (sum, sum of squares): var = E[x^2] - mean^2 may cancel
        parts = torch.cat([xf.sum(-1, keepdim=True), xf.pow(2).sum(-1, keepdim=True)], -1)
        tot, d = _row_sums(parts, width, group, deterministic)
        mean = tot[..., :1] / d
        return mean, (tot[..., 1:] / d - mean * mean).clamp_min(0.0), d
    # welford: this rank's (mean, M2) two-pass, all-gathered with its width, merged in rank order
    mean_k = xf.mean(-1, keepdim=True)
    local = torch.cat([mean_k, (xf - mean_k).pow(2).sum(-1, keepdim=True)], -1)
    flat = torch.cat([local.reshape(-1), local.new_tensor([float(width)])])
    gathered = _all_gather(flat, group)
    widths = [int(v) for v in gathered[:, -1].tolist()]
    # the rank count, not -1: with 0 rows the gathered tensor is empty and -1 would be ambiguous
    mean, m2 = _merge_mean_m2(gathered[:, :-1].reshape((gathered.shape[0],) + tuple(local.shape)), widths)
    d = sum(widths)
    return mean, m2 / d, d
# --8<-- [end:sharded_ln_stats]


def _ln_out(x, xf, mean, rstd, w, b):
    """Reference order: gain and bias in the compute dtype, one cast to x's dtype."""
    y = (xf - mean) * rstd
    if w is not None:
        y = y * w.to(xf.dtype)
    if b is not None:
        y = y + b.to(xf.dtype)
    return y.to(x.dtype)


def _ln_grad_parts(dy, x, weight, mean, rstd):
    cd = rstd.dtype
    xhat = (x.to(cd) - mean) * rstd
    dyf = dy.to(cd)
    return xhat, dyf, (dyf if weight is None else dyf * weight.to(cd))


class _ShardedLayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps, group, stats, deterministic):
        xf = x.to(compute_dtype(x))
        mean, var, d = _sharded_ln_stats(xf, group, stats, deterministic)
        rstd = torch.rsqrt(var + eps)
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        ctx.opts = (d, group, deterministic)
        return _ln_out(x, xf, mean, rstd, weight, bias)

    @staticmethod
    @once_differentiable(_SECOND.format("sharded_layer_norm", "reference_impl.layer_norm"))  # see _ONCE above
    def backward(ctx, dy):
        x, weight, bias, mean, rstd = ctx.saved_tensors
        d, group, deterministic = ctx.opts
        xhat, dyf, g = _ln_grad_parts(dy, x, weight, mean, rstd)
        # two float32 partials per row: sum_j g_j and sum_j g_j xhat_j over this rank's columns
        parts = torch.cat([g.sum(-1, keepdim=True), (g * xhat).sum(-1, keepdim=True)], -1)
        tot = _sum_over_ranks(parts.reshape(-1), group, deterministic).reshape(parts.shape) / d
        dx = (rstd * (g - tot[..., :1] - xhat * tot[..., 1:])).to(x.dtype)
        w_ = x.shape[-1]
        dw = None if weight is None else _col_sum(dyf * xhat, w_).to(weight.dtype)
        db = None if bias is None else _col_sum(dyf, w_).to(bias.dtype)
        return dx, dw, db, None, None, None, None


def sharded_layer_norm(x_local, weight_local, bias_local, eps=1e-5, group=None, *, stats="welford",
                       deterministic=False, check_shapes=True):
    """LayerNorm over a last dimension split across the ranks of ``group`` (tensor parallelism).

    ``y_i = (x_i - mean) * rsqrt(var + eps) * w_i + b_i`` over all ``d = sum_k d_k`` columns, biased
    variance, eps inside the root; float32 statistics (float64 for float64 input), gain and bias applied
    in that dtype, one cast to ``x_local.dtype`` (the reference order).

    Args:
        x_local: as ``sharded_rms_norm``.
        weight_local: ``(d_k,)`` slice of the gain, or None.
        bias_local: ``(d_k,)`` slice of the bias, or None.
        eps: non-negative number, the same on every rank.
        group: as ``sharded_rms_norm``.
        stats: ``"welford"`` (the default): all-gather each rank's (mean, M2) and merge them in rank order
            (always deterministic), as accurate as a two-pass variance; its all-gather moves p/2 times the
            bytes of the all-reduce. ``"sums"``: all-reduce (sum, sum of squares) per row, one collective,
            cheaper, but var = E[x^2] - mean^2 cancels: when |mean| >> std the variance is lost (rows of
            mean 1e4 and std 1 come out wrong by hundreds); ask for it only where rows are near zero mean.
        deterministic: as ``sharded_rms_norm`` (the Welford forward is deterministic either way).
        check_shapes: as ``sharded_rms_norm``.

    Range: squares in float32 overflow for ``|x|`` above about 1.8e19 (rstd 0), and with ``eps=0`` rows
    whose squares underflow give Inf/NaN, as the single-device reference (docs/numerics.md).

    Returns:
        This rank's ``(..., d_k)`` slice of y in ``x_local.dtype``. The backward all-reduces two
            float32 partials per row (sum of g, sum of g * xhat) and returns this rank's slices of dx,
            dweight and dbias.
    """
    fn = "sharded_layer_norm"
    _membership(group, fn)
    options = f"{fn}/{stats}/{bool(deterministic)}"

    def local_checks():
        _check_stats(stats)
        _check_not_empty_shard(x_local)
        check_input(x_local, "x_local")
        check_param(weight_local, x_local, "weight_local")
        check_param(bias_local, x_local, "bias_local")
        return check_eps(eps, max_value=eps_limit(compute_dtype(x_local)))

    eps = _validated(fn, "sharded", group, check_shapes, x_local, (weight_local, bias_local), eps, options,
                     local_checks)
    return _ShardedLayerNorm.apply(x_local, weight_local, bias_local, eps, group, stats, bool(deterministic))


class _SequenceParallelLayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps, group, deterministic):
        xf = x.to(compute_dtype(x))
        mean = row_mean(xf, "reference")  # as reference_impl.layer_norm: float64 row sums, batch-invariant
        rstd = torch.rsqrt(row_mean((xf - mean).pow(2), "reference") + eps)   # two-pass, local rows
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        ctx.opts = (group, deterministic)
        return _ln_out(x, xf, mean, rstd, weight, bias)

    @staticmethod
    @once_differentiable(_SECOND.format("sequence_parallel_layer_norm", "reference_impl.layer_norm"))  # see _ONCE above
    def backward(ctx, dy):
        x, weight, bias, mean, rstd = ctx.saved_tensors
        group, deterministic = ctx.opts
        xhat, dyf, g = _ln_grad_parts(dy, x, weight, mean, rstd)
        dx = rstd * (g - row_mean(g, "reference") - xhat * row_mean(g * xhat, "reference"))
        d = x.shape[-1]
        parts = ([] if weight is None else [_col_sum(dyf * xhat, d)]) + ([] if bias is None else [_col_sum(dyf, d)])
        dw = db = None
        if parts:   # one all-reduce of the float32 partial gradients (d or 2d elements per call)
            tot = _sum_over_ranks(torch.cat(parts), group, deterministic)
            if weight is not None:
                dw, tot = tot[:d].to(weight.dtype), tot[d:]
            if bias is not None:
                db = tot.to(bias.dtype)
        return dx.to(x.dtype), dw, db, None, None, None


def sequence_parallel_layer_norm(x_local, weight, bias, eps=1e-5, group=None, *, deterministic=False,
                                 check_shapes=True):
    """LayerNorm of rows split across the ranks of ``group`` (sequence parallelism), gain and bias replicated.

    Shapes as ``sequence_parallel_rms_norm``; numerics as ``reference_impl.layer_norm`` (two-pass
    float32 statistics of the local rows, bit-identical to it). The backward all-reduces the float32
    partial dweight and dbias in one collective of ``2d`` elements (``d`` with only one of them).
    """
    fn = "sequence_parallel_layer_norm"
    _membership(group, fn)
    options = f"{fn}/{bool(deterministic)}"

    def local_checks():
        check_input(x_local, "x_local")
        check_param(weight, x_local, "weight")
        check_param(bias, x_local, "bias")
        return check_eps(eps, max_value=eps_limit(compute_dtype(x_local)))

    eps = _validated(fn, "sequence", group, check_shapes, x_local, (weight, bias), eps, options, local_checks)
    return _SequenceParallelLayerNorm.apply(x_local, weight, bias, eps, group, bool(deterministic))


__all__ = ["sharded_rms_norm", "sequence_parallel_rms_norm", "sharded_layer_norm", "sequence_parallel_layer_norm",
           "CommRecorder", "STATS", "RMS_CONVENTIONS"]
