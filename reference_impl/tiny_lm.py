"""A small decoder-only Transformer whose norm and norm placement are parameters (for the training study).

Plain PyTorch: token and learned position embeddings, causal multi-head attention
(``scaled_dot_product_attention``), a SwiGLU MLP as in Llama, no biases in the linear layers, an untied
LM head. ``norm`` names a layer of the norm catalog (:func:`reference_impl.norms.model_layers`): ``rms`` is
``torch.nn.RMSNorm`` and ``ln`` ``torch.nn.LayerNorm`` (the modules people run), ``dyt`` and ``derf`` the
point-wise functions DyT (arXiv:2503.10622) and Derf (arXiv:2512.10938) in every place a norm would be; a
catalog entry that declares a ``Layer`` is available here with no edit to this module. ``identity`` (no
norm) exists only for timing what the norms cost. Placements, for a sub-layer F (attention or MLP):

- ``pre``:  h = h + F(Norm(h)), and a final norm before the head (GPT-2, Llama);
- ``post``: h = Norm(h + F(h)), no final norm (the original Transformer, arXiv:1706.03762);
- ``out``:  h = h + Norm(F(h)), a norm on the sub-layer's output, and a final norm: for the MLP this is
  ``Norm(SwiGLU(h))`` where ``pre`` computes ``SwiGLU(Norm(h))``. This is OLMo 2's reordered norm
  (arXiv:2501.00656, taken from Swin Transformer V2, arXiv:2111.09883);
- ``sandwich``: h = h + Norm(F(Norm(h))), and a final norm (CogView's Sandwich-LN, arXiv:2105.13290; Gemma 2);
- ``peri``: the sandwich block, and the embeddings are normalized before the first block as well
  (Peri-LN, arXiv:2502.02732);
- ``deepnorm``: h = Norm(alpha h + F(h)), Post-LN with the stream scaled by alpha = (2 L)^(1/4) and the value,
  output and MLP weights initialised with Xavier's normal scaled by beta = (8 L)^(-1/4): DeepNorm's constants
  for a decoder-only model of L layers (arXiv:2203.00555);
- ``mixln``: Post-LN in the first ``round(mix_post_fraction * L)`` blocks, Pre-LN in the others, a final norm
  (Mix-LN, arXiv:2412.13795).

``qk_norm`` (a catalog layer with statistics: "rms" or "ln") normalizes each head's query and key over the
head dimension before the dot product (QK-norm, arXiv:2302.05442); "none" leaves them.
"""
from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .norms import layer_sources, model_layers

PLACEMENTS = ("pre", "post", "out", "sandwich", "peri", "deepnorm", "mixln")
NO_NORM = "identity"                                         # only for timing what the norms cost
QK_LAYERS = ("rms", "ln")                                    # QK-norm takes a norm with statistics


def norm_names() -> tuple[str, ...]:
    """Every value ``norm`` accepts: the catalog's layers (their short names), then ``identity``."""
    return tuple(model_layers()) + (NO_NORM,)


def qk_norm_names() -> tuple[str, ...]:
    """Every value ``qk_norm`` accepts: ``none``, or a catalog layer with statistics."""
    return ("none",) + tuple(s for s in QK_LAYERS if s in model_layers())


def sources(*entries: str) -> list[str]:
    """The files behind a study of this model: the entries' imports (the catalog package not expanded) and
    the catalog modules of the layers this model can build (:func:`reference_impl.norms.layer_sources`)."""
    from .provenance import python_closure
    return sorted(set(python_closure("reference_impl/tiny_lm.py", *entries, discover=False))
                  | set(layer_sources(model_layers())))
