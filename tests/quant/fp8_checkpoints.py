"""A Hugging Face fine-grained FP8 checkpoint made offline from a model folder (accelerate_graph/quant/fp8_export.py),
as Qwen3-FP8 and DeepSeek publish theirs."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from accelerate_graph.quant.fp8_export import QUANTIZATION_CONFIG, write_fine_grained

__all__ = ["QUANTIZATION_CONFIG", "write_fp8_checkpoint"]


def write_fp8_checkpoint(source: str, folder: Path, config: dict | None = None) -> Path:
    """`source` (a model folder) saved in `folder` as an FP8 checkpoint; its tokenizer files copied along."""
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.bfloat16)
    return write_fine_grained(model, Path(folder), tokenizer_from=Path(source), config=config)
