"""Without CUDA the skinny-matmul kernels run on the CPU under the Triton interpreter, which Triton picks
when a function is decorated: its own library functions when triton is first imported, ours when
skinny_kernels is. So the switch goes on here if triton is not imported yet; when it already is (the
whole suite), test_skinny_matmul runs its interpreter tests in a fresh process with the switch on.
Only without CUDA: on a GPU machine nothing changes."""

import importlib
import os
import sys

import pytest
import torch

# "i/n" in a child pytest's environment (test_skinny_matmul.run_interpreted_in_a_fresh_process): it runs every
# n-th of its selected tests from the i-th, so n children share the tests between pytest-xdist's workers.
SHARD = "INTERPRETER_TESTS_SHARD"

if not torch.cuda.is_available() and "triton" not in sys.modules:
    os.environ["TRITON_INTERPRET"] = "1"
if os.environ.get("TRITON_INTERPRET") == "1":
    try:
        import accelerate_graph.fused.kernels.skinny_kernels as kernels
    except ImportError:
        pass  # no triton: the tests that need it skip
    else:
        if not kernels.INTERPRETED:  # imported earlier in this process, before the switch
            importlib.reload(kernels)


@pytest.hookimpl(trylast=True)  # after `-m` and `-k` deselected
def pytest_collection_modifyitems(config, items):
    shard = os.environ.get(SHARD)
    if not shard:
        return
    index, count = (int(n) for n in shard.split("/"))
    config.hook.pytest_deselected(items=[item for n, item in enumerate(items) if n % count != index])
    items[:] = items[index::count]
