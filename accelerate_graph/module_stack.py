"""Which submodule is running right now: for naming the module behind a hazard or a failed capture."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


class ModuleStack:
    """Tracks the innermost running submodule with global forward hooks."""

    def __init__(self, model: torch.nn.Module):
        self.names = {id(m): name for name, m in model.named_modules()}
        self.classes = {name: type(m).__name__ for name, m in model.named_modules()}
        self.stack: list[str] = []

    @contextmanager
    def active(self) -> Iterator[None]:
        def push(module, args):
            self.stack.append(self.names.get(id(module), "?"))

        def pop(module, args, output):
            if self.stack:
                self.stack.pop()

        self.stack.clear()  # kept after an exception: it names the module that failed
        pre = torch.nn.modules.module.register_module_forward_pre_hook(push)
        post = torch.nn.modules.module.register_module_forward_hook(pop)
        try:
            yield
        finally:
            pre.remove()
            post.remove()

    def current(self) -> str:
        known = [name for name in self.stack if name != "?"]
        return known[-1] if known else ""

    def describe_current(self) -> str:
        path = self.current()
        return f"{path or '<model>'} ({self.classes.get(path, '?')})"
