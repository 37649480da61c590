"""Input validation shared by every entry point: bad input gets an error that names the problem."""
from __future__ import annotations

import functools
import math
import numbers

import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_input(x, name: str = "x") -> None:
    """A float tensor (float16, bfloat16, float32, float64) with at least one dimension and a non-empty
    last dimension. TypeError for a non-tensor or another dtype; ValueError for 0-d or ``shape[-1] == 0``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    check_dense(x, name)
    if x.dtype not in FLOAT_DTYPES:
        kind = "complex" if x.dtype.is_complex else ("integer/bool" if not x.dtype.is_floating_point else "unsupported floating")
        raise TypeError(
            f"{name} has {kind} dtype {x.dtype}; expected one of float16, bfloat16, float32, float64"
        )
    if x.dim() == 0:
        raise ValueError(f"{name} is a 0-d tensor; normalization needs at least one dimension (the last one)")
    if x.shape[-1] == 0:  # 0 rows is fine (an empty result); 0 features leaves nothing to normalize over
        raise ValueError(f"{name} has an empty last dimension (size 0); there is nothing to normalize over")


def check_dense(t: torch.Tensor, name: str) -> None:
    """Sparse, nested and other non-strided tensors have no rows to normalize in place: ValueError.
    Skipped while ``torch.compile`` traces (the tensors it traces are its own strided fakes, and an
    autograd.Function's backward in strict mode may not read ``layout``); the eager call checks."""
    if torch.compiler.is_compiling():
        return
    if t.layout != torch.strided or t.is_nested:
        kind = "nested" if t.is_nested else f"layout {t.layout}"
        raise ValueError(f"{name} must be a dense, strided tensor, got a {kind} tensor; convert it first "
                         "(e.g. .to_dense(), or normalize each nested component)")


def check_param(p, x: torch.Tensor, name: str, shape: tuple | None = None, *, what: str = "") -> None:
    """A gain or bias must be a float tensor on x's device, of shape ``shape``: by default 1-D of length
    x.shape[-1]. ``what`` says what the shape holds, for the error (e.g. "a gain per head")."""
    if p is None:
        return
    if not isinstance(p, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or None, got {type(p).__name__}")
    check_dense(p, name)
    if p.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} has dtype {p.dtype}; expected one of float16, bfloat16, float32, float64")
    if shape is not None:
        if tuple(p.shape) != tuple(shape):
            raise ValueError(f"{name} has shape {tuple(p.shape)}; {what or 'it'} needs shape {tuple(shape)}")
    elif tuple(p.shape) != (x.shape[-1],):
        raise ValueError(
            f"{name} has shape {tuple(p.shape)} but the normalized (last) dimension of x has size "
            f"{x.shape[-1]}; expected shape ({x.shape[-1]},)"
        )
    if p.device != x.device:
        raise ValueError(f"{name} is on {p.device} but x is on {x.device}")


_SYMBOLIC = (torch.SymInt, torch.SymFloat)
_FLOAT64_MAX = torch.finfo(torch.float64).max


def check_eps(eps, *, max_value: float | None = None, checked_by_op: bool = False):
    """A finite, non-negative real number (not a bool); returns it as a float.

    Any ``numbers.Real`` is accepted (Python int and float, NumPy scalars such as ``np.float32(1e-5)``,
    ``fractions.Fraction``). ``max_value`` bounds it from above (a computation in float32 can add at most
    float32's largest finite value).

    Under ``torch.compile`` the same conditions hold: a constant eps fails while the function is traced
    (with ``fullgraph=True`` as an error whose message names the violated condition; otherwise the graph
    breaks and the eager check raises the ValueError below); a symbolic eps (a ``SymFloat``, how
    ``dynamic=True`` traces a changing float) gets ``torch._check`` assertions that the compiled code
    evaluates on every call. ``checked_by_op=True`` (the native ops, which check eps themselves when they
    run and raise ValueError) leaves a traced eps to them.

    Raises:
        TypeError: not a real number (bool, str, tensor, None, complex, ...).
        ValueError: NaN, infinite, negative, too large for a float, or above ``max_value``.
    """
    if isinstance(eps, bool) or not isinstance(eps, (numbers.Real, *_SYMBOLIC)):
        raise TypeError(f"eps must be a real number, got {type(eps).__name__}")
    if isinstance(eps, _SYMBOLIC) or torch.compiler.is_compiling():
        # traced: eps may be symbolic (Dynamo does not show it as a SymFloat to isinstance), so the conditions
        # are assertions that hold for a constant at trace time and for a symbol on every call; NaN fails
        # both comparisons, infinity the second. The messages must be constants (Dynamo cannot build them).
        if checked_by_op:
            return eps if isinstance(eps, (float, torch.SymFloat)) else torch.sym_float(eps)
        limit = _FLOAT64_MAX if max_value is None else max_value
        torch._check(eps >= 0, lambda: "eps must be a finite, non-negative number (it is negative or NaN)")
        torch._check(eps <= limit, lambda: "eps must be finite and no larger than the largest value the "
                                          "computation's float type holds")
        return eps if isinstance(eps, (float, torch.SymFloat)) else torch.sym_float(eps)
    try:
        eps = float(eps)
    except OverflowError:  # an int beyond the float range, e.g. 10**400
        raise ValueError(f"eps={eps!r} is too large: it does not fit a float") from None
    if math.isnan(eps) or math.isinf(eps):
        raise ValueError(f"eps must be finite, got {eps}")
    if eps < 0:
        raise ValueError(f"eps must be non-negative, got {eps}")
    if max_value is not None and eps > max_value:
        raise ValueError(f"eps={eps} is larger than {max_value:.7g}, the largest value the computation's "
                         "float type holds")
    return eps


def check_grad(dy, x: torch.Tensor, name: str = "dy") -> None:
    check_input(dy, name)
    if dy.shape != x.shape:
        raise ValueError(f"{name} has shape {tuple(dy.shape)} but x has shape {tuple(x.shape)}; they must match")
    if dy.device != x.device:
        raise ValueError(f"{name} is on {dy.device} but x is on {x.device}")


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """Statistics run in float32, or float64 for float64 input."""
    check_input(x)
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def eps_limit(dtype: torch.dtype) -> float:
    """The largest eps a computation in ``dtype`` can add: that dtype's largest finite value. Every entry
    point passes it to :func:`check_eps` (``max_value``), so the reference paths refuse what the fused ops
    refuse instead of returning zeros."""
    return float(torch.finfo(dtype).max)


def functorch_active() -> bool:
    """True inside ``torch.func`` transforms (vmap, grad, jvp, jacrev, ...). The explicit-backward autograd
    Functions then run their forward as plain torch operations, which every transform differentiates and
    batches exactly (a hand-written backward has no forward-mode or batching rule)."""
    return bool(torch._C._are_functorch_transforms_active())


def check_norm_args(x, weight, eps, *, bias=None, eps_dtype=None, extra=None, resolve_eps=None) -> float:
    """The checks every norm entry point runs, in signature order; returns eps as a float.

    ``x`` (:func:`check_input`), then ``weight`` and ``bias`` (:func:`check_param`; ``None`` passes),
    then ``extra()`` if given (the entry's own arguments: a convention, a group size, a gate, ...), then
    eps: ``resolve_eps(eps)`` if given, else :func:`check_eps` bounded by ``eps_limit(eps_dtype)``, the
    compute dtype of ``x`` (float32, float64 for float64 input) when ``eps_dtype`` is ``None``.
    A call with several bad arguments names the first of them in that order.
    """
    check_input(x)
    check_param(weight, x, "weight")
    check_param(bias, x, "bias")
    if extra is not None:
        extra()
    if resolve_eps is not None:
        return resolve_eps(eps)
    return check_eps(eps, max_value=eps_limit(compute_dtype(x) if eps_dtype is None else eps_dtype))



class _NoSecondDerivative(torch.autograd.Function):
    """Passes gradients on (copies) and raises ``message`` when they are differentiated; ``anchors`` tie the
    copies to the graph so that a derivative towards any of them runs this backward."""

    @staticmethod
    def forward(ctx, message: str, n: int, *tensors):
        ctx.message = message
        return tuple(t.clone() for t in tensors[:n])

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(ctx.message)


def once_differentiable(what: str):
    """Decorator for the ``backward`` of an autograd Function whose backward records no graph (a kernel, a
    collective): a second derivative through it raises a RuntimeError with the message ``what`` (which names
    the function and where to find a second derivative) instead of coming out wrong.

    torch's ``once_differentiable`` hangs its error on fresh leaves, which ``torch.autograd.grad`` towards the
    real inputs never visits, and attaches it only when an incoming gradient requires grad. A Hessian-vector
    product (``torch.autograd.functional.hvp``, the double-backward trick on a saved detached leaf) of a loss
    such as ``sum(norm(x) * c) + sum(x**3)`` then drops the norm's part: zeros, silently. Here, while a graph
    is being built (``create_graph=True``), every gradient is tied to the incoming gradients and the saved
    tensors that require grad, through a node whose backward raises."""
    message = (f"{what} (once_differentiable: a gradient that went through it was differentiated again, e.g. in "
               "a Hessian-vector product)")

    def decorate(backward):
        @functools.wraps(backward)
        def wrapper(ctx, *grads):
            with torch.no_grad():
                out = backward(ctx, *grads)
            if not torch.is_grad_enabled():  # create_graph=False: nobody differentiates these gradients
                return out
            anchors = [t for t in (*grads, *ctx.saved_tensors) if isinstance(t, torch.Tensor) and t.requires_grad]
            outs = list(out) if isinstance(out, tuple) else [out]
            where = [i for i, t in enumerate(outs) if isinstance(t, torch.Tensor)]
            if not anchors or not where:
                return out
            tied = _NoSecondDerivative.apply(message, len(where), *[outs[i] for i in where], *anchors)
            for i, t in zip(where, tied):
                outs[i] = t
            return tuple(outs) if isinstance(out, tuple) else outs[0]

        return wrapper

    return decorate
