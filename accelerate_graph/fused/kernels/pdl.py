"""Programmatic dependent launch (PDL, Hopper and later) for the fused step's kernels: ours (the skinny
matmuls, the decode attention, the final norm) and inductor's (fused.layers asks inductor for it where
`active`). On by default (setting `pdl`): it shortens the replay of every measured model (docs/PERF.md).

A kernel launched with PDL may start while the kernel before it still runs: it does what does not depend
on that kernel (the skinny matmuls ask L2 for their first block of weights), then `gdc_wait()` until that
kernel is complete and its writes are visible, then `gdc_launch_dependents()` so that the next kernel may
start in turn (its programs wait for all of ours). A kernel launched without PDL after one of ours waits
for it as usual, and one of ours after a kernel that never calls launch_dependents simply starts when
that one ends. Inside a CUDA graph the launches keep their attribute (CUDA 12.3+).
"""

import torch

from accelerate_graph import settings

FROM_CAPABILITY = (9, 0)  # PDL is a Hopper feature

try:  # triton >= 3.4
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    HAS_GDC = True
except ImportError:
    gdc_wait = gdc_launch_dependents = None
    HAS_GDC = False


# device index -> whether it takes PDL. A plain dict, not functools.cache: dynamo traces the lookup inside a
# compiled layer without a warning (fused.layers asks for the model's device before compiling).
_CAPABLE: dict[int, bool] = {}


def _takes_pdl(index: int) -> bool:
    if index not in _CAPABLE:
        _CAPABLE[index] = torch.cuda.get_device_capability(index) >= FROM_CAPABILITY
    return _CAPABLE[index]


def enabled() -> bool:
    """The `pdl` setting of the forward being compiled, captured or run (settings.current())."""
    return settings.current().pdl


def active(device) -> bool:
    """Whether kernels on `device` launch with PDL: the setting is on, triton has the gdc functions, and the
    device is a CUDA GPU of compute capability 9.0 or later. Read at each call (under settings.use)."""
    if not (enabled() and HAS_GDC and device.type == "cuda"):
        return False
    return _takes_pdl(device.index if device.index is not None else torch.cuda.current_device())


def launch_options(device) -> dict:
    """What a Triton launch on `device` passes for PDL: {"launch_pdl": True} where `active`, else nothing."""
    return {"launch_pdl": True} if active(device) and not torch.compiler.is_compiling() else {}
