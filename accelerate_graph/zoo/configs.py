"""Tiny configs for every decoder-only causal-LM type transformers knows: the zoo's models.

Each type starts from its own config defaults (so its quirks stay: MoE, sliding windows, partial
rotary, ALiBi, tied embeddings, hybrid layers) and is shrunk by one table of attribute rules. A
config class recomputes what it derives (head_dim, layer patterns) from the shrunk values because
the values are passed to its constructor, not set afterwards.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from transformers import AutoConfig, PreTrainedConfig
from transformers.utils import logging as hf_logging

LAYERS = 2
HIDDEN = 64
HEADS = 4
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS
VOCAB = 256
WINDOW = 4  # smaller than the zoo's prompt + steps, so every sliding window is crossed
EXPERTS = 4
EXPERTS_PER_TOKEN = 2


@contextmanager
def quiet() -> Iterator[None]:
    """Default and tiny configs trip HF's consistency warnings by the hundred; they say nothing about graphs."""
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(level)


def _kv_heads(default: Any) -> Any:
    """GQA with 2 KV heads; a multi-query default (1 head) stays multi-query."""
    return default if default == 1 else KV_HEADS


def _small_token(default: Any) -> Any:
    """Special token ids must lie inside the tiny vocabulary (lists of ids too)."""
    if isinstance(default, list):
        return [_small_token(value) for value in default]
    if isinstance(default, int) and default >= VOCAB:
        return default % VOCAB
    return default


def _all_sparse(default: Any) -> Any:
    """Knobs that keep the first layers dense (or pick dense layers) are set so every layer is MoE."""
    return [] if isinstance(default, list) else 0


# attribute -> tiny value (or a function of the default); applied only where a config has the
# attribute itself or through its attribute_map (n_embd, n_layer, d_model, ... map to the standard names).
RULES: dict[str, Any | Callable[[Any], Any]] = {
    "num_hidden_layers": LAYERS,
    "num_layers": LAYERS,
    "hidden_size": HIDDEN,
    "embedding_size": HIDDEN,
    "num_attention_heads": HEADS,
    "num_key_value_heads": _kv_heads,
    "num_kv_heads": _kv_heads,
    "kv_n_heads": _kv_heads,
    "head_dim": HEAD_DIM,
    "dim_head": HEAD_DIM,
    "d_head": HEAD_DIM,
    "rotary_dim": HEAD_DIM // 2,  # gptj / codegen: rotary on part of each head, as in their defaults
    "intermediate_size": 2 * HIDDEN,
    "intermediate_size_mlp": 2 * HIDDEN,
    "ffn_hidden_size": 2 * HIDDEN,
    "ffn_dim": 2 * HIDDEN,
    "dff": 2 * HIDDEN,
    "dim_ff": 2 * HIDDEN,
    "vocab_size": VOCAB,
    "unpadded_vocab_size": VOCAB,
    "encoder_hash_byte_group_vocab": VOCAB,
    "vocab_size_per_layer_input": VOCAB,
    "hidden_size_per_layer_input": 16,
    "max_position_embeddings": 256,
    "sliding_window": WINDOW,
    "attention_chunk_size": WINDOW,
    "sliding_window_pattern": 2,  # where layers are derived from a pattern: one sliding, one full
    "_sliding_window_pattern": 2,
    # MoE
    "num_experts": EXPERTS,
    "num_local_experts": EXPERTS,
    "n_routed_experts": EXPERTS,
    "moe_num_experts": EXPERTS,
    "num_experts_per_tok": EXPERTS_PER_TOKEN,
    "moe_k": EXPERTS_PER_TOKEN,
    "moe_top_k": EXPERTS_PER_TOKEN,
    "moe_topk": EXPERTS_PER_TOKEN,
    "top_k_experts": EXPERTS_PER_TOKEN,
    "n_shared_experts": lambda default: 1 if default is None else default,
    "zero_expert_num": 2,
    "n_group": 1,
    "topk_group": 1,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "expert_ffn_hidden_size": 32,
    "decoder_sparse_step": 1,
    "interleave_moe_layer_step": 1,
    "first_k_dense_replace": _all_sparse,
    "num_dense_layers": _all_sparse,
    "mlp_only_layers": _all_sparse,
    "moe_layer_start_index": _all_sparse,
    # multi-head latent attention (deepseek family) and its indexers
    "q_lora_rank": 32,
    "kv_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": HEAD_DIM,
    "index_head_dim": HEAD_DIM,
    "index_n_heads": HEADS,
    # special tokens
    "pad_token_id": _small_token,
    "bos_token_id": _small_token,
    "eos_token_id": _small_token,
    "decoder_start_token_id": _small_token,
    "sep_token_id": _small_token,
    "cls_token_id": _small_token,
    # a multimodal model's image token must lie in the tiny vocabulary too, as in the real model
    # (out of vocabulary, gemma3 swaps it for padding with a boolean mask inside the step)
    "image_token_id": _small_token,
    "image_token_index": _small_token,
}

