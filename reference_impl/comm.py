"""Counting what a collective sends: :class:`CommRecorder`, used by the distributed norms' study and tests.

Kept apart from :mod:`reference_impl.distributed` (the norms): it records, it computes nothing.
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_KINDS = {"allreduce_": "all_reduce", "all_reduce": "all_reduce", "all_reduce_": "all_reduce",
          "_allgather_base_": "all_gather", "allgather_": "all_gather", "allgather_into_tensor_coalesced_": "all_gather",
          "all_gather_into_tensor": "all_gather", "all_gather_into_tensor_out": "all_gather",
          "_reduce_scatter_base_": "reduce_scatter", "reduce_scatter_": "reduce_scatter",
          "reduce_scatter_tensor": "reduce_scatter", "broadcast_": "broadcast", "broadcast": "broadcast",
          "scatter_": "scatter", "gather_": "gather", "alltoall_base_": "all_to_all", "all_to_all_single": "all_to_all"}


def _nbytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(o) for o in obj)
    return 0


class CommRecorder(TorchDispatchMode):
    """Records every collective run while active: ``calls`` holds ``(kind, full_bytes)`` per collective.

    It sees ``torch.distributed`` calls (the ``c10d`` ops) and the functional collectives DTensor issues.
    ``full_bytes`` is the size of the whole tensor the collective produces or consumes: the all-reduced
    tensor, the all-gather's output, the reduce-scatter's input. :meth:`wire_bytes` turns it into the bytes
    each rank sends under ring algorithms (NCCL's bus-bandwidth model, github.com/NVIDIA/nccl-tests,
    doc/PERFORMANCE.md): all-reduce ``2 (p-1)/p N``, all-gather and reduce-scatter ``(p-1)/p N``.
    """

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(getattr(t, "__name__", "") == "DTensor" for t in types):
            return NotImplemented   # let DTensor turn the op into local ops and collectives first
        out = func(*args, **(kwargs or {}))
        name = func._overloadpacket.__name__
        kind = _KINDS.get(name)
        if kind is not None:
            if name == "all_gather_into_tensor":      # functional: (input, group_size, group_name)
                full = _nbytes(args[0]) * int(args[1])
            elif name in ("_reduce_scatter_base_", "reduce_scatter_"):
                full = _nbytes(args[1])               # c10d: (output, input, ...)
            else:
                full = _nbytes(args[0])               # all-reduced tensor(s), all-gather output(s)
            self.calls.append((kind, full))
        return out

    def total(self, kind: str | None = None) -> int:
        return sum(b for k, b in self.calls if kind is None or k == kind)

    def wire_bytes(self, p: int) -> float:
        factor = {"all_reduce": 2 * (p - 1) / p, "all_gather": (p - 1) / p, "reduce_scatter": (p - 1) / p}
        return sum(factor.get(k, 1.0) * b for k, b in self.calls)


__all__ = ["CommRecorder"]
