"""Where each model puts its norms, read from a traced forward pass of a tiny random instance.

For a model type: build its causal-LM class from its own config class, shrunk (:mod:`.shrink`), in float32
and eval mode; run 8 random token ids through it while

- forward hooks record every module call (its input and output tensors, in call order),
- a ``TorchFunctionMode`` records every addition (operands and result: the residual adds),
- the modeling module's ``apply_rotary_pos_emb`` (if it has one) records when it runs.

Each norm call in the first decoder layer is then classified by tensor identity, not by its name:
``input`` (its input is the residual stream and its output feeds a sub-layer while the stream goes on),
``sublayer_output`` (its input is the attention's or the MLP's output, before the add), ``residual_sum``
(its input is the sum of an add and its output is the stream that goes on), ``q_per_head`` / ``k_per_head``
(last dimension head_dim, taken from the query or key projection's storage) or ``q_whole`` / ``k_whole``
(the whole projection), ``latent`` (another width inside attention: multi-head latent attention),
``inner_output`` (inside a sub-layer, on what its output projection reads: the gated norm of a linear-attention
or Mamba mixer, BitNet's sub-norms), and ``final`` / ``embedding`` for norms after the last layer or before the
first. Which projection a query or key norm reads is decided by the storage its input shares with a
projection's output; only when the input is a fresh tensor (after the rotary embedding) does the projection's
or the norm's attribute name decide.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass

import torch
from torch.overrides import TorchFunctionMode

from .shrink import shrink

TOKENS = 8
_ADDS = {torch.add, torch.Tensor.add, torch.Tensor.__add__, torch.Tensor.__radd__, torch.Tensor.__iadd__,
         torch.Tensor.add_}
# a residual scaled before it is added (x * alpha + f(x)) still carries the stream on
_SCALES = {torch.mul, torch.Tensor.mul, torch.Tensor.__mul__, torch.Tensor.__rmul__, torch.div, torch.Tensor.div,
           torch.Tensor.__truediv__}
_ATTN = re.compile(r"attn|attention|mixer|mamba|linear_attn|token_mix|ssm|conv|retention|recurrent|temporal|lstm",
                   re.I)
_MLP = re.compile(r"mlp|ffn|feed_forward|feedforward|moe|experts|dense_h|channel_mix|ff$", re.I)
_Q = re.compile(r"(^|[._])(q|wq|query|q_proj|q_a_proj|q_b_proj)($|[._])|q_proj|query", re.I)
_K = re.compile(r"(^|[._])(k|wk|key|k_proj)($|[._])|k_proj|key", re.I)
EPS_ATTRS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_eps", "rms_norm_epsilon",
             "norm_epsilon", "layernorm_epsilon", "rmsnorm_eps", "epsilon", "eps")


@dataclass
class Call:
    idx: int
    name: str
    module: torch.nn.Module
    x: torch.Tensor | None = None
    y: torch.Tensor | None = None
    end: int | None = None
    n_in: int = 0   # floating-point tensors passed in (2 for a gated norm: the input and its gate)
    n_out: int = 0  # tensors returned (2 for a norm that takes and returns the queries and keys together)


def _first_tensor(args, kwargs=None):
    if kwargs:
        for key in ("hidden_states", "hidden_state", "x", "input", "inputs_embeds", "hidden"):
            if isinstance(kwargs.get(key), torch.Tensor):
                return kwargs[key]
    for a in args:
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            return a
    for a in (kwargs or {}).values():
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            return a
    return None


def _n_floats(args, kwargs) -> int:
    return sum(1 for a in (*args, *(kwargs or {}).values()) if isinstance(a, torch.Tensor) and a.is_floating_point())


def _out_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    for key in ("hidden_states", "last_hidden_state"):
        v = getattr(out, key, None) if not isinstance(out, dict) else out.get(key)
        if isinstance(v, torch.Tensor):
            return v
    return None


def _storage(t):
    try:
        return t.untyped_storage().data_ptr()
    except Exception:
        return None


def same(a, b) -> bool:
    """The same tensor, or a view of the same storage with the same shape."""
    if a is None or b is None:
        return False
    if a is b:
        return True
    return a.shape == b.shape and _storage(a) == _storage(b) and a.storage_offset() == b.storage_offset()


class _Recorder(TorchFunctionMode):
    def __init__(self, clock):
        super().__init__()
        self.adds = []       # (idx, operands, result)
        self.scales = []     # (idx, operands, result)
        self.clock = clock

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in _ADDS or func in _SCALES:
            ops = [a for a in args if isinstance(a, torch.Tensor)]
            if isinstance(out, torch.Tensor) and ops:
                (self.adds if func in _ADDS else self.scales).append((self.clock(), ops, out))
        return out


class Trace:
    """Every module call and every add of one forward pass, in order."""

    def __init__(self, model, norm_types: tuple):
        self.model, self.norm_types = model, norm_types
        self.calls: list[Call] = []
        self.rope: list[tuple] = []   # (tick, outputs) of each rotary call
        self._n = 0
        self._open: dict[int, list] = {}

    def tick(self) -> int:
        self._n += 1
        return self._n

    def run(self, rope_owner=None, **inputs):
        handles = []
        for name, mod in self.model.named_modules():
            handles.append(mod.register_forward_pre_hook(self._pre(name), with_kwargs=True))
            handles.append(mod.register_forward_hook(self._post(name)))
        patched = self._patch_rope(rope_owner)
        rec = _Recorder(self.tick)
        try:
            with torch.no_grad(), rec:
                self.model(**inputs)
        finally:
            for h in handles:
                h.remove()
            for owner, attr, fn in patched:
                setattr(owner, attr, fn)
        self.adds, self.scales = rec.adds, rec.scales
        return self

    def _pre(self, name):
        def hook(mod, args, kwargs):
            c = Call(self.tick(), name, mod, _first_tensor(args, kwargs), n_in=_n_floats(args, kwargs))
            self.calls.append(c)
            self._open.setdefault(id(mod), []).append(c)
        return hook

    def _post(self, name):
        def hook(mod, args, out):
            stack = self._open.get(id(mod))
            if stack:
                c = stack.pop()
                c.y, c.end = _out_tensor(out), self.tick()
                c.n_out = sum(1 for o in out if isinstance(o, torch.Tensor)) if isinstance(out, (tuple, list)) \
                    else int(isinstance(out, torch.Tensor))
        return hook

    def _patch_rope(self, owner):
        patched = []
        if owner is None:
            return patched
        for attr, fn in list(vars(owner).items()):
            if callable(fn) and attr.startswith("apply_rotary"):
                def wrapped(*a, __fn=fn, **k):
                    out = __fn(*a, **k)
                    self.rope.append((self.tick(), tuple(out) if isinstance(out, (tuple, list)) else (out,)))
                    return out
                setattr(owner, attr, wrapped)
                patched.append((owner, attr, fn))
        return patched
