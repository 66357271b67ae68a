"""Versions and hardware that results depend on: recorded in plans and benchmark output."""

from __future__ import annotations

import platform

import torch
import transformers

from accelerate_graph import __version__


def environment_info(device: torch.device) -> dict:
    info = {
        "cugraph_accel": __version__,
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "transformers": str(transformers.__version__),
        "cuda": torch.version.cuda or "none",
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else "none",
    }
    return info


def major_minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])
