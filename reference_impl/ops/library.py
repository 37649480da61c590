"""Fused RMSNorm and LayerNorm as PyTorch custom ops (library ``normlab``, sources in ``cuda/``).

Importing this module loads the native library (building it first, with the settings of
:mod:`reference_impl.ops.build`, cached under ``build/native/normlab_cpu``): that declares the ops
(``cuda/ops.cpp``) and registers their CPU kernels (``cuda/cpu/``); this module then registers a fake
implementation for each op (so ``torch.compile(fullgraph=True)`` traces through them) and the autograd
formulas of :mod:`reference_impl.ops.autograd`. When a GPU is present the CUDA kernels are loaded at
import as well. Everything happens once, at import, so the entry points take no lock and load nothing:
``torch.compile`` can trace them whatever was called before. ``import reference_impl`` alone builds
nothing; ``reference_impl.fused_rms_norm`` imports this module on first access.

Numerics (see ``cuda/ops.cpp`` for the op-level contract):

- Normalization over the last dimension; any leading shape; inputs of any strides (made contiguous).
- x of dtype float32, bfloat16 or float16 (float64 is refused: use :func:`reference_impl.rms_norm`); the
  weight (and bias) of x's dtype or float32. Statistics and all arithmetic in float32; outputs in x's dtype.
- eps inside the square root. Forward saves only the per-row ``rstd`` (float32) besides its input.
- A row whose float32 sum of squares overflows (elements above about `2**64`) or underflows (all below about
  `2**-63`, which matters with eps = 0) is summed again in double; every other row pays one comparison.
- RMSNorm conventions: ``"llama"``: ``y = round_x(round_x(x * rstd) * weight)`` (Hugging Face
  ``LlamaRMSNorm``: normalize in fp32, cast to x's dtype, then multiply by the weight);
  ``"gemma"``: ``y = round_x((x * rstd) * (1 + weight))`` computed in fp32 and cast once.
- Gradient reductions over rows are deterministic (fixed row blocks, fixed-order sums, no atomics).
"""
from __future__ import annotations

import torch
import torch.autograd.forward_ad as _fwad
from torch._C._functorch import TransformType as _Transform
from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters as _interpreters

from .._checks import check_eps, check_input, check_param
from . import autograd as _autograd
from .build import NativeBuildError, load_cpu_library, load_cuda_library

__all__ = ["fused_rms_norm", "fused_layer_norm", "fused_qk_norm", "load", "load_cuda", "CONVENTIONS",
           "SUPPORTED_DTYPES"]

CONVENTIONS = {"llama": 0, "gemma": 1}
SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_FLOAT32_MAX = torch.finfo(torch.float32).max  # eps is added in float32

_cuda_loaded = False


def load() -> None:
    """Kept for callers of earlier versions: the library is loaded when this module is imported."""


def load_cuda() -> None:
    """Load the CUDA kernels (needs nvcc, not a GPU); idempotent. Done at import when a GPU is present.

    Call it from one thread (it registers Python parts once); the entry points never call it while
    tracing: on a machine with a GPU the kernels are already loaded.
    """
    global _cuda_loaded
    if _cuda_loaded:
        return
    load_cuda_library()

    @torch.library.register_fake("normlab::rms_norm_fwd_version")
    def _version_fake(x, weight, eps, version, convention, block_size=0):
        return torch.empty_like(x), x.new_empty(x.shape[:-1], dtype=torch.float32)

    def _version_no_grad(ctx, *grads):
        raise NotImplementedError(
            "normlab::rms_norm_fwd_version is a teaching op without a backward; differentiate "
            "reference_impl.ops.fused_rms_norm instead")

    torch.library.register_autograd("normlab::rms_norm_fwd_version", _version_no_grad,
                                    setup_context=lambda ctx, inputs, output: None)
    _cuda_loaded = True


def _ensure_device(x: torch.Tensor) -> None:
    if x.is_cuda:
        if not _cuda_loaded:  # a GPU appeared after import (not while tracing: see load_cuda)
            load_cuda()
    elif x.device.type != "cpu":
        raise ValueError(f"the fused ops run on CPU and CUDA tensors; x is on {x.device}")


