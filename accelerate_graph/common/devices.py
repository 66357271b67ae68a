"""Parse --device and --dtype into torch objects, with the defaults of each device."""

from __future__ import annotations

import re

import torch

from accelerate_graph.common.errors import BadOptionError, DeviceError, option

DTYPES = {
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
    "half": torch.float16,
    "fp32": torch.float32,
    "float32": torch.float32,
    "float": torch.float32,
}
DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


def resolve_device(text: str = "auto") -> torch.device:
    """'auto' -> the first GPU when CUDA is available, else the CPU."""
    text = text.strip().lower()
    if text == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    match = re.fullmatch(r"cpu|cuda(?::([0-9]{1,3}))?", text, flags=re.ASCII)
    if not match:
        raise BadOptionError(f"{option('device', text)} is not a device.", "Use auto, cpu, cuda or cuda:N.")
    if text == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise DeviceError(
            f"{option('device', text)} was asked for, but this machine has no usable CUDA GPU.",
            "Use {device='cpu'} (graphs are then emulated) or run on a GPU machine.",
        )
    index = int(match.group(1) or 0)
    if index >= torch.cuda.device_count():
        raise DeviceError(f"{option('device', text)}: only {torch.cuda.device_count()} CUDA device(s) exist.")
    return torch.device("cuda", index)


def resolve_dtype(text: str, device: torch.device) -> torch.dtype:
    """'auto' -> bfloat16 on a GPU, float32 on the CPU."""
    text = text.strip().lower()
    if text == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if text not in DTYPES:
        raise BadOptionError(f"{option('dtype', text)} is not supported.", "Use auto, bf16, fp16 or fp32.")
    return DTYPES[text]


def dtype_name(dtype: torch.dtype) -> str:
    return DTYPE_NAMES.get(dtype, str(dtype).removeprefix("torch."))


def device_label(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return "cpu (no GPU: CUDA graphs are emulated, timings mean nothing)"