FINAL_NORM = ("pre", "out", "sandwich", "peri", "mixln")     # placements whose stream leaves un-normalized


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
    qk_norm: str = "none"
    mix_post_fraction: float = 0.25

    def __post_init__(self):
        for name in ("vocab", "d", "layers", "heads", "ffn", "context"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if self.d % self.heads:
            raise ValueError(f"d={self.d} is not a multiple of heads={self.heads}")
        if self.norm not in norm_names():
            raise ValueError(f"norm must be one of {norm_names()} (the catalog's layers and identity), "
                             f"got {self.norm!r}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, got {self.placement!r}")
        if not (isinstance(self.eps, (int, float)) and math.isfinite(self.eps) and self.eps >= 0):
            raise ValueError(f"eps must be a finite number >= 0, got {self.eps!r}")
        if not (isinstance(self.gain_init, (int, float)) and math.isfinite(self.gain_init)):
            raise ValueError(f"gain_init must be a finite number, got {self.gain_init!r}")
        if self.qk_norm not in qk_norm_names():
            raise ValueError(f"qk_norm must be one of {qk_norm_names()}, got {self.qk_norm!r}")
        f = self.mix_post_fraction
        if not (isinstance(f, (int, float)) and not isinstance(f, bool) and 0 <= f <= 1):
            raise ValueError(f"mix_post_fraction must be a number in [0, 1], got {f!r}")

    def to_dict(self) -> dict:
        return asdict(self)


    def post_blocks(self) -> int:
        """How many of the first blocks are Post-LN blocks."""
        if self.placement in ("post", "deepnorm"):
            return self.layers
        return round(self.mix_post_fraction * self.layers) if self.placement == "mixln" else 0

    def deepnorm_constants(self) -> tuple[float, float]:
        """DeepNorm's (alpha, beta) for a decoder-only stack of ``layers`` blocks (arXiv:2203.00555)."""
        return (2 * self.layers) ** 0.25, (8 * self.layers) ** -0.25


def make_norm(cfg: TinyLMConfig, d: int | None = None, kind: str | None = None) -> nn.Module:
    """The norm of ``cfg`` (or ``kind``) over ``d`` features (default ``cfg.d``), its gain at ``gain_init``."""
    d, kind = d or cfg.d, kind or cfg.norm
    if kind == NO_NORM:
        return nn.Identity()
    norm = model_layers()[kind].layer.build(d, cfg.eps)
    if getattr(norm, "weight", None) is not None:
        with torch.no_grad():
            norm.weight.fill_(cfg.gain_init)
    return norm


class Attention(nn.Module):
    """Causal multi-head attention. With ``record_logits`` set, each call stores the largest absolute
    pre-softmax logit q.k / sqrt(head_dim) over the causal positions in ``max_logit`` (an extra, explicit
    product; the output is the same)."""

    def __init__(self, cfg: TinyLMConfig):
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.d, 3 * cfg.d, bias=False)
        self.proj = nn.Linear(cfg.d, cfg.d, bias=False)
        hd = cfg.d // cfg.heads
        qk = cfg.qk_norm != "none"
        self.q_norm = make_norm(cfg, hd, cfg.qk_norm) if qk else nn.Identity()
        self.k_norm = make_norm(cfg, hd, cfg.qk_norm) if qk else nn.Identity()
        self.record_logits = False
        self.max_logit = 0.0

    def forward(self, h):
        b, t, d = h.shape
        q, k, v = self.qkv(h).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k = self.q_norm(q), self.k_norm(k)     # over the head dimension (the identity without QK-norm)
        if self.record_logits:
            with torch.no_grad():
                logits = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
                causal = torch.ones(t, t, dtype=torch.bool, device=h.device).tril()
                self.max_logit = max(self.max_logit, float(logits.abs().masked_fill(~causal, 0).max()))
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
    """One block; ``placement`` is the block's own ("post" or "pre" inside Mix-LN)."""

    def __init__(self, cfg: TinyLMConfig, placement: str | None = None):
        super().__init__()
        self.placement = placement or cfg.placement
        self.alpha = cfg.deepnorm_constants()[0] if self.placement == "deepnorm" else 1.0
        self.norm1, self.attn = make_norm(cfg), Attention(cfg)
        self.norm2, self.mlp = make_norm(cfg), SwiGLU(cfg)
        if self.placement in ("sandwich", "peri"):
            self.norm1_out, self.norm2_out = make_norm(cfg), make_norm(cfg)

    # --8<-- [start:placements]
    def forward(self, h):
        if self.placement == "pre":      # normalize what the sub-layer reads
            h = h + self.attn(self.norm1(h))
            return h + self.mlp(self.norm2(h))
        if self.placement == "post":     # normalize the stream after each add
            h = self.norm1(h + self.attn(h))
            return self.norm2(h + self.mlp(h))
        if self.placement == "out":     # normalize what the sub-layer writes (OLMo 2)
            h = h + self.norm1(self.attn(h))
            return h + self.norm2(self.mlp(h))
        if self.placement == "deepnorm":  # Post-LN with the stream up-weighted by alpha
            h = self.norm1(self.alpha * h + self.attn(h))
            return self.norm2(self.alpha * h + self.mlp(h))
        # sandwich and peri: normalize both what the sub-layer reads and what it writes
        h = h + self.norm1_out(self.attn(self.norm1(h)))
        return h + self.norm2_out(self.mlp(self.norm2(h)))
    # --8<-- [end:placements]


