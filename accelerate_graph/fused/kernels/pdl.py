"""Programmatic dependent launch (PDL, Hopper and later) for our own kernels: the skinny matmuls and the
decode attention, CUGRAPH_ACCEL_PDL=1 (off by default until measured on the H200).

A kernel launched with PDL may start while the kernel before it still runs: it does what does not depend
on that kernel (the skinny matmuls ask L2 for their first block of weights), then `gdc_wait()` until that
kernel is complete and its writes are visible, then `gdc_launch_dependents()` so that the next kernel may
start in turn (its programs wait for all of ours). A kernel launched without PDL after one of ours waits
for it as usual, and one of ours after a kernel that never calls launch_dependents simply starts when
that one ends. Inside a CUDA graph the launches keep their attribute (CUDA 12.3+).
"""

import os

import torch

# CUGRAPH_ACCEL_SKINNY_PDL: this switch's name while only the skinny matmuls had it
ENABLED = os.environ.get("CUGRAPH_ACCEL_PDL", os.environ.get("CUGRAPH_ACCEL_SKINNY_PDL", "0")) == "1"

try:  # triton >= 3.4
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    HAS_GDC = True
except ImportError:
    gdc_wait = gdc_launch_dependents = None
    HAS_GDC = False


def launch_options(device) -> dict:
    """What a Triton launch on `device` passes for PDL: {"launch_pdl": True} when it is on and the device
    takes it, else nothing. Read at each launch, so a benchmark can switch ENABLED between ways."""
    on = ENABLED and HAS_GDC and device.type == "cuda" and not torch.compiler.is_compiling()
    return {"launch_pdl": True} if on else {}
