"""A tiny config of a model type, made from its own config class's defaults (nothing downloaded).

Every size attribute that exists on the config (or on its sub-configs: ``text_config``, ``vision_config``,
...) is set to a small value: two layers, width 64, four heads of 16 with two key/value heads, an MLP of
128, a vocabulary of 128, four experts with two per token, small MLA ranks. Per-layer lists
(``layer_types``, ...) are cut to the new layer count. What a model's config validates beyond this is
recorded as that model's error by :mod:`.trace`.
"""
from __future__ import annotations

import copy

LAYERS = 2
SIZES = {
    # layers
    "num_hidden_layers": LAYERS, "num_layers": LAYERS, "n_layer": LAYERS, "n_layers": LAYERS,
    "num_decoder_layers": LAYERS, "decoder_layers": LAYERS, "encoder_layers": LAYERS,
    "num_text_layers": LAYERS, "num_blocks": LAYERS,
    # widths
    "hidden_size": 64, "d_model": 64, "n_embd": 64, "dim": 64, "embed_dim": 64, "model_dim": 64, "embedding_dim": 64,
    "hidden_size_global": 64, "cross_attn_k": 1,
    "intermediate_size": 128, "ffn_dim": 128, "n_inner": 128, "d_ff": 128, "ffn_hidden_size": 128,
    "decoder_ffn_dim": 128, "encoder_ffn_dim": 128, "intermediate_dim": 128, "hidden_dim": 128,
    # heads
    "num_attention_heads": 4, "n_head": 4, "num_heads": 4, "n_heads": 4, "decoder_attention_heads": 4,
    "encoder_attention_heads": 4, "num_key_value_heads": 2, "n_kv_heads": 2, "num_kv_heads": 2,
    "multi_query_group_num": 2, "head_dim": 16, "kv_channels": 16, "d_kv": 16, "attention_head_size": 16,
    "global_head_dim": 16, "local_head_dim": 16,
    # vocabulary and positions
    "vocab_size": 128, "vocab_size_per_layer_input": 128, "encoder_hash_byte_group_vocab": 128,
    "max_position_embeddings": 128, "n_positions": 128, "max_seq_len": 128,
    # experts
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "moe_num_experts": 4,
    "num_experts_per_tok": 2, "num_experts_per_token": 2, "num_expert_group": 1, "moe_topk": 2, "top_k": 2,
    "moe_k": 2, "n_shared_experts": 1,
    "num_shared_experts": 1, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
    "expert_interval": 1, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1,
    # multi-head latent attention
    "kv_lora_rank": 16, "q_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16,
    "qk_head_dim": 16,
    # state-space and linear-attention mixers
    "mamba_d_state": 8, "state_size": 8, "mamba_n_heads": 4, "n_mamba_heads": 4, "mamba_d_ssm": 64,
    "mamba_d_head": 16, "mamba_headdim": 16,
    "mamba_expand": 1, "expand": 1, "rotary_dim": 8, "rotary_emb_dim": 8, "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
    "linear_value_head_dim": 16, "ssm_state_size": 8, "time_step_rank": 8, "conv_kernel": 4,
    "mamba_n_groups": 1, "n_groups": 1, "linear_num_heads": 4, "linear_head_dim": 16,
    # sparse-attention indexers (DeepSeek-V3.2 style): fewer picks than tokens, so the selection is exercised
    "index_topk": 4, "index_n_heads": 4, "index_head_dim": 16,
    # Zamba 2's attention reads the stream concatenated with the embeddings: twice the width
    "attention_hidden_size": 128, "attention_head_dim": 32,
    # windows and chunking
    "sliding_window": 16, "num_kv_shared_layers": 0, "attention_chunk_size": 16, "chunk_size": 16,
    # vision and audio towers
    "image_size": 32, "patch_size": 8, "num_channels": 3, "projection_dim": 64, "out_hidden_size": 64,
}
_SUB = ("text_config", "decoder", "vision_config", "audio_config", "decoder_config", "encoder_config", "speech_config",
        "thinker_config", "talker_config", "language_config", "llm_config", "text_encoder_config",
        "patcher_config", "global_config", "protein_encoder_config")


def _keep(old_layers: int, types) -> list[int]:
    """Layer indices to keep: the first LAYERS, and the first of each layer type not among them."""
    keep = list(range(min(LAYERS, old_layers)))
    if types is not None:
        for i, t in enumerate(types):
            if t not in [types[j] for j in keep]:
                keep.append(i)
    return keep


