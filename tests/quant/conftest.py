"""The FP8 tests' models: the trained tiny llama of tests/assets (peaked distributions, where FP8 rounding
shows), and an FP8 checkpoint made from it."""

from __future__ import annotations

from pathlib import Path

import pytest
from fp8_checkpoints import write_fp8_checkpoint

TRAINED_TINY = Path(__file__).resolve().parents[1] / "assets" / "trained-tiny-llama"


@pytest.fixture(scope="session")
def trained_tiny() -> str:
    return str(TRAINED_TINY)


@pytest.fixture(scope="session")
def fp8_checkpoint_dir(tmp_path_factory) -> str:
    return str(write_fp8_checkpoint(str(TRAINED_TINY), tmp_path_factory.mktemp("trained-tiny-fp8") / "checkpoint"))


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here on one torch thread (tests/conftest.py)."""
