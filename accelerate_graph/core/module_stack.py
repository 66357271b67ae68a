"""Which submodule is running right now: for naming the module behind a hazard or a failed capture."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from accelerate_graph.compat.torch_internals import pytree_leaves


class ModuleStack:
    """Tracks the innermost running submodule with global forward hooks."""

    def __init__(self, model: torch.nn.Module):
        self.names = {id(m): name for name, m in model.named_modules()}
        self.classes = {name: type(m).__name__ for name, m in model.named_modules()}
        self.stack: list[str] = []
        self.python_outputs: set[str] = set()  # modules that returned Python numbers (e.g. a host-read list)

    @contextmanager
    def active(self) -> Iterator[None]:
        def push(module, args):
            self.stack.append(self.names.get(id(module), "?"))

        def pop(module, args, output):
            if self.stack:
                name = self.stack.pop()
                leaves = pytree_leaves(output)
                if any(isinstance(leaf, (int, float)) and not isinstance(leaf, bool) for leaf in leaves):
                    self.python_outputs.add(name)

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

    def call_stack(self) -> tuple[str, ...]:
        """The modules whose forward is running, outermost first."""
        return tuple(name for name in self.stack if name != "?")

    def island_for(self, stack: tuple[str, ...]) -> str:
        """The module to run eagerly for a hazard raised under `stack`: the innermost running module whose
        output is all tensors (a Python number handed to the next graph segment would be frozen there).
        Only running forwards count: a hook on a module reached through another method never fires."""
        for path in reversed(stack):
            if path not in self.python_outputs:
                return path
        return ""

    def describe_current(self) -> str:
        path = self.current()
        return f"{path or '<model>'} ({self.classes.get(path, '?')})"
