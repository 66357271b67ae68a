"""Tiny models built from configs, saved with save_pretrained, loaded through the real path."""

from __future__ import annotations

import torch
import transformers
from packaging.version import Version
from transformers import AutoConfig, AutoModelForCausalLM

# Falcon's attention (new decoder architecture) picked K and V with index lists (`qkv[..., [-2]]`: a tensor made
# from host data in every step, a graph hazard) up to transformers 5.24; 5.25 takes them with views instead.
FALCON_INDEXES_WITH_LISTS = Version(transformers.__version__) < Version("5.25")

# A 2-layer decoder with GQA (4 query heads, 2 KV heads): the shape every tiny test model shares.
SMALL_DECODER = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=256,
)
TINY_CONFIGS = {
    "llama": dict(**SMALL_DECODER, max_position_embeddings=512),
    "qwen2": dict(**SMALL_DECODER, max_position_embeddings=512),
    "gpt2": dict(n_embd=64, n_layer=2, n_head=4, vocab_size=256, n_positions=512, bos_token_id=0, eos_token_id=0),
    "mpt": dict(**SMALL_DECODER),  # eager attention only (no sdpa): saved, not tiny_decoder's
}


def tiny_decoder(model_type: str, **overrides) -> torch.nn.Module:
    """A tiny random model of `model_type` in SMALL_DECODER's shape (with `overrides`), sdpa attention."""
    torch.manual_seed(0)
    config = AutoConfig.for_model(model_type, **{**SMALL_DECODER, **overrides})
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()


def save_tiny_model(model_type: str, folder) -> str:
    torch.manual_seed(0)
    config = AutoConfig.for_model(model_type, **TINY_CONFIGS[model_type])
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return str(folder)


def grouped_decode_cases(model_type: str, cases=((2, 32), (1, 64))):
    """(model, session, prompt, cases, logits): a tiny `model_type` with grouped attention, a decode session
    of 2 rows x 64 slots, a 6-token prompt, and HF's own logits of one decode step at each (batch, context)
    of `cases`: what the fused layers are compared with."""
    from accelerate_graph.core.decode_session import DecodeSession
    from accelerate_graph.fused.grouped_attention import use_grouped_attention

    model = tiny_decoder(model_type)
    use_grouped_attention(model)
    session = DecodeSession(model, 2, 64)
    prompt = torch.randint(0, 100, (2, 6))
    return model, session, prompt, list(cases), session.first_steps(prompt, list(cases))


def every_op_up_to(text, rows: int) -> dict[tuple[str, int, int], int]:
    """SKINNY_WINS_ABOVE_BATCH_1 entries putting a tiny model's four folded calls (merged) up to `rows`."""
    hidden, inter = text.hidden_size, text.intermediate_size
    qkv = (text.num_attention_heads + 2 * text.num_key_value_heads) * (hidden // text.num_attention_heads)
    calls = [("proj", qkv, hidden), ("residual", hidden, hidden), ("gate_up", inter, hidden)]
    return {call: rows for call in calls + [("residual", hidden, inter)]}


def zoo_model(model_type: str, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """The zoo's tiny `model_type` on the CPU, built as the zoo builds it; skips where transformers lacks it."""
    import pytest
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from accelerate_graph.zoo.configs import quiet, tiny_config
    from accelerate_graph.zoo.run import build_model

    if model_type not in CONFIG_MAPPING:
        pytest.skip(f"this transformers has no {model_type}")
    with quiet():
        return build_model(tiny_config(model_type), torch.device("cpu"), dtype)
