"""What the last bits do to tokens: greedy decoding of a small random Llama with each RMSNorm swapped in.

The model is ``LlamaForCausalLM`` from the installed transformers, built from a small ``LlamaConfig`` with
a fixed seed (no weights are downloaded) and cast to bfloat16 or float16. Every ``LlamaRMSNorm`` in it is
replaced by one implementation of :mod:`reference_impl.studies.conformance_impls`. Implementations with a
fused residual add (``fuses_residual``) also take over each layer's first add: the attention output and the
residual stream go into the norm together, which returns the normalized row and the new residual stream,
as the fused kernels of inference engines do.

For each implementation and dtype: greedy decoding (no KV cache, the whole sequence each step) from fixed
random prompts, the number of generated tokens that differ from the reference model's, the first step at
which a prompt's continuation diverges, and the largest logit difference along the reference's own tokens
(teacher forcing, so diverged continuations do not inflate it).
"""
from __future__ import annotations

import torch

from . import conformance_impls as ci

CONFIG = dict(vocab_size=512, hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=4, max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False)
PROMPTS, PROMPT_LEN, STEPS, SEED = 4, 12, 24, 2023
DECODE_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
# which implementations decode, and whether they take over the residual add
DECODERS = {"torch_module": False, "torch_functional_f32": False, "torch_compile": False,
            "ort_simplified": False, "fused_hf": True, "fused_fp32": True,
            "triton_hf": True, "triton_fp32": True, "liger": True, "conventions": False}


class SwappedNorm(torch.nn.Module):
    """Calls ``impl`` on (rows, d) views; ``forward(x, residual=None)`` returns y, or (y, new residual)."""

    def __init__(self, impl, weight: torch.Tensor, eps: float):
        super().__init__()
        self.impl, self.weight, self.eps = impl, weight.detach(), eps

    def forward(self, x, residual=None):
        d = x.shape[-1]
        r = None if residual is None else residual.reshape(-1, d)
        y, h = self.impl.run(x.reshape(-1, d), self.weight, r, self.eps, "llama")
        y = y.to(x.dtype).reshape(x.shape)
        return y if residual is None else (y, h.reshape(x.shape))


def _fused_layer_forward(layer):
    """The layer's forward with its first residual add fused into post_attention_layernorm."""
    def forward(hidden_states, attention_mask=None, position_ids=None, cache=None, use_cache=False,
                position_embeddings=None, **kwargs):
        residual = hidden_states
        hs = layer.input_layernorm(hidden_states)
        hs, _ = layer.self_attn(hidden_states=hs, attention_mask=attention_mask, position_ids=position_ids,
                                cache=cache, use_cache=use_cache, position_embeddings=position_embeddings, **kwargs)
        hs, residual = layer.post_attention_layernorm(hs, residual)
        return residual + layer.mlp(hs)
    return forward


def build_model(dtype: torch.dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    cfg = LlamaConfig(**CONFIG)
    cfg._attn_implementation = "eager"
    return LlamaForCausalLM(cfg).to(dtype).eval()


def swap(model, impl, fuse: bool):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    eps = model.config.rms_norm_eps
    for name, mod in list(model.named_modules()):
        for child_name, child in list(mod.named_children()):
            if isinstance(child, LlamaRMSNorm):
                setattr(mod, child_name, SwappedNorm(impl, child.weight, eps))
    if fuse:
        for layer in model.model.layers:
            layer.forward = _fused_layer_forward(layer)
    return model


def prompts() -> torch.Tensor:
    g = torch.Generator().manual_seed(SEED + 1)
    return torch.randint(0, CONFIG["vocab_size"], (PROMPTS, PROMPT_LEN), generator=g)


@torch.no_grad()
def greedy(model, ids: torch.Tensor, steps: int) -> torch.Tensor:
    for _ in range(steps):
        logits = model(input_ids=ids, use_cache=False).logits[:, -1]
        ids = torch.cat([ids, logits.float().argmax(-1, keepdim=True)], dim=1)
    return ids


@torch.no_grad()
def logits_along(model, ids: torch.Tensor) -> torch.Tensor:
    return model(input_ids=ids, use_cache=False).logits.float()


def decode_all(quick: bool = False, progress: bool = False) -> dict:
    steps = 4 if quick else STEPS
    impls = {i.key: i for i in ci.implementations()}
    out = {"config": CONFIG, "prompts": PROMPTS, "prompt_length": PROMPT_LEN, "steps": steps,
           "reference": "transformers LlamaForCausalLM with LlamaRMSNorm", "results": {}}
    p = prompts()
    for dn, dt in DECODE_DTYPES.items():
        ref_model = build_model(dt)
        ref_ids = greedy(ref_model, p, steps)
        ref_logits = logits_along(ref_model, ref_ids)
        rows = {}
        for key, fuse in DECODERS.items():
            model = swap(build_model(dt), impls[key], fuse)
            try:
                ids = greedy(model, p, steps)
                lg = logits_along(model, ref_ids)
            except ci.Unavailable as exc:
                rows[key] = {"unavailable": str(exc), "fused_residual": fuse}
                continue
            new = ids[:, PROMPT_LEN:] != ref_ids[:, PROMPT_LEN:]
            first = [int(torch.nonzero(row)[0]) if row.any() else None for row in new]
            rows[key] = {"fused_residual": fuse, "tokens_different": int(new.sum()), "tokens": int(new.numel()),
                         "prompts_diverged": sum(f is not None for f in first), "first_divergence": first,
                         "max_logit_difference": float((lg - ref_logits).abs().max())}
            if progress:
                print(f"  decoding {dn} {key}: {rows[key]['tokens_different']} tokens differ", flush=True)
        out["results"][dn] = rows
    return out
