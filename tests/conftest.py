"""Shared fixtures; the tiny model builders live in tiny_models.py."""

from __future__ import annotations

import pytest
from tiny_models import save_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """model_type -> a saved tiny model folder (built once per session)."""
    made: dict[str, str] = {}

    def get(model_type: str) -> str:
        if model_type not in made:
            made[model_type] = save_tiny_model(model_type, tmp_path_factory.mktemp(f"tiny-{model_type}"))
        return made[model_type]

    return get