def _register_fakes() -> None:
    """Fake implementations: the outputs' shapes and dtypes, for tracing."""

    # --8<-- [start:fakes]
    @torch.library.register_fake("normlab::rms_norm_fwd")
    def _rms_fwd_fake(x, weight, residual, eps, convention):
        res_out = torch.empty_like(x) if residual is not None else x.new_empty((0,))
        return torch.empty_like(x), res_out, x.new_empty(x.shape[:-1], dtype=torch.float32)

    @torch.library.register_fake("normlab::rms_norm_fwd_out")
    def _rms_fwd_out_fake(x, weight, residual, eps, convention, *, y, residual_out):
        return x.new_empty(x.shape[:-1], dtype=torch.float32)

    @torch.library.register_fake("normlab::rms_norm_bwd")
    def _rms_bwd_fake(dy, x, weight, rstd, convention):  # dweight: the float32 sum over rows
        dw = x.new_empty((x.shape[-1],), dtype=torch.float32) if weight is not None else x.new_empty((0,))
        return torch.empty_like(x), dw

    @torch.library.register_fake("normlab::layer_norm_fwd")
    def _ln_fwd_fake(x, weight, bias, eps, residual=None, residual_contract=0):
        stat = x.new_empty(x.shape[:-1], dtype=torch.float32)
        res_out = torch.empty_like(x) if residual is not None else x.new_empty((0,))
        return torch.empty_like(x), stat, torch.empty_like(stat), res_out

    @torch.library.register_fake("normlab::layer_norm_fwd_out")
    def _ln_fwd_out_fake(x, weight, bias, eps, residual=None, residual_contract=0, *, y, residual_out=None):
        stat = x.new_empty(x.shape[:-1], dtype=torch.float32)
        return stat, torch.empty_like(stat)

    @torch.library.register_fake("normlab::layer_norm_bwd")
    def _ln_bwd_fake(dy, x, weight, mean, rstd):  # dweight and dbias: float32 sums over rows
        d = x.shape[-1]
        dw = x.new_empty((d,), dtype=torch.float32) if weight is not None else x.new_empty((0,))
        return torch.empty_like(x), dw, x.new_empty((d,), dtype=torch.float32)
    # --8<-- [end:fakes]


_out_lib = torch.library.Library("normlab", "IMPL")  # kept alive: it holds the registrations below


def _register_out_guards() -> None:
    """The out= ops record no gradient: under grad mode an input that requires grad is a ValueError."""
    for name in ("rms_norm_fwd_out", "layer_norm_fwd_out"):
        op = getattr(torch.ops.normlab, name).default

        def guard(keyset, *args, _op=op, **kwargs):
            if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad
                                               for t in (*args, *kwargs.values())):
                raise ValueError(f"{_op}: the out= variant records no gradient, but an input requires grad; "
                                 "call it under torch.no_grad() / torch.inference_mode(), or without out=")
            with torch._C._AutoDispatchBelowAutograd():
                return _op.redispatch(keyset & torch._C._after_autograd_keyset, *args, **kwargs)

        _out_lib.impl(name, guard, "Autograd", with_keyset=True)


# --- load once, at import -------------------------------------------------------------------------------
load_cpu_library()
_register_fakes()
_register_out_guards()
_autograd.register()
if torch.cuda.is_available():
    load_cuda()


def _check_transforms(fn: str, *tensors) -> None:
    """Forward-mode AD (``torch.autograd.forward_ad``, ``torch.func.jvp``) and ``torch.func.grad`` have no
    rule for the native ops: the first would return a zero or missing tangent, the second an internal
    message. Raise one error that names the function instead. ``torch.func.vmap`` alone works (PyTorch runs
    the op once per batch entry); reverse mode (``backward``, ``torch.autograd.grad``) is the op's own."""
    if torch.compiler.is_compiling():
        return
    if _fwad._current_level >= 0 and any(t is not None and _fwad.unpack_dual(t).tangent is not None
                                         for t in tensors):
        raise NotImplementedError(
            f"{fn} does not support forward-mode AD (torch.autograd.forward_ad, torch.func.jvp): its native "
            "kernels have no tangent rule. Use reference_impl.rms_norm / layer_norm (plain PyTorch ops), or "
            "reverse mode (backward, torch.autograd.grad)")
    kinds = {i.key() for i in _interpreters()}
    if kinds & {_Transform.Grad, _Transform.Jvp}:
        raise NotImplementedError(
            f"{fn} does not support torch.func.grad / jvp / jacrev / jacfwd / hessian: its native kernels have "
            "no functorch rule. Use reference_impl.rms_norm / layer_norm (plain PyTorch ops) inside torch.func "
            "transforms, or torch.autograd.grad outside them (torch.func.vmap alone works)")


