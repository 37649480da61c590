"""Which model family uses which norm, as the installed ``transformers`` package defines it.

Each row is checked by tests/core/test_transformers_parity.py against the installed source and config classes,
and the numerics study writes the config defaults into docs/data/numerics.json.
"""
from __future__ import annotations

# --8<-- [start:families]
FAMILIES = [
    # (family, transformers model folder, norm class, convention, config class, eps attribute, layer class)
    ("Llama", "llama", "LlamaRMSNorm", "llama", "LlamaConfig", "rms_norm_eps", "LlamaDecoderLayer"),
    ("Mistral", "mistral", "MistralRMSNorm", "llama", "MistralConfig", "rms_norm_eps", "MistralDecoderLayer"),
    ("Mixtral", "mixtral", "MixtralRMSNorm", "llama", "MixtralConfig", "rms_norm_eps", "MixtralDecoderLayer"),
    ("Qwen2", "qwen2", "Qwen2RMSNorm", "llama", "Qwen2Config", "rms_norm_eps", "Qwen2DecoderLayer"),
    ("Qwen3", "qwen3", "Qwen3RMSNorm", "llama", "Qwen3Config", "rms_norm_eps", "Qwen3DecoderLayer"),
    ("DeepSeek-V3", "deepseek_v3", "DeepseekV3RMSNorm", "llama", "DeepseekV3Config", "rms_norm_eps", "DeepseekV3DecoderLayer"),
    ("Phi-3", "phi3", "Phi3RMSNorm", "llama", "Phi3Config", "rms_norm_eps", "Phi3DecoderLayer"),
    ("Gemma", "gemma", "GemmaRMSNorm", "gemma", "GemmaConfig", "rms_norm_eps", "GemmaDecoderLayer"),
    ("Gemma 2", "gemma2", "Gemma2RMSNorm", "gemma", "Gemma2Config", "rms_norm_eps", "Gemma2DecoderLayer"),
    ("Gemma 3", "gemma3", "Gemma3RMSNorm", "gemma", "Gemma3TextConfig", "rms_norm_eps", "Gemma3DecoderLayer"),
    ("T5", "t5", "T5LayerNorm", "t5", "T5Config", "layer_norm_epsilon", "T5LayerFF"),
    ("OLMo 2", "olmo2", "Olmo2RMSNorm", "olmo2", "Olmo2Config", "rms_norm_eps", "Olmo2DecoderLayer"),
    ("Mamba-2", "mamba2", "Mamba2RMSNorm", "llama", "Mamba2Config", "layer_norm_epsilon", "Mamba2Block"),
    ("GPT-NeoX / Pythia", "gpt_neox", "LayerNorm", "neox", "GPTNeoXConfig", "layer_norm_eps", "GPTNeoXLayer"),
    ("Cohere (Command R)", "cohere", "CohereLayerNorm", "cohere", "CohereConfig", "layer_norm_eps", "CohereDecoderLayer"),
]
# --8<-- [end:families]

# users of catalog norms that are not a row above (no RMSNorm class of their own in transformers' list)
OTHER_USERS = {
    "Qwen3-Next": "transformers, models/qwen3_next/modeling_qwen3_next.py (Qwen3NextRMSNorm: the (1 + w) gain)",
    "Llama 4": "transformers, models/llama4/modeling_llama4.py (Llama4TextL2Norm on queries and keys)",
    "nGPT": "Loshchilov et al., arXiv:2410.01131 (every vector normalized to unit length)",
    "torch.nn.RMSNorm": "PyTorch, torch/nn/modules/normalization.py",
}


def family_key(family: str) -> str:
    """A stable key for a family name: 'GPT-NeoX / Pythia' -> 'gpt_neox_pythia'."""
    return "".join(ch if ch.isalnum() else "_" for ch in family.lower()).strip("_").replace("___", "_").replace("__", "_")
