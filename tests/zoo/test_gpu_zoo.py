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


@pytest.fixture(scope="module")
def on_cuda() -> dict[str, ZooResult]:
    results = run_zoo(SUBSET, "cuda", isolate=True, workers=4, timeout=90)
    return {r.model_type: r for r in results}


@pytest.mark.parametrize("model_type", SUBSET)
def test_subset_verifies_with_cuda_graphs(on_cuda, model_type):
    result = on_cuda[model_type]
    if result.status in NOT_GRAPHED.get(model_type, ()):
        assert result.reason
        return
    assert result.status in ("full", "piecewise"), f"{model_type}: {result.status} at {result.stage} ({result.reason})"
    assert result.verify_passed


def test_cpu_emulation_plans_like_cuda(on_cuda):
    on_cpu = run_zoo(SUBSET, "cpu")
    assert hazard_disagreements(list(on_cuda.values()), on_cpu) == []
