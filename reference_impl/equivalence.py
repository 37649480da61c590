"""A Pre-LayerNorm Transformer as a Pre-RMSNorm one: the exact conversion, gain folding and rotation.

Every LayerNorm of a Pre-LN decoder reads the residual stream, and only linear maps write into it: the
token and position embeddings, and the output projections of attention and MLP. Centring those writers
over the hidden dimension (subtracting the mean of each output vector, bias included) keeps the stream at
zero mean for every token; LayerNorm of a zero-mean row *is* RMSNorm of it plus the bias, so every
LayerNorm can be replaced by ``RMSNorm`` with the same gain, the same bias and the same eps, and the logits
do not change (Jiang et al. 2023, arXiv:2305.14858). Works on GPT-2 and GPT-NeoX models built by the
installed ``transformers``; the model is modified in place and returned.

Conventions: vectors are rows (``h @ Q``), as in PyTorch. ``Conv1D`` (GPT-2) stores ``(in, out)``,
``nn.Linear`` stores ``(out, in)``, an embedding ``(rows, hidden)``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ._checks import check_input
from .norms.rms_norm import rms_norm

# --------------------------------------------------------------------------------------------- layout


@dataclass
class Layout:
    """Where a family's residual stream is written and read.

    writers: (module, kind) pairs whose output lands in the stream; kind is ``embedding``, ``conv1d`` or
    ``linear``. norms: (parent, attribute) of every norm that reads the stream, the final one included.
    readers: for each norm, in the same order, the (parent, attribute, kind) of the one linear map that
    reads its output. head: (parent, attribute) of the LM head; embedding: the token embedding.
    """

    writers: list
    norms: list
    readers: list
    head: tuple
    embedding: nn.Module


def layout(model: nn.Module) -> Layout:
    """The :class:`Layout` of a ``GPT2LMHeadModel`` or ``GPTNeoXForCausalLM`` (Pre-LN decoders)."""
    if hasattr(model, "transformer") and hasattr(model.transformer, "wte"):   # GPT-2
        t = model.transformer
        writers = [(t.wte, "embedding"), (t.wpe, "embedding")]
        norms, readers = [], []
        for blk in t.h:
            writers += [(blk.attn.c_proj, "conv1d"), (blk.mlp.c_proj, "conv1d")]
            norms += [(blk, "ln_1"), (blk, "ln_2")]
            readers += [(blk.attn, "c_attn", "conv1d"), (blk.mlp, "c_fc", "conv1d")]
        norms.append((t, "ln_f"))
        readers.append((model, "lm_head", "linear"))
        return Layout(writers, norms, readers, (model, "lm_head"), t.wte)
    if hasattr(model, "gpt_neox"):                                             # GPT-NeoX (Pythia)
        g = model.gpt_neox
        writers = [(g.embed_in, "embedding")]
        norms, readers = [], []
        for blk in g.layers:
            writers += [(blk.attention.dense, "linear"), (blk.mlp.dense_4h_to_h, "linear")]
            norms += [(blk, "input_layernorm"), (blk, "post_attention_layernorm")]
            readers += [(blk.attention, "query_key_value", "linear"), (blk.mlp, "dense_h_to_4h", "linear")]
        norms.append((g, "final_layer_norm"))
        readers.append((model, "lm_head", "linear"))
        return Layout(writers, norms, readers, (model, "lm_head"), g.embed_in)
    raise TypeError(f"{type(model).__name__} is not a GPT-2 or GPT-NeoX causal LM from transformers")


# ------------------------------------------------------------------------------------------ the norm


# --8<-- [start:rmsnorm_affine]
class RMSNormAffine(nn.Module):
    """RMSNorm with a gain and an optional bias: ``x * rsqrt(mean(x**2) + eps) * weight + bias``.

    What a LayerNorm becomes once its input has zero mean (same gain, bias and eps). The normalization is
    :func:`reference_impl.norms.rms_norm.rms_norm` (float32 statistics, float64 for float64 input).
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, eps: float):
        super().__init__()
        self.weight = nn.Parameter(weight.detach().clone())
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone())
        self.eps = float(eps)

    def forward(self, x):
        y = rms_norm(x, self.weight, self.eps)
        return y if self.bias is None else y + self.bias
