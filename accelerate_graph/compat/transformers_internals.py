"""transformers internals we rely on, one function each. Checked against transformers 5.17 and 5.24.

Each docstring names the upstream symbol and why no public API serves; tests/compat/test_compat.py
fails naming the symbol when an upgrade removes or changes it. Where transformers offers a public way
(`PreTrainedModel.set_attn_implementation`, `get_experts_implementation`, the `StaticLayer` and
`Cache(layers=...)` constructors), callers use it; only the reads and writes it does not cover live here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from transformers.cache_utils import StaticLayer

CHECKED = "transformers 5.17, 5.24"


def attention_implementation(config) -> str | None:
    """The attention implementation a config selects ("sdpa", "eager", a registered name):
    `transformers.PreTrainedConfig._attn_implementation`. Written through the public
    `PreTrainedModel.set_attn_implementation`, but there is no public getter. Checked: transformers 5.17, 5.24."""
    return getattr(config, "_attn_implementation", None)


def attention_softcap(config) -> float | None:
    """The attention logit softcap a config asks for (Gemma-2's `attn_logit_softcapping`), or None.
    HF's sdpa attention ignores it; its eager attention applies it."""
    return getattr(config.get_text_config(), "attn_logit_softcapping", None) or None


def attention_implementations(model: torch.nn.Module) -> dict[str, str | None]:
    """Each config's attention implementation, keyed as `PreTrainedModel.set_attn_implementation` takes
    a dict: "" for the model's own config, then each key of its `sub_configs` that is set (text_config,
    vision_config, decoder, ...). Reads `transformers.PreTrainedConfig._attn_implementation` (see
    `attention_implementation`). Checked: transformers 5.17, 5.24."""
    config = model.config
    found = {"": attention_implementation(config)}
    for key in getattr(config, "sub_configs", {}) or {}:
        sub = getattr(config, key, None)
        if sub is not None and not isinstance(sub, dict):
            found[key] = attention_implementation(sub)
    return found


# What `transformers.cache_utils.StaticLayer.lazy_initialization` sets besides keys/values (5.17 also
# sets `dtype`): a view carries the same, so every method reads what it would on the layer itself.
_LAYER_GEOMETRY = ("dtype", "device", "num_heads", "k_head_dim", "v_head_dim")


def static_layer_view(
    layer: StaticLayer, batch: int, context: int, kind: type[StaticLayer] = StaticLayer, first_row: int = 0
):
    """A `kind` (a StaticLayer class) over rows [first_row:first_row + batch] and slots [:context] of an
    allocated layer's K/V,
    sharing its write position tensor. Built with the public constructor `StaticLayer(max_cache_len=...)`;
    StaticLayer has no public method that adopts existing tensors (`lazy_initialization` allocates new
    ones), so the attributes `transformers.cache_utils.StaticLayer.lazy_initialization` sets are set here:
    keys, values, cumulative_length, batch_size, is_initialized and the geometry above.
    Checked: transformers 5.17, 5.24."""
    view = kind(max_cache_len=context)
    for name in _LAYER_GEOMETRY:
        if hasattr(layer, name):
            setattr(view, name, getattr(layer, name))
    rows = slice(first_row, first_row + batch)
    view.keys = layer.keys[rows, :, :context]
    view.values = layer.values[rows, :, :context]
    view.cumulative_length = layer.cumulative_length
    view.batch_size = batch
    view.is_initialized = True
    return view


def writes_like_static_layer(layer) -> bool:
    """Whether `layer.update` is `transformers.cache_utils.StaticLayer.update` itself (a sliding-window or
    other layer writes its own way). Checked: transformers 5.17, 5.24."""
    return isinstance(layer, StaticLayer) and type(layer).update is StaticLayer.update


def static_layer_position(layer: StaticLayer) -> torch.Tensor:
    """The device tensor holding the layer's next write slot: `StaticLayer.cumulative_length` (set by its
    constructor, moved to the device by `lazy_initialization`). Checked: transformers 5.17, 5.24."""
    return layer.cumulative_length


def static_layer_tensors(layer: StaticLayer) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(keys, values, next write slot) of an allocated static layer: `StaticLayer.keys`, `.values` [b, H,
    slots, d] and `.cumulative_length`, which `lazy_initialization` sets, for a kernel that writes the
    step's K/V itself (the q/k/v projection's epilogue, skinny_matmul.norm_qkv_rope_write): the tensors
    `static_layer_write` writes and returns. Checked: transformers 5.17, 5.24."""
    return layer.keys, layer.values, static_layer_position(layer)


def static_layer_write(layer: StaticLayer, keys: torch.Tensor, values: torch.Tensor):
    """`transformers.cache_utils.StaticLayer.update` for one new token per row, without its
    `cumulative_length.add_(1)`: K/V written at slot `cumulative_length`, (keys, values) returned. The
    caller advances the position later (the fused step advances every layer's in one kernel, not one
    each). Reads the attributes `lazy_initialization` sets (keys, values, cumulative_length).
    Checked: transformers 5.17, 5.24."""
    slot = static_layer_position(layer).reshape(1)
    layer.keys.index_copy_(2, slot, keys)
    layer.values.index_copy_(2, slot, values)
    return layer.keys, layer.values


# The int attributes by which HF's attention modules name their slot in the cache: `layer_idx` (e.g.
# transformers.models.llama.modeling_llama.LlamaAttention.layer_idx), `layer_id` (GPT-Neo's attention).
CACHE_INDEX_ATTRIBUTES = ("layer_idx", "layer_id")


def cache_indices(layer: torch.nn.Module) -> list[tuple[torch.nn.Module, str, int]]:
    """(module, attribute, index) for each submodule of a decoder layer that names its cache slot with an
    int attribute: `LlamaAttention.layer_idx` and the like (`GPTNeoSelfAttention.layer_id`), which the
    modeling code passes to `Cache.update(..., layer_idx)`. Not an API, a convention of the modeling files.
    Checked: transformers 5.17, 5.24."""
    return [
        (module, name, getattr(module, name))
        for module in layer.modules()
        for name in CACHE_INDEX_ATTRIBUTES
        if isinstance(getattr(module, name, None), int)
    ]


@contextlib.contextmanager
def cache_indices_set_to_zero(layer: torch.nn.Module) -> Iterator[None]:
    """Every cache index of the layer (see `cache_indices`) reads 0 while the context is open, its own
    value after: the layer then addresses slot 0 of whatever cache it is handed. Rewrites
    `LlamaAttention.layer_idx` and the like on the instances; transformers offers no way to pass the
    slot in. Checked: transformers 5.17, 5.24."""
    indexed = cache_indices(layer)
    for module, name, _ in indexed:
        setattr(module, name, 0)
    try:
        yield
    finally:
        for module, name, index in indexed:
            setattr(module, name, index)


def causal_lm_class_names() -> dict[str, str]:
    """model_type -> class name of every causal-LM head transformers knows:
    `transformers.models.auto.modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`. The public
    `transformers.MODEL_FOR_CAUSAL_LM_MAPPING` is keyed by config classes and imports each one to list
    them. Checked: transformers 5.17, 5.24."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return MODEL_FOR_CAUSAL_LM_MAPPING_NAMES


