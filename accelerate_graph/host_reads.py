"""Host reads that never reach aten on the CPU: `.tolist()`, `.item()`, `int(t)`, `bool(t)`, ...

On a GPU each is a device-to-host copy, which a capture refuses; on the CPU they read memory
directly, so a dispatch mode never sees them and a recorded step would silently freeze the Python
values they returned. This function mode sees them on every device.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.overrides import TorchFunctionMode

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