# --8<-- [end:rmsnorm_affine]

    @classmethod
    def from_layer_norm(cls, ln: nn.LayerNorm) -> "RMSNormAffine":
        if not isinstance(ln, nn.LayerNorm):
            raise TypeError(f"expected torch.nn.LayerNorm, got {type(ln).__name__}")
        if len(ln.normalized_shape) != 1:
            raise ValueError(f"only a LayerNorm over the last dimension converts, got shape {ln.normalized_shape}")
        d = ln.normalized_shape[0]
        weight = ln.weight if ln.weight is not None else torch.ones(d)
        return cls(weight, ln.bias, ln.eps)


def _norm_param(mod: nn.Module, name: str, d: int, fill: float) -> torch.Tensor:
    p = getattr(mod, name, None)
    return torch.full((d,), fill, dtype=torch.float64) if p is None else p.detach()


# --------------------------------------------------------------------------------------- the surgery


def untie_head(model: nn.Module) -> nn.Module:
    """Gives the LM head its own copy of a weight it shares with the token embedding.

    Needed before centring: the head computes ``logits_v = y . E_v``; centring the embedding rows in a
    tied model would change every logit by ``-mean(E_v) * sum(y)``, a different amount per token.
    """
    lay = layout(model)
    parent, attr = lay.head
    head = getattr(parent, attr)
    if head.weight is lay.embedding.weight:
        head.weight = nn.Parameter(head.weight.detach().clone())
    if hasattr(model.config, "tie_word_embeddings"):
        model.config.tie_word_embeddings = False   # so that a later tie_weights() keeps them apart
    return model


# --8<-- [start:centre]
@torch.no_grad()
def centre_writer(mod: nn.Module, kind: str) -> None:
    """Subtracts, from every vector the module writes into the stream, its mean over the hidden size."""
    if kind in ("embedding", "conv1d"):        # hidden size is the last axis of the weight
        mod.weight -= mod.weight.mean(dim=-1, keepdim=True)
    elif kind == "linear":                     # nn.Linear: (hidden, in), hidden is axis 0
        mod.weight -= mod.weight.mean(dim=0, keepdim=True)
    else:
        raise ValueError(f"unknown writer kind {kind!r}")
    if getattr(mod, "bias", None) is not None:
        mod.bias -= mod.bias.mean()
# --8<-- [end:centre]


def centre_writers(model: nn.Module, biases: bool = True) -> nn.Module:
    """Centres every writer of the residual stream (``biases=False`` leaves the biases: a broken variant)."""
    lay = layout(model)
    if lay.head and getattr(*lay.head).weight is lay.embedding.weight:
        raise ValueError("the LM head shares the token embedding: call untie_head(model) before centring")
    for mod, kind in lay.writers:
        if biases:
            centre_writer(mod, kind)
        else:
            bias, mod.bias = getattr(mod, "bias", None), None
            centre_writer(mod, kind)
            mod.bias = bias
    return model


def layer_norms_to_rms_norms(model: nn.Module) -> nn.Module:
    """Replaces every LayerNorm that reads the stream by :class:`RMSNormAffine` with its gain, bias, eps."""
    for parent, attr in layout(model).norms:
        setattr(parent, attr, RMSNormAffine.from_layer_norm(getattr(parent, attr)))
    return model


def to_rms_norm(model: nn.Module) -> nn.Module:
    """The whole conversion, in place: untie the head, centre the writers, swap every norm."""
    untie_head(model)
    centre_writers(model)
    return layer_norms_to_rms_norms(model)


# ----------------------------------------------------------------------------- folding and rotating


# --8<-- [start:fold]
@torch.no_grad()
def fold_into_reader(reader: nn.Module, kind: str, gain: torch.Tensor, bias: torch.Tensor | None) -> None:
    """Makes ``reader(n)`` compute what ``reader(gain * n + bias)`` computed: W' = W diag(gain) and
    b' = b + W bias (in the reader's own storage layout)."""
    g = gain.to(reader.weight.dtype)
    if kind == "conv1d":                       # y = n @ W + b, W: (in, out)
        shift = None if bias is None else bias.to(g.dtype) @ reader.weight
        reader.weight.mul_(g[:, None])
    elif kind == "linear":                     # y = n @ W.T + b, W: (out, in)
        shift = None if bias is None else reader.weight @ bias.to(g.dtype)
        reader.weight.mul_(g[None, :])
    else:
        raise ValueError(f"unknown reader kind {kind!r}")
    if shift is not None:
        reader.bias += shift
# --8<-- [end:fold]


