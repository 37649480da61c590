"""The kit's options, checked before any work: dtypes by name, the device, and the target a check runs
against (a model, a convention, or one norm of a model)."""
from __future__ import annotations

import torch

from .models import Target, resolve


def _dtype(v) -> torch.dtype:
    if isinstance(v, torch.dtype):
        return v
    names = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16,
             "half": torch.float16, "fp32": torch.float32, "float32": torch.float32, "float": torch.float32,
             "fp64": torch.float64, "float64": torch.float64}
    if v not in names:
        raise ValueError(f"unknown dtype {v!r}; use a torch dtype or one of {', '.join(names)}")
    return names[v]


def check_device(device) -> str:
    """``device`` as the kit accepts it ("cpu", "cuda", "cuda:N"), or a ValueError naming what it accepts."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"unknown device {device!r}; the kit runs on cpu or cuda (cuda:N)") from None
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device {device!r}: the kit runs on cpu or cuda (cuda:N), not {dev.type}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: torch sees no CUDA device here; use cpu")
    return str(dev)


def target_for(model=None, convention=None, eps=None, norm=None) -> Target:
    """The target of a check: ``norm=`` (a class or role of ``model``'s norms,
    :func:`reference_impl.check.roles.resolve_norm`) or ``model``/``convention``
    (:func:`reference_impl.check.models.resolve`)."""
    if norm is None:
        return resolve(model, convention, eps)
    if convention is not None:
        raise ValueError("give norm= (one norm of the model) or convention= (a catalog order), not both")
    from .roles import resolve_norm

    return resolve_norm(model, norm, eps)