# Defaults that do not even validate as shipped.
# A Gemma 4 drafter shares every layer's KV with its backbone and has no per-layer inputs.
_DRAFTER_TEXT = {"hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 0, "use_double_wide_mlp": False}
DEFAULT_FIXES: dict[str, dict[str, Any]] = {"gemma4_assistant": {"text_config": _DRAFTER_TEXT}}

# What the rules cannot derive, keyed by the model_type of the (sub-)config it applies to; a dict under a
# sub-config's key (text_config, attn_config) applies inside that sub-config.
OVERRIDES: dict[str, dict[str, Any]] = {
    # HF defaults that build no working model: dbrx's attention sub-config lacks the rope base and the clip
    # value its attention reads; cohere_compass_text has rope parameters for no layer kind; lfm2_moe no layer
    # pattern at all
    "dbrx": {"attn_config": {"kv_n_heads": KV_HEADS, "rope_theta": 10000.0, "clip_qkv": 8.0}},
    "cohere_compass_text": {
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}
        }
    },  # head_dim / 2
    "lfm2_moe": {"layer_types": ["conv", "full_attention"]},
    "gemma4_assistant": {"text_config": {**_DRAFTER_TEXT, "num_kv_shared_layers": LAYERS}},
    # layer counts that must add up: stages, KV-sharing layers, a shared block tied across two hybrid layers
    "dory": {
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
        "num_hidden_layers": 3,
        "n_input_layers": 1,
        "n_recurrent_layers": 1,
        "n_output_layers": 1,
    },
    "gemma3n_text": {
        "layer_types": ["sliding_attention", "full_attention"] * 2,
        "num_hidden_layers": 4,
        "num_kv_shared_layers": 2,
    },
    "zamba": {"layer_types": ["hybrid", "linear_attention", "hybrid"], "num_hidden_layers": 3},
    "gpt_neo": {"attention_types": [[["global", "local"], 1]], "window_size": WINDOW},  # one global, one local
    # sizes tied to each other by validation
    "mamba2": {"num_heads": 2 * HIDDEN // HEAD_DIM},  # heads * head_dim == expand * hidden
    "qwen4_exp_text": {
        "indexer_n_heads": HEADS,
        "indexer_kv_heads": 1,
        "indexer_head_dim": HEAD_DIM,
        "indexer_budget": 8,
        "indexer_compress_ratio": 4,
    },
    "zaya": {"num_experts_per_tok": 1},
    # transformers 5.25: the sparse index's heads within a key head's queries, its layers within the two
    "kolibri1_1": {
        "index_num_heads": 1,
        "index_layers": [1],
        "index_topk": 8,
        "index_pool_size": 64,
        "index_compression": 4,
        "index_num_local_tokens": 4,
        "index_num_sink_tokens": 2,
    },
}


def _default(config: PreTrainedConfig, values: dict, name: str) -> Any:
    """The attribute's default: its attribute form first (serialised layouts differ), else the dict's."""
    try:
        return getattr(config, name)
    except Exception:  # noqa: BLE001 - heterogeneous configs refuse global reads of per-layer attributes
        return values.get(name)


def _layer_types(default: list | None) -> list | None:
    """Two layers keep a mix of layer kinds (sliding + full, linear + full, ...): one of each, in order."""
    if not default:
        return None
    kinds = list(dict.fromkeys(default))
    return kinds if len(kinds) > 1 else kinds * LAYERS


def _keep_latent_attention(kwargs: dict[str, Any], values: dict, aliases: dict) -> None:
    """Multi-head latent attention (a kv_lora_rank) has one KV head per query head, and where its default
    head_dim is the rope part of a head it stays so."""
    if "kv_lora_rank" not in values:
        return
    kv_field, dim_field = aliases.get("num_key_value_heads", "num_key_value_heads"), aliases.get("head_dim", "head_dim")
    if kv_field in kwargs:
        kwargs[kv_field] = HEADS
    if dim_field in kwargs and values.get(dim_field) == values.get("qk_rope_head_dim"):
        kwargs[dim_field] = kwargs["qk_rope_head_dim"]


def shrunk_kwargs(config: PreTrainedConfig, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Constructor arguments that rebuild `config` tiny; sub-configs (text, vision, ...) are rebuilt too,
    and an override given for a sub-config (a dict under its key) is applied inside it.

    Each rule is applied under the config's own name for the attribute (attribute_map resolves n_layer,
    d_model, ...), and only where that is a field: a derived property cannot be passed in."""
    values = config.to_dict()
    aliases = getattr(config, "attribute_map", {})
    kwargs: dict[str, Any] = {}
    for name, rule in RULES.items():
        field = aliases.get(name, name)
        if field in values and field not in kwargs:
            kwargs[field] = rule(_default(config, values, field)) if callable(rule) else rule
    _keep_latent_attention(kwargs, values, aliases)
    layer_field = aliases.get("layer_types", "layer_types")
    if layer_field in values and (layer_types := _layer_types(_default(config, values, layer_field))):
        kwargs[layer_field] = layer_types
        kwargs[aliases.get("num_hidden_layers", "num_hidden_layers")] = len(layer_types)
    overrides = {**OVERRIDES.get(str(config.model_type), {}), **(extra or {})}
    for key in getattr(config, "sub_configs", {}):
        sub = getattr(config, key, None)
        if isinstance(sub, PreTrainedConfig):
            kwargs[key] = type(sub)(**shrunk_kwargs(sub, overrides.pop(key, None)))
    kwargs.update(overrides)
    return kwargs


def tiny_config(model_type: str) -> PreTrainedConfig:
    """`model_type`'s default config, shrunk: 2 layers, hidden 64, vocab 256, 4 experts, window 4."""
    default = AutoConfig.for_model(model_type, **DEFAULT_FIXES.get(model_type, {}))
    return AutoConfig.for_model(model_type, **shrunk_kwargs(default))