def _with_bias(reader: nn.Module, kind: str) -> nn.Module:
    """The reader itself, or (an ``nn.Linear`` without bias, like an LM head) a copy with a zero bias."""
    if getattr(reader, "bias", None) is not None:
        return reader
    if kind != "linear":
        raise ValueError(f"a {kind} reader without bias cannot take a folded bias")
    new = nn.Linear(reader.in_features, reader.out_features, bias=True,
                    dtype=reader.weight.dtype, device=reader.weight.device)
    with torch.no_grad():
        new.weight.copy_(reader.weight)
        new.bias.zero_()
    return new


def fold_norm_gains(model: nn.Module) -> nn.Module:
    """Folds every norm's gain and bias into the linear map that reads it; the norms end with unit gain
    and no bias (an RMSNorm then is ``x * rsqrt(mean(x**2) + eps)``). Works for LayerNorm too."""
    lay = layout(model)
    if getattr(*lay.head).weight is lay.embedding.weight:
        raise ValueError("the LM head shares the token embedding: call untie_head(model) before folding")
    for (parent, attr), (rparent, rattr, kind) in zip(lay.norms, lay.readers):
        norm = getattr(parent, attr)
        d = norm.weight.shape[0]
        gain = _norm_param(norm, "weight", d, 1.0)
        bias = getattr(norm, "bias", None)
        reader = _with_bias(getattr(rparent, rattr), kind)
        fold_into_reader(reader, kind, gain, None if bias is None else bias.detach())
        setattr(rparent, rattr, reader)
        with torch.no_grad():
            norm.weight.fill_(1.0)
            if bias is not None:
                norm.bias.zero_()
        if isinstance(norm, RMSNormAffine):
            norm.bias = None
    return model


def random_orthogonal(d: int, seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    """A random orthogonal d x d matrix (QR of a Gaussian matrix, signs fixed: Haar distributed)."""
    if not isinstance(d, int) or d < 1:
        raise ValueError(f"d must be a positive int, got {d!r}")
    g = torch.Generator().manual_seed(seed)
    q, r = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    return (q * torch.sign(torch.diagonal(r))).to(dtype)


# --8<-- [start:rotate]
@torch.no_grad()
def rotate_residual(model: nn.Module, q: torch.Tensor, strict: bool = True) -> nn.Module:
    """Rotates the residual stream h -> h @ Q: writers get ``W Q``, readers ``Q^T W``.

    Leaves the logits unchanged when every norm is an RMSNorm with unit gain and no bias, because then
    RMSNorm(h Q) = RMSNorm(h) Q. ``strict=False`` also rotates a model whose norms are LayerNorms (to
    show that it breaks: LayerNorm subtracts the mean along the all-ones direction, which Q moves).
    """
    lay = layout(model)
    d = lay.embedding.weight.shape[-1]
    if q.shape != (d, d):
        raise ValueError(f"Q must be ({d}, {d}), got {tuple(q.shape)}")
    if not torch.allclose(q.double() @ q.double().T, torch.eye(d, dtype=torch.float64), atol=1e-6):
        raise ValueError("Q is not orthogonal (Q Q^T != I)")
    for parent, attr in lay.norms:
        norm = getattr(parent, attr)
        plain = isinstance(norm, RMSNormAffine) and norm.bias is None and bool((norm.weight == 1).all())
        if strict and not plain:
            raise ValueError(f"{attr} is {type(norm).__name__} with a gain or bias: convert with "
                             "to_rms_norm and fold_norm_gains first (or pass strict=False)")
    qm = q.to(lay.embedding.weight.dtype)
    for mod, kind in lay.writers:
        if kind in ("embedding", "conv1d"):
            mod.weight.copy_(mod.weight @ qm)
        else:
            mod.weight.copy_(qm.T @ mod.weight)
        if getattr(mod, "bias", None) is not None:
            mod.bias.copy_(mod.bias @ qm)
    for rparent, rattr, kind in lay.readers:
        reader = getattr(rparent, rattr)
        if kind == "conv1d":
            reader.weight.copy_(qm.T @ reader.weight)
        else:
            reader.weight.copy_(reader.weight @ qm)
    return model
# --8<-- [end:rotate]


# ---------------------------------------------------------------------------------------- inspection


def tiny_model(family: str = "gpt2", d: int = 48, layers: int = 2, heads: int = 4, vocab: int = 97,
               positions: int = 32, seed: int = 0, dtype=torch.float64) -> nn.Module:
    """A small randomly initialised GPT-2 or GPT-NeoX model (no weights downloaded), in eval mode, whose
    norm gains, norm biases and linear biases are perturbed so that none of them is trivially 1 or 0."""
    import transformers

    torch.manual_seed(seed)
    common = dict(vocab_size=vocab, bos_token_id=0, eos_token_id=0)
    if family == "gpt2":
        cfg = transformers.GPT2Config(n_positions=positions, n_embd=d, n_layer=layers, n_head=heads, **common)
        model = transformers.GPT2LMHeadModel(cfg)
    elif family == "gpt_neox":
        cfg = transformers.GPTNeoXConfig(hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads,
                                         intermediate_size=4 * d, max_position_embeddings=positions, **common)
        model = transformers.GPTNeoXForCausalLM(cfg)
    else:
        raise ValueError(f"family must be 'gpt2' or 'gpt_neox', got {family!r}")
    model.config._attn_implementation = "eager"
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, nn.LayerNorm):
                mod.weight.copy_(1 + 0.3 * torch.randn(mod.weight.shape, generator=g))
                mod.bias.copy_(0.3 * torch.randn(mod.bias.shape, generator=g))
            elif getattr(mod, "bias", None) is not None and mod.bias.dim() == 1:
                mod.bias.copy_(0.1 * torch.randn(mod.bias.shape, generator=g))
    return model.to(dtype).eval()