class TinyLM(nn.Module):
    """``forward(idx)`` returns logits ``(batch, time, vocab)``; ``loss(idx, targets)`` the mean
    cross-entropy in nats per token (a byte here)."""

    def __init__(self, cfg: TinyLMConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.d)
        self.pos = nn.Embedding(cfg.context, cfg.d)
        n_post = cfg.post_blocks()
        kinds = [cfg.placement] * cfg.layers if cfg.placement != "mixln" else \
            ["post"] * n_post + ["pre"] * (cfg.layers - n_post)
        self.blocks = nn.ModuleList(Block(cfg, kind) for kind in kinds)
        self.embed_norm = make_norm(cfg) if cfg.placement == "peri" else nn.Identity()
        self.final_norm = make_norm(cfg) if cfg.placement in FINAL_NORM else nn.Identity()
        self.head = nn.Linear(cfg.d, cfg.vocab, bias=False)
        self._init_weights()

    def _init_weights(self):
        # GPT-2's scheme: N(0, 0.02), the projections that write into the stream scaled by 1/sqrt(2 L)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * self.cfg.layers) if name.endswith(("proj.weight", "down.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
        if self.cfg.placement == "deepnorm":
            self._deepnorm_init()

    @torch.no_grad()
    def _deepnorm_init(self):
        # DeepNet: Xavier normal, gain beta for the value, output and MLP weights, gain 1 for query and key
        beta = self.cfg.deepnorm_constants()[1]
        d = self.cfg.d
        for blk in self.blocks:
            w = blk.attn.qkv.weight
            for i, gain in enumerate((1.0, 1.0, beta)):                  # rows of q, k, v
                nn.init.xavier_normal_(w[i * d:(i + 1) * d], gain=gain)
            for lin in (blk.attn.proj, blk.mlp.gate, blk.mlp.up, blk.mlp.down):
                nn.init.xavier_normal_(lin.weight, gain=beta)

    def forward(self, idx):
        return self.head(self.final_norm(self.hidden_states(idx)[-1]))

    def hidden_states(self, idx) -> list[torch.Tensor]:
        """The residual stream after the embeddings (and their norm, under Peri-LN) and after each block."""
        if idx.dim() != 2 or idx.dtype not in (torch.int64, torch.int32, torch.uint8):
            raise ValueError(f"idx must be a (batch, time) integer tensor, got {tuple(idx.shape)} {idx.dtype}")
        t = idx.shape[1]
        if t > self.cfg.context:
            raise ValueError(f"sequence of {t} tokens is longer than the context {self.cfg.context}")
        h = self.embed_norm(self.tok(idx.long()) + self.pos(torch.arange(t, device=idx.device)))
        out = [h]
        for blk in self.blocks:
            h = blk(h)
            out.append(h)
        return out

    def loss(self, idx, targets):
        logits = self(idx)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long())

    def norms(self) -> list[nn.Module]:
        return [m for m in self.modules() if isinstance(m, (nn.RMSNorm, nn.LayerNorm))]

    def attention_layers(self) -> list[Attention]:
        return [blk.attn for blk in self.blocks]


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