def _check_fused_input(x, fn: str) -> None:
    check_input(x)
    if x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"{fn} supports float32, bfloat16 and float16; x has dtype {x.dtype} "
            "(use reference_impl.rms_norm / layer_norm for float64)"
        )


def _check_fused_param(p, x, name: str) -> None:
    check_param(p, x, name)
    if p is not None and p.dtype not in (x.dtype, torch.float32):
        raise TypeError(f"{name} has dtype {p.dtype}; the fused op needs x's dtype ({x.dtype}) or float32")


def _span(t: torch.Tensor):
    """[first byte, last byte + 1) of t's elements in its storage's address space (None when empty)."""
    if t.numel() == 0:
        return None
    base = t.untyped_storage().data_ptr()
    last = t.storage_offset() + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
    return base + t.storage_offset() * t.element_size(), base + (last + 1) * t.element_size()


def _check_out(out, name: str, x: torch.Tensor, inputs: dict) -> None:
    """An out= buffer: a contiguous tensor of x's shape, dtype and device that shares no memory with an
    input (``inputs``: name -> tensor or None) and needs no gradient."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(out).__name__}")
    if out.dtype != x.dtype:
        raise TypeError(f"{name} has dtype {out.dtype} but x has dtype {x.dtype}; they must match")
    if out.shape != x.shape:
        raise ValueError(f"{name} has shape {tuple(out.shape)} but x has shape {tuple(x.shape)}; they must match")
    if out.device != x.device:
        raise ValueError(f"{name} is on {out.device} but x is on {x.device}")
    if not out.is_contiguous():
        raise ValueError(f"{name} must be contiguous (the op writes it row by row)")
    grad_inputs = [t for t in (out, *inputs.values()) if t is not None and t.requires_grad]
    if torch.is_grad_enabled() and grad_inputs:
        raise ValueError(f"{name}= records no gradient, but an input or {name} requires grad; call it under "
                         "torch.no_grad() / torch.inference_mode(), or without out=")
    if torch.compiler.is_compiling():  # no addresses while tracing: the op checks overlap when it runs
        return
    so = _span(out)
    for other_name, t in inputs.items():
        st = None if t is None else _span(t)
        if so and st and so[0] < st[1] and st[0] < so[1]:
            raise ValueError(f"{name} shares memory with {other_name}; pass a separate buffer")


RESIDUAL_CONTRACTS = {"hf": 0, "fp32": 2}  # added to the convention code the op receives (cuda/ops.h)


def _contract_bit(residual_contract) -> int:
    """The code added to the convention: the CPU and the CUDA kernels implement both contracts."""
    if not isinstance(residual_contract, str):
        raise TypeError(f"residual_contract must be a string, got {type(residual_contract).__name__}")
    if residual_contract not in RESIDUAL_CONTRACTS:
        raise ValueError(f"unknown residual_contract {residual_contract!r}; expected 'hf' or 'fp32'")
    return RESIDUAL_CONTRACTS[residual_contract]


def fused_rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6,
                   residual: torch.Tensor | None = None, convention: str = "llama", *,
                   out: torch.Tensor | None = None, residual_out: torch.Tensor | None = None,
                   residual_contract: str = "hf"):
    """Fused RMSNorm over the last dimension, optionally fused with the residual add.

    Args:
        x: ``(..., d)`` tensor, float32, bfloat16 or float16, on the CPU (or CUDA with the CUDA kernels).
        weight: gain of shape ``(d,)`` in x's dtype or float32, or ``None`` (no gain).
        eps: non-negative number added to the mean square inside the square root.
        residual: ``None``, or a tensor of x's shape and dtype. Then ``h = round_x(x + residual)`` (sum in
            fp32, one rounding) is normalized and returned as the new residual stream.
        convention: ``"llama"`` (``round_x(round_x(h * rstd) * weight)``) or ``"gemma"``
            (``round_x(h * rstd * (1 + weight))``, the weight stored as an offset from one).
        out: keyword-only, for inference: a contiguous tensor of x's shape, dtype and device that
            receives ``y`` (no allocation for it); it must share no memory with an input.
        residual_out: keyword-only, with ``residual``: the same for ``h``.
        residual_contract: keyword-only, what is normalized when ``residual`` is given: ``"hf"`` (default)
            ``h = round_x(x + residual)``, as a Hugging Face decoder layer computes it; ``"fp32"`` the
            float32 sum ``s = float(x) + float(residual)`` (statistic and output from s), while the
            residual output is still ``round_x(s)``. Both run on the CPU and the CUDA kernels; the
            backward uses the rounded ``h`` with the forward's rstd.

    Returns:
        ``y`` of x's shape and dtype, or ``(y, h)`` when ``residual`` is given (``out`` and
        ``residual_out`` themselves when given). Differentiable in ``x``, ``weight`` and ``residual``
        (first, second and higher order), except with ``out``/``residual_out``.

    Raises:
        TypeError: non-tensor input; integer, bool, complex or float64 dtype; weight dtype other than
            x's or float32; unknown convention type; ``out``/``residual_out`` not a tensor or not of x's
            dtype.
        ValueError: 0-d ``x`` or an empty last dimension; weight or residual of the wrong shape or device;
            bad ``eps`` (negative, NaN, infinite, above the float32 range); unknown convention name;
            ``out``/``residual_out`` of the wrong shape or device, non-contiguous, sharing memory with an
            input, or used while grad mode is on and an input requires grad; ``residual_out`` without
            ``residual``.
        NotImplementedError: forward-mode AD (``torch.autograd.forward_ad``, ``torch.func.jvp``) or
            ``torch.func.grad`` and the transforms built on it; ``torch.func.vmap`` works.
        reference_impl.ops.build.NativeBuildError: the native library cannot be built (no C++ compiler).
    """
    _check_fused_input(x, "fused_rms_norm")
    _check_transforms("fused_rms_norm", x, weight, residual)
    _check_fused_param(weight, x, "weight")
    eps = check_eps(eps, max_value=_FLOAT32_MAX, checked_by_op=True)
    if not isinstance(convention, str):
        raise TypeError(f"convention must be a string, got {type(convention).__name__}")
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown convention {convention!r}; expected one of {sorted(CONVENTIONS)}")
    _check_residual(residual, x)
    if residual_out is not None and residual is None:
        raise ValueError("residual_out is given without a residual")
    code = CONVENTIONS[convention] + _contract_bit(residual_contract)
    _ensure_device(x)
    args = (x.contiguous(), None if weight is None else weight.contiguous(),
            None if residual is None else residual.contiguous(), eps, code)
    if out is None and residual_out is None:
        y, res_out, _ = torch.ops.normlab.rms_norm_fwd(*args)
        return y if residual is None else (y, res_out)
    # --8<-- [start:out]
    inputs = {"x": x, "weight": weight, "residual": residual}
    if out is None:
        out = torch.empty_like(args[0])
    _check_out(out, "out", x, inputs)
    if residual is not None:
        if residual_out is None:
            residual_out = torch.empty_like(args[0])
        _check_out(residual_out, "residual_out", x, inputs | {"out": out})
    torch.ops.normlab.rms_norm_fwd_out(*args, y=out, residual_out=residual_out)
    return out if residual is None else (out, residual_out)
    # --8<-- [end:out]


def _check_residual(residual, x) -> None:
    if residual is None:
        return
    check_input(residual, "residual")
    if residual.shape != x.shape:
        raise ValueError(f"residual has shape {tuple(residual.shape)} but x has shape {tuple(x.shape)}")
    if residual.dtype != x.dtype:
        raise TypeError(f"residual has dtype {residual.dtype} but x has dtype {x.dtype}; they must match")
    if residual.device != x.device:
        raise ValueError(f"residual is on {residual.device} but x is on {x.device}")


def fused_layer_norm(x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                     eps: float = 1e-5, *, residual: torch.Tensor | None = None,
                     out: torch.Tensor | None = None, residual_out: torch.Tensor | None = None,
                     residual_contract: str = "hf"):
    """Fused LayerNorm over the last dimension: ``round_x(((x - mean) * rstd) * weight + bias)``.

    Two-pass statistics in fp32 (biased variance, as ``torch.nn.functional.layer_norm``) with one
    correction step of the mean (``c = mean(x - m)``, output from ``(x - m) - c``), so a mean far above the
    spread does not leak its rounding into the output; rows whose fp32 sums overflow or underflow are redone
    in double. ``x`` float32,
    bfloat16 or float16, shape ``(..., d)``; ``weight`` and ``bias`` of shape ``(d,)`` in x's dtype or
    float32, or ``None``. Returns a tensor of x's shape and dtype (``out`` itself when given: keyword-only,
    for inference, as in :func:`fused_rms_norm`), differentiable in ``x``, ``weight`` and ``bias`` to any
    order. The weight and bias gradients are float32 sums over rows, rounded once to each parameter's
    dtype.

    The residual add is fused as in :func:`fused_rms_norm`, with the same keyword-only arguments:
    ``residual`` (x's shape, dtype and device) makes the op normalize ``h = round_x(x + residual)``
    (``residual_contract="hf"``, the default) or the float32 sum ``s = float(x) + float(residual)``
    (``"fp32"``: mean, variance and output from s) and return ``(y, h)`` (``h = round_x(s)`` in both);
    ``residual_out`` receives ``h`` as ``out`` receives ``y``. Gradients reach ``residual``: the
    gradient wrt x plus the gradient that flows into ``h``. Errors as :func:`fused_rms_norm`.
    """
    _check_fused_input(x, "fused_layer_norm")
    _check_transforms("fused_layer_norm", x, weight, bias, residual)
    _check_fused_param(weight, x, "weight")
    _check_fused_param(bias, x, "bias")
    eps = check_eps(eps, max_value=_FLOAT32_MAX, checked_by_op=True)
    _check_residual(residual, x)
    if residual_out is not None and residual is None:
        raise ValueError("residual_out is given without a residual")
    code = _contract_bit(residual_contract)
    _ensure_device(x)
    args = (x.contiguous(), None if weight is None else weight.contiguous(),
            None if bias is None else bias.contiguous(), eps,
            None if residual is None else residual.contiguous(), code)
    if out is None and residual_out is None:
        y, _, _, res_out = torch.ops.normlab.layer_norm_fwd(*args)
        return y if residual is None else (y, res_out)
    inputs = {"x": x, "weight": weight, "bias": bias, "residual": residual}
    if out is None:
        out = torch.empty_like(args[0])
    _check_out(out, "out", x, inputs)
    if residual is not None:
        if residual_out is None:
            residual_out = torch.empty_like(args[0])
        _check_out(residual_out, "residual_out", x, inputs | {"out": out})
    torch.ops.normlab.layer_norm_fwd_out(*args, y=out, residual_out=residual_out)
    return out if residual is None else (out, residual_out)


# --8<-- [start:qk_norm]
def fused_qk_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, convention: str = "llama"):
    """Fused QK-norm: RMSNorm of every attention head, over ``head_dim``, with one gain shared by the heads.

    ``x`` has shape ``(..., heads, head_dim)`` (queries or keys after the projection, split into heads);
    ``weight`` has shape ``(head_dim,)``. Each head's row is normalized on its own, in the order of the
    convention: ``"llama"`` (Qwen3's ``q_norm``/``k_norm``: ``round_x(round_x(x * rstd) * weight)``) or
    ``"gemma"`` (Gemma 3's: ``round_x(x * rstd * (1 + weight))``). The rows are short (``head_dim`` of 64 to
    256), so on the CPU they take the kernels' multi-row path; the op is ``normlab::rms_norm_fwd`` on the
    heads' rows, with its fake implementation and autograd formulas (first and higher order).

    Returns a tensor of x's shape and dtype. Errors as :func:`fused_rms_norm`, and a ValueError for an ``x``
    with fewer than two dimensions or a ``weight`` that is missing or not of shape ``(head_dim,)``.
    """
    _check_fused_input(x, "fused_qk_norm")
    if x.dim() < 2:
        raise ValueError(f"fused_qk_norm expects x of shape (..., heads, head_dim); x has shape {tuple(x.shape)}")
    if weight is None:
        raise ValueError("fused_qk_norm needs a weight of shape (head_dim,); got None")
    _check_transforms("fused_qk_norm", x, weight)
    _check_fused_param(weight, x, "weight")
    eps = check_eps(eps, max_value=_FLOAT32_MAX)
    if not isinstance(convention, str):
        raise TypeError(f"convention must be a string, got {type(convention).__name__}")
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown convention {convention!r}; expected one of {sorted(CONVENTIONS)}")
    _ensure_device(x)
    return torch.ops.normlab.rms_norm_fwd(x.contiguous(), weight.contiguous(), None, eps, CONVENTIONS[convention])[0]
# --8<-- [end:qk_norm]
