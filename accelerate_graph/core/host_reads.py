"""Reads of device data by the host: the aten ops a capture refuses, and the Python-level reads
(`.tolist()`, `.item()`, `int(t)`, `bool(t)`, ...) that never reach aten on the CPU.

Host reads that never reach aten on the CPU: `.tolist()`, `.item()`, `int(t)`, `bool(t)`, ...

On a GPU each is a device-to-host copy, which a capture refuses; on the CPU they read memory
directly, so a dispatch mode never sees them and a recorded step would silently freeze the Python
values they returned. This function mode sees them on every device.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.overrides import TorchFunctionMode

aten = torch.ops.aten

# Ops that need the host to read device data, or whose output shape depends on data: a CUDA graph
# capture rejects each of them, so the emulation does too.
HOST_SYNC_OPS = {
    aten._local_scalar_dense.default: ".item() / .tolist() / int(tensor): reads a device value on the host",
    aten.is_nonzero.default: "bool(tensor): reads a device value on the host",
    aten.equal.default: "torch.equal: returns a Python bool",
    aten.nonzero.default: "nonzero / boolean-mask indexing: output shape depends on the data",
    aten.masked_select.default: "masked_select: output shape depends on the data",
    aten._unique2.default: "unique: output shape depends on the data",
    aten.unique_consecutive.default: "unique_consecutive: output shape depends on the data",
}


HOST_READS = {
    torch.Tensor.tolist: ".tolist()",
    torch.Tensor.item: ".item()",
    torch.Tensor.__int__: "int(tensor)",
    torch.Tensor.__float__: "float(tensor)",
    torch.Tensor.__bool__: "bool(tensor)",
    torch.Tensor.__index__: "a tensor used as a Python index",
    torch.Tensor.numpy: ".numpy()",
}


class HostReadMode(TorchFunctionMode):
    """Calls `on_read(description)` before each host read; `on_read` may raise to refuse it."""

    def __init__(self, on_read: Callable[[str], None]):
        super().__init__()
        self.on_read = on_read

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in HOST_READS:
            self.on_read(HOST_READS[func])
        return func(*args, **(kwargs or {}))
