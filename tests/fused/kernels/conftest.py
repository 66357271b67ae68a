"""Without CUDA the skinny-matmul kernels run on the CPU under the Triton interpreter, which Triton picks
when a function is decorated: its own library functions when triton is first imported, ours when
skinny_kernels is. So the switch goes on here if triton is not imported yet; when it already is (the
whole suite), test_skinny_matmul runs its interpreter tests in a fresh process with the switch on.
Only without CUDA: on a GPU machine nothing changes."""

import importlib
import os
import sys

import torch

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
