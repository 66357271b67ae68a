"""A Hugging Face fine-grained FP8 checkpoint made offline, as Qwen3-FP8 and DeepSeek publish theirs: a model
saved in bf16, its decoder's Linear weights replaced by float8_e4m3fn `weight` and float32 `weight_scale_inv`
per 128 x 128 block, and the config's quantization_config saying so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

from accelerate_graph.quant.fp8_format import quantize

QUANTIZATION_CONFIG = {
    "quant_method": "fp8",
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "weight_block_size": [128, 128],
    "modules_to_not_convert": ["lm_head"],
}


def write_fp8_checkpoint(source: str, folder: Path, config: dict | None = None) -> Path:
    """`source` (a model folder) saved in `folder` as an FP8 checkpoint; its tokenizer files copied along."""
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.bfloat16)
    model.save_pretrained(folder)
    for extra in Path(source).glob("tokenizer*"):
        shutil.copy(extra, folder / extra.name)
    weights = folder / "model.safetensors"
    with safe_open(str(weights), framework="pt") as stored:
        tensors = {key: stored.get_tensor(key) for key in stored.keys()}  # noqa: SIM118 - not a dict
    for name, module in model.named_modules():
        if type(module) is torch.nn.Linear and name != "lm_head":
            tensors[f"{name}.weight"], tensors[f"{name}.weight_scale_inv"] = quantize(module.weight, 128)
    save_file(tensors, str(weights), metadata={"format": "pt"})
    path = folder / "config.json"
    saved = json.loads(path.read_text())
    saved["quantization_config"] = config or QUANTIZATION_CONFIG
    path.write_text(json.dumps(saved, indent=2))
    return folder
