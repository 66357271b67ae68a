"""Eager islands inside a captured step: submodules that run as Python between graph segments.

At capture, a forward pre-hook on each island ends the current segment and a forward hook starts the
next one; the island's call (its argument tensors, which the segment before it writes, and its
output tensors, which the segment after it reads) is kept. At replay the island is called again on
the same tensors and its new outputs are copied into the kept ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from accelerate_graph.compat.torch_internals import pytree_leaves


def tensor_leaves(value) -> list[torch.Tensor]:
    return [leaf for leaf in pytree_leaves(value) if isinstance(leaf, torch.Tensor)]


@dataclass
class IslandCall:
    module: torch.nn.Module
    args: tuple
    kwargs: dict
    outputs: list[torch.Tensor] = field(default_factory=list)

    def run(self) -> None:
        with torch.no_grad():
            result = self.module(*self.args, **self.kwargs)
        for kept, new in zip(self.outputs, tensor_leaves(result)):
            if kept is not new:
                kept.copy_(new)


@contextmanager
def island_hooks(
    islands: Sequence[torch.nn.Module],
    on_enter: Callable[[IslandCall], None],
    on_exit: Callable[[IslandCall], None],
) -> Iterator[None]:
    """Call `on_enter` before and `on_exit` after each island's forward while the context is open."""
    current: list[IslandCall] = []

    def pre(module, args, kwargs):
        call = IslandCall(module, args, kwargs)
        current.append(call)
        on_enter(call)

    def post(module, args, kwargs, output):
        call = current.pop()
        call.outputs = tensor_leaves(output)
        on_exit(call)

    handles = []
    for module in islands:
        handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(module.register_forward_hook(post, with_kwargs=True))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
