"""Which causal-LM types the zoo runs (decoder-only ones), and what each tiny model has that matters for graphs."""

from __future__ import annotations

import functools
import inspect
import re
from typing import Any

import torch
import transformers
from transformers import AutoConfig, PreTrainedConfig

from accelerate_graph.common.errors import UnsupportedModelError
from accelerate_graph.compat.transformers_internals import causal_lm_class_names, modeling_module_defines
from accelerate_graph.models.loading import ENCODER_FAMILIES, check_causal_lm
from accelerate_graph.zoo.configs import HEAD_DIM, quiet


def all_causal_lm_types() -> list[str]:
    """Every model type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, sorted."""
    return sorted(causal_lm_class_names())


def _reads_is_decoder(model_type: str) -> bool:
    """An encoder's causal-LM head warns or asserts unless `is_decoder` is set; a decoder sets it itself."""
    cls = getattr(transformers, causal_lm_class_names()[model_type], None)
    if cls is None:
        return False
    source = inspect.getsource(cls.__init__)
    return "is_decoder" in source and "config.is_decoder = True" not in source


def skip_reason(model_type: str) -> str | None:
    """Why a causal-LM type is not decoder-only (None when it is)."""
    if model_type in ENCODER_FAMILIES:
        return "not decoder-only: an encoder whose causal-LM head needs is_decoder"
    try:
        config = AutoConfig.for_model(model_type)
        check_causal_lm(config, model_type)
    except UnsupportedModelError as err:
        return f"not decoder-only: {err.message.removeprefix(model_type + ' ')}"
    except Exception:  # noqa: BLE001 - config classes raise many types; the run reports it with its error
        return None
    if not getattr(config, "is_decoder", True) and _reads_is_decoder(model_type):
        return "not decoder-only: an encoder whose causal-LM head needs is_decoder"
    return None


@functools.cache
def _skipped() -> tuple[tuple[str, str], ...]:
    with quiet():
        reasons = {t: skip_reason(t) for t in all_causal_lm_types()}
    return tuple((t, reason) for t, reason in reasons.items() if reason)


def skipped_model_types() -> dict[str, str]:
    """Causal-LM types that are not decoder-only, with the reason (built ~200 default configs: cached)."""
    return dict(_skipped())


def zoo_model_types() -> list[str]:
    """Every decoder-only model type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, sorted."""
    skipped = skipped_model_types()
    return [t for t in all_causal_lm_types() if t not in skipped]


def _flag(config: PreTrainedConfig, name: str) -> Any:
    """A boolean knob on the config or one of its sub-configs (mpt keeps `alibi` in attn_config)."""
    if name in config.to_dict():
        return getattr(config, name, None)
    for key in getattr(config, "sub_configs", {}):
        sub = getattr(config, key, None)
        if isinstance(sub, PreTrainedConfig) and (found := _flag(sub, name)) is not None:
            return found
    return None


def _partial_rotary(text: PreTrainedConfig) -> bool:
    values = text.to_dict()
    rope = values.get("rope_parameters") or {}
    per_kind = [p for p in rope.values() if isinstance(p, dict)] or [rope]  # rope per layer kind, or one
    factor = min((p.get("partial_rotary_factor") or 1.0) for p in per_kind)
    factor = min(factor, values.get("partial_rotary_factor") or 1.0)
    rotary_dim = values.get("rotary_dim")
    return factor < 1.0 or (rotary_dim is not None and rotary_dim < (values.get("head_dim") or HEAD_DIM))


def _sliding(text: PreTrainedConfig) -> bool:
    values = text.to_dict()
    if not values.get("sliding_window") or values.get("use_sliding_window") is False:
        return False
    layer_types = values.get("layer_types")
    return not layer_types or any("sliding" in str(kind) for kind in layer_types)


def model_features(model: torch.nn.Module) -> list[str]:
    """What makes this tiny model interesting for graphs, read from its config and modules."""
    config = model.config
    text = config.get_text_config(decoder=True)
    values = text.to_dict()
    heads, kv_heads = values.get("num_attention_heads"), values.get("num_key_value_heads")
    out, emb = model.get_output_embeddings(), model.get_input_embeddings()
    alibi = _flag(config, "alibi")
    if alibi is None:  # bloom has no switch: ALiBi is all it does
        alibi = modeling_module_defines(model, "build_alibi_tensor")
    found = {
        "moe": any(re.search(r"moe|expert", type(m).__name__, re.I) for m in model.modules()),
        "sliding-window": _sliding(text),
        "gqa": isinstance(kv_heads, int) and isinstance(heads, int) and kv_heads < heads,
        "tied": out is not None and emb is not None and out.weight is emb.weight,
        "partial-rotary": _partial_rotary(text),
        "alibi": bool(alibi),
    }
    return [name for name, present in found.items() if present]
