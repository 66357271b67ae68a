"""MODEL's decoder-layer shapes as the fused step's skinny kernels see them: read from its config and a model
built on the meta device (no weights loaded, nothing downloaded but the config)."""

from __future__ import annotations

import dataclasses

import torch

from accelerate_graph.common.errors import ModelNotFoundError, UnsupportedModelError, first_line

ORDER = ("gate_up", "down", "qkv", "o")  # the largest first: the others are tuned around it


@dataclasses.dataclass(frozen=True)
class LayerShapes:
    """One decoder layer's four folded calls: op name (ORDER's) -> (kernel op, output sizes as the table keys
    them, K); which of q/k/v, o and down carry a bias; the RMSNorm's epsilon. `parts`: the output sizes of the
    projections merged into q/k/v (q, k, v) and gate/up (gate, up), which FP8 block scales may keep apart.
    `fp8_block`: the scale block of an FP8 checkpoint (its layers are FP8 whatever is asked), else None."""

    model: str
    hidden: int
    calls: dict[str, tuple[str, tuple[int, ...], int]]
    biases: frozenset[str]
    eps: float
    parts: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    fp8_block: int | None = None

    @property
    def layer_bytes(self) -> int:
        """Bytes of one layer's projection weights in bf16 (gate/up: two weights of the keyed N)."""
        count = {"gate_up": 2}
        return sum(2 * count.get(name, 1) * sum(ns) * k for name, (_, ns, k) in self.calls.items())


def _config(reference: str, revision: str | None):
    from transformers import AutoConfig

    from accelerate_graph.models.limits import peek_config
    from accelerate_graph.models.loading import check_causal_lm

    config = peek_config(reference, revision)
    if config is None:  # a hub id not in the local cache: its config alone is fetched
        try:
            config = AutoConfig.from_pretrained(reference, **({"revision": revision} if revision else {}))
        except (OSError, ValueError) as err:
            raise ModelNotFoundError(
                f"model {reference!r} is neither a recipe, a folder nor a hub id with a config: {first_line(err)}",
                "Run `cugraph-accel recipes` for the recipe names.",
            ) from err
    check_causal_lm(config, reference)
    return config


def layer_shapes(reference: str, revision: str | None = None) -> LayerShapes:
    """The shapes of MODEL's decoder layers; refused in one line when its layers are not the kind the fused
    step runs on the skinny kernels (Llama-like: q/k/v/o, gate/up/down, RMSNorm, SiLU)."""
    from transformers import AutoModelForCausalLM

    from accelerate_graph.fused import layer_program
    from accelerate_graph.fused.layers import decoder_layers
    from accelerate_graph.quant.fp8_checkpoint import fp8_checkpoint, without_quantization

    config = _config(reference, revision)
    checkpoint = fp8_checkpoint(config, reference)
    if checkpoint is not None:  # its layers' shapes, built plain as the loader builds them (the config is ours)
        config = without_quantization(config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    layer = decoder_layers(model)[0]
    if not layer_program.program_for(layer):
        raise UnsupportedModelError(
            f"{reference}'s decoder layers ({type(layer).__name__}) do not run the fused step's skinny kernels: "
            "there is nothing to tune.",
            "Tune a Llama-like model (llama, qwen2, mistral without a sliding window).",
        )
    attention, mlp = layer.self_attn, layer.mlp
    calls = dict(zip(("qkv", "o", "gate_up", "down"), layer_program.folded_calls(layer)))
    biases = {"qkv": attention.q_proj.bias, "o": attention.o_proj.bias, "down": mlp.down_proj.bias}
    return LayerShapes(
        model=reference,
        hidden=attention.q_proj.in_features,
        calls={name: calls[name] for name in ORDER},
        biases=frozenset(name for name, bias in biases.items() if bias is not None),
        eps=float(layer.input_layernorm.variance_epsilon),
        parts={
            "qkv": tuple(p.out_features for p in (attention.q_proj, attention.k_proj, attention.v_proj)),
            "gate_up": (mlp.gate_proj.out_features, mlp.up_proj.out_features),
        },
        fp8_block=checkpoint.block if checkpoint is not None else None,
    )
