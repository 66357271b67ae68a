"""The FP8 tests' models: the trained tiny llama of tests/assets (peaked distributions, where FP8 rounding
shows), and an FP8 checkpoint made from it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from fp8_checkpoints import write_fp8_checkpoint

TRAINED_TINY = Path(__file__).resolve().parents[1] / "assets" / "trained-tiny-llama"


@pytest.fixture(scope="session")
def trained_tiny() -> str:
    return str(TRAINED_TINY)


@pytest.fixture(scope="session")
def fp8_checkpoint_dir(tmp_path_factory) -> str:
    return str(write_fp8_checkpoint(str(TRAINED_TINY), tmp_path_factory.mktemp("trained-tiny-fp8")))


@pytest.fixture(autouse=True)
def one_thread():
    """Two torch threads on a shared two-core machine spin against each other."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)
