"""The real-size recipes carry their public configs. Checked through AutoConfig and on the meta device
(shapes only, no memory): never built for real on the CPU, where they do not fit."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from accelerate_graph.models.limits import position_limit
from accelerate_graph.models.loading import recipe_config
from accelerate_graph.models.recipes import find_recipe

# Values from each model's public config.json; parameters as each model card states them.
PUBLIC = {
    "llama-3.1-8b": (
        dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
             num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072),
        8.03e9,
    ),
    "olmoe-1b-7b": (
        dict(hidden_size=2048, intermediate_size=1024, num_hidden_layers=16, num_attention_heads=16,
             num_experts=64, num_experts_per_tok=8, vocab_size=50304, max_position_embeddings=4096),
        6.92e9,
    ),
    "phi-3-mini-4k": (
        dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=32, num_attention_heads=32,
             num_key_value_heads=32, vocab_size=32064, max_position_embeddings=4096),
        3.82e9,
    ),
    "gemma-2-2b": (
        dict(hidden_size=2304, intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8,
             num_key_value_heads=4, head_dim=256, sliding_window=4096, attn_logit_softcapping=50.0,
             final_logit_softcapping=30.0, vocab_size=256000),
        2.61e9,
    ),
    "qwen3-30b-a3b": (
        dict(hidden_size=2048, moe_intermediate_size=768, num_hidden_layers=48, num_attention_heads=32,
             num_key_value_heads=4, num_experts=128, num_experts_per_tok=8, vocab_size=151936),
        30.5e9,
    ),
}  # fmt: skip
H200_BYTES = 141e9


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_recipe_has_the_public_config_and_parameter_count(name):
    values, parameters = PUBLIC[name]
    recipe = find_recipe(name)
    config = recipe_config(recipe)
    for key, value in values.items():
        assert getattr(config, key) == value, key
    assert recipe.defaults.max_cache_len <= position_limit(config)[0]
    with torch.device("meta"):  # shapes only: nothing is allocated
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    count = sum(p.numel() for p in model.parameters())
    assert abs(count - parameters) / parameters < 0.01, count
    assert count * 2 < 0.5 * H200_BYTES  # bf16 weights leave room for a cache on one H200


def test_the_set_covers_issue_13():
    configs = {name: recipe_config(find_recipe(name)) for name in PUBLIC}
    moe = [c for c in configs.values() if getattr(c, "num_experts", 0) >= 64 and c.num_experts_per_tok >= 4]
    assert moe
    assert any(c.num_attention_heads == c.num_key_value_heads and c.model_type == "phi3" for c in configs.values())
    assert any(
        getattr(c, "sliding_window", None) and getattr(c, "final_logit_softcapping", None) for c in configs.values()
    )
    assert max(PUBLIC[name][1] for name in PUBLIC) >= 30e9
