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
    them, K); which of q/k/v, o and down carry a bias; the RMSNorm's epsilon."""

    model: str
    hidden: int
    calls: dict[str, tuple[str, tuple[int, ...], int]]
    biases: frozenset[str]
    eps: float

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

    config = _config(reference, revision)
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
    )