def modeling_module_defines(model: torch.nn.Module, name: str) -> bool:
    """Whether the modeling file of the model's class defines `name` at module level, e.g.
    `transformers.models.bloom.modeling_bloom.build_alibi_tensor`: a convention of the modeling files,
    not an API, for features no config flag announces. Checked: transformers 5.17, 5.24."""
    import sys

    return hasattr(sys.modules.get(type(model).__module__), name)


def rotary_embedding_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's rotary embedding modules whose cos/sin depend on the position alone: HF's convention of
    a `rotary_emb` module with an `inv_freq` buffer, a `rope_type` and `forward(x, position_ids)`
    (e.g. `transformers.models.llama.modeling_llama.LlamaRotaryEmbedding`), leaving out the rope types that
    `transformers.modeling_rope_utils.dynamic_rope_update` recomputes from the call's sequence length
    ("dynamic", "longrope") and modules taking more arguments (a layer type). No public API lists them.
    Checked: transformers 5.17, 5.24."""
    import inspect

    found = []
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] != "rotary_emb" or not isinstance(getattr(module, "inv_freq", None), torch.Tensor):
            continue
        if list(inspect.signature(module.forward).parameters) != ["x", "position_ids"]:
            continue
        rope_type = str(getattr(module, "rope_type", "default"))
        if "dynamic" in rope_type or "longrope" in rope_type:
            continue
        found.append(module)
    return found


def final_norm_module(model: torch.nn.Module) -> torch.nn.Module | None:
    """The norm after the last decoder layer: the `norm` attribute of the decoder that the public
    `PreTrainedModel.get_decoder()` returns (e.g. `transformers.models.llama.modeling_llama.LlamaModel.norm`),
    a modeling-file convention rather than an API (GPT-2 calls it `ln_f`: None there).
    Checked: transformers 5.17, 5.24."""
    get_decoder = getattr(model, "get_decoder", None)
    decoder = get_decoder() if callable(get_decoder) else None
    norm = getattr(decoder, "norm", None)
    return norm if isinstance(norm, torch.nn.Module) else None


def causal_mask_modules(model: torch.nn.Module) -> list:
    """The modeling modules of the model's classes (e.g. `transformers.models.llama.modeling_llama`) whose
    module-level name `create_causal_mask` is `transformers.masking_utils.create_causal_mask` itself: the
    modeling files import it by name and call it through that global at every forward, so a stand-in goes
    there. A modeling-file convention, not an API (no public hook builds the mask).
    Checked: transformers 5.24 and 5.17 (the H200's, 2026-12-02: the stand-in built every decode step's mask)."""
    import sys

    names = {type(module).__module__ for module in model.modules()}
    found = [sys.modules.get(name) for name in sorted(names)]
    return [m for m in found if getattr(m, "create_causal_mask", None) is hf_create_causal_mask()]


def hf_create_causal_mask():
    """`transformers.masking_utils.create_causal_mask`, HF's own (what a stand-in falls back to).
    Checked: transformers 5.24 and 5.17 (the H200's, 2026-12-02: the stand-in built every decode step's mask)."""
    from transformers import masking_utils

    return masking_utils.create_causal_mask


@contextlib.contextmanager
def causal_mask_replaced(model: torch.nn.Module, stand_in) -> Iterator[None]:
    """Every modeling module of `causal_mask_modules(model)` calls `stand_in` as `create_causal_mask` while
    the context is open, HF's function again after.
    Checked: transformers 5.24 and 5.17 (the H200's, 2026-12-02: the stand-in built every decode step's mask)."""
    modules = causal_mask_modules(model)
    originals = [m.create_causal_mask for m in modules]
    for module in modules:
        module.create_causal_mask = stand_in
    try:
        yield
    finally:
        for module, original in zip(modules, originals):
            module.create_causal_mask = original


# `transformers.masking_utils.create_causal_mask`'s arguments as the modeling files pass them (the cache
# named `cache` in 5.24, which still takes the older `past_key_values`), and its optional ones at the
# values that leave the plain causal mask. Any other argument sends the call to HF's own function.
# Checked: transformers 5.24 and 5.17 (the H200's, 2026-12-02: the stand-in built every decode step's mask).
CAUSAL_MASK_ARGUMENTS = frozenset(
    {"config", "inputs_embeds", "attention_mask", "cache", "past_key_values", "position_ids"}
)
CAUSAL_MASK_PLAIN_DEFAULTS = {
    "or_mask_function": None,
    "and_mask_function": None,
    "block_sequence_ids": None,
    "layer_idx": None,
    "allow_is_causal_skip": True,
}


def sdpa_mask_builder(implementation: str | None) -> bool:
    """Whether `create_causal_mask` builds the mask of attention `implementation` with
    `transformers.masking_utils.sdpa_mask` (sdpa, or a name registered with it, like our grouped
    attention): its entry in `transformers.masking_utils.ALL_MASK_ATTENTION_FUNCTIONS`, which HF reads by
    the config's `_attn_implementation`.
    Checked: transformers 5.24 and 5.17 (the H200's, 2026-12-02: the stand-in built every decode step's mask)."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    return implementation in ALL_MASK_ATTENTION_FUNCTIONS and ALL_MASK_ATTENTION_FUNCTIONS[implementation] is sdpa_mask


def static_decode_mask_sizes(cache) -> tuple[torch.Tensor, int] | None:
    """(query position, kv_length) as `create_causal_mask` sizes the mask of one new token over a cache
    whose layers are all static (so its first full-attention layer is layer 0): the query offset from
    `Cache.get_query_offset(0)` (5.24) -> the layer's
    `cumulative_length` tensor, and `Cache.get_mask_sizes(1, 0)` -> (kv_length, kv_offset 0), as
    `transformers.masking_utils._preprocess_mask_arguments` reads them. None where anything differs:
    another cache or layer kind, a subclass that offsets the query (MTP caches), an int position (not
    allocated), a kv offset.
    Checked: transformers 5.24 and 5.17 (the H200's, 2026-12-02: the stand-in built every decode step's mask)."""
    from transformers.cache_utils import Cache

    if (
        type(cache) is not Cache
        or not cache.layers
        or not all(isinstance(layer, StaticLayer) for layer in cache.layers)
    ):
        return None
    position = cache.get_seq_length(0)
    kv_length, kv_offset = cache.get_mask_sizes(1, 0)
    if not isinstance(position, torch.Tensor) or position.numel() != 1 or kv_offset != 0:
        return None
    return position, int(kv_length)
