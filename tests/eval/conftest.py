"""The model `eval` is tested on: a folder with weights and a tokenizer, as users give it: the trained tiny
llama of tests/assets (trained weights give peaked next-token distributions, where bf16 rounding, a 1% logit
scale and a skewed rotary angle show in KL), scored on held-out text of its corpus.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from accelerate_graph.training.save import HELD_OUT_SAMPLE

TRAINED_TINY = Path(__file__).resolve().parents[1] / "assets" / "trained-tiny-llama"


@pytest.fixture(scope="session")
def eval_model_dir() -> str:
    """The trained tiny llama committed with the tests; EVAL_MODEL_DIR points the GPU tests at a larger trained
    folder (benchmarks/gpu.sh's `trained` suite)."""
    return os.environ.get("EVAL_MODEL_DIR") or str(TRAINED_TINY)


@pytest.fixture(scope="session")
def eval_text(eval_model_dir) -> str:
    """Held-out text of the model's training corpus: text it never saw, in the language it learned."""
    return str(Path(eval_model_dir) / HELD_OUT_SAMPLE)


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here on one torch thread (tests/conftest.py)."""
