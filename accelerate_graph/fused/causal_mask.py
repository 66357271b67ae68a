"""The fused decode step's attention mask as one kernel instead of HF's ~11.

HF's `create_causal_mask` (transformers.masking_utils) builds the sdpa mask of a decode step from aranges,
adds, a fill, a comparison, two ands and an index, each a small kernel with a launch gap inside the graph
(H200 profile of Llama-3.2-1B at batch 1: ~11 of the ~17 eager kernels outside the decoder layers). For one
new token per row over a static cache the mask it returns is

    allowed[b, 0, 0, s] = (s <= position) & padding_mask[b, s].bool()     for s < kv_length

with `position` the cache's write slot (the query offset HF reads from the cache) and kv_length the cache
view's length; HF never skips it (returns None) there, since its cache is compileable and the query one
token. `CausalMaskStandIn` builds exactly that with one op (kernels/decode_mask.py) and calls HF's own
function for anything else: more than one query token, a sliding-window or chunked layer, an attention
whose mask is not sdpa's, arguments it does not know, a cache that is not all static layers.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from accelerate_graph.compat.transformers_internals import (
    CAUSAL_MASK_ARGUMENTS,
    CAUSAL_MASK_PLAIN_DEFAULTS,
    attention_implementation,
    sdpa_mask_builder,
    static_decode_mask_sizes,
)
from accelerate_graph.fused.kernels.decode_mask import decode_causal_mask


def _config_is_plain_causal(config) -> bool:
    """Full causal attention in every layer, its mask built by sdpa_mask."""
    layer_types = getattr(config, "layer_types", None) or ()
    return (
        getattr(config, "is_causal", True)
        and all(kind == "full_attention" for kind in layer_types)
        and sdpa_mask_builder(attention_implementation(config))
    )


def _arguments_are_known(args: tuple, kwargs: dict) -> bool:
    unknown = set(kwargs) - CAUSAL_MASK_ARGUMENTS - set(CAUSAL_MASK_PLAIN_DEFAULTS)
    at_defaults = all(kwargs.get(name, default) is default for name, default in CAUSAL_MASK_PLAIN_DEFAULTS.items())
    has_cache = ("cache" in kwargs) != ("past_key_values" in kwargs)
    return not args and not unknown and at_defaults and has_cache and "config" in kwargs and "inputs_embeds" in kwargs


def decode_mask_inputs(kwargs: dict) -> tuple[torch.Tensor, torch.Tensor, int] | None:
    """(padding mask [b, >= kv_length], query position, kv_length) where the call is a decode step the one
    kernel builds exactly; None otherwise."""
    embeds, padding = kwargs["inputs_embeds"], kwargs.get("attention_mask")
    if not _config_is_plain_causal(kwargs["config"]) or embeds.dim() != 3 or embeds.shape[1] != 1:
        return None
    if not isinstance(padding, torch.Tensor) or padding.dim() != 2 or padding.device != embeds.device:
        return None  # None (no padding), a prepared 4D mask, or one HF would move first
    sizes = static_decode_mask_sizes(kwargs.get("cache", kwargs.get("past_key_values")))
    if sizes is None:
        return None
    position, kv_length = sizes
    if padding.shape[0] != embeds.shape[0] or padding.shape[1] < kv_length or position.device != embeds.device:
        return None  # a shorter padding mask HF would pad with zeros: rare, left to HF
    return padding, position, kv_length


class CausalMaskStandIn:
    """`create_causal_mask` for the fused decode step: one op where it is exact, HF's function elsewhere.
    Counts its calls of each kind (`built`, `fell_back`) for the tests."""

    def __init__(self, hf_create_causal_mask: Callable):
        self.hf = hf_create_causal_mask
        self.built = 0
        self.fell_back = 0

    def __call__(self, *args, **kwargs):
        inputs = decode_mask_inputs(kwargs) if _arguments_are_known(args, kwargs) else None
        if inputs is None:
            self.fell_back += 1
            return self.hf(*args, **kwargs)
        self.built += 1
        padding, position, kv_length = inputs
        return decode_causal_mask(padding, position, kv_length)