@torch.no_grad()
def logits(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return model(input_ids=ids).logits


@torch.no_grad()
def norm_inputs(model: nn.Module, ids: torch.Tensor) -> list[torch.Tensor]:
    """The residual stream each norm reads, in :func:`layout` order (forward pre-hooks)."""
    seen, hooks = [], []
    for parent, attr in layout(model).norms:
        hooks.append(getattr(parent, attr).register_forward_pre_hook(lambda m, a: seen.append(a[0].detach())))
    try:
        model(input_ids=ids)
    finally:
        for h in hooks:
            h.remove()
    return seen


def mean_shift(h: torch.Tensor) -> torch.Tensor:
    """Per row, mean / RMS: the weight of the all-ones direction that RMSNorm (unit gain) keeps."""
    h = h.double()
    return h.mean(-1) / h.pow(2).mean(-1).sqrt()


# ------------------------------------------------------------------------- how close is close enough


def path_lengths(model: nn.Module, seq_len: int) -> list[int]:
    """Rounded operations on the longest path from the input to each norm, then to the logits (last entry).

    Per block: a norm (d//2 + 6, the count of the tolerance policy), the QKV product (d), a score (head
    size + 1), the softmax (seq + 3), the weighted sum of values (seq), the output projection (d), the
    residual add (1); then a norm, the MLP's first product (d), its activation (8), its second product
    (hidden size of the MLP) and an add. The head adds a norm, a product of length d and its bias.
    """
    cfg = model.config
    d = cfg.hidden_size
    heads = cfg.num_attention_heads
    ff = getattr(cfg, "n_inner", None) or getattr(cfg, "intermediate_size", None) or 4 * d
    norm = d // 2 + 6
    attn = norm + d + d // heads + 1 + (seq_len + 3) + seq_len + d + 1
    mlp = norm + d + 8 + ff + 1
    out, n = [], 0
    for _ in range(cfg.num_hidden_layers):
        out.append(n)
        out.append(n + attn - norm)   # the second norm reads the stream after the attention branch
        n += attn + mlp
    out.append(n)
    out.append(n + norm + d + 1)
    return out


@torch.no_grad()
def logit_bound(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """Allowed |difference| per logit between two evaluations of the same function that differ only in
    rounding (the LayerNorm model and its RMSNorm conversion, in the model's dtype).

    First-order and per evaluation: gamma(n, u) times the magnitude ``sum_h |y_h W_vh| + |b_v|`` of the
    head's dot product, n being the longest path of :func:`path_lengths`; twice that for two evaluations.
    It assumes no layer amplifies a relative error (each norm re-scales its input); a transformation that
    changes the function (a missing centring, a tied head) lands orders of magnitude above it.
    """
    from .tolerances import gamma, unit_roundoff

    lay = layout(model)
    parent, attr = lay.norms[-1]
    seen = []
    hook = getattr(parent, attr).register_forward_hook(lambda m, a, y: seen.append(y.detach()))
    try:
        model(input_ids=ids)
    finally:
        hook.remove()
    head = getattr(*lay.head)
    mag = seen[0].abs() @ head.weight.abs().T
    if getattr(head, "bias", None) is not None:
        mag = mag + head.bias.abs()
    n = path_lengths(model, ids.shape[-1])[-1]
    return 2 * gamma(n, unit_roundoff(head.weight.dtype)) * mag


# ----------------------------------------------------------------------------------------- the report


def worked_example(x=(1.0, 2.0, 3.0, 6.0)) -> dict:
    """A four-number row by hand (eps = 0): its mean, mean square, variance, LayerNorm and RMSNorm."""
    if isinstance(x, torch.Tensor):
        check_input(x)
        if x.dim() != 1:
            raise ValueError(f"x must be one row (a 1-D tensor), got shape {tuple(x.shape)}")
        x = tuple(x.tolist())
    v = torch.tensor(x, dtype=torch.float64)
    mu, ms = float(v.mean()), float(v.pow(2).mean())
    var = float((v - mu).pow(2).mean())
    ln = (v - mu) / var ** 0.5
    rms = v / ms ** 0.5
    centred = (v - mu) / (v - mu).pow(2).mean().sqrt()
    text = lambda t: "(" + ", ".join(f"{float(a):.3f}".rstrip("0").rstrip(".") for a in t) + ")"   # noqa: E731
    return {"x": list(x), "mu": mu, "ms": ms, "var": var, "rms": ms ** 0.5, "sigma": var ** 0.5,
            "layer_norm": ln.tolist(), "rms_norm": rms.tolist(), "rms_norm_mean": float(rms.mean()),
            "mu_over_rms": mu / ms ** 0.5, "sigma_over_rms": (var / ms) ** 0.5,
            "rms_norm_of_centred": centred.tolist(),
            "text": {"x": text(v), "layer_norm": text(ln), "rms_norm": text(rms), "rms_norm_of_centred": text(centred)}}


def report(seed: int = 1, seq: int = 16, batch: int = 3, families=("gpt2", "gpt_neox"),
           dtypes=(torch.float64, torch.float32)) -> dict:
    """Numbers for the page: per family and dtype, the largest logit difference (and its ratio to
    :func:`logit_bound`) of the conversion, the folding, the rotation and of each broken variant, and the
    mean shift mu / rms that the original model's stream carries at its first and last norm."""
    import copy

    out = {"seed": seed, "batch": batch, "seq": seq, "families": {}, "worked_example": worked_example()}
    for family in families:
        fam = {}
        for dtype in dtypes:
            model = tiny_model(family, dtype=dtype, seed=seed)
            ids = torch.randint(0, model.config.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(7))
            ref, bound = logits(model, ids), logit_bound(model, ids)
            d = model.config.hidden_size

            def diff(m):
                delta = (logits(m, ids) - ref).abs()
                return {"max_abs": float(delta.max()), "max_over_bound": float((delta / bound).max())}

            conv = to_rms_norm(copy.deepcopy(model))
            row = {"converted": diff(conv)}
            row["converted_max_mean_shift"] = max(float(mean_shift(h).abs().max()) for h in norm_inputs(conv, ids))
            fold_norm_gains(conv)
            row["folded"] = diff(conv)
            rotate_residual(conv, random_orthogonal(d, seed=9))
            row["rotated"] = diff(conv)
            row["no_centring"] = diff(layer_norms_to_rms_norms(untie_head(copy.deepcopy(model))))
            row["biases_not_centred"] = diff(layer_norms_to_rms_norms(centre_writers(untie_head(copy.deepcopy(model)), biases=False)))
            if getattr(*layout(model).head).weight is layout(model).embedding.weight:
                tied = copy.deepcopy(model)
                for mod, kind in layout(tied).writers:
                    centre_writer(mod, kind)
                row["head_left_tied"] = diff(layer_norms_to_rms_norms(tied))
            ln_rot = fold_norm_gains(untie_head(copy.deepcopy(model)))
            row["layernorm_rotated"] = diff(rotate_residual(ln_rot, random_orthogonal(d, seed=9), strict=False))
            row["max_abs_logit"] = float(ref.abs().max())
            row["max_bound"] = float(bound.max())
            if dtype == torch.float64:
                shifts = [mean_shift(h).flatten() for h in norm_inputs(model, ids)]
                row["mean_shift_first_norm"] = {"min": float(shifts[0].min()), "max": float(shifts[0].max())}
                row["mean_shift_final_norm"] = {"min": float(shifts[-1].min()), "max": float(shifts[-1].max())}
            fam[str(dtype).split(".")[-1]] = row
        cfg = model.config
        fam["config"] = {"hidden": cfg.hidden_size, "layers": cfg.num_hidden_layers, "heads": cfg.num_attention_heads,
                         "vocab": cfg.vocab_size, "tied_head": bool(getattr(cfg, "tie_word_embeddings", False))}
        out["families"][family] = fam
    return out
