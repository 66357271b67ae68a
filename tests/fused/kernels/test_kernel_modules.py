"""What every module of Triton code keeps to, for torch.compile's sake."""

import importlib
import importlib.util
import pkgutil
from pathlib import Path

import pytest

import accelerate_graph

pytest.importorskip("triton")


def kernel_modules():
    """The project's modules that define Triton functions (read as text first: importing every module would
    pull in optional packages)."""
    for info in pkgutil.walk_packages(accelerate_graph.__path__, "accelerate_graph."):
        spec = importlib.util.find_spec(info.name)
        if not info.ispkg and "@triton.jit" in Path(spec.origin).read_text():
            yield importlib.import_module(info.name)


def is_triton_function(value) -> bool:
    """@triton.jit's object: a JITFunction, or under the interpreter its own wrapper."""
    return type(value).__module__.startswith("triton.runtime") and callable(getattr(value, "fn", None))


def test_every_triton_helper_is_bound_under_the_name_it_was_defined_with():
    """torch.compile copies a user Triton kernel's helpers into its own code by their `def` names: a helper
    reached through an alias (`_round = _round_by_cast`) is then an undefined name, and the compiled step
    fails to build on the GPU."""
    modules = list(kernel_modules())
    assert {m.__name__.rsplit(".", 1)[1] for m in modules} >= {"skinny_kernels", "fp8_kernels", "decode_attention"}
    aliased = [
        f"{module.__name__}.{name} is {value.fn.__name__}"
        for module in modules
        for name, value in vars(module).items()
        if is_triton_function(value) and value.fn.__name__ != name
    ]
    assert not aliased, aliased
