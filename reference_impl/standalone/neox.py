"""GPT-NeoX's and Pythia's LayerNorm: ``torch.nn.LayerNorm`` (transformers, models/gpt_neox/modeling_gpt_neox.py).
Self-contained: copy it, it needs only torch."""
# --8<-- [start:neox_layer_norm]
import torch


def neox_layer_norm(x, weight, bias, eps=1e-5):
    """LayerNorm as GPT-NeoX runs it: torch.nn.LayerNorm's own kernel, whose reduction order no Python code
    replays, so the bit-exact copy is the call itself.

    x: (..., d); weight, bias: (d,) in x's dtype, or None. eps: inside the root. Returns x's dtype.
    """
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps)
# --8<-- [end:neox_layer_norm]