def _cut_lists(cfg, old_layers: int | None) -> int:
    if not old_layers:
        return LAYERS
    types = vars(cfg).get("layer_types")
    types = list(types) if isinstance(types, (list, tuple)) and len(types) == old_layers else None
    keep = _keep(old_layers, types)
    for name, value in list(vars(cfg).items()):
        if isinstance(value, (list, tuple)) and len(value) == old_layers:
            kept = [value[i] for i in keep]
            if name in SIZES:   # a size given per layer (Gemma 3n's intermediate_size): small in every layer
                if not all(isinstance(v, int) and not isinstance(v, bool) for v in kept):
                    continue
                kept = [SIZES[name]] * len(kept)
            _set(cfg, name, type(value)(kept))
    return len(keep)


def _old_layers(cfg) -> int | None:
    for name in ("num_hidden_layers", "num_layers", "n_layer", "n_layers"):
        v = vars(cfg).get(name)
        if isinstance(v, int) and v > 0:
            return v
    return None


def _set(cfg, name, value) -> None:
    try:
        setattr(cfg, name, value)
    except Exception:  # a read-only property on some configs
        pass


_MAY_BE_NONE = ("head_dim", "kv_channels", "num_key_value_heads")
# sizes a default config may leave unset although its model needs them (dots1's experts, Qwen4-Exp's indexer):
# filled only when the model cannot be built without them (``shrink(cfg, fill=True)``)
FILL = {"n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2, "indexer_n_heads": 4,
        "indexer_kv_heads": 1, "indexer_head_dim": 16, "indexer_budget": 8, "indexer_compress_ratio": 2,
        # Chameleon's map from its image tokens to the vocabulary (read from the checkpoint's vocabulary)
        "vocabulary_map": {"<image>": 127}}
_EXPERTS = ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts")


def shrink(cfg, depth: int = 0, fill: bool = False):
    """A copy of ``cfg`` with every size attribute it has set small (sub-configs too); with ``fill``, the sizes
    of :data:`FILL` that it leaves unset (None) are set too."""
    cfg = copy.deepcopy(cfg) if depth == 0 else cfg
    all_heads = vars(cfg).get("num_key_value_heads") == vars(cfg).get("num_attention_heads")
    old = _old_layers(cfg)
    own = vars(cfg)
    if fill:
        for name, value in FILL.items():
            if name in own and own[name] is None:
                _set(cfg, name, value)
    for name, value in SIZES.items():
        if name not in own:
            continue
        v = own[name]
        if (isinstance(v, int) and not isinstance(v, bool)) or (v is None and name in _MAY_BE_NONE):
            _set(cfg, name, value)
    if vars(cfg).get("num_experts_per_tok", 0) is None and any(isinstance(own.get(e), int) for e in _EXPERTS):
        _set(cfg, "num_experts_per_tok", SIZES["num_experts_per_tok"])   # a routed MoE whose default leaves it unset
    vocab = own.get("vocab_size")
    for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id"):
        v = own.get(name)
        if isinstance(v, int) and isinstance(vocab, int) and v >= vocab:
            _set(cfg, name, min(v, vocab - 1) if name != "pad_token_id" else 0)
    n = _cut_lists(cfg, old)
    for name in ("num_hidden_layers", "num_layers", "n_layer", "n_layers"):
        if isinstance(vars(cfg).get(name), int):
            _set(cfg, name, n)
    if isinstance(own.get("kv_lora_rank"), int) and own.get("num_key_value_heads") == SIZES["num_key_value_heads"] \
            and all_heads:
        # latent attention expands its keys to every head: keep as many key/value heads as query heads
        _set(cfg, "num_key_value_heads", SIZES["num_attention_heads"])
    if "qk_rope_head_dim" in vars(cfg) and "head_dim" in vars(cfg):  # latent attention: head_dim is the rotary part
        _set(cfg, "head_dim", vars(cfg)["qk_rope_head_dim"])
    for name in ("mlp_layer_types", "layers_block_type", "hybrid_override_pattern", "block_types"):
        v = vars(cfg).get(name)
        if isinstance(v, str) and old and len(v) == old:
            _set(cfg, name, v[:LAYERS])
    if isinstance(own.get("axial_pos_embds_dim"), (list, tuple)) and isinstance(own.get("hidden_size"), int):
        # Reformer: the axial position embedding's two parts add up to the width, its shape to the positions
        half = own["hidden_size"] // 2
        _set(cfg, "axial_pos_embds_dim", (half, own["hidden_size"] - half))
        _set(cfg, "axial_pos_shape", (8, SIZES["max_position_embeddings"] // 8))
    if "use_cache" in own:
        _set(cfg, "use_cache", False)
    if depth < 2:
        for sub in _SUB:
            s = vars(cfg).get(sub)
            if s is not None and hasattr(s, "to_dict"):
                shrink(s, depth + 1, fill)
    return cfg
