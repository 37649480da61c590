"""A small decoder-only Transformer whose norm and norm placement are parameters (for the training study).

Plain PyTorch: token and learned position embeddings, causal multi-head attention
(``scaled_dot_product_attention``), a SwiGLU MLP as in Llama, no biases in the linear layers, an untied
LM head. The norm is ``torch.nn.RMSNorm`` or ``torch.nn.LayerNorm`` (the modules people run), or the
identity (only for timing what the norms cost). Placements, for a sub-layer F (attention or MLP):

- ``pre``:  h = h + F(Norm(h)), and a final norm before the head (GPT-2, Llama);
- ``post``: h = Norm(h + F(h)), no final norm (the original Transformer, arXiv:1706.03762);
- ``out``:  h = h + Norm(F(h)), a norm on the sub-layer's output, and a final norm: for the MLP this is
  ``Norm(SwiGLU(h))`` where ``pre`` computes ``SwiGLU(Norm(h))``.
"""
from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

NORMS = ("rms", "ln", "identity")
PLACEMENTS = ("pre", "post", "out")


@dataclass(frozen=True)
class TinyLMConfig:
    """Sizes and choices. ``ffn`` is the SwiGLU hidden size; ``eps`` is the same for both norms, so that
    only the centring differs; ``gain_init`` is the initial value of every norm gain."""

    vocab: int = 256
    d: int = 64
    layers: int = 4
    heads: int = 4
    ffn: int = 176
    context: int = 64
    norm: str = "rms"
    placement: str = "pre"
    eps: float = 1e-5
    gain_init: float = 1.0

    def __post_init__(self):
        for name in ("vocab", "d", "layers", "heads", "ffn", "context"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if self.d % self.heads:
            raise ValueError(f"d={self.d} is not a multiple of heads={self.heads}")
        if self.norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {self.norm!r}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, got {self.placement!r}")
        if not (isinstance(self.eps, (int, float)) and math.isfinite(self.eps) and self.eps >= 0):
            raise ValueError(f"eps must be a finite number >= 0, got {self.eps!r}")
        if not (isinstance(self.gain_init, (int, float)) and math.isfinite(self.gain_init)):
            raise ValueError(f"gain_init must be a finite number, got {self.gain_init!r}")

    def to_dict(self) -> dict:
        return asdict(self)


def make_norm(cfg: TinyLMConfig) -> nn.Module:
    if cfg.norm == "identity":
        return nn.Identity()
    norm = nn.RMSNorm(cfg.d, eps=cfg.eps) if cfg.norm == "rms" else nn.LayerNorm(cfg.d, eps=cfg.eps)
    with torch.no_grad():
        norm.weight.fill_(cfg.gain_init)
    return norm


class Attention(nn.Module):
    def __init__(self, cfg: TinyLMConfig):
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.d, 3 * cfg.d, bias=False)
        self.proj = nn.Linear(cfg.d, cfg.d, bias=False)

    def forward(self, h):
        b, t, d = h.shape
        q, k, v = self.qkv(h).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class SwiGLU(nn.Module):
    def __init__(self, cfg: TinyLMConfig):
        super().__init__()
        self.gate = nn.Linear(cfg.d, cfg.ffn, bias=False)
        self.up = nn.Linear(cfg.d, cfg.ffn, bias=False)
        self.down = nn.Linear(cfg.ffn, cfg.d, bias=False)

    def forward(self, h):
        return self.down(F.silu(self.gate(h)) * self.up(h))


class Block(nn.Module):
    def __init__(self, cfg: TinyLMConfig):
        super().__init__()
        self.placement = cfg.placement
        self.norm1, self.attn = make_norm(cfg), Attention(cfg)
        self.norm2, self.mlp = make_norm(cfg), SwiGLU(cfg)

    # --8<-- [start:placements]
    def forward(self, h):
        if self.placement == "pre":      # normalize what the sub-layer reads
            h = h + self.attn(self.norm1(h))
            return h + self.mlp(self.norm2(h))
        if self.placement == "post":     # normalize the stream after each add
            h = self.norm1(h + self.attn(h))
            return self.norm2(h + self.mlp(h))
        h = h + self.norm1(self.attn(h))  # "out": normalize what the sub-layer writes
        return h + self.norm2(self.mlp(h))
    # --8<-- [end:placements]


class TinyLM(nn.Module):
    """``forward(idx)`` returns logits ``(batch, time, vocab)``; ``loss(idx, targets)`` the mean
    cross-entropy in nats per token (a byte here)."""

    def __init__(self, cfg: TinyLMConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.d)
        self.pos = nn.Embedding(cfg.context, cfg.d)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.final_norm = nn.Identity() if cfg.placement == "post" else make_norm(cfg)
        self.head = nn.Linear(cfg.d, cfg.vocab, bias=False)
        self._init_weights()

    def _init_weights(self):
        # GPT-2's scheme: N(0, 0.02), the projections that write into the stream scaled by 1/sqrt(2 L)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * self.cfg.layers) if name.endswith(("proj.weight", "down.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx):
        if idx.dim() != 2 or idx.dtype not in (torch.int64, torch.int32, torch.uint8):
            raise ValueError(f"idx must be a (batch, time) integer tensor, got {tuple(idx.shape)} {idx.dtype}")
        t = idx.shape[1]
        if t > self.cfg.context:
            raise ValueError(f"sequence of {t} tokens is longer than the context {self.cfg.context}")
        h = self.tok(idx.long()) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            h = blk(h)
        return self.head(self.final_norm(h))

    def loss(self, idx, targets):
        logits = self(idx)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long())

    def norms(self) -> list[nn.Module]:
        return [m for m in self.modules() if isinstance(m, (nn.RMSNorm, nn.LayerNorm))]


def without_norms(model: TinyLM) -> TinyLM:
    """A copy of ``model`` with every norm replaced by the identity (same weights otherwise): the step
    time of this copy, subtracted from the model's, is what the norms cost."""
    out = copy.deepcopy(model)
    for parent in out.modules():
        for name, child in list(parent.named_children()):
            if isinstance(child, (nn.RMSNorm, nn.LayerNorm)):
                setattr(parent, name, nn.Identity())
    return out


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
