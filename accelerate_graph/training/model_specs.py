"""The models this package trains: architecture, corpus size, tokenizer and training budget of each.

`tiny` is committed under tests/assets (CPU, a fixed number of steps, so one command gives one loss curve);
the others are trained on a GPU for a time budget (benchmarks/gpu.sh, suite `trained`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from accelerate_graph.common.errors import BadOptionError

MB = 1_000_000


@dataclass(frozen=True)
class ModelSpec:
    name: str
    model_type: str
    config: dict  # transformers config fields beyond vocab size and special token ids
    description: str
    vocab_size: int
    corpus_bytes: int
    include_tests: bool  # the standard library's test packages too (more text for the larger models)
    context: int  # training and evaluation window, tokens
    batch: int  # windows per step
    lr: float
    budget_s: float  # training time; with `steps` a cap only, without it the schedule runs over this time
    steps: int | None = None
    device: str = "cuda"
    attn: str = "sdpa"
    save_dtype: str = "float32"
    chat: bool = True
    eval_tokens: int = 262_144  # held-out tokens evaluated (at most)
    warmup_steps: int = 50
    weight_decay: float = 0.1
    seed: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)


SPECS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="tiny",
            model_type="llama",
            description="Llama, GQA 4/2, 4 layers, hidden 128, tied embeddings (~1.3M params); CPU, committed",
            config=dict(
                hidden_size=128,
                intermediate_size=352,
                num_hidden_layers=4,
                num_attention_heads=4,
                num_key_value_heads=2,
                max_position_embeddings=512,
                rope_theta=10000.0,
                rms_norm_eps=1e-5,
                tie_word_embeddings=True,
            ),
            vocab_size=4096,
            corpus_bytes=2 * MB,
            include_tests=False,
            context=128,
            batch=16,
            lr=3e-3,
            steps=300,
            budget_s=1800.0,  # a cap only: the run is its 300 steps (about 2.5 minutes on one idle core)
            device="cpu",
            save_dtype="bfloat16",  # half the bytes of float32: the committed folder stays under 3 MB
            eval_tokens=32_768,
            warmup_steps=20,
        ),
        ModelSpec(
            name="llama-gqa-100m",
            model_type="llama",
            description="Llama, GQA 12/4, 12 layers, hidden 768, vocab 16,384 (~100M params)",
            config=dict(
                hidden_size=768,
                intermediate_size=2048,
                num_hidden_layers=12,
                num_attention_heads=12,
                num_key_value_heads=4,
                max_position_embeddings=2048,
                rope_theta=10000.0,
                rms_norm_eps=1e-5,
                tie_word_embeddings=False,
            ),
            vocab_size=16384,
            corpus_bytes=24 * MB,
            include_tests=True,
            context=512,
            batch=64,
            lr=1e-3,
            budget_s=90.0,
            save_dtype="bfloat16",
        ),
        ModelSpec(
            name="qwen2-moe-small",
            model_type="qwen2_moe",
            description="Qwen2-MoE, 8 experts top-2 + shared expert, 8 layers, hidden 512, GQA 8/2 (~77M params)",
            config=dict(
                hidden_size=512,
                intermediate_size=1408,
                moe_intermediate_size=512,
                shared_expert_intermediate_size=1024,
                num_experts=8,
                num_experts_per_tok=2,
                decoder_sparse_step=1,
                norm_topk_prob=False,
                num_hidden_layers=8,
                num_attention_heads=8,
                num_key_value_heads=2,
                max_position_embeddings=2048,
                rope_theta=10000.0,
                rms_norm_eps=1e-6,
                tie_word_embeddings=True,
                output_router_logits=False,
            ),
            vocab_size=16384,
            corpus_bytes=24 * MB,
            include_tests=True,
            context=512,
            batch=64,
            lr=1e-3,
            budget_s=60.0,
            save_dtype="bfloat16",
        ),
        ModelSpec(
            name="gemma2-sliding",
            model_type="gemma2",
            description="Gemma-2, window 128 every other layer, softcapping 50/30, 8 layers, hidden 512 (~40M params)",
            config=dict(
                hidden_size=512,
                intermediate_size=2048,
                num_hidden_layers=8,
                num_attention_heads=8,
                num_key_value_heads=4,
                head_dim=64,
                query_pre_attn_scalar=64,
                max_position_embeddings=2048,
                sliding_window=128,  # smaller than the 512-token context the loss is measured at
                attn_logit_softcapping=50.0,
                final_logit_softcapping=30.0,
                rope_theta=10000.0,
                rms_norm_eps=1e-6,
                hidden_activation="gelu_pytorch_tanh",
                tie_word_embeddings=True,
            ),
            vocab_size=16384,
            corpus_bytes=24 * MB,
            include_tests=True,
            context=512,
            batch=64,
            lr=1e-3,
            budget_s=60.0,
            attn="eager",  # sdpa has no attention softcapping: eager computes the model as configured
            save_dtype="bfloat16",
        ),
    )
}


def find_spec(name: str) -> ModelSpec:
    if name not in SPECS:
        raise BadOptionError(f"no trainable model named {name!r}.", f"Choose one of: {', '.join(SPECS)}.")
    return SPECS[name]
