"""The zoo's representative subset with real CUDA graphs, one child process per type (run on the device).

The full matrix on the GPU is benchmarks/zoo_gpu.sh; this is the subset tests/test_zoo.py runs under the
CPU emulation, so the two can be held against each other: same plans, no failures.
"""

import pytest
import torch

from accelerate_graph.zoo.report import hazard_disagreements
from accelerate_graph.zoo.run import ZooResult, run_zoo

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# The same subset as tests/test_zoo.py: GQA, tied embeddings, a crossed sliding window, MoE, a host-sync
# hazard (mpt: graph segments; falcon's host data up to transformers 5.24), ALiBi (bloom), partial rotary (phi).
SUBSET = ["llama", "qwen2", "gpt2", "mistral", "mixtral", "qwen2_moe", "falcon", "mpt", "opt", "bloom", "phi", "gemma"]
NOT_GRAPHED = {"bloom": ("eager", "no-static-cache")}  # see tests/test_zoo.py


def _failure(result: ZooResult) -> str | None:
    if result.status in NOT_GRAPHED.get(result.model_type, ()):
        return None if result.reason else f"{result.model_type}: {result.status} with no reason given"
    if result.status not in ("full", "piecewise"):
        return f"{result.model_type}: {result.status} at {result.stage} ({result.reason})"
    return None if result.verify_passed else f"{result.model_type}: verify failed"


def test_subset_verifies_with_cuda_graphs_and_plans_like_the_emulation():
    """One test, so one pytest worker runs the subset once (its children use the GPU four at a time)."""
    on_cuda = run_zoo(SUBSET, "cuda", isolate=True, workers=4, timeout=90)
    assert sorted(r.model_type for r in on_cuda) == sorted(SUBSET)
    assert [line for line in map(_failure, on_cuda) if line] == []
    assert hazard_disagreements(on_cuda, run_zoo(SUBSET, "cpu")) == []
