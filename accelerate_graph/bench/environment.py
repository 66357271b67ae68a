"""What a benchmark's numbers depend on: versions, the device, and its SM clock at start and end."""

from __future__ import annotations

import subprocess

import torch

from accelerate_graph.common.environment import environment_info
from accelerate_graph.fused.kernels.configs import table_in_use
from accelerate_graph.quant import fp8_skinny

UNKNOWN = "unknown"


def _nvidia_smi_clock(device: torch.device) -> str:
    index = device.index if device.index is not None else torch.cuda.current_device()
    command = ["nvidia-smi", "-i", str(index), "--query-gpu=clocks.sm", "--format=csv,noheader,nounits"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=10, check=True)
    return done.stdout.strip().splitlines()[0].strip()


def sm_clock_mhz(device: torch.device) -> int | str:
    """The SM clock now, in MHz, or "unknown": asked of NVML through torch, then of nvidia-smi.
    A missing tool must never fail a benchmark, so every failure is swallowed here."""
    if device.type != "cuda":
        return UNKNOWN
    try:
        return int(torch.cuda.clock_rate(device))
    except Exception:  # noqa: BLE001 - pynvml missing, NVML errors, ...
        pass
    try:
        return int(_nvidia_smi_clock(device))
    except Exception:  # noqa: BLE001 - no nvidia-smi, odd output, timeout, ...
        return UNKNOWN


def bench_environment(device: torch.device) -> dict:
    """Versions and device at the start of a run; `sm_clock_mhz_end` is filled in at the end."""
    info = environment_info(device)
    info["device"] = str(device)
    if device.type == "cuda":
        info["gpu_memory_bytes"] = torch.cuda.get_device_properties(device).total_memory
        info["tuning_table"] = table_in_use(torch.cuda.get_device_name(device)).as_dict()
        info["fp8_tuning_table"] = fp8_skinny.table_in_use(torch.cuda.get_device_name(device)).as_dict()
    info["sm_clock_mhz_start"] = sm_clock_mhz(device)
    info["sm_clock_mhz_end"] = UNKNOWN
    return info


def note_table_coverage(info: dict, device: torch.device, model: str, revision, buckets, weights: str) -> None:
    """Into the serving table's entry of `info` (bench_environment's, on CUDA), how many of MODEL's layer products
    at `buckets` it holds (tune/coverage.py); nothing where the layers do not run the skinny kernels."""
    from accelerate_graph.tune.coverage import table_coverage

    if device.type != "cuda":
        return
    try:
        found = table_coverage(model, revision, buckets, torch.cuda.get_device_name(device), weights)
    except Exception:  # noqa: BLE001 - an odd config's meta build: a header note must never fail a benchmark
        return
    if found is not None and found.table in info:
        info[found.table]["covers"] = found.as_dict()
