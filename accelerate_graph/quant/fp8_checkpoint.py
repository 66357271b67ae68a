"""Hugging Face fine-grained FP8 checkpoints (Qwen3-FP8, DeepSeek's; transformers' FineGrainedFP8Config):
`quantization_config: {"quant_method": "fp8", "weight_block_size": [128, 128], ...}` in config.json, and per
quantized Linear a `weight` in float8_e4m3fn and a float32 `weight_scale_inv` [ceil(N/128), ceil(K/128)].

transformers' own path needs `accelerate`, dequantizes to bf16 on a machine without a GPU, and builds its own
FP8Linear; so we load such a folder as a plain model (the config without its quantization_config: the FP8
values are cast into ordinary Linear weights, and the scales are left unread) and then replace each quantized
Linear with an Fp8Linear of the checkpoint's own tensors, read with safetensors. The same on every
transformers version, with or without a GPU.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open

from accelerate_graph.common.errors import ModelFileError, UnsupportedModelError, option
from accelerate_graph.quant.fp8_format import E4M3
from accelerate_graph.quant.fp8_linear import Fp8Linear

SCALE_SUFFIX = ".weight_scale_inv"
BF16_INSTEAD = f"Use the model's bf16 checkpoint, with {option('weights', 'fp8-block')} to quantize it here."
INDEX = "model.safetensors.index.json"


@dataclass(frozen=True)
class Fp8Checkpoint:
    block: int  # the side of a square scale block


def _as_dict(value) -> dict | None:
    if value is None:
        return None
    if isinstance(value, dict):
        return value
    return value.to_dict() if hasattr(value, "to_dict") else None


def fp8_checkpoint(config, source: str) -> Fp8Checkpoint | None:
    """The FP8 format `config` declares, or None for a model that is no fine-grained FP8 checkpoint. A
    variant we do not run (static activation scales, non-square blocks, byte scales) is refused by name."""
    settings = _as_dict(getattr(config, "quantization_config", None))
    if not settings or settings.get("quant_method") != "fp8":
        return None
    block = settings.get("weight_block_size")
    problem = None
    if settings.get("activation_scheme", "dynamic") != "dynamic":
        problem = f"activation_scheme {settings.get('activation_scheme')!r} (static activation scales)"
    elif not (isinstance(block, list | tuple) and len(block) == 2 and block[0] == block[1] and int(block[0]) > 0):
        problem = f"weight_block_size {block!r} (square blocks, e.g. [128, 128], are supported)"
    elif settings.get("scale_fmt", "float") != "float":
        problem = f"scale_fmt {settings.get('scale_fmt')!r} (float32 scales are supported)"
    elif settings.get("modules_to_convert"):
        problem = "FP8 embeddings (modules_to_convert)"
    if problem:
        raise UnsupportedModelError(
            f"{source} is an FP8 checkpoint with {problem}, which cugraph-accel does not run.",
            BF16_INSTEAD,
        )
    return Fp8Checkpoint(int(block[0]))


def without_quantization(config):
    """`config` with no quantization_config: transformers then loads the folder as a plain model."""
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    return config


@contextmanager
def quiet_load_report() -> Iterator[None]:
    """transformers' load report, which would list every weight_scale_inv as unexpected (they are read
    after, by install_fp8_layers), kept to errors for the load."""
    from transformers.utils import logging

    saved = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(saved)


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files of a model folder: those its sharded index names, else every one."""
    index = folder / INDEX
    if index.is_file():
        names = json.loads(index.read_text(encoding="utf-8")).get("weight_map", {}).values()
        return [folder / name for name in sorted(set(names))]
    return sorted(folder.glob("*.safetensors"))


def install_fp8_layers(model: torch.nn.Module, folder: Path, checkpoint: Fp8Checkpoint) -> int:
    """Replace each Linear of `model` that the checkpoint in `folder` stores in FP8 (a `weight_scale_inv`
    beside its weight) with an Fp8Linear of the stored tensors, on the Linear's device; the number replaced."""
    replaced = 0
    for path in weight_files(folder):
        with safe_open(str(path), framework="pt") as tensors:
            for key in [k for k in tensors.keys() if k.endswith(SCALE_SUFFIX)]:  # noqa: SIM118 - not a dict
                name = key.removesuffix(SCALE_SUFFIX)
                weight_key = f"{name}.weight"
                if weight_key not in tensors.keys():  # noqa: SIM118
                    raise ModelFileError(f"{path.name} holds {key} but not {weight_key}.", "Download the model again.")
                _replace(model, name, tensors.get_tensor(weight_key), tensors.get_tensor(key), checkpoint, path)
                replaced += 1
    if not replaced:
        raise ModelFileError(
            f"{folder} declares an FP8 quantization_config but no weight_scale_inv tensor.",
            "Download the model again, or remove quantization_config from its config.json.",
        )
    return replaced


def _replace(model, name: str, weight: torch.Tensor, scale: torch.Tensor, checkpoint: Fp8Checkpoint, path: Path):
    try:
        linear = model.get_submodule(name)
    except AttributeError:
        linear = None
    if type(linear) is not torch.nn.Linear:
        raise UnsupportedModelError(
            f"{path.name} stores {name} in FP8, but the model has no Linear layer of that name (a layout "
            "transformers converts on load, such as fused experts, is not supported).",
            BF16_INSTEAD,
        )
    if weight.dtype != E4M3:
        raise ModelFileError(
            f"{path.name}: {name}.weight is {weight.dtype}, not float8_e4m3fn.", "Download the model again."
        )
    device = linear.weight.device
    try:
        layer = Fp8Linear(weight.to(device), scale.to(device, torch.float32), checkpoint.block, linear.bias)
    except ValueError as err:
        raise ModelFileError(f"{path.name}: {name}: {err}.", "Download the model again.") from None
    parent, _, attribute = name.rpartition(".")
    setattr(model.get_submodule(parent), attribute, layer)
