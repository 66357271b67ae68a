"""Serve the constants a step builds on the host from a cache filled outside any capture.

Two patterns copy host data to the device inside a step, which a capture refuses:
- a tensor built from Python data on the device, `torch.tensor(0.0, device=...)` (transformers 5.17's
  eager mask does it at the model root, so the whole step would otherwise run eagerly);
- a small CPU tensor moved to the device, `torch.tensor(1e-5).to(x.device)` or rotary frequencies
  computed on the CPU every step (gemma3n, phimoe).
When the data is the same every step, the result is a constant: make it once, during a warm-up, and hand
the same tensor to every later call from the same line with the same data. Data that changes between
steps misses the cache, so it is still built, and still flagged by hazard detection.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from accelerate_graph.common.source_location import caller_location
from accelerate_graph.compat.torch_internals import dispatch_modes_disabled, tensor_version, torch_function_disabled

_BUILDERS = (torch.tensor, torch.as_tensor)
_MOVES = (torch.Tensor.to, torch.Tensor.cuda)
_MAX_ELEMENTS = 64  # Python data: small constants only, larger host data is rarely constant
_MAX_MOVED_ELEMENTS = 1 << 16  # CPU tensors: compared element by element on each call


def _plain_data(data) -> bool:
    """Python numbers (or short nested lists/tuples of them): data whose repr is its value."""
    if isinstance(data, (bool, int, float)):
        return True
    if not isinstance(data, (list, tuple)):
        return False
    pending, count = list(data), 0
    while pending:
        item = pending.pop()
        if isinstance(item, (list, tuple)):
            pending.extend(item)
        elif not isinstance(item, (bool, int, float)):
            return False
        count += 1
        if count > _MAX_ELEMENTS:
            return False
    return True


def _describe(value) -> str:
    """An argument as a cache key: tensors by kind (a `.to(other)` target), everything else by repr."""
    if isinstance(value, torch.Tensor):
        return f"tensor({value.dtype}, {value.device})"
    return repr(value)


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Compare two CPU tensors unseen by the modes around us: hazard detection would take this
    bookkeeping for the model's own `torch.equal` (a host sync), and the emulation would refuse it."""
    with torch_function_disabled(), dispatch_modes_disabled():
        return bool(torch.equal(a, b))


class HostConstants(TorchFunctionMode):
    """Active around each forward of a session whose plan chose this fix."""

    def __init__(self):
        super().__init__()
        self._built: dict[tuple, tuple[torch.Tensor, int]] = {}  # key -> (tensor, its version when made)
        self._moved: dict[tuple, tuple[torch.Tensor, torch.Tensor, int]] = {}  # key -> (source copy, result, version)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _BUILDERS and len(args) == 1 and _plain_data(args[0]):
            return self._build(func, args, kwargs)
        if func in _MOVES and args and self._movable(args[0]):
            return self._move(func, args, kwargs)
        return func(*args, **kwargs)

    def _key(self, args, kwargs) -> tuple:
        return (caller_location(), *map(_describe, args), *sorted((k, _describe(v)) for k, v in kwargs.items()))

    def _build(self, func, args, kwargs):
        key = self._key(args, kwargs)
        cached = self._built.get(key)
        if cached is not None and tensor_version(cached[0]) == cached[1]:
            return cached[0]
        # a miss, or the model wrote into the tensor it was given: build a fresh one (never inside a
        # capture: detection sees this build as a host-data hazard and puts it in an eager island)
        tensor = func(*args, **kwargs)
        self._built[key] = (tensor, tensor_version(tensor))
        return tensor

    @staticmethod
    def _movable(tensor) -> bool:
        return (
            isinstance(tensor, torch.Tensor)
            and tensor.device.type == "cpu"
            and not tensor.requires_grad
            and tensor.numel() <= _MAX_MOVED_ELEMENTS
        )

    def _move(self, func, args, kwargs):
        source = args[0]
        key = (*self._key(args[1:], kwargs), tuple(source.shape), source.dtype)
        cached = self._moved.get(key)
        if cached is not None and tensor_version(cached[1]) == cached[2] and _same_values(cached[0], source):
            return cached[1]
        result = func(*args, **kwargs)
        if isinstance(result, torch.Tensor) and result.device != source.device:  # a real host-to-device copy
            with torch_function_disabled(), dispatch_modes_disabled():
                kept = source.clone()
            self._moved[key] = (kept, result, tensor_version(result))
        return result
